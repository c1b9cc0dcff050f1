//! The agent's own counters and histograms, rendered in the Prometheus text format (0.0.4):
//! atoll's (`atoll_*`) and, for the dashboards and alerts written for kubelet, the series
//! kubelet exports under its names, labels and bucket boundaries, each on kubelet's path
//! ([`Path`]): `kubelet_*` on `/metrics`, `prober_probe_*` on `/metrics/probes`,
//! `kubernetes_healthcheck*` on `/metrics/slis`. kubelet's certificate lifetimes are kept as
//! the certificates' ends ([`certificate`]) and shown as seconds left at each scrape.
//!
//! A process-wide registry: the parts that count (CRI calls, probes, manifest sources, the
//! relist, the pod workers) add to it without carrying a handle; gauges that describe the
//! current state (pods by phase, per-container CPU and memory, the agent's RSS) are computed by
//! the local API when it renders.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::Mutex;
use std::time::{Duration, SystemTime};

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
    help: "Dials a konnectivity server asked for that were refused, by reason: destination (anything but the kubelet server), limit (128 connections on the link or 256 on the node).",
};
pub const TUNNEL_DROPPED: Family = Family {
    name: "atoll_tunnel_dropped_connections_total",
    kind: "counter",
    help: "Tunnelled connections closed because the kubelet server fell too far behind their data.",
};

pub const LISTENER_PENDING: Family = Family {
    name: "atoll_listener_pending_connections",
    kind: "gauge",
    help: "Connections a listener holds before their request head (TLS first on the kubelet server).",
};
pub const LISTENER_SESSIONS: Family = Family {
    name: "atoll_listener_sessions",
    kind: "gauge",
    help: "Connections a listener serves past their request head.",
};
pub const LISTENER_CLOSED: Family = Family {
    name: "atoll_listener_closed_connections_total",
    kind: "counter",
    help: "Connections a listener closed by its budgets (reason: evicted, deadline, sessions_full).",
};

/// A histogram: its family (`kind` "histogram") and its buckets' upper bounds, as kubelet's.
pub struct Histogram {
    pub family: Family,
    pub buckets: &'static [f64],
}

/// The Prometheus client's default buckets (kubelet's `DefBuckets`).
const DEFAULT_BUCKETS: &[f64] = &[0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0];
/// kubelet's pod start buckets, half a second to an hour.
const POD_START_BUCKETS: &[f64] = &[
    0.5, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 8.0, 10.0, 20.0, 30.0, 45.0, 60.0, 120.0, 180.0, 240.0, 300.0, 360.0, 480.0,
    600.0, 900.0, 1200.0, 1800.0, 2700.0, 3600.0,
];
/// kubelet's runtime operation buckets: 14 from 5 ms, each 2.5 times the last (computed as
/// the Prometheus client computes them, so the `le` labels are the same digits).
const RUNTIME_BUCKETS: [f64; 14] = exponential(0.005, 2.5);

const fn exponential<const N: usize>(start: f64, factor: f64) -> [f64; N] {
    let mut out = [0.0; N];
    let (mut i, mut b) = (0, start);
    while i < N {
        out[i] = b;
        b *= factor;
        i += 1;
    }
    out
}

const fn kubelet(name: &'static str, kind: &'static str, help: &'static str) -> Family {
    Family { name, kind, help }
}
const fn histogram(name: &'static str, help: &'static str, buckets: &'static [f64]) -> Histogram {
    Histogram { family: kubelet(name, "histogram", help), buckets }
}

pub const RUNTIME_OPERATIONS: Family = kubelet(
    "kubelet_runtime_operations_total",
    "counter",
    "Cumulative number of runtime operations by operation type.",
);
pub const RUNTIME_ERRORS: Family = kubelet(
    "kubelet_runtime_operations_errors_total",
    "counter",
    "Cumulative number of runtime operation errors by operation type.",
);
pub const RUNTIME_SECONDS: Histogram = histogram(
    "kubelet_runtime_operations_duration_seconds",
    "Duration in seconds of runtime operations. Broken down by operation type.",
    &RUNTIME_BUCKETS,
);
pub const POD_START_SECONDS: Histogram = histogram(
    "kubelet_pod_start_duration_seconds",
    "Duration in seconds from kubelet seeing a pod for the first time to the pod starting to run",
    POD_START_BUCKETS,
);
pub const POD_WORKER_SECONDS: Histogram = histogram(
    "kubelet_pod_worker_duration_seconds",
    "Duration in seconds to sync a single pod. Broken down by operation type: create, update, or sync",
    DEFAULT_BUCKETS,
);
pub const RELIST_SECONDS: Histogram = histogram(
    "kubelet_pleg_relist_duration_seconds",
    "Duration in seconds for relisting pods in PLEG.",
    DEFAULT_BUCKETS,
);
pub const RELIST_INTERVAL: Histogram = histogram(
    "kubelet_pleg_relist_interval_seconds",
    "Interval in seconds between relisting in PLEG.",
    DEFAULT_BUCKETS,
);
pub const RUNNING_PODS: Family =
    kubelet("kubelet_running_pods", "gauge", "Number of pods that have a running pod sandbox");
