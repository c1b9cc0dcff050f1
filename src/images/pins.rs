//! The runtime's pin on the images atoll's pods need: each image a pod atoll runs refers to
//! (running, waiting or backing off) carries containerd's `io.cri-containerd.pinned=pinned`
//! label, which containerd 1.7 and later honour for every collector on the box (kubelet's, a
//! `crictl rmi --prune`), and `atoll.io/pinned-for-pods=true`, so atoll knows which pins are its
//! own (also after a restart) and takes them off when no pod needs the image any more. Images
//! imported from the images directory keep their own pin. atoll's own collector does not need
//! these labels (it reads the pods); they are for the others.

use super::import::{ctr_output, Containerd, CtrError};
use super::names::pod_images;
use crate::cri::Cri;
use crate::node::Node;
use std::collections::BTreeSet;

const OURS: &str = "atoll.io/pinned-for-pods";
/// How long a change of the pods waits for the ones starting with it.
const SETTLE: std::time::Duration = std::time::Duration::from_millis(500);

/// Pins the images of pods as soon as their workers start (at start, and for every new or
/// changed pod), and keeps every pin up to date every `every` (a minute, or the collector's
/// shorter period) until the task is dropped; where the runtime is not containerd, or has no
/// `ctr`, it says so once and stops.
///
/// Pins come off only in the periodic pass: it runs first `every` after start, when the
/// sources' pods have all been handed to workers, so a pod not yet started at boot does not
/// lose its image's pin to an early pass that knew only some of the pods.
pub async fn run(
    node: std::sync::Arc<Node>,
    cri: Cri,
    ctr: Option<std::path::PathBuf>,
    address: std::path::PathBuf,
    every: std::time::Duration,
) {
    let mut pins = Pins::default();
    let mut last_error = String::new();
    // The runtime and its ctr do not change while atoll runs: found once, not every minute.
    let mut found: Option<Containerd> = None;
    let changes = node.statuses().changes();
    let mut next_full = std::time::Instant::now() + every;
    loop {
        let full = smol::future::or(
            async {
                smol::Timer::at(next_full).await;
                true
            },
            async {
                if changes.recv().await.is_err() {
                    std::future::pending::<()>().await;
                }
                // Workers start together: one pass for the lot.
                smol::Timer::after(SETTLE).await;
                let _ = changes.try_recv();
                false
            },
        )
        .await;
        if full {
            next_full = std::time::Instant::now() + every;
        }
        if found.is_none() {
            match super::dir::target(ctr.as_deref(), &address, &cri).await {
                Ok(t) => found = Some(t),
                Err(super::dir::NoTarget::NotAnswering(_)) => continue,
                Err(e) => {
                    log::info!("images: the runtime's pin on the pods' images is not kept: {e}");
                    return;
                }
            }
        }
        let Some(target) = &found else { continue };
        match pins.update(&node, &cri, target, full).await {
            Ok(()) => last_error.clear(),
            Err(e) => {
                let e = e.to_string();
                if e != last_error {
                    log::warn!("images: pinning the pods' images: {e}");
                    last_error = e;
                }
            }
        }
    }
}

/// The pins atoll has set, as far as it knows.
#[derive(Debug, Default)]
pub struct Pins {
    /// Image names pinned for pods; `None` until read back from the runtime.
    pinned: Option<BTreeSet<String>>,
}

impl Pins {
    /// Pins what the pods need and, when `unpin`, unpins what they no longer do.
    pub async fn update(&mut self, node: &Node, cri: &Cri, target: &Containerd, unpin: bool) -> Result<(), CtrError> {
        let pinned = match &mut self.pinned {
            Some(p) => p,
            None => {
                let filter = format!("labels.\"{OURS}\"==true");
                let listed = ctr(target, &["images", "ls", "-q", &filter]).await?;
                self.pinned.insert(listed.lines().map(str::trim).filter(|l| !l.is_empty()).map(String::from).collect())
            }
        };
        let wanted: BTreeSet<String> = node.statuses().pods().iter().flat_map(|(pod, _)| pod_images(pod)).collect();
        let present: BTreeSet<String> = super::dir::names_present(cri).await;
        let imported: BTreeSet<String> = node.imports().images().into_iter().collect();
        let keep: BTreeSet<String> =
            present.iter().filter(|n| wanted.contains(&crate::pod::derived::normalized_image(n))).cloned().collect();
        for name in keep.difference(pinned).cloned().collect::<Vec<_>>() {
            let label = format!("{OURS}=true");
            ctr(target, &["images", "label", "--", &name, "io.cri-containerd.pinned=pinned", &label]).await?;
            log::debug!("images: pinned {name} for the pods that need it");
            pinned.insert(name);
        }
        if !unpin {
            return Ok(());
        }
        for name in pinned.difference(&keep).cloned().collect::<Vec<_>>() {
            if present.contains(&name) {
                let pin = if imported.contains(&name) {
                    "io.cri-containerd.pinned=pinned"
                } else {
                    "io.cri-containerd.pinned="
                };
                ctr(target, &["images", "label", "--", &name, pin, &format!("{OURS}=")]).await?;
                log::debug!("images: unpinned {name}: no pod needs it");
            }
            pinned.remove(&name);
        }
        Ok(())
    }
}

/// `ctr` with `args`, off the executor (one blocking task type for every call here).
async fn ctr(target: &Containerd, args: &[&str]) -> Result<String, CtrError> {
    let (t, args): (Containerd, Vec<String>) = (target.clone(), args.iter().map(|a| a.to_string()).collect());
    crate::task::unblock(move || ctr_output(&t, &args.iter().map(String::as_str).collect::<Vec<_>>())).await
}
