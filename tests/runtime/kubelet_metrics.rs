//! kubelet's metrics as the community's dashboards and alerts read them: Debian's Prometheus
//! scrapes a running atoll's read-only port and answers the queries those dashboards make
//! (`histogram_quantile` over the buckets, rates, sums by label) over kubelet's names.
//! (Its own test binary: atoll removes every atoll-made sandbox it was not told to run.)

use crate::common;

use common::prometheus::Prometheus;
use common::{eventually, free_port, testbed};
use std::path::Path;
use std::time::Duration;

/// A pod with an exec readiness probe every second (a steady stream of exec_sync calls).
const WEB: &str = "apiVersion: v1
kind: Pod
metadata: {name: web}
spec:
  hostNetwork: true
  terminationGracePeriodSeconds: 1
  containers:
  - name: app
    image: docker.io/library/busybox:1.36
    command: [sh, -c, 'trap \"exit 0\" TERM; while true; do sleep 1; done']
    readinessProbe:
      exec: {command: ['true']}
      periodSeconds: 1
";

/// A pod whose image the registry does not have: its pulls fail.
fn missing(registry: &str) -> String {
    format!(
        "apiVersion: v1
kind: Pod
metadata: {{name: missing}}
spec:
  hostNetwork: true
  terminationGracePeriodSeconds: 1
  containers:
  - name: app
    image: {registry}/absent/image:1
    imagePullPolicy: Always
"
    )
}

