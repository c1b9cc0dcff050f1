//! One pod's worker (kubelet's pod worker): a loop that syncs the pod when something happens
//! and publishes its status; the sync itself is `sync`.
//!
//! A worker owns one pod UID. It syncs when told (a new spec, a delete, a restart asked for on
//! the local API), when the PLEG sees the runtime change for its pod, when a probe publishes
//! a result, when a wait (back-off, activeDeadlineSeconds) is over, at once after a sync that
//! changed something (to see the result), 10 s after a failed sync, and otherwise never: a
//! quiet pod costs nothing (kubelet also resyncs every syncFrequency; atoll does only when
//! that is set). After each sync it tells the probes what the runtime shows, hands the running
//! processes to the PLEG when it watches exits, and stores the pod's status. When the pod is
//! deleted it stops everything within the grace period, removes the containers, the sandboxes
//! and the pod's directories, and ends.

use super::context::Context;
use super::errors::{SyncError, SYNC_ERROR_RETRY};
use super::inbox::Msg;
use super::lifecycle::{self, Deadline, Failure};
use super::plan::Kill;
use super::stop::{grace_of, stop_containers};
use super::sync::{sync, Mode, Synced};
use crate::cri::RuntimeService;
use crate::metrics;
use crate::node::observed::{ContainerState, Observed, Waits};
use crate::pod::types::Pod;
use crate::pod::StaticPod;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

/// How long a worker with nothing pending sleeps unless woken (a day: in effect, until woken).
const QUIET: Duration = Duration::from_secs(24 * 3600);

/// Runs the worker of `sp` until it is terminated and cleaned up.
/// `woken` carries the PLEG's wake-ups (at most one pending: they coalesce).
pub async fn run<R: RuntimeService>(
    cx: Arc<Context<R>>,
    sp: StaticPod,
    rx: smol::channel::Receiver<Msg>,
    woken: smol::channel::Receiver<()>,
) {
    let mut w = Worker::new(cx, sp);
    loop {
        // Boxed: the sync's state lives on the heap only while it runs, so a quiet worker holds
        // a small future (inline, it made each worker about 30 KB).
        let wait = match Box::pin(w.sync()).await {
            Step::Removed => return,
            Step::Again => continue,
            Step::Wait(wait) => wait,
        };
        // Woken: sync now (any wake-up that came meanwhile is part of this one).
        if let Some(msg) = w.next_message(&rx, &woken, wait).await {
            w.handle(msg, rx.is_closed()).await;
        }
    }
}

/// How a sync ended for the worker's loop.
enum Step {
    /// The pod is gone: the worker ends.
    Removed,
    /// Sync again at once (the pod just failed for good: it is stopped).
    Again,
    /// Wait this long for something to happen.
    Wait(Duration),
}

/// One pod's worker and what it remembers between syncs.
struct Worker<R> {
    cx: Arc<Context<R>>,
    sp: StaticPod,
    mode: Mode,
    /// Why the pod failed for good, once it has.
    failure: Option<Failure>,
    waits: Waits,
    probes: Box<dyn crate::node::probing::PodProbes>,
    first_seen: SystemTime,
    /// kubelet's `operation_type` of the next sync: create, update (the spec changed), sync,
    /// or kill (the pod is being stopped).
    next_sync: &'static str,
    last_phase: String,
    last_error: String,
}

impl<R: RuntimeService> Worker<R> {
    fn new(cx: Arc<Context<R>>, sp: StaticPod) -> Worker<R> {
        let probes = cx.prober.start(&sp.pod);
        cx.node.statuses().set_pod(&sp.uid, &sp.pod);
        let mut w = Worker {
            cx,
            sp,
            mode: Mode::Run,
            failure: None,
            waits: Waits::new(),
            probes,
            first_seen: SystemTime::now(),
            next_sync: "create",
            last_phase: String::new(),
            last_error: String::new(),
        };
        if let Err(f) = lifecycle::runtime_handler(&w.sp.pod, |class| w.cx.tuning.runtime_handler(class)) {
            w.fail("Failed", f.message.clone(), f);
        }
        w
    }

