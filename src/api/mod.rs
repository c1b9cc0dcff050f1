//! The local API: what an operator on site (or a script) needs without kubectl.
//!
//! Served on a unix socket (root only: the directory 0700, the socket 0600), and optionally
//! read-only on loopback (`readOnlyPort`), with `/healthz` on its own listener
//! (`healthzBindAddress:healthzPort`, 127.0.0.1:10248 by default):
//!
//! - `GET /healthz`: `ok` while the sync loop runs, 500 when it has stalled.
//! - `GET /pods`: a v1 PodList with full status (kubelet's read-only `/pods`);
//!   `GET /pods/{namespace}/{name}`: one Pod.
//! - `GET /events`: recent lifecycle events (`?namespace=&pod=` to filter).
//! - `GET /logs/{namespace}/{name}/{container}?follow&previous&tail=N`: container logs, CRI
//!   log format decoded, rotated files included; `follow` streams until the container exits.
//! - `GET /metrics`: Prometheus text format.
//! - `POST /pods/{namespace}/{name}/restart`: stops the pod's containers; they come back per
//!   restartPolicy (socket only).
//!
//! Each listener serves at most [`MAX_CONNECTIONS`] connections at once (more are closed at
//! once), a request head must arrive within 10 s and every write must be taken within
//! [`WRITE_DEADLINE`]: a client that floods, stalls or goes away costs the agent nothing
//! lasting.

pub mod logs;
pub mod server;

use crate::mirror::MirrorState;
use crate::node::Node;
use crate::runtime::Control;
use server::{Request, Response};
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

pub const DEFAULT_SOCKET: &str = "/run/atoll/atoll.sock";
/// Connections one listener serves at once.
pub const MAX_CONNECTIONS: usize = 64;
/// How long a client may take to accept a write before its connection is closed.
pub const WRITE_DEADLINE: Duration = Duration::from_secs(10);
/// How long a client may take to send its request head.
const READ_DEADLINE: Duration = Duration::from_secs(10);

/// What a listener may serve.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scope {
    /// Everything (the unix socket).
    Full,
    /// GET of pods, events, metrics and healthz (loopback `readOnlyPort`).
    ReadOnly,
    /// `/healthz` only.
    Healthz,
}

/// The API's view of the agent: the node, the engine's workers (for a restart), and the
/// mirror's reports when atoll mirrors to an API server.
pub struct Api {
    node: Arc<Node>,
    control: Option<Control>,
    mirror: Option<Arc<MirrorState>>,
    started_at: SystemTime,
    /// Connections being served, over all listeners (for `/metrics`).
    open: AtomicUsize,
}

/// One admitted connection: counted while it lives, on its listener and in the total.
struct Slot<'a> {
    listener: &'a AtomicUsize,
    total: &'a AtomicUsize,
}

impl Drop for Slot<'_> {
    fn drop(&mut self) {
        self.listener.fetch_sub(1, Ordering::AcqRel);
        self.total.fetch_sub(1, Ordering::AcqRel);
    }
}

impl Api {
    pub fn new(node: Arc<Node>, control: Option<Control>, mirror: Option<Arc<MirrorState>>) -> Arc<Api> {
        Arc::new(Api { node, control, mirror, started_at: SystemTime::now(), open: AtomicUsize::new(0) })
    }

    /// Connections being served now.
    pub fn open_connections(&self) -> usize {
        self.open.load(Ordering::Acquire)
    }

    /// A slot on `listener` (its own count), or `None` when it serves its maximum already.
    fn admit<'a>(&'a self, listener: &'a AtomicUsize) -> Option<Slot<'a>> {
        if listener.fetch_add(1, Ordering::AcqRel) >= MAX_CONNECTIONS {
            listener.fetch_sub(1, Ordering::AcqRel);
            return None;
        }
        self.open.fetch_add(1, Ordering::AcqRel);
        Some(Slot { listener, total: &self.open })
    }

