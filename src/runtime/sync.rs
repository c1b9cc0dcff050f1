//! One sync of one pod (kubelet's SyncPod): observe the runtime, decide with the pure
//! [`plan`](super::plan::plan), and act: kills (preStop first), a new sandbox if needed, the
//! waits the plan names (back-off), the starts; then old instances and empty old sandboxes
//! are removed, the running containers' logs rotated and their ConfigMap and Secret volumes
//! refreshed. A stopping pod is stopped, and a terminating one stopped and removed. Re-running
//! a sync is always safe: every decision is made again from what the runtime shows.

use super::context::Context;
use super::errors::SyncError;
use super::observe::{observe, Left, Look};
use super::plan::{self, Plan};
use super::start::{start_containers, wait_all, Images, Sandbox};
use super::{host_files, lifecycle, sandbox, stop};
use crate::cri::ids::short;
use crate::cri::RuntimeService;
use crate::node::observed::{ContainerState, Observed, ProbeVerdicts, WaitReason, Waits};
use crate::pod::paths::PodDir;
use crate::pod::types::Pod;
use std::path::Path;
use std::time::{Duration, SystemTime};

/// What a worker does with its pod.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// Keep it running.
    Run,
    /// Keep it stopped (activeDeadlineSeconds passed, unknown runtime class): it has failed.
    Stop,
    /// Stop it within this grace period, remove it, and end.
    Terminate(Duration),
}

/// How a sync ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Synced {
    /// Sync again, after at most this long.
    Again(Option<Duration>),
    /// The pod is gone; the worker ends.
    Removed,
}

/// One sync; returns how it ended and what the runtime showed at its start.
pub async fn sync<R: RuntimeService>(
    cx: &Context<R>,
    pod: &Pod,
    mode: Mode,
    verdicts: &ProbeVerdicts,
    waits: &mut Waits,
) -> Result<(Synced, Observed), SyncError> {
    let uid = &pod.metadata.uid;
    // The follow-up of a sync that made everything it meant to reads what that sync left.
    let left = cx.pleg.left(uid).filter(|_| mode == Mode::Run);
    cx.pleg.looking(uid);
    let pids = |id: &str| cx.pleg.watch_exits() && cx.pleg.exits.wants_pid(id);
    let look = Look { facts: Some(&cx.pleg.sandboxes), pids: Some(&pids), left };
    let obs = observe(&cx.runtime, uid, look).await.map_err(SyncError::runtime("observe"))?;
    let decided = {
        let backoff = cx.tuning.crash_backoff();
        plan::plan(pod, &obs, verdicts, &backoff, SystemTime::now(), mode != Mode::Run)
    };
    match mode {
        Mode::Terminate(grace) => {
            stop::teardown(cx, pod, &obs, &decided.kill, grace).await?;
            return Ok((Synced::Removed, obs));
        }
        Mode::Stop => {
            if !decided.kill.is_empty() || obs.sandboxes.iter().any(|s| s.ready) {
                stop::stop_pod(cx, pod, &obs, &decided.kill, stop::grace_of(pod)).await?;
            }
            return Ok((Synced::Again(None), obs));
        }
        Mode::Run => {}
    }
    // The pod's directory, made once for the whole sync (its UID was checked at load: an
    // error here is reported where the directory is first needed, as before).
    let dir = super::volumes::poddir::pod_dir(&cx.node.facts().root_dir, &pod.metadata.uid);
    let synced = act(cx, pod, &obs, decided, waits, dir.as_ref()).await;
    refresh_object_volumes(cx, pod, &obs, dir.as_ref());
    collect_garbage(cx, pod, &obs).await;
    let rotation = cx.config.log_rotation;
    for c in obs.containers.iter().filter(|c| c.state == ContainerState::Running && !c.log_path.is_empty()) {
        match super::logs::rotate_if_needed(&cx.runtime, &c.id, Path::new(&c.log_path), rotation).await {
            Ok(true) => log::debug!("pod {}: rotated the log of {}", pod.key(), c.name),
            Ok(false) => {}
            Err(e) => log::warn!("pod {}: log rotation of {}: {e}", pod.key(), c.name),
        }
    }
    synced.map(|s| (s, obs))
}

