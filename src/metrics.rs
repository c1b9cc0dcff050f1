//! The agent's own counters, rendered in the Prometheus text format (0.0.4) at `/metrics`.
//!
//! A process-wide registry: the parts that count (CRI calls, probes, manifest sources) add to
//! it without carrying a handle; gauges that describe the current state (pods by phase,
//! containers by state, per-container CPU and memory, the agent's RSS) are computed by the
//! local API when it renders.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::Mutex;
use std::time::Duration;

/// A metric family's name, type and help line.
pub struct Family {
    pub name: &'static str,
    pub kind: &'static str,
    pub help: &'static str,
}

pub const CRI_CALLS: Family = Family {
    name: "atoll_cri_requests_total",
    kind: "counter",
    help: "CRI calls by method and result (ok or the gRPC code).",
};
pub const CRI_SECONDS: Family = Family {
    name: "atoll_cri_request_duration_seconds_sum",
    kind: "counter",
    help: "Time spent in CRI calls by method, in seconds (divide by atoll_cri_requests_total).",
};
pub const PROBES: Family = Family {
    name: "atoll_prober_probe_total",
    kind: "counter",
    help: "Probe attempts by probe type and result (successful, failed, unknown), as kubelet's prober_probe_total.",
};
pub const PROBE_SECONDS: Family = Family {
    name: "atoll_prober_probe_duration_seconds_sum",
    kind: "counter",
    help: "Time spent in probe attempts by probe type, in seconds.",
};
pub const SOURCE_ERRORS: Family =
    Family { name: "atoll_manifest_source_errors_total", kind: "counter", help: "Manifest source errors by source." };
pub const SIGNATURE_REFUSALS: Family = Family {
    name: "atoll_manifest_signature_refusals_total",
    kind: "counter",
    help: "Manifests refused for their signature (unsigned, untrusted key, altered, replayed older), by source.",
};
pub const ROLLBACKS: Family = Family {
    name: "atoll_pod_rollbacks_total",
    kind: "counter",
    help: "Changed pods rolled back to their previous version (not Ready in time, or restarting too often).",
};
pub const SOURCE_SUCCESS: Family = Family {
    name: "atoll_manifest_source_last_success_timestamp_seconds",
    kind: "gauge",
    help: "When each manifest source last delivered a good read (Unix time).",
};

pub const MIRROR_REQUESTS: Family = Family {
    name: "atoll_mirror_requests_total",
    kind: "counter",
    help: "Requests to the API server by verb and HTTP status (error when none came back).",
};
pub const MIRROR_SECONDS: Family = Family {
    name: "atoll_mirror_request_duration_seconds_sum",
    kind: "counter",
    help: "Time spent in API server requests by verb, in seconds.",
};

pub const IMAGE_IMPORTS: Family = Family {
    name: "atoll_image_imports_total",
    kind: "counter",
    help: "Tarballs from the images directory imported into the runtime, by result (imported, skipped as already there, failed).",
};
pub const IMAGE_IMPORT_BYTES: Family = Family {
    name: "atoll_image_import_bytes_total",
    kind: "counter",
    help: "Bytes of tarballs streamed into the runtime from the images directory.",
};

pub const IMAGE_COLLECTIONS: Family = Family {
    name: "atoll_image_garbage_collected_total",
    kind: "counter",
    help: "Images removed by atoll's image garbage collection (and prune), by result.",
};

pub const TUNNEL_SERVERS: Family = Family {
    name: "atoll_tunnel_servers",
    kind: "gauge",
    help: "konnectivity server instances the node's tunnel is connected to.",
};
pub const TUNNEL_CONNECTIONS: Family = Family {
    name: "atoll_tunnel_connections",
    kind: "gauge",
    help: "Connections open through the tunnel to the kubelet server.",
};
pub const TUNNEL_BYTES: Family = Family {
    name: "atoll_tunnel_bytes_total",
    kind: "counter",
    help: "Bytes carried through the tunnel, by direction (in: to the kubelet server).",
};
pub const TUNNEL_REFUSALS: Family = Family {
    name: "atoll_tunnel_dial_refusals_total",
    kind: "counter",
    help: "Dials a konnectivity server asked for that were refused (anything but the kubelet server).",
};
pub const TUNNEL_DROPPED: Family = Family {
    name: "atoll_tunnel_dropped_connections_total",
    kind: "counter",
    help: "Tunnelled connections closed because the kubelet server fell too far behind their data.",
};

