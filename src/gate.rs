//! Every listener's budget for connections that have not yet shown who they are.
//!
//! A connection is *pending* from `accept()` until its request head is in (on the kubelet
//! server, after its TLS handshake). Pending connections have their own small budget and one
//! deadline for that whole phase. When the budget is full an old pending connection is closed
//! to make room, never the newest, and one that has made no progress (sent nothing; on the
//! kubelet server, not finished its TLS handshake) before one that has: a client that sends its request at once
//! always gets in, however many idle sockets someone holds open, from however many
//! addresses. Where the source is known (a peer on this host: its local user, [`peer`]; else
//! its address), one source holds at most [`Limits::per_source`] pending connections and makes
//! room among its own first.
//!
//! Connections past that phase are *sessions*, counted against a separate budget that
//! pending ones never touch; a session over it gets an answer saying so.
//!
//! Each gate publishes `atoll_listener_pending_connections`, `atoll_listener_sessions` and
//! counts what it closed in `atoll_listener_closed_connections_total` (by reason: evicted,
//! deadline, sessions_full).

use std::collections::VecDeque;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

pub mod peer;
pub use peer::Source;

/// A listener's numbers.
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    /// Pending connections at once.
    pub pending: usize,
    /// Pending connections from one source address at once.
    pub per_source: usize,
    /// From `accept()` to the end of the pending phase.
    pub deadline: Duration,
    /// Sessions at once.
    pub sessions: usize,
}

/// One listener's gate.
pub struct Gate {
    name: &'static str,
    limits: Limits,
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    next: u64,
    /// Oldest first.
    pending: VecDeque<Waiting>,
    sessions: usize,
}

struct Waiting {
    seen: Seen,
    /// Dropped to close the connection.
    _evict: smol::channel::Sender<()>,
}

/// What the choice of a pending connection to close knows of each.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Seen {
    pub id: u64,
    pub source: Option<Source>,
    /// It has got somewhere (a finished TLS handshake).
    pub progressed: bool,
}

/// Which pending connection gives way to one arriving from `source`, if any: one from that
/// source when it holds its share, else, when the budget is full, any. Of those, the oldest
/// that has made no progress, else the oldest. `pending` is oldest first.
pub fn victim(pending: &[Seen], source: Option<Source>, limits: &Limits) -> Option<u64> {
    // `min_by_key` keeps the first of equals: the oldest.
    let pick = |of: &dyn Fn(&Seen) -> bool| pending.iter().filter(|s| of(s)).min_by_key(|s| s.progressed);
    let own = |s: &Seen| s.source == source;
    if source.is_some() && pending.iter().filter(|s| own(s)).count() >= limits.per_source {
        return pick(&own).map(|s| s.id);
    }
    if pending.len() < limits.pending {
        return None;
    }
    pick(&|_| true).map(|s| s.id)
}

/// Whether a connection's first bytes are already there when it is accepted (a client that
/// talks at once, not an idle socket), without waiting for them or taking them (FIONREAD).
pub fn sent_already(stream: &smol::net::TcpStream) -> bool {
    rustix::io::ioctl_fionread(stream).is_ok_and(|n| n > 0)
}

/// Where an accepted TCP connection from `peer` comes from ([`peer::source`]).
pub fn source_of(stream: &smol::net::TcpStream, peer: std::net::SocketAddr) -> Source {
    peer::source(stream.local_addr().ok(), peer)
}

/// A connection in its pending phase. Dropping it leaves the budget.
pub struct Pending {
    gate: Arc<Gate>,
    id: u64,
    evicted: smol::channel::Receiver<()>,
    until: Option<Instant>,
    left: bool,
}

/// A connection past its pending phase; dropping it frees its place.
pub struct Session {
    gate: Arc<Gate>,
}

/// Why a pending step did not finish.
#[derive(Debug, PartialEq, Eq)]
pub enum Cut {
    /// Closed to make room for a newer connection.
    Evicted,
    /// The pending phase's deadline passed.
    Deadline,
}

impl Gate {
    pub fn new(name: &'static str, limits: Limits) -> Arc<Gate> {
        Arc::new(Gate { name, limits, state: Mutex::new(State::default()) })
    }

