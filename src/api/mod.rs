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
//! - `GET /metrics/cadvisor`, `/metrics/probes`, `/metrics/slis`: cAdvisor's container series
//!   (`cadvisor`), the probes' and the health checks' series, as kubelet serves them.
//! - `POST /pods/{namespace}/{name}/restart`: stops the pod's containers; they come back per
//!   restartPolicy (socket only).
//! - `GET /objects`: the local ConfigMaps and Secrets (keys and sizes, never values);
//!   `GET /pods/{namespace}/{name}/objects`: the ones a pod uses, and whether each resolved
//!   (socket only).
//! - `/exec/{namespace}/{name}/{container}?command=…&input&output&error&tty`,
//!   `/attach/…` and `/portForward/{namespace}/{name}`: an upgrade (WebSocket or SPDY) spliced
//!   onto the runtime's streaming server, as kubelet's server does (socket only; `api::stream`).
//! - `GET /images`: the runtime's images (in use, pinned and why, imported from) and the images
//!   directory's files; `POST /images/prune?dryRun=true`: removes (or lists) every image that
//!   is neither in use nor pinned (socket only).
//!
//! Each listener has a [`crate::gate::Gate`] ([`LIMITS`]): a connection's request head must
//! arrive within 10 s, the oldest of those still waiting for theirs is closed when a new one
//! needs the room (first among the same local user's), and the connections being served have
//! a budget of their own; every write must be taken within [`server::WRITE_DEADLINE`]. A
//! client (any local user, on the TCP ports) that floods, stalls or goes away costs the agent
//! nothing lasting and locks nobody out.

pub mod cadvisor;
pub mod cgroups;
pub mod images;
pub mod log_lines;
pub mod logs;
pub mod metrics;
pub mod objects;
pub mod pods;
pub mod server;
pub mod stream;
pub mod usage;
pub mod view;

pub use view::Api;

use crate::cri::RuntimeService;
use crate::gate::{Gate, Limits, Pending};
use pods::{find_pod, not_found, pod_list, restart, Reader};
use server::{respond, Request, Response};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

pub const DEFAULT_SOCKET: &str = "/run/atoll/atoll.sock";
/// Each listener's budgets: clients still sending their request head, and requests being
/// served. All come from the box itself (loopback or the socket): on the TCP ports a source
/// is a local user ([`crate::gate::peer`]), who may hold a quarter of the pending budget, so
/// one user's idle sockets never close another's (root's health checks) waiting requests.
pub const LIMITS: Limits = Limits { pending: 64, per_source: 16, deadline: Duration::from_secs(10), sessions: 64 };

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
pub async fn serve_unix<RT: RuntimeService>(api: Arc<Api<RT>>, listener: smol::net::unix::UnixListener) {
    let gate = Gate::new("api-socket", LIMITS);
    loop {
        match listener.accept().await {
            Ok((stream, _)) => {
                let (api, pending) = (api.clone(), gate.arrive(None, false));
                crate::task::spawn(async move { handle(&api, pending, Box::new(stream), Scope::Full).await }).detach();
                // Its reader runs before the next accept (a backlog of floods would not wait).
                smol::future::yield_now().await;
            }
            Err(e) => {
                log::warn!("local API: accept: {e}");
                smol::Timer::after(Duration::from_millis(100)).await;
            }
        }
    }
}

/// Serves a TCP listener with the given scope until the task is dropped.
pub async fn serve_tcp<RT: RuntimeService>(api: Arc<Api<RT>>, listener: smol::net::TcpListener, scope: Scope) {
    let gate = Gate::new(if scope == Scope::Healthz { "healthz" } else { "read-only" }, LIMITS);
    loop {
        match listener.accept().await {
            Ok((stream, peer)) => {
                // A client whose request is there is not closed for idle ones.
                let sent = crate::gate::sent_already(&stream);
                let (api, pending) = (api.clone(), gate.arrive(Some(crate::gate::source_of(&stream, peer)), sent));
                crate::task::spawn(async move { handle(&api, pending, Box::new(stream), scope).await }).detach();
                smol::future::yield_now().await;
            }
            Err(e) => {
                log::warn!("local API: accept: {e}");
                smol::Timer::after(Duration::from_millis(100)).await;
            }
        }
    }
}