type Labels = Vec<(&'static str, String)>;

#[derive(Default)]
struct Registry {
    values: BTreeMap<&'static str, BTreeMap<Labels, f64>>,
}

static REGISTRY: Mutex<Option<Registry>> = Mutex::new(None);

fn with<T>(f: impl FnOnce(&mut Registry) -> T) -> T {
    let mut guard = crate::locks::lock(&REGISTRY);
    f(guard.get_or_insert_with(Registry::default))
}

/// Adds `by` to a counter.
pub fn add(family: &Family, labels: &[(&'static str, &str)], by: f64) {
    let labels: Labels = labels.iter().map(|(k, v)| (*k, v.to_string())).collect();
    with(|r| *r.values.entry(family.name).or_default().entry(labels).or_default() += by);
}

/// Sets a gauge.
pub fn set(family: &Family, labels: &[(&'static str, &str)], value: f64) {
    let labels: Labels = labels.iter().map(|(k, v)| (*k, v.to_string())).collect();
    with(|r| r.values.entry(family.name).or_default().insert(labels, value));
}

/// Counts one CRI call.
pub fn cri_call(method: &str, result: &str, took: Duration) {
    add(&CRI_CALLS, &[("method", method), ("result", result)], 1.0);
    add(&CRI_SECONDS, &[("method", method)], took.as_secs_f64());
}

/// The value of a counter or gauge (0 if never set), for tests.
pub fn value(family: &Family, labels: &[(&'static str, &str)]) -> f64 {
    let labels: Labels = labels.iter().map(|(k, v)| (*k, v.to_string())).collect();
    with(|r| r.values.get(family.name).and_then(|m| m.get(&labels)).copied().unwrap_or(0.0))
}

const FAMILIES: &[&Family] = &[
    &CRI_CALLS,
    &CRI_SECONDS,
    &PROBES,
    &PROBE_SECONDS,
    &IMAGE_IMPORTS,
    &IMAGE_IMPORT_BYTES,
    &IMAGE_COLLECTIONS,
    &SOURCE_ERRORS,
    &SIGNATURE_REFUSALS,
    &ROLLBACKS,
    &SOURCE_SUCCESS,
    &MIRROR_REQUESTS,
    &MIRROR_SECONDS,
    &TUNNEL_SERVERS,
    &TUNNEL_CONNECTIONS,
    &TUNNEL_BYTES,
    &TUNNEL_REFUSALS,
    &TUNNEL_DROPPED,
];

/// Escapes a label value for the text format.
pub fn escape(v: &str) -> String {
    v.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n")
}

/// Writes one sample line.
pub fn sample(out: &mut String, name: &str, labels: &[(&str, &str)], value: f64) {
    out.push_str(name);
    if !labels.is_empty() {
        out.push('{');
        for (i, (k, v)) in labels.iter().enumerate() {
            if i > 0 {
                out.push(',');
            }
            let _ = write!(out, "{k}=\"{}\"", escape(v));
        }
        out.push('}');
    }
    let _ = writeln!(out, " {}", format_value(value));
}

fn format_value(v: f64) -> String {
    if v.is_finite() && v.fract() == 0.0 && v.abs() < 1e15 {
        format!("{}", v as i64)
    } else {
        format!("{v}")
    }
}

/// Writes a family's HELP and TYPE lines.
pub fn header(out: &mut String, name: &str, kind: &str, help: &str) {
    let _ = writeln!(out, "# HELP {name} {help}");
    let _ = writeln!(out, "# TYPE {name} {kind}");
}

/// The registry's families in the text format.
pub fn render_registry(out: &mut String) {
    let values = with(|r| r.values.clone());
    for f in FAMILIES {
        let Some(samples) = values.get(f.name) else { continue };
        header(out, f.name, f.kind, f.help);
        for (labels, v) in samples {
            let labels: Vec<(&str, &str)> = labels.iter().map(|(k, v)| (*k, v.as_str())).collect();
            sample(out, f.name, &labels, *v);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counters_render_in_the_text_format() {
        cri_call("TestMethod", "ok", Duration::from_millis(1500));
        cri_call("TestMethod", "ok", Duration::from_millis(500));
        assert_eq!(value(&CRI_CALLS, &[("method", "TestMethod"), ("result", "ok")]), 2.0);
        let mut out = String::new();
        render_registry(&mut out);
        assert!(out.contains("# TYPE atoll_cri_requests_total counter\n"), "{out}");
        assert!(out.contains("atoll_cri_requests_total{method=\"TestMethod\",result=\"ok\"} 2\n"), "{out}");
        assert!(out.contains("atoll_cri_request_duration_seconds_sum{method=\"TestMethod\"} 2\n"), "{out}");
        let mut line = String::new();
        sample(&mut line, "x", &[("a", "q\"uote\\n\n")], 0.25);
        assert_eq!(line, "x{a=\"q\\\"uote\\\\n\\n\"} 0.25\n");
    }
}
