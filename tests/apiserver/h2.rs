//! HTTP/2 for the test API server, as kube-apiserver offers it (ALPN `h2` beside
//! `http/1.1`; Go's clients, kubectl's and kubelet's, choose it): each stream is one request,
//! answered as over HTTP/1.1 (`decide`, `route`); a watch sends each event as DATA; a request
//! for the node (logs, `nodes/proxy`) is relayed from the kubelet's HTTP/1.1 answer (HTTP/2
//! has no upgrade: kubectl's exec and port-forward ask for HTTP/1.1).
//!
//! TLS stays the blocking rustls of the HTTP/1.1 path (bytes counted under it the same way),
//! bridged to the HTTP/2 code over a socket pair by two pump threads.

use super::{decide, node_proxy, record, stream_watch, Counting, Events, Outcome, Reply, Request, State};
use bytes::Bytes;
use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};
use std::time::Instant;
use tokio_util::compat::FuturesAsyncReadCompatExt;

type Tls = rustls::StreamOwned<rustls::ServerConnection, Counting>;

pub(super) fn serve(state: &Arc<State>, tls: Tls, cert_user: Option<String>, id: u64) {
    let Ok((ours, theirs)) = UnixStream::pair() else { return };
    let rustls::StreamOwned { conn, sock } = tls;
    let Ok(tcp_in) = sock.inner.try_clone() else { return };
    let _ = tcp_in.set_read_timeout(None);
    let mut from_client = Counting { inner: tcp_in, state: state.clone() };
    let shared = Arc::new(Mutex::new((conn, sock)));
    // Client → TLS → plaintext → the HTTP/2 side.
    let pump_in = {
        let shared = shared.clone();
        let mut to_h2 = ours.try_clone().unwrap();
        let state = state.clone();
        std::thread::spawn(move || {
            let mut buf = vec![0u8; 64 << 10];
            let mut plain = vec![0u8; 64 << 10];
            loop {
                let n = from_client.read(&mut buf).unwrap_or(0);
                if n == 0 {
                    break;
                }
                if state.silent.lock().unwrap().contains(&id) {
                    continue;
                }
                let mut got = Vec::new();
                {
                    let mut g = shared.lock().unwrap();
                    let (conn, sock) = &mut *g;
                    let mut rd = &buf[..n];
                    let mut failed = false;
                    while !rd.is_empty() && !failed {
                        failed = conn.read_tls(&mut rd).is_err() || conn.process_new_packets().is_err();
                        while let Ok(k) = conn.reader().read(&mut plain) {
                            if k == 0 {
                                break;
                            }
                            got.extend_from_slice(&plain[..k]);
                        }
                    }
                    while conn.wants_write() {
                        if conn.write_tls(sock).is_err() {
                            break;
                        }
                    }
                    if failed {
                        break;
                    }
                }
                if to_h2.write_all(&got).is_err() {
                    break;
                }
            }
            let _ = to_h2.shutdown(std::net::Shutdown::Write);
        })
    };
    // The HTTP/2 side → TLS → client.
    let pump_out = {
        let shared = shared.clone();
        let mut from_h2 = ours;
        let state = state.clone();
        std::thread::spawn(move || {
            let mut buf = vec![0u8; 64 << 10];
            loop {
                let n = from_h2.read(&mut buf).unwrap_or(0);
                if n > 0 && state.silent.lock().unwrap().contains(&id) {
                    continue;
                }
                let mut g = shared.lock().unwrap();
                let (conn, sock) = &mut *g;
                if n == 0 {
                    conn.send_close_notify();
                } else if conn.writer().write_all(&buf[..n]).is_err() {
                    return;
                }
                while conn.wants_write() {
                    if conn.write_tls(sock).is_err() {
                        return;
                    }
                }
                if n == 0 {
                    let _ = sock.inner.shutdown(std::net::Shutdown::Write);
                    return;
                }
            }
        })
    };
    let io = smol::Async::new(theirs).unwrap();
    smol::block_on(async {
        let Ok(mut conn) = h2::server::handshake(io.compat()).await else { return };
        while let Some(Ok((req, respond))) = conn.accept().await {
            let (state, cert_user) = (state.clone(), cert_user.clone());
            std::thread::spawn(move || one_stream(&state, req, respond, cert_user.as_deref()));
        }
    });
    let _ = pump_in.join();
    let _ = pump_out.join();
}

