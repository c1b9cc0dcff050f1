//! What `kubectl top` reads through metrics-server: `/metrics/resource` (Prometheus text with
//! kubelet's names, labels and millisecond timestamps) and `/stats/summary` (the CPU and memory
//! part of kubelet's Summary API, what `only_cpu_and_memory=true` returns). Containers come
//! from CRI `ListContainerStats` (for the pods atoll runs), pods are the sum of their
//! containers, the node comes from `/proc/stat` and `/proc/meminfo`; gathering them is
//! `api::usage::collect`, shared with the local API's metrics. Both renderings are pure.

pub use crate::api::usage::collect;
use crate::api::usage::{Container, Reading, Usage};
use std::fmt::Write as _;
use std::time::{Duration, SystemTime};

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

pub(super) fn time(ms: i64) -> String {
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
