//! `/stats/summary` whole, as kubelet's Summary API (`k8s.io/kubelet/pkg/apis/stats/v1alpha1`)
//! fills it with the CRI stats provider: the CPU and memory of `resource::summary`, and with
//! them the node's network (the host's interfaces) and file systems (`fs`: the state
//! directory's; `runtime.imageFs` and `runtime.containerFs`: the image file system, one and
//! the same as in kubelet), each pod's network (its sandbox's namespace; none for a host
//! network pod), volumes and `ephemeral-storage`, and each container's `rootfs` (the writable
//! layer) and `logs`. `only_cpu_and_memory=true` (metrics-server's ask) gets the CPU and
//! memory alone and walks no disk.
//!
//! The network comes from the cAdvisor scrape (`api::cadvisor`), the disks from `disks`; the
//! rendering here is pure.

use super::disks::{self, Disks, Fs, Used};
use super::resource;
use crate::api::cadvisor::{Entry, Scrape};
use crate::api::cgroups::Interface;
use crate::api::usage::Usage;
use crate::api::view::Api;
use crate::cri::RuntimeService;
use serde_json::{json, Value};

/// kubelet's `ParseBool` of `only_cpu_and_memory`.
pub fn only_cpu_and_memory(value: Option<&str>) -> bool {
    matches!(value, Some("1" | "t" | "T" | "true" | "TRUE" | "True"))
}

/// The answer to `/stats/summary` with its `only_cpu_and_memory` query value.
pub async fn answer<RT: RuntimeService>(api: &Api<RT>, only: Option<&str>) -> Value {
    let usage = resource::collect(api).await;
    if only_cpu_and_memory(only) {
        return resource::summary(&usage);
    }
    let scrape = crate::api::cadvisor::collect(api).await;
    let disks = disks::collect(api, &scrape).await;
    render(&usage, &scrape, &disks)
}

fn time(ms: i64) -> Value {
    Value::String(resource::time(ms))
}

/// kubelet's `FsStats`: a file system's size, and what is used of it, each left out when unknown.
fn fs_stats(at_ms: i64, fs: Option<&Fs>, used: Option<u64>, inodes_used: Option<u64>) -> Value {
    let mut out = json!({"time": time(at_ms)});
    let fields = [
        ("availableBytes", fs.map(|f| f.available)),
        ("capacityBytes", fs.map(|f| f.capacity)),
        ("usedBytes", used),
        ("inodesFree", fs.map(|f| f.inodes_free)),
        ("inodes", fs.map(|f| f.inodes)),
        ("inodesUsed", inodes_used),
    ];
    for (key, value) in fields {
        if let Some(v) = value {
            out[key] = json!(v);
        }
    }
    out
}

fn interface(i: &Interface) -> Value {
    json!({"name": i.name, "rxBytes": i.rx[0], "rxErrors": i.rx[2], "txBytes": i.tx[0], "txErrors": i.tx[2]})
}

/// kubelet's `NetworkStats`: eth0's counters at the top (its name empty when there is none),
/// and every interface.
pub fn network(at_ms: i64, interfaces: &[Interface]) -> Value {
    let mut out = match interfaces.iter().find(|i| i.name == "eth0") {
        Some(eth0) => interface(eth0),
        None => json!({"name": ""}),
    };
    out["time"] = time(at_ms);
    if !interfaces.is_empty() {
        out["interfaces"] = interfaces.iter().map(interface).collect();
    }
    out
}

fn sum(a: Option<u64>, b: Option<u64>) -> Option<u64> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.saturating_add(b)),
        (a, b) => a.or(b),
    }
}

/// The container's entry in the scrape (a running container of the pod, by name).
fn container_entry<'a>(scrape: &'a Scrape, uid: &str, name: &str) -> Option<&'a Entry> {
    scrape.entries.iter().find(|e| e.pod_uid == uid && !name.is_empty() && e.labels.container == name)
}

/// The summary with every part kubelet fills: `resource::summary`'s, then the network and disks.
pub fn render(u: &Usage, scrape: &Scrape, d: &Disks) -> Value {
    let mut out = resource::summary(u);
    let node = &mut out["node"];
    if let Some(root) = scrape.entries.iter().find(|e| e.labels.id == "/" && e.pod_uid.is_empty()) {
        node["network"] = network(root.at_ms, &root.network);
    }
    if let Some(fs) = &d.node {
        node["fs"] = fs_stats(d.at_ms, Some(fs), Some(fs.used), Some(fs.inodes.saturating_sub(fs.inodes_free)));
    }
    if let Some(image) = &d.image {
        let stats = fs_stats(image.at_ms, image.fs.as_ref(), Some(image.used), image.inodes_used);
        node["runtime"] = json!({"imageFs": stats, "containerFs": stats});
    }
    let Some(pods) = out["pods"].as_array_mut() else { return out };
    for pod in pods {
        let uid = pod["podRef"]["uid"].as_str().unwrap_or_default().to_string();
        let sandbox = scrape.entries.iter().find(|e| e.pod_uid == uid && e.labels.container.is_empty());
        if let Some(sb) = sandbox.filter(|s| !s.network.is_empty()) {
            pod["network"] = network(sb.at_ms, &sb.network);
        }
        let disks = d.pods.iter().find(|p| p.uid == uid);
        // kubelet's sum: the node's file system, and what the pod keeps on it.
        let (mut used, mut inodes, mut at) = (None, None, d.at_ms);
        if let Some(containers) = pod["containers"].as_array_mut() {
            for c in containers {
                let name = c["name"].as_str().unwrap_or_default().to_string();
                let layer = container_entry(scrape, &uid, &name).and_then(|e| Some((e.at_ms, e.fs.as_ref()?)));
                if let Some((entry_at, (mount, bytes))) = layer {
                    let fs = d.mounts.iter().find(|(m, _)| m == mount).map(|(_, f)| f);
                    c["rootfs"] = fs_stats(entry_at, fs, Some(*bytes), None);
                    used = sum(used, Some(*bytes));
                    at = at.max(entry_at);
                }
                let logs = disks.and_then(|p| p.logs.iter().find(|(n, _)| *n == name)).map(|(_, l)| l);
                if let Some(l) = logs {
                    c["logs"] = fs_stats(d.at_ms, d.node.as_ref(), Some(l.bytes), Some(l.inodes));
                    used = sum(used, Some(l.bytes));
                    inodes = sum(inodes, Some(l.inodes));
                }
            }
        }
        let Some(p) = disks else { continue };
        if !p.volumes.is_empty() {
            let volumes: Vec<Value> = p
                .volumes
                .iter()
                .map(|v| {
                    let mut s = fs_stats(d.at_ms, v.fs.as_ref(), Some(v.used.bytes), Some(v.used.inodes));
                    s["name"] = json!(v.name);
                    s
                })
                .collect();
            pod["volume"] = Value::Array(volumes);
        }
        let extra = p.volumes.iter().filter(|v| v.ephemeral).map(|v| &v.used).chain(&p.pod_logs).chain(&p.etc_hosts);
        for Used { bytes, inodes: n, .. } in extra {
            used = sum(used, Some(*bytes));
            inodes = sum(inodes, Some(*n));
        }
        pod["ephemeral-storage"] = fs_stats(at, d.node.as_ref(), used, inodes);
    }
    out
}

#[cfg(test)]
#[path = "summary_tests.rs"]
mod tests;
