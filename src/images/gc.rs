//! Image garbage collection as kubelet does it (`image_gc_manager.go`), with its config names
//! and defaults: when the image filesystem is `imageGCHighThresholdPercent` (85) full, the
//! least recently used images are removed until it is `imageGCLowThresholdPercent` (80) full;
//! an image unused for `imageMaximumGCAge` (off by default) goes whatever the disk. Never an
//! image in use by a container (running or exited), younger than `imageMinimumGCAge` (2 min,
//! counted from when atoll first saw it), or pinned: by the runtime (the sandbox image, or
//! containerd's pinned label), by a pod atoll runs (its containers' and image volumes' images,
//! whether running, waiting or backing off), or by the images directory. The decision is
//! [`plan`], a pure function; [`Collector`] gathers the facts from the runtime and acts.

use crate::cri::{RuntimeService, Status};
use crate::node::Node;
use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, SystemTime};

/// kubelet's ImageGCPeriod (atoll's `imageGCPeriod` changes it).
pub const PERIOD: Duration = Duration::from_secs(300);

/// The KubeletConfiguration's image GC settings.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Policy {
    pub high_percent: u8,
    pub low_percent: u8,
    pub min_age: Duration,
    /// None: off (kubelet's 0).
    pub max_age: Option<Duration>,
}

impl Default for Policy {
    fn default() -> Self {
        Policy { high_percent: 85, low_percent: 80, min_age: Duration::from_secs(120), max_age: None }
    }
}

/// One image as the collector sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Candidate {
    pub id: String,
    pub names: Vec<String>,
    pub size: u64,
    pub first_seen: SystemTime,
    pub last_used: SystemTime,
    pub in_use: bool,
    /// Why it must stay, if it must.
    pub pinned: Option<String>,
}

/// The image filesystem.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Disk {
    pub capacity: u64,
    pub available: u64,
}

impl Disk {
    /// How many bytes may still be written before it is `percent` full.
    pub fn room_below(&self, percent: u8) -> u64 {
        let kept_free = self.capacity as u128 * (100 - percent.min(100) as u128) / 100;
        (self.available as u128).saturating_sub(kept_free) as u64
    }
}

/// What to remove, and why.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Plan {
    /// (image id, reason), in order.
    pub remove: Vec<(String, String)>,
    /// Bytes the thresholds asked for and could not be freed (kubelet's FreeDiskSpaceFailed).
    pub short: u64,
}

/// kubelet's decision. `force`: `atoll images prune`, every image that may go, whatever the
/// disk and the minimum age.
pub fn plan(images: &[Candidate], disk: Option<Disk>, policy: Policy, now: SystemTime, force: bool) -> Plan {
    let age = |t: SystemTime| now.duration_since(t).unwrap_or_default();
    let removable = |c: &&Candidate| !c.in_use && c.pinned.is_none() && (force || age(c.first_seen) >= policy.min_age);
    let mut out = Plan::default();
    let mut taken = BTreeSet::new();
    if let Some(max) = policy.max_age {
        for c in images.iter().filter(removable).filter(|c| age(c.last_used) > max) {
            out.remove.push((c.id.clone(), format!("unused for more than imageMaximumGCAge ({max:?})")));
            taken.insert(c.id.clone());
        }
    }
    let mut order: Vec<&Candidate> = images.iter().filter(removable).filter(|c| !taken.contains(&c.id)).collect();
    order.sort_by_key(|c| (c.last_used, c.first_seen));
    if force {
        for c in order {
            out.remove.push((c.id.clone(), "pruned".into()));
        }
        return out;
    }
    let Some(disk) = disk.filter(|d| d.capacity > 0) else { return out };
    let used_percent = 100 - (disk.available.min(disk.capacity) as u128 * 100 / disk.capacity as u128) as u64;
    if used_percent < policy.high_percent as u64 {
        return out;
    }
    let goal = (disk.capacity as u128 * (100 - policy.low_percent.min(100) as u128) / 100) as u64;
    let want = goal.saturating_sub(disk.available);
    let mut freed: u64 =
        out.remove.iter().filter_map(|(id, _)| images.iter().find(|c| &c.id == id)).map(|c| c.size).sum();
    for c in order {
        if freed >= want {
            break;
        }
        let reason =
            format!("image filesystem {used_percent}% full (imageGCHighThresholdPercent {})", policy.high_percent);
        out.remove.push((c.id.clone(), reason));
        freed = freed.saturating_add(c.size);
    }
    out.short = want.saturating_sub(freed);
    out
}

