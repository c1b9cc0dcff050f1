//! A link's tunnelled connections to the kubelet server: the table the link's reader hands
//! the server's DATA to, and each connection's pump.
//!
//! What the kubelet server has not taken yet waits in the connection's queue, charged at its
//! length plus [`OVERHEAD`] (so empty or tiny DATA cost too) against two limits: the
//! connection's [`MAX_QUEUED`], and the link's [`MAX_LINK_QUEUED`], where the connection
//! furthest behind gives way. A connection closed for falling behind is closed at once (its
//! socket shut down, so a kubelet server side that reads nothing cannot hold it open),
//! counted, and its CLOSE_RSP says why. Payloads are copied out of the link's
//! receive buffer before they wait, so a queued byte holds a byte, not a whole buffer.
//!
//! A connection ends in one of four ways: the kubelet server closes it (its DATA flushed, then
//! the CLOSE_RSP); the server's CLOSE_REQ (what is queued is handed over for at most
//! [`DRAIN`], then the socket is shut down); falling behind (above); the link's end (every
//! socket shut down at once, as the upstream agent closes them). Until its pump is done a
//! closing connection stays in the table, so late DATA for it is dropped without an answer
//! that would overtake its last bytes. At most [`MAX_CONNECTIONS`] are open or being dialled
//! per link and [`MAX_TOTAL_CONNECTIONS`] over all links; the server's dials beyond are
//! refused. What all links queue together is held to [`MAX_TOTAL_QUEUED`] the same way as
//! one link's, so the tunnel's worst case (32 MiB queued) fits well inside the unit's
//! `MemoryMax=128M` whatever the servers ask for.
//!
//! A connection is one end of a socket pair whose other end the kubelet server serves
//! (handed over in-process, so tunnelled connections have a budget of their own there).

use super::outbox::Outbox;
use super::packet::{Data, Kind, Packet, Payload};
use bytes::Bytes;
use smol::io::{AsyncReadExt, AsyncWriteExt};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// What a connection may have queued for the kubelet server before it is closed.
pub const MAX_QUEUED: usize = 4 << 20;
/// What all of a link's connections may have queued together.
pub const MAX_LINK_QUEUED: usize = 16 << 20;
/// What each queued DATA is charged beyond its payload (the queue's own bookkeeping).
pub const OVERHEAD: usize = 64;
/// Connections open or being dialled on one link.
pub const MAX_CONNECTIONS: usize = 128;
/// Connections open or being dialled over all links.
pub const MAX_TOTAL_CONNECTIONS: usize = 256;
/// What all links' connections may have queued together.
pub const MAX_TOTAL_QUEUED: usize = 32 << 20;
/// How long a connection the server closed may take to hand over what it had queued.
pub const DRAIN: Duration = Duration::from_secs(5);
/// One read from the kubelet server, sent as one DATA packet.
const READ_SIZE: usize = 32 << 10;

/// One connection as the table holds it.
struct Entry {
    /// The pump's queue; gone once the connection is closing.
    queue: Option<smol::channel::Sender<Bytes>>,
    shared: Arc<Shared>,
}

/// What the table and a connection's pump share.
pub struct Shared {
    /// Bytes charged for what waits in the queue.
    queued: AtomicUsize,
    /// Closed for falling behind (counted, said in its CLOSE_RSP).
    abort: AtomicBool,
    sock: Socket,
}

/// The tunnel's end of a connection to the kubelet server.
pub type Socket = smol::net::unix::UnixStream;

/// What every link of the node's tunnel shares: connections and queued bytes over all links.
#[derive(Default)]
pub struct Budget {
    connections: AtomicUsize,
    queued: AtomicUsize,
}

#[derive(Default)]
struct Table {
    map: HashMap<i64, Entry>,
    /// Dials under way.
    dialling: usize,
    /// The link has ended: nothing new is let in.
    ended: bool,
}

/// A link's connections.
#[derive(Default)]
pub struct Conns {
    table: Mutex<Table>,
    /// Bytes charged for everything queued on the link.
    queued: AtomicUsize,
    /// The node's totals.
    budget: Arc<Budget>,
}

