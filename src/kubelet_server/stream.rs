//! `/exec` and `/attach` as kubelet serves them (`/portForward` next, by the same splice):
//! atoll speaks no SPDY or WebSocket itself. It asks the runtime (CRI `Exec`, `Attach`) for a
//! one-time URL on its streaming server, sends the client's upgrade there (only the upgrade's own
//! headers: never the client's credentials) and, on `101 Switching Protocols`, splices the two
//! connections. Any other answer is relayed and both connections closed; a redirect is never
//! followed. When one side stops sending, the other's write half is closed and the rest keeps
//! flowing, so the last output and the exit status always arrive. Each session holds two
//! small copy buffers and no task blocks.

use crate::api::server::{query_all, respond, Request, Response};
use crate::api::Api;
use crate::cri::api::{AttachRequest, ExecRequest};
use crate::cri::RuntimeService;
use smol::io::{AsyncRead, AsyncWrite, AsyncWriteExt};
use std::time::Duration;

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
pub enum Session {
    Exec(ExecRequest),
    Attach(AttachRequest),
}

/// The session `req` names, with the container's runtime ID looked up, or
/// kubelet's answer when it names nothing that runs.
pub fn session<RT: RuntimeService>(
    api: &Api<RT>,
    req: &Request,
    head: &str,
    segments: &[&str],
) -> Result<Session, Response> {
    let (kind, ns, pod, uid, container) = match segments {
        [k @ ("exec" | "attach"), ns, pod, container] => (*k, *ns, *pod, None, *container),
        [k @ ("exec" | "attach"), ns, pod, uid, container] => (*k, *ns, *pod, Some(*uid), *container),
        _ => return Err(Response::text(404, "404 page not found")),
    };
    let (_, found) = crate::api::pods::find_pod(api, ns, pod)
        .filter(|(_, p)| uid.is_none_or(|u| p.metadata.uid == u))
        .ok_or_else(|| Response::text(404, "pod not found"))?;
    let status = api.node.statuses().get(&found.metadata.uid);
    let id = status
        .as_ref()
        .and_then(|s| s.container_statuses.iter().chain(&s.init_container_statuses).find(|c| c.name == container))
        .filter(|c| c.state.running.is_some())
        .map(|c| c.container_id.rsplit("://").next().unwrap_or_default().to_string())
        .filter(|id| !id.is_empty())
        .ok_or_else(|| Response::text(404, format!("container {container:?} is not running in pod {ns}/{pod}")))?;
    let flag = |k: &str| req.query.get(k).is_some_and(|v| v == "1" || v == "true");
    let (stdin, stdout, tty) = (flag("input"), flag("output"), flag("tty"));
    let stderr = flag("error") && !tty; // a terminal has no separate stderr
    if !stdin && !stdout && !stderr {
        return Err(Response::text(400, "you must specify at least one of stdin, stdout, stderr"));
    }
    if kind == "attach" {
        return Ok(Session::Attach(AttachRequest { container_id: id, stdin, tty, stdout, stderr }));
    }
    let cmd = query_all(head, "command");
    if cmd.is_empty() {
        return Err(Response::text(400, "you must specify a command"));
    }
    Ok(Session::Exec(ExecRequest { container_id: id, cmd, tty, stdin, stdout, stderr }))
}

/// The runtime's streaming URL for `session`.
pub async fn url<RT: RuntimeService>(runtime: &RT, session: Session) -> Result<String, Response> {
    let asked = match session {
        Session::Exec(r) => runtime.exec(r).await,
        Session::Attach(r) => runtime.attach(r).await,
    };
    asked.map_err(|e| Response::text(500, format!("the container runtime: {e}")))
}

/// `http://host:port/path` split; anything else (https, relative, userinfo) is refused.
fn target(url: &str) -> Option<(&str, &str)> {
    let rest = url.strip_prefix("http://")?;
    let (authority, path) = rest.split_at(rest.find('/')?);
    (!authority.is_empty() && !authority.contains('@')).then_some((authority, path))
}

/// Sends the client's upgrade to the runtime's `url` and splices the connections.
pub async fn proxy<C>(client: C, head: &str, url: &str)
where
    C: AsyncRead + AsyncWrite + Unpin,
{
    let (mut client_r, mut client_w) = smol::io::split(client);
    let Some((authority, path)) = target(url) else {
        let r = Response::text(500, format!("the container runtime's streaming URL is not plain http: {url}"));
        return respond(&mut client_w, &r).await;
    };
    let runtime = match smol::net::TcpStream::connect(authority).await {
        Ok(s) => s,
        Err(e) => {
            let r = Response::text(502, format!("the container runtime's streaming server: {e}"));
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
    let relayed = async {
        client_w.write_all(answer.as_bytes()).await?;
        client_w.write_all(b"\r\n\r\n").await?;
        client_w.write_all(&early).await?;
        client_w.flush().await
    };
    if relayed.await.is_err() || !switching {
        // Not an upgrade: what the runtime said is all the client gets, and both close.
        let _ = client_w.close().await;
        return;
    }
    let upstream = async {
        let _ = smol::io::copy(&mut client_r, &mut runtime_w).await;
        let _ = runtime_w.shutdown(std::net::Shutdown::Write); // the runtime sees the end of input
        std::future::pending::<()>().await // the session ends with the runtime's output
    };
    let downstream = async {
        let _ = smol::io::copy(&mut runtime_r, &mut client_w).await;
        let _ = client_w.close().await;
    };
    // Input ending never cuts the output short; the runtime closing ends the session.
    smol::future::or(downstream, upstream).await;
}

#[cfg(test)]
mod tests {
    use super::*;

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