pub const RUNNING_CONTAINERS: Family =
    kubelet("kubelet_running_containers", "gauge", "Number of containers currently running");
pub const PROBE_SECONDS_KUBELET: Histogram = histogram(
    "prober_probe_duration_seconds",
    "Duration in seconds of a probe's response (successful and unknown results).",
    DEFAULT_BUCKETS,
);
pub const HEALTHCHECK: Family =
    kubelet("kubernetes_healthcheck", "gauge", "The result of the last run of each health check (1 healthy, 0 not).");
pub const HEALTHCHECKS: Family =
    kubelet("kubernetes_healthchecks_total", "counter", "Runs of each health check by status (success, error).");
pub const PROBE_RESULTS: Family = kubelet(
    "prober_probe_total",
    "counter",
    "Cumulative number of a liveness, readiness or startup probe for a container by result.",
);

pub const CLIENT_TTL: Family = kubelet(
    "kubelet_certificate_manager_client_ttl_seconds",
    "gauge",
    "Seconds left before the client certificate atoll mirrors with expires (negative once expired; +Inf when the kubeconfig authenticates otherwise).",
);
pub const SERVER_TTL: Family = kubelet(
    "kubelet_certificate_manager_server_ttl_seconds",
    "gauge",
    "Seconds left before the kubelet server's serving certificate expires (negative once expired).",
);
pub const CLIENT_RENEW_ERRORS: Family = kubelet(
    "kubelet_certificate_manager_client_expiration_renew_errors",
    "counter",
    "Failed renewals of the client certificate (rotateCertificates).",
);
pub const SERVER_RENEW_ERRORS: Family = kubelet(
    "kubelet_server_expiration_renew_errors",
    "counter",
    "Failed renewals of the serving certificate (serverTLSBootstrap).",
);
pub const NODE_CONFIG_ERROR: Family = kubelet(
    "kubelet_node_config_error",
    "gauge",
    "1 while atoll runs on its previous configuration because the last reload (SIGHUP) could not read the new one, else 0.",
);

