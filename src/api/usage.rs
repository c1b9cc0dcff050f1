//! What the runtime says each container uses (CRI `ListContainerStats`, for the pods atoll
//! runs) and what the node uses (`/proc/stat` busy time; `/proc/meminfo` working set: used
//! memory less the inactive file cache, as cAdvisor counts it): one gathering for kubelet's
//! `/metrics/resource` and `/stats/summary` and for the local API's `/metrics`.

use super::view::Api;
use crate::cri::RuntimeService;
use std::time::{Duration, SystemTime};

/// One reading: cumulative CPU in core-nanoseconds, working set in bytes, when (ms since the
/// epoch).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Reading {
    pub cpu_ns: u64,
    pub memory: u64,
    pub at_ms: i64,
}

/// One container's reading and identity.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Container {
    pub namespace: String,
    pub pod: String,
    pub pod_uid: String,
    pub name: String,
    /// When it started (seconds since the epoch), from its status.
    pub started: Option<u64>,
    pub reading: Reading,
}

/// Everything one scrape shows.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Usage {
    pub node_name: String,
    pub node: Option<Reading>,
    pub containers: Vec<Container>,
    /// The runtime's stats could not be had.
    pub error: bool,
}

/// Reads the node and asks the runtime (at most 5 s) for its containers' stats.
pub async fn collect<RT: RuntimeService>(api: &Api<RT>) -> Usage {
    let listed = crate::deadline::with_deadline(Duration::from_secs(5), api.runtime.list_container_stats());
    let stats = listed.await.and_then(Result::ok);
    let error = stats.is_none();
    let pods = api.node.statuses().pods();
    let mut containers = Vec::new();
    for st in stats.unwrap_or_default() {
        let (Some(attrs), Some(cpu), Some(mem)) = (&st.attributes, &st.cpu, &st.memory) else { continue };
        let uid = attrs.labels.get(crate::runtime::sandbox::LABEL_POD_UID).map_or("", String::as_str);
        let Some((pod, status)) = pods.iter().find(|(p, _)| p.metadata.uid == uid) else { continue };
        let name = attrs.metadata.as_ref().map_or("", |m| m.name.as_str());
        let started = status
            .as_ref()
            .and_then(|s| s.container_statuses.iter().chain(&s.init_container_statuses).find(|c| c.name == name))
            .and_then(|c| c.state.running.as_ref()?.started_at.as_deref())
            .and_then(crate::rfc3339::parse_seconds)
            .and_then(|t| t.duration_since(SystemTime::UNIX_EPOCH).ok())
            .map(|d| d.as_secs());
        containers.push(Container {
            namespace: pod.metadata.namespace.clone(),
            pod: pod.metadata.name.clone(),
            pod_uid: uid.to_string(),
            name: name.to_string(),
            started,
            reading: Reading {
                cpu_ns: cpu.usage_core_nano_seconds.map_or(0, |v| v.value),
                memory: mem.working_set_bytes.map_or(0, |v| v.value),
                at_ms: cpu.timestamp.max(mem.timestamp) / 1_000_000,
            },
        });
    }
    containers.sort_by(|a, b| (&a.namespace, &a.pod, &a.name).cmp(&(&b.namespace, &b.pod, &b.name)));
    let node = crate::task::unblock(node_reading).await;
    Usage { node_name: api.node.facts().name.clone(), node, containers, error }
}

/// The node's CPU (all CPUs' busy time in `/proc/stat`) and working set (`/proc/meminfo`).
pub(super) fn node_reading() -> Option<Reading> {
    let read = |p: &str| crate::bounded::read_file(std::path::Path::new(p), 1 << 20).ok();
    let stat = String::from_utf8(read("/proc/stat")?).ok()?;
    let meminfo = String::from_utf8(read("/proc/meminfo")?).ok()?;
    let at_ms = i64::try_from(SystemTime::now().duration_since(SystemTime::UNIX_EPOCH).ok()?.as_millis()).ok()?;
    Some(Reading { cpu_ns: cpu_ns(&stat, USER_HZ)?, memory: working_set(&meminfo)?, at_ms })
}

/// The unit of `/proc/stat`: 100 per second on every Linux architecture atoll is built for.
const USER_HZ: u64 = 100;

/// Busy CPU time from `/proc/stat`'s `cpu` line (user, nice, system, irq, softirq, steal;
/// idle and iowait are not busy; guest time is already in user), in nanoseconds.
fn cpu_ns(stat: &str, hz: u64) -> Option<u64> {
    let line = stat.lines().find(|l| l.starts_with("cpu "))?;
    let v: Vec<u64> = line.split_whitespace().skip(1).filter_map(|f| f.parse().ok()).collect();
    let busy = [0, 1, 2, 5, 6, 7].iter().map(|i| v.get(*i).copied().unwrap_or(0)).fold(0u64, u64::saturating_add);
    Some(busy.saturating_mul(1_000_000_000 / hz.max(1)))
}

/// One `/proc/meminfo` value (`key` with its colon), in KiB.
pub(super) fn meminfo_kib(meminfo: &str, key: &str) -> Option<u64> {
    meminfo.lines().find_map(|l| l.strip_prefix(key)?.trim().strip_suffix("kB")?.trim().parse().ok())
}

/// MemTotal − MemFree − Inactive(file), in bytes.
fn working_set(meminfo: &str) -> Option<u64> {
    let kib = |key: &str| meminfo_kib(meminfo, key);
    let used = kib("MemTotal:")?.saturating_sub(kib("MemFree:")?);
    Some(used.saturating_sub(kib("Inactive(file):").unwrap_or(0)).saturating_mul(1024))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_node_is_read_from_proc() {
        let stat = "cpu  100 20 30 5000 40 5 6 7 8 9\ncpu0 50 10 15 2500 20 2 3 3 4 4\nintr 1\n";
        // user + nice + system + irq + softirq + steal = 100 + 20 + 30 + 5 + 6 + 7 ticks.
        assert_eq!(cpu_ns(stat, 100), Some(168 * 10_000_000));
        assert_eq!(cpu_ns("intr 1\n", 100), None);
        let meminfo =
            "MemTotal:       16000 kB\nMemFree:         4000 kB\nMemAvailable:    9000 kB\nInactive(file):  3000 kB\n";
        assert_eq!(working_set(meminfo), Some((16000 - 4000 - 3000) * 1024));
        assert_eq!(working_set("MemFree: 1 kB\n"), None);
        let r = node_reading().expect("this machine's /proc");
        assert!(r.cpu_ns > 0 && r.memory > 0 && r.at_ms > 1_700_000_000_000, "{r:?}");
    }
}