    /// `None` while healthy, else why not.
    pub fn stalled(&self) -> Option<String> {
        self.node.stalled()
    }
}

/// Binds the unix socket: the directory made 0700 if new, a stale socket replaced, the socket
/// 0600.
pub fn bind_socket(path: &Path) -> Result<smol::net::unix::UnixListener, String> {
    use std::os::unix::fs::PermissionsExt;
    if let Some(dir) = path.parent() {
        if !dir.exists() {
            std::fs::create_dir_all(dir).map_err(|e| format!("creating {}: {e}", dir.display()))?;
            std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))
                .map_err(|e| format!("{}: {e}", dir.display()))?;
        }
    }
    if std::os::unix::net::UnixStream::connect(path).is_ok() {
        return Err(format!("{} is in use: is another atoll running?", path.display()));
    }
    let _ = std::fs::remove_file(path);
    let listener = smol::net::unix::UnixListener::bind(path).map_err(|e| format!("binding {}: {e}", path.display()))?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))
        .map_err(|e| format!("{}: {e}", path.display()))?;
    Ok(listener)
}

/// Serves the unix socket until the task is dropped.
pub async fn serve_unix(api: Arc<Api>, listener: smol::net::unix::UnixListener) {
    let count = Arc::new(AtomicUsize::new(0));
    loop {
        match listener.accept().await {
            Ok((stream, _)) => {
                let (api, count) = (api.clone(), count.clone());
                smol::spawn(async move { handle(&api, &count, stream, Scope::Full).await }).detach();
            }
            Err(e) => {
                log::warn!("local API: accept: {e}");
                smol::Timer::after(Duration::from_millis(100)).await;
            }
        }
    }
}

/// Serves a TCP listener with the given scope until the task is dropped.
pub async fn serve_tcp(api: Arc<Api>, listener: smol::net::TcpListener, scope: Scope) {
    let count = Arc::new(AtomicUsize::new(0));
    loop {
        match listener.accept().await {
            Ok((stream, _)) => {
                let (api, count) = (api.clone(), count.clone());
                smol::spawn(async move { handle(&api, &count, stream, scope).await }).detach();
            }
            Err(e) => {
                log::warn!("local API: accept: {e}");
                smol::Timer::after(Duration::from_millis(100)).await;
            }
        }
    }
}

/// Writes a whole response, unless the client will not take it within the deadline.
async fn respond<W: smol::io::AsyncWrite + Unpin>(w: &mut W, r: &Response) {
    let _ = crate::deadline::with_deadline(WRITE_DEADLINE, server::write_response(w, r)).await;
}

async fn handle<S>(api: &Api, count: &AtomicUsize, mut stream: S, scope: Scope)
where
    S: smol::io::AsyncRead + smol::io::AsyncWrite + Unpin,
{
    let Some(_slot) = api.admit(count) else {
        return; // full: the connection is closed at once
    };
    let req = match crate::deadline::with_deadline(READ_DEADLINE, server::read_request(&mut stream)).await {
        Some(Ok(r)) => r,
        Some(Err(e)) => {
            respond(&mut stream, &Response::error(400, "BadRequest", e)).await;
            return;
        }
        None => return,
    };
    let segments: Vec<&str> = req.path.trim_matches('/').split('/').collect();
    if scope == Scope::Full && req.method == "GET" && segments.len() == 4 && segments[0] == "logs" {
        let (mut reader, mut writer) = smol::io::split(stream);
        let path = (segments[1], segments[2], segments[3]);
        if let Err(r) = logs::serve(api, &req, path, &mut reader, &mut writer).await {
            respond(&mut writer, &r).await;
        }
        return;
    }
    let response = route(api, &req, &segments, scope).await;
    respond(&mut stream, &response).await;
}

