//! kube-prometheus's kubelet ServiceMonitor against an atoll node: Debian's Prometheus scrapes
//! the kubelet server over HTTPS (a client certificate, as a standalone kubelet's server takes)
//! at the four paths the ServiceMonitor names (`/metrics`, `/metrics/cadvisor`,
//! `/metrics/probes`, `/metrics/slis`), with its `honor_labels`, cAdvisor's
//! `honor_timestamps: false` and its `metrics_path` label, all as job `kubelet`; every target
//! is up, and the kubernetes-mixin's recording rules and CPUThrottlingHigh's ratio, written
//! from their documented form, have a value for each running container. The mixin joins the
//! recorded series with kube-state-metrics' `kube_pod_info` for the node label; that half needs
//! kube-state-metrics and is left out, the cAdvisor half is what atoll answers for.
//! (Its own test binary: atoll removes every atoll-made sandbox it was not told to run.)

use crate::apiserver;
use crate::common;

use apiserver::Pki;
use common::kubelet_client::{request, As};
use common::prometheus::Prometheus;
use common::{eventually, free_port, testbed};
use std::time::Duration;

/// A busy container under a CPU limit of 100m (throttled most periods), an idle one beside
/// it, and a container whose child asks for 64 MiB under a 32 MiB limit every few seconds
/// (the kernel kills the child; the container lives on and counts the kills).
const PODS: &str = "apiVersion: v1
kind: Pod
metadata: {name: load}
spec:
  terminationGracePeriodSeconds: 1
  containers:
  - name: spin
    image: docker.io/library/busybox:1.36
    command: [sh, -c, 'while true; do :; done']
    resources:
      limits: {cpu: 100m}
  - name: idle
    image: docker.io/library/busybox:1.36
    command: [sh, -c, 'trap \"exit 0\" TERM; while true; do sleep 1; done']
    readinessProbe:
      exec: {command: ['true']}
      periodSeconds: 1
  - name: hog
    image: docker.io/library/busybox:1.36
    command: [sh, -c, 'trap \"exit 0\" TERM; while true; do dd if=/dev/zero of=/dev/null bs=64M count=1 2>/dev/null; sleep 2; done']
    resources:
      limits: {memory: 32Mi}
";

/// The mixin's recording rules' cAdvisor halves, and the throttling ratio of CPUThrottlingHigh.
const RULES: &str = r#"groups:
- name: k8s.rules
  rules:
  - record: namespace_pod_container:container_cpu_usage_seconds_total:sum_irate
    expr: sum by (cluster, namespace, pod, container) (irate(container_cpu_usage_seconds_total{job="kubelet", metrics_path="/metrics/cadvisor", image!=""}[5m]))
  - record: namespace_pod_container:container_memory_working_set_bytes
    expr: container_memory_working_set_bytes{job="kubelet", metrics_path="/metrics/cadvisor", image!=""}
  - record: namespace_pod_container:container_memory_rss
    expr: container_memory_rss{job="kubelet", metrics_path="/metrics/cadvisor", image!=""}
  - record: namespace_pod_container:container_memory_cache
    expr: container_memory_cache{job="kubelet", metrics_path="/metrics/cadvisor", image!=""}
  - record: namespace_pod_container:cpu_throttling:ratio
    expr: sum(increase(container_cpu_cfs_throttled_periods_total{container!="", job="kubelet", metrics_path="/metrics/cadvisor"}[5m])) without (id, metrics_path, name, image, endpoint, job, node) / on (cluster, namespace, pod, container, instance) group_left sum(increase(container_cpu_cfs_periods_total{job="kubelet", metrics_path="/metrics/cadvisor"}[5m])) without (id, metrics_path, name, image, endpoint, job, node)
"#;

/// One scrape job per ServiceMonitor endpoint, each relabelled to job `kubelet` and labelled
/// with its path, as the Prometheus Operator writes them.
fn scrape_config(pki: &Pki, port: u16) -> String {
    let mut out = "global: {scrape_interval: 1s, evaluation_interval: 1s}\nrule_files: [rules.yml]\nscrape_configs:\n"
        .to_string();
    for (i, path) in ["/metrics", "/metrics/cadvisor", "/metrics/probes", "/metrics/slis"].iter().enumerate() {
        let timestamps = if *path == "/metrics/cadvisor" { "  honor_timestamps: false\n" } else { "" };
        out.push_str(&format!(
            "- job_name: serviceMonitor/monitoring/kubelet/{i}\n  scheme: https\n  metrics_path: {path}\n  honor_labels: true\n{timestamps}  tls_config: {{ca_file: {ca}, cert_file: {cert}, key_file: {key}}}\n  static_configs: [{{targets: ['127.0.0.1:{port}'], labels: {{node: tb}}}}]\n  relabel_configs:\n  - {{target_label: job, replacement: kubelet}}\n  - {{source_labels: [__metrics_path__], target_label: metrics_path}}\n",
            ca = pki.ca.display(),
            cert = pki.dir.join("kubelet-client.crt").display(),
            key = pki.dir.join("kubelet-client.key").display(),
        ));
    }
    out
}

