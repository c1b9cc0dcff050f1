//! Starting a plan's containers in a ready sandbox, as kubelet's startContainer: the image
//! (`images`), kubelet's CreateContainerConfigError checks (runAsNonRoot against the image, a
//! subPath that cannot be mounted safely, a missing ConfigMap or Secret the environment
//! needs), the pod's files (volumes, ConfigMap and Secret volumes (a missing object keeps the
//! containers ContainerCreating, as kubelet's FailedMount), the managed hosts file, a fresh
//! termination-log file), the config (`container`), CreateContainer, StartContainer and
//! postStart (a failure kills the container, which then restarts per policy). A container
//! that cannot start gets a [`Wait`] with kubelet's reason; the others go on.

use super::container::{container_config, InstanceContext};
use super::context::Context;
use super::errors::SyncError;
use super::plan::{Kill, SpecRef, Start};
use super::volumes::poddir;
use super::{images, sandbox, stop};
use crate::cri::api::PodSandboxConfig;
use crate::cri::ids::short;
use crate::cri::RuntimeService;
use crate::handlers::{self, Target};
use crate::node::observed::{Wait, WaitReason, Waits};
use crate::pod::types::{Container, Pod};
use std::path::{Path, PathBuf};
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
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Started {
    /// When to look again at the soonest, if a container waits on a timer.
    pub retry: Option<Duration>,
    /// Whether any container was started.
    pub any: bool,
}

/// Starts each of `starts` (in order; an init container that cannot start stops the rest).
pub async fn start_containers<R: RuntimeService>(
    cx: &Context<R>,
    pod: &Pod,
    starts: &[Start],
    sb: &Sandbox<'_>,
    waits: &mut Waits,
    mut images: Images,
) -> Result<Started, SyncError> {
    let root = &cx.node.facts().root_dir;
    let pod_dir = poddir::pod_dir(root, &pod.metadata.uid).map_err(SyncError::Host)?;
    poddir::prepare_volumes(pod, root).map_err(SyncError::Host)?;
    // ConfigMap, Secret and projected volumes: a missing object keeps the containers
    // creating, as kubelet's FailedMount does.
    if let Some(message) = object_volumes_failed(cx, pod) {
        let first = starts.first().map(|s| s.container(pod).name.clone()).unwrap_or_default();
        if waits.get(&first).is_none_or(|w| w.message != message) {
            cx.node.events().record(pod, true, "FailedMount", &message);
        }
        for start in starts {
            let wait = Wait { reason: WaitReason::ContainerCreating, message: message.clone() };
            waits.insert(start.container(pod).name.clone(), wait);
        }
        return Ok(Started::default());
    }
    // The objects the environment reads, as they are now.
    let objects = crate::objects::resolve::snapshot(pod, cx.node.objects());
    let hosts_file = if pod.spec.host_network || !sb.ip.is_empty() {
        let hosts = poddir::write_hosts(pod, &pod_dir, sb.ip, &sandbox::hostname(pod)).map_err(SyncError::Host)?;
        Some(hosts)
    } else {
        None
    };
    let mut retry: Option<Duration> = None;
    let mut any = false;
    for start in starts {
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
                let event = if w.wait.reason == WaitReason::ImagePullBackOff { "BackOff" } else { "Failed" };
                let text = format!("container {}: {}: {}", c.name, w.wait.reason, w.wait.message);
                cx.node.events().record(pod, true, event, &text);
                retry = Some(retry.map_or(w.retry_in, |r| r.min(w.retry_in)));
                waits.insert(c.name.clone(), w.wait);
                if matches!(start.which, SpecRef::Init(_)) {
                    break;
                }
                continue;
            }
        };
        let subpaths = match configurable(cx, pod, c, &image_ref).await {
            Ok(m) => m,
            Err(e) => {
                wait(cx, pod, c, waits, WaitReason::CreateContainerConfigError, e);
                if matches!(start.which, SpecRef::Init(_)) {
                    break;
                }
                continue;
            }
        };
        let log_dir = Path::new(&sb.config.log_directory).join(&c.name);
        std::fs::create_dir_all(&log_dir)
            .map_err(|e| SyncError::Host(format!("creating {}: {e}", log_dir.display())))?;
        let termination_log = match c.termination_message_path.as_deref().filter(|p| !p.is_empty()) {
            Some(_) => {
                Some(poddir::termination_log_file(&pod_dir, &c.name, start.restart_count).map_err(SyncError::Host)?)
            }
            None => None,
        };
        let facts = cx.node.facts();
        let ctx = InstanceContext {
            root_dir: facts.root_dir.clone(),
            pod_ip: sb.ip.to_string(),
            host_ip: facts.host_ip.clone(),
            node_cpu_millis: facts.cpu_millis,
            node_memory_bytes: facts.memory_bytes,
            termination_log,
            hosts_file: hosts_file.clone(),
            subpaths,
            image_volumes,
            objects: objects.clone(),
        };
        let config = match container_config(pod, c, start.restart_count, &image_ref, &ctx) {
            Ok(config) => config,
            Err(e) => {
                wait(cx, pod, c, waits, WaitReason::CreateContainerConfigError, e);
                continue;
            }
        };
        if let Some((key, event)) = &start.backoff {
            cx.tuning.crash_backoff().advance(key, *event, SystemTime::now());
        }
        let id = match cx.runtime.create_container(sb.id, config, sb.config.clone()).await {
            Ok(id) => id,
            Err(e) => {
                wait(cx, pod, c, waits, WaitReason::CreateContainerError, e.to_string());
                continue;
            }
        };
        cx.node.events().record(pod, false, "Created", &format!("Created container {} ({})", c.name, short(&id)));
        if let Err(e) = cx.runtime.start_container(&id).await {
            wait(cx, pod, c, waits, WaitReason::RunContainerError, e.to_string());
            continue;
        }
        waits.remove(&c.name);
        any = true;
        if let Some(hook) = c.lifecycle.as_ref().and_then(|l| l.post_start.as_ref()) {
            let at = Target { container_id: &id, pod_ip: sb.ip };
            if let Err(e) = handlers::lifecycle(&cx.runtime, c, hook, &at, Some(POST_START_LIMIT)).await {
                cx.node.events().record(pod, true, "FailedPostStartHook", &format!("container {}: {e}", c.name));
                let kill = Kill {
                    id: id.clone(),
                    name: c.name.clone(),
                    message: format!("Container {} failed its postStart hook", c.name),
                    grace: None,
                };
                stop::stop_container(cx, pod, &kill, sb.ip, stop::grace_of(pod)).await;
                waits.insert(c.name.clone(), Wait { reason: WaitReason::PostStartHookError, message: e });
            }
        }
        let text = format!("Started container {} (restart {})", c.name, start.restart_count);
        cx.node.events().record(pod, false, "Started", &text);
    }
    Ok(Started { retry, any })
}

