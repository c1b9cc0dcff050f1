//! One pod's worker: observe the runtime, [`plan`], act, repeat.
//!
//! A worker owns one pod UID. It syncs when told (a new spec, a delete) and at least every
//! second; each sync reads the pod's sandboxes and containers from CRI (by the
//! `io.kubernetes.pod.uid` label), decides with the pure `plan`, and carries the plan out.
//! When the pod is deleted it stops everything within the grace period, removes the
//! containers, the sandboxes and the pod's directories, and ends.

use super::backoff::Backoff;
use super::container::{container_config, InstanceContext};
use super::hooks;
use super::plan::{self, CState, ContainerObs, Observed, Plan, ProbeVerdicts, SandboxObs, Which};
use super::poddir;
use super::sandbox::{self, NodeContext, ANNOTATION_MANAGED_BY, LABEL_CONTAINER_NAME, LABEL_POD_UID};
use crate::cri::api::{ContainerFilter, ContainerState, NamespaceMode, PodSandboxFilter, PodSandboxState};
use crate::cri::{Cri, Status};
use crate::pod::types::Pod;
use crate::pod::StaticPod;
use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

/// What every worker shares.
pub struct Shared {
    pub cri: Cri,
    pub node: NodeContext,
    pub host_ip: String,
    pub node_cpu_millis: i64,
    pub node_memory_bytes: i64,
    pub backoff: Mutex<Backoff>,
    pub image_backoff: Mutex<Backoff>,
    /// Registry credentials for pulls (replaced on SIGHUP).
    pub keyring: Mutex<super::credentials::Keyring>,
    /// How often a worker re-syncs when nothing wakes it.
    pub resync: Duration,
    /// The runtime's name, for container IDs in status (`containerd://...`).
    pub runtime_name: String,
    /// Every pod's latest status.
    pub statuses: crate::status::Store,
    /// containerLogMaxSize / containerLogMaxFiles.
    pub log_rotation: super::logs::Rotation,
    /// When the agent started (probes spread their first run over their first period).
    pub agent_start: std::time::Instant,
    /// Lifecycle events (a log line each, and the ring the local API serves).
    pub events: crate::events::Events,
    /// When the node-wide relist last completed, and whether the runtime answered it.
    pub heartbeat: std::sync::Mutex<Option<(std::time::Instant, bool)>>,
    /// The static pods to mirror to an API server, and how their mirrors stand.
    pub mirror: crate::mirror::Link,
}

impl Shared {
    /// When the node-wide relist last completed and whether the runtime answered it (None
    /// before the first).
    pub fn last_relist(&self) -> Option<(std::time::Instant, bool)> {
        *crate::locks::lock(&self.heartbeat)
    }

    /// Shared state whose runtime socket does not exist: for tests and benchmarks of the parts
    /// that do not call the runtime (probes against local sockets, the API's health).
    pub fn without_runtime() -> Arc<Shared> {
        Arc::new(Shared {
            cri: Cri::new(&crate::cri::Endpoint::parse("unix:///nonexistent/atoll.sock").expect("a valid endpoint")),
            node: Default::default(),
            host_ip: "127.0.0.1".into(),
            node_cpu_millis: 1000,
            node_memory_bytes: 1 << 30,
            backoff: Default::default(),
            image_backoff: Default::default(),
            keyring: Default::default(),
            resync: Duration::from_secs(10),
            runtime_name: "containerd".into(),
            statuses: Default::default(),
            log_rotation: Default::default(),
            agent_start: std::time::Instant::now() - Duration::from_secs(3600),
            events: Default::default(),
            heartbeat: Default::default(),
            mirror: Default::default(),
        })
    }
}

/// Why containers of one pod wait, by container name: (reason, message), kubelet's reason cache.
type Reasons = HashMap<String, (String, String)>;

/// A message to a worker.
#[derive(Debug)]
pub enum Msg {
    /// A new version of the pod (same UID).
    Update(Box<StaticPod>),
    /// Stop the pod within this grace period and end.
    Terminate(Duration),
    /// The runtime shows a change for this pod: sync now.
    Wake,
}

/// kubelet gives postStart no time limit; atoll bounds it so one hook cannot wedge its worker.
const POST_START_LIMIT: Duration = Duration::from_secs(300);

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