    /// The pod failed for good: an event, and from now on it is kept stopped.
    fn fail(&mut self, reason: &str, event: String, failure: Failure) {
        self.cx.node.events().record(&self.sp.pod, true, reason, &event);
        self.failure = Some(failure);
        self.mode = Mode::Stop;
    }

    /// One sync, and what follows from what it saw: the PLEG's and the probes' views, the
    /// deadline, the status.
    async fn sync(&mut self) -> Step {
        let (uid, key) = (self.sp.uid.clone(), self.sp.pod.key());
        let resync = self.cx.config.resync.unwrap_or(QUIET);
        let verdicts = self.probes.verdicts();
        let began = Instant::now();
        let synced = sync(&self.cx, &self.sp.pod, self.mode, &verdicts, &mut self.waits).await;
        self.timed(began);
        let (wait, obs) = match synced {
            Ok((Synced::Removed, _)) => {
                self.cx.node.statuses().remove(&uid);
                let m = &self.sp.pod.metadata;
                metrics::forget_pod(&uid, &m.namespace, &m.name);
                log::info!("pod {key} ({uid}): terminated and removed");
                return Step::Removed;
            }
            Ok((Synced::Again(retry), obs)) => {
                self.last_error.clear();
                (retry.unwrap_or(resync).min(resync), obs)
            }
            Err(SyncError::Refused(f)) => {
                self.fail("Failed", f.message.clone(), f);
                return Step::Again;
            }
            Err(e) => {
                self.cx.pleg.look_failed(&uid);
                let e = e.to_string();
                if e != self.last_error {
                    log::warn!("pod {key}: sync failed: {e}");
                    self.last_error = e;
                }
                return Step::Wait(SYNC_ERROR_RETRY.min(resync));
            }
        };
        self.observed(&obs);
        let start = lifecycle::started(&obs, self.first_seen);
        let mut wait = wait;
        if self.mode == Mode::Run {
            match lifecycle::active_deadline(&self.sp.pod, start, SystemTime::now()) {
                Deadline::None => {}
                Deadline::Left(left) => wait = wait.min(left),
                Deadline::Passed { event, failure } => {
                    self.fail("DeadlineExceeded", event, failure);
                    return Step::Again;
                }
            }
        }
        self.publish(&obs, start);
        Step::Wait(wait)
    }

    /// A sync that began at `began`, in kubelet's pod worker histogram.
    fn timed(&mut self, began: Instant) {
        let op = if self.mode == Mode::Run { std::mem::replace(&mut self.next_sync, "sync") } else { "kill" };
        metrics::observe(&metrics::POD_WORKER_SECONDS, &[("operation_type", op)], began.elapsed().as_secs_f64());
    }

    /// What the runtime shows goes to the PLEG (processes to watch, logs to rotate) and the
    /// probes.
    fn observed(&mut self, obs: &Observed) {
        let (cx, uid) = (&self.cx, &self.sp.uid);
        if cx.pleg.watch_exits() {
            super::pleg::exits::watch(&cx.pleg.exits, &cx.runtime, uid, obs);
        }
        let logs = obs.containers.iter().filter(|c| c.state == ContainerState::Running && !c.log_path.is_empty());
        cx.pleg.set_logs(uid, logs.map(|c| c.log_path.clone().into()).collect());
        let ip = pod_ip(cx, &self.sp.pod, obs);
        self.probes.update(&self.sp.pod, obs, &ip, matches!(self.mode, Mode::Terminate(_)));
    }

