//! What kubelet's embedded cAdvisor gathers, for `/metrics/cadvisor` (rendered by
//! `cadvisor_text`) and the disk and network parts of `/stats/summary`: one entry per running
//! container, per ready pod sandbox (`container=""`, the pause container, which alone carries
//! the pod's network, as cAdvisor labels it under containerd) and for the root (`id="/"`).
//!
//! Sources: the pod statuses say which containers run (and their image and start); CRI
//! `ListContainerStats` gives CPU, working set and the writable layer; each container's
//! cgroup (found once through the runtime's verbose status, then kept by path) gives the rest
//! (`api::cgroups`), read off the executor in one batch. What the cgroup cannot say, CRI
//! does, and the other way round.

use super::cgroups::{self, Cgroup, Interface, Located, Sample};
use super::view::Api;
use crate::cri::api::PodSandboxState;
use crate::cri::RuntimeService;
use crate::runtime::sandbox::LABEL_POD_UID;
use std::collections::HashMap;
use std::time::{Duration, SystemTime};

/// cAdvisor's labels of a series, in its (sorted) order.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Labels {
    pub container: String,
    pub id: String,
    pub image: String,
    pub name: String,
    pub namespace: String,
    pub pod: String,
}

/// One cgroup's readings.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Entry {
    pub labels: Labels,
    pub pod_uid: String,
    pub sample: Sample,
    /// The writable layer's bytes and its file system (CRI), for a container.
    pub fs: Option<(String, u64)>,
    pub network: Vec<Interface>,
    /// When the container started (seconds since the epoch).
    pub started: Option<u64>,
    /// When it was read (ms since the epoch).
    pub at_ms: i64,
}

/// The machine, as cAdvisor's `machine_*` series show it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Machine {
    pub cores: u64,
    pub memory: u64,
    pub boot_id: String,
    pub machine_id: String,
    pub system_uuid: String,
}

/// Everything one scrape shows.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Scrape {
    pub entries: Vec<Entry>,
    pub machine: Machine,
    /// Block device names by `major:minor`.
    pub devices: Vec<(String, String)>,
    pub now_ms: i64,
    /// The runtime could not be asked.
    pub error: bool,
}

/// What is read off the executor: each entry's cgroup (and network, for a sandbox of a pod
/// with its own network namespace).
struct Job {
    entry: Entry,
    cgroup: Option<Cgroup>,
    network: bool,
}

/// Now, in ms since the epoch (a reading's stamp).
pub fn now_ms() -> i64 {
    let since = SystemTime::now().duration_since(SystemTime::UNIX_EPOCH).unwrap_or_default();
    i64::try_from(since.as_millis()).unwrap_or(i64::MAX)
}

/// The pid in a runtime's verbose info (`info["info"]`, JSON with `pid`, and for a sandbox
/// `image`).
pub fn verbose_info(info: &HashMap<String, String>) -> Option<(u32, String)> {
    let text = info.get("info").filter(|t| t.len() <= 4 << 20)?;
    let v: serde_json::Value = serde_json::from_str(text).ok()?;
    let pid = u32::try_from(v.get("pid")?.as_u64()?).ok().filter(|p| *p > 0)?;
    Some((pid, v.get("image").and_then(|i| i.as_str()).unwrap_or_default().to_string()))
}

/// Finds a container's or sandbox's cgroup (once; kept in the API's cache).
async fn locate<RT: RuntimeService>(api: &Api<RT>, id: &str, sandbox: bool, image: &str) -> Option<Located> {
    if let Some(l) = crate::locks::lock(&api.cgroups).get(id) {
        return Some(l.clone());
    }
    let ask = async {
        match sandbox {
            true => api.runtime.pod_sandbox_status(id, true).await.ok().map(|r| r.info),
            false => api.runtime.container_status(id, true).await.ok().map(|r| r.info),
        }
    };
    let info = crate::deadline::with_deadline(Duration::from_secs(5), ask).await.flatten()?;
    let (pid, info_image) = verbose_info(&info)?;
    // A process in the root cgroup is not the container's (its pid was reused, or it is gone).
    let cgroup = crate::task::unblock(move || cgroups::of_process(pid)).await.filter(|c| cgroup_id(c) != "/")?;
    let image = if image.is_empty() { info_image } else { image.to_string() };
    let located = Located { cgroup, image };
    crate::locks::lock(&api.cgroups).insert(id.to_string(), located.clone());
    Some(located)
}