/// kubelet's floor for the grace period passed to StopContainer.
pub(super) const MIN_GRACE: Duration = Duration::from_secs(2);

/// Runs the worker of `sp` until it is terminated and cleaned up.
pub async fn run(shared: Arc<Shared>, mut sp: StaticPod, rx: smol::channel::Receiver<Msg>) {
    let uid = sp.uid.clone();
    let key = sp.pod.key();
    let mut mode = Mode::Run;
    // Why the pod failed for good: (reason, message) for its status.
    let mut failure: Option<(String, String)> = None;
    if let Some(class) = &sp.pod.spec.runtime_class_name {
        if shared.node.runtime_handlers.get(class).is_none() {
            let message = format!(
                "RuntimeClass {class:?} is not configured on this node (add it to runtimeClasses in atoll's config)"
            );
            shared.events.record(&sp.pod, true, "Failed", &message);
            failure = Some(("RuntimeClassNotFound".into(), message));
            mode = Mode::Stop;
        }
    }
    let mut last_error = String::new();
    let mut reasons = Reasons::new();
    let first_seen = SystemTime::now();
    let mut last_phase = String::new();
    let mut probes = crate::probe::PodProbes::start(&shared, &sp.pod);
    shared.statuses.set_pod(&uid, &sp.pod);
    loop {
        let verdicts = probes.verdicts();
        let (mut wait, obs) = match sync(&shared, &sp.pod, mode, &verdicts, &mut reasons).await {
            Ok((Outcome::Done, _)) => {
                shared.statuses.remove(&uid);
                log::info!("pod {key} ({uid}): terminated and removed");
                return;
            }
            Ok((Outcome::Again(retry), obs)) => {
                last_error.clear();
                (retry.unwrap_or(shared.resync).min(shared.resync), Some(obs))
            }
            Err(e) => {
                if e != last_error {
                    log::warn!("pod {key}: sync failed: {e}");
                    last_error = e;
                }
                (shared.resync, None)
            }
        };
        if let Some(obs) = obs {
            probes.update(&sp.pod, &obs, &pod_ip(&shared, &sp.pod, &obs), matches!(mode, Mode::Terminate(_)));
            // The pod started when its first sandbox did (so a restart of atoll does not
            // reset activeDeadlineSeconds), or when this worker first saw it.
            let start = obs
                .sandboxes
                .iter()
                .map(|s| s.created_at)
                .filter(|t| *t > 0)
                .min()
                .map_or(first_seen, |ns| SystemTime::UNIX_EPOCH + Duration::from_nanos(ns as u64));
            if let (Mode::Run, Some(limit)) = (mode, sp.pod.spec.active_deadline_seconds) {
                let limit = crate::deadline::secs(limit);
                let active = SystemTime::now().duration_since(start).unwrap_or_default();
                if active >= limit {
                    shared.events.record(
                        &sp.pod,
                        true,
                        "DeadlineExceeded",
                        &format!("active longer than activeDeadlineSeconds ({limit:?}); stopping it"),
                    );
                    failure = Some((
                        "DeadlineExceeded".into(),
                        "Pod was active on the node longer than the specified deadline".into(),
                    ));
                    mode = Mode::Stop;
                    continue;
                }
                wait = wait.min(limit - active);
            }
            let ctx = crate::status::Context {
                runtime_name: shared.runtime_name.clone(),
                host_ip: shared.host_ip.clone(),
                waiting: reasons.clone(),
                start_time: Some(start),
                probes: probes.view(),
            };
            let mut status = crate::status::compute(&sp.pod, &obs, &ctx);
            if let (Mode::Stop, Some((reason, message))) = (mode, &failure) {
                status.phase = "Failed".into();
                status.reason = Some(reason.clone());
                status.message = Some(message.clone());
            }
            if status.phase != last_phase {
                log::info!("pod {key}: phase {}", status.phase);
                last_phase = status.phase.clone();
            }
            shared.statuses.set(&uid, status);
        }
        let msg = smol::future::or(
            async { rx.recv().await.ok() },
            smol::future::or(
                async {
                    probes.changed().await;
                    Some(Msg::Wake)
                },
                async {
                    smol::Timer::after(wait).await;
                    None
                },
            ),
        )
        .await;
        match msg {
            Some(Msg::Update(new)) => {
                // Same UID, other containers (an explicit metadata.uid kept across an edit):
                // the probes follow the new spec, as the containers do.
                let containers_changed = new.pod.spec.containers != sp.pod.spec.containers
                    || new.pod.spec.init_containers != sp.pod.spec.init_containers;
                sp = *new;
                if containers_changed {
                    probes = crate::probe::PodProbes::start(&shared, &sp.pod);
                }
                shared.statuses.set_pod(&uid, &sp.pod);
            }
            Some(Msg::Wake) => {}
            Some(Msg::Terminate(grace)) => mode = Mode::Terminate(grace),
            None if rx.is_closed() && !matches!(mode, Mode::Terminate(_)) => mode = Mode::Terminate(grace_of(&sp.pod)),
            None => {}
        }
    }
}

