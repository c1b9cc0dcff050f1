//! The link's one way out. Every packet the agent sends is framed as a whole gRPC message and
//! put in one queue, and one writer alone owns the call's sending half and hands it the frames
//! in order. gRPC frames messages on the call's byte stream, so a message left half-written
//! (a sender cancelled while it waited for HTTP/2 flow-control credit, as a connection that
//! ends does) would make the server read what follows as the rest of it, and the link would
//! go silent while its keepalive still answered. Here nothing that can be cancelled touches
//! the stream: a sender waits only for a place in the queue, and either has put a whole frame
//! there or nothing.
//!
//! The queue holds [`QUEUED`] frames (32 KiB of DATA at most each). A connection reads from
//! the kubelet server again only once what it read last has a place, so a slow server slows
//! the kubelet server's side, not memory; waiting senders get places in turn, so connections
//! take turns. A connection's close is queued behind its last data, so the server gets every
//! byte first.
//!
//! A writer that cannot hand the server a frame for longer than the stall limit ends the link,
//! and the agent replaces it: the server has stopped reading it, and every other session
//! would wait behind it. When the link ends the queue closes: every sender still waiting is
//! told at once.

use super::packet::Packet;
use crate::grpc::bidi::Outbound;
use bytes::Bytes;
use std::time::Duration;

/// Frames that may wait for the writer.
pub const QUEUED: usize = 16;

/// The queue's sending side, shared by the link and its connections.
#[derive(Clone)]
pub struct Outbox {
    queue: smol::channel::Sender<Bytes>,
    max: usize,
}

impl Outbox {
    /// A queue for messages of at most `max` bytes, and its receiving end for [`write`].
    pub fn new(max: usize) -> (Outbox, smol::channel::Receiver<Bytes>) {
        let (queue, rx) = smol::channel::bounded(QUEUED);
        (Outbox { queue, max }, rx)
    }

    /// Queues one packet whole, waiting for a place; false once the link is gone (or for a
    /// packet over the limit, which is never sent).
    pub async fn send(&self, packet: &Packet) -> bool {
        match crate::grpc::encode_message(packet, self.max) {
            Ok(frame) => self.queue.send(frame).await.is_ok(),
            Err(_) => false,
        }
    }
}

/// Writes the queue to the call until sending fails or stalls for `stall`; returns why.
pub async fn write(mut send: Outbound, queue: &smol::channel::Receiver<Bytes>, stall: Duration) -> String {
    while let Ok(frame) = queue.recv().await {
        match crate::deadline::with_deadline(stall, send.send_frame(frame)).await {
            Some(Ok(())) => {}
            Some(Err(e)) => return format!("sending to the server failed: {e}"),
            None => return format!("the server took nothing from the link for {stall:?}"),
        }
    }
    "the link's queue closed".to_string()
}
