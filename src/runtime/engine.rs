//! The engine: one worker per pod UID, fed by the desired set's changes and woken by the
//! PLEG (`pleg`).
//!
//! Adds start a worker, updates go to it, removes terminate it. A pod whose `namespace/name`
//! is still held by a terminating older UID waits until that worker has finished (kubelet's
//! static pod rule: never two of the same name). A replacement (a remove and an add of the
//! same name in one batch, [`Engine::apply_all`]) first pulls the new version's images while
//! the old version runs (`prepull`), and only then terminates the old one. At start the engine
//! learns which pods the runtime already runs ([`Engine::adopt`]): a desired pod whose name is held there by another
//! UID (the manifest changed while atoll was down) waits until that orphan has been stopped
//! with its own grace period and preStop hook, so two copies never share hostPath data. Once
//! every source has spoken, the other pods atoll created that nobody wants any more are
//! stopped and removed the same way; nothing atoll did not create is ever touched.
//!
//! The engine runs against any [`RuntimeService`]: the CRI client in the agent, a fake in
//! unit tests. Its owner passes finished workers back ([`Engine::finished`],
//! [`Engine::worker_done`]); readers reach workers through a [`Control`].

use super::context::Context;
use super::inbox::{Inbox, Msg};
use super::observe::managed;
use super::sandbox::{LABEL_POD_NAME, LABEL_POD_NAMESPACE, LABEL_POD_UID};
use super::stop::grace_of;
use super::tuning::{EngineConfig, Tuning};
use super::worker;
use super::workers::Workers;
use crate::cri::api::PodSandboxFilter;
use crate::cri::RuntimeService;
use crate::node::probing::Prober;
use crate::node::Node;
use crate::pod::{Change, StaticPod};
use std::collections::{HashMap, HashSet};
use std::sync::Arc;

/// A live worker (or an orphan's removal) in the engine's ledger: the name it holds, and its
/// task. Its inbox is in the registry ([`Workers`]).
struct Handle {
    key: String,
    _task: smol::Task<()>,
}

pub struct Engine<R: RuntimeService> {
    cx: Arc<Context<R>>,
    workers: HashMap<String, Handle>,
    _pleg: Vec<smol::Task<()>>,
    /// Pods waiting for an older UID of the same name to finish, by `namespace/name`.
    pending: HashMap<String, Vec<StaticPod>>,
    /// Old versions kept running while their replacement's images are pulled, by
    /// `namespace/name`, with the pull once the replacement is known (dropping it cancels it).
    retiring: HashMap<String, (StaticPod, Option<smol::Task<()>>)>,
    /// Pods the runtime ran when atoll started and no worker has taken over: UID → name.
    found: HashMap<String, String>,
    done_tx: smol::channel::Sender<String>,
    done_rx: smol::channel::Receiver<String>,
}

impl<R: RuntimeService> Engine<R> {
    pub fn new(
        node: Arc<Node>,
        runtime: R,
        tuning: Arc<Tuning>,
        config: EngineConfig,
        prober: Arc<dyn Prober>,
    ) -> Engine<R> {
        let workers = Workers::new();
        let pleg = super::pleg::Pleg::new(workers.clone());
        let cx = Arc::new(Context {
            node,
            runtime,
            tuning,
            config,
            prober,
            workers,
            pleg,
            runtime_version: Default::default(),
        });
        let (done_tx, done_rx) = smol::channel::unbounded();
        let pleg = super::pleg::relist::spawn(&cx);
        Engine {
            cx,
            workers: HashMap::new(),
            _pleg: pleg,
            pending: HashMap::new(),
            retiring: HashMap::new(),
            found: HashMap::new(),
            done_tx,
            done_rx,
        }
    }

    /// A handle for readers that must act through a pod's worker (the local API's restart).
    pub fn control(&self) -> Control {
        Control { workers: self.cx.workers.clone(), pleg: self.cx.pleg.clone() }
    }

    /// The engine's reloadable settings.
    pub fn tuning(&self) -> &Arc<Tuning> {
        &self.cx.tuning
    }

