//! One probe attempt: exec (CRI ExecSync), tcpSocket, httpGet and grpc, with kubelet's rules
//! (pkg/probe). An attempt ends in success, failure, or an error; errors (the container went
//! away under the exec, a port name that does not resolve) are not counted by the prober.

use crate::cri::api::ExecSyncRequest;
use crate::cri::Cri;
use crate::pod::types::{Container, Probe};
use std::time::Duration;

/// kubelet keeps this much of an exec probe's output.
const OUTPUT_LIMIT: usize = 10 * 1024;

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Attempt {
    Success,
    /// Counted as a success (an httpGet redirect to another host).
    Warning(String),
    Failure(String),
    /// Not counted.
    Error(String),
}

/// Where a probe without a host goes: the pod IP (the node IP for hostNetwork pods).
pub struct Where<'a> {
    pub container_id: &'a str,
    pub pod_ip: &'a str,
}

pub fn timeout_of(p: &Probe) -> Duration {
    crate::deadline::secs(p.timeout_seconds.filter(|t| *t > 0).unwrap_or(1))
}

/// Runs one attempt of `probe` for container `c`.
pub async fn attempt(cri: &Cri, c: &Container, probe: &Probe, at: &Where<'_>) -> Attempt {
    let timeout = timeout_of(probe);
    let host_or = |h: &Option<String>| match h.as_deref().filter(|h| !h.is_empty()) {
        Some(h) => h.to_string(),
        None if !at.pod_ip.is_empty() => at.pod_ip.to_string(),
        None => "127.0.0.1".to_string(),
    };
    if let Some(exec) = &probe.exec {
        return exec_attempt(cri, c, &exec.command, at.container_id, timeout).await;
    }
    if let Some(get) = &probe.http_get {
        let port = match crate::runtime::hooks::port_number(&get.port, c) {
            Ok(p) if p > 0 => p,
            Ok(p) => return Attempt::Error(format!("port {p} is out of range")),
            Err(e) => return Attempt::Error(e),
        };
        let path = get.path.clone().unwrap_or_default();
        let target = super::http::Target {
            scheme: get.scheme.as_deref().unwrap_or("HTTP").to_ascii_lowercase(),
            host: host_or(&get.host),
            port,
            path: if path.starts_with('/') { path } else { format!("/{path}") },
            headers: get.http_headers.iter().map(|h| (h.name.clone(), h.value.clone())).collect(),
            user_agent: super::http::USER_AGENT,
        };
        return match super::http::probe(&target, timeout).await {
            super::http::Outcome::Success(_) => Attempt::Success,
            super::http::Outcome::Warning(w) => Attempt::Warning(w),
            super::http::Outcome::Failure(f) => Attempt::Failure(f),
        };
    }
    if let Some(tcp) = &probe.tcp_socket {
        let port = match crate::runtime::hooks::port_number(&tcp.port, c) {
            Ok(p) if p > 0 => p,
            Ok(p) => return Attempt::Error(format!("port {p} is out of range")),
            Err(e) => return Attempt::Error(e),
        };
        let host = host_or(&tcp.host);
        return match crate::deadline::with_deadline(timeout, smol::net::TcpStream::connect((host.as_str(), port))).await
        {
            Some(Ok(_)) => Attempt::Success,
            Some(Err(e)) => Attempt::Failure(format!("dial tcp {host}:{port}: {e}")),
            None => Attempt::Failure(format!("dial tcp {host}:{port}: i/o timeout")),
        };
    }
    if let Some(g) = &probe.grpc {
        let Ok(port) = u16::try_from(g.port) else {
            return Attempt::Error(format!("port {} is out of range", g.port));
        };
        return super::grpc::check(&host_or(&None), port, g.service.as_deref().unwrap_or(""), timeout).await;
    }
    Attempt::Error("the probe has no handler".into())
}

/// The exec command with `$(VAR)` expanded from the container's static `env[].value`s only.
pub fn exec_command(c: &Container, command: &[String]) -> Vec<String> {
    let lookup = |name: &str| c.env.iter().rev().find(|e| e.name == name).and_then(|e| e.value.clone());
    command.iter().map(|a| crate::runtime::container::expand(a, &lookup)).collect()
}

async fn exec_attempt(cri: &Cri, c: &Container, command: &[String], id: &str, timeout: Duration) -> Attempt {
    let cmd = exec_command(c, command);
    let req = ExecSyncRequest { container_id: id.into(), cmd: cmd.clone(), timeout: timeout.as_secs() as i64 };
    // The runtime enforces the timeout; the local deadline only guards against a runtime that
    // does not answer (kubelet allows timeout + 2 minutes).
    match cri.exec_sync_with_deadline(req, Some(timeout.saturating_add(Duration::from_secs(120)))).await {
        Ok(out) if out.exit_code == 0 => Attempt::Success,
        Ok(out) => {
            let mut output = out.stdout;
            output.extend_from_slice(&out.stderr);
            output.truncate(OUTPUT_LIMIT);
            Attempt::Failure(format!(
                "command {cmd:?} exited with {}: {}",
                out.exit_code,
                String::from_utf8_lossy(&output).trim()
            ))
        }
        Err(e) if timed_out(&e) => Attempt::Failure(format!("command {cmd:?} timed out after {timeout:?}")),
        Err(e) => Attempt::Error(e.to_string()),
    }
}

/// Whether an ExecSync error is the runtime's timeout (containerd reports it as
/// DeadlineExceeded, or as Unknown with "timeout ... exceeded").
fn timed_out(e: &crate::cri::Status) -> bool {
    e.code == crate::cri::Code::DeadlineExceeded || (e.message.contains("timeout") && e.message.contains("exceeded"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exec_commands_expand_static_env_only() {
        let c: Container = serde_json::from_str(
            r#"{"name":"c","image":"x","env":[{"name":"X","value":"a"},{"name":"P","valueFrom":{"fieldRef":{"fieldPath":"metadata.name"}}}]}"#,
        )
        .unwrap();
        let cmd = exec_command(&c, &["sh".into(), "-c".into(), "test $(X) = a && echo $(P) $$(X)".into()]);
        assert_eq!(cmd[2], "test a = a && echo $(P) $(X)");
    }

    #[test]
    fn the_timeout_defaults_to_one_second() {
        assert_eq!(timeout_of(&Probe::default()), Duration::from_secs(1));
        let p = Probe { timeout_seconds: Some(5), ..Default::default() };
        assert_eq!(timeout_of(&p), Duration::from_secs(5));
    }

    #[test]
    fn tcp_probes_connect_or_fail() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port();
        let c: Container = serde_json::from_str(&format!(
            r#"{{"name":"c","image":"x","ports":[{{"name":"svc","containerPort":{port}}}]}}"#
        ))
        .unwrap();
        let cri = Cri::new(&crate::cri::Endpoint::parse("unix:///nonexistent.sock").unwrap());
        let at = Where { container_id: "x", pod_ip: "127.0.0.1" };
        let by_name: Probe = serde_json::from_str(r#"{"tcpSocket":{"port":"svc"}}"#).unwrap();
        assert_eq!(smol::block_on(attempt(&cri, &c, &by_name, &at)), Attempt::Success);
        drop(l);
        assert!(matches!(smol::block_on(attempt(&cri, &c, &by_name, &at)), Attempt::Failure(_)));
        let unknown: Probe = serde_json::from_str(r#"{"tcpSocket":{"port":"nope"}}"#).unwrap();
        assert!(matches!(smol::block_on(attempt(&cri, &c, &unknown, &at)), Attempt::Error(_)));
    }
}
