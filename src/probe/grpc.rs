//! gRPC probes: the standard health service, `grpc.health.v1.Health/Check`, plaintext over
//! TCP on atoll's own gRPC layer. SERVING is success; anything else, including Unimplemented,
//! a timeout or a refused connection, is failure (kubelet's pkg/probe/grpc).

use super::handlers::Attempt;
use crate::cri::grpc::Channel;
use std::time::Duration;

/// grpc.health.v1.HealthCheckRequest.
#[derive(Clone, PartialEq, prost::Message)]
pub struct HealthCheckRequest {
    #[prost(string, tag = "1")]
    pub service: String,
}

/// grpc.health.v1.HealthCheckResponse.
#[derive(Clone, PartialEq, prost::Message)]
pub struct HealthCheckResponse {
    #[prost(int32, tag = "1")]
    pub status: i32,
}

/// HealthCheckResponse.ServingStatus.SERVING.
pub const SERVING: i32 = 1;

fn status_name(s: i32) -> &'static str {
    match s {
        0 => "UNKNOWN",
        1 => "SERVING",
        2 => "NOT_SERVING",
        3 => "SERVICE_UNKNOWN",
        _ => "an unknown status",
    }
}

/// One health check of `service` at `host:port`; dial and call share `timeout`.
pub async fn check(host: &str, port: u16, service: &str, timeout: Duration) -> Attempt {
    let addr = if host.contains(':') { format!("[{host}]:{port}") } else { format!("{host}:{port}") };
    let channel = Channel::tcp(&addr, super::http::USER_AGENT, timeout);
    let req = HealthCheckRequest { service: service.to_string() };
    match channel.unary::<_, HealthCheckResponse>("/grpc.health.v1.Health/Check", &req, Some(timeout)).await {
        Ok(r) if r.status == SERVING => Attempt::Success,
        Ok(r) => Attempt::Failure(format!("service unhealthy (responded with {:?})", status_name(r.status))),
        Err(e) => Attempt::Failure(format!("health check to {addr} failed: {e}")),
    }
}
