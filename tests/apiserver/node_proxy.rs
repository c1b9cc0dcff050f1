//! What kube-apiserver does between kubectl and a node: `pods/log`, `pods/exec`,
//! `pods/attach`, `pods/portforward` and `nodes/proxy` are sent to the node's kubelet endpoint
//! (the node object's InternalIP and `daemonEndpoints.kubeletEndpoint.Port`) over TLS with the
//! API server's kubelet client certificate, the node's serving certificate checked against
//! `--kubelet-certificate-authority`; the paths and query are mapped as the API server's
//! `LogLocation`, `ExecLocation`, `AttachLocation` and `PortForwardLocation` map them, and the
//! bytes are spliced both ways (an upgrade through to the end of the session).
//!
//! WebSocket upgrades for exec, attach and port-forward are refused (400): a real API server
//! translates them to SPDY for a node that does not declare `ExtendWebSocketsToKubelet`, and
//! this one does not implement the translator, so kubectl falls back to SPDY, which is what a
//! node without that feature receives from every API server either way.

use super::{fail, status_obj, Counting, Reply, Request, State, Target};
use rustls::pki_types::ServerName;
use std::io::{Read, Write};
use std::os::fd::AsFd;
use std::sync::Arc;

/// Whether `t` is a subresource the API server sends on to the node.
pub(super) fn proxied(t: &Target) -> bool {
    matches!(
        (t.resource, t.subresource.as_str()),
        ("pods", "log" | "exec" | "attach" | "portforward") | ("nodes", "proxy")
    ) && !t.name.is_empty()
}

/// The kubelet path and query for `t`, and the node it is on; or the API server's answer.
fn location(state: &State, req: &Request, t: &Target) -> Result<(String, String), Reply> {
    let store = state.store.lock().unwrap();
    let raw_query = req.path.split_once('?').map_or("", |(_, q)| q);
    let params: Vec<(&str, &str)> =
        raw_query.split('&').filter(|s| !s.is_empty()).map(|kv| kv.split_once('=').unwrap_or((kv, ""))).collect();
    if t.resource == "nodes" {
        let rest = req.path.split_once("/proxy").map_or("", |(_, r)| r);
        let rest = rest.split_once('?').map_or(rest, |(p, _)| p);
        let path = if rest.is_empty() { "/".to_string() } else { rest.to_string() };
        let query = if raw_query.is_empty() { String::new() } else { format!("?{raw_query}") };
        return Ok((format!("{path}{query}"), t.name.clone()));
    }
    let Some(pod) = store.objects.get(&("pods", t.namespace.clone(), t.name.clone())) else {
        return Err(fail(404, "NotFound", format!("pods \"{}\" not found", t.name)));
    };
    let node = pod["spec"]["nodeName"].as_str().unwrap_or_default().to_string();
    if node.is_empty() {
        return Err(fail(400, "BadRequest", format!("pod {} does not have a host assigned", t.name)));
    }
    let names: Vec<&str> =
        pod["spec"]["containers"].as_array().into_iter().flatten().filter_map(|c| c["name"].as_str()).collect();
    let asked = params.iter().find(|(k, _)| *k == "container").map(|(_, v)| *v);
    let container = match (asked, names.as_slice()) {
        (Some(c), _) => c.to_string(),
        (None, [only]) => only.to_string(),
        (None, _) if t.subresource == "portforward" => String::new(),
        (None, _) => {
            let msg = format!("a container name must be specified for pod {}, choose one of: {names:?}", t.name);
            return Err(fail(400, "BadRequest", msg));
        }
    };
    let flag = |k: &str| params.iter().any(|(key, v)| *key == k && (*v == "true" || *v == "1"));
    let mut query: Vec<String> = Vec::new();
    let kind = match t.subresource.as_str() {
        "log" => {
            // PodLogOptions' fields only (the request's own `timeout` and the like stay here).
            let fields =
                ["follow", "previous", "timestamps", "sinceSeconds", "sinceTime", "tailLines", "limitBytes", "stream"];
            for (k, v) in params.iter().filter(|(k, _)| fields.contains(k)) {
                query.push(format!("{k}={v}"));
            }
            "containerLogs"
        }
        "exec" | "attach" => {
            for (k, v) in params.iter().filter(|(k, _)| *k == "command") {
                query.push(format!("{k}={v}"));
            }
            for (theirs, kubelets) in [("stdin", "input"), ("stdout", "output"), ("stderr", "error"), ("tty", "tty")] {
                if flag(theirs) {
                    query.push(format!("{kubelets}=1"));
                }
            }
            if t.subresource == "exec" {
                "exec"
            } else {
                "attach"
            }
        }
        _ => {
            for (_, v) in params.iter().filter(|(k, _)| *k == "ports") {
                query.push(format!("port={v}"));
            }
            "portForward"
        }
    };
    let mut path = format!("/{kind}/{}/{}", t.namespace, t.name);
    if kind != "portForward" {
        path.push('/');
        path.push_str(&container);
    }
    if !query.is_empty() {
        path.push('?');
        path.push_str(&query.join("&"));
    }
    Ok((path, node))
}

