//! How workers learn that the runtime changed under their pod (kubelet's PLEG, pod lifecycle
//! event generator): the moment it happens where the runtime can say so, and by a relist as
//! the safety net.
//!
//! - **Events** (kubelet's evented PLEG): the runtime's `GetContainerEvents` stream, served by
//!   containerd 1.7 and 2.x. Each event wakes the worker of its pod.
//! - **Process exits** (`exits`), for runtimes without events (containerd 1.6, which answers
//!   Unimplemented): a pidfd on each running container's and sandbox's process, whose pid
//!   the runtime reports in its verbose status. Workers hand over what they see running.
//!   Also when events prove unreliable: containerd 1.7 hands each event to one of its
//!   readers, so with another reader (a second agent, `crictl events`) atoll sees only some.
//!   A change the relist finds that no event announced switches process exits on as well.
//! - **Relist**: two list calls for the whole node; a worker whose pod shows any change is
//!   woken. Every second while neither exact signal works, else every `relist` period (10 s
//!   by default), to catch anything a signal missed. Each relist also looks at the size of
//!   the running containers' log files (kubelet checks every 10 s) and wakes the pods whose
//!   logs are due for rotation. Once a minute, back-offs are collected.
//!
//! A worker's wake-ups coalesce: however many arrive while it syncs, it syncs once more.

pub mod exits;
pub mod relist;

use crate::runtime::workers::Workers;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The relist period while no exact signal works (kubelet's generic PLEG period).
pub const RELIST_FALLBACK: Duration = Duration::from_secs(1);
/// The default relist period while events or process exits are watched.
pub const RELIST_SAFETY_NET: Duration = Duration::from_secs(10);

/// Whether an event made at `created_at` (nanoseconds since the epoch; 0: not said) may show a
/// worker that last began to look at the runtime at `looked` something new. The runtime makes
/// an event once the change is in its store, so lists begun after the event was made show it:
/// the container a worker has just started, whose event comes once the worker's follow-up
/// sync is under way, does not cost a third sync. kubelet's evented PLEG has the same rule:
/// its pod cache takes an event's status, and a sync follows, only if the event is newer than
/// the status it holds. (A wall clock stepped back between the two could hide one event; the
/// relist still sees the change.)
fn news(created_at: i64, looked: Option<i64>) -> bool {
    created_at <= 0 || looked.is_none_or(|looked| created_at >= looked)
}

/// What tells the engine of changes the moment they happen.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Signal {
    /// Nothing exact (yet): the relist runs every second.
    Relist,
    /// The runtime's event stream.
    Events,
    /// pidfds on the runtime's processes.
    Exits,
    /// Both: events, and process exits because some events went to another reader.
    EventsAndExits,
}

/// Which signal is live, and what the PLEG keeps per pod; shared by the engine, its workers
/// and the PLEG's tasks. It wakes workers through the engine's registry.
pub struct Pleg {
    workers: Arc<Workers>,
    /// Since when the event stream has been open.
    events: Mutex<Option<Instant>>,
    /// Process exits are watched.
    watch_exits: AtomicBool,
    /// The event stream's first opening was logged.
    announced: AtomicBool,
    /// When the last event about each pod came.
    pub(super) evented: Mutex<HashMap<String, Instant>>,
    /// When each pod's worker last began to look at the runtime (nanoseconds since the epoch,
    /// the clock of the runtime's events), and whether an event was let go since.
    looked: Mutex<HashMap<String, (i64, bool)>>,
    /// The log files of each pod's running containers.
    logs: Mutex<HashMap<String, Vec<std::path::PathBuf>>>,
    pub(super) relist_now: (smol::channel::Sender<()>, smol::channel::Receiver<()>),
    pub(super) exits: Arc<exits::Exits>,
    /// What each pod's ready sandboxes' statuses showed (`observe`).
    pub sandboxes: crate::runtime::observe::SandboxFacts,
    /// What a sync that made something left its pod's next look (`observe::Left`).
    left: Mutex<Vec<(String, crate::runtime::observe::Left)>>,
}

