//! One link to one konnectivity server instance: TLS to the agent port, the
//! `AgentService/Connect` call (the upstream proto has no package, so the path has none) with
//! the node's identity, then the server's packets served until the link drops. A DIAL_REQ the
//! policy allows opens a TCP connection to the kubelet server; DATA goes both ways; CLOSE_REQ,
//! or the kubelet server closing, ends one connection with a CLOSE_RSP.
//!
//! The protocol has no per-connection flow control: the server's packets for every
//! connection arrive on one stream. The link never stops reading it for one connection:
//! each connection queues what the kubelet server has not taken yet, and a connection that
//! falls [`MAX_QUEUED`] behind is closed (counted), so a stuck upload cannot stall the other
//! sessions (the upstream agent blocks the whole link instead). Outbound, everything goes
//! through the link's `outbox`: one writer, whole messages, each connection a few packets
//! at a time, in turn.

use super::outbox::{self, Budget, Outbox};
use super::packet::{DialResponse, Kind, Packet, Payload};
use super::policy::{check_dial, Destination};
use super::settings::Settings;
use crate::cri::grpc::bidi::{open_bidi, Outbound};
use crate::cri::grpc::Replies;
use bytes::Bytes;
use smol::io::{AsyncReadExt, AsyncWriteExt};
use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// The gRPC method the agent calls.
const CONNECT: &str = "/AgentService/Connect";
/// The largest packet either way (the server's DATA are at most a few tens of KiB).
const MAX_PACKET: usize = 4 << 20;
/// What a connection may have queued for the kubelet server before it is closed.
pub const MAX_QUEUED: usize = 4 << 20;
/// One read from the kubelet server, sent as one DATA packet.
const READ_SIZE: usize = 32 << 10;
/// How long a dial of the kubelet server, or a connect to the konnectivity server, may take.
const DIAL_TIMEOUT: Duration = Duration::from_secs(5);
const CONNECT_TIMEOUT: Duration = Duration::from_secs(15);
/// How long a keepalive PING waits for its PONG (gRPC's default keepalive timeout), and how
/// long the link may be unable to send before it is replaced.
const PING_TIMEOUT: Duration = Duration::from_secs(20);

/// An open link, its call not yet served.
pub struct Link {
    pub server_id: String,
    /// How many server instances the server says there are (at least 1).
    pub server_count: usize,
    send: Outbound,
    recv: Replies,
    ping: Option<h2::PingPong>,
}

/// The TLS client for the agent port: the configured CA, the agent's certificate if given,
/// ALPN h2 (gRPC servers require it). Reads files: call it off the executor.
pub fn tls_config(s: &Settings) -> Result<Arc<rustls::ClientConfig>, String> {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::PrivateKeyDer;
    let read = |field: &str, path: &std::path::Path| {
        crate::bounded::read_following(path, 4 << 20)
            .map_err(|e| format!("konnectivity.{field}: {}: {e}", path.display()))
    };
    let roots = crate::tls::pem_roots(&read("caCert", &s.ca_cert)?)
        .ok_or_else(|| format!("konnectivity.caCert: {}: no usable PEM certificate", s.ca_cert.display()))?;
    let identity = match &s.agent_cert {
        None => None,
        Some((cert, key)) => {
            let certs = crate::tls::pem_chain(&read("agentCert", cert)?);
            let key = PrivateKeyDer::from_pem_slice(&read("agentKey", key)?)
                .map_err(|e| format!("konnectivity.agentKey: {}: {e}", key.display()))?;
            Some((certs, key))
        }
    };
    crate::tls::client_config(Some(roots), identity, &[b"h2"])
        .map_err(|e| format!("konnectivity.agentCert and agentKey cannot be used together: {e}"))
}

/// The service-account token, if one is configured (read at each connect: it rotates).
pub fn token(s: &Settings) -> Result<Option<String>, String> {
    let Some(path) = &s.token_file else { return Ok(None) };
    let raw = crate::bounded::read_following(path, 64 << 10)
        .map_err(|e| format!("konnectivity.serviceAccountTokenPath: {}: {e}", path.display()))?;
    let token = String::from_utf8_lossy(&raw).trim().to_string();
    if token.is_empty() {
        return Err(format!("konnectivity.serviceAccountTokenPath: {}: empty", path.display()));
    }
    Ok(Some(token))
}

