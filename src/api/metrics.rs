//! `GET /metrics`: the Prometheus text of the node's pods and containers, the agent's own
//! counters (`crate::metrics`), per-container CPU and memory from the runtime (cAdvisor's
//! names), the runtime's images by state, and the process's RSS, CPU and start time.

use super::view::Api;
use crate::cri::RuntimeService;
use std::time::{Duration, SystemTime};

/// The process's resident memory and CPU time, from /proc/self.
fn process_usage() -> (f64, f64) {
    let rss = std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines().find(|l| l.starts_with("VmRSS:")).and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
        })
        .unwrap_or(0.0)
        * 1024.0;
    let cpu = std::fs::read_to_string("/proc/self/stat")
        .ok()
        .and_then(|s| {
            let after = s.get(s.rfind(')')? + 2..)?.split_whitespace().map(String::from).collect::<Vec<_>>();
            Some((after.get(11)?.parse::<f64>().ok()? + after.get(12)?.parse::<f64>().ok()?) / 100.0)
        })
        .unwrap_or(0.0);
    (rss, cpu)
}

/// `/metrics/probes` or `/metrics/slis`: the registry's series that path serves, the probes'
/// with the process's start time (kubelet registers it there too).
pub fn registry<RT: RuntimeService>(api: &Api<RT>, path: crate::metrics::Path) -> String {
    let mut out = String::new();
    crate::metrics::render_path(&mut out, path);
    if path == crate::metrics::Path::Probes {
        start_time(&mut out, api);
    }
    out
}

/// The node's pods as `(pod, its status if any)`.
type Pods = Vec<(std::sync::Arc<crate::pod::types::Pod>, Option<crate::pod::status::PodStatus>)>;

pub async fn metrics<RT: RuntimeService>(api: &Api<RT>) -> String {
    let mut out = String::new();
    let pods = api.node.statuses().pods();
    pods_and_containers(&mut out, &pods);
    agent(&mut out, api);
    crate::metrics::render_registry(&mut out);
    container_usage(&mut out, api).await;
    images(&mut out, api).await;
    process(&mut out, api);
    out
}

/// Pods by phase; containers by state, with each one's restarts and readiness.
fn pods_and_containers(out: &mut String, pods: &Pods) {
    use crate::metrics::{header, sample};
    header(out, "atoll_pods", "gauge", "Pods by phase.");
    for phase in ["Pending", "Running", "Succeeded", "Failed", "Unknown"] {
        let n = pods.iter().filter(|(_, s)| s.as_ref().map_or("Pending", |s| s.phase.as_str()) == phase).count();
        sample(out, "atoll_pods", &[("phase", phase)], n as f64);
    }
    header(out, "atoll_containers", "gauge", "Containers by state.");
    let all: Vec<(&crate::pod::types::Pod, &crate::pod::status::ContainerStatus)> = pods
        .iter()
        .filter_map(|(p, s)| s.as_ref().map(|s| (&**p, s)))
        .flat_map(|(p, s)| s.init_container_statuses.iter().chain(&s.container_statuses).map(move |c| (p, c)))
        .collect();
    for state in ["waiting", "running", "terminated"] {
        let n = all
            .iter()
            .filter(|(_, c)| match state {
                "waiting" => c.state.waiting.is_some(),
                "running" => c.state.running.is_some(),
                _ => c.state.terminated.is_some(),
            })
            .count();
        sample(out, "atoll_containers", &[("state", state)], n as f64);
    }
    type Value = fn(&crate::pod::status::ContainerStatus) -> f64;
    let per_container: [(&str, &str, Value); 2] = [
        ("atoll_container_restarts", "Each container's restartCount.", |c| c.restart_count as f64),
        ("atoll_container_ready", "Whether each container is ready (1) or not (0).", |c| f64::from(u8::from(c.ready))),
    ];
    for (name, help, value) in per_container {
        header(out, name, "gauge", help);
        for (p, c) in &all {
            let labels = [
                ("namespace", p.metadata.namespace.as_str()),
                ("pod", p.metadata.name.as_str()),
                ("container", c.name.as_str()),
            ];
            sample(out, name, &labels, value(c));
        }
    }
}