async fn route(api: &Api, req: &Request, segments: &[&str], scope: Scope) -> Response {
    let allowed = match (scope, segments.first().copied()) {
        (_, Some("healthz")) => true,
        (Scope::Healthz, _) => false,
        (Scope::ReadOnly, _) => req.method == "GET" && matches!(segments[0], "pods" | "events" | "metrics"),
        (Scope::Full, _) => true,
    };
    if !allowed {
        return Response::error(403, "Forbidden", format!("{} {} is not served here", req.method, req.path));
    }
    match (req.method.as_str(), segments) {
        ("GET", ["healthz"]) => match api.stalled() {
            None => Response::text(200, "ok"),
            Some(why) => Response::text(500, why),
        },
        ("GET", ["pods"]) => Response::json(200, &pod_list(api)),
        ("GET", ["pods", ns, name]) => match find_pod(api, ns, name) {
            Some((pod, _)) => Response::json(200, &pod),
            None => not_found(ns, name),
        },
        ("POST", ["pods", ns, name, "restart"]) => restart(api, ns, name).await,
        ("GET", ["events"]) => {
            let events: Vec<_> = api
                .node
                .events()
                .all()
                .into_iter()
                .filter(|e| req.query.get("namespace").is_none_or(|n| *n == e.namespace))
                .filter(|e| req.query.get("pod").is_none_or(|p| *p == e.pod))
                .collect();
            Response::json(200, &serde_json::json!({ "items": events }))
        }
        ("GET", ["metrics"]) => {
            Response { status: 200, content_type: "text/plain; version=0.0.4", body: metrics(api).await.into_bytes() }
        }
        (_, ["pods", ..] | ["events"] | ["metrics"] | ["healthz"]) => {
            Response::error(405, "MethodNotAllowed", format!("{} {} is not allowed", req.method, req.path))
        }
        _ => Response::error(404, "NotFound", format!("no such endpoint: {}", req.path)),
    }
}

pub(crate) fn not_found(ns: &str, name: &str) -> Response {
    Response::error(404, "NotFound", format!("pods \"{name}\" not found in namespace \"{ns}\""))
}

/// Where the pod's mirror on the API server stands (local API only; never sent anywhere).
pub const ANNOTATION_MIRROR_STATE: &str = "atoll.io/mirror";

/// A pod as the API shows it: the manifest's object with `status` added, and the state of its
/// mirror as an annotation when atoll mirrors to an API server.
fn pod_json(
    api: &Api,
    pod: &crate::pod::types::Pod,
    status: Option<&crate::pod::status::PodStatus>,
) -> serde_json::Value {
    let mut v = serde_json::to_value(pod).unwrap_or_default();
    if let Some(report) = api.mirror.as_ref().and_then(|m| m.report(&pod.metadata.uid)) {
        v["metadata"]["annotations"][ANNOTATION_MIRROR_STATE] = report.into();
    }
    if let Some(obj) = v.as_object_mut() {
        obj.insert("apiVersion".into(), "v1".into());
        obj.insert("kind".into(), "Pod".into());
        let status = match status {
            Some(s) => serde_json::to_value(s).unwrap_or_default(),
            None => serde_json::json!({"phase": "Pending"}),
        };
        obj.insert("status".into(), status);
    }
    v
}

fn pod_list(api: &Api) -> serde_json::Value {
    let mut pods = api.node.statuses().pods();
    pods.sort_by_key(|p| p.0.key());
    let items: Vec<serde_json::Value> = pods.iter().map(|(p, s)| pod_json(api, p, s.as_ref())).collect();
    serde_json::json!({"kind": "PodList", "apiVersion": "v1", "metadata": {}, "items": items})
}

/// The pod `ns/name`; a static pod may also be named without its node suffix.
pub(crate) fn find_pod(api: &Api, ns: &str, name: &str) -> Option<(serde_json::Value, crate::pod::types::Pod)> {
    let pods = api.node.statuses().pods();
    let with_node = format!("{name}-{}", api.node.facts().name);
    let found = pods
        .iter()
        .find(|(p, _)| p.metadata.namespace == ns && p.metadata.name == name)
        .or_else(|| pods.iter().find(|(p, _)| p.metadata.namespace == ns && p.metadata.name == with_node))?;
    Some((pod_json(api, &found.0, found.1.as_ref()), found.0.clone()))
}