/// TCP and TLS (`tls_config`'s) to the server's agent port (one instance, as the address
/// resolves).
pub async fn secure(
    s: &Settings,
    tls: Arc<rustls::ClientConfig>,
) -> Result<futures_rustls::client::TlsStream<smol::net::TcpStream>, String> {
    let name = rustls::pki_types::ServerName::try_from(s.host.clone())
        .map_err(|e| format!("konnectivity.proxyServerHost {:?}: {e}", s.host))?;
    let tcp = smol::net::TcpStream::connect(s.authority()).await.map_err(|e| e.to_string())?;
    let _ = tcp.set_nodelay(true);
    futures_rustls::TlsConnector::from(tls).connect(name, tcp).await.map_err(|e| format!("TLS: {e}"))
}

/// Connects to the server and opens the call, saying who the node is.
pub async fn connect(
    s: &Settings,
    tls: Arc<rustls::ClientConfig>,
    agent_id: &str,
    identifiers: &str,
) -> Result<Link, String> {
    let s2 = s.clone();
    let token = smol::unblock(move || token(&s2)).await?;
    let authority = s.authority();
    let open = async {
        let tls = secure(s, tls).await?;
        let bearer = token.map(|t| format!("Bearer {t}"));
        let mut metadata = vec![("agentid", agent_id), ("agentidentifiers", identifiers)];
        metadata.extend(bearer.as_deref().map(|b| ("authorization", b)));
        open_bidi(Box::new(tls), &authority, CONNECT, &metadata, MAX_PACKET).await.map_err(|e| e.to_string())
    };
    let bidi = crate::deadline::with_deadline(CONNECT_TIMEOUT, open)
        .await
        .ok_or_else(|| format!("{authority}: no answer within {CONNECT_TIMEOUT:?}"))?
        .map_err(|e| format!("{authority}: {e}"))?;
    let header = |k: &str| bidi.headers.get(k).and_then(|v| v.to_str().ok()).map(str::to_string);
    let server_id = header("serverid").ok_or_else(|| format!("{authority}: the server sent no serverID"))?;
    // As the upstream agent: one count, a number (0 counts as 1).
    let server_count = header("servercount")
        .and_then(|c| c.trim().parse::<usize>().ok())
        .ok_or_else(|| format!("{authority}: the server sent no serverCount"))?
        .max(1);
    Ok(Link { server_id, server_count, send: bidi.send, recv: bidi.recv, ping: bidi.ping })
}

/// One tunnelled connection as the link sees it.
struct Entry {
    queue: smol::channel::Sender<Bytes>,
    shared: Arc<Shared>,
}

#[derive(Default)]
struct Shared {
    queued: AtomicUsize,
    /// Closed for falling behind: the writer stops at once.
    abort: AtomicBool,
}

type Table = Arc<Mutex<HashMap<i64, Entry>>>;

