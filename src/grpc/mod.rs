//! A thin gRPC client over HTTP/2 on a unix socket: unary calls, and server-streaming ones
//! read message by message ([`Replies`]); `bidi` adds the bidirectional stream the tunnel
//! uses (over any stream: the tunnel's is TLS over TCP), and `status` the gRPC status codes and the typed error every call returns. Used by
//! `cri` (the runtime), `tunnel` (konnectivity), `handlers` (gRPC probes) and `mirror` (the
//! HTTP/2 handshake).
//!
//! Owns one HTTP/2 connection to the runtime (h2 driven by smol), the gRPC wire format
//! (5-byte length-prefixed messages, `te: trailers`, `grpc-timeout`, `grpc-status` and
//! `grpc-message` from trailers or a Trailers-Only response), a size cap on what it sends and
//! receives, a local deadline on every call, and reconnection: when the runtime restarts, the
//! dead connection is noticed and the next call dials again. A call that fails before its
//! request could reach the runtime is retried once on a fresh connection; a call that may have
//! reached it is never repeated here (the caller decides, since CRI calls are not idempotent).
//!
//! In: a method path and a prost message. Out: the decoded reply or a [`Status`].
//! Knows nothing of CRI or konnectivity semantics; see `cri/client.rs` and `tunnel/` for those.

use self::status::{decode_grpc_message, Code, Status};
use crate::deadline::with_deadline;
use bytes::{Buf, BufMut, Bytes, BytesMut};
use h2::client::SendRequest;
use smol::lock::Mutex;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio_util::compat::FuturesAsyncReadCompatExt;

/// The largest message atoll sends or accepts, as kubelet's CRI client (16 MiB).
pub const DEFAULT_MAX_MESSAGE: usize = 16 << 20;

/// Bytes of the gRPC message prefix: a compression flag and a big-endian length.
const PREFIX: usize = 5;

/// An HTTP/2 connection in use, and whether its driver task still runs.
#[derive(Clone)]
pub(crate) struct Conn {
    pub(crate) send: SendRequest<Bytes>,
    pub(crate) alive: Arc<AtomicBool>,
}

/// A gRPC channel to one unix socket. Cheap to share: calls run concurrently as separate
/// HTTP/2 streams on one connection.
pub struct Channel {
    socket: PathBuf,
    /// A TCP `host:port` to dial instead of the socket (gRPC health probes).
    tcp: Option<String>,
    user_agent: &'static str,
    connect_timeout: Duration,
    max_message: usize,
    conn: Mutex<Option<Conn>>,
}

/// Why starting a call failed, and whether the request can have reached the server.
enum StartError {
    /// Nothing was delivered: safe to try again on a new connection.
    NotSent(Status),
    /// The request may have been delivered.
    Failed(Status),
}

impl Channel {
    /// A channel that dials `socket` lazily, on its first call.
    pub fn new(socket: impl Into<PathBuf>) -> Channel {
        Channel {
            socket: socket.into(),
            tcp: None,
            user_agent: concat!("atoll/", env!("CARGO_PKG_VERSION")),
            connect_timeout: Duration::from_secs(5),
            max_message: DEFAULT_MAX_MESSAGE,
            conn: Mutex::new(None),
        }
    }

    /// A plaintext channel to `host:port` over TCP, with its own user agent (gRPC probes).
    pub fn tcp(addr: &str, user_agent: &'static str, connect_timeout: Duration) -> Channel {
        Channel {
            socket: PathBuf::new(),
            tcp: Some(addr.to_string()),
            user_agent,
            connect_timeout,
            max_message: DEFAULT_MAX_MESSAGE,
            conn: Mutex::new(None),
        }
    }

    /// Caps the size of a message in either direction.
    pub fn with_max_message(mut self, bytes: usize) -> Channel {
        self.max_message = bytes;
        self
    }

    pub fn socket(&self) -> &Path {
        &self.socket
    }

