//! One link to one konnectivity server instance: TLS to the agent port, the
//! `AgentService/Connect` call (the upstream proto has no package, so the path has none) with
//! the node's identity, then the server's packets served until the link drops. A DIAL_REQ the
//! policy allows opens a TCP connection to the kubelet server; DATA goes both ways; CLOSE_REQ,
//! or the kubelet server closing, ends one connection with a CLOSE_RSP.
//!
//! The protocol has no per-connection flow control: the server's packets for every
//! connection arrive on one stream. The link never stops reading it for one connection: each
//! connection queues what the kubelet server has not taken yet, within limits (`conns`), so a
//! stuck upload cannot stall the other sessions (the upstream agent blocks the whole link
//! instead). Outbound, everything goes through the link's `outbox`: one writer, whole
//! messages, each connection a few packets at a time, in turn. When the link ends, its TCP
//! connection is shut down at once (an HTTP/2 goodbye to a server that reads nothing would
//! otherwise wait on it), and so is every tunnelled connection.

use super::conns::{Budget, Conns, Delivered, MAX_QUEUED};
use super::error::Error;
use super::outbox::{self, Outbox};
use super::packet::{Packet, Payload};
use super::policy::{check_dial, Destination};
use super::settings::{Kubelet, TunnelSettings};
use crate::grpc::bidi::{open_bidi, Outbound};
use crate::grpc::Replies;
use std::sync::Arc;
use std::time::Duration;

/// The gRPC method the agent calls.
const CONNECT: &str = "/AgentService/Connect";
/// The largest packet either way (the server's DATA are at most a few tens of KiB).
const MAX_PACKET: usize = 4 << 20;
/// The most server instances the node links to, whatever the server says.
const MAX_SERVERS: usize = 64;
/// How long a connect to the konnectivity server may take.
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
    /// The link's TCP connection, shut down when the link ends.
    tcp: smol::net::TcpStream,
}

/// The TLS client for the agent port: the configured CA, the agent's certificate if given,
/// ALPN h2 (gRPC servers require it). Reads files: call it off the executor.
pub fn tls_config(s: &TunnelSettings) -> Result<Arc<rustls::ClientConfig>, Error> {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::PrivateKeyDer;
    let read = |field: &str, path: &std::path::Path| {
        crate::bounded::read_following(path, 4 << 20)
            .map_err(|e| Error::Config(format!("konnectivity.{field}: {}: {e}", path.display())))
    };
    let roots = crate::tls::pem_roots(&read("caCert", &s.ca_cert)?).ok_or_else(|| {
        Error::Config(format!("konnectivity.caCert: {}: no usable PEM certificate", s.ca_cert.display()))
    })?;
    let identity = match &s.agent_cert {
        None => None,
        Some((cert, key)) => {
            let certs = crate::tls::pem_chain(&read("agentCert", cert)?);
            let key = PrivateKeyDer::from_pem_slice(&read("agentKey", key)?)
                .map_err(|e| Error::Config(format!("konnectivity.agentKey: {}: {e}", key.display())))?;
            Some((certs, key))
        }
    };
    crate::tls::client_config(Some(roots), identity, &[b"h2"])
        .map_err(|e| Error::Config(format!("konnectivity.agentCert and agentKey cannot be used together: {e}")))
}

/// What the TLS files were when read (identity and modification time through the links,
/// as `std::fs::metadata` sees them; `None` for one that cannot be read).
pub type Stamp = Vec<Option<(u64, u64, i64, i64, u64)>>;

fn stamp(s: &TunnelSettings) -> Stamp {
    use std::os::unix::fs::MetadataExt;
    let files = std::iter::once(&s.ca_cert).chain(s.agent_cert.iter().flat_map(|(c, k)| [c, k]));
    files.map(|f| std::fs::metadata(f).ok().map(|m| (m.dev(), m.ino(), m.mtime(), m.mtime_nsec(), m.len()))).collect()
}

/// `cached` while the files it was made from are unchanged, else [`tls_config`] again, with
/// the stamp of the files it read. Reads files: call it off the executor.
pub fn tls_config_again(
    s: &TunnelSettings,
    cached: Option<(Stamp, Arc<rustls::ClientConfig>)>,
) -> Result<(Stamp, Arc<rustls::ClientConfig>), Error> {
    let now = stamp(s);
    match cached {
        Some((then, config)) if then == now => Ok((then, config)),
        _ => tls_config(s).map(|config| (now, config)),
    }
}

/// The service-account token, if one is configured (read at each connect: it rotates).
pub fn token(s: &TunnelSettings) -> Result<Option<String>, Error> {
    let Some(path) = &s.token_file else { return Ok(None) };
    let raw = crate::bounded::read_following(path, 64 << 10)
        .map_err(|e| Error::Config(format!("konnectivity.serviceAccountTokenPath: {}: {e}", path.display())))?;
    let token = String::from_utf8_lossy(&raw).trim().to_string();
    if token.is_empty() {
        return Err(Error::Config(format!("konnectivity.serviceAccountTokenPath: {}: empty", path.display())));
    }
    Ok(Some(token))
}

