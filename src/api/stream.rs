//! `/exec`, `/attach` and `/portForward` as kubelet serves them (its HTTPS server, and the
//! local API's socket for root on the box), and `/run`: atoll speaks no SPDY or WebSocket
//! itself. It asks the runtime (CRI `Exec`, `Attach`, `PortForward` on the pod's ready
//! sandbox) for a one-time URL on its streaming server, sends the client's upgrade there (only
//! the upgrade's own headers: never the client's credentials) and, on `101 Switching
//! Protocols`, splices the two connections. Any other answer is relayed and both connections
//! closed; a redirect is never followed. When one side stops sending, the other's write half
//! is closed and the rest keeps flowing, so the last output and the exit status always
//! arrive. Each session holds two 16 KiB copy buffers, no task blocks, and a session quiet for
//! streamingConnectionIdleTimeout is closed.

use super::server::{query_all, respond, Request, Response};
use super::view::Api;
use crate::cri::api::{
    AttachRequest, ExecRequest, ExecSyncRequest, PodSandboxFilter, PodSandboxState, PodSandboxStateValue,
    PortForwardRequest,
};
use crate::cri::RuntimeService;
use smol::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use std::time::Duration;

/// kubelet's default streamingConnectionIdleTimeout, for the local API's sessions.
pub const IDLE_TIMEOUT: Duration = Duration::from_secs(4 * 3600);
/// The runtime's streaming server must answer the upgrade within this.
const UPGRADE_DEADLINE: Duration = Duration::from_secs(30);
/// The request headers that make the upgrade, forwarded to the runtime.
const UPGRADE_HEADERS: [&str; 6] = [
    "connection",
    "upgrade",
    "x-stream-protocol-version",
    "sec-websocket-key",
    "sec-websocket-version",
    "sec-websocket-protocol",
];

/// What a streaming path asks for.
#[derive(Debug, PartialEq, Eq)]
enum Session {
    Exec(ExecRequest),
    Attach(AttachRequest),
    /// The pod's UID (its ready sandbox is looked up) and, for a WebSocket client, the ports.
    PortForward {
        pod_uid: String,
        ports: Vec<i32>,
    },
}

/// The pod `ns/name` (and, when given, of that UID), else kubelet's 404.
fn pod_of<RT: RuntimeService>(
    api: &Api<RT>,
    ns: &str,
    name: &str,
    uid: Option<&str>,
) -> Result<crate::pod::types::Pod, Response> {
    let (_, found) = super::pods::find_pod(api, ns, name, super::pods::Reader::Root)
        .filter(|(_, p)| uid.is_none_or(|u| p.metadata.uid == u))
        .ok_or_else(|| Response::text(404, "pod not found"))?;
    Ok(found)
}

/// The runtime ID of the running container `name` of `pod`.
fn running<RT: RuntimeService>(api: &Api<RT>, pod: &crate::pod::types::Pod, name: &str) -> Result<String, Response> {
    let status = api.node.statuses().get(&pod.metadata.uid);
    status
        .as_ref()
        .and_then(|s| s.container_statuses.iter().chain(&s.init_container_statuses).find(|c| c.name == name))
        .filter(|c| c.state.running.is_some())
        .map(|c| c.container_id.rsplit("://").next().unwrap_or_default().to_string())
        .filter(|id| !id.is_empty())
        .ok_or_else(|| {
            let (ns, pod) = (&pod.metadata.namespace, &pod.metadata.name);
            Response::text(404, format!("container {name:?} is not running in pod {ns}/{pod}"))
        })
}

/// The pod and container a path names: `{ns}/{pod}/{container}` or `{ns}/{pod}/{uid}/{container}`.
fn container_of<RT: RuntimeService>(api: &Api<RT>, rest: &[&str]) -> Result<String, Response> {
    let (ns, name, uid, container) = match rest {
        [ns, pod, container] => (*ns, *pod, None, *container),
        [ns, pod, uid, container] => (*ns, *pod, Some(*uid), *container),
        _ => return Err(Response::text(404, "404 page not found")),
    };
    running(api, &pod_of(api, ns, name, uid)?, container)
}

