//! The mirror's HTTP/2 transport, as kubelet's client talks to the API server: one long-lived
//! TLS connection (ALPN h2) carries every request and the pod watch, and HPACK sends the
//! headers that repeat (path, content type, token, user agent) as a byte or two each after
//! their first time, so a lease renewal costs little more than its body.
//!
//! The mirror's threads block on each exchange; the connection itself is driven on the
//! executor (by the HTTP/2 code CRI's client uses). A connection that fails, or that does not
//! answer a PING after a request ran past its deadline, is dropped and the next request dials
//! again. A server whose TLS does not choose h2 (a proxy that speaks HTTP/1.1 only) is noted,
//! and the client goes on over HTTP/1.1.

use super::error::{Error, Kind};
use super::wire::{Answer, Ask, MAX_BODY};
use crate::deadline::with_deadline;
use crate::grpc::{handshake, Conn};
use bytes::Bytes;
use smol::lock::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How long a PING may take to show that a connection whose request ran late still lives.
const PING_TIMEOUT: Duration = Duration::from_secs(5);
/// How long a TCP connect and TLS handshake may take.
const DIAL_TIMEOUT: Duration = Duration::from_secs(10);

/// The connection in use and its PING handle.
#[derive(Clone)]
struct Live {
    conn: Conn,
    ping: Arc<Mutex<Option<h2::PingPong>>>,
}

pub(super) struct H2 {
    /// `https://host:port`, the prefix of every request's URI.
    server: String,
    /// `host:port` to dial.
    addr: String,
    name: rustls::pki_types::ServerName<'static>,
    tls: Arc<rustls::ClientConfig>,
    live: Mutex<Option<Live>>,
    /// Set when the server's TLS did not choose h2.
    refused: AtomicBool,
}

impl H2 {
    /// For the `https://` URL `server` (already checked by the caller), with `tls` offering h2.
    pub(super) fn new(server: &str, tls: Arc<rustls::ClientConfig>) -> Result<H2, Error> {
        let bad = |why: String| Error::from(Kind::Server { server: server.to_string(), why });
        let uri: http::Uri = server.parse().map_err(|e: http::uri::InvalidUri| bad(e.to_string()))?;
        let host = uri.host().ok_or_else(|| bad("no host".into()))?;
        let port = uri.port_u16().unwrap_or(443);
        let bare = host.trim_start_matches('[').trim_end_matches(']');
        let name = rustls::pki_types::ServerName::try_from(bare.to_string()).map_err(|e| bad(e.to_string()))?;
        Ok(H2 {
            server: format!("https://{host}:{port}"),
            addr: format!("{host}:{port}"),
            name,
            tls,
            live: Mutex::new(None),
            refused: AtomicBool::new(false),
        })
    }

    /// Whether the server has not (yet) been found to refuse HTTP/2.
    pub(super) fn offered(&self) -> bool {
        !self.refused.load(Ordering::Relaxed)
    }

    /// The live connection, dialling one if there is none.
    async fn connection(&self) -> Result<Live, Error> {
        let mut slot = self.live.lock().await;
        if let Some(live) = slot.as_ref().filter(|l| l.conn.alive.load(Ordering::Acquire)) {
            return Ok(live.clone());
        }
        *slot = None;
        let dial = async {
            let tcp = smol::net::TcpStream::connect(self.addr.as_str())
                .await
                .map_err(|e| Error::from(Kind::Transport(e.to_string())))?;
            let _ = tcp.set_nodelay(true);
            futures_rustls::TlsConnector::from(self.tls.clone())
                .connect(self.name.clone(), tcp)
                .await
                .map_err(|e| Error::from(Kind::Transport(format!("TLS: {e}"))))
        };
        let tls = with_deadline(DIAL_TIMEOUT, dial)
            .await
            .unwrap_or_else(|| Err(Error::from(Kind::Timeout(DIAL_TIMEOUT))))
            .map_err(|e| Error::from(Kind::Dial { addr: self.addr.clone(), why: e }))?;
        if tls.get_ref().1.alpn_protocol() != Some(b"h2".as_slice()) {
            self.refused.store(true, Ordering::Relaxed);
            log::info!("API server {}: no HTTP/2 offered; mirroring over HTTP/1.1", self.addr);
            return Err(Error::from(Kind::Dial {
                addr: self.addr.clone(),
                why: Error::from(Kind::Transport("no HTTP/2 offered".into())),
            }));
        }
        // Frames of HTTP/2's default 16 KiB: a long-lived connection keeps its read buffer at
        // the largest frame it has seen.
        let (conn, ping) = handshake(Box::new(tls), self.addr.clone(), 16 << 10)
            .await
            .map_err(|s| Error::from(Kind::Transport(s.message)))?;
        let live = Live { conn, ping: Arc::new(Mutex::new(ping)) };
        *slot = Some(live.clone());
        Ok(live)
    }