    /// Makes a unary call. `timeout` is a local deadline for the whole call, also sent to the
    /// server as `grpc-timeout`; `None` waits as long as the server takes.
    pub async fn unary<Q, R>(&self, path: &'static str, request: &Q, timeout: Option<Duration>) -> Result<R, Status>
    where
        Q: prost::Message,
        R: prost::Message + Default,
    {
        let body = encode_message(request, self.max_message)?;
        let reply = self.call(path, body, timeout).await?;
        decode_message(reply, self.max_message)
    }

    /// A unary call of one framed message, answered by one (the reply's frame). Not generic:
    /// compiled once for every CRI method, whose typed wrappers only encode and decode.
    async fn call(&self, path: &'static str, body: Bytes, timeout: Option<Duration>) -> Result<Bytes, Status> {
        let call = async {
            let (conn, response) = self.send(path, body, timeout).await?;
            self.finish(&conn, response).await
        };
        match timeout {
            Some(t) => with_deadline(t, call)
                .await
                .unwrap_or_else(|| Err(Status::new(Code::DeadlineExceeded, format!("no reply within {t:?}")))),
            None => call.await,
        }
    }

    /// Opens a server-streaming call. It has no deadline: it lasts until the server ends it,
    /// the connection breaks or the [`Replies`] are dropped (which cancels the stream). The
    /// reply's head is read with the first message, since a server may send nothing before
    /// it has one: a call the server refuses (such as Unimplemented) fails on the first
    /// [`Replies::next`].
    pub async fn server_streaming<Q: prost::Message>(
        &self,
        path: &'static str,
        request: &Q,
    ) -> Result<Replies, Status> {
        let body = encode_message(request, self.max_message)?;
        let (conn, head) = self.retrying(path, |conn| self.open(conn, path, body.clone(), None)).await?;
        Ok(Replies { conn, head: Some(head), body: None, buf: BytesMut::new(), max: self.max_message })
    }

    /// Sends a request and waits for the head of the reply; returns the connection with the
    /// response, whose body is still to read.
    async fn send(
        &self,
        path: &'static str,
        body: Bytes,
        timeout: Option<Duration>,
    ) -> Result<(Conn, http::Response<h2::RecvStream>), Status> {
        self.retrying(path, |conn| {
            let body = body.clone();
            async move {
                let response = self.open(conn.clone(), path, body, timeout).await?;
                response.await.map_err(|e| {
                    if e.reason() == Some(h2::Reason::REFUSED_STREAM) {
                        StartError::NotSent(transport_status(&e))
                    } else {
                        StartError::Failed(broken(&conn, &e))
                    }
                })
            }
        })
        .await
    }

    /// Runs `attempt` on the live connection, and once more on a fresh one if the request
    /// could not be delivered.
    async fn retrying<T, F>(&self, path: &str, mut attempt: impl FnMut(Conn) -> F) -> Result<(Conn, T), Status>
    where
        F: std::future::Future<Output = Result<T, StartError>>,
    {
        let mut retried = false;
        loop {
            let conn = self.connection().await?;
            match attempt(conn.clone()).await {
                Ok(t) => return Ok((conn, t)),
                Err(StartError::NotSent(status)) if !retried => {
                    log::debug!("{path}: {status}; dialling again");
                    self.forget(&conn).await;
                    retried = true;
                }
                Err(StartError::NotSent(status)) | Err(StartError::Failed(status)) => return Err(status),
            }
        }
    }

    /// The live connection, dialling a new one when there is none or the last one died.
    async fn connection(&self) -> Result<Conn, Status> {
        let mut slot = self.conn.lock().await;
        if let Some(conn) = slot.as_ref() {
            if conn.alive.load(Ordering::Acquire) {
                return Ok(conn.clone());
            }
        }
        *slot = None;
        let conn = self.dial().await?;
        *slot = Some(conn.clone());
        Ok(conn)
    }

    /// Drops `conn` from the slot if it is still the current one.
    async fn forget(&self, conn: &Conn) {
        conn.alive.store(false, Ordering::Release);
        let mut slot = self.conn.lock().await;
        if slot.as_ref().is_some_and(|c| Arc::ptr_eq(&c.alive, &conn.alive)) {
            *slot = None;
        }
    }

    async fn dial(&self) -> Result<Conn, Status> {
        if let Some(addr) = &self.tcp {
            let stream = with_deadline(self.connect_timeout, smol::net::TcpStream::connect(addr.as_str()))
                .await
                .ok_or_else(|| Status::new(Code::Unavailable, format!("timed out connecting to {addr}")))?
                .map_err(|e| Status::new(Code::Unavailable, format!("cannot connect to {addr}: {e}")))?;
            let _ = stream.set_nodelay(true);
            return self.handshake(Box::new(stream), addr.clone()).await;
        }
        let unavailable = |what: &str, e: &dyn std::fmt::Display| {
            Status::new(Code::Unavailable, format!("{what} runtime socket {}: {e}", self.socket.display()))
        };
        let stream = with_deadline(self.connect_timeout, smol::net::unix::UnixStream::connect(&self.socket))
            .await
            .ok_or_else(|| unavailable("timed out connecting to", &"no answer"))?
            .map_err(|e| unavailable("cannot connect to", &e))?;
        self.handshake(Box::new(stream), self.socket.display().to_string()).await
    }

    async fn handshake(&self, stream: Io, peer: String) -> Result<Conn, Status> {
        handshake(stream, peer, self.max_message).await.map(|(conn, _)| conn)
    }

    /// Sends the request's head and its one message; the reply is still to come.
    async fn open(
        &self,
        conn: Conn,
        path: &'static str,
        body: Bytes,
        timeout: Option<Duration>,
    ) -> Result<h2::client::ResponseFuture, StartError> {
        let not_sent = |e: h2::Error| StartError::NotSent(transport_status(&e));
        let mut send = conn.send.clone().ready().await.map_err(not_sent)?;
        let mut builder = http::Request::builder()
            .method(http::Method::POST)
            .uri(format!("http://{}{path}", self.tcp.as_deref().unwrap_or("localhost")))
            .header(http::header::CONTENT_TYPE, "application/grpc")
            .header(http::header::TE, "trailers")
            .header(http::header::USER_AGENT, self.user_agent);
        if let Some(t) = timeout {
            builder = builder.header("grpc-timeout", grpc_timeout(t));
        }
        let request = builder
            .body(())
            .map_err(|e| StartError::NotSent(Status::new(Code::Internal, format!("bad request for {path}: {e}"))))?;
        let (response, mut stream) = send.send_request(request, false).map_err(not_sent)?;
        stream.send_data(body, true).map_err(|e| StartError::Failed(broken(&conn, &e)))?;
        Ok(response)
    }

    /// Reads the reply: status line, then either Trailers-Only or one message plus trailers;
    /// the message's frame, still to decode.
    async fn finish(&self, conn: &Conn, response: http::Response<h2::RecvStream>) -> Result<Bytes, Status> {
        let (head, mut body) = response.into_parts();
        reply_head(&head)?;
        let cap = self.max_message + PREFIX;
        let mut buf = BytesMut::new();
        while let Some(chunk) = body.data().await {
            let chunk = chunk.map_err(|e| broken(conn, &e))?;
            let _ = body.flow_control().release_capacity(chunk.len());
            if buf.len() + chunk.len() > cap {
                return Err(Status::new(
                    Code::ResourceExhausted,
                    format!("reply larger than the {} byte limit", self.max_message),
                ));
            }
            buf.extend_from_slice(&chunk);
        }
        let trailers = body.trailers().await.map_err(|e| broken(conn, &e))?;
        match trailers {
            Some(t) => status_from(&t)?,
            None => return Err(Status::new(Code::Internal, "reply ended without grpc-status")),
        }
        Ok(buf.freeze())
    }
}

/// A byte stream HTTP/2 runs on (a unix socket, TCP, TLS), boxed: h2's connection code is
/// compiled once for all of them.
pub type Io = Box<dyn Duplex>;

pub trait Duplex: smol::io::AsyncRead + smol::io::AsyncWrite + Unpin + Send {}
impl<T: smol::io::AsyncRead + smol::io::AsyncWrite + Unpin + Send> Duplex for T {}

/// Starts HTTP/2 on `stream` and drives the connection in a task of its own; returns the
/// connection and its PING handle. (The mirror's HTTP/2 to the API server starts here too.)
pub(crate) async fn handshake(
    stream: Io,
    peer: String,
    max_message: usize,
) -> Result<(Conn, Option<h2::PingPong>), Status> {
    let unavailable =
        |what: &str, e: &dyn std::fmt::Display| Status::new(Code::Unavailable, format!("{what} {peer}: {e}"));
    let frame_cap = u32::try_from(max_message.min(16 << 20)).unwrap_or(u32::MAX);
    let (send, mut connection) = h2::client::Builder::new()
        .initial_window_size(1 << 20)
        .initial_connection_window_size(2 << 20)
        .max_frame_size(frame_cap.clamp(16 << 10, (16 << 20) - 1))
        .max_header_list_size(64 << 10)
        .handshake::<_, Bytes>(stream.compat())
        .await
        .map_err(|e| unavailable("HTTP/2 handshake failed on", &e))?;
    let ping = connection.ping_pong();
    let alive = Arc::new(AtomicBool::new(true));
    let flag = alive.clone();
    crate::task::spawn(async move {
        if let Err(e) = connection.await {
            log::debug!("HTTP/2 connection to {peer} ended: {e}");
        }
        flag.store(false, Ordering::Release);
    })
    .detach();
    Ok((Conn { send, alive }, ping))
}

/// Turns an h2 error into a status, retiring the connection if it is the connection (not
/// only this stream) that failed.
fn broken(conn: &Conn, e: &h2::Error) -> Status {
    if e.is_io() || e.is_go_away() {
        conn.alive.store(false, Ordering::Release);
    }
    transport_status(e)
}

/// The messages of a server-streaming reply, read one at a time.
pub struct Replies {
    conn: Conn,
    /// The reply's head, until it has come.
    head: Option<h2::client::ResponseFuture>,
    body: Option<h2::RecvStream>,
    buf: BytesMut,
    max: usize,
}

impl Replies {
    /// The next message; `None` when the server ended the stream with OK.
    pub async fn next<R: prost::Message + Default>(&mut self) -> Result<Option<R>, Status> {
        if let Some(head) = self.head.take() {
            let response = head.await.map_err(|e| broken(&self.conn, &e))?;
            let (head, body) = response.into_parts();
            reply_head(&head)?;
            self.body = Some(body);
        }
        let Some(body) = self.body.as_mut() else {
            return Err(Status::new(Code::Internal, "the stream has already failed"));
        };
        loop {
            if let Some(frame) = take_frame(&mut self.buf, self.max)? {
                return decode_message(frame, self.max).map(Some);
            }
            match body.data().await {
                Some(Ok(chunk)) => {
                    let _ = body.flow_control().release_capacity(chunk.len());
                    self.buf.extend_from_slice(&chunk);
                }
                Some(Err(e)) => return Err(broken(&self.conn, &e)),
                None => {
                    let trailers = body.trailers().await.map_err(|e| broken(&self.conn, &e))?;
                    let Some(t) = trailers else {
                        return Err(Status::new(Code::Internal, "stream ended without grpc-status"));
                    };
                    status_from(&t)?;
                    if !self.buf.is_empty() {
                        return Err(Status::new(Code::Internal, "stream ended inside a message"));
                    }
                    return Ok(None);
                }
            }
        }
    }
}

/// The first whole framed message in `buf`, taken out of it; `None` while it is incomplete.
/// A length over `max` is an error before the message has come.
#[doc(hidden)] // pub for fuzz/fuzz_targets/grpc_frames.rs
pub fn take_frame(buf: &mut BytesMut, max: usize) -> Result<Option<Bytes>, Status> {
    let Some(&[_, a, b, c, d]) = buf.get(..PREFIX) else { return Ok(None) };
    let len = u32::from_be_bytes([a, b, c, d]) as usize;
    if len > max {
        return Err(Status::new(
            Code::ResourceExhausted,
            format!("streamed message of {len} bytes is over the {max} byte limit"),
        ));
    }
    Ok((buf.len() >= PREFIX + len).then(|| buf.split_to(PREFIX + len).freeze()))
}

/// Checks a reply's head: HTTP 200, and not a Trailers-Only reply (which carries the call's
/// status in the head and no message).
fn reply_head(head: &http::response::Parts) -> Result<(), Status> {
    if head.status != http::StatusCode::OK {
        return Err(Status::new(
            Code::from_http(head.status.as_u16()),
            format!("runtime answered HTTP {}", head.status),
        ));
    }
    if head.headers.contains_key("grpc-status") {
        return match status_from(&head.headers) {
            Err(status) => Err(status),
            Ok(()) => Err(Status::new(Code::Internal, "runtime sent OK without a message")),
        };
    }
    Ok(())
}

/// The status a transport failure maps to.
fn transport_status(e: &h2::Error) -> Status {
    let code = match e.reason() {
        Some(h2::Reason::CANCEL) => Code::Cancelled,
        Some(h2::Reason::ENHANCE_YOUR_CALM) => Code::ResourceExhausted,
        Some(h2::Reason::INADEQUATE_SECURITY) => Code::PermissionDenied,
        Some(h2::Reason::REFUSED_STREAM) => Code::Unavailable,
        Some(h2::Reason::NO_ERROR) if e.is_go_away() => Code::Unavailable,
        Some(_) if !e.is_go_away() && !e.is_io() => Code::Internal,
        _ => Code::Unavailable,
    };
    Status::new(code, format!("connection to the runtime failed: {e}"))
}

/// Reads `grpc-status` and `grpc-message` from a header or trailer block.
fn status_from(headers: &http::HeaderMap) -> Result<(), Status> {
    let Some(raw) = headers.get("grpc-status") else {
        return Err(Status::new(Code::Internal, "reply has no grpc-status"));
    };
    let code =
        raw.to_str().ok().and_then(|s| s.trim().parse::<i32>().ok()).map(Code::from_i32).unwrap_or(Code::Unknown);
    if code == Code::Ok {
        return Ok(());
    }
    let message = headers.get("grpc-message").map(|m| decode_grpc_message(m.as_bytes())).unwrap_or_default();
    Err(Status::new(code, message))
}

/// Formats a deadline as gRPC's `grpc-timeout` header: at most eight digits and a unit.
pub(crate) fn grpc_timeout(t: Duration) -> String {
    const MAX: u128 = 99_999_999;
    let ms = t.as_millis().max(1);
    if ms <= MAX {
        return format!("{ms}m");
    }
    let secs = t.as_secs();
    if u128::from(secs) <= MAX {
        return format!("{secs}S");
    }
    format!("{}H", (secs / 3600).min(MAX as u64))
}

/// Frames one message: flag 0 (uncompressed), a big-endian length, the bytes.
#[doc(hidden)] // pub for fuzz/fuzz_targets/grpc_frames.rs
pub fn encode_message<M: prost::Message>(m: &M, max: usize) -> Result<Bytes, Status> {
    let len = m.encoded_len();
    if len > max {
        return Err(Status::new(
            Code::ResourceExhausted,
            format!("request of {len} bytes is over the {max} byte limit"),
        ));
    }
    let mut buf = BytesMut::with_capacity(PREFIX + len);
    buf.put_u8(0);
    buf.put_u32(len as u32);
    m.encode(&mut buf).map_err(|e| Status::new(Code::Internal, format!("encoding request: {e}")))?;
    Ok(buf.freeze())
}

/// Reads exactly one framed message from a unary reply body.
#[doc(hidden)] // pub for fuzz/fuzz_targets/grpc_frames.rs
pub fn decode_message<M: prost::Message + Default>(mut body: Bytes, max: usize) -> Result<M, Status> {
    if body.len() < PREFIX {
        return Err(Status::new(Code::Internal, format!("reply body of {} bytes has no message", body.len())));
    }
    let compressed = body.get_u8();
    let len = body.get_u32() as usize;
    if compressed != 0 {
        return Err(Status::new(Code::Internal, "runtime sent a compressed message although atoll asked for none"));
    }
    if len > max {
        return Err(Status::new(
            Code::ResourceExhausted,
            format!("reply message of {len} bytes is over the {max} byte limit"),
        ));
    }
    if body.len() != len {
        return Err(Status::new(Code::Internal, format!("reply frame says {len} bytes but {} follow", body.len())));
    }
    M::decode(body).map_err(|e| Status::new(Code::Internal, format!("decoding reply: {e}")))
}

pub mod bidi;
pub mod status;

#[cfg(test)]
mod tests;