/// The pod's IP as its status shows it: the newest ready sandbox's, the node's for hostNetwork.
fn pod_ip(shared: &Shared, pod: &Pod, obs: &Observed) -> String {
    match obs.sandboxes.first() {
        Some(s) if s.ready && pod.spec.host_network => shared.host_ip.clone(),
        Some(s) if s.ready => s.ip.clone(),
        _ => String::new(),
    }
}

/// What a worker does with its pod.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mode {
    /// Keep it running.
    Run,
    /// Keep it stopped (activeDeadlineSeconds passed, unknown runtime class): the pod has failed.
    Stop,
    /// Stop it within this grace period, remove it, and end.
    Terminate(Duration),
}

/// The pod's termination grace period.
pub fn grace_of(pod: &Pod) -> Duration {
    crate::deadline::secs(pod.spec.termination_grace_period_seconds.unwrap_or(30))
}

enum Outcome {
    /// Sync again, after at most this long.
    Again(Option<Duration>),
    /// The pod is gone; the worker ends.
    Done,
}

async fn sync(
    shared: &Shared,
    pod: &Pod,
    mode: Mode,
    verdicts: &ProbeVerdicts,
    reasons: &mut Reasons,
) -> Result<(Outcome, Observed), String> {
    let obs = observe(&shared.cri, &pod.metadata.uid).await.map_err(|e| e.to_string())?;
    let now = SystemTime::now();
    let stopping = mode != Mode::Run;
    let decided = {
        let backoff = crate::locks::lock(&shared.backoff);
        plan::plan(pod, &obs, verdicts, &backoff, now, stopping)
    };
    match mode {
        Mode::Terminate(grace) => {
            stop_all(shared, pod, &obs, &decided, grace).await?;
            remove_all(shared, pod, &obs).await?;
            return Ok((Outcome::Done, obs));
        }
        Mode::Stop => {
            if !decided.kill.is_empty() || obs.sandboxes.iter().any(|s| s.ready) {
                stop_all(shared, pod, &obs, &decided, grace_of(pod)).await?;
            }
            return Ok((Outcome::Again(None), obs));
        }
        Mode::Run => {}
    }
    let outcome = act(shared, pod, &obs, decided, reasons).await;
    collect_garbage(shared, pod, &obs).await;
    for c in obs.containers.iter().filter(|c| c.state == CState::Running && !c.log_path.is_empty()) {
        match super::logs::rotate_if_needed(&shared.cri, &c.id, Path::new(&c.log_path), shared.log_rotation).await {
            Ok(true) => log::debug!("pod {}: rotated the log of {}", pod.key(), c.name),
            Ok(false) => {}
            Err(e) => log::warn!("pod {}: log rotation of {}: {e}", pod.key(), c.name),
        }
    }
    outcome.map(|o| (o, obs))
}