/// What to do with a DATA the server sent.
#[derive(Debug, PartialEq)]
pub enum Delivered {
    Queued,
    /// For a connection that is closing, or whose pump has just ended: dropped.
    Dropped,
    /// Over a limit: the connection is closed.
    Closed,
    /// No such connection: answer the server with this.
    Unknown(Packet),
}

impl Conns {
    /// A link's table, counted in the node's `budget`.
    pub fn new(budget: Arc<Budget>) -> Conns {
        Conns { budget, ..Conns::default() }
    }

    /// Takes a place for a dial; false when [`MAX_CONNECTIONS`] are taken on the link or
    /// [`MAX_TOTAL_CONNECTIONS`] over all links, or the link has ended. [`Conns::open`] or
    /// [`Conns::dial_failed`] gives it back.
    pub fn reserve(&self) -> bool {
        let mut t = crate::locks::lock(&self.table);
        if t.ended || t.map.len().saturating_add(t.dialling) >= MAX_CONNECTIONS {
            return false;
        }
        let total = &self.budget.connections;
        if total
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| (n < MAX_TOTAL_CONNECTIONS).then_some(n + 1))
            .is_err()
        {
            return false;
        }
        t.dialling += 1;
        true
    }

    pub fn dial_failed(&self) {
        let mut t = crate::locks::lock(&self.table);
        if let Some(n) = t.dialling.checked_sub(1) {
            t.dialling = n;
            self.budget.connections.fetch_sub(1, Ordering::AcqRel);
        }
    }

    /// Enters a dialled connection; its queue's receiving end, or None (the socket shut
    /// down) when the link ended meanwhile.
    pub fn open(&self, id: i64, sock: &Socket) -> Option<(smol::channel::Receiver<Bytes>, Arc<Shared>)> {
        let mut t = crate::locks::lock(&self.table);
        t.dialling = t.dialling.saturating_sub(1);
        if t.ended {
            let _ = sock.shutdown(std::net::Shutdown::Both);
            self.budget.connections.fetch_sub(1, Ordering::AcqRel);
            return None;
        }
        let (queue, inbox) = smol::channel::unbounded();
        let shared =
            Arc::new(Shared { queued: AtomicUsize::new(0), abort: AtomicBool::new(false), sock: sock.clone() });
        t.map.insert(id, Entry { queue: Some(queue), shared: shared.clone() });
        Some((inbox, shared))
    }

    /// Queues the server's DATA for connection `id`. Over the link's limit or the node's, the
    /// link's connection furthest behind is closed to make room (this one, if it is).
    pub fn deliver(&self, id: i64, data: &[u8]) -> Delivered {
        let mut t = crate::locks::lock(&self.table);
        let Some(entry) = t.map.get(&id) else {
            return Delivered::Unknown(Packet::close_response(id, "unrecognized connectID"));
        };
        if entry.queue.is_none() {
            return Delivered::Dropped;
        }
        let cost = data.len().saturating_add(OVERHEAD);
        if entry.shared.queued.load(Ordering::Acquire).saturating_add(cost) > MAX_QUEUED {
            self.abort(&mut t, id);
            return Delivered::Closed;
        }
        while self.queued.load(Ordering::Acquire).saturating_add(cost) > MAX_LINK_QUEUED
            || self.budget.queued.load(Ordering::Acquire).saturating_add(cost) > MAX_TOTAL_QUEUED
        {
            // Only a connection with something queued frees room; when none on this link has
            // (the other links hold the node's limit), this one gives way.
            let furthest = t
                .map
                .iter()
                .filter(|(_, e)| e.queue.is_some() && e.shared.queued.load(Ordering::Acquire) > 0)
                .max_by_key(|(_, e)| e.shared.queued.load(Ordering::Acquire));
            let behind = furthest.map_or(id, |(&behind, _)| behind);
            self.abort(&mut t, behind);
            if behind == id {
                return Delivered::Closed;
            }
        }
        let Some(entry) = t.map.get(&id) else { return Delivered::Dropped };
        let Some(queue) = &entry.queue else { return Delivered::Dropped };
        // Charged before the pump can take it (and give the charge back).
        entry.shared.queued.fetch_add(cost, Ordering::AcqRel);
        self.queued.fetch_add(cost, Ordering::AcqRel);
        self.budget.queued.fetch_add(cost, Ordering::AcqRel);
        if queue.try_send(Bytes::copy_from_slice(data)).is_err() {
            self.uncharge(&entry.shared, cost);
            return Delivered::Dropped;
        }
        Delivered::Queued
    }

    /// Closes connection `id` for falling behind: its queue gone, its socket shut down, its
    /// charge given back now (its pump drops what it had).
    fn abort(&self, t: &mut Table, id: i64) {
        if let Some(e) = t.map.get_mut(&id) {
            e.shared.abort.store(true, Ordering::Release);
            e.queue = None;
            let _ = e.shared.sock.shutdown(std::net::Shutdown::Both);
            self.uncharge(&e.shared, usize::MAX);
        }
    }

    /// Takes up to `n` off a connection's charge, and the same off the link's.
    fn uncharge(&self, shared: &Shared, n: usize) {
        let before = shared.queued.fetch_update(Ordering::AcqRel, Ordering::Acquire, |q| Some(q.saturating_sub(n)));
        let taken = before.map_or(0, |q| q.min(n));
        self.queued.fetch_sub(taken, Ordering::AcqRel);
        self.budget.queued.fetch_sub(taken, Ordering::AcqRel);
    }

    /// The server's CLOSE_REQ: what is queued goes to the kubelet server for at most
    /// [`DRAIN`], then the connection ends. False for a connection the table does not know.
    pub fn close(&self, id: i64) -> bool {
        let mut t = crate::locks::lock(&self.table);
        let Some(entry) = t.map.get_mut(&id) else { return false };
        if entry.queue.take().is_some() {
            let sock = entry.shared.sock.clone();
            crate::task::spawn(async move {
                smol::Timer::after(DRAIN).await;
                let _ = sock.shutdown(std::net::Shutdown::Both);
            })
            .detach();
        }
        true
    }

    /// A connection's pump has ended: out of the table, its leftovers no longer charged.
    fn remove(&self, id: i64) {
        let entry = crate::locks::lock(&self.table).map.remove(&id);
        if let Some(e) = entry {
            self.uncharge(&e.shared, usize::MAX);
            self.budget.connections.fetch_sub(1, Ordering::AcqRel);
        }
    }

    /// The link has ended: every connection's socket shut down, nothing new let in.
    pub fn end(&self) {
        let mut t = crate::locks::lock(&self.table);
        t.ended = true;
        for e in t.map.values_mut() {
            e.queue = None;
            let _ = e.shared.sock.shutdown(std::net::Shutdown::Both);
        }
    }

    /// Copies the kubelet server's bytes out as DATA, and the queued DATA in, until either
    /// side ends; then the connection leaves the table. Either side may be dropped at any
    /// await: neither touches the call's stream.
    pub async fn pump(&self, id: i64, inbox: smol::channel::Receiver<Bytes>, shared: &Shared, out: &Outbox) {
        let (mut sent, mut received) = (Counted::new("out"), Counted::new("in"));
        let up = async {
            let mut reader = shared.sock.clone();
            let mut buf = vec![0u8; READ_SIZE];
            loop {
                let n = match reader.read(&mut buf).await {
                    Ok(0) | Err(_) => return,
                    Ok(n) => n,
                };
                let data = Data { connect_id: id, error: String::new(), data: Bytes::copy_from_slice(&buf[..n]) };
                // Waits for a place: a slow link slows the kubelet server.
                if !out.send(&Packet::new(Kind::Data, Payload::Data(data))).await {
                    return;
                }
                sent.add(n);
            }
        };
        let down = async {
            let mut writer = shared.sock.clone();
            while let Ok(data) = inbox.recv().await {
                if shared.abort.load(Ordering::Acquire) || writer.write_all(&data).await.is_err() {
                    return;
                }
                self.uncharge(shared, data.len().saturating_add(OVERHEAD));
                received.add(data.len());
            }
            // The server closed the connection: what was queued has gone to the kubelet server.
            let _ = writer.flush().await;
        };
        smol::future::or(up, down).await;
        let _ = shared.sock.shutdown(std::net::Shutdown::Both);
        self.remove(id);
    }
}

impl Shared {
    /// Whether the connection was closed for falling behind.
    pub fn aborted(&self) -> bool {
        self.abort.load(Ordering::Acquire)
    }
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
mod tests;