/// Carries out a plan for a pod that should run.
async fn act<R: RuntimeService>(
    cx: &Context<R>,
    pod: &Pod,
    obs: &Observed,
    p: Plan,
    waits: &mut Waits,
    dir: Result<&PodDir, &String>,
) -> Result<Synced, SyncError> {
    stop::stop_containers(cx, pod, obs, &p.kill, stop::grace_of(pod)).await;
    if p.kill_pod {
        for s in obs.sandboxes.iter().filter(|s| s.ready) {
            cx.pleg.exits.expect(&s.id);
            let stopped = cx.runtime.stop_pod_sandbox(&s.id).await;
            if stopped.is_err() {
                cx.pleg.exits.not_stopped(&s.id);
            }
            stopped.map_err(SyncError::runtime("StopPodSandbox"))?;
        }
    }
    if p.purge_init {
        for c in obs.containers.iter().filter(|c| pod.spec.init_containers.iter().any(|i| i.name == c.name)) {
            let _ = cx.runtime.remove_container(&c.id).await;
        }
    }
    if p.create_sandbox.is_some() && !obs.sandboxes.iter().any(|s| s.ready) {
        if let Some(message) = dependency_wait(cx, pod) {
            let names = pod.spec.init_containers.iter().chain(&pod.spec.containers).map(|c| c.name.as_str());
            let event = ("WaitingForDependency", false);
            wait_all(cx, pod, waits, names, event, WaitReason::DependencyNotReady, &message);
            return Ok(Synced::Again(Some(DEPENDENCY_RECHECK)));
        }
    }
    if p.create_sandbox.is_some() || !p.start.is_empty() {
        runnable_here(cx, pod).await?;
    }
    if p.create_sandbox.is_some() {
        pod_cgroup_ready(cx, pod).await?;
    }
    // The config of the sandbox the containers go into, built once: RunPodSandbox,
    // PullImage and CreateContainer all get it.
    let attempt = p.create_sandbox.or_else(|| obs.sandboxes.first().map(|s| s.attempt)).unwrap_or(0);
    let (sandbox_config, handler) = if p.create_sandbox.is_some() || !p.start.is_empty() {
        // The worker's own rule: a class taken out of the table by a reload fails the pod.
        let handler =
            lifecycle::runtime_handler(pod, |class| cx.tuning.runtime_handler(class)).map_err(SyncError::Refused)?;
        (sandbox::sandbox_config(pod, attempt, cx.node.facts()).map_err(SyncError::Config)?, handler)
    } else {
        Default::default()
    };
    let (mut images, mut made, mut made_sandbox) = (Images::new(), None, None);
    let (sandbox_id, pod_ip) = match p.create_sandbox {
        Some(attempt) => {
            // The images are looked at (and pulled), and the host files made (the pod's log
            // directory first), while the sandbox is made, not after.
            let files = async {
                match dir {
                    Ok(dir) if !p.start.is_empty() => {
                        Some(host_files::make(pod, dir, &sandbox_config.log_directory, &p.start, None).await)
                    }
                    _ => host_files::log_directory(&sandbox_config.log_directory).await.err().map(Err),
                }
            };
            let ((id, found), files) = smol::future::zip(
                smol::future::zip(
                    cx.runtime.run_pod_sandbox(sandbox_config.clone(), &handler),
                    prefetch(cx, pod, &p.start, &sandbox_config),
                ),
                files,
            )
            .await;
            (images, made) = (found, files);
            let id = id.map_err(SyncError::CreateSandbox)?;
            let st = cx.runtime.pod_sandbox_status(&id, false).await.map_err(SyncError::runtime("PodSandboxStatus"))?;
            let sandbox = cx.pleg.sandboxes.learn(&pod.metadata.uid, &id, &st);
            let ip = sandbox.ip;
            made_sandbox = Some((attempt, sandbox.ready));
            let shown = if ip.is_empty() { String::new() } else { format!(", IP {ip}") };
            log::info!("pod {}: sandbox {} (attempt {attempt}) ready{shown}", pod.key(), short(&id));
            (id, ip)
        }
        None => match &p.sandbox_id {
            Some(id) => (id.clone(), obs.sandboxes.first().map(|s| s.ip.clone()).unwrap_or_default()),
            None => return Ok(Synced::Again(None)),
        },
    };
    let mut retry: Option<Duration> = p.waiting.iter().map(|w| w.retry_in).min();
    for w in &p.waiting {
        cx.node.events().record(pod, true, "BackOff", &w.wait.message);
        waits.insert(w.name.clone(), w.wait.clone());
    }
    if p.start.is_empty() {
        // With a new sandbox and nothing to start, `made` is only the pod's log directory.
        return match made {
            Some(Err(e)) => Err(SyncError::Host(e)),
            _ => Ok(Synced::Again(retry)),
        };
    }
    let dir = dir.map_err(|e| SyncError::Host(e.clone()))?;
    let files = host_files::complete(made, pod, dir, &sandbox_config.log_directory, &p.start, &pod_ip)
        .await
        .map_err(SyncError::Host)?;
    let sb = Sandbox { id: &sandbox_id, ip: &pod_ip, config: &sandbox_config };
    let started = start_containers(cx, pod, &p.start, &sb, waits, images, files).await?;
    // Look again at once at what was started: its status, and its process to watch. If
    // every start went through, the runtime holds nothing this sync did not see or make.
    let any = !started.started.is_empty();
    if any && !started.not_all {
        cx.pleg.leave(&pod.metadata.uid, Left::after(obs, made_sandbox, &started.started, &sandbox_id));
    }
    let soonest = if any { Some(Duration::ZERO) } else { started.retry };
    if let Some(r) = soonest {
        retry = Some(retry.map_or(r, |x| x.min(r)));
    }
    Ok(Synced::Again(retry))
}