/// The node's kubelet endpoint, as its status publishes it.
fn endpoint(state: &State, node: &str) -> Option<String> {
    let store = state.store.lock().unwrap();
    let n = store.objects.get(&("nodes", String::new(), node.to_string()))?;
    let port = n["status"]["daemonEndpoints"]["kubeletEndpoint"]["Port"].as_u64().filter(|p| *p > 0)?;
    let addresses = n["status"]["addresses"].as_array()?;
    let ip = ["InternalIP", "Hostname", "ExternalIP"]
        .iter()
        .find_map(|ty| addresses.iter().find(|a| a["type"] == *ty).and_then(|a| a["address"].as_str()))?;
    Some(if ip.contains(':') { format!("[{ip}]:{port}") } else { format!("{ip}:{port}") })
}

/// Serves one proxied request on `tls`, which it consumes.
pub(super) fn serve(
    state: &Arc<State>,
    mut tls: rustls::StreamOwned<rustls::ServerConnection, Counting>,
    req: &Request,
    t: &Target,
) -> u16 {
    let websocket = req.headers.get("upgrade").is_some_and(|u| u.eq_ignore_ascii_case("websocket"));
    let opened = if websocket && t.resource == "pods" && t.subresource != "log" {
        let msg = "this API server does not translate WebSocket streams for nodes; use SPDY";
        Err(Reply::Json(400, status_obj(400, "BadRequest", msg)))
    } else {
        open(state, req, t)
    };
    match opened {
        Ok(node) => {
            let _ = splice(tls, node);
            101
        }
        Err(Reply::Json(status, body)) => {
            let _ = super::write_json(&mut tls, None, status, &body, None);
            status
        }
        Err(_) => 500,
    }
}

/// The request sent on to the node's kubelet: its TLS connection with the request written,
/// or the API server's answer when it cannot be.
pub(super) fn open(
    state: &State,
    req: &Request,
    t: &Target,
) -> Result<rustls::StreamOwned<rustls::ClientConnection, NodeStream>, Reply> {
    let (path, node) = location(state, req, t)?;
    let Some(addr) = endpoint(state, &node) else {
        let msg = format!("node {node:?} publishes no kubelet endpoint");
        return Err(Reply::Json(503, status_obj(503, "ServiceUnavailable", &msg)));
    };
    let Some(client) = state.kubelet_client.lock().unwrap().clone() else {
        let msg = "the test API server has no kubelet client certificate (ApiServer::kubelet_client)";
        return Err(Reply::Json(500, status_obj(500, "InternalError", msg)));
    };
    let dialed = dial(state, &addr).map_err(|e| e.to_string()).and_then(|s| {
        let host = addr.rsplit_once(':').map_or(addr.as_str(), |(h, _)| h).trim_matches(['[', ']']);
        let name = ServerName::try_from(host.to_string()).map_err(|e| e.to_string())?;
        Ok((s, rustls::ClientConnection::new(client, name).map_err(|e| e.to_string())?))
    });
    let (node_sock, node_conn) = dialed.map_err(|e| {
        let msg = format!("error dialing backend: {addr}: {e}");
        Reply::Json(502, status_obj(502, "InternalError", &msg))
    })?;
    let mut head = format!("{} {path} HTTP/1.1\r\nHost: {addr}\r\n", req.method);
    for (k, v) in &req.lines {
        let forwarded = ["connection", "upgrade", "x-stream-protocol-version", "content-type"].contains(&k.as_str())
            || k.starts_with("sec-websocket-");
        if forwarded {
            head.push_str(&format!("{k}: {v}\r\n"));
        }
    }
    if !req.headers.contains_key("upgrade") {
        head.push_str("Connection: close\r\n");
    }
    head.push_str(&format!("Content-Length: {}\r\n\r\n", req.body.len()));
    let mut node = rustls::StreamOwned::new(node_conn, node_sock);
    if node.write_all(head.as_bytes()).and_then(|_| node.write_all(&req.body)).and_then(|_| node.flush()).is_err() {
        let msg = format!("error dialing backend: TLS to {addr}");
        return Err(Reply::Json(502, status_obj(502, "InternalError", &msg)));
    }
    Ok(node)
}