/// Removes old exited instances (their log files first, while the path is known) and old
/// sandboxes that hold nothing any more.
async fn collect_garbage(shared: &Shared, pod: &Pod, obs: &Observed) {
    let (containers, sandboxes) = plan::garbage(obs);
    for c in containers {
        if !c.log_path.is_empty() {
            let _ = std::fs::remove_file(&c.log_path);
        }
        match shared.cri.remove_container(&c.id).await {
            Ok(()) => log::debug!("pod {}: removed old instance {} of {}", pod.key(), short(&c.id), c.name),
            Err(e) if !e.is_not_found() => {
                log::warn!("pod {}: removing old container {}: {e}", pod.key(), short(&c.id))
            }
            Err(_) => {}
        }
    }
    for s in sandboxes {
        if let Err(e) = shared.cri.remove_pod_sandbox(&s.id).await {
            if !e.is_not_found() {
                log::warn!("pod {}: removing old sandbox {}: {e}", pod.key(), short(&s.id));
            }
        }
    }
}

/// Reads what the runtime has for one pod UID, newest first.
pub async fn observe(cri: &Cri, uid: &str) -> Result<Observed, Status> {
    let selector = HashMap::from([(LABEL_POD_UID.to_string(), uid.to_string())]);
    let mut obs = Observed::default();
    let sandboxes =
        cri.list_pod_sandbox(Some(PodSandboxFilter { label_selector: selector.clone(), ..Default::default() })).await?;
    for s in sandboxes {
        let st = match cri.pod_sandbox_status(&s.id, false).await {
            Ok(r) => r.status.unwrap_or_default(),
            Err(e) if e.is_not_found() => continue,
            Err(e) => return Err(e),
        };
        let host_network = st
            .linux
            .and_then(|l| l.namespaces)
            .and_then(|n| n.options)
            .is_some_and(|o| o.network == NamespaceMode::Node as i32);
        obs.sandboxes.push(SandboxObs {
            id: s.id,
            attempt: s.metadata.map_or(0, |m| m.attempt),
            ready: st.state == PodSandboxState::SandboxReady as i32,
            ip: st.network.map(|n| n.ip).unwrap_or_default(),
            host_network,
            created_at: st.created_at,
        });
    }
    let containers =
        cri.list_containers(Some(ContainerFilter { label_selector: selector, ..Default::default() })).await?;
    for c in containers {
        let st = match cri.container_status(&c.id, false).await {
            Ok(r) => r.status.unwrap_or_default(),
            Err(e) if e.is_not_found() => continue,
            Err(e) => return Err(e),
        };
        let state = match ContainerState::try_from(st.state) {
            Ok(ContainerState::ContainerCreated) => CState::Created,
            Ok(ContainerState::ContainerRunning) => CState::Running,
            Ok(ContainerState::ContainerExited) => CState::Exited,
            _ => CState::Unknown,
        };
        let ann = |k: &str| st.annotations.get(k).cloned().unwrap_or_default();
        let message = if state == CState::Exited { super::termination::message(&st) } else { st.message.clone() };
        obs.containers.push(ContainerObs {
            id: c.id,
            name: c.labels.get(LABEL_CONTAINER_NAME).cloned().unwrap_or_default(),
            sandbox_id: c.pod_sandbox_id,
            restart_count: ann("io.kubernetes.container.restartCount").parse().unwrap_or(0),
            hash: ann("io.kubernetes.container.hash"),
            state,
            exit_code: st.exit_code,
            reason: st.reason,
            message,
            created_at: st.created_at,
            started_at: (st.started_at > 0)
                .then(|| SystemTime::UNIX_EPOCH + Duration::from_nanos(st.started_at as u64)),
            finished_at: (st.finished_at > 0)
                .then(|| SystemTime::UNIX_EPOCH + Duration::from_nanos(st.finished_at as u64)),
            log_path: st.log_path,
            image: st.image.map(|i| i.image).unwrap_or_default(),
            image_ref: st.image_ref,
        });
    }
    obs.normalise();
    Ok(obs)
}