/// A running pod's ConfigMap and Secret volumes follow their objects (kubelet updates
/// mounts without a subPath in place); an object that went leaves the last files.
fn refresh_object_volumes<R: RuntimeService>(
    cx: &Context<R>,
    pod: &Pod,
    obs: &Observed,
    dir: Result<&PodDir, &String>,
) {
    use super::volumes::object_volumes::{any, set_up, Outcome};
    if !any(pod) || !obs.sandboxes.iter().any(|s| s.ready) {
        return;
    }
    let dir = match dir {
        Ok(dir) => dir,
        Err(e) => return log::debug!("pod {}: its volumes keep their last files: {e}", pod.key()),
    };
    for (volume, outcome) in set_up(dir, pod, &cx.node.objects().for_pod(pod), cx.node.facts().allocatable()) {
        match outcome {
            Outcome::Current(true) => log::info!("pod {}: volume {volume} updated from its objects", pod.key()),
            Outcome::Current(false) => {}
            Outcome::Failed(e) => log::debug!("pod {}: volume {volume} keeps its last files: {e}", pod.key()),
        }
    }
}

/// How often a pod waiting for its dependencies looks at them again.
const DEPENDENCY_RECHECK: Duration = Duration::from_secs(1);

/// Why `pod` may not create its sandbox yet: a pod it depends on (`atoll.io/depends-on`) is
/// not Ready, not there, or in a cycle with it. `None`: it may.
fn dependency_wait<R: RuntimeService>(cx: &Context<R>, pod: &Pod) -> Option<String> {
    use crate::pod::order::{self, Gate, Peer};
    let deps = order::depends_on(pod).ok().filter(|d| !d.is_empty())?;
    let peers: Vec<Peer> = cx
        .node
        .statuses()
        .pods()
        .into_iter()
        .filter(|(p, _)| p.metadata.uid != pod.metadata.uid)
        .map(|(p, st)| Peer {
            key: order::written_key(&p),
            ready: st.is_some_and(|s| s.ready()),
            depends_on: order::depends_on(&p).unwrap_or_default(),
        })
        .collect();
    match order::gate(&order::written_key(pod), &deps, &peers) {
        Gate::Go => None,
        Gate::Wait(message) => Some(message),
    }
}