/// The node's HTTP/1.1 answer, read for an HTTP/2 client: its status and content type, then
/// its body piece by piece (chunked, sized or to the end) through `each`.
pub(super) fn relay(
    node: &mut impl Read,
    mut head: impl FnMut(u16, &str) -> std::io::Result<()>,
    mut each: impl FnMut(&[u8]) -> std::io::Result<()>,
) -> std::io::Result<u16> {
    let text = read_head(node)?;
    let status: u16 = text.split(' ').nth(1).and_then(|s| s.parse().ok()).unwrap_or(502);
    let header = |name: &str| {
        text.lines()
            .skip(1)
            .filter_map(|l| l.split_once(':'))
            .find(|(k, _)| k.trim().eq_ignore_ascii_case(name))
            .map(|(_, v)| v.trim().to_string())
    };
    head(status, &header("content-type").unwrap_or_else(|| "text/plain".into()))?;
    let mut buf = vec![0u8; 32 << 10];
    if header("transfer-encoding").is_some_and(|t| t.eq_ignore_ascii_case("chunked")) {
        loop {
            let size_line = read_line(node)?;
            let size = usize::from_str_radix(size_line.split(';').next().unwrap_or("").trim(), 16)
                .map_err(|_| std::io::Error::other("a bad chunk size"))?;
            if size == 0 {
                return Ok(status);
            }
            let mut chunk = vec![0u8; size];
            node.read_exact(&mut chunk)?;
            each(&chunk)?;
            read_line(node)?;
        }
    }
    let mut left = header("content-length").and_then(|l| l.parse::<usize>().ok()).unwrap_or(usize::MAX);
    while left > 0 {
        let n = match node.read(&mut buf[..left.min(32 << 10)]) {
            Ok(0) | Err(_) => return Ok(status),
            Ok(n) => n,
        };
        each(&buf[..n])?;
        left -= n;
    }
    Ok(status)
}

fn read_head(r: &mut impl Read) -> std::io::Result<String> {
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        if r.read(&mut byte)? == 0 || head.len() > 64 << 10 {
            return Err(std::io::Error::other("no answer head from the node"));
        }
        head.push(byte[0]);
    }
    Ok(String::from_utf8_lossy(&head).into_owned())
}

fn read_line(r: &mut impl Read) -> std::io::Result<String> {
    let mut line = Vec::new();
    let mut byte = [0u8; 1];
    while !line.ends_with(b"\r\n") {
        if r.read(&mut byte)? == 0 || line.len() > 1024 {
            return Err(std::io::Error::other("a chunk cut short"));
        }
        line.push(byte[0]);
    }
    Ok(String::from_utf8_lossy(&line).into_owned())
}

/// Where the egress proxy listens.
#[derive(Clone, Debug)]
pub enum Egress {
    Tcp(std::net::SocketAddr),
    Unix(std::path::PathBuf),
}

/// A connection to a node, over TCP or through a unix socket's proxy.
pub trait NodeSocket: Read + Write + std::os::fd::AsFd + Send {}
impl<T: Read + Write + std::os::fd::AsFd + Send> NodeSocket for T {}
pub type NodeStream = Box<dyn NodeSocket>;

/// A connection to the node's `addr`: dialled, or through the egress proxy.
fn dial(state: &State, addr: &str) -> std::io::Result<NodeStream> {
    let egress = state.egress.lock().unwrap().clone();
    match egress {
        Some(Egress::Unix(socket)) => {
            Ok(Box::new(connect_through(std::os::unix::net::UnixStream::connect(socket)?, addr)?))
        }
        Some(Egress::Tcp(proxy)) => Ok(Box::new(dial_node(addr, Some(proxy))?)),
        None => Ok(Box::new(dial_node(addr, None)?)),
    }
}

