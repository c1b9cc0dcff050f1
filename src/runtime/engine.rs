//! The engine: one worker per pod UID, fed by the desired-set changes.
//!
//! Adds start a worker, updates go to it, removes terminate it. A pod whose `namespace/name`
//! is still held by a terminating older UID waits until that worker has finished (kubelet's
//! static pod rule: never two of the same name). Once every source has spoken, pods atoll
//! created that nobody wants any more are stopped and removed; nothing atoll did not create is
//! ever touched.

use super::worker::{self, Msg, Shared};
use crate::cri::api::PodSandboxFilter;
use crate::pod::StaticPod;
use crate::source::merge::Change;
use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

struct Handle {
    key: String,
    tx: smol::channel::Sender<Msg>,
    _task: smol::Task<()>,
}

pub struct Engine {
    shared: Arc<Shared>,
    workers: HashMap<String, Handle>,
    /// The workers' inboxes, shared with the relist task that wakes them.
    inboxes: Arc<Mutex<HashMap<String, smol::channel::Sender<Msg>>>>,
    _relist: smol::Task<()>,
    /// Pods waiting for an older UID of the same name to finish, by `namespace/name`.
    pending: HashMap<String, Vec<StaticPod>>,
    done_tx: smol::channel::Sender<String>,
    done_rx: smol::channel::Receiver<String>,
}

impl Engine {
    pub fn new(shared: Arc<Shared>) -> Engine {
        let (done_tx, done_rx) = smol::channel::unbounded();
        let inboxes: Arc<Mutex<HashMap<String, smol::channel::Sender<Msg>>>> = Default::default();
        let relist = smol::spawn(relist(shared.clone(), inboxes.clone()));
        Engine { shared, workers: HashMap::new(), inboxes, _relist: relist, pending: HashMap::new(), done_tx, done_rx }
    }

    /// A receiver of finished workers' UIDs; pass each to [`Engine::worker_done`].
    pub fn finished(&self) -> smol::channel::Receiver<String> {
        self.done_rx.clone()
    }

    /// UIDs with a live worker.
    pub fn running(&self) -> HashSet<String> {
        self.workers.keys().cloned().collect()
    }

    pub fn apply(&mut self, change: Change) {
        match change {
            Change::Add(sp) => self.add(sp),
            Change::Update(sp) => {
                if let Some(h) = self.workers.get(&sp.uid) {
                    let _ = h.tx.try_send(Msg::Update(Box::new(sp)));
                } else if let Some(q) = self.pending.get_mut(&sp.pod.key()) {
                    for p in q.iter_mut().filter(|p| p.uid == sp.uid) {
                        *p = sp.clone();
                    }
                }
            }
            Change::Remove(sp) => {
                if let Some(q) = self.pending.get_mut(&sp.pod.key()) {
                    q.retain(|p| p.uid != sp.uid);
                }
                if let Some(h) = self.workers.get(&sp.uid) {
                    log::info!("pod {} ({}): removed from the manifests; terminating", sp.pod.key(), sp.uid);
                    let _ = h.tx.try_send(Msg::Terminate(worker::grace_of(&sp.pod)));
                }
            }
        }
    }

    fn add(&mut self, sp: StaticPod) {
        let key = sp.pod.key();
        if self.workers.values().any(|h| h.key == key) {
            log::info!("pod {key} ({}): waiting for the previous version to terminate", sp.uid);
            self.pending.entry(key).or_default().push(sp);
            return;
        }
        let (tx, rx) = smol::channel::bounded(8);
        let uid = sp.uid.clone();
        let (shared, done, finished) = (self.shared.clone(), self.done_tx.clone(), uid.clone());
        log::info!("pod {key} ({uid}): starting a worker");
        let task = smol::spawn(async move {
            worker::run(shared, sp, rx).await;
            let _ = done.send(finished).await;
        });
        self.inboxes.lock().unwrap_or_else(|p| p.into_inner()).insert(uid.clone(), tx.clone());
        self.workers.insert(uid, Handle { key, tx, _task: task });
    }