/// A JSON answer: head and body.
fn send_json(
    respond: &mut h2::server::SendResponse<Bytes>,
    (content_type, bytes): (&'static str, Vec<u8>),
    status: u16,
    ra: Option<u64>,
) {
    let mut head = http::Response::builder().status(status);
    for (k, v) in super::answer_headers(content_type, Some(bytes.len()), ra) {
        head = head.header(k.to_ascii_lowercase(), v);
    }
    if let Ok(mut stream) = respond.send_response(head.body(()).unwrap(), false) {
        let _ = stream.send_data(Bytes::from(bytes), true);
    }
}

fn one_stream(
    state: &Arc<State>,
    req: http::Request<h2::RecvStream>,
    mut respond: h2::server::SendResponse<Bytes>,
    cert_user: Option<&str>,
) {
    let (parts, mut body) = req.into_parts();
    let bytes = smol::block_on(async {
        let mut all = Vec::new();
        while let Some(Ok(chunk)) = body.data().await {
            let _ = body.flow_control().release_capacity(chunk.len());
            all.extend_from_slice(&chunk);
        }
        all
    });
    let lines: Vec<(String, String)> = parts
        .headers
        .iter()
        .map(|(k, v)| (k.as_str().to_string(), v.to_str().unwrap_or_default().to_string()))
        .collect();
    let req = Request {
        proto: "HTTP/2",
        method: parts.method.to_string(),
        path: parts.uri.path_and_query().map_or("/", |p| p.as_str()).to_string(),
        headers: lines.iter().cloned().collect(),
        lines,
        body: bytes,
    };
    let arrived = Instant::now();
    let Some((user, outcome)) = decide(state, &req, cert_user) else {
        respond.send_reset(h2::Reason::REFUSED_STREAM);
        return;
    };
    let user = user.unwrap_or_default();
    match outcome {
        Outcome::Reply(Reply::Json(status, body), ra) => {
            let answer = super::encoded(req.headers.get("accept").map(String::as_str), &body);
            record(state, &req, arrived, status, &user, answer.1.len());
            send_json(&mut respond, answer, status, ra);
        }
        Outcome::Reply(Reply::Watch(mut asked), _) => {
            let limit = state.faults.lock().unwrap().watch_limit;
            asked.timeout = limit.map_or(asked.timeout, |l| l.min(asked.timeout));
            record(state, &req, arrived, 200, &user, 0);
            let mut head = http::Response::builder().status(200);
            for (k, v) in super::answer_headers("application/json", None, None) {
                head = head.header(k.to_ascii_lowercase(), v);
            }
            if let Ok(stream) = respond.send_response(head.body(()).unwrap(), false) {
                let _ = stream_watch(state, &mut Data(stream), &asked);
            }
        }
        Outcome::Proxy(t) => {
            let mut node = match node_proxy::open(state, &req, &t) {
                Ok(node) => node,
                Err(Reply::Json(status, body)) => {
                    let answer = super::encoded(None, &body);
                    record(state, &req, arrived, status, &user, answer.1.len());
                    return send_json(&mut respond, answer, status, None);
                }
                Err(_) => return,
            };
            let stream = std::cell::RefCell::new(None);
            let status = node_proxy::relay(
                &mut node,
                |status, content_type| {
                    let head = http::Response::builder().status(status).header("content-type", content_type);
                    let sent = respond.send_response(head.body(()).unwrap(), false).map_err(std::io::Error::other)?;
                    *stream.borrow_mut() = Some(sent);
                    Ok(())
                },
                |piece| {
                    let mut s = stream.borrow_mut();
                    let s = s.as_mut().ok_or_else(|| std::io::Error::other("no head"))?;
                    s.send_data(Bytes::copy_from_slice(piece), false).map_err(std::io::Error::other)
                },
            );
            if let Some(s) = stream.borrow_mut().as_mut() {
                let _ = s.send_data(Bytes::new(), true);
            }
            record(state, &req, arrived, status.unwrap_or(502), &user, 0);
        }
    }
}

/// A watch's answer over HTTP/2: one DATA frame per event.
struct Data(h2::SendStream<Bytes>);

impl Events for Data {
    fn event(&mut self, event: serde_json::Value) -> std::io::Result<usize> {
        let mut line = serde_json::to_vec(&event).unwrap();
        line.push(b'\n');
        let n = line.len();
        self.0.send_data(Bytes::from(line), false).map_err(std::io::Error::other)?;
        // A client gone (the stream reset) shows here, as a failed write would over HTTP/1.1.
        match self.0.poll_reset(&mut Context::from_waker(Waker::noop())) {
            Poll::Ready(r) => Err(std::io::Error::other(format!("the client reset the stream: {r:?}"))),
            Poll::Pending => Ok(n),
        }
    }

    fn end(&mut self) -> std::io::Result<()> {
        self.0.send_data(Bytes::new(), true).map_err(std::io::Error::other)
    }
}