/// One connection, from the socket or a TCP port (boxed: one copy serves both).
async fn handle<RT: RuntimeService>(
    api: &Api<RT>,
    pending: Pending,
    mut stream: Box<dyn stream::Client>,
    scope: Scope,
) {
    let req = match pending.step(server::read_request(&mut pending.marking(&mut stream))).await {
        Ok(Ok(r)) => r,
        Ok(Err(e)) => {
            respond(&mut stream, &Response::error(400, "BadRequest", e)).await;
            return;
        }
        Err(_) => return, // evicted for a newer client, or too slow
    };
    let Some(_session) = pending.admit() else {
        return respond(
            &mut stream,
            &Response::error(503, "ServiceUnavailable", "too many requests at once".to_string()),
        )
        .await;
    };
    let _slot = api.serving();
    let (req, head) = req;
    let segments: Vec<&str> = req.path.trim_matches('/').split('/').collect();
    if scope == Scope::Full && matches!(segments[0], "exec" | "attach" | "portForward") {
        // The same sessions kubelet's server splices, for root on the box (`atoll exec`).
        return stream::serve(api, &req, &head, &segments, stream, stream::IDLE_TIMEOUT).await;
    }
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

/// Who reads through a listener of `scope`: root only on the socket.
fn reader(scope: Scope) -> Reader {
    match scope {
        Scope::Full => Reader::Root,
        Scope::ReadOnly | Scope::Healthz => Reader::Unprivileged,
    }
}

async fn route<RT: RuntimeService>(api: &Api<RT>, req: &Request, segments: &[&str], scope: Scope) -> Response {
    let allowed = match (scope, segments.first().copied()) {
        (_, Some("healthz")) => true,
        (Scope::Healthz, _) => false,
        // Pods (not the objects they use: Secret key names and sizes stay on the socket),
        // events and metrics.
        (Scope::ReadOnly, _) => {
            req.method == "GET"
                && matches!(
                    segments,
                    ["pods"] | ["pods", _, _] | ["events"] | ["metrics"] | ["metrics", "cadvisor" | "probes" | "slis"]
                )
        }
        (Scope::Full, _) => true,
    };
    if !allowed {
        return Response::error(403, "Forbidden", format!("{} {} is not served here", req.method, req.path));
    }
    match (req.method.as_str(), segments) {
        ("GET", ["healthz"]) => match api.healthz() {
            None => Response::text(200, "ok"),
            Some(why) => Response::text(500, why),
        },
        ("GET", ["pods"]) => Response::json(200, &pod_list(api, reader(scope))),
        ("GET", ["pods", ns, name]) => match find_pod(api, ns, name, reader(scope)) {
            Some((pod, _)) => Response::json(200, &pod),
            None => not_found(ns, name),
        },
        ("POST", ["pods", ns, name, "restart"]) => restart(api, ns, name).await,
        ("GET", ["pods", ns, name, "objects"]) => match find_pod(api, ns, name, Reader::Root) {
            Some((_, pod)) => Response::json(200, &objects::of_pod(api, &pod)),
            None => not_found(ns, name),
        },
        ("GET", ["objects"]) => Response::json(200, &objects::list(api)),
        ("GET", ["images"]) => images::list(api).await,
        ("POST", ["images", "prune"]) => images::prune(api, req.query.get("dryRun").is_some_and(|v| v == "true")).await,
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
        ("GET", ["metrics"]) => Response {
            status: 200,
            content_type: "text/plain; version=0.0.4",
            body: metrics::metrics(api).await.into_bytes(),
        },
        ("GET", ["metrics", "cadvisor"]) => Response {
            status: 200,
            content_type: "text/plain; version=0.0.4",
            body: cadvisor::render(&cadvisor::collect(api).await).into_bytes(),
        },
        ("GET", ["metrics", "probes"]) => Response {
            status: 200,
            content_type: "text/plain; version=0.0.4",
            body: metrics::registry(api, crate::metrics::Path::Probes).into_bytes(),
        },
        ("GET", ["metrics", "slis"]) => Response {
            status: 200,
            content_type: "text/plain; version=0.0.4",
            body: metrics::registry(api, crate::metrics::Path::Slis).into_bytes(),
        },
        (_, ["pods", ..] | ["events"] | ["metrics", ..] | ["healthz"] | ["images", ..] | ["objects"]) => {
            Response::error(405, "MethodNotAllowed", format!("{} {} is not allowed", req.method, req.path))
        }
        _ => Response::error(404, "NotFound", format!("no such endpoint: {}", req.path)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cri::fake::FakeRuntime;

    #[test]
    fn healthz_fails_when_the_relist_stalls() {
        use crate::node::Node;
        use std::time::Instant;
        let api = Api::new(Node::sample(), FakeRuntime::default(), None, None);
        api.node.heartbeat().beat(Instant::now(), true, Duration::from_secs(1));
        assert_eq!(api.stalled(), None);
        api.node.heartbeat().beat(Instant::now() - Duration::from_secs(45), true, Duration::from_secs(1));
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
    fn the_read_only_port_serves_pods_events_and_metrics_but_never_objects() {
        let api = Api::new(crate::node::Node::sample(), FakeRuntime::default(), None, None);
        let get = |path: &str, scope| {
            let req = server::parse_head(&format!("GET {path} HTTP/1.1")).unwrap();
            let segments: Vec<&str> = req.path.trim_matches('/').split('/').collect();
            smol::block_on(route(&api, &req, &segments, scope)).status
        };
        for path in ["/objects", "/pods/default/web/objects", "/images", "/logs/default/web/c"] {
            assert_eq!(get(path, Scope::ReadOnly), 403, "{path} on the read-only port");
        }
        assert_eq!(get("/pods", Scope::ReadOnly), 200);
        assert_eq!(get("/pods/default/web", Scope::ReadOnly), 404, "allowed, and not found");
        assert_eq!(get("/pods/default/web/objects", Scope::Full), 404, "the socket serves it");
    }

    /// The API reads images and their use through the runtime the engine uses, so it runs
    /// against the fake: prune takes only what is neither in use nor the sandbox image.
    #[test]
    fn images_and_prune_go_through_the_engines_runtime() {
        use crate::cri::api::{ContainerConfig, ImageSpec, PodSandboxConfig};
        let fake = FakeRuntime::default().with_image("app:1").with_image("old:1").with_sandbox_image("pause:3.9");
        fake.import("pause:3.9");
        smol::block_on(async {
            let sandbox = fake.run_pod_sandbox(PodSandboxConfig::default(), "").await.unwrap();
            let image = Some(ImageSpec { image: "app:1".into(), ..Default::default() });
            let config = ContainerConfig { image, ..Default::default() };
            let id = fake.create_container(&sandbox, config, PodSandboxConfig::default()).await.unwrap();
            fake.start_container(&id).await.unwrap();
        });
        let api = Api::new(crate::node::Node::sample(), fake.clone(), None, None);
        let policy = crate::images::gc::Policy::default();
        api.set_images(Arc::new(crate::images::gc::Collector::new(policy, Duration::from_secs(300))));
        let call = |head: &str| {
            let req = server::parse_head(head).unwrap();
            let segments: Vec<&str> = req.path.trim_matches('/').split('/').collect();
            let r = smol::block_on(route(&api, &req, &segments, Scope::Full));
            (r.status, String::from_utf8_lossy(&r.body).into_owned())
        };
        let (status, body) = call("GET /images HTTP/1.1");
        assert_eq!(status, 200, "{body}");
        let listed: serde_json::Value = serde_json::from_str(&body).unwrap();
        let in_use: Vec<&str> = listed["items"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|i| i["inUse"] == true)
            .filter_map(|i| i["id"].as_str())
            .collect();
        assert_eq!(in_use, ["sha256:app:1"], "{body}");

        let (status, body) = call("POST /images/prune?dryRun=true HTTP/1.1");
        assert_eq!(status, 200, "{body}");
        assert!(body.contains("\"old:1\"") && !body.contains("app:1") && !body.contains("pause"), "{body}");
        assert_eq!(fake.images(), ["app:1", "old:1", "pause:3.9"], "a dry run removes nothing");
        let (status, body) = call("POST /images/prune HTTP/1.1");
        assert_eq!(status, 200, "{body}");
        assert_eq!(fake.images(), ["app:1", "pause:3.9"]);
        let metrics = smol::block_on(metrics::metrics(&api));
        assert!(metrics.contains("atoll_images{state=\"in_use\"} 1"), "{metrics}");
        assert!(metrics.contains("container_memory_working_set_bytes"), "{metrics}");
    }
}
