//! A konnectivity server for tests (apiserver-network-proxy's `proxy-server`), as the real one
//! behaves toward its two sides:
//! - agents: `AgentService/Connect` over TLS with ALPN h2 (grpc-go refuses anything
//!   else), the agent's `agentid` and `agentidentifiers` metadata, a bearer token checked when
//!   one is required (Unauthenticated otherwise), the reply's `serverid` and `servercount`
//!   headers; several instances behind one address, each connection given to the next;
//! - the API server: HTTP CONNECT (its egress selector's HTTPConnect mode), a backend chosen
//!   by the `destHost` strategy (an agent whose identifiers name the dialled host) then any,
//!   DIAL_REQ and its DIAL_RSP, 200 or 503 with the agent's error, then DATA both ways, a
//!   CLOSE_REQ when the API server hangs up and the connection closed on the agent's CLOSE_RSP.
//!
//! The packets are atoll's prost types (`atoll::tunnel::packet`), which a unit test there checks
//! byte by byte against the protocol's field numbers.

// Each test binary uses a part of it.
#![allow(dead_code)]

pub mod real;

use atoll::tunnel::packet::{CloseRequest, Data, DialRequest, DialResponse, Kind, Packet, Payload};
use bytes::{Buf, BufMut, Bytes, BytesMut};
use prost::Message;
use smol::io::{AsyncReadExt, AsyncWriteExt};
use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio_util::compat::FuturesAsyncReadCompatExt;

/// One agent's link, as a server instance holds it.
struct Backend {
    server_id: String,
    agent_id: String,
    /// Hosts and addresses from its `agentidentifiers`.
    hosts: Vec<String>,
    to_agent: smol::channel::Sender<Packet>,
    /// Tunnelled connections by connectID: what to write to the API server's side (None: close).
    conns: Mutex<HashMap<i64, smol::channel::Sender<Option<Bytes>>>>,
    tcp: smol::net::TcpStream,
}

struct State {
    instances: AtomicUsize,
    next: AtomicUsize,
    tls: Arc<rustls::ServerConfig>,
    token: Option<String>,
    backends: Mutex<Vec<Arc<Backend>>>,
    refusing: AtomicBool,
    dial_seq: AtomicI64,
    pending: Mutex<HashMap<i64, smol::channel::Sender<DialResponse>>>,
    /// Calls that reached the server, accepted or not.
    calls: AtomicUsize,
}

pub struct Konnectivity {
    /// The agent port (TLS, gRPC), in the namespace it was made in.
    pub agent_addr: SocketAddr,
    state: Arc<State>,
}

impl Konnectivity {
    /// `instances` server instances behind one agent port on 127.0.0.1, serving `cert`/`key`
    /// (PEM files); agents must present `token` when it is given.
    pub fn start(instances: usize, cert: &std::path::Path, key: &std::path::Path, token: Option<&str>) -> Konnectivity {
        use rustls::pki_types::pem::PemObject;
        use rustls::pki_types::{CertificateDer, PrivateKeyDer};
        let _ = rustls::crypto::ring::default_provider().install_default();
        let chain: Vec<CertificateDer<'static>> =
            CertificateDer::pem_file_iter(cert).unwrap().map(Result::unwrap).collect();
        let key = PrivateKeyDer::from_pem_file(key).unwrap();
        let mut tls = rustls::ServerConfig::builder().with_no_client_auth().with_single_cert(chain, key).unwrap();
        tls.alpn_protocols = vec![b"h2".to_vec()];
        let state = Arc::new(State {
            instances: AtomicUsize::new(instances),
            next: AtomicUsize::new(0),
            tls: Arc::new(tls),
            token: token.map(String::from),
            backends: Mutex::new(Vec::new()),
            refusing: AtomicBool::new(false),
            dial_seq: AtomicI64::new(1),
            pending: Mutex::new(HashMap::new()),
            calls: AtomicUsize::new(0),
        });
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let agent_addr = listener.local_addr().unwrap();
        let listener = smol::net::TcpListener::try_from(listener).unwrap();
        let st = state.clone();
        smol::spawn(async move {
            while let Ok((tcp, _)) = listener.accept().await {
                if st.refusing.load(Ordering::SeqCst) {
                    continue;
                }
                // As every Go server.
                let _ = tcp.set_nodelay(true);
                smol::spawn(agent(st.clone(), tcp)).detach();
            }
        })
        .detach();
        Konnectivity { agent_addr, state }
    }

    /// The API server's side: an HTTP CONNECT listener on 127.0.0.1 made in the calling
    /// thread's network namespace.
    pub fn frontend_here(&self) -> SocketAddr {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let listener = smol::net::TcpListener::try_from(listener).unwrap();
        let st = self.state.clone();
        smol::spawn(async move {
            while let Ok((tcp, _)) = listener.accept().await {
                let _ = tcp.set_nodelay(true);
                smol::spawn(frontend(st.clone(), tcp)).detach();
            }
        })
        .detach();
        addr
    }