fn cgroup_id(c: &Cgroup) -> String {
    let rel = match c {
        Cgroup::V2(rel) => rel.as_str(),
        Cgroup::V1(list) => list.iter().find(|(c, _)| c == "cpu").or(list.first()).map_or("", |(_, r)| r.as_str()),
    };
    format!("/{rel}")
}

/// Gathers a scrape: asks the runtime (at most 5 s a call), then reads every cgroup off the
/// executor.
pub async fn collect<RT: RuntimeService>(api: &Api<RT>) -> Scrape {
    let deadline = Duration::from_secs(5);
    let stats = crate::deadline::with_deadline(deadline, api.runtime.list_container_stats()).await.and_then(Result::ok);
    let sandboxes =
        crate::deadline::with_deadline(deadline, api.runtime.list_pod_sandbox(None)).await.and_then(Result::ok);
    let error = stats.is_none() || sandboxes.is_none();
    let stats = stats.unwrap_or_default();
    let pods = api.node.statuses().pods();
    let mut jobs = Vec::new();
    let mut seen = Vec::new();
    for sb in sandboxes.unwrap_or_default().iter().filter(|s| s.state == PodSandboxState::SandboxReady as i32) {
        let uid = sb.labels.get(LABEL_POD_UID).map_or("", String::as_str);
        let Some((pod, _)) = pods.iter().find(|(p, _)| p.metadata.uid == uid) else { continue };
        let located = locate(api, &sb.id, true, "").await;
        seen.push(sb.id.clone());
        let labels = Labels {
            id: located.as_ref().map(|l| cgroup_id(&l.cgroup)).unwrap_or_default(),
            image: located.as_ref().map(|l| l.image.clone()).unwrap_or_default(),
            name: sb.id.clone(),
            namespace: pod.metadata.namespace.clone(),
            pod: pod.metadata.name.clone(),
            container: String::new(),
        };
        let started = u64::try_from(sb.created_at / 1_000_000_000).ok().filter(|s| *s > 0);
        let entry = Entry { labels, pod_uid: uid.to_string(), started, ..Default::default() };
        // Every sandbox's network, a host-network pod's too (the host's interfaces), as cAdvisor.
        jobs.push(Job { entry, cgroup: located.map(|l| l.cgroup), network: true });
    }
    for (pod, status) in &pods {
        let Some(status) = status else { continue };
        for c in status.init_container_statuses.iter().chain(&status.container_statuses) {
            let Some(running) = &c.state.running else { continue };
            let Some((_, id)) = c.container_id.split_once("://") else { continue };
            let Some(located) = locate(api, id, false, &c.image).await else { continue };
            seen.push(id.to_string());
            let crs = stats.iter().find(|s| s.attributes.as_ref().is_some_and(|a| a.id == id));
            let mut sample = Sample::default();
            if let Some(crs) = crs {
                sample.cpu_ns = crs.cpu.and_then(|c| c.usage_core_nano_seconds).map(|v| v.value);
                sample.working_set = crs.memory.and_then(|m| m.working_set_bytes).map(|v| v.value);
                sample.memory = crs.memory.and_then(|m| m.usage_bytes).map(|v| v.value);
                sample.rss = crs.memory.and_then(|m| m.rss_bytes).map(|v| v.value);
            }
            let fs = crs.and_then(|s| s.writable_layer.as_ref()).and_then(|w| {
                let mount = w.fs_id.as_ref().map(|f| f.mountpoint.clone()).unwrap_or_default();
                Some((mount, w.used_bytes?.value))
            });
            let started = running
                .started_at
                .as_deref()
                .and_then(crate::rfc3339::parse_seconds)
                .and_then(|t| t.duration_since(SystemTime::UNIX_EPOCH).ok())
                .map(|d| d.as_secs());
            let labels = Labels {
                container: c.name.clone(),
                id: cgroup_id(&located.cgroup),
                image: located.image,
                name: id.to_string(),
                namespace: pod.metadata.namespace.clone(),
                pod: pod.metadata.name.clone(),
            };
            let entry = Entry { labels, pod_uid: pod.metadata.uid.clone(), sample, fs, started, ..Default::default() };
            jobs.push(Job { entry, cgroup: Some(located.cgroup), network: false });
        }
    }
    crate::locks::lock(&api.cgroups).retain(|id, _| seen.contains(id));
    let mut scrape = crate::task::unblock(move || read_all(jobs)).await;
    scrape.error = error;
    scrape
}