/// Restarts through the pod's worker, so the containers stop as for any kill (preStop first,
/// within the pod's grace period) and come back per restartPolicy.
async fn restart(api: &Api, ns: &str, name: &str) -> Response {
    let Some((_, pod)) = find_pod(api, ns, name) else { return not_found(ns, name) };
    let Some(control) = &api.control else {
        return Response::error(503, "ServiceUnavailable", "this agent runs no pods");
    };
    match control.restart(&pod.metadata.uid).await {
        Some(stopped) => Response::json(200, &serde_json::json!({"pod": pod.key(), "stopped": stopped})),
        None => Response::error(503, "ServiceUnavailable", format!("pod {} has no worker (stopping?)", pod.key())),
    }
}

/// The process's resident memory and CPU time, from /proc/self.
fn process_usage() -> (f64, f64) {
    let rss = std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines().find(|l| l.starts_with("VmRSS:")).and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
        })
        .unwrap_or(0.0)
        * 1024.0;
    let cpu = std::fs::read_to_string("/proc/self/stat")
        .ok()
        .and_then(|s| {
            let after = s.get(s.rfind(')')? + 2..)?.split_whitespace().map(String::from).collect::<Vec<_>>();
            Some((after.get(11)?.parse::<f64>().ok()? + after.get(12)?.parse::<f64>().ok()?) / 100.0)
        })
        .unwrap_or(0.0);
    (rss, cpu)
}

