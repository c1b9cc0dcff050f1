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
    // An image not on disk may be in a tarball the images directory is still importing: wait
    // for it (the importer wakes every worker when it is done) rather than pull or fail.
    let importing = |cx: &Context<R>| {
        cx.node.imports().under_way().map(|file| {
            let message = format!("image {image:?} is not on disk yet; importing {file:?} from the images directory");
            wait(WaitReason::ImageImporting, message, Duration::from_secs(10))
        })
    };
    if policy != "Always" {
        match cx.runtime.image_status(&image).await {
            Ok(Some(img)) => return Ok(img.id),
            Ok(None) => {
                if let Some(w) = importing(cx) {
                    return Err(w);
                }
                if policy == "Never" {
                    let message = format!("image {image:?} is not present and the pull policy is Never");
                    return Err(wait(WaitReason::ErrImageNeverPull, message, Duration::from_secs(10)));
                }
            }
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
        Err(e) if policy == "Always" && !cx.config.strict_image_pull_policy && registry_unreachable(&e) => {
            // Offline: the image on disk is the one to run (unless the operator wants kubelet's
            // strict rule); the next start of the container tries the registry again.
            match cx.runtime.image_status(&image).await {
                Ok(Some(img)) => {
                    let digest = img.repo_digests.first().cloned().unwrap_or_else(|| img.id.clone());
                    let message =
                        format!("registry unreachable pulling {image:?} ({e}); starting from the local image {digest}");
                    cx.node.events().record(pod, true, "UsingLocalImage", &message);
                    cx.tuning.image_backoff().forget(&key);
                    Ok(img.id)
                }
                _ => match importing(cx) {
                    Some(w) => Err(w),
                    None => Err(pull_failed(cx, &key, now, e)),
                },
            }
        }
        Err(e) => Err(pull_failed(cx, &key, now, e)),
    }
}

/// A failed pull: ErrImagePull, and the next try after the image's back-off.
fn pull_failed<R: RuntimeService>(cx: &Context<R>, key: &str, now: SystemTime, e: Status) -> ImageWait {
    let mut b = cx.tuning.image_backoff();
    b.advance(key, now, now);
    let retry_in = b.delay(key).unwrap_or(Duration::from_secs(10));
    ImageWait { wait: Wait { reason: WaitReason::ErrImagePull, message: e.to_string() }, retry_in }
}

/// Whether a failed pull says the registry could not be reached (a network or DNS failure, a
/// timeout, a 502/503/504), as opposed to an answer (not found, unauthorized, denied) or the
/// runtime itself being away. containerd reports the transport's error in the message.
pub fn registry_unreachable(e: &Status) -> bool {
    use crate::cri::Code;
    if matches!(e.code, Code::Unavailable | Code::NotFound | Code::PermissionDenied | Code::Unauthenticated) {
        return false;
    }
    let m = e.message.to_ascii_lowercase();
    const ANSWERED: &[&str] =
        &["not found", "unauthorized", "forbidden", "denied", "manifest unknown", "401 ", "403 ", "404 "];
    const UNREACHABLE: &[&str] = &[
        "connection refused",
        "connection reset",
        "no such host",
        "no route to host",
        "network is unreachable",
        "i/o timeout",
        "tls handshake timeout",
        "server misbehaving",
        "temporary failure in name resolution",
        "dial tcp",
        "context deadline exceeded",
        "eof",
        "502 bad gateway",
        "503 service unavailable",
        "504 gateway timeout",
    ];
    !ANSWERED.iter().any(|a| m.contains(a)) && UNREACHABLE.iter().any(|u| m.contains(u))
}

/// PullImage without credentials when none apply; else with each that applies, the pod's pull
/// secrets' first, then the node's, most specific first, until one works (kubelet's order).
/// The error is the last one.
async fn pull<R: RuntimeService>(
    cx: &Context<R>,
    pod: &Pod,
    image: &str,
    sandbox_config: &PodSandboxConfig,
) -> Result<String, Status> {
    let mut credentials =
        super::credentials::Keyring::of_pull_secrets(pod, &cx.node.objects().for_pod(pod)).lookup(image);
    credentials.extend(cx.tuning.credentials(image));
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

#[cfg(test)]
mod tests {
    use super::registry_unreachable;
    use crate::cri::{Code, Status};

    #[test]
    fn unreachable_registries_are_told_from_answers() {
        let unreachable = [
            "failed to pull and unpack image \"r.example/a:1\": failed to resolve reference \"r.example/a:1\": failed to do request: Head \"https://r.example/v2/a/manifests/1\": dial tcp 10.0.0.1:443: connect: connection refused",
            "failed to resolve reference \"r.example/a:1\": failed to do request: Head \"https://r.example/v2/a/manifests/1\": dial tcp: lookup r.example on 127.0.0.53:53: no such host",
            "failed to do request: Head \"https://r.example/v2/\": dial tcp 10.0.0.1:443: i/o timeout",
            "failed to copy: httpReadSeeker: failed open: failed to do request: Get \"https://r.example/v2/a/blobs/sha256:1\": net/http: TLS handshake timeout",
            "dial tcp 10.0.0.1:443: connect: network is unreachable",
            "unexpected status from HEAD request to https://r.example/v2/a/manifests/1: 503 Service Unavailable",
        ];
        for m in unreachable {
            assert!(registry_unreachable(&Status::new(Code::Unknown, m)), "{m}");
        }
        let answered = [
            (Code::NotFound, "failed to resolve reference \"r.example/a:1\": r.example/a:1: not found"),
            (
                Code::Unknown,
                "failed to authorize: failed to fetch anonymous token: unexpected status: 401 Unauthorized",
            ),
            (Code::Unknown, "pull access denied, repository does not exist or may require authorization"),
            (Code::Unknown, "unexpected status from GET request to https://r.example/v2/a/manifests/1: 403 Forbidden"),
            (Code::Unknown, "failed to unpack image: wrong diff id calculated on extraction"),
            // The runtime itself is away: that is no reason to run an image blind.
            (Code::Unavailable, "connection refused"),
        ];
        for (code, m) in answered {
            assert!(!registry_unreachable(&Status::new(code, m)), "{m}");
        }
    }
}