    /// Learns which of atoll's pods the runtime runs that no worker owns, by UID and
    /// `namespace/name`: at start, before the first change, and again before orphans go.
    pub async fn adopt(&mut self) {
        let sandboxes = match self.cx.runtime.list_pod_sandbox(Some(PodSandboxFilter::default())).await {
            Ok(s) => s,
            Err(e) => {
                log::warn!("listing the runtime's pods: {e}");
                return;
            }
        };
        for s in sandboxes.iter().filter(|s| managed(&s.annotations)) {
            let label = |k: &str| s.labels.get(k).cloned().unwrap_or_default();
            let uid = label(LABEL_POD_UID);
            if !self.workers.contains_key(&uid) {
                let key = format!("{}/{}", label(LABEL_POD_NAMESPACE), label(LABEL_POD_NAME));
                self.found.entry(uid).or_insert(key);
            }
        }
    }

    /// A receiver of finished workers' UIDs; pass each to [`Engine::worker_done`].
    pub fn finished(&self) -> smol::channel::Receiver<String> {
        self.done_rx.clone()
    }

    /// UIDs with a live worker (a pod running or stopping, or an orphan being removed).
    pub fn running(&self) -> HashSet<String> {
        self.workers.keys().cloned().collect()
    }

    /// Applies one batch of changes (the merger's, for one snapshot). A pod removed and added
    /// again under the same name (its manifest changed) is a replacement: the old version keeps
    /// running until the new one's images are on the node.
    pub fn apply_all(&mut self, changes: Vec<Change>) {
        let added: HashSet<String> = changes
            .iter()
            .filter_map(|c| match c {
                Change::Add(sp) => Some(sp.pod.key()),
                _ => None,
            })
            .collect();
        for change in changes {
            match change {
                Change::Remove(sp) if added.contains(&sp.pod.key()) && self.workers.contains_key(&sp.uid) => {
                    log::info!(
                        "pod {} ({}): a new version arrived; it is stopped once the new version's images are on the node",
                        sp.pod.key(),
                        sp.uid
                    );
                    self.retiring.insert(sp.pod.key(), (sp, None));
                }
                other => self.apply(other),
            }
        }
    }