/// When each image was first seen and last seen in use (kubelet keeps the same, in memory).
#[derive(Debug, Default)]
pub struct Usage {
    seen: BTreeMap<String, (SystemTime, SystemTime)>,
}

/// What a collection did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Report {
    /// (names or id, reason) of what was removed (or would be, in a dry run).
    pub removed: Vec<(String, String)>,
    pub freed: u64,
    pub short: u64,
    pub errors: Vec<String>,
}

/// The node's image collector: kubelet's policy, and what it has seen of each image. The
/// periodic collection and `atoll images prune` share it.
pub struct Collector {
    pub policy: Policy,
    /// How often it collects.
    pub period: Duration,
    usage: smol::lock::Mutex<Usage>,
}

impl Collector {
    pub fn new(policy: Policy, period: Duration) -> Collector {
        Collector { policy, period, usage: smol::lock::Mutex::new(Usage::default()) }
    }

    /// Collects every period (kubelet's [`PERIOD`] by default) until the task is dropped (the first after one period, as
    /// kubelet, so that nothing is judged before the pods have started).
    pub async fn run<R: RuntimeService>(&self, node: &Node, cri: &R) {
        loop {
            smol::Timer::after(self.period).await;
            if self.policy.high_percent >= 100 && self.policy.max_age.is_none() {
                continue; // collection turned off; images are still listed
            }
            if let Err(e) = self.collect(node, cri, false, false).await {
                log::warn!("images: garbage collection: {e}");
            }
        }
    }

    /// Every image with what the collector knows of it.
    pub async fn inventory<R: RuntimeService>(&self, node: &Node, cri: &R) -> Result<Vec<Candidate>, Status> {
        let mut usage = self.usage.lock().await;
        inventory(node, cri, &mut usage).await
    }

    /// Looks at the runtime's images and removes what [`plan`] says (nothing when `dry_run`);
    /// `force`: every image that may go (`atoll images prune`).
    pub async fn collect<R: RuntimeService>(
        &self,
        node: &Node,
        cri: &R,
        force: bool,
        dry_run: bool,
    ) -> Result<Report, Status> {
        let mut usage = self.usage.lock().await;
        let candidates = inventory(node, cri, &mut usage).await?;
        let decided = plan(&candidates, disk(cri).await, self.policy, SystemTime::now(), force);
        let mut report = Report { short: decided.short, ..Default::default() };
        for (id, reason) in decided.remove {
            let c = candidates.iter().find(|c| c.id == id);
            let shown = c.map(|c| c.names.join(", ")).unwrap_or_else(|| id.clone());
            if !dry_run {
                if let Err(e) = cri.remove_image(&id).await {
                    report.errors.push(format!("{shown}: {e}"));
                    crate::metrics::add(&crate::metrics::IMAGE_COLLECTIONS, &[("result", "failed")], 1.0);
                    continue;
                }
                log::info!("images: removed {shown} ({reason})");
                crate::metrics::add(&crate::metrics::IMAGE_COLLECTIONS, &[("result", "removed")], 1.0);
            }
            report.freed = report.freed.saturating_add(c.map_or(0, |c| c.size));
            report.removed.push((shown, reason));
        }
        if report.short > 0 {
            log::warn!(
                "images: could not free {} bytes more of the image filesystem (every other image is in use or pinned)",
                report.short
            );
        }
        Ok(report)
    }
}