/// The session `req` names, with the container's runtime ID looked up, or
/// kubelet's answer when it names nothing that runs.
fn session<RT: RuntimeService>(
    api: &Api<RT>,
    req: &Request,
    head: &str,
    segments: &[&str],
) -> Result<Session, Response> {
    let Some((kind, rest)) = segments.split_first() else { return Err(Response::text(404, "404 page not found")) };
    if *kind == "portForward" {
        let (ns, name, uid) = match rest {
            [ns, pod] => (*ns, *pod, None),
            [ns, pod, uid] => (*ns, *pod, Some(*uid)),
            _ => return Err(Response::text(404, "404 page not found")),
        };
        let pod_uid = pod_of(api, ns, name, uid)?.metadata.uid.clone();
        let websocket = crate::http1::header(head, "upgrade").is_some_and(|u| u.eq_ignore_ascii_case("websocket"));
        let ports =
            if websocket { ports(&query_all(head, "port")).map_err(|e| Response::text(400, e))? } else { vec![] };
        return Ok(Session::PortForward { pod_uid, ports });
    }
    let id = container_of(api, rest)?;
    let flag = |k: &str| req.query.get(k).is_some_and(|v| v == "1" || v == "true");
    let (stdin, stdout, tty) = (flag("input"), flag("output"), flag("tty"));
    let stderr = flag("error") && !tty; // a terminal has no separate stderr
    if !stdin && !stdout && !stderr {
        return Err(Response::text(400, "you must specify at least one of stdin, stdout, stderr"));
    }
    if *kind == "attach" {
        return Ok(Session::Attach(AttachRequest { container_id: id, stdin, tty, stdout, stderr }));
    }
    let cmd = query_all(head, "command");
    if cmd.is_empty() {
        return Err(Response::text(400, "you must specify a command"));
    }
    Ok(Session::Exec(ExecRequest { container_id: id, cmd, tty, stdin, stdout, stderr }))
}

/// A WebSocket port-forward's `port` values (each may be a comma-separated list), as
/// kubelet reads them: at least one, each 1 to 65535.
#[doc(hidden)] // pub for fuzz/fuzz_targets/http_head.rs
pub fn ports(values: &[String]) -> Result<Vec<i32>, String> {
    if values.is_empty() {
        return Err("query parameter \"port\" is required".into());
    }
    let mut ports = Vec::new();
    for p in values.iter().flat_map(|v| v.split(',')) {
        match p.parse::<u16>() {
            Ok(n) if n > 0 => ports.push(i32::from(n)),
            _ => return Err(format!("unable to parse {p:?} as a port (1 to 65535)")),
        }
    }
    Ok(ports)
}

/// One streaming request, start to end: the session it names, the runtime's URL for it, and
/// the splice; or the answer that refuses it. Both servers (kubelet's, the local API's) call this.
pub async fn serve<RT: RuntimeService>(
    api: &Api<RT>,
    req: &Request,
    head: &str,
    segments: &[&str],
    mut client: Box<dyn Client>,
    idle: Duration,
) {
    let url = match session(api, req, head, segments) {
        Ok(s) => url(&api.runtime, s).await,
        Err(r) => Err(r),
    };
    match url {
        Ok(url) => proxy(client, head, &url, idle).await,
        Err(r) => respond(&mut client, &r).await,
    }
}

/// The runtime's streaming URL for `session`.
async fn url<RT: RuntimeService>(runtime: &RT, session: Session) -> Result<String, Response> {
    let asked = match session {
        Session::Exec(r) => runtime.exec(r).await,
        Session::Attach(r) => runtime.attach(r).await,
        Session::PortForward { pod_uid, ports } => {
            let filter = PodSandboxFilter {
                state: Some(PodSandboxStateValue { state: PodSandboxState::SandboxReady as i32 }),
                label_selector: [(crate::runtime::sandbox::LABEL_POD_UID.to_string(), pod_uid)].into(),
                ..Default::default()
            };
            let listed = runtime.list_pod_sandbox(Some(filter)).await;
            let listed = listed.map_err(|e| Response::text(500, format!("the container runtime: {e}")))?;
            let Some(sandbox) = listed.into_iter().max_by_key(|s| s.created_at) else {
                return Err(Response::text(404, "the pod has no ready sandbox"));
            };
            runtime.port_forward(PortForwardRequest { pod_sandbox_id: sandbox.id, port: ports }).await
        }
    };
    asked.map_err(|e| Response::text(500, format!("the container runtime: {e}")))
}