    /// The links held: (serverID, agentID, identifiers' hosts).
    pub fn links(&self) -> Vec<(String, String, Vec<String>)> {
        let backends = self.state.backends.lock().unwrap();
        backends.iter().map(|b| (b.server_id.clone(), b.agent_id.clone(), b.hosts.clone())).collect()
    }

    /// How many calls reached the server (a token arrives only with one).
    pub fn calls(&self) -> usize {
        self.state.calls.load(Ordering::SeqCst)
    }

    /// How many instances the server says there are, from the next link on.
    pub fn set_instances(&self, n: usize) {
        self.state.instances.store(n, Ordering::SeqCst);
    }

    /// Every link cut, and new ones refused while `refuse` holds (the server is down).
    pub fn cut(&self, refuse: bool) {
        self.state.refusing.store(refuse, Ordering::SeqCst);
        for b in self.state.backends.lock().unwrap().drain(..) {
            let _ = b.tcp.shutdown(std::net::Shutdown::Both);
        }
    }

    /// Takes agents again.
    pub fn resume(&self) {
        self.state.refusing.store(false, Ordering::SeqCst);
    }
}

/// gRPC's frame: flag 0, a big-endian length, the message.
fn frame(p: &Packet) -> Bytes {
    let mut b = BytesMut::with_capacity(5 + p.encoded_len());
    b.put_u8(0);
    b.put_u32(p.encoded_len() as u32);
    p.encode(&mut b).unwrap();
    b.freeze()
}

fn trailers_only(code: u32, message: &str) -> http::Response<()> {
    http::Response::builder()
        .status(200)
        .header("content-type", "application/grpc")
        .header("grpc-status", code.to_string())
        .header("grpc-message", message)
        .body(())
        .unwrap()
}

/// One agent connection: TLS, HTTP/2, the Connect call, its packets.
async fn agent(state: Arc<State>, tcp: smol::net::TcpStream) {
    let instances = state.instances.load(Ordering::SeqCst);
    let instance = state.next.fetch_add(1, Ordering::SeqCst) % instances;
    let server_id = format!("test-konnectivity-{instance}");
    let Ok(tls) = futures_rustls::TlsAcceptor::from(state.tls.clone()).accept(tcp.clone()).await else { return };
    if tls.get_ref().1.alpn_protocol() != Some(b"h2") {
        return;
    }
    // grpc-go grows its windows by BDP estimation; these are where a fast link takes them.
    let handshake = h2::server::Builder::new()
        .initial_window_size(1 << 20)
        .initial_connection_window_size(2 << 20)
        .handshake(tls.compat());
    let Ok(mut conn) = handshake.await else { return };
    let mut mine = Vec::new();
    while let Some(Ok((req, mut respond))) = conn.accept().await {
        state.calls.fetch_add(1, Ordering::SeqCst);
        let header = |k: &str| req.headers().get(k).and_then(|v| v.to_str().ok()).unwrap_or("").to_string();
        if req.uri().path() != "/AgentService/Connect" {
            let _ = respond.send_response(trailers_only(12, "unknown method"), true);
            continue;
        }
        if let Some(token) = &state.token {
            if header("authorization") != format!("Bearer {token}") {
                let _ = respond.send_response(trailers_only(16, "Failed to validate authentication token"), true);
                continue;
            }
        }
        let hosts: Vec<String> = header("agentidentifiers")
            .split('&')
            .filter_map(|kv| kv.split_once('='))
            .filter(|(k, _)| ["host", "ipv4", "ipv6"].contains(k))
            .map(|(_, v)| v.replace("%3A", ":"))
            .collect();
        let reply = http::Response::builder()
            .status(200)
            .header("content-type", "application/grpc")
            .header("serverid", server_id.as_str())
            .header("servercount", instances.to_string())
            .body(())
            .unwrap();
        let Ok(mut send) = respond.send_response(reply, false) else { continue };
        let (to_agent, outbox) = smol::channel::unbounded::<Packet>();
        let backend = Arc::new(Backend {
            server_id: server_id.clone(),
            agent_id: header("agentid"),
            hosts,
            to_agent,
            conns: Mutex::new(HashMap::new()),
            tcp: tcp.clone(),
        });
        state.backends.lock().unwrap().push(backend.clone());
        mine.push(backend.clone());
        smol::spawn(async move {
            while let Ok(p) = outbox.recv().await {
                if send.send_data(frame(&p), false).is_err() {
                    return;
                }
            }
        })
        .detach();
        smol::spawn(from_agent(state.clone(), backend, req.into_body())).detach();
    }
    // The connection is gone: so are its links and their connections.
    state.backends.lock().unwrap().retain(|b| !mine.iter().any(|m| Arc::ptr_eq(b, m)));
    for b in mine {
        for (_, c) in b.conns.lock().unwrap().drain() {
            let _ = c.try_send(None);
        }
    }
}

