//! What `kubectl top` reads through metrics-server: `/metrics/resource` (Prometheus text with
//! kubelet's names, labels and millisecond timestamps) and `/stats/summary` (the CPU and memory
//! part of kubelet's Summary API, what `only_cpu_and_memory=true` returns). Containers come
//! from CRI `ListContainerStats` (for the pods atoll runs), pods are the sum of their
//! containers, the node comes from `/proc/stat` and `/proc/meminfo` (working set: used memory
//! less the inactive file cache, as cAdvisor counts it). Gathering is `collect`; both
//! renderings are pure.

use crate::api::Api;
use crate::cri::RuntimeService;
use std::fmt::Write as _;
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
    let node = smol::unblock(node_reading).await;
    Usage { node_name: api.node.facts().name.clone(), node, containers, error }
}

/// The node's CPU (all CPUs' busy time in `/proc/stat`) and working set (`/proc/meminfo`).
fn node_reading() -> Option<Reading> {
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

/// MemTotal − MemFree − Inactive(file), in bytes.
fn working_set(meminfo: &str) -> Option<u64> {
    let kib = |key: &str| {
        meminfo.lines().find_map(|l| l.strip_prefix(key)?.trim().strip_suffix("kB")?.trim().parse::<u64>().ok())
    };
    let used = kib("MemTotal:")?.saturating_sub(kib("MemFree:")?);
    Some(used.saturating_sub(kib("Inactive(file):").unwrap_or(0)).saturating_mul(1024))
}

/// Each pod's sum of its containers, in the containers' order.
fn pods(containers: &[Container]) -> Vec<(&Container, Reading)> {
    let mut out: Vec<(&Container, Reading)> = Vec::new();
    for c in containers {
        match out.last_mut() {
            Some((first, sum)) if first.pod_uid == c.pod_uid => {
                sum.cpu_ns = sum.cpu_ns.saturating_add(c.reading.cpu_ns);
                sum.memory = sum.memory.saturating_add(c.reading.memory);
                sum.at_ms = sum.at_ms.max(c.reading.at_ms);
            }
            _ => out.push((c, c.reading)),
        }
    }
    out
}

fn family(out: &mut String, name: &str, kind: &str, help: &str) {
    let _ = write!(out, "# HELP {name} [STABLE] {help}\n# TYPE {name} {kind}\n");
}

fn line(out: &mut String, name: &str, labels: &[(&str, &str)], value: f64, at_ms: Option<i64>) {
    out.push_str(name);
    if !labels.is_empty() {
        let shown: Vec<String> = labels.iter().map(|(k, v)| format!("{k}=\"{}\"", crate::metrics::escape(v))).collect();
        let _ = write!(out, "{{{}}}", shown.join(","));
    }
    let _ = match at_ms {
        Some(ms) => writeln!(out, " {value} {ms}"),
        None => writeln!(out, " {value}"),
    };
}

/// `/metrics/resource`, as kubelet writes it.
pub fn prometheus(u: &Usage) -> String {
    let mut out = String::new();
    let labels =
        |c: &Container| [("container", c.name.clone()), ("namespace", c.namespace.clone()), ("pod", c.pod.clone())];
    type Pick = fn(&Reading) -> f64;
    let cpu: Pick = |r| r.cpu_ns as f64 / 1e9;
    let mem: Pick = |r| r.memory as f64;
    let per_container: [(&str, &str, &str, Pick); 2] = [
        (
            "container_cpu_usage_seconds_total",
            "counter",
            "Cumulative cpu time consumed by the container in core-seconds",
            cpu,
        ),
        ("container_memory_working_set_bytes", "gauge", "Current working set of the container in bytes", mem),
    ];
    for (name, kind, help, pick) in per_container {
        family(&mut out, name, kind, help);
        for c in &u.containers {
            let l = labels(c);
            let l: Vec<(&str, &str)> = l.iter().map(|(k, v)| (*k, v.as_str())).collect();
            line(&mut out, name, &l, pick(&c.reading), Some(c.reading.at_ms));
        }
    }
    family(
        &mut out,
        "container_start_time_seconds",
        "gauge",
        "Start time of the container since unix epoch in seconds",
    );
    for c in u.containers.iter().filter(|c| c.started.is_some()) {
        let l = labels(c);
        let l: Vec<(&str, &str)> = l.iter().map(|(k, v)| (*k, v.as_str())).collect();
        line(&mut out, "container_start_time_seconds", &l, c.started.unwrap_or(0) as f64, None);
    }
    let per_node: [(&str, &str, &str, Pick); 2] = [
        ("node_cpu_usage_seconds_total", "counter", "Cumulative cpu time consumed by the node in core-seconds", cpu),
        ("node_memory_working_set_bytes", "gauge", "Current working set of the node in bytes", mem),
    ];
    for (name, kind, help, pick) in per_node {
        family(&mut out, name, kind, help);
        if let Some(n) = &u.node {
            line(&mut out, name, &[], pick(n), Some(n.at_ms));
        }
    }
    let pods = pods(&u.containers);
    let per_pod: [(&str, &str, &str, Pick); 2] = [
        ("pod_cpu_usage_seconds_total", "counter", "Cumulative cpu time consumed by the pod in core-seconds", cpu),
        ("pod_memory_working_set_bytes", "gauge", "Current working set of the pod in bytes", mem),
    ];
    for (name, kind, help, pick) in per_pod {
        family(&mut out, name, kind, help);
        for (c, sum) in &pods {
            line(&mut out, name, &[("namespace", &c.namespace), ("pod", &c.pod)], pick(sum), Some(sum.at_ms));
        }
    }
    let error = f64::from(u8::from(u.error));
    family(
        &mut out,
        "resource_scrape_error",
        "gauge",
        "1 if there was an error while getting container metrics, 0 otherwise",
    );
    line(&mut out, "resource_scrape_error", &[], error, None);
    out
}

fn time(ms: i64) -> String {
    let t = SystemTime::UNIX_EPOCH + Duration::from_millis(u64::try_from(ms).unwrap_or(0));
    crate::rfc3339::format_seconds(t)
}

fn stats(r: &Reading) -> (serde_json::Value, serde_json::Value) {
    (
        serde_json::json!({"time": time(r.at_ms), "usageCoreNanoSeconds": r.cpu_ns}),
        serde_json::json!({"time": time(r.at_ms), "workingSetBytes": r.memory}),
    )
}

/// `/stats/summary`: the node's and each pod's CPU and memory, with each container's.
pub fn summary(u: &Usage) -> serde_json::Value {
    let mut node = serde_json::json!({"nodeName": u.node_name});
    if let Some(r) = &u.node {
        let (cpu, memory) = stats(r);
        node["cpu"] = cpu;
        node["memory"] = memory;
    }
    let pods: Vec<serde_json::Value> = pods(&u.containers)
        .into_iter()
        .map(|(first, sum)| {
            let containers: Vec<serde_json::Value> = u
                .containers
                .iter()
                .filter(|c| c.pod_uid == first.pod_uid)
                .map(|c| {
                    let (cpu, memory) = stats(&c.reading);
                    let start = c.started.map(|s| time(i64::try_from(s.saturating_mul(1000)).unwrap_or(0)));
                    serde_json::json!({"name": c.name, "startTime": start, "cpu": cpu, "memory": memory})
                })
                .collect();
            let (cpu, memory) = stats(&sum);
            serde_json::json!({
                "podRef": {"name": first.pod, "namespace": first.namespace, "uid": first.pod_uid},
                "containers": containers, "cpu": cpu, "memory": memory,
            })
        })
        .collect();
    serde_json::json!({"node": node, "pods": pods})
}

#[cfg(test)]
#[path = "resource_tests.rs"]
mod tests;