/// TCP and TLS (`tls_config`'s) to the server's agent port (one instance, as the address
/// resolves).
pub async fn secure(
    s: &TunnelSettings,
    tls: Arc<rustls::ClientConfig>,
) -> Result<futures_rustls::client::TlsStream<smol::net::TcpStream>, Error> {
    let name = rustls::pki_types::ServerName::try_from(s.host.clone())
        .map_err(|e| Error::Config(format!("konnectivity.proxyServerHost {:?}: {e}", s.host)))?;
    let tcp = smol::net::TcpStream::connect(s.authority()).await.map_err(|e| Error::Reach(e.to_string()))?;
    let _ = tcp.set_nodelay(true);
    futures_rustls::TlsConnector::from(tls).connect(name, tcp).await.map_err(|e| Error::Reach(format!("TLS: {e}")))
}

/// Connects to the server and opens the call, saying who the node is.
pub async fn connect(
    s: &TunnelSettings,
    tls: Arc<rustls::ClientConfig>,
    agent_id: &str,
    identifiers: &str,
) -> Result<Link, Error> {
    let s2 = s.clone();
    let token = crate::task::unblock(move || token(&s2)).await?;
    let authority = s.authority();
    let open = async {
        let tls = secure(s, tls).await.map_err(Error::into_message)?;
        let tcp = tls.get_ref().0.clone();
        let bearer = token.map(|t| format!("Bearer {t}"));
        let mut metadata = vec![("agentid", agent_id), ("agentidentifiers", identifiers)];
        metadata.extend(bearer.as_deref().map(|b| ("authorization", b)));
        let bidi = open_bidi(Box::new(tls), &authority, CONNECT, &metadata, MAX_PACKET).await;
        bidi.map(|b| (b, tcp)).map_err(|e| e.to_string())
    };
    let (bidi, tcp) = crate::deadline::with_deadline(CONNECT_TIMEOUT, open)
        .await
        .ok_or_else(|| Error::Reach(format!("{authority}: no answer within {CONNECT_TIMEOUT:?}")))?
        .map_err(|e| Error::Reach(format!("{authority}: {e}")))?;
    // As the upstream agent: exactly one of each, the count a number (0 counts as 1).
    let single = |k: &str| {
        let mut all = bidi.headers.get_all(k).iter();
        match (all.next(), all.next()) {
            (Some(v), None) => v.to_str().ok(),
            _ => None,
        }
    };
    let count = single("servercount").and_then(|c| c.trim().parse::<usize>().ok());
    let (Some(server_id), Some(count)) = (single("serverid"), count) else {
        return Err(Error::Reach(format!("{authority}: the server sent no single serverID and serverCount")));
    };
    let (server_id, server_count) = (server_id.to_string(), count.clamp(1, MAX_SERVERS));
    Ok(Link { server_id, server_count, send: bidi.send, recv: bidi.recv, ping: bidi.ping, tcp })
}

impl Link {
    /// Serves the server's packets until the link drops; returns why it ended.
    pub async fn serve(self, to: Destination, kubelet: Kubelet, budget: Arc<Budget>, keepalive: Duration) -> String {
        let Link { server_id, send, mut recv, ping, tcp, .. } = self;
        let (out, queue) = Outbox::new(MAX_PACKET);
        let conns = Arc::new(Conns::new(budget));
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
                let reply = match packet.payload {
                    Some(Payload::DialRequest(d)) => match admit(&to, &conns, &server_id, &d.protocol, &d.address) {
                        Err(error) => Some(Packet::dial_response(error, 0, d.random)),
                        Ok(()) => {
                            next_id += 1;
                            let (out, conns, kubelet) = (out.clone(), conns.clone(), kubelet.clone());
                            crate::task::spawn(dial(next_id, d.random, kubelet, out, conns)).detach();
                            None
                        }
                    },
                    // As the upstream agent: DATA without a connection is the server's mistake.
                    Some(Payload::Data(d)) if d.connect_id == 0 => None,
                    Some(Payload::Data(d)) => match conns.deliver(d.connect_id, &d.data) {
                        Delivered::Unknown(reply) => Some(reply),
                        _ => None,
                    },
                    // What is queued goes to the kubelet server, then its CLOSE_RSP.
                    Some(Payload::CloseRequest(c)) if conns.close(c.connect_id) => None,
                    Some(Payload::CloseRequest(c)) => Some(Packet::close_response(c.connect_id, "Unknown connectID")),
                    _ => None,
                };
                if let Some(reply) = reply {
                    out.send(&reply).await;
                }
            }
        };
        let writer = outbox::write(send, &queue, PING_TIMEOUT);
        let why = smol::future::or(packets, smol::future::or(keep, writer)).await;
        // Everything ends with the link: the connection to the server, every tunnelled
        // connection (not counted as falling behind), and the queue (its senders told).
        let _ = tcp.shutdown(std::net::Shutdown::Both);
        conns.end();
        queue.close();
        why
    }
}