impl Link {
    /// Serves the server's packets until the link drops; returns why it ended.
    pub async fn serve(self, to: Destination, local: SocketAddr, keepalive: Duration) -> String {
        let Link { server_id, send, mut recv, ping, .. } = self;
        let (out, queue) = Outbox::new();
        let table: Table = Arc::default();
        let keep = async {
            let Some(mut ping) = ping else { return std::future::pending().await };
            loop {
                smol::Timer::after(keepalive).await;
                match crate::deadline::with_deadline(PING_TIMEOUT, ping.ping(h2::Ping::opaque())).await {
                    Some(Ok(_)) => {}
                    Some(Err(e)) => return format!("keepalive failed: {e}"),
                    None => return format!("no answer to a keepalive within {PING_TIMEOUT:?}"),
                }
            }
        };
        let packets = async {
            let mut next_id = 0i64;
            loop {
                let packet: Packet = match recv.next().await {
                    Ok(Some(p)) => p,
                    Ok(None) => return "the server ended the call".to_string(),
                    Err(e) => return e.to_string(),
                };
                match packet.payload {
                    Some(Payload::DialRequest(d)) => {
                        if let Err(why) = check_dial(&to, &d.protocol, &d.address) {
                            crate::metrics::add(&crate::metrics::TUNNEL_REFUSALS, &[], 1.0);
                            log::warn!("tunnel: server {server_id} asked for a connection to {:?}: refused", d.address);
                            let refusal = DialResponse { error: why, connect_id: 0, random: d.random };
                            out.control(Packet::new(Kind::DialRsp, Payload::DialResponse(refusal))).await;
                            continue;
                        }
                        next_id += 1;
                        let (out, table) = (out.clone(), table.clone());
                        crate::task::spawn(dial(next_id, d.random, local, out, table)).detach();
                    }
                    // As the upstream agent: DATA without a connection is the server's mistake.
                    Some(Payload::Data(d)) if d.connect_id == 0 => {
                        log::debug!("tunnel: server {server_id} sent DATA for connection 0; ignored")
                    }
                    Some(Payload::Data(d)) => {
                        if let Some(reply) = deliver(&table, d.connect_id, d.data) {
                            out.control(reply).await;
                        }
                    }
                    Some(Payload::CloseRequest(c)) => {
                        // The writer sends what is queued, then the connection ends (CLOSE_RSP).
                        let known = crate::locks::lock(&table).remove(&c.connect_id).is_some();
                        if !known {
                            out.control(Packet::close_response(c.connect_id, "Unknown connectID")).await;
                        }
                    }
                    _ => log::debug!("tunnel: server {server_id} sent packet type {}; ignored", packet.r#type),
                }
            }
        };
        let writer = outbox::write(send, queue, PING_TIMEOUT);
        let why = smol::future::or(packets, smol::future::or(keep, writer)).await;
        // Every connection ends with its link: its writer when its queue's sender goes (what
        // was queued handed to the kubelet server first). Not an abort: that is for falling
        // behind, and counted as such.
        crate::locks::lock(&table).clear();
        why
    }
}

/// Queues DATA for connection `id`; the reply to send when there is no such connection.
fn deliver(table: &Table, id: i64, data: Bytes) -> Option<Packet> {
    let mut table = crate::locks::lock(table);
    let Some(entry) = table.get(&id) else { return Some(Packet::close_response(id, "unrecognized connectID")) };
    let queued = entry.shared.queued.fetch_add(data.len(), Ordering::AcqRel).saturating_add(data.len());
    if queued > MAX_QUEUED || entry.queue.try_send(data).is_err() {
        entry.shared.abort.store(true, Ordering::Release);
        table.remove(&id);
    }
    None
}

/// Answers one allowed DIAL_REQ: dials the kubelet server and, connected, pumps its bytes.
async fn dial(id: i64, random: i64, local: SocketAddr, out: Outbox, table: Table) {
    let answer = |error: String, connect_id: i64| {
        Packet::new(Kind::DialRsp, Payload::DialResponse(DialResponse { error, connect_id, random }))
    };
    let tcp = match crate::deadline::with_deadline(DIAL_TIMEOUT, smol::net::TcpStream::connect(local)).await {
        Some(Ok(tcp)) => tcp,
        Some(Err(e)) => return out.control(answer(format!("dial tcp {local}: {e}"), 0)).await,
        None => return out.control(answer(format!("dial tcp {local}: timed out"), 0)).await,
    };
    let _ = tcp.set_nodelay(true);
    let (queue, inbox) = smol::channel::unbounded();
    let shared = Arc::new(Shared::default());
    crate::locks::lock(&table).insert(id, Entry { queue, shared: shared.clone() });
    out.control(answer(String::new(), id)).await;
    open_connections(1);
    pump(id, tcp, inbox, &shared, &out).await;
    open_connections(-1);
    crate::locks::lock(&table).remove(&id);
    let error = if shared.abort.load(Ordering::Acquire) {
        crate::metrics::add(&crate::metrics::TUNNEL_DROPPED, &[], 1.0);
        log::warn!("tunnel: connection {id} closed: the kubelet server fell {MAX_QUEUED} bytes behind");
        "the node closed the connection: its side fell too far behind"
    } else {
        ""
    };
    // Behind the connection's last DATA in the queue: the server has every byte first.
    out.control(Packet::close_response(id, error)).await;
}

/// Copies the kubelet server's bytes out as DATA, and the queued DATA in, until either side
/// ends. Either side may be dropped at any await: neither touches the call's stream.
async fn pump(
    id: i64,
    tcp: smol::net::TcpStream,
    inbox: smol::channel::Receiver<Bytes>,
    shared: &Shared,
    out: &Outbox,
) {
    let (mut sent, mut received) = (Counted::new("out"), Counted::new("in"));
    let up = async {
        let mut reader = tcp.clone();
        let mut buf = vec![0u8; READ_SIZE];
        let budget: Budget = Outbox::budget();
        loop {
            // Read only what there is room to queue: a slow link slows the kubelet server.
            let place = budget.acquire_arc().await;
            let n = match reader.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(n) => n,
            };
            let data =
                super::packet::Data { connect_id: id, error: String::new(), data: Bytes::copy_from_slice(&buf[..n]) };
            if !out.data(place, Packet::new(Kind::Data, Payload::Data(data))) {
                return;
            }
            sent.add(n);
        }
    };
    let down = async {
        let mut writer = tcp.clone();
        while let Ok(data) = inbox.recv().await {
            if shared.abort.load(Ordering::Acquire) || writer.write_all(&data).await.is_err() {
                return;
            }
            shared.queued.fetch_sub(data.len(), Ordering::AcqRel);
            received.add(data.len());
        }
        // The server closed the connection: what was queued has gone to the kubelet server.
        let _ = writer.flush().await;
    };
    smol::future::or(up, down).await;
    let _ = tcp.shutdown(std::net::Shutdown::Both);
}