/// Reads every job's cgroup, the root and the machine (blocking).
fn read_all(jobs: Vec<Job>) -> Scrape {
    let mut entries = Vec::with_capacity(jobs.len() + 1);
    let root = match cgroups::unified() {
        true => Cgroup::V2(String::new()),
        false => {
            Cgroup::V1(["cpu", "cpuacct", "memory", "blkio"].iter().map(|c| (c.to_string(), String::new())).collect())
        }
    };
    let mut root_sample = cgroups::read(&root, &[]);
    if let Some(node) = super::usage::node_reading() {
        root_sample.cpu_ns = root_sample.cpu_ns.or(Some(node.cpu_ns));
        root_sample.working_set = root_sample.working_set.or(Some(node.memory));
    }
    let labels = Labels { id: "/".into(), ..Default::default() };
    entries.push(Entry {
        labels,
        sample: root_sample,
        network: cgroups::host_interfaces(),
        at_ms: now_ms(),
        ..Default::default()
    });
    for job in jobs {
        let mut e = job.entry;
        if let Some(cg) = &job.cgroup {
            // CRI's readings first, the cgroup's where CRI gave none (and then only the files
            // that say what CRI did not).
            let cri = std::mem::take(&mut e.sample);
            let covered = cri.cpu_ns.is_some() && cri.memory.is_some() && cri.working_set.is_some();
            let read = cgroups::read(cg, if covered { cgroups::CRI_COVERED } else { &[] });
            e.sample = Sample {
                cpu_ns: cri.cpu_ns.or(read.cpu_ns),
                working_set: cri.working_set.or(read.working_set),
                memory: cri.memory.or(read.memory),
                rss: cri.rss.or(read.rss),
                ..read
            };
            if job.network {
                e.network = cgroups::interfaces(cg);
            }
        }
        e.at_ms = now_ms();
        entries.push(e);
    }
    let mut devices: Vec<(String, String)> = Vec::new();
    for (dev, ..) in entries.iter().flat_map(|e| &e.sample.io) {
        if !devices.iter().any(|(d, _)| d == dev) {
            // A device without a name is "", as cAdvisor shows it.
            let name = cgroups::device_name(dev).unwrap_or_default();
            devices.push((dev.clone(), name));
        }
    }
    Scrape { entries, machine: machine(), devices, now_ms: now_ms(), error: false }
}

/// The machine's logical CPUs (online), memory and identity (blocking).
fn machine() -> Machine {
    let read = |p: &str| cgroups::read_text(std::path::Path::new(p)).map(|s| s.trim().to_string());
    let cores = read("/sys/devices/system/cpu/online").map_or(0, |s| online_cpus(&s));
    let memory = read("/proc/meminfo")
        .and_then(|m| super::usage::meminfo_kib(&m, "MemTotal:"))
        .map_or(0, |kib| kib.saturating_mul(1024));
    Machine {
        cores,
        memory,
        boot_id: read("/proc/sys/kernel/random/boot_id").unwrap_or_default(),
        machine_id: read("/etc/machine-id").or_else(|| read("/var/lib/dbus/machine-id")).unwrap_or_default(),
        system_uuid: read("/sys/class/dmi/id/product_uuid").unwrap_or_default(),
    }
}

/// The number of CPUs in a sysfs CPU list (`0-3,6,8-9`).
pub fn online_cpus(list: &str) -> u64 {
    list.split(',')
        .filter_map(|r| match r.trim().split_once('-') {
            Some((a, b)) => Some(b.parse::<u64>().ok()?.checked_sub(a.parse().ok()?)?.saturating_add(1)),
            None => r.trim().parse::<u64>().ok().map(|_| 1),
        })
        .fold(0, u64::saturating_add)
}

#[path = "cadvisor_text.rs"]
mod text;
pub use text::render;

#[cfg(test)]
#[path = "cadvisor_tests.rs"]
mod tests;