/// `/run/{ns}/{pod}[/{uid}]/{container}?cmd=...` (POST): the command's output, as kubelet's
/// RunInContainer answers (stdout then stderr; a non-zero exit is a 500 naming it).
pub async fn run<RT: RuntimeService>(api: &Api<RT>, req: &Request, rest: &[&str], limit: Duration) -> Response {
    if req.method != "POST" {
        return Response::text(405, "only POST is allowed");
    }
    let id = match container_of(api, rest) {
        Ok(id) => id,
        Err(r) => return r,
    };
    let cmd: Vec<String> = req.query.get("cmd").map(|c| c.split(' ').map(str::to_string).collect()).unwrap_or_default();
    if cmd.iter().all(String::is_empty) {
        return Response::text(400, "you must specify a command (cmd)");
    }
    let shown = cmd.join(" ");
    let asked = ExecSyncRequest { container_id: id, cmd, timeout: 0 };
    match api.runtime.exec_sync_with_deadline(asked, Some(limit)).await {
        Ok(r) if r.exit_code == 0 => {
            let mut body = r.stdout;
            body.extend_from_slice(&r.stderr);
            Response { status: 200, content_type: "application/json", body }
        }
        Ok(r) => Response::text(
            500,
            format!("command '{shown}' exited with {}: {}", r.exit_code, String::from_utf8_lossy(&r.stderr)),
        ),
        Err(e) => Response::text(500, format!("the container runtime: {e}")),
    }
}

/// A client connection of any kind (TLS from the API server, the local API's socket), boxed:
/// one copy of the splice serves them all.
pub trait Client: AsyncRead + AsyncWrite + Unpin + Send {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send> Client for T {}

/// `http://host:port/path` split; anything else (https, relative, userinfo) is refused.
#[doc(hidden)] // pub for fuzz/fuzz_targets/http_head.rs
pub fn target(url: &str) -> Option<(&str, &str)> {
    let rest = url.strip_prefix("http://")?;
    let (authority, path) = rest.split_at_checked(rest.find('/')?)?;
    (!authority.is_empty() && !authority.contains('@')).then_some((authority, path))
}

/// Sends the client's upgrade to the runtime's `url` and splices the connections; a session
/// with no byte either way for `idle` (kubelet's streamingConnectionIdleTimeout; zero: none)
/// is closed.
async fn proxy(client: Box<dyn Client>, head: &str, url: &str, idle: Duration) {
    let (mut client_r, mut client_w) = smol::io::split(client);
    let Some((authority, path)) = target(url) else {
        let r = Response::text(500, format!("the container runtime's streaming URL is not plain http: {url}"));
        return respond(&mut client_w, &r).await;
    };
    let connected = crate::deadline::with_deadline(UPGRADE_DEADLINE, smol::net::TcpStream::connect(authority));
    let runtime = match connected.await {
        Some(Ok(s)) => {
            let _ = s.set_nodelay(true); // each side's bytes leave as they come (no Nagle wait)
            s
        }
        failed => {
            let why = failed.map_or("no answer".to_string(), |e| e.err().map(|e| e.to_string()).unwrap_or_default());
            let r = Response::text(502, format!("the container runtime's streaming server: {why}"));
            return respond(&mut client_w, &r).await;
        }
    };
    // The client's method (a WebSocket upgrade must stay a GET; SPDY comes as POST or GET).
    let method = if head.starts_with("GET ") { "GET" } else { "POST" };
    let mut request = format!("{method} {path} HTTP/1.1\r\nHost: {authority}\r\n");
    for line in head.lines().skip(1) {
        if let Some((name, value)) = line.split_once(':') {
            if UPGRADE_HEADERS.contains(&name.trim().to_ascii_lowercase().as_str()) {
                request.push_str(&format!("{}: {}\r\n", name.trim(), value.trim()));
            }
        }
    }
    request.push_str("\r\n");
    let (mut runtime_r, mut runtime_w) = (runtime.clone(), runtime);
    if runtime_w.write_all(request.as_bytes()).await.is_err() {
        return;
    }
    let answer = crate::deadline::with_deadline(UPGRADE_DEADLINE, crate::http1::read_head(&mut runtime_r, 64 << 10));
    let Some(Ok((answer, early))) = answer.await else {
        let r = Response::text(502, "the container runtime's streaming server did not answer the upgrade");
        return respond(&mut client_w, &r).await;
    };
    let switching = crate::http1::status(&answer) == Ok(101);
    // One write: the head and what followed it leave in one TLS record.
    let mut relay = Vec::with_capacity(answer.len() + 4 + early.len());
    relay.extend_from_slice(answer.as_bytes());
    relay.extend_from_slice(b"\r\n\r\n");
    relay.extend_from_slice(&early);
    let relayed = async {
        client_w.write_all(&relay).await?;
        client_w.flush().await
    };
    if relayed.await.is_err() || !switching {
        // Not an upgrade: what the runtime said is all the client gets, and both close.
        let _ = client_w.close().await;
        return;
    }
    let clock = Activity::new();
    let upstream = async {
        let _ = pump(&mut client_r, &mut runtime_w, &clock).await;
        let _ = runtime_w.shutdown(std::net::Shutdown::Write); // the runtime sees the end of input
        std::future::pending::<()>().await // the session ends with the runtime's output
    };
    let downstream = async {
        let _ = pump(&mut runtime_r, &mut client_w, &clock).await;
        let _ = client_w.close().await;
    };
    // Input ending never cuts the output short; the runtime closing ends the session.
    smol::future::or(smol::future::or(downstream, upstream), clock.idle_for(idle)).await;
}

/// The copy buffer of each direction: a session holds two.
const BUFFER: usize = 16 << 10;

/// When a session last moved a byte.
struct Activity {
    start: std::time::Instant,
    last_ms: std::sync::atomic::AtomicU64,
}

impl Activity {
    fn new() -> Activity {
        Activity { start: std::time::Instant::now(), last_ms: Default::default() }
    }