type Labels = Vec<(&'static str, String)>;

/// Every series by family name. A histogram's series carry one more label, `le`, holding the
/// bucket's index (`00`, `01`, ..., the +Inf bucket's after the bounds; not cumulative) or `sum`,
/// so that its samples sort in bucket order after their other labels.
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

/// Adds one observation to a histogram: one to the first bucket whose bound holds it, and the
/// value to the sum.
pub fn observe(h: &Histogram, labels: &[(&'static str, &str)], value: f64) {
    let bucket = h.buckets.iter().position(|b| value <= *b).unwrap_or(h.buckets.len());
    let bucket = format!("{bucket:02}");
    let mut labels = labels.to_vec();
    labels.push(("le", &bucket));
    add(&h.family, &labels, 1.0);
    labels.pop();
    labels.push(("le", "sum"));
    add(&h.family, &labels, value);
}

/// Drops every series of a pod: by its `pod_uid` label, or for a series without one (kubelet's
/// probe durations) by its `namespace` and `pod`. A removed pod's probes leave nothing, as
/// kubelet's probe workers delete theirs when they stop.
pub fn forget_pod(uid: &str, namespace: &str, name: &str) {
    let of_pod = |labels: &Labels| {
        let get = |key: &str| labels.iter().find(|(k, _)| *k == key).map(|(_, v)| v.as_str());
        match get("pod_uid") {
            Some(u) => u == uid,
            None => get("namespace") == Some(namespace) && get("pod") == Some(name),
        }
    };
    // Rebuilt rather than `retain`ed: the map's removal code would cost more bytes than the
    // rare removal of a pod costs time.
    with(|r| {
        for m in r.values.values_mut() {
            let mut kept = BTreeMap::new();
            for (l, v) in std::mem::take(m) {
                if !of_pod(&l) {
                    kept.insert(l, v);
                }
            }
            *m = kept;
        }
    });
}

/// Counts one CRI call, as atoll's and as kubelet's runtime operation.
pub fn cri_call(method: &str, result: &str, took: Duration) {
    add(&CRI_CALLS, &[("method", method), ("result", result)], 1.0);
    add(&CRI_SECONDS, &[("method", method)], took.as_secs_f64());
    let op = operation_type(method);
    add(&RUNTIME_OPERATIONS, &[("operation_type", &op)], 1.0);
    if result != "ok" {
        add(&RUNTIME_ERRORS, &[("operation_type", &op)], 1.0);
    }
    observe(&RUNTIME_SECONDS, &[("operation_type", &op)], took.as_secs_f64());
}

/// kubelet's `operation_type` for a CRI method: its name in snake case, a pod sandbox as one
/// word (`RunPodSandbox`: `run_podsandbox`), `UpdateContainerResources` as `update_container`.
pub fn operation_type(method: &str) -> String {
    if method == "UpdateContainerResources" {
        return "update_container".to_string();
    }
    let mut out = String::with_capacity(method.len() + 4);
    for (i, c) in method.char_indices() {
        if c.is_ascii_uppercase() && i > 0 && !method.get(..i).is_some_and(|head| head.ends_with("Pod")) {
            out.push('_');
        }
        out.push(c.to_ascii_lowercase());
    }
    out
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
    &LISTENER_PENDING,
    &LISTENER_SESSIONS,
    &LISTENER_CLOSED,
    &RUNTIME_OPERATIONS,
    &RUNTIME_ERRORS,
    &RUNNING_PODS,
    &RUNNING_CONTAINERS,
    &CLIENT_TTL,
    &CLIENT_RENEW_ERRORS,
    &SERVER_TTL,
    &SERVER_RENEW_ERRORS,
    &NODE_CONFIG_ERROR,
];

/// What `/metrics/probes` serves, as kubelet serves it there and only there.
const PROBE_FAMILIES: &[&Family] = &[&PROBE_RESULTS];
/// What `/metrics/slis` serves.
const SLI_FAMILIES: &[&Family] = &[&HEALTHCHECK, &HEALTHCHECKS];

const HISTOGRAMS: &[&Histogram] =
    &[&RUNTIME_SECONDS, &POD_START_SECONDS, &POD_WORKER_SECONDS, &RELIST_SECONDS, &RELIST_INTERVAL];

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
    if v.is_infinite() {
        return if v > 0.0 { "+Inf" } else { "-Inf" }.to_string();
    }
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

/// Which of the registry's series a path serves.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Path {
    /// `/metrics`: atoll's own and kubelet's.
    Main,
    /// `/metrics/probes`: the probes' results and durations.
    Probes,
    /// `/metrics/slis`: the health checks.
    Slis,
}

/// The registry's families in the text format (`/metrics`).
pub fn render_registry(out: &mut String) {
    render_path(out, Path::Main);
}

/// The registry's families a path serves, in the text format.
pub fn render_path(out: &mut String, path: Path) {
    render_at(out, path, seconds(SystemTime::now()));
}

/// [`render_path`] at `now` (seconds since the epoch), when the certificates' TTLs are taken.
fn render_at(out: &mut String, path: Path, now: f64) {
    let values = with(|r| r.values.clone());
    let (families, histograms): (&[&Family], &[&Histogram]) = match path {
        Path::Main => (FAMILIES, HISTOGRAMS),
        Path::Probes => (PROBE_FAMILIES, &[&PROBE_SECONDS_KUBELET]),
        Path::Slis => (SLI_FAMILIES, &[]),
    };
    for f in families {
        let Some(samples) = values.get(f.name) else { continue };
        header(out, f.name, f.kind, f.help);
        let ends = f.name == CLIENT_TTL.name || f.name == SERVER_TTL.name;
        for (labels, v) in samples {
            let labels: Vec<(&str, &str)> = labels.iter().map(|(k, v)| (*k, v.as_str())).collect();
            sample(out, f.name, &labels, if ends { ttl(*v, now) } else { *v });
        }
    }
    for h in histograms {
        if let Some(samples) = values.get(h.family.name) {
            render_histogram(out, h, samples);
        }
    }
}

/// Records one run of the node's health checks as kubelet's `/healthz` does (`ping`, and
/// `syncloop`: whether the sync loop runs), for `/metrics/slis`.
pub fn healthchecks(syncloop_ok: bool) {
    for (name, ok) in [("ping", true), ("syncloop", syncloop_ok)] {
        let status = if ok { "success" } else { "error" };
        set(&HEALTHCHECK, &[("name", name), ("type", "healthz")], f64::from(u8::from(ok)));
        add(&HEALTHCHECKS, &[("name", name), ("status", status), ("type", "healthz")], 1.0);
    }
}

/// A certificate whose lifetime kubelet reports.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Certificate {
    /// The client certificate of the kubeconfig the mirror talks to the API server with.
    Client,
    /// The kubelet server's serving certificate (`tlsCertFile`, or the self-signed one).
    Server,
}

/// Records the certificate in use: when it ends (`None`: the kubeconfig uses no client
/// certificate, which kubelet reports as +Inf). Its renewal errors are shown from then on.
pub fn certificate(which: Certificate, not_after: Option<SystemTime>) {
    let (ends, errors) = match which {
        Certificate::Client => (&CLIENT_TTL, &CLIENT_RENEW_ERRORS),
        Certificate::Server => (&SERVER_TTL, &SERVER_RENEW_ERRORS),
    };
    set(ends, &[], not_after.map_or(f64::INFINITY, seconds));
    add(errors, &[], 0.0);
}

/// A renewal of the certificate failed.
pub fn renewal_failed(which: Certificate) {
    add(if which == Certificate::Client { &CLIENT_RENEW_ERRORS } else { &SERVER_RENEW_ERRORS }, &[], 1.0);
}

/// kubelet's TTL of a certificate that ends at `end`: the whole seconds left at `now`, cut
/// toward zero (negative once it has expired); +Inf stays +Inf.
pub fn ttl(end: f64, now: f64) -> f64 {
    (end - now).trunc()
}

/// Whether the configuration atoll runs on is the one it was last asked to read (`false`: a
/// reload failed and the previous one goes on): `kubelet_node_config_error`, 0 or 1.
pub fn config_read(ok: bool) {
    set(&NODE_CONFIG_ERROR, &[], if ok { 0.0 } else { 1.0 });
}

/// Seconds since the epoch (negative before it).
fn seconds(t: SystemTime) -> f64 {
    match t.duration_since(SystemTime::UNIX_EPOCH) {
        Ok(d) => d.as_secs_f64(),
        Err(e) => -e.duration().as_secs_f64(),
    }
}

/// A histogram's samples as Prometheus shows them: per series, every bucket with its bound and
/// cumulative count, then `_sum` and `_count`.
fn render_histogram(out: &mut String, h: &Histogram, samples: &BTreeMap<Labels, f64>) {
    let f = &h.family;
    header(out, f.name, f.kind, f.help);
    let (bucket, sum, count) = (format!("{}_bucket", f.name), format!("{}_sum", f.name), format!("{}_count", f.name));
    let les: Vec<String> = h.buckets.iter().map(|b| format_value(*b)).chain(["+Inf".to_string()]).collect();
    let mut samples = samples.iter().peekable();
    while let Some(&(first, _)) = samples.peek() {
        let series = &first[..first.len().saturating_sub(1)];
        let mut counts = vec![0.0; les.len()];
        let mut total = 0.0;
        while let Some((labels, v)) = samples.next_if(|(l, _)| l.len() == first.len() && l.starts_with(series)) {
            match labels.last().map(|(_, i)| i.parse::<usize>()) {
                Some(Ok(i)) => counts.get_mut(i).into_iter().for_each(|c| *c += v),
                _ => total += v,
            }
        }
        let mut labels: Vec<(&str, &str)> = series.iter().map(|(k, v)| (*k, v.as_str())).collect();
        let mut seen = 0.0;
        for (n, le) in counts.iter().zip(&les) {
            seen += n;
            labels.push(("le", le));
            sample(out, &bucket, &labels, seen);
            labels.pop();
        }
        sample(out, &sum, &labels, total);
        sample(out, &count, &labels, seen);
    }
}

#[cfg(test)]
#[path = "metrics_tests.rs"]
mod tests;
