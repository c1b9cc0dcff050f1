//! A container's image, as kubelet's image manager gets it: by `imagePullPolicy` (Always,
//! IfNotPresent, Never; `:latest` or no tag defaults to Always), with kubelet's
//! ImagePullBackOff per pod and image, and the registry credentials that match the image, most
//! specific first, each tried in turn (anonymous when none match). Also kubelet's runAsNonRoot
//! check, which needs the image's user.

use super::context::Context;
use crate::cri::api::PodSandboxConfig;
use crate::cri::{RuntimeService, Status};
use crate::node::observed::{Wait, WaitReason};
use crate::pod::derived::with_default_tag;
use crate::pod::types::{Container, Pod};
use std::time::{Duration, SystemTime};

/// Why a container's image is not there (yet), and when to look again.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ImageWait {
    pub wait: Wait,
    pub retry_in: Duration,
}

/// The container's image as the runtime knows it (an image id), pulling it if the policy
/// says so.
pub async fn ensure<R: RuntimeService>(
    cx: &Context<R>,
    pod: &Pod,
    c: &Container,
    sandbox_config: &PodSandboxConfig,
) -> Result<String, ImageWait> {
    ensure_image(cx, pod, &c.image, c.image_pull_policy.as_deref(), sandbox_config).await
}

/// `image` as the runtime knows it (an image id), pulling it if `policy` says so: a
/// container's image, or an image volume's.
pub async fn ensure_image<R: RuntimeService>(
    cx: &Context<R>,
    pod: &Pod,
    image: &str,
    policy: Option<&str>,
    sandbox_config: &PodSandboxConfig,
) -> Result<String, ImageWait> {
    let image = with_default_tag(image);
    let policy = policy.unwrap_or("IfNotPresent");
    let wait = |reason, message: String, retry_in| ImageWait { wait: Wait { reason, message }, retry_in };
    if policy != "Always" {
        match cx.runtime.image_status(&image).await {
            Ok(Some(img)) => return Ok(img.id),
            Ok(None) if policy == "Never" => {
                let message = format!("image {image:?} is not present and the pull policy is Never");
                return Err(wait(WaitReason::ErrImageNeverPull, message, Duration::from_secs(10)));
            }
            Ok(None) => {}
            Err(e) => return Err(wait(WaitReason::ImageInspectError, e.to_string(), Duration::from_secs(10))),
        }
    }
    let key = format!("{}_{image}", pod.metadata.uid);
    let now = SystemTime::now();
    {
        let b = cx.tuning.image_backoff();
        if let Some(left) = b.remaining_since_update(&key, now) {
            let delay = b.delay(&key).unwrap_or_default();
            let message = format!("back-off {delay:?} pulling image {image:?}");
            return Err(wait(WaitReason::ImagePullBackOff, message, left));
        }
    }
    cx.node.events().record(pod, false, "Pulling", &format!("Pulling image {image:?}"));
    let started = std::time::Instant::now();
    match pull(cx, pod, &image, sandbox_config).await {
        Ok(r) => {
            let took = started.elapsed();
            cx.node.events().record(pod, false, "Pulled", &format!("Pulled image {image:?} in {took:?}"));
            cx.tuning.image_backoff().forget(&key);
            Ok(r)
        }
        Err(e) => {
            let mut b = cx.tuning.image_backoff();
            b.advance(&key, now, now);
            let retry_in = b.delay(&key).unwrap_or(Duration::from_secs(10));
            Err(wait(WaitReason::ErrImagePull, e.to_string(), retry_in))
        }
    }
}

/// PullImage without credentials when none apply; else with each that applies, most specific
/// first, until one works (kubelet's order). The error is the last one.
async fn pull<R: RuntimeService>(
    cx: &Context<R>,
    pod: &Pod,
    image: &str,
    sandbox_config: &PodSandboxConfig,
) -> Result<String, Status> {
    let credentials = cx.tuning.credentials(image);
    let mut last = None;
    for c in &credentials {
        match cx.runtime.pull_image(image, Some(c.auth.clone()), Some(sandbox_config.clone())).await {
            Ok(r) => return Ok(r),
            Err(e) => {
                log::info!("pod {}: pulling {image:?} with the credentials of {} failed: {e}", pod.key(), c.origin);
                last = Some(e);
            }
        }
    }
    match last {
        Some(e) => Err(e),
        None => cx.runtime.pull_image(image, None, Some(sandbox_config.clone())).await,
    }
}

/// kubelet's runAsNonRoot check: with runAsNonRoot set, the container must not run as uid 0,
/// whether the uid comes from the spec or from the image (an image without a user runs as root).
pub async fn verify_run_as_non_root<R: RuntimeService>(
    cx: &Context<R>,
    pod: &Pod,
    c: &Container,
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
    let image = cx.runtime.image_status(image_ref).await.map_err(|e| e.to_string())?;
    let (uid, user) = image.map(|i| (i.uid.map(|u| u.value), i.username)).unwrap_or((None, String::new()));
    match (uid, user.as_str()) {
        (Some(0), _) | (None, "") => Err(format!("container has runAsNonRoot and image {} will run as root", c.image)),
        (None, name) => Err(format!(
            "container has runAsNonRoot and image has non-numeric user ({name}), cannot verify user is non-root"
        )),
        (Some(_), _) => Ok(()),
    }
}