    /// A connection was accepted (`progressed`: its first bytes are already there): it enters
    /// the pending budget, maybe closing an older one.
    pub fn arrive(self: &Arc<Self>, source: Option<Source>, progressed: bool) -> Pending {
        let (tx, evicted) = smol::channel::bounded(1);
        let mut s = crate::locks::lock(&self.state);
        let view: Vec<Seen> = s.pending.iter().map(|w| w.seen).collect();
        if let Some(old) = victim(&view, source, &self.limits) {
            s.pending.retain(|w| w.seen.id != old); // its sender dropped: that connection ends
            self.count("evicted");
        }
        let id = s.next;
        s.next = s.next.wrapping_add(1);
        s.pending.push_back(Waiting { seen: Seen { id, source, progressed }, _evict: tx });
        self.publish(&s);
        drop(s);
        let until = crate::deadline::after(Instant::now(), self.limits.deadline);
        Pending { gate: self.clone(), id, evicted, until, left: false }
    }

    fn count(&self, reason: &'static str) {
        crate::metrics::add(&crate::metrics::LISTENER_CLOSED, &[("listener", self.name), ("reason", reason)], 1.0);
    }

    fn publish(&self, s: &State) {
        let labels = [("listener", self.name)];
        crate::metrics::set(&crate::metrics::LISTENER_PENDING, &labels, s.pending.len() as f64);
        crate::metrics::set(&crate::metrics::LISTENER_SESSIONS, &labels, s.sessions as f64);
    }

    fn leave(&self, id: u64) {
        let mut s = crate::locks::lock(&self.state);
        s.pending.retain(|w| w.seen.id != id);
        self.publish(&s);
    }

    /// Pending connections now.
    pub fn pending(&self) -> usize {
        crate::locks::lock(&self.state).pending.len()
    }
}

impl Pending {
    /// It has got somewhere: others that have not are closed before it.
    pub fn progressed(&self) {
        let mut s = crate::locks::lock(&self.gate.state);
        if let Some(w) = s.pending.iter_mut().find(|w| w.seen.id == self.id) {
            w.seen.progressed = true;
        }
    }

    /// `stream`, telling the gate when its first bytes come in: a client that has begun to
    /// send is closed after those that have sent nothing (on listeners whose progress is
    /// the first bytes, not a handshake).
    pub fn marking<'a, S>(&'a self, stream: &'a mut S) -> Marking<'a, S> {
        Marking { pending: self, stream, marked: false }
    }

    /// Runs one step of the pending phase (a handshake, reading the head, a review), unless
    /// the connection is evicted or the phase's deadline passes first.
    pub async fn step<F: Future>(&self, f: F) -> Result<F::Output, Cut> {
        smol::future::or(async { Ok(f.await) }, async { Err(self.cut().await) }).await
    }

    /// Ends when the connection is evicted or the phase's deadline passes (one copy for every
    /// step's future).
    async fn cut(&self) -> Cut {
        let evicted = async {
            let _ = self.evicted.recv().await; // only ever ends by the sender's drop
            Cut::Evicted
        };
        let deadline = async {
            match self.until {
                Some(t) => smol::Timer::at(t).await,
                None => smol::Timer::never().await,
            };
            self.gate.count("deadline"); // an eviction was counted when it was chosen
            Cut::Deadline
        };
        smol::future::or(evicted, deadline).await
    }

    /// The pending phase is over: a session, or `None` when the listener serves its most
    /// already (counted as `sessions_full`).
    pub fn admit(mut self) -> Option<Session> {
        self.left = true;
        let gate = self.gate.clone();
        let mut s = crate::locks::lock(&gate.state);
        s.pending.retain(|w| w.seen.id != self.id);
        let full = s.sessions >= gate.limits.sessions;
        if !full {
            s.sessions += 1;
        }
        gate.publish(&s);
        drop(s);
        if full {
            gate.count("sessions_full");
            return None;
        }
        Some(Session { gate })
    }
}

/// A pending connection's stream that marks it progressed on its first bytes.
pub struct Marking<'a, S> {
    pending: &'a Pending,
    stream: &'a mut S,
    marked: bool,
}

impl<S: smol::io::AsyncRead + Unpin> smol::io::AsyncRead for Marking<'_, S> {
    fn poll_read(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut [u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        let read = std::pin::Pin::new(&mut *self.stream).poll_read(cx, buf);
        if !self.marked && matches!(read, std::task::Poll::Ready(Ok(n)) if n > 0) {
            self.marked = true;
            self.pending.progressed();
        }
        read
    }
}

impl Drop for Pending {
    fn drop(&mut self) {
        if !self.left {
            self.gate.leave(self.id);
        }
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        let mut s = crate::locks::lock(&self.gate.state);
        s.sessions = s.sessions.saturating_sub(1);
        self.gate.publish(&s);
    }
}

#[cfg(test)]
mod tests;