/// Stops a container: its preStop hook first (within the grace period), then StopContainer
/// with what is left of the grace, at least 2 s.
async fn stop_container(shared: &Shared, id: &str, name: &str, pod: &Pod, pod_ip: &str, grace: Duration, why: &str) {
    shared.events.record(pod, false, "Killing", why);
    let spec = pod.spec.init_containers.iter().chain(pod.spec.containers.iter()).find(|c| c.name == name);
    let pre_stop = spec.and_then(|c| c.lifecycle.as_ref()?.pre_stop.as_ref().map(|h| (c, h)));
    let mut grace = grace;
    if let (Some((c, hook)), false) = (pre_stop, grace.is_zero()) {
        let started = std::time::Instant::now();
        match smol::future::or(async { Some(hooks::run(shared, c, hook, id, pod_ip, Some(grace)).await) }, async {
            smol::Timer::after(grace).await;
            None
        })
        .await
        {
            Some(Ok(())) => {}
            Some(Err(e)) => shared.events.record(pod, true, "FailedPreStopHook", &format!("container {name}: {e}")),
            None => shared.events.record(
                pod,
                true,
                "FailedPreStopHook",
                &format!("container {name}: still running after {grace:?}"),
            ),
        }
        grace = grace.saturating_sub(Duration::from_secs(started.elapsed().as_secs()));
    }
    let grace = grace.max(MIN_GRACE);
    if let Err(e) = shared.cri.stop_container(id, grace).await {
        if !e.is_not_found() {
            log::warn!("pod {}: stopping container {name}: {e}", pod.key());
        }
    }
}

/// Stops the plan's kills all at once, as kubelet kills a pod's containers in parallel.
pub(super) async fn stop_containers(shared: &Shared, pod: &Pod, obs: &Observed, kills: &[plan::Kill], grace: Duration) {
    let ip = obs.sandboxes.first().map(|s| s.ip.clone()).unwrap_or_default();
    let stops: Vec<_> = kills
        .iter()
        .map(|k| stop_container(shared, &k.id, &k.name, pod, &ip, k.grace.unwrap_or(grace), &k.message))
        .collect();
    join_all(stops).await;
}

async fn stop_all(shared: &Shared, pod: &Pod, obs: &Observed, p: &Plan, grace: Duration) -> Result<(), String> {
    stop_containers(shared, pod, obs, &p.kill, grace).await;
    for s in &obs.sandboxes {
        if let Err(e) = shared.cri.stop_pod_sandbox(&s.id).await {
            if !e.is_not_found() {
                return Err(format!("stopping sandbox {}: {e}", s.id));
            }
        }
    }
    Ok(())
}

/// Removes a deleted pod's containers, sandboxes, logs and directories.
async fn remove_all(shared: &Shared, pod: &Pod, obs: &Observed) -> Result<(), String> {
    for c in &obs.containers {
        if let Err(e) = shared.cri.remove_container(&c.id).await {
            if !e.is_not_found() {
                return Err(format!("removing container {}: {e}", c.id));
            }
        }
    }
    for s in &obs.sandboxes {
        if let Err(e) = shared.cri.remove_pod_sandbox(&s.id).await {
            if !e.is_not_found() {
                return Err(format!("removing sandbox {}: {e}", s.id));
            }
        }
    }
    if let Ok(logs) = sandbox::log_directory(&shared.node, pod) {
        let _ = std::fs::remove_dir_all(logs);
    }
    poddir::remove(&poddir::pod_dir(&shared.node.root_dir, &pod.metadata.uid)?)
}