/// The number of connections open through the tunnel, moved by `by`.
fn open_connections(by: i64) {
    use std::sync::atomic::{AtomicI64, Ordering};
    static OPEN: AtomicI64 = AtomicI64::new(0);
    let now = OPEN.fetch_add(by, Ordering::AcqRel) + by;
    crate::metrics::set(&crate::metrics::TUNNEL_CONNECTIONS, &[], now as f64);
}

/// Bytes one direction of one connection carried, added to the registry by the MiB and at the
/// end.
struct Counted {
    direction: &'static str,
    pending: usize,
}

impl Counted {
    fn new(direction: &'static str) -> Counted {
        Counted { direction, pending: 0 }
    }

    fn add(&mut self, n: usize) {
        self.pending += n;
        if self.pending >= 1 << 20 {
            self.flush();
        }
    }

    fn flush(&mut self) {
        if self.pending > 0 {
            crate::metrics::add(&crate::metrics::TUNNEL_BYTES, &[("direction", self.direction)], self.pending as f64);
            self.pending = 0;
        }
    }
}

impl Drop for Counted {
    fn drop(&mut self) {
        self.flush();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(table: &Table, id: i64) -> (smol::channel::Receiver<Bytes>, Arc<Shared>) {
        let (queue, inbox) = smol::channel::unbounded();
        let shared = Arc::new(Shared::default());
        crate::locks::lock(table).insert(id, Entry { queue, shared: shared.clone() });
        (inbox, shared)
    }

    #[test]
    fn a_connection_that_falls_behind_is_closed_and_the_others_go_on() {
        let table: Table = Arc::default();
        let (stuck_inbox, stuck) = entry(&table, 1);
        let (moving_inbox, moving) = entry(&table, 2);
        let chunk = Bytes::from(vec![0u8; 64 << 10]);
        // Nobody takes connection 1's data: it queues up to the limit, then is closed.
        for _ in 0..MAX_QUEUED / chunk.len() {
            assert!(deliver(&table, 1, chunk.clone()).is_none());
            assert!(!stuck.abort.load(Ordering::Acquire));
            // Connection 2's writer keeps up.
            assert!(deliver(&table, 2, chunk.clone()).is_none());
            let taken = moving_inbox.try_recv().unwrap();
            moving.queued.fetch_sub(taken.len(), Ordering::AcqRel);
        }
        assert_eq!(stuck.queued.load(Ordering::Acquire), MAX_QUEUED);
        assert!(deliver(&table, 1, chunk.clone()).is_none());
        assert!(stuck.abort.load(Ordering::Acquire), "closed at the limit");
        assert!(!crate::locks::lock(&table).contains_key(&1));
        assert_eq!(stuck_inbox.len(), MAX_QUEUED / chunk.len(), "what it had stays for its writer to drop");
        // The other connection is untouched; data for the closed one is answered.
        assert!(deliver(&table, 2, chunk.clone()).is_none());
        assert!(!moving.abort.load(Ordering::Acquire));
        let answer = deliver(&table, 1, chunk).unwrap();
        assert_eq!(answer, Packet::close_response(1, "unrecognized connectID"));
    }
}
