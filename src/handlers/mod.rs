//! The actions a probe or a lifecycle hook performs against a container, with kubelet's rules
//! (pkg/probe, pkg/kubelet/lifecycle): exec through CRI ExecSync, httpGet (`http`, on the event
//! loop, TLS unverified), tcpSocket, grpc (`grpc`, the standard health service) and sleep.
//!
//! A probe [`attempt`] ends in success, failure or an error (errors, such as the container
//! going away under an exec or a port name that does not resolve, are not counted by the
//! prober). A [`lifecycle`] hook fails on a non-zero exec exit or a transport error; an
//! httpGet hook's status code is not looked at (kubelet's rule). Both send a request without
//! a host to the pod's IP (the node's for hostNetwork pods), or 127.0.0.1 without one.

pub mod grpc;
pub mod http;

use crate::cri::api::ExecSyncRequest;
use crate::cri::RuntimeService;
use crate::pod::derived::port_number;
use crate::pod::types::{Container, LifecycleHandler, Probe};
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

/// The container an action is for, and where an action without a host goes.
pub struct Target<'a> {
    pub container_id: &'a str,
    /// The pod's IP (the node's for hostNetwork pods); empty when unknown.
    pub pod_ip: &'a str,
}

impl Target<'_> {
    /// `host`, or the pod's IP, or 127.0.0.1.
    fn host(&self, host: &Option<String>) -> String {
        match host.as_deref().filter(|h| !h.is_empty()) {
            Some(h) => h.to_string(),
            None if !self.pod_ip.is_empty() => self.pod_ip.to_string(),
            None => "127.0.0.1".to_string(),
        }
    }
}

pub fn timeout_of(p: &Probe) -> Duration {
    crate::deadline::secs(p.timeout_seconds.filter(|t| *t > 0).unwrap_or(1))
}

/// Runs one attempt of `probe` for container `c`.
pub async fn attempt<R: RuntimeService>(cri: &R, c: &Container, probe: &Probe, at: &Target<'_>) -> Attempt {
    let timeout = timeout_of(probe);
    let host_or = |h: &Option<String>| at.host(h);
    if let Some(exec) = &probe.exec {
        return exec_attempt(cri, c, &exec.command, at.container_id, timeout).await;
    }
    if let Some(get) = &probe.http_get {
        let port = match port_number(&get.port, c) {
            Ok(p) if p > 0 => p,
            Ok(p) => return Attempt::Error(format!("port {p} is out of range")),
            Err(e) => return Attempt::Error(e.into()),
        };
        let path = get.path.clone().unwrap_or_default();
        let target = http::HttpGet {
            scheme: get.scheme.as_deref().unwrap_or("HTTP").to_ascii_lowercase(),
            host: host_or(&get.host),
            port,
            path: if path.starts_with('/') { path } else { format!("/{path}") },
            headers: get.http_headers.iter().map(|h| (h.name.clone(), h.value.clone())).collect(),
            user_agent: http::USER_AGENT,
        };
        return match http::probe(&target, timeout).await {
            http::HttpResult::Success(_) => Attempt::Success,
            http::HttpResult::Warning(w) => Attempt::Warning(w),
            http::HttpResult::Failure(f) => Attempt::Failure(f),
        };
    }
    if let Some(tcp) = &probe.tcp_socket {
        let port = match port_number(&tcp.port, c) {
            Ok(p) if p > 0 => p,
            Ok(p) => return Attempt::Error(format!("port {p} is out of range")),
            Err(e) => return Attempt::Error(e.into()),
        };
        return match connect(&host_or(&tcp.host), port, timeout).await {
            Ok(()) => Attempt::Success,
            Err(e) => Attempt::Failure(e),
        };
    }
    if let Some(g) = &probe.grpc {
        let Ok(port) = u16::try_from(g.port) else {
            return Attempt::Error(format!("port {} is out of range", g.port));
        };
        return match grpc::check(&host_or(&None), port, g.service.as_deref().unwrap_or(""), timeout).await {
            Ok(()) => Attempt::Success,
            Err(e) => Attempt::Failure(e),
        };
    }
    Attempt::Error("the probe has no handler".into())
}

/// A TCP connection to `host:port` within `timeout`, closed at once.
async fn connect(host: &str, port: u16, timeout: Duration) -> Result<(), String> {
    match crate::deadline::with_deadline(timeout, smol::net::TcpStream::connect((host, port))).await {
        Some(Ok(_)) => Ok(()),
        Some(Err(e)) => Err(format!("dial tcp {host}:{port}: {e}")),
        None => Err(format!("dial tcp {host}:{port}: i/o timeout")),
    }
}

