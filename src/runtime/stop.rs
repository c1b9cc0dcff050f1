//! Stopping and removing, with kubelet's rules: a container's preStop hook runs first, within
//! the grace period, and StopContainer gets what is left of it (at least 2 s); a pod's
//! containers are stopped in parallel, then its sandboxes; a deleted pod's containers,
//! sandboxes, logs and directories are removed ([`teardown`], for a worker's pod and an
//! orphan alike).

use super::context::Context;
use super::errors::SyncError;
use super::plan::Kill;
use super::sandbox;
use super::volumes::poddir;
use crate::cri::RuntimeService;
use crate::handlers::{self, Target};
use crate::node::observed::Observed;
use crate::pod::types::Pod;
use std::time::{Duration, Instant};

/// kubelet's floor for the grace period passed to StopContainer.
pub const MIN_GRACE: Duration = Duration::from_secs(2);

/// The pod's termination grace period (30 s unless the spec says).
pub fn grace_of(pod: &Pod) -> Duration {
    crate::deadline::secs(pod.spec.termination_grace_period_seconds.unwrap_or(30))
}

/// Stops one container: its preStop hook first (within `grace`), then StopContainer with
/// what is left of the grace, at least 2 s.
pub async fn stop_container<R: RuntimeService>(cx: &Context<R>, pod: &Pod, kill: &Kill, pod_ip: &str, grace: Duration) {
    let name = &kill.name;
    cx.node.events().record(pod, false, "Killing", &kill.message);
    let spec = pod.spec.init_containers.iter().chain(pod.spec.containers.iter()).find(|c| &c.name == name);
    let pre_stop = spec.and_then(|c| c.lifecycle.as_ref()?.pre_stop.as_ref().map(|h| (c, h)));
    let mut grace = grace;
    if let (Some((c, hook)), false) = (pre_stop, grace.is_zero()) {
        let started = Instant::now();
        let at = Target { container_id: &kill.id, pod_ip };
        let run = handlers::lifecycle(&cx.runtime, c, hook, &at, Some(grace));
        match crate::deadline::with_deadline(grace, run).await {
            Some(Ok(())) => {}
            Some(Err(e)) => cx.node.events().record(pod, true, "FailedPreStopHook", &format!("container {name}: {e}")),
            None => cx.node.events().record(
                pod,
                true,
                "FailedPreStopHook",
                &format!("container {name}: still running after {grace:?}"),
            ),
        }
        grace = grace.saturating_sub(Duration::from_secs(started.elapsed().as_secs()));
    }
    let id = kill.id.to_string();
    cx.pleg.exits.expect(&id);
    if let Err(e) = cx.runtime.stop_container(&kill.id, grace.max(MIN_GRACE)).await {
        cx.pleg.exits.not_stopped(&id);
        if !e.is_not_found() {
            log::warn!("pod {}: stopping container {name}: {e}", pod.key());
        }
    }
}

/// Stops the kills all at once, as kubelet kills a pod's containers in parallel; `grace`
/// unless a kill carries its own (a failed probe's).
pub async fn stop_containers<R: RuntimeService>(
    cx: &Context<R>,
    pod: &Pod,
    obs: &Observed,
    kills: &[Kill],
    grace: Duration,
) {
    let ip = obs.sandboxes.first().map(|s| s.ip.clone()).unwrap_or_default();
    let stops: Vec<_> = kills.iter().map(|k| stop_container(cx, pod, k, &ip, k.grace.unwrap_or(grace))).collect();
    join_all(stops).await;
}

/// Stops the kills, then every sandbox of the pod.
pub async fn stop_pod<R: RuntimeService>(
    cx: &Context<R>,
    pod: &Pod,
    obs: &Observed,
    kills: &[Kill],
    grace: Duration,
) -> Result<(), SyncError> {
    stop_containers(cx, pod, obs, kills, grace).await;
    for s in &obs.sandboxes {
        cx.pleg.exits.expect(&s.id);
        let stopped = cx.runtime.stop_pod_sandbox(&s.id).await;
        if stopped.is_err() {
            cx.pleg.exits.not_stopped(&s.id);
        }
        gone_is_fine("StopPodSandbox", stopped)?;
    }
    Ok(())
}

/// A stop or removal whose object is already gone did what it was asked.
fn gone_is_fine(call: &'static str, r: Result<(), crate::cri::Status>) -> Result<(), SyncError> {
    match r {
        Err(e) if !e.is_not_found() => Err(SyncError::runtime(call)(e)),
        _ => Ok(()),
    }
}

/// The one teardown of a pod that goes (its worker's, and an orphan's): the kills (preStop
/// first), its sandboxes stopped, then everything removed. A runtime error other than
/// NotFound stops it; the caller tries again or reports it.
pub async fn teardown<R: RuntimeService>(
    cx: &Context<R>,
    pod: &Pod,
    obs: &Observed,
    kills: &[Kill],
    grace: Duration,
) -> Result<(), SyncError> {
    stop_pod(cx, pod, obs, kills, grace).await?;
    remove_pod(cx, pod, obs).await
}

/// Removes a deleted pod's containers, sandboxes, logs and directories. Removing a sandbox
/// removes its containers (CRI's rule); a container is removed by itself only when its
/// sandbox is not among the pod's.
pub async fn remove_pod<R: RuntimeService>(cx: &Context<R>, pod: &Pod, obs: &Observed) -> Result<(), SyncError> {
    for c in obs.containers.iter().filter(|c| !obs.sandboxes.iter().any(|s| s.id == c.sandbox_id)) {
        gone_is_fine("RemoveContainer", cx.runtime.remove_container(&c.id).await)?;
    }
    for s in &obs.sandboxes {
        gone_is_fine("RemovePodSandbox", cx.runtime.remove_pod_sandbox(&s.id).await)?;
    }
    if let Ok(logs) = sandbox::log_directory(cx.node.facts(), pod) {
        let _ = std::fs::remove_dir_all(logs);
    }
    // The cgroup of a pod with pod-level limits, once its sandboxes are gone (none: nothing).
    let root = std::path::Path::new(super::pod_cgroup::ROOT);
    super::pod_cgroup::remove(root, &pod.metadata.uid).map_err(SyncError::Host)?;
    let dir = poddir::pod_dir(&cx.node.facts().root_dir, &pod.metadata.uid).map_err(SyncError::Host)?;
    poddir::remove(dir.path()).map_err(SyncError::Host)
}

/// Awaits all futures, polling them concurrently.
async fn join_all<F: std::future::Future<Output = ()>>(futures: Vec<F>) {
    let mut pending: Vec<std::pin::Pin<Box<F>>> = futures.into_iter().map(Box::pin).collect();
    std::future::poll_fn(|cx| {
        pending.retain_mut(|f| f.as_mut().poll(cx).is_pending());
        if pending.is_empty() {
            std::task::Poll::Ready(())
        } else {
            std::task::Poll::Pending
        }
    })
    .await
}