    /// The pod's status, to the node's store.
    fn publish(&mut self, obs: &Observed, start: SystemTime) {
        let node = &self.cx.node;
        let ctx = crate::status::Context {
            runtime_name: node.facts().runtime_name.clone(),
            host_ip: node.facts().host_ip.clone(),
            waiting: self.waits.clone(),
            start_time: Some(start),
            probes: self.probes.view(),
        };
        let mut status = crate::status::compute(&self.sp.pod, obs, &ctx);
        if let (Mode::Stop, Some(f)) = (self.mode, &self.failure) {
            lifecycle::show_failure(&mut status, f);
        }
        // Transition times from the status the store holds (kubelet's status manager keeps the
        // old time of a condition whose status did not change).
        let before = node.statuses().get(&self.sp.uid);
        let now = crate::rfc3339::format_seconds(SystemTime::now());
        crate::status::stamp_transitions(&mut status, before.as_ref(), &now);
        if status.phase != self.last_phase {
            log::info!("pod {}: phase {}", self.sp.pod.key(), status.phase);
            if status.phase == "Running" {
                let took = self.first_seen.elapsed().unwrap_or_default();
                metrics::observe(&metrics::POD_START_SECONDS, &[], took.as_secs_f64());
            }
            self.last_phase = status.phase.clone();
        }
        node.statuses().set(&self.sp.uid, status);
    }

    /// Waits for a message (`Some(None)`: the engine went away, or `wait` passed), or a
    /// wake-up from the PLEG or the probes (`None`).
    async fn next_message(
        &self,
        rx: &smol::channel::Receiver<Msg>,
        woken: &smol::channel::Receiver<()>,
        wait: Duration,
    ) -> Option<Option<Msg>> {
        smol::future::or(
            async { Some(rx.recv().await.ok()) },
            smol::future::or(
                async {
                    smol::future::or(self.probes.changed(), async {
                        if woken.recv().await.is_err() {
                            std::future::pending::<()>().await; // the PLEG is gone
                        }
                    })
                    .await;
                    None
                },
                async {
                    smol::Timer::after(wait).await;
                    Some(None)
                },
            ),
        )
        .await
    }

    async fn handle(&mut self, msg: Option<Msg>, engine_gone: bool) {
        match msg {
            Some(Msg::Update(new)) => {
                // Same UID, other containers (an explicit metadata.uid kept across an edit):
                // the probes follow the new spec, as the containers do.
                let containers_changed = new.pod.spec.containers != self.sp.pod.spec.containers
                    || new.pod.spec.init_containers != self.sp.pod.spec.init_containers;
                self.sp = *new;
                self.next_sync = "update";
                if containers_changed {
                    self.probes = self.cx.prober.start(&self.sp.pod);
                }
                self.cx.node.statuses().set_pod(&self.sp.uid, &self.sp.pod);
            }
            Some(Msg::Restart(reply)) => {
                let stopped = Box::pin(restart(&self.cx, &self.sp.pod)).await;
                let _ = reply.send(stopped).await;
            }
            Some(Msg::Terminate(grace)) => self.mode = Mode::Terminate(grace),
            None if engine_gone && !matches!(self.mode, Mode::Terminate(_)) => {
                self.mode = Mode::Terminate(grace_of(&self.sp.pod));
            }
            None => {}
        }
    }
}

/// An operator's restart: the running containers are stopped as for any kill (preStop within
/// the pod's grace period); the next sync starts them again per restartPolicy.
async fn restart<R: RuntimeService>(cx: &Context<R>, pod: &Pod) -> Vec<String> {
    let Ok(obs) = super::observe::observe(&cx.runtime, &pod.metadata.uid, Default::default()).await else {
        return Vec::new();
    };
    let kills: Vec<Kill> = obs
        .containers
        .iter()
        .filter(|c| c.state == ContainerState::Running)
        .map(|c| Kill::new(c, format!("Stopping container {} (atoll restart)", c.name)))
        .collect();
    stop_containers(cx, pod, &obs, &kills, grace_of(pod)).await;
    kills.into_iter().map(|k| k.name).collect()
}

/// The pod's IP as its status shows it: the newest ready sandbox's, the node's for hostNetwork.
fn pod_ip<R>(cx: &Context<R>, pod: &Pod, obs: &Observed) -> String {
    match obs.sandboxes.first() {
        Some(s) if s.ready && pod.spec.host_network => cx.node.facts().host_ip.clone(),
        Some(s) if s.ready => s.ip.clone(),
        _ => String::new(),
    }
}
