//! The link's one way out. Every packet the agent sends goes into one queue, and one writer
//! alone owns the call's sending half and hands it whole messages, in order. gRPC frames
//! messages on the call's byte stream, so a message left half-written (a sender cancelled
//! while it waited for HTTP/2 flow-control credit, as a connection that ends does) would make
//! the server read what follows as the rest of it, and the link would go silent while its
//! keepalive still answered. Here nothing that can be cancelled touches the stream: a
//! connection that ends while its data waits only gives up its place in the queue.
//!
//! What waits is bounded: each connection may have [`PER_CONNECTION`] packets queued (it reads
//! from the kubelet server only when it has room, so a slow server slows the kubelet server's
//! side, not memory), and the link's own answers (dial responses, closes) [`CONTROL`]. A close
//! is queued behind the connection's last data, so the server gets every byte first.
//!
//! A writer that cannot hand the server a message for longer than the stall limit ends the
//! link, and the agent replaces it: the server has stopped reading it (its side of one
//! session is stuck), and every other session would wait behind it.

use super::packet::Packet;
use crate::cri::grpc::bidi::Outbound;
use smol::lock::{Semaphore, SemaphoreGuardArc};
use std::sync::Arc;
use std::time::Duration;

/// Packets one connection may have waiting for the writer (32 KiB each at most).
pub const PER_CONNECTION: usize = 4;
/// The link's own packets that may wait.
pub const CONTROL: usize = 64;

/// A packet and the place it holds in its budget (given back once it is written).
pub struct Queued {
    packet: Packet,
    _place: SemaphoreGuardArc,
}

/// The queue's sending side, shared by the link and its connections.
#[derive(Clone)]
pub struct Outbox {
    queue: smol::channel::Sender<Queued>,
    control: Arc<Semaphore>,
}

/// One connection's budget of queued packets.
pub type Budget = Arc<Semaphore>;

impl Outbox {
    pub fn new() -> (Outbox, smol::channel::Receiver<Queued>) {
        let (queue, rx) = smol::channel::unbounded();
        (Outbox { queue, control: Arc::new(Semaphore::new(CONTROL)) }, rx)
    }

    /// A new connection's budget.
    pub fn budget() -> Budget {
        Arc::new(Semaphore::new(PER_CONNECTION))
    }

    /// Queues one of the link's own packets, waiting while [`CONTROL`] of them are queued
    /// (dropped once the link is gone).
    pub async fn control(&self, packet: Packet) {
        let place = self.control.acquire_arc().await;
        let _ = self.queue.try_send(Queued { packet, _place: place });
    }

    /// Queues a connection's packet in the place its budget gave it (`acquire_arc`, a wait
    /// that loses nothing when cancelled). False once the link is gone.
    pub fn data(&self, place: SemaphoreGuardArc, packet: Packet) -> bool {
        self.queue.try_send(Queued { packet, _place: place }).is_ok()
    }
}

/// Writes the queue to the call until sending fails or stalls for `stall`; returns why. The
/// link closes and empties the queue when it ends.
pub async fn write(mut send: Outbound, queue: &smol::channel::Receiver<Queued>, stall: Duration) -> String {
    while let Ok(q) = queue.recv().await {
        match crate::deadline::with_deadline(stall, send.send(&q.packet)).await {
            Some(Ok(())) => {}
            Some(Err(e)) => return format!("sending to the server failed: {e}"),
            None => return format!("the server took nothing from the link for {stall:?}"),
        }
    }
    "the link's queue closed".to_string()
}