    /// Sends `ask`; the answer's head and its body still to read.
    async fn open(&self, ask: &Ask<'_>) -> Result<(Live, http::response::Parts, h2::RecvStream), Error> {
        let live = self.connection().await?;
        let failed = |e: h2::Error| {
            if e.is_io() || e.is_go_away() {
                live.conn.alive.store(false, Ordering::Release);
            }
            Error::from(e)
        };
        let mut send = live.conn.send.clone().ready().await.map_err(failed)?;
        let mut req = http::Request::builder()
            .method(ask.method)
            .uri(format!("{}{}", self.server, ask.path))
            .header(http::header::ACCEPT, ask.accept)
            .header(http::header::USER_AGENT, super::wire::USER_AGENT);
        if !ask.body.is_empty() {
            req = req
                .header(http::header::CONTENT_TYPE, ask.content_type)
                .header(http::header::CONTENT_LENGTH, ask.body.len());
        }
        if let Some(b) = &ask.bearer {
            // Indexed like any header (as Go's client does): every request on this connection
            // is atoll's own, so nobody can probe the compression state for it.
            req = req.header(http::header::AUTHORIZATION, b.as_str());
        }
        let req = req.body(()).map_err(|e| Error::from(Kind::Transport(e.to_string())))?;
        let (response, mut stream) = send.send_request(req, ask.body.is_empty()).map_err(failed)?;
        if !ask.body.is_empty() {
            stream.send_data(Bytes::copy_from_slice(ask.body), true).map_err(failed)?;
        }
        let (head, body) = response.await.map_err(failed)?.into_parts();
        Ok((live, head, body))
    }

    /// One exchange within `timeout`.
    pub(super) fn call(&self, ask: &Ask<'_>, timeout: Duration) -> Result<Answer, Error> {
        smol::block_on(async {
            let exchange = async {
                let (live, head, mut body) = self.open(ask).await?;
                let mut all = Vec::new();
                while let Some(chunk) = next_chunk(&live, &mut body).await? {
                    if all.len() + chunk.len() > MAX_BODY {
                        return Err(Error::from(Kind::TooLarge { what: "an answer", limit: MAX_BODY }));
                    }
                    all.extend_from_slice(&chunk);
                }
                Ok(Answer::of_h2(head.status, &head.headers, all))
            };
            match with_deadline(timeout, exchange).await {
                Some(r) => r,
                None => {
                    self.check_alive().await;
                    Err(Error::from(Kind::Timeout(timeout)))
                }
            }
        })
    }

    /// A watch: `each` gets every line of the answer until the stream ends, `each` returns
    /// false or `limit` passes. A refused watch's answer is returned.
    pub(super) fn watch(
        &self,
        ask: &Ask<'_>,
        limit: Duration,
        each: &mut dyn FnMut(&[u8]) -> bool,
    ) -> Result<Option<Answer>, Error> {
        let end = Instant::now() + limit;
        let left = || end.saturating_duration_since(Instant::now());
        smol::block_on(async {
            let (live, head, mut body) = with_deadline(left(), self.open(ask))
                .await
                .ok_or_else(|| Error::from(Kind::Transport("no answer to the watch in time".into())))??;
            if head.status != 200 {
                let mut all = Vec::new();
                while let Some(Ok(Some(chunk))) = with_deadline(left(), next_chunk(&live, &mut body)).await {
                    all.extend_from_slice(&chunk);
                    if all.len() > MAX_BODY {
                        break;
                    }
                }
                return Ok(Some(Answer::of_h2(head.status, &head.headers, all)));
            }
            let mut buf: Vec<u8> = Vec::new();
            loop {
                let Some(chunk) = with_deadline(left(), next_chunk(&live, &mut body)).await else {
                    return Ok(None);
                };
                let Some(chunk) = chunk? else { return Ok(None) };
                // Only the new bytes are searched for a line's end: a long line sent in small
                // pieces costs its length, not its length times its pieces.
                let mut from = buf.len();
                buf.extend_from_slice(&chunk);
                while let Some(at) = buf[from..].iter().position(|b| *b == b'\n').map(|i| from + i) {
                    let line: Vec<u8> = buf.drain(..=at).collect();
                    if !each(&line) {
                        return Ok(None);
                    }
                    from = 0;
                }
                if buf.len() > MAX_BODY {
                    return Err(Error::from(Kind::TooLarge { what: "an event", limit: MAX_BODY }));
                }
            }
        })
    }

    /// After a request ran past its deadline: a connection that does not answer a PING soon
    /// is dropped (a NAT that forgot it, a peer gone), so the next request dials again.
    async fn check_alive(&self) {
        let Some(live) = self.live.lock().await.clone() else { return };
        let mut ping = live.ping.lock().await;
        let answered = match ping.as_mut() {
            Some(p) => matches!(with_deadline(PING_TIMEOUT, p.ping(h2::Ping::opaque())).await, Some(Ok(_))),
            None => false,
        };
        if !answered {
            live.conn.alive.store(false, Ordering::Release);
        }
    }
}

/// The next piece of a body (its flow-control credit given back), None at its end.
async fn next_chunk(live: &Live, body: &mut h2::RecvStream) -> Result<Option<Bytes>, Error> {
    match body.data().await {
        None => Ok(None),
        Some(Ok(chunk)) => {
            let _ = body.flow_control().release_capacity(chunk.len());
            Ok(Some(chunk))
        }
        Some(Err(e)) => {
            if e.is_io() || e.is_go_away() {
                live.conn.alive.store(false, Ordering::Release);
            }
            Err(e.into())
        }
    }
}
