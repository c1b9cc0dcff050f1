//! Pull before swap: when a pod's manifest changes, the new version's images are pulled while
//! the old version keeps running, and only then is the old version stopped (the new one starts
//! once it is gone: kubelet's stop-then-start order for one pod stays, so host ports and
//! hostPath data are never shared). A pull that fails leaves the old version running, with an
//! event on it saying why, and is tried again after the image's back-off, or as soon as an
//! import may have brought the image. The engine starts this for a replacement, as its
//! ledger decides.

use super::context::Context;
use super::images::ensure_image;
use crate::cri::RuntimeService;
use crate::node::observed::WaitReason;
use crate::pod::types::Pod;
use std::time::Duration;

/// The images `pod` will need with their pull policies: its init containers', its
/// containers' and its image volumes'.
pub fn images(pod: &Pod) -> Vec<(String, Option<String>)> {
    let spec = &pod.spec;
    let containers = spec.init_containers.iter().chain(&spec.containers);
    let volumes = spec.volumes.iter().filter_map(|v| v.image.as_ref());
    containers
        .map(|c| (c.image.clone(), c.image_pull_policy.clone()))
        .chain(volumes.map(|i| (i.reference.clone(), i.pull_policy.clone())))
        .collect()
}

/// Gets every image `new` needs onto the node as its containers will (pull policy,
/// credentials, back-off, the offline rule); returns when they are there, or when nothing
/// more can be fetched ahead (an image with policy Never that is missing: the new version
/// reports it itself). While a pull fails, `old` carries a warning event saying why. Between
/// tries it waits out the image's back-off, or less when `woken` says images may have arrived
/// (an import from the images directory): a waiting container's rule.
pub async fn run<R: RuntimeService>(cx: &Context<R>, old: &Pod, new: &Pod, woken: smol::channel::Receiver<()>) {
    let facts = cx.node.facts();
    let Ok(config) = super::sandbox::sandbox_config(new, 0, facts) else { return };
    let mut last = String::new();
    for (image, policy) in images(new) {
        loop {
            match ensure_image(cx, new, &image, policy.as_deref(), &config).await {
                Ok(_) => break,
                Err(w) if w.wait.reason == WaitReason::ErrImageNeverPull => break,
                Err(w) => {
                    let message = format!(
                        "the new version ({}) waits for image {image:?}: {}; this version keeps running",
                        new.metadata.uid, w.wait.message
                    );
                    // A wait, not a failure: the old version runs on (the event says why).
                    if message != last && w.wait.reason != WaitReason::ImageImporting {
                        cx.node.events().record(old, false, "UpdateWaitingForImage", &message);
                        last = message;
                    }
                    let retry_in = w.retry_in.max(Duration::from_millis(100));
                    smol::future::or(
                        async {
                            smol::Timer::after(retry_in).await;
                        },
                        async {
                            let _ = woken.recv().await;
                        },
                    )
                    .await;
                }
            }
        }
    }
}