async fn act(shared: &Shared, pod: &Pod, obs: &Observed, p: Plan, reasons: &mut Reasons) -> Result<Outcome, String> {
    let grace = grace_of(pod);
    stop_containers(shared, pod, obs, &p.kill, grace).await;
    if p.kill_pod {
        for s in obs.sandboxes.iter().filter(|s| s.ready) {
            shared.cri.stop_pod_sandbox(&s.id).await.map_err(|e| e.to_string())?;
        }
    }
    if p.purge_init {
        for c in obs.containers.iter().filter(|c| pod.spec.init_containers.iter().any(|i| i.name == c.name)) {
            let _ = shared.cri.remove_container(&c.id).await;
        }
    }
    // The config of the sandbox the containers go into, built once: RunPodSandbox,
    // PullImage and CreateContainer all get it.
    let attempt = p.create_sandbox.or_else(|| obs.sandboxes.first().map(|s| s.attempt)).unwrap_or(0);
    let (sandbox_config, handler) = if p.create_sandbox.is_some() || !p.start.is_empty() {
        sandbox::sandbox_config(pod, attempt, &shared.node)?
    } else {
        Default::default()
    };
    let (sandbox_id, pod_ip) = match p.create_sandbox {
        Some(attempt) => {
            std::fs::create_dir_all(&sandbox_config.log_directory)
                .map_err(|e| format!("creating {}: {e}", sandbox_config.log_directory))?;
            let id = shared
                .cri
                .run_pod_sandbox(sandbox_config.clone(), &handler)
                .await
                .map_err(|e| format!("FailedCreatePodSandBox: {e}"))?;
            let st = shared.cri.pod_sandbox_status(&id, false).await.map_err(|e| e.to_string())?;
            let ip = st.status.and_then(|s| s.network).map(|n| n.ip).unwrap_or_default();
            log::info!(
                "pod {}: sandbox {} (attempt {attempt}) ready{}",
                pod.key(),
                short(&id),
                if ip.is_empty() { String::new() } else { format!(", IP {ip}") }
            );
            (id, ip)
        }
        None => match &p.sandbox_id {
            Some(id) => (id.clone(), obs.sandboxes.first().map(|s| s.ip.clone()).unwrap_or_default()),
            None => return Ok(Outcome::Again(None)),
        },
    };
    let mut retry: Option<Duration> = p.waiting.iter().map(|w| w.retry_in).min();
    for w in &p.waiting {
        shared.events.record(pod, true, "BackOff", &w.message);
        reasons.insert(w.name.clone(), (w.reason.clone(), w.message.clone()));
    }
    if p.start.is_empty() {
        return Ok(Outcome::Again(retry));
    }
    let pod_dir = poddir::pod_dir(&shared.node.root_dir, &pod.metadata.uid)?;
    poddir::prepare_volumes(pod, &shared.node.root_dir)?;
    let hosts_file = if pod.spec.host_network || !pod_ip.is_empty() {
        Some(poddir::write_hosts(pod, &pod_dir, &pod_ip, &sandbox::hostname(pod))?)
    } else {
        None
    };
    for start in &p.start {
        let c = match start.which {
            Which::Init(i) => &pod.spec.init_containers[i],
            Which::Regular(i) => &pod.spec.containers[i],
        };
        let image_ref = match ensure_image(shared, pod, c, &sandbox_config).await {
            Ok(r) => r,
            Err((reason, wait)) => {
                let event = if reason.starts_with("ImagePullBackOff") { "BackOff" } else { "Failed" };
                shared.events.record(pod, true, event, &format!("container {}: {reason}", c.name));
                let (code, message) = reason.split_once(": ").unwrap_or((reason.as_str(), ""));
                reasons.insert(c.name.clone(), (code.to_string(), message.to_string()));
                retry = Some(retry.map_or(wait, |r| r.min(wait)));
                if matches!(start.which, Which::Init(_)) {
                    break;
                }
                continue;
            }
        };
        // kubelet's CreateContainerConfigError cases: runAsNonRoot against the image, and a
        // subPath that cannot be mounted safely.
        let prepared = match verify_run_as_non_root(shared, pod, c, &image_ref).await {
            Ok(()) => mount_subpaths(shared, pod, c),
            Err(e) => Err(e),
        };
        let subpaths = match prepared {
            Ok(m) => m,
            Err(e) => {
                shared.events.record(
                    pod,
                    true,
                    "Failed",
                    &format!("container {}: CreateContainerConfigError: {e}", c.name),
                );
                reasons.insert(c.name.clone(), ("CreateContainerConfigError".into(), e));
                if matches!(start.which, Which::Init(_)) {
                    break;
                }
                continue;
            }
        };
        let log_dir = Path::new(&sandbox_config.log_directory).join(&c.name);
        std::fs::create_dir_all(&log_dir).map_err(|e| format!("creating {}: {e}", log_dir.display()))?;
        let termination_log = match c.termination_message_path.as_deref().filter(|p| !p.is_empty()) {
            Some(_) => Some(poddir::termination_log_file(&pod_dir, &c.name, start.restart_count)?),
            None => None,
        };
        let ctx = InstanceContext {
            root_dir: shared.node.root_dir.clone(),
            pod_ip: pod_ip.clone(),
            host_ip: shared.host_ip.clone(),
            node_cpu_millis: shared.node_cpu_millis,
            node_memory_bytes: shared.node_memory_bytes,
            termination_log,
            hosts_file: hosts_file.clone(),
            subpaths,
        };
        let config = container_config(pod, c, start.restart_count, &image_ref, &ctx)
            .map_err(|e| format!("CreateContainerConfigError: {e}"))?;
        if let Some((key, event)) = &start.backoff {
            crate::locks::lock(&shared.backoff).advance(key, *event, SystemTime::now());
        }
        let id = match shared.cri.create_container(&sandbox_id, config, sandbox_config.clone()).await {
            Ok(id) => id,
            Err(e) => {
                shared.events.record(pod, true, "Failed", &format!("container {}: CreateContainerError: {e}", c.name));
                reasons.insert(c.name.clone(), ("CreateContainerError".into(), e.to_string()));
                continue;
            }
        };
        shared.events.record(pod, false, "Created", &format!("Created container {} ({})", c.name, short(&id)));
        if let Err(e) = shared.cri.start_container(&id).await {
            shared.events.record(pod, true, "Failed", &format!("container {}: RunContainerError: {e}", c.name));
            reasons.insert(c.name.clone(), ("RunContainerError".into(), e.to_string()));
            continue;
        }
        reasons.remove(&c.name);
        if let Some(hook) = c.lifecycle.as_ref().and_then(|l| l.post_start.as_ref()) {
            if let Err(e) = hooks::run(shared, c, hook, &id, &pod_ip, Some(POST_START_LIMIT)).await {
                shared.events.record(pod, true, "FailedPostStartHook", &format!("container {}: {e}", c.name));
                stop_container(
                    shared,
                    &id,
                    &c.name,
                    pod,
                    &pod_ip,
                    grace,
                    &format!("Container {} failed its postStart hook", c.name),
                )
                .await;
                reasons.insert(c.name.clone(), ("PostStartHookError".into(), e));
            }
        }
        shared.events.record(
            pod,
            false,
            "Started",
            &format!("Started container {} (restart {})", c.name, start.restart_count),
        );
    }
    Ok(Outcome::Again(retry))
}