    pub fn apply(&mut self, change: Change) {
        match change {
            Change::Add(sp) => self.add(sp),
            Change::Update(sp) => {
                let uid = sp.uid.clone();
                if self.workers.contains_key(&uid) {
                    self.cx.workers.send(&uid, Msg::Update(Box::new(sp)));
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
                self.retired(&sp.pod.key(), &sp.uid);
                if self.workers.contains_key(&sp.uid) {
                    log::info!("pod {} ({}): removed from the manifests; terminating", sp.pod.key(), sp.uid);
                    self.cx.workers.send(&sp.uid, Msg::Terminate(grace_of(&sp.pod)));
                }
            }
        }
    }

    fn add(&mut self, sp: StaticPod) {
        let key = sp.pod.key();
        self.found.remove(&sp.uid); // adopted by its worker
        let older: Vec<String> = self.found.iter().filter(|(_, k)| **k == key).map(|(uid, _)| uid.clone()).collect();
        for uid in older {
            log::info!("pod {key} ({uid}): replaced while atoll was down; stopping the old version first");
            self.remove_found(uid);
        }
        if self.workers.values().any(|h| h.key == key) {
            log::info!("pod {key} ({}): waiting for the previous version to terminate", sp.uid);
            if let Some(old) = self.retiring.get(&key).map(|(old, _)| old.clone()) {
                self.prepull(old, &sp);
            }
            self.pending.entry(key).or_default().push(sp);
            return;
        }
        let (tx, rx) = smol::channel::bounded(8);
        let (wake, woken) = smol::channel::bounded(1);
        let uid = sp.uid.clone();
        let (cx, done, finished) = (self.cx.clone(), self.done_tx.clone(), uid.clone());
        log::info!("pod {key} ({uid}): starting a worker");
        let task = smol::spawn(async move {
            worker::run(cx, sp, rx, woken).await;
            let _ = done.send(finished).await;
        });
        self.cx.workers.register(&uid, Inbox { tx, wake });
        self.workers.insert(uid, Handle { key, _task: task });
    }

    /// Pulls `new`'s images while `old` runs, then terminates `old` (`new` waits in
    /// `pending` for it to finish). A newer replacement's pull replaces this one.
    fn prepull(&mut self, old: StaticPod, new: &StaticPod) {
        let Some(tx) = self.cx.workers.inbox(&old.uid).map(|i| i.tx) else { return };
        let (cx, key, new) = (self.cx.clone(), new.pod.key(), new.pod.clone());
        let task = smol::spawn(async move {
            super::prepull::run(&cx, &old.pod, &new).await;
            log::info!("pod {} ({}): the new version's images are on the node; terminating", old.pod.key(), old.uid);
            let _ = tx.send(Msg::Terminate(grace_of(&old.pod))).await;
        });
        if let Some(entry) = self.retiring.get_mut(&key) {
            entry.1 = Some(task);
        }
    }

    /// The old version `uid` of `key` retires no more (removed, or ended): its pull is dropped.
    fn retired(&mut self, key: &str, uid: &str) {
        if self.retiring.get(key).is_some_and(|(old, _)| old.uid == uid) {
            self.retiring.remove(key);
        }
    }

    /// Called when a worker has ended: starts the next version of its pod, if one waits.
    pub fn worker_done(&mut self, uid: &str) {
        self.cx.workers.unregister(uid);
        self.cx.pleg.forget(uid);
        let Some(h) = self.workers.remove(uid) else { return };
        self.retired(&h.key, uid);
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

    /// Stops and removes, in the background, the pods atoll created that are no longer
    /// desired (run once every source has delivered its first snapshot). Each holds its name
    /// until it is gone, like a terminating worker.
    pub async fn remove_orphans(&mut self, desired: &HashSet<String>) {
        self.adopt().await;
        let mut orphans: Vec<String> = self
            .found
            .keys()
            .filter(|uid| !desired.contains(*uid) && !self.workers.contains_key(*uid))
            .cloned()
            .collect();
        orphans.sort();
        for uid in orphans {
            log::info!("pod {uid}: no longer in any manifest; stopping and removing it");
            self.remove_found(uid);
        }
    }

    /// Stops and removes a pod found in the runtime, as a task that holds its name meanwhile.
    fn remove_found(&mut self, uid: String) {
        let Some(key) = self.found.remove(&uid) else { return };
        let (cx, done, finished) = (self.cx.clone(), self.done_tx.clone(), uid.clone());
        let task = smol::spawn(async move {
            if let Err(e) = super::orphan::remove(&cx, &finished).await {
                log::warn!("pod {finished}: removing it: {e}");
            }
            let _ = done.send(finished).await;
        });
        self.workers.insert(uid, Handle { key, _task: task });
    }
}

/// Reaches a pod's worker from outside the engine.
#[derive(Clone)]
pub struct Control {
    workers: Arc<Workers>,
    pleg: Arc<super::pleg::Pleg>,
}

impl Control {
    /// What tells the engine of runtime changes as they happen.
    pub fn runtime_signal(&self) -> super::pleg::Signal {
        self.pleg.signal()
    }

    /// Wakes every worker (images arrived: a pod waiting for one looks again).
    pub fn wake_all(&self) {
        self.workers.wake_all();
    }

    /// Stops the pod's running containers through its worker (preStop hooks run, as for any
    /// kill); they come back per restartPolicy. The stopped containers' names, or `None` when
    /// no worker runs the pod.
    pub async fn restart(&self, uid: &str) -> Option<Vec<String>> {
        let inbox = self.workers.inbox(uid)?;
        let (tx, rx) = smol::channel::bounded(1);
        inbox.tx.send(Msg::Restart(tx)).await.ok()?;
        rx.recv().await.ok()
    }
}
