//! Starting a plan's containers in a ready sandbox, as kubelet's startContainer: the image
//! (`images`), kubelet's CreateContainerConfigError checks (runAsNonRoot against the image, a
//! subPath that cannot be mounted safely, a missing ConfigMap or Secret the environment
//! needs), the pod's ConfigMap and Secret volumes (a missing object keeps the containers
//! ContainerCreating, as kubelet's FailedMount), the config (`container`) with the files
//! `host_files` made (volumes, the managed hosts file, a fresh termination-log file),
//! CreateContainer, StartContainer and postStart (a failure kills the container, which then
//! restarts per policy). A container that cannot start gets a [`Wait`] with kubelet's reason;
//! the others go on.

use super::container::{container_config, InstanceContext};
use super::context::Context;
use super::errors::{SyncError, SYNC_ERROR_RETRY};
use super::host_files::HostFiles;
use super::plan::{Kill, SpecRef, Start};
use super::volumes::poddir;
use super::{images, stop};
use crate::cri::api::PodSandboxConfig;
use crate::cri::ids::short;
use crate::cri::RuntimeService;
use crate::handlers::{self, Target};
use crate::node::observed::{Wait, WaitReason, Waits};
use crate::pod::paths::PodDir;
use crate::pod::types::{Container, Pod};
use std::path::PathBuf;
use std::time::{Duration, SystemTime};

/// kubelet gives postStart no time limit; atoll bounds it so one hook cannot wedge its worker.
const POST_START_LIMIT: Duration = Duration::from_secs(300);

/// The sandbox the containers go into.
pub struct Sandbox<'a> {
    pub id: &'a str,
    pub ip: &'a str,
    pub config: &'a PodSandboxConfig,
}

/// Each starting container's image, by container name, as `images::ensure` found it.
pub type Images = std::collections::HashMap<String, Result<String, super::images::ImageWait>>;

/// What starting a plan's containers came to.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Started {
    /// When to look again at the soonest, if a container waits on a timer.
    pub retry: Option<Duration>,
    /// The IDs of the containers started.
    pub started: Vec<String>,
    /// Some container could not be started (it waits, or its config, CreateContainer or
    /// StartContainer failed): the runtime may hold a container made for it.
    pub not_all: bool,
}

/// Starts each of `starts` (in order; an init container that cannot start stops the rest).
pub async fn start_containers<R: RuntimeService>(
    cx: &Context<R>,
    pod: &Pod,
    starts: &[Start],
    sb: &Sandbox<'_>,
    waits: &mut Waits,
    mut images: Images,
    host: HostFiles,
) -> Result<Started, SyncError> {
    let mut started = Started { not_all: true, ..Default::default() };
    let Some(files) = pod_files(cx, pod, starts, waits, host) else { return Ok(started) };
    started.not_all = false;
    for start in starts {
        let outcome = start_one(cx, pod, start, sb, waits, &mut images, &files).await?;
        started.not_all |= !matches!(outcome, Outcome::Started(_));
        match outcome {
            Outcome::Started(id) => started.started.push(id),
            Outcome::Blocked(retry) => {
                started.retry = retry.into_iter().chain(started.retry).min();
                if matches!(start.which, SpecRef::Init(_)) {
                    break;
                }
            }
            Outcome::Failed => {}
        }
    }
    Ok(started)
}

/// How one container's start went.
enum Outcome {
    /// Its ID.
    Started(String),
    /// It cannot start yet (its image, a config check): an init container stops the rest.
    /// When to look again, if on a timer.
    Blocked(Option<Duration>),
    /// Its config, CreateContainer or StartContainer failed: the others go on.
    Failed,
}

/// What the pod's containers share on the host.
struct PodFiles {
    /// The pod's directory, hosts file and termination-log files (`host_files`).
    host: HostFiles,
    /// The objects the environment reads, as they are now.
    objects: crate::objects::resolve::Snapshot,
}

/// The pod's ConfigMap, Secret and projected volumes (a missing object keeps the containers
/// creating, as kubelet's FailedMount does: `None`), and the objects the environment reads,
/// with `host`, what was made on the host for these starts.
fn pod_files<R: RuntimeService>(
    cx: &Context<R>,
    pod: &Pod,
    starts: &[Start],
    waits: &mut Waits,
    host: HostFiles,
) -> Option<PodFiles> {
    if let Some(message) = object_volumes_failed(cx, pod, &host.pod_dir) {
        let names = starts.iter().map(|s| s.container(pod).name.as_str());
        wait_all(cx, pod, waits, names, ("FailedMount", true), WaitReason::ContainerCreating, &message);
        return None;
    }
    let objects = crate::objects::resolve::snapshot(pod, &cx.node.objects().for_pod(pod));
    Some(PodFiles { host, objects })
}

