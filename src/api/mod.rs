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

pub mod server;

use crate::runtime::worker::Shared;
use server::{Request, Response};
use smol::io::AsyncWriteExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

pub const DEFAULT_SOCKET: &str = "/run/atoll/atoll.sock";
/// The sync loop counts as stalled when the relist has not completed for this long.
pub const STALL_AFTER: Duration = Duration::from_secs(30);

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

/// The API's view of the agent.
pub struct Api {
    pub shared: Arc<Shared>,
    pub started: Instant,
    pub started_at: SystemTime,
}

impl Api {
    pub fn new(shared: Arc<Shared>) -> Arc<Api> {
        Arc::new(Api { shared, started: Instant::now(), started_at: SystemTime::now() })
    }

    /// `None` while healthy, else why not.
    pub fn stalled(&self) -> Option<String> {
        match self.shared.last_relist() {
            Some((at, _)) if at.elapsed() <= STALL_AFTER => None,
            Some((at, _)) => Some(format!("sync loop stalled: the last relist completed {:?} ago", at.elapsed())),
            None if self.started.elapsed() <= STALL_AFTER => None,
            None => Some(format!("sync loop stalled: no relist completed in {:?}", self.started.elapsed())),
        }
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
    loop {
        match listener.accept().await {
            Ok((stream, _)) => {
                let api = api.clone();
                smol::spawn(async move { handle(api, stream, Scope::Full).await }).detach();
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
    loop {
        match listener.accept().await {
            Ok((stream, _)) => {
                let api = api.clone();
                smol::spawn(async move { handle(api, stream, scope).await }).detach();
            }
            Err(e) => {
                log::warn!("local API: accept: {e}");
                smol::Timer::after(Duration::from_millis(100)).await;
            }
        }
    }
}

async fn handle<S>(api: Arc<Api>, mut stream: S, scope: Scope)
where
    S: smol::io::AsyncRead + smol::io::AsyncWrite + Unpin,
{
    let req = match crate::deadline::with_deadline(Duration::from_secs(10), server::read_request(&mut stream)).await {
        Some(Ok(r)) => r,
        Some(Err(e)) => {
            let _ = server::write_response(&mut stream, &Response::error(400, "BadRequest", e)).await;
            return;
        }
        None => return,
    };
    let segments: Vec<&str> = req.path.trim_matches('/').split('/').collect();
    if scope == Scope::Full && req.method == "GET" && segments.len() == 4 && segments[0] == "logs" {
        if let Err(r) = logs(&api, &req, segments[1], segments[2], segments[3], &mut stream).await {
            let _ = server::write_response(&mut stream, &r).await;
        }
        return;
    }
    let response = route(&api, &req, &segments, scope).await;
    let _ = server::write_response(&mut stream, &response).await;
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
                .shared
                .events
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

fn not_found(ns: &str, name: &str) -> Response {
    Response::error(404, "NotFound", format!("pods \"{name}\" not found in namespace \"{ns}\""))
}

/// Where the pod's mirror on the API server stands (local API only; never sent anywhere).
pub const ANNOTATION_MIRROR_STATE: &str = "atoll.io/mirror";

/// A pod as the API shows it: the manifest's object with `status` added, and the state of its
/// mirror as an annotation when atoll mirrors to an API server.
fn pod_json(api: &Api, pod: &crate::pod::types::Pod, status: Option<&crate::status::PodStatus>) -> serde_json::Value {
    let mut v = serde_json::to_value(pod).unwrap_or_default();
    if let Some(report) = api.shared.mirror.report(&pod.metadata.uid) {
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
    let mut pods = api.shared.statuses.pods();
    pods.sort_by_key(|p| p.0.key());
    let items: Vec<serde_json::Value> = pods.iter().map(|(p, s)| pod_json(api, p, s.as_ref())).collect();
    serde_json::json!({"kind": "PodList", "apiVersion": "v1", "metadata": {}, "items": items})
}

/// The pod `ns/name`; a static pod may also be named without its node suffix.
fn find_pod(api: &Api, ns: &str, name: &str) -> Option<(serde_json::Value, crate::pod::types::Pod)> {
    let pods = api.shared.statuses.pods();
    let with_node = format!("{name}-{}", api.shared.node.node_name);
    let found = pods
        .iter()
        .find(|(p, _)| p.metadata.namespace == ns && p.metadata.name == name)
        .or_else(|| pods.iter().find(|(p, _)| p.metadata.namespace == ns && p.metadata.name == with_node))?;
    Some((pod_json(api, &found.0, found.1.as_ref()), found.0.clone()))
}

async fn restart(api: &Api, ns: &str, name: &str) -> Response {
    let Some((_, pod)) = find_pod(api, ns, name) else { return not_found(ns, name) };
    let obs = match crate::runtime::worker::observe(&api.shared.cri, &pod.metadata.uid).await {
        Ok(o) => o,
        Err(e) => return Response::error(503, "ServiceUnavailable", format!("the container runtime: {e}")),
    };
    let grace = crate::runtime::worker::grace_of(&pod).max(Duration::from_secs(2));
    let mut stopped = Vec::new();
    for c in obs.containers.iter().filter(|c| c.state == crate::runtime::plan::CState::Running) {
        api.shared.events.record(&pod, false, "Killing", &format!("Stopping container {} (atoll restart)", c.name));
        if let Err(e) = api.shared.cri.stop_container(&c.id, grace).await {
            if !e.is_not_found() {
                return Response::error(500, "InternalError", format!("stopping {}: {e}", c.name));
            }
        }
        stopped.push(c.name.clone());
    }
    Response::json(200, &serde_json::json!({"pod": pod.key(), "stopped": stopped}))
}

/// The log files of one container instance, oldest first: rotated files, then the live one.
fn log_files(dir: &Path, restart: u32) -> Vec<PathBuf> {
    let live = dir.join(format!("{restart}.log"));
    let mut files = crate::runtime::logs::rotated(&live);
    files.sort();
    files.push(live);
    files
}

/// Decodes CRI log lines (`<time> <stream> <P|F> <text>`) into the text a program wrote.
pub fn decode_cri_log(bytes: &[u8], out: &mut Vec<u8>) {
    for line in bytes.split(|b| *b == b'\n').filter(|l| !l.is_empty()) {
        let mut parts = line.splitn(4, |b| *b == b' ');
        let (_time, _stream, tag, text) = (parts.next(), parts.next(), parts.next(), parts.next());
        match (tag, text) {
            (Some(b"P"), Some(t)) => out.extend_from_slice(t),
            (Some(_), Some(t)) => {
                out.extend_from_slice(t);
                out.push(b'\n');
            }
            (Some(b"F"), None) => out.push(b'\n'),
            _ => {
                out.extend_from_slice(line);
                out.push(b'\n');
            }
        }
    }
}

fn tail_lines(text: &[u8], n: usize) -> &[u8] {
    if n == 0 {
        return &text[text.len()..];
    }
    let mut count = 0;
    let body = text.strip_suffix(b"\n").unwrap_or(text);
    for (i, b) in body.iter().enumerate().rev() {
        if *b == b'\n' {
            count += 1;
            if count == n {
                return &text[i + 1..];
            }
        }
    }
    text
}

async fn logs<S: smol::io::AsyncWrite + Unpin>(
    api: &Api,
    req: &Request,
    ns: &str,
    name: &str,
    container: &str,
    out: &mut S,
) -> Result<(), Response> {
    let (_, pod) = find_pod(api, ns, name).ok_or_else(|| not_found(ns, name))?;
    let status = api.shared.statuses.get(&pod.metadata.uid);
    let cs = status
        .as_ref()
        .and_then(|s| {
            s.container_statuses.iter().chain(&s.init_container_statuses).find(|c| c.name == container).cloned()
        })
        .ok_or_else(|| {
            Response::error(400, "BadRequest", format!("container {container:?} is not valid for pod {}", pod.key()))
        })?;
    let previous = req.query.get("previous").is_some_and(|v| v != "false");
    let follow = req.query.get("follow").is_some_and(|v| v != "false") && !previous;
    let restart = if previous {
        if cs.last_state.terminated.is_none() || cs.restart_count == 0 {
            return Err(Response::error(
                400,
                "BadRequest",
                format!("previous terminated container {container:?} in pod {} not found", pod.key()),
            ));
        }
        cs.restart_count - 1
    } else {
        cs.restart_count
    };
    if !previous && cs.container_id.is_empty() {
        let why = cs.state.waiting.as_ref().map(|w| w.reason.clone()).unwrap_or_default();
        return Err(Response::error(
            400,
            "BadRequest",
            format!("container {container:?} in pod {} is waiting to start: {why}", pod.key()),
        ));
    }
    let dir = crate::runtime::sandbox::log_directory(&api.shared.node, &pod)
        .map_err(|e| Response::error(500, "InternalError", e))?
        .join(container);
    let files = log_files(&dir, restart);
    let mut decoded = Vec::new();
    for f in &files {
        if let Ok(bytes) = std::fs::read(f) {
            decode_cri_log(&bytes, &mut decoded);
        }
    }
    let shown = match req.query.get("tail").and_then(|t| t.parse::<i64>().ok()) {
        Some(n) if n >= 0 => tail_lines(&decoded, n as usize),
        _ => &decoded[..],
    };
    if !follow {
        let r = Response { status: 200, content_type: "text/plain; charset=utf-8", body: shown.to_vec() };
        let _ = server::write_response(out, &r).await;
        return Ok(());
    }
    if server::start_stream(out, "text/plain; charset=utf-8").await.is_err() || out.write_all(shown).await.is_err() {
        return Ok(());
    }
    let _ = out.flush().await;
    // Follow the live file: new whole lines as they come, a rotation (the file replaced)
    // followed from its start, the end when this instance of the container has stopped.
    let live = files.last().cloned().unwrap_or_default();
    let mut offset = std::fs::metadata(&live).map(|m| m.len()).unwrap_or(0);
    let mut inode = std::fs::metadata(&live).map(|m| std::os::unix::fs::MetadataExt::ino(&m)).unwrap_or(0);
    let mut partial: Vec<u8> = Vec::new();
    let mut last_round = false;
    loop {
        smol::Timer::after(Duration::from_millis(200)).await;
        let meta = std::fs::metadata(&live).ok();
        let now_inode = meta.as_ref().map(std::os::unix::fs::MetadataExt::ino).unwrap_or(0);
        let len = meta.as_ref().map(|m| m.len()).unwrap_or(0);
        if now_inode != inode || len < offset {
            inode = now_inode;
            offset = 0;
        }
        if len > offset {
            use std::io::{Read, Seek};
            let mut buf = Vec::new();
            if let Ok(mut f) = std::fs::File::open(&live) {
                let _ = f.seek(std::io::SeekFrom::Start(offset));
                let _ = f.take(len - offset).read_to_end(&mut buf);
            }
            offset += buf.len() as u64;
            partial.extend_from_slice(&buf);
            let complete = partial.iter().rposition(|b| *b == b'\n').map_or(0, |i| i + 1);
            let mut text = Vec::new();
            decode_cri_log(&partial[..complete], &mut text);
            partial.drain(..complete);
            if out.write_all(&text).await.is_err() || out.flush().await.is_err() {
                return Ok(());
            }
            continue;
        }
        if last_round {
            return Ok(());
        }
        let still_running = api.shared.statuses.get(&pod.metadata.uid).is_some_and(|s| {
            s.container_statuses
                .iter()
                .chain(&s.init_container_statuses)
                .any(|c| c.name == container && c.container_id == cs.container_id && c.state.running.is_some())
        });
        if !still_running {
            // One more look: the runtime may flush the last lines just after the exit.
            last_round = true;
        }
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
    let pods = api.shared.statuses.pods();
    header(&mut out, "atoll_pods", "gauge", "Pods by phase.");
    for phase in ["Pending", "Running", "Succeeded", "Failed", "Unknown"] {
        let n = pods.iter().filter(|(_, s)| s.as_ref().map_or("Pending", |s| s.phase.as_str()) == phase).count();
        sample(&mut out, "atoll_pods", &[("phase", phase)], n as f64);
    }
    header(&mut out, "atoll_containers", "gauge", "Containers by state.");
    let all: Vec<(&crate::pod::types::Pod, &crate::status::ContainerStatus)> = pods
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
    header(&mut out, "atoll_events_total", "counter", "Lifecycle events recorded.");
    sample(&mut out, "atoll_events_total", &[], api.shared.events.total() as f64);
    let runtime_up = api.shared.last_relist().is_some_and(|(_, ok)| ok);
    header(&mut out, "atoll_runtime_up", "gauge", "Whether the container runtime answered the last relist.");
    sample(&mut out, "atoll_runtime_up", &[], if runtime_up { 1.0 } else { 0.0 });
    crate::metrics::render_registry(&mut out);
    // Per-container usage from the runtime (kubelet's cAdvisor role), names as cAdvisor's.
    if let Ok(Ok(stats)) = smol::future::or(async { Ok(api.shared.cri.list_container_stats(None).await) }, async {
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
        let api = Api::new(crate::runtime::worker::Shared::without_runtime());
        assert_eq!(api.stalled(), None, "just started");
        *api.shared.heartbeat.lock().unwrap() = Some((Instant::now(), true));
        assert_eq!(api.stalled(), None);
        *api.shared.heartbeat.lock().unwrap() = Some((Instant::now() - Duration::from_secs(45), true));
        let why = api.stalled().expect("stalled");
        assert!(why.starts_with("sync loop stalled: the last relist completed"), "{why}");
        let req = server::parse_head("GET /healthz HTTP/1.1").unwrap();
        let r = smol::block_on(route(&api, &req, &["healthz"], Scope::Healthz));
        assert_eq!(r.status, 500);
        let r =
            smol::block_on(route(&api, &server::parse_head("GET /pods HTTP/1.1").unwrap(), &["pods"], Scope::Healthz));
        assert_eq!(r.status, 403, "the healthz listener serves nothing else");
    }

    #[test]
    fn cri_log_lines_decode_to_the_programs_text() {
        let raw = b"2024-01-01T00:00:00.1Z stdout F hello world\n2024-01-01T00:00:00.2Z stderr P par\n2024-01-01T00:00:00.3Z stderr F tial\n2024-01-01T00:00:00.4Z stdout F \n";
        let mut out = Vec::new();
        decode_cri_log(raw, &mut out);
        assert_eq!(String::from_utf8(out).unwrap(), "hello world\npartial\n\n");
    }

    #[test]
    fn tail_keeps_the_last_lines() {
        assert_eq!(tail_lines(b"a\nb\nc\n", 2), b"b\nc\n");
        assert_eq!(tail_lines(b"a\nb\nc\n", 5), b"a\nb\nc\n");
        assert_eq!(tail_lines(b"a\nb\nc\n", 0), b"");
    }

    #[test]
    fn rotated_files_come_before_the_live_one() {
        let dir = std::env::temp_dir().join(format!("atoll-api-logs-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        for f in ["0.log", "0.log.20240102-000000", "0.log.20240101-000000", "1.log", "0.log.20240103-000000.tmp"] {
            std::fs::write(dir.join(f), "").unwrap();
        }
        let names: Vec<String> =
            log_files(&dir, 0).iter().map(|p| p.file_name().unwrap().to_string_lossy().into_owned()).collect();
        assert_eq!(names, ["0.log.20240101-000000", "0.log.20240102-000000", "0.log"]);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