#[test]
fn the_kubelet_service_monitor_works_unchanged_against_atoll() {
    let _room = common::room(module_path!());
    let tb = testbed();
    let dir = crate::common::Scratch::new("kube-prometheus");
    let pki = Pki::new(&dir.join("pki"), "tb");
    std::fs::create_dir_all(dir.join("manifests")).unwrap();
    std::fs::write(dir.join("manifests/load.yaml"), PODS).unwrap();
    let port = free_port();
    let config = format!(
        "address: 127.0.0.1\nport: {port}\ntlsCertFile: {}\ntlsPrivateKeyFile: {}\nauthentication:\n  x509: {{clientCAFile: {}}}\nauthorization: {{mode: AlwaysAllow}}\n",
        pki.dir.join("server.crt").display(),
        pki.dir.join("server.key").display(),
        pki.ca.display()
    );
    let agent = common::Agent::start(tb, &dir, &config, &[], &[]);
    eventually(Duration::from_secs(60), "load running", || {
        agent.pod("load-tb").filter(|p| p["status"]["phase"] == "Running")
    });
    std::fs::write(dir.join("rules.yml"), RULES).unwrap();
    let prom = Prometheus::with_config(tb.var("ATOLL_TB_PROMETHEUS"), &dir, &scrape_config(&pki, port));
    let log = || std::fs::read_to_string(dir.join("prometheus.log")).unwrap_or_default();

    // Every target is up: TargetDown stays quiet.
    let up = eventually(Duration::from_secs(60), "four kubelet targets scraped", || {
        let up = prom.query("up{job=\"kubelet\"}");
        (up.len() == 4).then_some(up)
    });
    for (labels, v) in &up {
        assert_eq!(*v, 1.0, "{labels} down: {}", log());
    }

    // /metrics/probes: the idle container's readiness probe, counted and timed.
    let probes = "prober_probe_total{metrics_path=\"/metrics/probes\",container=\"idle\",probe_type=\"Readiness\",result=\"successful\"}";
    assert!(prom.value(probes) >= 1.0);
    assert!(prom.value("sum(prober_probe_duration_seconds_count{container=\"idle\"})") >= 1.0);
    // /metrics/slis: the health checks, once something asks /healthz (kubelet counts them then).
    let client = As::Certificate(&pki.dir.join("kubelet-client.crt"), &pki.dir.join("kubelet-client.key"));
    assert_eq!(request(port, &pki.ca, &client, "GET", "/healthz"), Some((200, "ok".into())));
    let check = "kubernetes_healthcheck{metrics_path=\"/metrics/slis\",name=\"syncloop\",type=\"healthz\"}";
    assert_eq!(prom.value(check), 1.0);
    assert!(prom.value("kubernetes_healthchecks_total{name=\"syncloop\",status=\"success\"}") >= 1.0);

    // Each running container has every recorded series, with its pod and namespace.
    for rule in [
        "namespace_pod_container:container_cpu_usage_seconds_total:sum_irate",
        "namespace_pod_container:container_memory_working_set_bytes",
        "namespace_pod_container:container_memory_rss",
        "namespace_pod_container:container_memory_cache",
    ] {
        let containers = eventually(Duration::from_secs(60), rule, || {
            let mut c: Vec<String> = prom
                .query(&format!("{rule}{{namespace=\"default\",pod=\"load-tb\"}}"))
                .iter()
                .filter_map(|(l, _)| l["container"].as_str().map(String::from))
                .collect();
            c.sort();
            (c.len() == 3).then_some(c)
        });
        assert_eq!(containers, ["hog", "idle", "spin"], "{rule}");
    }
    let spin_cpu =
        prom.value("namespace_pod_container:container_cpu_usage_seconds_total:sum_irate{container=\"spin\"}");
    assert!(spin_cpu > 0.02 && spin_cpu < 0.3, "spin runs at its 100m limit: {spin_cpu}");
    let ws = prom.value("namespace_pod_container:container_memory_working_set_bytes{container=\"idle\"}");
    assert!(ws > 0.0 && ws < 32e6, "{ws}");

    // CPUThrottlingHigh: the busy container is throttled in well over 25 % of its periods; the
    // ratio exists only for a container with a quota.
    let ratio = eventually(Duration::from_secs(60), "throttling ratio", || {
        let q = "namespace_pod_container:cpu_throttling:ratio{container=\"spin\"}";
        prom.query(q).first().map(|(_, v)| *v).filter(|v| v.is_finite())
    });
    assert!(ratio > 0.25, "CPUThrottlingHigh would fire: {ratio}");
    assert!(prom.query("namespace_pod_container:cpu_throttling:ratio{container=\"idle\"}").is_empty());

    // The hog's children are OOM-killed under its 32 MiB limit; it counts them and lives on.
    let ooms = eventually(Duration::from_secs(60), "OOM kills counted", || {
        let q = "container_oom_events_total{container=\"hog\",metrics_path=\"/metrics/cadvisor\"}";
        prom.query(q).first().map(|(_, v)| *v).filter(|v| *v >= 1.0)
    });
    assert!(ooms >= 1.0);
    assert_eq!(prom.value("container_spec_memory_limit_bytes{container=\"hog\"}"), 33554432.0);
    assert_eq!(prom.value("container_spec_cpu_quota{container=\"spin\"}"), 10000.0);

    // The pod's network (its sandbox, container "") and the machine.
    let rx = prom.query("container_network_receive_packets_total{pod=\"load-tb\",interface=\"eth0\"}");
    assert_eq!(rx.len(), 1, "{rx:?}");
    // An empty label is no label to Prometheus: the sandbox's series has none, and the pause image.
    assert!(rx[0].0["container"].is_null() && rx[0].0["image"].as_str().is_some_and(|i| i.contains("pause")), "{rx:?}");
    assert!(prom.value("machine_cpu_cores{job=\"kubelet\"}") >= 1.0);
    assert!(prom.value("machine_memory_bytes{job=\"kubelet\"}") > 1e8);
    assert!(prom.value("container_cpu_usage_seconds_total{id=\"/\"}") > 0.0);
    assert_eq!(prom.value("container_scrape_error{job=\"kubelet\"}"), 0.0);

    drop(prom);
    drop(agent);
    let _ = std::fs::remove_dir_all(&dir);
}