/// kubelet's message for the first object volume of `pod` that cannot be set up, if any.
fn object_volumes_failed<R: RuntimeService>(cx: &Context<R>, pod: &Pod) -> Option<String> {
    use super::volumes::object_volumes::{set_up, Outcome};
    set_up(&cx.node.facts().root_dir, pod, cx.node.objects()).into_iter().find_map(|(volume, outcome)| match outcome {
        Outcome::Failed(e) => Some(format!("MountVolume.SetUp failed for volume {volume:?} : {e}")),
        Outcome::Current(_) => None,
    })
}

/// kubelet's CreateContainerConfigError checks before a config is built: runAsNonRoot against
/// the image's user, then each subPath bind-mounted safely (`subpath`), by its index in
/// `volumeMounts`.
async fn configurable<R: RuntimeService>(
    cx: &Context<R>,
    pod: &Pod,
    c: &Container,
    image_ref: &str,
) -> Result<std::collections::BTreeMap<usize, PathBuf>, String> {
    images::verify_run_as_non_root(cx, pod, c, image_ref).await?;
    let (root, uid) = (&cx.node.facts().root_dir, &pod.metadata.uid);
    let mut out = std::collections::BTreeMap::new();
    for (i, m) in c.volume_mounts.iter().enumerate() {
        let Some(sub) = m.sub_path.as_deref().filter(|s| !s.is_empty()) else { continue };
        let Some(v) = pod.spec.volumes.iter().find(|v| v.name == m.name) else { continue };
        let Some(volume) = poddir::volume_path(root, uid, v)? else { continue };
        let target = poddir::subpath_target(root, uid, &v.name, &c.name, i)?;
        let mounted = super::volumes::subpath::mount(&volume, sub, &target)
            .map_err(|e| format!("volumeMounts[{i}] ({}): {e}", m.mount_path))?;
        out.insert(i, mounted);
    }
    Ok(out)
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