/// Refuses what this runtime cannot run as the manifest asks: image volumes need a runtime
/// that mounts them (an older one would start the containers without the volume).
async fn runnable_here<R: RuntimeService>(cx: &Context<R>, pod: &Pod) -> Result<(), SyncError> {
    let Some(v) = pod.spec.volumes.iter().find(|v| v.image.is_some()) else { return Ok(()) };
    let (name, version) = match cx.runtime_version.get() {
        Some(known) => known.clone(),
        None => {
            let v = cx.runtime.version().await.map_err(SyncError::runtime("Version"))?;
            cx.runtime_version.get_or_init(|| (v.runtime_name, v.runtime_version)).clone()
        }
    };
    if crate::cri::features::mounts_image_volumes(&name, &version) {
        return Ok(());
    }
    Err(SyncError::Refused(lifecycle::Failure {
        reason: "ImageVolumesNotSupported",
        message: format!(
            "volume {:?} is an image volume, which {name} {version} cannot mount (containerd 2.1 or CRI-O 1.31 and later can)",
            v.name
        ),
    }))
}

/// A pod with pod-level limits gets its own cgroup before its sandbox (`pod_cgroup`), made
/// in cgroupfs's layout; a runtime that drives cgroups through systemd would not put the
/// containers in it, so the pod fails rather than run unbounded.
async fn pod_cgroup_ready<R: RuntimeService>(cx: &Context<R>, pod: &Pod) -> Result<(), SyncError> {
    use super::pod_cgroup;
    if pod_cgroup::values(pod).is_none() {
        return Ok(());
    }
    if cx.runtime.systemd_cgroups().await.map_err(SyncError::runtime("RuntimeConfig"))? {
        return Err(SyncError::Refused(lifecycle::Failure {
            reason: "PodLevelResourcesNotSupported",
            message: "the runtime uses the systemd cgroup driver; atoll bounds a pod by its pod-level limits only with cgroupfs".into(),
        }));
    }
    pod_cgroup::create(Path::new(pod_cgroup::ROOT), pod).map_err(SyncError::Host)
}

/// The images of the containers about to start, looked at (and pulled per policy) in order.
async fn prefetch<R: RuntimeService>(
    cx: &Context<R>,
    pod: &Pod,
    starts: &[plan::Start],
    sandbox_config: &crate::cri::api::PodSandboxConfig,
) -> Images {
    let mut out = Images::new();
    for start in starts {
        let c = start.container(pod);
        if !out.contains_key(&c.name) {
            out.insert(c.name.clone(), super::images::ensure(cx, pod, c, sandbox_config).await);
        }
    }
    out
}

/// Removes old exited instances (their log files first, while the path is known) and old
/// sandboxes that hold nothing any more.
async fn collect_garbage<R: RuntimeService>(cx: &Context<R>, pod: &Pod, obs: &Observed) {
    let (containers, sandboxes) = plan::garbage(obs);
    for c in containers {
        if !c.log_path.is_empty() {
            let _ = std::fs::remove_file(&c.log_path);
        }
        match cx.runtime.remove_container(&c.id).await {
            Ok(()) => log::debug!("pod {}: removed old instance {} of {}", pod.key(), short(&c.id), c.name),
            Err(e) if !e.is_not_found() => {
                log::warn!("pod {}: removing old container {}: {e}", pod.key(), short(&c.id))
            }
            Err(_) => {}
        }
    }
    for s in sandboxes {
        if let Err(e) = cx.runtime.remove_pod_sandbox(&s.id).await {
            if !e.is_not_found() {
                log::warn!("pod {}: removing old sandbox {}: {e}", pod.key(), short(&s.id));
            }
        }
    }
}