fn short(id: &str) -> &str {
    &id[..id.len().min(13)]
}

/// Pulls the image as the container's pull policy says; on failure returns the waiting
/// reason and when to look again.
async fn ensure_image(
    shared: &Shared,
    pod: &Pod,
    c: &crate::pod::types::Container,
    sandbox_config: &crate::cri::api::PodSandboxConfig,
) -> Result<String, (String, Duration)> {
    let image = with_default_tag(&c.image);
    let policy = c.image_pull_policy.as_deref().unwrap_or("IfNotPresent");
    if policy != "Always" {
        match shared.cri.image_status(&image).await {
            Ok(Some(img)) => return Ok(img.id),
            Ok(None) if policy == "Never" => {
                return Err((
                    format!("ErrImageNeverPull: image {image:?} is not present and the pull policy is Never"),
                    Duration::from_secs(10),
                ));
            }
            Ok(None) => {}
            Err(e) => return Err((format!("ImageInspectError: {e}"), Duration::from_secs(10))),
        }
    }
    let key = format!("{}_{image}", pod.metadata.uid);
    let now = SystemTime::now();
    {
        let b = crate::locks::lock(&shared.image_backoff);
        if let Some(left) = b.remaining_since_update(&key, now) {
            let delay = b.delay(&key).unwrap_or_default();
            return Err((format!("ImagePullBackOff: back-off {delay:?} pulling image {image:?}"), left));
        }
    }
    shared.events.record(pod, false, "Pulling", &format!("Pulling image {image:?}"));
    let started = std::time::Instant::now();
    match pull_with_credentials(shared, pod, &image, sandbox_config).await {
        Ok(r) => {
            shared.events.record(pod, false, "Pulled", &format!("Pulled image {image:?} in {:?}", started.elapsed()));
            crate::locks::lock(&shared.image_backoff).forget(&key);
            Ok(r)
        }
        Err(e) => {
            let mut b = crate::locks::lock(&shared.image_backoff);
            b.advance(&key, now, now);
            Err((format!("ErrImagePull: {e}"), b.delay(&key).unwrap_or(Duration::from_secs(10))))
        }
    }
}

