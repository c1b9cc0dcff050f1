//! gRPC probes: the standard health service, `grpc.health.v1.Health/Check`, plaintext over
//! TCP on atoll's own gRPC layer. SERVING is success; anything else, including Unimplemented,
//! a timeout or a refused connection, is failure (kubelet's pkg/probe/grpc).

use crate::grpc::Channel;
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
/// The largest reply a probe reads (grpc-go's default receive limit, which kubelet's prober
/// keeps); the CRI channel's 16 MiB is for the runtime, not for a container.
pub const MAX_REPLY: usize = 4 << 20;

fn status_name(s: i32) -> &'static str {
    match s {
        0 => "UNKNOWN",
        1 => "SERVING",
        2 => "NOT_SERVING",
        3 => "SERVICE_UNKNOWN",
        _ => "an unknown status",
    }
}

/// One health check of `service` at `host:port`; dial and call share `timeout`. SERVING is
/// `Ok`; anything else is the failure's message.
pub async fn check(host: &str, port: u16, service: &str, timeout: Duration) -> Result<(), String> {
    let addr = if host.contains(':') { format!("[{host}]:{port}") } else { format!("{host}:{port}") };
    let channel = Channel::tcp(&addr, super::http::USER_AGENT, timeout).with_max_message(MAX_REPLY);
    let req = HealthCheckRequest { service: service.to_string() };
    match channel.unary::<_, HealthCheckResponse>("/grpc.health.v1.Health/Check", &req, Some(timeout)).await {
        Ok(r) if r.status == SERVING => Ok(()),
        Ok(r) => Err(format!("service unhealthy (responded with {:?})", status_name(r.status))),
        Err(e) => Err(format!("health check to {addr} failed: {e}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;
    use prost::Message;
    use tokio_util::compat::FuturesAsyncReadCompatExt;

    /// A gRPC health server on 127.0.0.1 (h2 server side): service "" is SERVING, "down" is
    /// NOT_SERVING, "slow" never answers, anything else is NOT_FOUND as grpc-go's server says.
    fn health_server() -> u16 {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        std::thread::spawn(move || {
            smol::block_on(async {
                let listener = smol::net::TcpListener::try_from(listener).unwrap();
                loop {
                    let (stream, _) = listener.accept().await.unwrap();
                    crate::task::spawn(async move {
                        let Ok(mut conn) = h2::server::handshake(stream.compat()).await else { return };
                        while let Some(Ok((req, mut respond))) = conn.accept().await {
                            crate::task::spawn(async move {
                                assert_eq!(req.uri().path(), "/grpc.health.v1.Health/Check");
                                let ua = req.headers().get("user-agent").cloned();
                                let mut body = req.into_body();
                                let mut data = Vec::new();
                                while let Some(Ok(chunk)) = body.data().await {
                                    let _ = body.flow_control().release_capacity(chunk.len());
                                    data.extend_from_slice(&chunk);
                                }
                                let service = HealthCheckRequest::decode(&data[5..]).unwrap().service;
                                assert!(ua.is_some_and(|u| u.to_str().unwrap().starts_with("kube-probe/")));
                                let resp = http::Response::builder()
                                    .header("content-type", "application/grpc")
                                    .body(())
                                    .unwrap();
                                let (status, code) = match service.as_str() {
                                    "" | "big" => (SERVING, "0"),
                                    "down" => (2, "0"),
                                    "slow" => {
                                        smol::Timer::after(Duration::from_secs(30)).await;
                                        return;
                                    }
                                    _ => (0, "5"),
                                };
                                let mut send = respond.send_response(resp, false).unwrap();
                                if code == "0" {
                                    let mut msg = HealthCheckResponse { status }.encode_to_vec();
                                    if service == "big" {
                                        // SERVING, with 5 MiB of an unknown field 2 after it.
                                        let pad = 5 << 20;
                                        msg.push(0x12);
                                        prost::encoding::encode_varint(pad as u64, &mut msg);
                                        msg.resize(msg.len() + pad, b'x');
                                    }
                                    let mut framed = vec![0];
                                    framed.extend_from_slice(&(msg.len() as u32).to_be_bytes());
                                    framed.extend_from_slice(&msg);
                                    send.send_data(Bytes::from(framed), false).unwrap();
                                }
                                let mut trailers = http::HeaderMap::new();
                                trailers.insert("grpc-status", code.parse().unwrap());
                                send.send_trailers(trailers).unwrap();
                            })
                            .detach();
                        }
                    })
                    .detach();
                }
            })
        });
        port
    }

    #[test]
    fn serving_is_success_and_everything_else_failure() {
        let port = health_server();
        let t = Duration::from_secs(2);
        assert_eq!(smol::block_on(check("127.0.0.1", port, "", t)), Ok(()));
        let down = smol::block_on(check("127.0.0.1", port, "down", t));
        assert!(matches!(&down, Err(m) if m.contains("NOT_SERVING")), "{down:?}");
        let unknown = smol::block_on(check("127.0.0.1", port, "nope", t));
        assert!(matches!(&unknown, Err(m) if m.contains("NotFound")), "{unknown:?}");
        let started = std::time::Instant::now();
        let slow = smol::block_on(check("127.0.0.1", port, "slow", Duration::from_millis(300)));
        assert!(slow.is_err(), "{slow:?}");
        assert!(started.elapsed() < Duration::from_secs(2));
        let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        assert!(smol::block_on(check("127.0.0.1", closed, "", t)).is_err());
        // A 5 MiB reply is over the probe's limit, whatever it says.
        let big = smol::block_on(check("127.0.0.1", port, "big", t));
        assert!(matches!(&big, Err(m) if m.contains("4194304 byte limit")), "{big:?}");
    }
}