/// The agent's own gauges: API connections, events, the node's name (kubelet's), whether the
/// runtime answers.
fn agent<RT: RuntimeService>(out: &mut String, api: &Api<RT>) {
    use crate::metrics::{header, sample};
    header(out, "atoll_api_connections", "gauge", "Local API connections being served.");
    sample(out, "atoll_api_connections", &[], api.open_connections() as f64);
    header(out, "atoll_events_total", "counter", "Lifecycle events recorded.");
    sample(out, "atoll_events_total", &[], api.node.events().total() as f64);
    header(out, "kubelet_node_name", "gauge", "The node's name. The count is always 1.");
    sample(out, "kubelet_node_name", &[("node", &api.node.facts().name)], 1.0);
    let runtime_up = api.node.heartbeat().runtime_up();
    header(out, "atoll_runtime_up", "gauge", "Whether the container runtime answered the last relist.");
    sample(out, "atoll_runtime_up", &[], if runtime_up { 1.0 } else { 0.0 });
}

/// Per-container usage from the runtime (kubelet's cAdvisor role), names as cAdvisor's: the
/// readings kubelet's `/metrics/resource` shows.
async fn container_usage<RT: RuntimeService>(out: &mut String, api: &Api<RT>) {
    use crate::metrics::{header, sample};
    let usage = super::usage::collect(api).await;
    header(out, "container_cpu_usage_seconds_total", "counter", "Cumulative CPU time of each container (from CRI).");
    for c in &usage.containers {
        sample(
            out,
            "container_cpu_usage_seconds_total",
            &[("namespace", c.namespace.as_str()), ("pod", &c.pod), ("container", &c.name)],
            c.reading.cpu_ns as f64 / 1e9,
        );
    }
    header(out, "container_memory_working_set_bytes", "gauge", "Working set of each container (from CRI).");
    for c in &usage.containers {
        sample(
            out,
            "container_memory_working_set_bytes",
            &[("namespace", c.namespace.as_str()), ("pod", &c.pod), ("container", &c.name)],
            c.reading.memory as f64,
        );
    }
}

/// The runtime's images by state: in use by a container, kept (pinned, needed by a pod,
/// side-loaded), or collectable.
async fn images<RT: RuntimeService>(out: &mut String, api: &Api<RT>) {
    use crate::metrics::{header, sample};
    let Some(collector) = api.images.get() else { return };
    let listed = smol::future::or(async { Some(collector.inventory(&api.node, &api.runtime).await) }, async {
        smol::Timer::after(Duration::from_secs(5)).await;
        None
    });
    let Some(Ok(images)) = listed.await else { return };
    let mut by_state: std::collections::BTreeMap<&str, (f64, f64)> = Default::default();
    for i in &images {
        let state = if i.in_use {
            "in_use"
        } else if i.pinned.is_some() {
            "kept"
        } else {
            "unused"
        };
        let e = by_state.entry(state).or_default();
        e.0 += 1.0;
        e.1 += i.size as f64;
    }
    header(out, "atoll_images", "gauge", "The runtime's images by state (in_use, kept, unused).");
    for (state, (n, _)) in &by_state {
        sample(out, "atoll_images", &[("state", state)], *n);
    }
    header(out, "atoll_image_bytes", "gauge", "Bytes of the runtime's images by state.");
    for (state, (_, bytes)) in &by_state {
        sample(out, "atoll_image_bytes", &[("state", state)], *bytes);
    }
}

/// The agent's process: resident memory, CPU time, start time.
fn process<RT: RuntimeService>(out: &mut String, api: &Api<RT>) {
    use crate::metrics::{header, sample};
    let (rss, cpu) = process_usage();
    header(out, "process_resident_memory_bytes", "gauge", "The agent's resident memory.");
    sample(out, "process_resident_memory_bytes", &[], rss);
    header(out, "process_cpu_seconds_total", "counter", "The agent's CPU time (user and system).");
    sample(out, "process_cpu_seconds_total", &[], cpu);
    start_time(out, api);
}

fn start_time<RT: RuntimeService>(out: &mut String, api: &Api<RT>) {
    use crate::metrics::{header, sample};
    header(out, "process_start_time_seconds", "gauge", "When the agent started (Unix time).");
    let start = api.started_at.duration_since(SystemTime::UNIX_EPOCH).unwrap_or_default().as_secs();
    sample(out, "process_start_time_seconds", &[], start as f64);
}