/// One container: its image (and its image volumes'), the config checks, the config,
/// CreateContainer, StartContainer, postStart.
async fn start_one<R: RuntimeService>(
    cx: &Context<R>,
    pod: &Pod,
    start: &Start,
    sb: &Sandbox<'_>,
    waits: &mut Waits,
    images: &mut Images,
    files: &PodFiles,
) -> Result<Outcome, SyncError> {
    let c = start.container(pod);
    let found = match images.remove(&c.name) {
        Some(found) => found,
        None => images::ensure(cx, pod, c, sb.config).await,
    };
    // The image volumes it mounts are pulled as its image is, with their own policies.
    let found = match found {
        Ok(r) => volume_images(cx, pod, c, sb.config).await.map(|v| (r, v)),
        Err(w) => Err(w),
    };
    let (image_ref, image_volumes) = match found {
        Ok(r) => r,
        Err(w) => {
            let (event, warning) = w.wait.reason.image_event();
            let text = format!("container {}: {}: {}", c.name, w.wait.reason, w.wait.message);
            cx.node.events().record(pod, warning, event, &text);
            waits.insert(c.name.clone(), w.wait);
            return Ok(Outcome::Blocked(Some(w.retry_in)));
        }
    };
    let subpaths = match configurable(cx, pod, c, &image_ref, &files.host.pod_dir).await {
        Ok(m) => m,
        Err(e) => {
            wait(cx, pod, c, waits, WaitReason::CreateContainerConfigError, e);
            return Ok(Outcome::Blocked(None));
        }
    };
    let termination_log = match files.host.termination_log(&c.name) {
        Ok(file) => file.cloned(),
        Err(e) => {
            // On the host, not in the spec: tried again as a failed sync is.
            wait(cx, pod, c, waits, WaitReason::CreateContainerConfigError, e);
            return Ok(Outcome::Blocked(Some(SYNC_ERROR_RETRY)));
        }
    };
    let facts = cx.node.facts();
    let ctx = InstanceContext {
        pod_dir: files.host.pod_dir.clone(),
        pod_ip: sb.ip.to_string(),
        host_ip: facts.host_ip.clone(),
        allocatable: facts.allocatable(),
        node_memory_bytes: facts.memory_bytes,
        termination_log,
        hosts_file: files.host.hosts_file.clone(),
        subpaths,
        image_volumes,
        objects: files.objects.clone(),
    };
    let config = match container_config(pod, c, start.restart_count, &image_ref, &ctx) {
        Ok(config) => config,
        Err(e) => {
            wait(cx, pod, c, waits, WaitReason::CreateContainerConfigError, e);
            return Ok(Outcome::Failed);
        }
    };
    if let Some((key, event)) = &start.backoff {
        cx.tuning.crash_backoff().advance(key, *event, SystemTime::now());
    }
    let id = match cx.runtime.create_container(sb.id, config, sb.config.clone()).await {
        Ok(id) => id,
        Err(e) => {
            wait(cx, pod, c, waits, WaitReason::CreateContainerError, e.to_string());
            return Ok(Outcome::Failed);
        }
    };
    cx.node.events().record(pod, false, "Created", &format!("Created container {} ({})", c.name, short(&id)));
    if let Err(e) = cx.runtime.start_container(&id).await {
        wait(cx, pod, c, waits, WaitReason::RunContainerError, e.to_string());
        return Ok(Outcome::Failed);
    }
    waits.remove(&c.name);
    post_start(cx, pod, c, &id, sb.ip, waits).await;
    let text = format!("Started container {} (restart {})", c.name, start.restart_count);
    cx.node.events().record(pod, false, "Started", &text);
    Ok(Outcome::Started(id))
}

/// The container's postStart hook, if any: a failure kills the container, which then
/// restarts per policy.
async fn post_start<R: RuntimeService>(
    cx: &Context<R>,
    pod: &Pod,
    c: &Container,
    id: &str,
    ip: &str,
    waits: &mut Waits,
) {
    let Some(hook) = c.lifecycle.as_ref().and_then(|l| l.post_start.as_ref()) else { return };
    let at = Target { container_id: id, pod_ip: ip };
    if let Err(e) = handlers::lifecycle(&cx.runtime, c, hook, &at, Some(POST_START_LIMIT)).await {
        cx.node.events().record(pod, true, "FailedPostStartHook", &format!("container {}: {e}", c.name));
        let kill = Kill {
            id: id.into(),
            name: c.name.clone(),
            message: format!("Container {} failed its postStart hook", c.name),
            grace: None,
        };
        stop::stop_container(cx, pod, &kill, ip, stop::grace_of(pod)).await;
        waits.insert(c.name.clone(), Wait { reason: WaitReason::PostStartHookError, message: e });
    }
}