/// Runs a lifecycle hook for container `at.container_id`, giving up after `budget` (if any;
/// 30 s for network actions without one).
pub async fn lifecycle<R: RuntimeService>(
    cri: &R,
    c: &Container,
    handler: &LifecycleHandler,
    at: &Target<'_>,
    budget: Option<Duration>,
) -> Result<(), String> {
    if let Some(exec) = &handler.exec {
        let req = ExecSyncRequest { container_id: at.container_id.into(), cmd: exec.command.clone(), timeout: 0 };
        let out = cri.exec_sync_with_deadline(req, budget).await.map_err(|e| e.to_string())?;
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
    let timeout = budget.unwrap_or(Duration::from_secs(30));
    if let Some(get) = &handler.http_get {
        let path = get.path.clone().unwrap_or_else(|| "/".into());
        let target = http::HttpGet {
            scheme: get.scheme.as_deref().unwrap_or("HTTP").to_ascii_lowercase(),
            host: at.host(&get.host),
            port: port_number(&get.port, c)?,
            path: if path.starts_with('/') { path } else { format!("/{path}") },
            headers: get.http_headers.iter().map(|h| (h.name.clone(), h.value.clone())).collect(),
            user_agent: http::LIFECYCLE_USER_AGENT,
        };
        return http::get_once(&target, timeout).await.map(|_| ());
    }
    if let Some(tcp) = &handler.tcp_socket {
        return connect(&at.host(&tcp.host), port_number(&tcp.port, c)?, timeout).await;
    }
    Err("the hook has no handler".into())
}

/// The exec command with `$(VAR)` expanded from the container's static `env[].value`s only.
pub fn exec_command(c: &Container, command: &[String]) -> Vec<String> {
    let lookup = |name: &str| c.env.iter().rev().find(|e| e.name == name).and_then(|e| e.value.clone());
    command.iter().map(|a| crate::pod::derived::expand(a, &lookup)).collect()
}

async fn exec_attempt<R: RuntimeService>(
    cri: &R,
    c: &Container,
    command: &[String],
    id: &str,
    timeout: Duration,
) -> Attempt {
    let cmd = exec_command(c, command);
    let req = ExecSyncRequest { container_id: id.into(), cmd: cmd.clone(), timeout: timeout.as_secs() as i64 };
    let asked = std::time::Instant::now();
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
        Err(e) if timed_out(e.code, asked.elapsed(), timeout) => {
            Attempt::Failure(format!("command {cmd:?} timed out after {timeout:?}"))
        }
        Err(e) => Attempt::Error(e.to_string()),
    }
}

/// Whether a failed ExecSync was the runtime enforcing the probe's timeout: the code says so
/// (kubelet's rule), or the call failed only once the timeout had passed (containerd 1.6 wraps
/// its timeout as Unknown). Decided by code and clock, never by the message's text.
fn timed_out(code: crate::cri::Code, elapsed: Duration, timeout: Duration) -> bool {
    code == crate::cri::Code::DeadlineExceeded || elapsed >= timeout
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
    fn an_exec_times_out_by_code_or_by_the_clock() {
        use crate::cri::Code;
        let t = Duration::from_secs(1);
        for (code, elapsed, want) in [
            (Code::DeadlineExceeded, Duration::ZERO, true),
            (Code::Unknown, Duration::from_millis(1000), true),
            (Code::Unknown, Duration::from_millis(999), false),
            (Code::NotFound, Duration::from_millis(10), false),
        ] {
            assert_eq!(timed_out(code, elapsed, t), want, "{code:?} after {elapsed:?}");
        }
    }

    #[test]
    fn tcp_probes_connect_or_fail() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port();
        let c: Container = serde_json::from_str(&format!(
            r#"{{"name":"c","image":"x","ports":[{{"name":"svc","containerPort":{port}}}]}}"#
        ))
        .unwrap();
        let cri = crate::cri::Cri::new(&crate::cri::Endpoint::parse("unix:///nonexistent.sock").unwrap());
        let at = Target { container_id: "x", pod_ip: "127.0.0.1" };
        let by_name: Probe = serde_json::from_str(r#"{"tcpSocket":{"port":"svc"}}"#).unwrap();
        assert_eq!(smol::block_on(attempt(&cri, &c, &by_name, &at)), Attempt::Success);
        drop(l);
        assert!(matches!(smol::block_on(attempt(&cri, &c, &by_name, &at)), Attempt::Failure(_)));
        let unknown: Probe = serde_json::from_str(r#"{"tcpSocket":{"port":"nope"}}"#).unwrap();
        assert!(matches!(smol::block_on(attempt(&cri, &c, &unknown, &at)), Attempt::Error(_)));
    }
}