/// A connection to `addr`, without Nagle's wait as Go dials: straight, or through `proxy`
/// (HTTP CONNECT, its 200 read before anything else is sent, as kube-apiserver's egress
/// selector in HTTPConnect mode).
pub fn dial_node(addr: &str, proxy: Option<std::net::SocketAddr>) -> std::io::Result<std::net::TcpStream> {
    let s = match proxy {
        None => std::net::TcpStream::connect(addr)?,
        Some(proxy) => std::net::TcpStream::connect(proxy)?,
    };
    s.set_nodelay(true)?;
    match proxy {
        None => Ok(s),
        Some(_) => connect_through(s, addr),
    }
}

/// An HTTP CONNECT to `addr` on `s`; `s` once the proxy answered 200.
fn connect_through<S: Read + Write>(mut s: S, addr: &str) -> std::io::Result<S> {
    s.write_all(format!("CONNECT {addr} HTTP/1.1\r\nHost: {addr}\r\n\r\n").as_bytes())?;
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") && head.len() < 8192 {
        if s.read(&mut byte)? == 0 {
            break;
        }
        head.push(byte[0]);
    }
    let head = String::from_utf8_lossy(&head);
    match head.split(' ').nth(1) {
        Some("200") => Ok(s),
        _ => Err(std::io::Error::other(format!("the egress proxy answered {head:?}"))),
    }
}

/// Copies plaintext both ways between two TLS connections until both have ended; when one
/// side ends, the other is told (close_notify and a TCP half-close) and the rest still flows.
fn splice(
    a: rustls::StreamOwned<rustls::ServerConnection, Counting>,
    b: rustls::StreamOwned<rustls::ClientConnection, NodeStream>,
) -> std::io::Result<()> {
    let (mut a_conn, mut a_sock) = (rustls::Connection::from(a.conn), a.sock);
    let (mut b_conn, mut b_sock) = (rustls::Connection::from(b.conn), b.sock);
    a_conn.set_buffer_limit(None);
    b_conn.set_buffer_limit(None);
    a_sock.inner.set_read_timeout(None)?;
    let mut ended = [false, false];
    let mut buf = vec![0u8; 64 << 10];
    loop {
        while a_conn.wants_write() {
            a_conn.write_tls(&mut a_sock)?;
        }
        while b_conn.wants_write() {
            b_conn.write_tls(&mut b_sock)?;
        }
        if ended == [true, true] {
            return Ok(());
        }
        // Only the sides still sending are waited on (an ended one would poll ready forever).
        let mut fds = Vec::new();
        let mut sides = Vec::new();
        if !ended[0] {
            fds.push(rustix::event::PollFd::new(&a_sock.inner, rustix::event::PollFlags::IN));
            sides.push(0);
        }
        if !ended[1] {
            fds.push(rustix::event::PollFd::new(&b_sock, rustix::event::PollFlags::IN));
            sides.push(1);
        }
        rustix::event::poll(&mut fds, None)?;
        let mut ready = [false, false];
        for (fd, side) in fds.iter().zip(&sides) {
            ready[*side] = !fd.revents().is_empty();
        }
        drop(fds);
        for side in 0..2 {
            if !ready[side] {
                continue;
            }
            let (from, from_sock, to): (&mut rustls::Connection, &mut dyn Read, &mut rustls::Connection) = if side == 0
            {
                (&mut a_conn, &mut a_sock, &mut b_conn)
            } else {
                (&mut b_conn, &mut b_sock, &mut a_conn)
            };
            let n = from.read_tls(from_sock).unwrap_or(0);
            if from.process_new_packets().is_err() {
                return Ok(());
            }
            let mut closed = n == 0;
            loop {
                match from.reader().read(&mut buf) {
                    Ok(0) => {
                        closed = true;
                        break;
                    }
                    Ok(k) => to.writer().write_all(&buf[..k])?,
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                    Err(_) => {
                        closed = true;
                        break;
                    }
                }
            }
            if closed && !ended[side] {
                ended[side] = true;
                to.send_close_notify();
                while to.wants_write() {
                    if side == 0 {
                        to.write_tls(&mut b_sock)?;
                    } else {
                        to.write_tls(&mut a_sock)?;
                    }
                }
                let sock = if side == 0 { b_sock.as_fd() } else { a_sock.inner.as_fd() };
                let _ = rustix::net::shutdown(sock, rustix::net::Shutdown::Write);
            }
        }
    }
}