impl Pleg {
    pub fn new(workers: Arc<Workers>) -> Arc<Pleg> {
        let weak = Arc::downgrade(&workers);
        let wake = Box::new(move |uid: &str| {
            if let Some(workers) = weak.upgrade() {
                workers.wake(uid);
            }
        });
        Arc::new(Pleg {
            workers,
            events: Mutex::new(None),
            watch_exits: AtomicBool::new(false),
            announced: AtomicBool::new(false),
            evented: Mutex::new(HashMap::new()),
            looked: Mutex::new(HashMap::new()),
            logs: Mutex::new(HashMap::new()),
            relist_now: smol::channel::bounded(1),
            exits: exits::Exits::new(wake),
            sandboxes: Default::default(),
            left: Mutex::new(Vec::new()),
        })
    }

    /// Forgets what it kept about pod `uid` (its worker ended).
    pub fn forget(&self, uid: &str) {
        crate::locks::lock(&self.evented).remove(uid);
        crate::locks::lock(&self.looked).remove(uid);
        crate::locks::lock(&self.logs).remove(uid);
        self.sandboxes.forget(uid);
        self.left(uid);
    }

    /// A sync of pod `uid` made all it meant to: what its pod can now have, for the next look.
    pub fn leave(&self, uid: &str, left: crate::runtime::observe::Left) {
        let mut all = crate::locks::lock(&self.left);
        all.retain(|(u, _)| u != uid);
        all.push((uid.to_string(), left));
    }

    /// What the last sync of pod `uid` left, if it was one that made something (taken: only
    /// the sync that follows it reads it).
    pub fn left(&self, uid: &str) -> Option<crate::runtime::observe::Left> {
        let mut all = crate::locks::lock(&self.left);
        all.iter().position(|(u, _)| u == uid).map(|i| all.swap_remove(i).1)
    }

    /// The log files of pod `uid`'s running containers, for the relist to watch their size.
    pub fn set_logs(&self, uid: &str, logs: Vec<std::path::PathBuf>) {
        crate::locks::lock(&self.logs).insert(uid.to_string(), logs);
    }

    /// Wakes the worker of pod `uid`, if there is one; wake-ups coalesce.
    pub fn wake(&self, uid: &str) {
        self.workers.wake(uid);
    }

    /// Pod `uid`'s worker begins to look at what the runtime has for it (its sync's lists).
    pub fn looking(&self, uid: &str) {
        let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
        let nanos = i64::try_from(now.as_nanos()).unwrap_or(i64::MAX);
        crate::locks::lock(&self.looked).insert(uid.to_string(), (nanos, false));
    }

    /// Pod `uid`'s sync failed, so what its lists showed was not acted on: an event let go
    /// meanwhile wakes the worker after all, as it would have, and the next ones do.
    pub fn look_failed(&self, uid: &str) {
        if crate::locks::lock(&self.looked).remove(uid).is_some_and(|(_, let_go)| let_go) {
            self.wake(uid);
        }
    }

    /// Whether an event about pod `uid` made at `created_at` may show its worker something new.
    pub(super) fn news(&self, uid: &str, created_at: i64) -> bool {
        let mut looked = crate::locks::lock(&self.looked);
        let entry = looked.get_mut(uid);
        let news = news(created_at, entry.as_ref().map(|(at, _)| *at));
        if let (false, Some((_, let_go))) = (news, entry) {
            *let_go = true;
        }
        news
    }

    /// The pods with a live worker, which a relist looks at.
    pub(super) fn watched(&self) -> Vec<crate::pod::PodUid> {
        self.workers.uids()
    }

    pub fn signal(&self) -> Signal {
        match (self.events_open_since().is_some(), self.watch_exits()) {
            (false, false) => Signal::Relist,
            (true, false) => Signal::Events,
            (false, true) => Signal::Exits,
            (true, true) => Signal::EventsAndExits,
        }
    }