/// Whether a DIAL_REQ may be dialled (the policy, then a place among the link's
/// connections); why not, for its DIAL_RSP.
fn admit(to: &Destination, conns: &Conns, server: &str, protocol: &str, address: &str) -> Result<(), String> {
    if let Err(why) = check_dial(to, protocol, address) {
        crate::metrics::add(&crate::metrics::TUNNEL_REFUSALS, &[("reason", "destination")], 1.0);
        log::warn!("tunnel: server {server} asked for a connection to {address:?}: refused");
        return Err(why);
    }
    if !conns.reserve() {
        crate::metrics::add(&crate::metrics::TUNNEL_REFUSALS, &[("reason", "limit")], 1.0);
        return Err("too many connections through this link".to_string());
    }
    Ok(())
}

/// Answers one allowed DIAL_REQ: hands the kubelet server one end of a socket pair and,
/// taken, pumps the other end's bytes.
async fn dial(id: i64, random: i64, kubelet: Kubelet, out: Outbox, conns: Arc<Conns>) {
    let handed = smol::net::unix::UnixStream::pair().map_err(|e| e.to_string()).and_then(|(ours, theirs)| {
        kubelet.handoff.try_send(theirs).map_err(|_| "the kubelet server has stopped".to_string())?;
        Ok(ours)
    });
    let sock = match handed {
        Ok(sock) => sock,
        Err(why) => {
            conns.dial_failed();
            out.send(&Packet::dial_response(format!("dial tcp {}: {why}", kubelet.address), 0, random)).await;
            return;
        }
    };
    let Some((inbox, shared)) = conns.open(id, &sock) else { return };
    out.send(&Packet::dial_response(String::new(), id, random)).await;
    open_connections(1);
    conns.pump(id, inbox, &shared, &out).await;
    open_connections(-1);
    let error = if shared.aborted() {
        crate::metrics::add(&crate::metrics::TUNNEL_DROPPED, &[], 1.0);
        log::warn!("tunnel: connection {id} closed: the kubelet server fell {MAX_QUEUED} bytes behind");
        "the node closed the connection: its side fell too far behind"
    } else {
        ""
    };
    // Behind the connection's last DATA in the queue: the server has every byte first.
    out.send(&Packet::close_response(id, error)).await;
}

/// The number of connections open through the tunnel, moved by `by`.
fn open_connections(by: i64) {
    use std::sync::atomic::{AtomicI64, Ordering};
    static OPEN: AtomicI64 = AtomicI64::new(0);
    let now = OPEN.fetch_add(by, Ordering::AcqRel) + by;
    crate::metrics::set(&crate::metrics::TUNNEL_CONNECTIONS, &[], now as f64);
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn the_tls_configuration_is_made_again_only_when_its_files_changed() {
        let dir = crate::testdir::TestDir::new("tunnel-tls-again");
        let write_pair = |n: u32| {
            let made = crate::kubelet_server::cert::make(&[format!("node-{n}")], std::time::SystemTime::now()).unwrap();
            let pem =
                [crate::x509::pem("CERTIFICATE", &made.cert), crate::x509::pem("PRIVATE KEY", &made.key)].concat();
            // As the certificate store does: a new file renamed over the old name.
            std::fs::write(dir.join("next.pem"), pem).unwrap();
            std::fs::rename(dir.join("next.pem"), dir.join("agent.pem")).unwrap();
        };
        write_pair(1);
        std::fs::copy(dir.join("agent.pem"), dir.join("ca.pem")).unwrap();
        let s = TunnelSettings {
            host: "127.0.0.1".into(),
            port: 1,
            ca_cert: dir.join("ca.pem"),
            agent_cert: Some((dir.join("agent.pem"), dir.join("agent.pem"))),
            token_file: None,
            agent_id: None,
            agent_identifiers: None,
            sync_interval: Duration::from_secs(1),
            sync_interval_cap: Duration::from_secs(10),
            keepalive: Duration::from_secs(30),
        };
        let first = tls_config_again(&s, None).unwrap();
        let same = tls_config_again(&s, Some(first.clone())).unwrap();
        assert!(Arc::ptr_eq(&first.1, &same.1), "unchanged files: the same configuration");
        write_pair(2);
        let renewed = tls_config_again(&s, Some(same)).unwrap();
        assert!(!Arc::ptr_eq(&first.1, &renewed.1), "a renewed certificate: made again");
        std::fs::remove_file(dir.join("agent.pem")).unwrap();
        assert!(tls_config_again(&s, Some(renewed)).is_err(), "a file gone: the error, not the old configuration");
    }
}
