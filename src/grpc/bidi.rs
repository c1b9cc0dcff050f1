//! A bidirectional-streaming call on a connection of its own (konnectivity's
//! `AgentService.Connect`): the request's metadata out, the reply's head back at once (the
//! server's metadata), then messages both ways. Outbound messages (framed by the caller, see
//! `encode_message`) wait for HTTP/2 flow-control credit, so a peer that reads slowly slows
//! the sender instead of filling memory.

use super::{handshake, reply_head, transport_status, Conn, Replies};
use crate::grpc::status::{Code, Status};
use bytes::{Bytes, BytesMut};

/// An open call.
pub struct Bidi {
    /// The reply's head: the server's metadata.
    pub headers: http::HeaderMap,
    pub send: Outbound,
    pub recv: Replies,
    /// PINGs on the call's connection (keepalive).
    pub ping: Option<h2::PingPong>,
}

/// The sending half of a call.
pub struct Outbound {
    stream: h2::SendStream<Bytes>,
    conn: Conn,
}

/// Starts HTTP/2 on `stream` (already secured by the caller) and opens `path` with `metadata`
/// as request headers; `max` caps a message either way.
pub async fn open_bidi(
    stream: super::Io,
    authority: &str,
    path: &str,
    metadata: &[(&str, &str)],
    max: usize,
) -> Result<Bidi, Status> {
    // Frames of 16 KiB (HTTP/2's default) however large a message may be: a long-lived
    // connection keeps its read buffer at the largest frame it has seen.
    let (conn, ping) = handshake(stream, authority.to_string(), 16 << 10).await?;
    let mut send = conn.send.clone().ready().await.map_err(|e| transport_status(&e))?;
    let mut builder = http::Request::builder()
        .method(http::Method::POST)
        .uri(format!("https://{authority}{path}"))
        .header(http::header::CONTENT_TYPE, "application/grpc")
        .header(http::header::TE, "trailers")
        .header(http::header::USER_AGENT, concat!("atoll/", env!("CARGO_PKG_VERSION")));
    for (k, v) in metadata {
        builder = builder.header(*k, *v);
    }
    let request =
        builder.body(()).map_err(|e| Status::new(Code::InvalidArgument, format!("bad metadata for {path}: {e}")))?;
    let (response, stream) = send.send_request(request, false).map_err(|e| transport_status(&e))?;
    let response = response.await.map_err(|e| transport_status(&e))?;
    let (head, body) = response.into_parts();
    reply_head(&head)?;
    Ok(Bidi {
        headers: head.headers,
        send: Outbound { stream, conn: conn.clone() },
        recv: Replies { conn, head: None, body: Some(body), buf: BytesMut::new(), max },
        ping,
    })
}

impl Outbound {
    /// Sends one framed message, as fast as the peer's flow-control window lets it go. A
    /// send cancelled half-way leaves the call's stream cut inside a message: only a sender
    /// that owns the stream alone and ends the call when it gives up may be cancelled.
    pub async fn send_frame(&mut self, mut frame: Bytes) -> Result<(), Status> {
        while !frame.is_empty() {
            self.stream.reserve_capacity(frame.len());
            let granted = std::future::poll_fn(|cx| self.stream.poll_capacity(cx)).await;
            let n = match granted {
                Some(Ok(n)) => n,
                Some(Err(e)) => return Err(super::broken(&self.conn, &e)),
                None => return Err(Status::new(Code::Unavailable, "the call has ended")),
            };
            if n == 0 {
                continue;
            }
            let chunk = frame.split_to(n.min(frame.len()));
            self.stream.send_data(chunk, false).map_err(|e| super::broken(&self.conn, &e))?;
        }
        Ok(())
    }
}
