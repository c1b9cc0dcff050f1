//! Lifecycle hooks (postStart, preStop) with kubelet's semantics.
//!
//! exec runs through CRI ExecSync and fails on a non-zero exit; httpGet fails only on a
//! transport error (the status code is not checked), TLS unverified, through the probes' own
//! HTTP client on the event loop; tcpSocket connects; sleep waits. postStart runs right after StartContainer; preStop runs before StopContainer within
//! the grace period, and whatever it leaves of the grace goes to StopContainer (at least 2 s).

use super::worker::Shared;
use crate::cri::api::ExecSyncRequest;
use crate::pod::types::{Container, IntOrString, LifecycleHandler};
use std::time::Duration;

/// Runs `handler` for container `id`, giving up after `budget` (if any).
pub async fn run(
    shared: &Shared,
    c: &Container,
    handler: &LifecycleHandler,
    id: &str,
    pod_ip: &str,
    budget: Option<Duration>,
) -> Result<(), String> {
    if let Some(exec) = &handler.exec {
        let req = ExecSyncRequest { container_id: id.into(), cmd: exec.command.clone(), timeout: 0 };
        let out = shared.cri.exec_sync_with_deadline(req, budget).await.map_err(|e| e.to_string())?;
        if out.exit_code != 0 {
            let stderr = String::from_utf8_lossy(&out.stderr);
            return Err(format!("command {:?} exited with {}: {}", exec.command, out.exit_code, stderr.trim()));
        }
        return Ok(());
    }
    if let Some(sleep) = &handler.sleep {
        let want = crate::deadline::secs(sleep.seconds);
        smol::Timer::after(budget.map_or(want, |b| want.min(b))).await;
        return Ok(());
    }
    let host_or = |host: &Option<String>| -> String {
        match host.as_deref().filter(|h| !h.is_empty()) {
            Some(h) => h.to_string(),
            None if !pod_ip.is_empty() => pod_ip.to_string(),
            None => "127.0.0.1".to_string(),
        }
    };
    let timeout = budget.unwrap_or(Duration::from_secs(30));
    if let Some(get) = &handler.http_get {
        let path = get.path.clone().unwrap_or_else(|| "/".into());
        let target = crate::probe::http::Target {
            scheme: get.scheme.as_deref().unwrap_or("HTTP").to_ascii_lowercase(),
            host: host_or(&get.host),
            port: port_number(&get.port, c)?,
            path: if path.starts_with('/') { path } else { format!("/{path}") },
            headers: get.http_headers.iter().map(|h| (h.name.clone(), h.value.clone())).collect(),
            user_agent: crate::probe::http::LIFECYCLE_USER_AGENT,
        };
        return crate::probe::http::get_once(&target, timeout).await.map(|_| ());
    }
    if let Some(tcp) = &handler.tcp_socket {
        let port = port_number(&tcp.port, c)?;
        let addr = format!("{}:{port}", host_or(&tcp.host));
        let connect = smol::net::TcpStream::connect(addr.clone());
        return match crate::deadline::with_deadline(timeout, connect).await {
            Some(Ok(_)) => Ok(()),
            Some(Err(e)) => Err(format!("connecting to {addr}: {e}")),
            None => Err(format!("connecting to {addr}: timed out")),
        };
    }
    Err("the hook has no handler".into())
}

/// A port by number or by the name of one of the container's ports.
pub fn port_number(port: &IntOrString, c: &Container) -> Result<u16, String> {
    match port {
        IntOrString::Int(n) => u16::try_from(*n).map_err(|_| format!("port {n} is out of range")),
        IntOrString::Str(s) => {
            if let Ok(n) = s.parse::<u16>() {
                return Ok(n);
            }
            c.ports
                .iter()
                .find(|p| p.name.as_deref() == Some(s))
                .and_then(|p| u16::try_from(p.container_port).ok())
                .ok_or_else(|| format!("no port named {s:?}"))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ports_by_number_numeric_string_or_name() {
        let c: Container =
            serde_json::from_str(r#"{"name":"c","image":"x","ports":[{"name":"web","containerPort":8080}]}"#).unwrap();
        assert_eq!(port_number(&IntOrString::Int(80), &c), Ok(80));
        assert_eq!(port_number(&IntOrString::Str("81".into()), &c), Ok(81));
        assert_eq!(port_number(&IntOrString::Str("web".into()), &c), Ok(8080));
        assert!(port_number(&IntOrString::Str("nope".into()), &c).is_err());
        assert!(port_number(&IntOrString::Int(70000), &c).is_err());
    }
}