    /// Called when a worker has ended: starts the next version of its pod, if one waits.
    pub fn worker_done(&mut self, uid: &str) {
        self.inboxes.lock().unwrap_or_else(|p| p.into_inner()).remove(uid);
        let Some(h) = self.workers.remove(uid) else { return };
        if let Some(mut q) = self.pending.remove(&h.key) {
            if !q.is_empty() {
                let next = q.remove(0);
                if !q.is_empty() {
                    self.pending.insert(h.key.clone(), q);
                }
                self.add(next);
            }
        }
    }

    /// Stops and removes the sandboxes atoll created for pods that are no longer desired
    /// (run once every source has delivered its first snapshot).
    pub async fn remove_orphans(&self, desired: &HashSet<String>) {
        let sandboxes = match self.shared.cri.list_pod_sandbox(Some(PodSandboxFilter::default())).await {
            Ok(s) => s,
            Err(e) => {
                log::warn!("listing sandboxes for orphans: {e}");
                return;
            }
        };
        let mut orphans: Vec<String> = sandboxes
            .iter()
            .filter(|s| worker::managed(&s.annotations))
            .filter_map(|s| s.labels.get(super::sandbox::LABEL_POD_UID).cloned())
            .filter(|uid| !desired.contains(uid) && !self.workers.contains_key(uid))
            .collect();
        orphans.sort();
        orphans.dedup();
        for uid in orphans {
            log::info!("pod {uid}: no longer in any manifest; stopping and removing it");
            if let Err(e) = worker::remove_orphan(&self.shared, &uid, Duration::from_secs(1)).await {
                log::warn!("pod {uid}: removing orphan: {e}");
            }
        }
    }
}

/// How often the runtime is relisted (kubelet's PLEG period).
pub const RELIST_PERIOD: Duration = Duration::from_secs(1);

/// The runtime observer: every second, two list calls for the whole node (sandboxes and
/// containers with their states); a worker whose pod shows any change is woken at once.
/// Workers otherwise sync only on their own slower period, so a quiet node costs two CRI calls
/// a second whatever the number of pods.
async fn relist(shared: Arc<Shared>, inboxes: Arc<Mutex<HashMap<String, smol::channel::Sender<Msg>>>>) {
    let mut last: HashMap<String, u64> = HashMap::new();
    loop {
        smol::Timer::after(RELIST_PERIOD).await;
        let listed = (shared.cri.list_pod_sandbox(None).await, shared.cri.list_containers(None).await);
        *shared.heartbeat.lock().unwrap_or_else(|p| p.into_inner()) =
            Some((std::time::Instant::now(), listed.0.is_ok() && listed.1.is_ok()));
        let (sandboxes, containers) = match listed {
            (Ok(s), Ok(c)) => (s, c),
            _ => continue, // the runtime is away; workers notice on their own
        };
        let mut now: HashMap<String, u64> = HashMap::new();
        let uid_of = |labels: &HashMap<String, String>| labels.get(super::sandbox::LABEL_POD_UID).cloned();
        let mix = |h: u64, s: &str, state: i32| {
            let h = s.bytes().fold(h ^ 0xcbf29ce484222325, |h, b| (h ^ u64::from(b)).wrapping_mul(0x100000001b3));
            h.wrapping_add(state as u64).rotate_left(7)
        };
        for s in &sandboxes {
            if let Some(uid) = uid_of(&s.labels) {
                let h = now.entry(uid).or_default();
                *h = h.wrapping_add(mix(0, &s.id, s.state));
            }
        }
        for c in &containers {
            if let Some(uid) = uid_of(&c.labels) {
                let h = now.entry(uid).or_default();
                *h = h.wrapping_add(mix(1, &c.id, c.state));
            }
        }
        let inboxes = inboxes.lock().unwrap_or_else(|p| p.into_inner()).clone();
        for (uid, tx) in inboxes {
            if now.get(&uid) != last.get(&uid) {
                let _ = tx.try_send(Msg::Wake);
            }
        }
        last = now;
    }
}