/// The containers `names` all wait for the same reason: each gets the wait, and the pod one
/// event (`(reason, warning)`), only when the message is new (kubelet repeats neither).
pub fn wait_all<'a, R>(
    cx: &Context<R>,
    pod: &Pod,
    waits: &mut Waits,
    names: impl Iterator<Item = &'a str> + Clone,
    event: (&str, bool),
    reason: WaitReason,
    message: &str,
) {
    let first = names.clone().next();
    if first.is_some_and(|n| waits.get(n).is_none_or(|w| w.message != message)) {
        cx.node.events().record(pod, event.1, event.0, message);
    }
    for name in names {
        waits.insert(name.to_string(), Wait { reason, message: message.to_string() });
    }
}

/// kubelet's message for the first object volume of `pod` that cannot be set up, if any.
fn object_volumes_failed<R: RuntimeService>(cx: &Context<R>, pod: &Pod, dir: &PodDir) -> Option<String> {
    use super::volumes::object_volumes::{set_up, Outcome};
    set_up(dir, pod, &cx.node.objects().for_pod(pod), cx.node.facts().allocatable()).into_iter().find_map(
        |(volume, outcome)| match outcome {
            Outcome::Failed(e) => Some(format!("MountVolume.SetUp failed for volume {volume:?} : {e}")),
            Outcome::Current(_) => None,
        },
    )
}

/// kubelet's CreateContainerConfigError checks before a config is built: runAsNonRoot against
/// the image's user, then each subPath bind-mounted safely (`subpath`), by its index in
/// `volumeMounts`.
async fn configurable<R: RuntimeService>(
    cx: &Context<R>,
    pod: &Pod,
    c: &Container,
    image_ref: &str,
    dir: &PodDir,
) -> Result<std::collections::BTreeMap<usize, PathBuf>, String> {
    images::verify_run_as_non_root(cx, pod, c, image_ref).await?;
    let mut wanted = Vec::new();
    for (i, m) in c.volume_mounts.iter().enumerate() {
        let Some(sub) = m.sub_path.as_deref().filter(|s| !s.is_empty()) else { continue };
        let Some(v) = pod.spec.volumes.iter().find(|v| v.name == m.name) else { continue };
        let Some(volume) = poddir::volume_path(dir, v)? else { continue };
        let target = poddir::subpath_target(dir, &v.name, &c.name, i)?;
        wanted.push((i, volume, sub.to_string(), target, m.mount_path.clone()));
    }
    if wanted.is_empty() {
        return Ok(Default::default());
    }
    // Resolving a subPath reads its volume, which may be a slow or hung mount: on the
    // blocking pool, so that only this pod waits.
    crate::task::unblock(move || {
        let mount = |(i, volume, sub, target, path): (usize, PathBuf, String, PathBuf, String)| {
            super::volumes::subpath::mount(&volume, &sub, &target)
                .map(|mounted| (i, mounted))
                .map_err(|e| format!("volumeMounts[{i}] ({path}): {e}"))
        };
        wanted.into_iter().map(mount).collect()
    })
    .await
}

/// The image of each image volume `c` mounts, by volume name, as the runtime knows it.
async fn volume_images<R: RuntimeService>(
    cx: &Context<R>,
    pod: &Pod,
    c: &Container,
    sandbox_config: &PodSandboxConfig,
) -> Result<std::collections::BTreeMap<String, String>, images::ImageWait> {
    let mut out = std::collections::BTreeMap::new();
    for m in &c.volume_mounts {
        let Some(v) = pod.spec.volumes.iter().find(|v| v.name == m.name) else { continue };
        let Some(image) = &v.image else { continue };
        if !out.contains_key(&v.name) {
            let r =
                images::ensure_image(cx, pod, &image.reference, image.pull_policy.as_deref(), sandbox_config).await?;
            out.insert(v.name.clone(), r);
        }
    }
    Ok(out)
}

/// Records that `c` waits, with an event.
fn wait<R>(cx: &Context<R>, pod: &Pod, c: &Container, waits: &mut Waits, reason: WaitReason, message: String) {
    cx.node.events().record(pod, true, "Failed", &format!("container {}: {reason}: {message}", c.name));
    waits.insert(c.name.clone(), Wait { reason, message });
}