#[test]
fn prometheus_reads_kubelets_series_from_atoll() {
    let _room = common::room(module_path!());
    let tb = testbed();
    let dir = crate::common::Scratch::new("kubelet-metrics");
    std::fs::create_dir_all(dir.join("manifests")).unwrap();
    std::fs::write(dir.join("manifests/web.yaml"), WEB).unwrap();
    std::fs::write(dir.join("manifests/missing.yaml"), missing(tb.var("ATOLL_TB_REGISTRY"))).unwrap();
    let own = dir.join("atoll.yaml");
    std::fs::write(&own, "apiVersion: atoll.io/v1alpha1\nkind: AtollConfiguration\nrelistPeriod: 2s\n").unwrap();
    let read_only = free_port();
    let agent = common::Agent::start(
        tb,
        &dir,
        &format!("readOnlyPort: {read_only}\n"),
        &[&format!("--atoll-config={}", own.display())],
        &[],
    );
    eventually(Duration::from_secs(60), "web running and ready", || {
        agent.pod("web-tb").filter(|p| p["status"]["containerStatuses"][0]["ready"] == true)
    });
    eventually(Duration::from_secs(60), "a failed pull of the missing image", || {
        agent.pod("missing-tb").filter(|p| {
            let reason = p["status"]["containerStatuses"][0]["state"]["waiting"]["reason"].as_str().unwrap_or("");
            reason == "ErrImagePull" || reason == "ImagePullBackOff"
        })
    });

    // kubelet serves the probes' series on their own path, as the ServiceMonitor scrapes them.
    let config = format!(
        "global: {{scrape_interval: 1s, evaluation_interval: 1s}}\nscrape_configs:\n- job_name: kubelet\n  static_configs: [{{targets: ['127.0.0.1:{read_only}']}}]\n- job_name: kubelet-probes\n  metrics_path: /metrics/probes\n  static_configs: [{{targets: ['127.0.0.1:{read_only}']}}]\n"
    );
    let prom = Prometheus::with_config(tb.var("ATOLL_TB_PROMETHEUS"), &dir, &config);
    // The scrape works: the text parses as Prometheus reads it (a malformed line fails it).
    assert_eq!(prom.value("up{job=\"kubelet\"}"), 1.0, "{}", read(&dir.join("prometheus.log")));

    // The dashboard's "Running Kubelets" and "Running Pods"/"Running Containers".
    assert_eq!(prom.value("sum(kubelet_node_name{node=\"tb\"})"), 1.0);
    let ready_sandboxes: usize =
        ["web-tb", "missing-tb"].iter().map(|p| tb.sandboxes_of(p).iter().filter(|s| s.state == 0).count()).sum();
    assert_eq!(prom.value("kubelet_running_pods") as usize, ready_sandboxes);
    assert_eq!(prom.value("kubelet_running_containers{container_state=\"running\"}"), 1.0);
    assert_eq!(prom.value("count(kubelet_running_containers)"), 4.0, "the four CRI states, zeros included");

    // Operations by type, errors by type, and their latency quantiles from the buckets.
    for op in ["run_podsandbox", "create_container", "start_container", "pull_image", "exec_sync"] {
        let q = format!("sum(kubelet_runtime_operations_total{{operation_type=\"{op}\"}})");
        assert!(prom.value(&q) >= 1.0, "{q}");
    }
    assert!(prom.value("sum(kubelet_runtime_operations_errors_total{operation_type=\"pull_image\"})") >= 1.0);
    assert_eq!(prom.query("kubelet_runtime_operations_errors_total{operation_type=\"exec_sync\"}").len(), 0);
    // The exec probe runs every second, so the rate over the last seconds is not empty.
    let p99 = eventually(Duration::from_secs(60), "exec_sync latency", || {
        let q = "histogram_quantile(0.99, sum(rate(kubelet_runtime_operations_duration_seconds_bucket{operation_type=\"exec_sync\"}[10s])) by (le))";
        prom.query(q).first().map(|(_, v)| *v).filter(|v| v.is_finite())
    });
    assert!(p99 > 0.0 && p99 <= 7.62939453125, "an exec of `true` takes well under 7.6 s: {p99}");

    // Pod start: one pod reached Running (the other waits for its image).
    assert_eq!(prom.value("sum(kubelet_pod_start_duration_seconds_count)"), 1.0);
    let start = prom.value("histogram_quantile(0.5, sum(kubelet_pod_start_duration_seconds_bucket) by (le))");
    assert!(start > 0.0 && start <= 60.0, "web started within a minute: {start}");

    // Pod workers: one create per pod, then syncs.
    assert_eq!(prom.value("sum(kubelet_pod_worker_duration_seconds_count{operation_type=\"create\"})"), 2.0);
    assert!(prom.value("sum(kubelet_pod_worker_duration_seconds_count{operation_type=\"sync\"})") >= 1.0);
    let worker = prom.value(
        "histogram_quantile(0.99, sum(kubelet_pod_worker_duration_seconds_bucket{operation_type=\"create\"}) by (le))",
    );
    assert!(worker.is_finite() && worker > 0.0, "{worker}");

    // PLEG: relist latency under the alert's 10 s, relisted every 2 s (relistPeriod).
    let relist = prom.value("histogram_quantile(0.99, sum(kubelet_pleg_relist_duration_seconds_bucket) by (le))");
    assert!(relist > 0.0 && relist < 10.0, "{relist}");
    let interval = eventually(Duration::from_secs(60), "relist intervals", || {
        let q = "histogram_quantile(0.5, sum(kubelet_pleg_relist_interval_seconds_bucket) by (le))";
        prom.query(q).first().map(|(_, v)| *v).filter(|v| v.is_finite())
    });
    assert!((1.0..=2.5).contains(&interval), "relisted about every 2 s: {interval}");

    // Probes by pod, container, type and result.
    let probes = prom.query("prober_probe_total{probe_type=\"Readiness\",result=\"successful\"}");
    assert_eq!(probes.len(), 1, "{probes:?}");
    let (labels, n) = &probes[0];
    assert_eq!(
        (labels["pod"].as_str(), labels["container"].as_str(), labels["namespace"].as_str()),
        (Some("web-tb"), Some("app"), Some("default"))
    );
    assert!(labels["pod_uid"].as_str().is_some_and(|u| !u.is_empty()) && *n >= 1.0, "{labels}");
    assert_eq!(labels["job"].as_str(), Some("kubelet-probes"), "only on /metrics/probes, as kubelet");
    let took = prom.value("histogram_quantile(0.99, sum(prober_probe_duration_seconds_bucket{probe_type=\"Readiness\",pod=\"web-tb\",container=\"app\"}) by (le))");
    assert!(took > 0.0 && took <= 10.0, "an exec of `true` answers within the buckets: {took}");

    // The process, as kubelet's dashboard shows it.
    assert!(prom.value("process_resident_memory_bytes{job=\"kubelet\"}") > 1e6);
    assert!(prom.value("process_cpu_seconds_total{job=\"kubelet\"}") > 0.0);

    drop(prom);
    drop(agent);
    let _ = std::fs::remove_dir_all(&dir);
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_default()
}
