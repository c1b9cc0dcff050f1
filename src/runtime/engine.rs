//! The engine: one worker per pod UID, fed by the desired set's changes and woken by the
//! PLEG (`pleg`). What to do with each change is the ledger's decision (`ledger`, pure and
//! tested: one worker per name, replacements pulled before the swap, pods found in the runtime
//! adopted, replaced or removed); the engine carries its acts out: it spawns workers, pulls
//! and orphan removals, and reaches workers through the registry (`workers`).
//!
//! At start the engine learns which pods the runtime already runs ([`Engine::adopt`]): a
//! desired pod whose name is held there by another UID (the manifest changed while atoll was
//! down) waits until that orphan has been stopped with its own grace period and preStop hook,
//! so two copies never share hostPath data. Once every source has spoken, the other pods atoll
//! created that nobody wants any more are stopped and removed the same way; nothing atoll did
//! not create is ever touched.
//!
//! The engine runs against any [`RuntimeService`]: the CRI client in the agent, a fake in
//! unit tests. Its owner passes finished workers back ([`Engine::finished`],
//! [`Engine::worker_done`]); readers reach workers through a [`Control`].

use super::context::Context;
use super::inbox::{Inbox, Msg};
use super::ledger::{Act, Ledger};
use super::observe::managed;
use super::sandbox::{LABEL_POD_NAME, LABEL_POD_NAMESPACE, LABEL_POD_UID};
use super::tuning::{EngineConfig, Tuning};
use super::worker;
use super::workers::Workers;
use crate::cri::api::PodSandboxFilter;
use crate::cri::RuntimeService;
use crate::node::probing::Prober;
use crate::node::Node;
use crate::pod::{Change, PodKey, PodUid, StaticPod};
use std::collections::{HashMap, HashSet};
use std::sync::Arc;

pub struct Engine<R: RuntimeService> {
    cx: Arc<Context<R>>,
    ledger: Ledger,
    /// Each live worker's (or orphan removal's) task, by UID.
    tasks: HashMap<PodUid, smol::Task<()>>,
    /// Each replacement's pull, by `namespace/name` (dropping it cancels it).
    pulls: HashMap<PodKey, smol::Task<()>>,
    _pleg: Vec<smol::Task<()>>,
    done_tx: smol::channel::Sender<PodUid>,
    done_rx: smol::channel::Receiver<PodUid>,
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
            ledger: Ledger::default(),
            tasks: HashMap::new(),
            pulls: HashMap::new(),
            _pleg: pleg,
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
            let key = format!("{}/{}", label(LABEL_POD_NAMESPACE), label(LABEL_POD_NAME)).into();
            self.ledger.found(label(LABEL_POD_UID).into(), key);
        }
    }

    /// A receiver of finished workers' UIDs; pass each to [`Engine::worker_done`].
    pub fn finished(&self) -> smol::channel::Receiver<PodUid> {
        self.done_rx.clone()
    }

    /// UIDs with a live worker (a pod running or stopping, or an orphan being removed).
    pub fn running(&self) -> HashSet<PodUid> {
        self.ledger.running()
    }

    /// Applies one batch of changes (the merger's, for one snapshot). A pod removed and added
    /// again under the same name (its manifest changed) is a replacement: the old version keeps
    /// running until the new one's images are on the node.
    pub fn apply_all(&mut self, changes: Vec<Change>) {
        let acts = self.ledger.apply_all(changes);
        self.act(acts);
    }

    pub fn apply(&mut self, change: Change) {
        let acts = self.ledger.apply(change);
        self.act(acts);
    }

    /// Called when a worker has ended: starts the next version of its pod, if one waits.
    pub fn worker_done(&mut self, uid: &PodUid) {
        self.cx.workers.unregister(uid);
        self.cx.pleg.forget(uid);
        self.tasks.remove(uid);
        let acts = self.ledger.worker_done(uid);
        self.act(acts);
    }

    /// Stops and removes, in the background, the pods atoll created that are no longer
    /// desired (run once every source has delivered its first snapshot). Each holds its name
    /// until it is gone, like a terminating worker.
    pub async fn remove_orphans(&mut self, desired: &HashSet<PodUid>) {
        self.adopt().await;
        let acts = self.ledger.orphans(desired);
        self.act(acts);
    }

    /// Carries the ledger's decisions out.
    fn act(&mut self, acts: Vec<Act>) {
        for note in self.ledger.take_notes() {
            log::info!("{note}");
        }
        for act in acts {
            match act {
                Act::Start(sp) => self.start(sp),
                Act::Update(sp) => {
                    let uid = sp.uid.clone();
                    self.cx.workers.send(&uid, Msg::Update(Box::new(sp)));
                }
                Act::Terminate { uid, grace } => {
                    self.cx.workers.send(&uid, Msg::Terminate(grace));
                }
                Act::Prepull { old, new } => self.prepull(old, new),
                Act::DropPrepull { key } => {
                    self.pulls.remove(&key);
                    self.cx.workers.unwatch(&key);
                }
                Act::RemoveFound { uid } => self.remove_found(uid),
            }
        }
    }

    fn start(&mut self, sp: StaticPod) {
        let (tx, rx) = smol::channel::bounded(8);
        let (wake, woken) = smol::channel::bounded(1);
        let uid = sp.uid.clone();
        let (cx, done, finished) = (self.cx.clone(), self.done_tx.clone(), uid.clone());
        log::info!("pod {} ({uid}): starting a worker", sp.pod.key());
        let task = crate::task::spawn(async move {
            worker::run(cx, sp, rx, woken).await;
            let _ = done.send(finished).await;
        });
        self.cx.workers.register(&uid, Inbox { tx, wake });
        self.tasks.insert(uid, task);
    }

    /// Pulls `new`'s images while `old` runs, then terminates `old` (`new` waits in the
    /// ledger for it to finish). A newer replacement's pull replaces this one. The pull looks
    /// again whenever every worker is woken (an import brought images, objects changed), as a
    /// waiting container does.
    fn prepull(&mut self, old: StaticPod, new: StaticPod) {
        let Some(tx) = self.cx.workers.inbox(&old.uid).map(|i| i.tx) else { return };
        let key = new.key();
        let woken = self.cx.workers.watch(&key);
        let cx = self.cx.clone();
        let task = crate::task::spawn(async move {
            super::prepull::run(&cx, &old.pod, &new.pod, woken).await;
            log::info!("pod {} ({}): the new version's images are on the node; terminating", old.pod.key(), old.uid);
            let _ = tx.send(Msg::Terminate(super::stop::grace_of(&old.pod))).await;
        });
        self.pulls.insert(key, task);
    }

    /// Stops and removes a pod found in the runtime, as a task that holds its name meanwhile.
    fn remove_found(&mut self, uid: PodUid) {
        let (cx, done, finished) = (self.cx.clone(), self.done_tx.clone(), uid.clone());
        let task = crate::task::spawn(async move {
            if let Err(e) = super::orphan::remove(&cx, &finished).await {
                log::warn!("pod {finished}: removing it: {e}");
            }
            let _ = done.send(finished).await;
        });
        self.tasks.insert(uid, task);
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