    fn touch(&self) {
        let ms = u64::try_from(self.start.elapsed().as_millis()).unwrap_or(u64::MAX);
        self.last_ms.store(ms, std::sync::atomic::Ordering::Relaxed);
    }

    /// Ends once nothing has moved for `idle` (never, for zero).
    async fn idle_for(&self, idle: Duration) {
        if idle.is_zero() {
            return std::future::pending().await;
        }
        loop {
            let last = Duration::from_millis(self.last_ms.load(std::sync::atomic::Ordering::Relaxed));
            let quiet = self.start.elapsed().saturating_sub(last);
            if quiet >= idle {
                return;
            }
            smol::Timer::after(idle - quiet).await;
        }
    }
}

/// Copies `r` to `w` until `r` ends, through one bounded buffer, noting activity.
async fn pump<R, W>(r: &mut R, w: &mut W, clock: &Activity) -> std::io::Result<()>
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let mut buf = vec![0u8; BUFFER];
    loop {
        let n = r.read(&mut buf).await?;
        if n == 0 {
            return w.flush().await;
        }
        w.write_all(&buf[..n]).await?;
        w.flush().await?;
        clock.touch();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn websocket_port_forward_ports_are_read_as_kubelet_reads_them() {
        let v = |s: &[&str]| s.iter().map(|x| x.to_string()).collect::<Vec<_>>();
        assert_eq!(ports(&v(&["80", "8080,9090"])), Ok(vec![80, 8080, 9090]));
        for bad in [&[][..], &["0"], &["65536"], &["80,"], &["x"], &[""]] {
            assert!(ports(&v(bad)).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn a_quiet_session_ends_after_its_idle_timeout_and_activity_holds_it_open() {
        smol::block_on(quiet_then_idle());
    }

    async fn quiet_then_idle() {
        let clock = Activity::new();
        let started = std::time::Instant::now();
        let held = async {
            for _ in 0..6 {
                smol::Timer::after(Duration::from_millis(50)).await;
                clock.touch();
            }
            std::future::pending::<()>().await
        };
        smol::future::or(held, clock.idle_for(Duration::from_millis(150))).await;
        let took = started.elapsed();
        assert!(took >= Duration::from_millis(300 + 150), "{took:?}: touched for 300 ms, then 150 ms quiet");
        let never = smol::future::or(
            async {
                clock.idle_for(Duration::ZERO).await;
                false
            },
            async {
                smol::Timer::after(Duration::from_millis(50)).await;
                true
            },
        );
        assert!(never.await, "zero is no timeout");
    }

    #[test]
    fn only_a_plain_http_url_with_a_path_is_followed() {
        assert_eq!(target("http://127.0.0.1:34567/exec/Ab3dE9fz"), Some(("127.0.0.1:34567", "/exec/Ab3dE9fz")));
        assert_eq!(target("http://[::1]:1/attach/x"), Some(("[::1]:1", "/attach/x")));
        for bad in ["https://127.0.0.1:1/exec/x", "/exec/x", "http://127.0.0.1:1", "http://u:p@h:1/exec/x", "http:///x"]
        {
            assert_eq!(target(bad), None, "{bad}");
        }
    }
}