async fn metrics(api: &Api) -> String {
    use crate::metrics::{header, sample};
    let mut out = String::new();
    let pods = api.node.statuses().pods();
    header(&mut out, "atoll_pods", "gauge", "Pods by phase.");
    for phase in ["Pending", "Running", "Succeeded", "Failed", "Unknown"] {
        let n = pods.iter().filter(|(_, s)| s.as_ref().map_or("Pending", |s| s.phase.as_str()) == phase).count();
        sample(&mut out, "atoll_pods", &[("phase", phase)], n as f64);
    }
    header(&mut out, "atoll_containers", "gauge", "Containers by state.");
    let all: Vec<(&crate::pod::types::Pod, &crate::pod::status::ContainerStatus)> = pods
        .iter()
        .filter_map(|(p, s)| s.as_ref().map(|s| (p, s)))
        .flat_map(|(p, s)| s.init_container_statuses.iter().chain(&s.container_statuses).map(move |c| (p, c)))
        .collect();
    for state in ["waiting", "running", "terminated"] {
        let n = all
            .iter()
            .filter(|(_, c)| match state {
                "waiting" => c.state.waiting.is_some(),
                "running" => c.state.running.is_some(),
                _ => c.state.terminated.is_some(),
            })
            .count();
        sample(&mut out, "atoll_containers", &[("state", state)], n as f64);
    }
    header(&mut out, "atoll_container_restarts", "gauge", "Each container's restartCount.");
    for (p, c) in &all {
        let labels = [
            ("namespace", p.metadata.namespace.as_str()),
            ("pod", p.metadata.name.as_str()),
            ("container", c.name.as_str()),
        ];
        sample(&mut out, "atoll_container_restarts", &labels, c.restart_count as f64);
    }
    header(&mut out, "atoll_container_ready", "gauge", "Whether each container is ready (1) or not (0).");
    for (p, c) in &all {
        let labels = [
            ("namespace", p.metadata.namespace.as_str()),
            ("pod", p.metadata.name.as_str()),
            ("container", c.name.as_str()),
        ];
        sample(&mut out, "atoll_container_ready", &labels, if c.ready { 1.0 } else { 0.0 });
    }
    header(&mut out, "atoll_api_connections", "gauge", "Local API connections being served.");
    sample(&mut out, "atoll_api_connections", &[], api.open_connections() as f64);
    header(&mut out, "atoll_events_total", "counter", "Lifecycle events recorded.");
    sample(&mut out, "atoll_events_total", &[], api.node.events().total() as f64);
    let runtime_up = api.node.heartbeat().runtime_up();
    header(&mut out, "atoll_runtime_up", "gauge", "Whether the container runtime answered the last relist.");
    sample(&mut out, "atoll_runtime_up", &[], if runtime_up { 1.0 } else { 0.0 });
    crate::metrics::render_registry(&mut out);
    // Per-container usage from the runtime (kubelet's cAdvisor role), names as cAdvisor's.
    if let Ok(Ok(stats)) = smol::future::or(async { Ok(api.node.runtime().list_container_stats(None).await) }, async {
        smol::Timer::after(Duration::from_secs(5)).await;
        Err(())
    })
    .await
    {
        let by_uid: std::collections::HashMap<&str, &crate::pod::types::Pod> =
            pods.iter().map(|(p, _)| (p.metadata.uid.as_str(), p)).collect();
        let mut cpu = String::new();
        let mut mem = String::new();
        for st in &stats {
            let Some(attrs) = &st.attributes else { continue };
            let Some(pod) =
                attrs.labels.get(crate::runtime::sandbox::LABEL_POD_UID).and_then(|u| by_uid.get(u.as_str()))
            else {
                continue;
            };
            let name = attrs.metadata.as_ref().map(|m| m.name.as_str()).unwrap_or("");
            let labels = [
                ("namespace", pod.metadata.namespace.as_str()),
                ("pod", pod.metadata.name.as_str()),
                ("container", name),
            ];
            if let Some(c) = st.cpu.as_ref().and_then(|c| c.usage_core_nano_seconds.as_ref()) {
                sample(&mut cpu, "container_cpu_usage_seconds_total", &labels, c.value as f64 / 1e9);
            }
            if let Some(m) = st.memory.as_ref().and_then(|m| m.working_set_bytes.as_ref()) {
                sample(&mut mem, "container_memory_working_set_bytes", &labels, m.value as f64);
            }
        }
        header(
            &mut out,
            "container_cpu_usage_seconds_total",
            "counter",
            "Cumulative CPU time of each container (from CRI).",
        );
        out.push_str(&cpu);
        header(&mut out, "container_memory_working_set_bytes", "gauge", "Working set of each container (from CRI).");
        out.push_str(&mem);
    }
    let (rss, cpu) = process_usage();
    header(&mut out, "process_resident_memory_bytes", "gauge", "The agent's resident memory.");
    sample(&mut out, "process_resident_memory_bytes", &[], rss);
    header(&mut out, "process_cpu_seconds_total", "counter", "The agent's CPU time (user and system).");
    sample(&mut out, "process_cpu_seconds_total", &[], cpu);
    header(&mut out, "process_start_time_seconds", "gauge", "When the agent started (Unix time).");
    let start = api.started_at.duration_since(SystemTime::UNIX_EPOCH).unwrap_or_default().as_secs();
    sample(&mut out, "process_start_time_seconds", &[], start as f64);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn healthz_fails_when_the_relist_stalls() {
        use std::time::Instant;
        let api = Api::new(Node::without_runtime(), None, None);
        api.node.heartbeat().beat(Instant::now(), true);
        assert_eq!(api.stalled(), None);
        api.node.heartbeat().beat(Instant::now() - Duration::from_secs(45), true);
        let why = api.stalled().expect("stalled");
        assert!(why.starts_with("sync loop stalled: the last relist completed"), "{why}");
        let req = server::parse_head("GET /healthz HTTP/1.1").unwrap();
        let r = smol::block_on(route(&api, &req, &["healthz"], Scope::Healthz));
        assert_eq!(r.status, 500);
        let r =
            smol::block_on(route(&api, &server::parse_head("GET /pods HTTP/1.1").unwrap(), &["pods"], Scope::Healthz));
        assert_eq!(r.status, 403, "the healthz listener serves nothing else");
    }
}