/// The runtime's images as candidates: in use, pinned and why, first seen and last used.
async fn inventory<R: RuntimeService>(node: &Node, cri: &R, usage: &mut Usage) -> Result<Vec<Candidate>, Status> {
    let now = SystemTime::now();
    let images = cri.list_images().await?;
    let containers = cri.list_containers(None).await?;
    let in_use: BTreeSet<&str> = containers.iter().map(|c| c.image_ref.as_str()).collect();
    let pinned_names = pinned_names(node, cri).await;
    usage.seen.retain(|id, _| images.iter().any(|i| &i.id == id));
    let mut candidates = Vec::new();
    for i in &images {
        let used = in_use.contains(i.id.as_str()) || i.repo_tags.iter().any(|t| in_use.contains(t.as_str()));
        let seen = usage.seen.entry(i.id.clone()).or_insert((now, now));
        if used {
            seen.1 = now;
        }
        let named = kept_by_name(&i.repo_tags, &i.repo_digests, &pinned_names);
        let pinned = named.or_else(|| i.pinned.then(|| "pinned by the runtime".to_string()));
        let names = if i.repo_tags.is_empty() { vec![i.id.clone()] } else { i.repo_tags.clone() };
        candidates.push(Candidate {
            id: i.id.clone(),
            names,
            size: i.size,
            first_seen: seen.0,
            last_used: seen.1,
            in_use: used,
            pinned,
        });
    }
    Ok(candidates)
}

/// Why an image named `tags` and `digests` (`name@sha256:...`) must stay, if a name in `kept`
/// (normalized) is one of them: pods name images by tag or by digest.
fn kept_by_name(tags: &[String], digests: &[String], kept: &BTreeMap<String, String>) -> Option<String> {
    tags.iter().chain(digests).find_map(|n| kept.get(&crate::pod::derived::normalized_image(n))).cloned()
}

/// Images to keep by name, and why: the pods' (running, waiting or backing off), the images
/// directory's, and the runtime's sandbox image.
async fn pinned_names<R: RuntimeService>(node: &Node, cri: &R) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    for (pod, _) in node.statuses().pods() {
        for image in super::names::pod_images(&pod) {
            out.insert(image, format!("used by pod {}", pod.key()));
        }
    }
    for image in node.imports().images() {
        let file = node.imports().source_of(&image).unwrap_or_default();
        out.insert(crate::pod::derived::normalized_image(&image), format!("imported from {file}"));
    }
    if let Some(sandbox) = sandbox_image(cri).await {
        out.insert(crate::pod::derived::normalized_image(&sandbox), "the runtime's sandbox image".into());
    }
    out
}

/// The runtime's sandbox (pause) image, from its verbose status (containerd's config).
async fn sandbox_image<R: RuntimeService>(cri: &R) -> Option<String> {
    let status = cri.status(true).await.ok()?;
    let config: serde_json::Value = crate::parse::json(status.info.get("config")?.as_bytes()).ok()?;
    let image = config.get("sandboxImage").or_else(|| config.pointer("/pinnedImages/sandbox"))?;
    image.as_str().map(str::to_string)
}

/// The image filesystem's size and free space (CRI ImageFsInfo gives its mount point).
pub async fn disk<R: RuntimeService>(cri: &R) -> Option<Disk> {
    let info = cri.image_fs_info().await.ok()?;
    let mount = info.image_filesystems.first()?.fs_id.as_ref()?.mountpoint.clone();
    let st = rustix::fs::statvfs(mount.as_str()).ok()?;
    let block = st.f_frsize.max(1);
    Some(Disk { capacity: st.f_blocks.saturating_mul(block), available: st.f_bavail.saturating_mul(block) })
}

#[cfg(test)]
#[path = "gc_tests.rs"]
mod tests;
