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
use super::errors::SyncError;
use super::inbox::Msg;
use super::lifecycle::{self, Deadline, Failure};
use super::plan::Kill;
use super::stop::{grace_of, stop_containers};
use super::sync::{sync, Mode, Synced};
use crate::cri::RuntimeService;
use crate::node::observed::{ContainerState, Observed, Waits};
use crate::pod::types::Pod;
use crate::pod::StaticPod;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

/// How long a worker with nothing pending sleeps unless woken (a day: in effect, until woken).
const QUIET: Duration = Duration::from_secs(24 * 3600);
/// The next try after a sync failed (kubelet's pod workers' back-off period).
const SYNC_ERROR_RETRY: Duration = Duration::from_secs(10);

/// Runs the worker of `sp` until it is terminated and cleaned up.
/// `woken` carries the PLEG's wake-ups (at most one pending: they coalesce).
pub async fn run<R: RuntimeService>(
    cx: Arc<Context<R>>,
    mut sp: StaticPod,
    rx: smol::channel::Receiver<Msg>,
    woken: smol::channel::Receiver<()>,
) {
    let uid = sp.uid.clone();
    let key = sp.pod.key();
    let node = cx.node.clone();
    let mut mode = Mode::Run;
    let mut failure: Option<Failure> = None;
    if let Err(f) = lifecycle::runtime_handler(&sp.pod, |class| cx.tuning.runtime_handler(class)) {
        node.events().record(&sp.pod, true, "Failed", &f.message);
        failure = Some(f);
        mode = Mode::Stop;
    }
    let mut last_error = String::new();
    let mut waits = Waits::new();
    let first_seen = SystemTime::now();
    let mut last_phase = String::new();
    let mut probes = cx.prober.start(&sp.pod);
    node.statuses().set_pod(&uid, &sp.pod);
    loop {
        let resync = cx.config.resync.unwrap_or(QUIET);
        // Boxed: the sync's state lives on the heap only while it runs, so a quiet worker holds
        // a small future (inline, it made each worker about 30 KB).
        let (mut wait, obs) = match Box::pin(sync(&cx, &sp.pod, mode, &probes.verdicts(), &mut waits)).await {
            Ok((Synced::Removed, _)) => {
                node.statuses().remove(&uid);
                log::info!("pod {key} ({uid}): terminated and removed");
                return;
            }
            Ok((Synced::Again(retry), obs)) => {
                last_error.clear();
                (retry.unwrap_or(resync).min(resync), Some(obs))
            }
            Err(SyncError::Refused(f)) => {
                node.events().record(&sp.pod, true, "Failed", &f.message);
                failure = Some(f);
                mode = Mode::Stop;
                continue;
            }
            Err(e) => {
                let e = e.to_string();
                if e != last_error {
                    log::warn!("pod {key}: sync failed: {e}");
                    last_error = e;
                }
                (SYNC_ERROR_RETRY.min(resync), None)
            }
        };
        if let Some(obs) = obs {
            if cx.pleg.watch_exits() {
                super::pleg::exits::watch(&cx.pleg.exits, &cx.runtime, &uid, &obs);
            }
            let logs = obs.containers.iter().filter(|c| c.state == ContainerState::Running && !c.log_path.is_empty());
            cx.pleg.set_logs(&uid, logs.map(|c| c.log_path.clone().into()).collect());
            probes.update(&sp.pod, &obs, &pod_ip(&cx, &sp.pod, &obs), matches!(mode, Mode::Terminate(_)));
            let start = lifecycle::started(&obs, first_seen);
            if mode == Mode::Run {
                match lifecycle::active_deadline(&sp.pod, start, SystemTime::now()) {
                    Deadline::None => {}
                    Deadline::Left(left) => wait = wait.min(left),
                    Deadline::Passed { event, failure: f } => {
                        node.events().record(&sp.pod, true, "DeadlineExceeded", &event);
                        failure = Some(f);
                        mode = Mode::Stop;
                        continue;
                    }
                }
            }
            let ctx = crate::status::Context {
                runtime_name: node.facts().runtime_name.clone(),
                host_ip: node.facts().host_ip.clone(),
                waiting: waits.clone(),
                start_time: Some(start),
                probes: probes.view(),
            };
            let mut status = crate::status::compute(&sp.pod, &obs, &ctx);
            if let (Mode::Stop, Some(f)) = (mode, &failure) {
                lifecycle::show_failure(&mut status, f);
            }
            if status.phase != last_phase {
                log::info!("pod {key}: phase {}", status.phase);
                last_phase = status.phase.clone();
            }
            node.statuses().set(&uid, status);
        }
        let msg = smol::future::or(
            async { Some(rx.recv().await.ok()) },
            smol::future::or(
                async {
                    smol::future::or(probes.changed(), async {
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
        .await;
        // Woken: sync now (any wake-up that came meanwhile is part of this one).
        let Some(msg) = msg else { continue };
        match msg {
            Some(Msg::Update(new)) => {
                // Same UID, other containers (an explicit metadata.uid kept across an edit):
                // the probes follow the new spec, as the containers do.
                let containers_changed = new.pod.spec.containers != sp.pod.spec.containers
                    || new.pod.spec.init_containers != sp.pod.spec.init_containers;
                sp = *new;
                if containers_changed {
                    probes = cx.prober.start(&sp.pod);
                }
                node.statuses().set_pod(&uid, &sp.pod);
            }
            Some(Msg::Restart(reply)) => {
                let stopped = Box::pin(restart(&cx, &sp.pod)).await;
                let _ = reply.send(stopped).await;
            }
            Some(Msg::Terminate(grace)) => mode = Mode::Terminate(grace),
            None if rx.is_closed() && !matches!(mode, Mode::Terminate(_)) => mode = Mode::Terminate(grace_of(&sp.pod)),
            None => {}
        }
    }
}

/// An operator's restart: the running containers are stopped as for any kill (preStop within
/// the pod's grace period); the next sync starts them again per restartPolicy.
async fn restart<R: RuntimeService>(cx: &Context<R>, pod: &Pod) -> Vec<String> {
    let Ok(obs) = super::observe::observe(&cx.runtime, &pod.metadata.uid).await else { return Vec::new() };
    let kills: Vec<Kill> = obs
        .containers
        .iter()
        .filter(|c| c.state == ContainerState::Running)
        .map(|c| Kill {
            id: c.id.clone(),
            name: c.name.clone(),
            message: format!("Stopping container {} (atoll restart)", c.name),
            grace: None,
        })
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
