//! `GET /metrics`: the Prometheus text of the node's pods and containers, the agent's own
//! counters (`crate::metrics`), per-container CPU and memory from the runtime (cAdvisor's
//! names), the runtime's images by state, and the process's RSS, CPU and start time.

use super::view::Api;
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

pub async fn metrics(api: &Api) -> String {
    use crate::metrics::{header, sample};
    let mut out = String::new();
    let pods = api.node.statuses().pods();
    header(&mut out, "atoll_pods", "gauge", "Pods by phase.");
    for phase in ["Pending", "Running", "Succeeded", "Failed", "Unknown"] {
        let n = pods.iter().filter(|(_, s)| s.as_ref().map_or("Pending", |s| s.phase.as_str()) == phase).count();
        sample(&mut out, "atoll_pods", &[("phase", phase)], n as f64);
    }
    header(&mut out, "atoll_containers", "gauge", "Containers by state.");
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
        sample(&mut out, "atoll_containers", &[("state", state)], n as f64);
    }
    header(&mut out, "atoll_container_restarts", "gauge", "Each container's restartCount.");
    for (p, c) in &all {
        let labels = [
            ("namespace", p.metadata.namespace.as_str()),
            ("pod", p.metadata.name.as_str()),
            ("container", c.name.as_str()),
        ];
        sample(&mut out, "atoll_container_restarts", &labels, c.restart_count as f64);
    }
    header(&mut out, "atoll_container_ready", "gauge", "Whether each container is ready (1) or not (0).");
    for (p, c) in &all {
        let labels = [
            ("namespace", p.metadata.namespace.as_str()),
            ("pod", p.metadata.name.as_str()),
            ("container", c.name.as_str()),
        ];
        sample(&mut out, "atoll_container_ready", &labels, if c.ready { 1.0 } else { 0.0 });
    }
    header(&mut out, "atoll_api_connections", "gauge", "Local API connections being served.");
    sample(&mut out, "atoll_api_connections", &[], api.open_connections() as f64);
    header(&mut out, "atoll_events_total", "counter", "Lifecycle events recorded.");
    sample(&mut out, "atoll_events_total", &[], api.node.events().total() as f64);
    let runtime_up = api.node.heartbeat().runtime_up();
    header(&mut out, "atoll_runtime_up", "gauge", "Whether the container runtime answered the last relist.");
    sample(&mut out, "atoll_runtime_up", &[], if runtime_up { 1.0 } else { 0.0 });
    crate::metrics::render_registry(&mut out);
    // Per-container usage from the runtime (kubelet's cAdvisor role), names as cAdvisor's.
    if let Ok(Ok(stats)) = smol::future::or(async { Ok(api.node.runtime().list_container_stats(None).await) }, async {
        smol::Timer::after(Duration::from_secs(5)).await;
        Err(())
    })
    .await
    {
        let by_uid: std::collections::HashMap<&str, &crate::pod::types::Pod> =
            pods.iter().map(|(p, _)| (p.metadata.uid.as_str(), &**p)).collect();
        let mut cpu = String::new();
        let mut mem = String::new();
        for st in &stats {
            let Some(attrs) = &st.attributes else { continue };
            let Some(pod) =
                attrs.labels.get(crate::runtime::sandbox::LABEL_POD_UID).and_then(|u| by_uid.get(u.as_str()))
            else {
                continue;
            };
            let name = attrs.metadata.as_ref().map(|m| m.name.as_str()).unwrap_or("");
            let labels = [
                ("namespace", pod.metadata.namespace.as_str()),
                ("pod", pod.metadata.name.as_str()),
                ("container", name),
            ];
            if let Some(c) = st.cpu.as_ref().and_then(|c| c.usage_core_nano_seconds.as_ref()) {
                sample(&mut cpu, "container_cpu_usage_seconds_total", &labels, c.value as f64 / 1e9);
            }
            if let Some(m) = st.memory.as_ref().and_then(|m| m.working_set_bytes.as_ref()) {
                sample(&mut mem, "container_memory_working_set_bytes", &labels, m.value as f64);
            }
        }
        header(
            &mut out,
            "container_cpu_usage_seconds_total",
            "counter",
            "Cumulative CPU time of each container (from CRI).",
        );
        out.push_str(&cpu);
        header(&mut out, "container_memory_working_set_bytes", "gauge", "Working set of each container (from CRI).");
        out.push_str(&mem);
    }
    // The runtime's images by state: in use by a container, kept (pinned, needed by a pod,
    // side-loaded), or collectable.
    if let Some(collector) = api.images.get() {
        let listed =
            smol::future::or(async { Some(collector.inventory(&api.node, api.node.runtime()).await) }, async {
                smol::Timer::after(Duration::from_secs(5)).await;
                None
            });
        if let Some(Ok(images)) = listed.await {
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
            header(&mut out, "atoll_images", "gauge", "The runtime's images by state (in_use, kept, unused).");
            for (state, (n, _)) in &by_state {
                sample(&mut out, "atoll_images", &[("state", state)], *n);
            }
            header(&mut out, "atoll_image_bytes", "gauge", "Bytes of the runtime's images by state.");
            for (state, (_, bytes)) in &by_state {
                sample(&mut out, "atoll_image_bytes", &[("state", state)], *bytes);
            }
        }
    }
    let (rss, cpu) = process_usage();
    header(&mut out, "process_resident_memory_bytes", "gauge", "The agent's resident memory.");
    sample(&mut out, "process_resident_memory_bytes", &[], rss);
    header(&mut out, "process_cpu_seconds_total", "counter", "The agent's CPU time (user and system).");
    sample(&mut out, "process_cpu_seconds_total", &[], cpu);
    header(&mut out, "process_start_time_seconds", "gauge", "When the agent started (Unix time).");
    let start = api.started_at.duration_since(SystemTime::UNIX_EPOCH).unwrap_or_default().as_secs();
    sample(&mut out, "process_start_time_seconds", &[], start as f64);
    out
}
