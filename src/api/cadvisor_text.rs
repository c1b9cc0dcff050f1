//! `/metrics/cadvisor`'s text: cAdvisor's metric names, types, units and labels (`container`,
//! `id`, `image`, `name`, `namespace`, `pod`, plus `cpu`, `device` or `interface`, sorted as
//! the Prometheus client sorts them), readings stamped with the time they were read in ms as
//! cAdvisor stamps them; limits, start times and machine facts without a stamp except the
//! machine's. Pure: a [`Scrape`] in, text out.

use super::{Entry, Scrape};
use std::fmt::Write as _;

/// A family's name, type and help line.
type Family = (&'static str, &'static str, &'static str);

const FAMILIES: &[Family] = &[
    ("container_cpu_usage_seconds_total", "counter", "Cumulative cpu time consumed in seconds."),
    ("container_cpu_user_seconds_total", "counter", "Cumulative user cpu time consumed in seconds."),
    ("container_cpu_system_seconds_total", "counter", "Cumulative system cpu time consumed in seconds."),
    ("container_cpu_cfs_periods_total", "counter", "Number of elapsed enforcement period intervals."),
    ("container_cpu_cfs_throttled_periods_total", "counter", "Number of throttled period intervals."),
    ("container_cpu_cfs_throttled_seconds_total", "counter", "Total time the container has been throttled."),
    ("container_memory_cache", "gauge", "Bytes of page cache memory."),
    ("container_memory_rss", "gauge", "Bytes of RSS (anonymous memory)."),
    ("container_memory_swap", "gauge", "Bytes of swap in use."),
    ("container_memory_failcnt", "counter", "Times memory usage hit the limit."),
    ("container_memory_usage_bytes", "gauge", "Bytes of memory in use, whenever it was last accessed."),
    ("container_memory_working_set_bytes", "gauge", "Bytes of the working set."),
    ("container_oom_events_total", "counter", "Out of memory kills in the container."),
    ("container_fs_usage_bytes", "gauge", "Bytes the container uses on the file system (its writable layer)."),
    ("container_fs_reads_bytes_total", "counter", "Cumulative bytes read, per block device."),
    ("container_fs_writes_bytes_total", "counter", "Cumulative bytes written, per block device."),
    ("container_fs_reads_total", "counter", "Cumulative reads completed, per block device."),
    ("container_fs_writes_total", "counter", "Cumulative writes completed, per block device."),
    ("container_network_receive_bytes_total", "counter", "Cumulative bytes received."),
    ("container_network_receive_packets_total", "counter", "Cumulative packets received."),
    ("container_network_receive_errors_total", "counter", "Cumulative errors while receiving."),
    ("container_network_receive_packets_dropped_total", "counter", "Cumulative packets dropped while receiving."),
    ("container_network_transmit_bytes_total", "counter", "Cumulative bytes transmitted."),
    ("container_network_transmit_packets_total", "counter", "Cumulative packets transmitted."),
    ("container_network_transmit_errors_total", "counter", "Cumulative errors while transmitting."),
    ("container_network_transmit_packets_dropped_total", "counter", "Cumulative packets dropped while transmitting."),
    ("container_last_seen", "gauge", "When the container was last seen by the exporter (Unix time)."),
    // The spec families (no time stamp).
    ("container_start_time_seconds", "gauge", "Start time of the container (Unix time)."),
    ("container_spec_cpu_period", "gauge", "CFS period of the container, in microseconds."),
    ("container_spec_cpu_quota", "gauge", "CFS quota of the container, in microseconds."),
    ("container_spec_cpu_shares", "gauge", "CPU shares of the container."),
    ("container_spec_memory_limit_bytes", "gauge", "Memory limit of the container (0: none)."),
];
/// The first spec family's index: families from here on carry no time stamp.
const SPEC: usize = 27;

/// One value of an entry: its family's index, the extra label, the value.
type Value = (usize, Option<(&'static str, String)>, f64);

/// Every value an entry shows, in family order.
fn values(e: &Entry, s: &Scrape) -> Vec<Value> {
    let mut out: Vec<Value> = Vec::new();
    let m = &e.sample;
    let secs = |ns: u64| ns as f64 / 1e9;
    let mut one = |family: usize, v: Option<f64>| {
        if let Some(v) = v {
            out.push((family, None, v));
        }
    };
    one(0, m.cpu_ns.filter(|n| *n > 0).map(secs));
    one(1, m.user_ns.map(secs));
    one(2, m.system_ns.map(secs));
    // The CFS series exist for a container under a quota, as cAdvisor's.
    let cfs = m.cfs.filter(|_| m.quota != 0);
    one(3, cfs.map(|c| c.0 as f64));
    one(4, cfs.map(|c| c.1 as f64));
    one(5, cfs.map(|c| secs(c.2)));
    for (i, v) in [m.cache, m.rss, m.swap, m.failcnt, m.memory, m.working_set, m.oom_kills].into_iter().enumerate() {
        one(6 + i, v.map(|v| v as f64));
    }
    let started = e.started;
    let (period, quota, shares, limit) = (m.period, m.quota, m.shares, m.memory_limit);
    if let Some((device, used)) = &e.fs {
        out.push((13, Some(("device", device.clone())), *used as f64));
    }
    for (dev, counts) in &m.io {
        let name = s.devices.iter().find(|(d, _)| d == dev).map_or("", |(_, n)| n.as_str());
        for (family, v) in (14..).zip(counts) {
            out.push((family, Some(("device", name.to_string())), *v as f64));
        }
    }
    for (k, pick) in [(18, 0), (19, 1), (20, 2), (21, 3)] {
        for i in &e.network {
            out.push((k, Some(("interface", i.name.clone())), i.rx.get(pick).copied().unwrap_or(0) as f64));
            out.push((k + 4, Some(("interface", i.name.clone())), i.tx.get(pick).copied().unwrap_or(0) as f64));
        }
    }
    out.push((26, None, (s.now_ms / 1000) as f64));
    let spec = [
        (27, started.map(|t| t as f64)),
        (28, period.map(|p| p as f64)),
        (29, (quota != 0).then_some(quota as f64)),
        (30, shares.map(|v| v as f64)),
        (31, limit.map(|l| l as f64)),
    ];
    // The root's limits are the machine's (`machine_*`), not a spec of its own.
    if e.labels.id != "/" {
        out.extend(spec.into_iter().filter_map(|(f, v)| Some((f, None, v?))));
    }
    out
}

/// A value as the Prometheus client writes it: whole numbers without a fraction.
fn number(v: f64) -> String {
    if v.fract() == 0.0 && v.abs() < 9.007_199_254_740_992e15 {
        format!("{}", v as i64)
    } else {
        format!("{v}")
    }
}

/// One sample line: the labels sorted by name, the extra one in its place.
fn line(out: &mut String, name: &str, labels: &[(&str, &str)], value: f64, at_ms: Option<i64>) {
    let mut sorted = labels.to_vec();
    sorted.sort_by_key(|(k, _)| *k);
    out.push_str(name);
    out.push('{');
    for (i, (k, v)) in sorted.iter().enumerate() {
        let comma = if i > 0 { "," } else { "" };
        let _ = write!(out, "{comma}{k}=\"{}\"", crate::metrics::escape(v));
    }
    out.push('}');
    let _ = match at_ms {
        Some(ms) => writeln!(out, " {} {ms}", number(value)),
        None => writeln!(out, " {}", number(value)),
    };
}

/// `/metrics/cadvisor`.
pub fn render(s: &Scrape) -> String {
    let mut out = String::with_capacity(256 * s.entries.len().max(1) * 8);
    let all: Vec<Vec<Value>> = s.entries.iter().map(|e| values(e, s)).collect();
    for (f, (name, kind, help)) in FAMILIES.iter().enumerate() {
        let _ = write!(out, "# HELP {name} {help}\n# TYPE {name} {kind}\n");
        for (e, vals) in s.entries.iter().zip(&all) {
            let l = &e.labels;
            let base = [
                ("container", l.container.as_str()),
                ("id", &l.id),
                ("image", &l.image),
                ("name", &l.name),
                ("namespace", &l.namespace),
                ("pod", &l.pod),
            ];
            for (_, extra, v) in vals.iter().filter(|(i, ..)| *i == f) {
                let mut labels = base.to_vec();
                // cAdvisor's total CPU carries `cpu="total"` (per-CPU series are off in kubelet).
                let cpu = (f == 0).then_some(("cpu", "total"));
                labels.extend(extra.as_ref().map(|(k, v)| (*k, v.as_str())).into_iter().chain(cpu));
                let at = (f < SPEC).then_some(if f == SPEC - 1 { s.now_ms } else { e.at_ms });
                line(&mut out, name, &labels, *v, at);
            }
        }
    }
    let m = &s.machine;
    let ids = [("boot_id", m.boot_id.as_str()), ("machine_id", &m.machine_id), ("system_uuid", &m.system_uuid)];
    for (name, help, v) in [
        ("machine_cpu_cores", "Number of logical CPU cores.", m.cores),
        ("machine_memory_bytes", "Bytes of memory installed on the machine.", m.memory),
    ] {
        let _ = write!(out, "# HELP {name} {help}\n# TYPE {name} gauge\n");
        line(&mut out, name, &ids, v as f64, Some(s.now_ms));
    }
    let name = "container_scrape_error";
    let _ = write!(out, "# HELP {name} Whether reading the containers failed (1) or not (0).\n# TYPE {name} gauge\n");
    let _ = writeln!(out, "{name} {}", u8::from(s.error));
    out
}