    /// Whether workers hand their running processes over to `exits`.
    pub fn watch_exits(&self) -> bool {
        self.watch_exits.load(Ordering::Acquire)
    }

    /// The event stream opened or closed. Whatever happened before it opened is caught by a
    /// relist at once.
    pub(super) fn set_events(&self, open: bool) {
        let mut since = crate::locks::lock(&self.events);
        if since.is_some() != open {
            *since = open.then(Instant::now);
            if open && !self.announced.swap(true, Ordering::AcqRel) {
                log::info!("following the runtime's container events; relisting as a safety net");
            }
            log::debug!("container events {}", if open { "open" } else { "closed" });
            let _ = self.relist_now.0.try_send(());
        }
    }

    pub(super) fn events_open_since(&self) -> Option<Instant> {
        *crate::locks::lock(&self.events)
    }

    /// Pods with a running container's log file over `max` bytes.
    pub(super) fn logs_over(&self, max: u64) -> Vec<String> {
        let logs = crate::locks::lock(&self.logs);
        logs.iter()
            .filter(|(_, files)| files.iter().any(|f| std::fs::metadata(f).is_ok_and(|m| m.len() > max)))
            .map(|(uid, _)| uid.clone())
            .collect()
    }

    /// The first of `changed` (pods a relist found changed, all of it while events were open)
    /// that no event announced since `since`, unless process exits are watched already.
    pub(super) fn missed(&self, changed: &[crate::pod::PodUid], since: Instant) -> Option<crate::pod::PodUid> {
        if self.watch_exits() || !exits::supported() {
            return None;
        }
        let evented = crate::locks::lock(&self.evented);
        changed.iter().find(|uid| evented.get(uid.as_str()).is_none_or(|t| *t < since)).cloned()
    }

    /// Starts watching process exits (for good); workers are woken to hand over what runs.
    pub(super) fn start_watching_exits(&self) {
        if !self.watch_exits.swap(true, Ordering::AcqRel) {
            let _ = self.relist_now.0.try_send(());
            self.workers.wake_all();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::inbox::Inbox;

    #[test]
    fn an_event_let_go_while_a_sync_failed_wakes_its_worker_after_all() {
        let workers = Workers::new();
        let (tx, _rx) = smol::channel::bounded(8);
        let (wake, woken) = smol::channel::bounded(1);
        workers.register(&"u1".into(), Inbox { tx, wake });
        let pleg = Pleg::new(workers);
        pleg.looking("u1");
        let at = crate::locks::lock(&pleg.looked)["u1"].0;
        assert!(!pleg.news("u1", at - 1), "made before the lists began");
        assert!(pleg.news("u1", at) && pleg.news("u2", at - 1), "made as they began; another pod");
        assert!(woken.is_empty());
        pleg.look_failed("u1");
        assert_eq!(woken.try_recv(), Ok(()), "the sync failed: the event it let go wakes the worker");
        assert!(pleg.news("u1", at - 1), "and until the next look, every event does");
        // A failed sync that let nothing go wakes no one (it waits for its retry).
        pleg.looking("u1");
        pleg.look_failed("u1");
        assert!(woken.is_empty());
        // Forgotten with the worker.
        pleg.looking("u1");
        pleg.forget("u1");
        assert!(pleg.news("u1", 1));
    }

    #[test]
    fn an_event_made_before_the_worker_last_looked_is_no_news() {
        for (created_at, looked, wakes) in [
            (100, None, true),      // never looked
            (100, Some(100), true), // made as it looked: the lists may have missed it
            (101, Some(100), true), // made after
            (99, Some(100), false), // made before: the lists showed it
            (0, Some(100), true),   // no time said
            (-5, Some(100), true),  // nonsense time: woken, as before
        ] {
            assert_eq!(news(created_at, looked), wakes, "made at {created_at}, looked at {looked:?}");
        }
    }
}