async fn from_agent(state: Arc<State>, backend: Arc<Backend>, mut body: h2::RecvStream) {
    let mut buf = BytesMut::new();
    while let Some(Ok(chunk)) = body.data().await {
        let _ = body.flow_control().release_capacity(chunk.len());
        buf.extend_from_slice(&chunk);
        while buf.len() >= 5 {
            let len = u32::from_be_bytes([buf[1], buf[2], buf[3], buf[4]]) as usize;
            if buf.len() < 5 + len {
                break;
            }
            buf.advance(5);
            let Ok(p) = Packet::decode(buf.split_to(len).freeze()) else { return };
            match p.payload {
                Some(Payload::DialResponse(r)) => {
                    if let Some(waiting) = state.pending.lock().unwrap().remove(&r.random) {
                        let _ = waiting.try_send(r);
                    }
                }
                Some(Payload::Data(d)) => {
                    let conn = backend.conns.lock().unwrap().get(&d.connect_id).cloned();
                    if let Some(c) = conn {
                        let _ = c.send(Some(d.data)).await;
                    }
                }
                Some(Payload::CloseResponse(c)) => {
                    if let Some(conn) = backend.conns.lock().unwrap().remove(&c.connect_id) {
                        let _ = conn.try_send(None);
                    }
                }
                _ => {}
            }
        }
    }
}

/// One HTTP CONNECT from the API server.
async fn frontend(state: Arc<State>, mut tcp: smol::net::TcpStream) {
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        if head.len() > 8192 || tcp.read(&mut byte).await.unwrap_or(0) == 0 {
            return;
        }
        head.push(byte[0]);
    }
    let head = String::from_utf8_lossy(&head).into_owned();
    let mut words = head.split_whitespace();
    let (Some("CONNECT"), Some(address)) = (words.next(), words.next()) else {
        let _ = tcp.write_all(b"HTTP/1.1 405 Method Not Allowed\r\n\r\n").await;
        return;
    };
    let host = address.rsplit_once(':').map_or(address, |(h, _)| h).trim_matches(['[', ']']).to_string();
    let backend = {
        let backends = state.backends.lock().unwrap();
        let by_host = backends.iter().find(|b| b.hosts.contains(&host)).cloned();
        by_host.or_else(|| backends.first().cloned())
    };
    let refuse =
        |why: String| format!("HTTP/1.1 503 Service Unavailable\r\nContent-Length: {}\r\n\r\n{why}", why.len());
    let Some(backend) = backend else {
        let _ = tcp.write_all(refuse("No agent available".into()).as_bytes()).await;
        return;
    };
    let random = state.dial_seq.fetch_add(1, Ordering::SeqCst);
    let (answer, answered) = smol::channel::bounded(1);
    state.pending.lock().unwrap().insert(random, answer);
    let dial = DialRequest { protocol: "tcp".into(), address: address.to_string(), random };
    let _ = backend.to_agent.send(Packet::new(Kind::DialReq, Payload::DialRequest(dial))).await;
    let reply = smol::future::or(async { answered.recv().await.ok() }, async {
        smol::Timer::after(Duration::from_secs(10)).await;
        None
    })
    .await;
    let id = match reply {
        Some(r) if r.error.is_empty() => r.connect_id,
        Some(r) => return drop(tcp.write_all(refuse(r.error).as_bytes()).await),
        None => return drop(tcp.write_all(refuse("dial timeout".into()).as_bytes()).await),
    };
    let (to_frontend, inbox) = smol::channel::bounded::<Option<Bytes>>(64);
    backend.conns.lock().unwrap().insert(id, to_frontend);
    if tcp.write_all(b"HTTP/1.1 200 Connection established\r\n\r\n").await.is_err() {
        return;
    }
    let up = {
        let (mut tcp, backend) = (tcp.clone(), backend.clone());
        async move {
            let mut buf = vec![0u8; 32 << 10];
            while let Ok(n @ 1..) = tcp.read(&mut buf).await {
                let data = Data { connect_id: id, error: String::new(), data: Bytes::copy_from_slice(&buf[..n]) };
                if backend.to_agent.send(Packet::new(Kind::Data, Payload::Data(data))).await.is_err() {
                    return;
                }
            }
            let close = Packet::new(Kind::CloseReq, Payload::CloseRequest(CloseRequest { connect_id: id }));
            let _ = backend.to_agent.send(close).await;
        }
    };
    let down = {
        let mut tcp = tcp.clone();
        async move {
            while let Ok(Some(data)) = inbox.recv().await {
                if tcp.write_all(&data).await.is_err() {
                    break;
                }
            }
            let _ = tcp.shutdown(std::net::Shutdown::Both);
        }
    };
    smol::future::zip(up, down).await;
    backend.conns.lock().unwrap().remove(&id);
}