/// PullImage without credentials when none apply; else with each that applies, most specific
/// first, until one works (kubelet's order). The error is the last one.
async fn pull_with_credentials(
    shared: &Shared,
    pod: &Pod,
    image: &str,
    sandbox_config: &crate::cri::api::PodSandboxConfig,
) -> Result<String, crate::cri::Status> {
    let credentials = crate::locks::lock(&shared.keyring).lookup(image);
    if credentials.is_empty() {
        return shared.cri.pull_image(image, None, Some(sandbox_config.clone())).await;
    }
    let mut last = None;
    for c in credentials {
        match shared.cri.pull_image(image, Some(c.auth), Some(sandbox_config.clone())).await {
            Ok(r) => return Ok(r),
            Err(e) => {
                log::info!("pod {}: pulling {image:?} with the credentials of {} failed: {e}", pod.key(), c.origin);
                last = Some(e);
            }
        }
    }
    Err(last.expect("at least one credential was tried"))
}

/// kubelet's runAsNonRoot check: with runAsNonRoot set, the container must not run as uid 0,
/// whether the uid comes from the spec or from the image (an image without a user runs as root).
async fn verify_run_as_non_root(
    shared: &Shared,
    pod: &Pod,
    c: &crate::pod::types::Container,
    image_ref: &str,
) -> Result<(), String> {
    let csc = c.security_context.clone().unwrap_or_default();
    let psc = pod.spec.security_context.clone().unwrap_or_default();
    if csc.run_as_non_root.or(psc.run_as_non_root) != Some(true) {
        return Ok(());
    }
    if let Some(uid) = csc.run_as_user.or(psc.run_as_user) {
        return if uid == 0 { Err("container's runAsUser breaks non-root policy".into()) } else { Ok(()) };
    }
    let image = shared.cri.image_status(image_ref).await.map_err(|e| e.to_string())?;
    let (uid, user) = image.map(|i| (i.uid.map(|u| u.value), i.username)).unwrap_or((None, String::new()));
    match (uid, user.as_str()) {
        (Some(0), _) | (None, "") => Err(format!("container has runAsNonRoot and image {} will run as root", c.image)),
        (None, name) => Err(format!(
            "container has runAsNonRoot and image has non-numeric user ({name}), cannot verify user is non-root"
        )),
        (Some(_), _) => Ok(()),
    }
}

/// `busybox` → `busybox:latest`; references with a tag or digest are kept.
pub fn with_default_tag(image: &str) -> String {
    match crate::pod::defaults::split_image(image) {
        (_, None, None) => format!("{image}:latest"),
        _ => image.to_string(),
    }
}

/// Bind-mounts each subPath of `c` safely (`subpath`), by its index in `volumeMounts`.
fn mount_subpaths(
    shared: &Shared,
    pod: &Pod,
    c: &crate::pod::types::Container,
) -> Result<std::collections::BTreeMap<usize, std::path::PathBuf>, String> {
    let (root, uid) = (&shared.node.root_dir, &pod.metadata.uid);
    let mut out = std::collections::BTreeMap::new();
    for (i, m) in c.volume_mounts.iter().enumerate() {
        let Some(sub) = m.sub_path.as_deref().filter(|s| !s.is_empty()) else { continue };
        let Some(v) = pod.spec.volumes.iter().find(|v| v.name == m.name) else { continue };
        let Some(volume) = poddir::volume_path(root, uid, v)? else { continue };
        let target = poddir::subpath_target(root, uid, &v.name, &c.name, i)?;
        let mounted = super::subpath::mount(&volume, sub, &target)
            .map_err(|e| format!("volumeMounts[{i}] ({}): {e}", m.mount_path))?;
        out.insert(i, mounted);
    }
    Ok(out)
}

/// Whether a sandbox or container was made by atoll.
pub fn managed(annotations: &HashMap<String, String>) -> bool {
    annotations.get(ANNOTATION_MANAGED_BY).is_some_and(|v| v == "atoll")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn images_without_tag_or_digest_get_latest() {
        assert_eq!(with_default_tag("busybox"), "busybox:latest");
        assert_eq!(with_default_tag("busybox:1.36"), "busybox:1.36");
        assert_eq!(with_default_tag("r:5000/a/b"), "r:5000/a/b:latest");
        assert_eq!(with_default_tag("a@sha256:0"), "a@sha256:0");
    }
}
