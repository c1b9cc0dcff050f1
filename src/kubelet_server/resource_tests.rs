//! The readings' sources parsed, and both renderings, exactly.

use super::*;
use crate::api::usage::{Container, Reading, Usage};

fn container(pod: &str, name: &str, cpu_ns: u64, memory: u64) -> Container {
    Container {
        namespace: "default".into(),
        pod: pod.into(),
        pod_uid: format!("uid-{pod}"),
        name: name.into(),
        started: Some(1_700_000_000),
        reading: Reading { cpu_ns, memory, at_ms: 1_700_000_123_456 },
    }
}

fn usage() -> Usage {
    Usage {
        node_name: "edge-1".into(),
        node: Some(Reading { cpu_ns: 2_500_000_000_000, memory: 1 << 30, at_ms: 1_700_000_124_000 }),
        containers: vec![
            container("web-edge-1", "app", 1_500_000_000, 4096),
            container("web-edge-1", "sidecar", 500_000_000, 1024),
            container("db-edge-1", "db", 250_000_000, 2048),
        ],
        error: false,
    }
}

#[test]
fn metrics_resource_has_kubelets_names_labels_and_timestamps() {
    let text = prometheus(&usage());
    let expected = [
        "# HELP container_cpu_usage_seconds_total [STABLE] Cumulative cpu time consumed by the container in core-seconds",
        "# TYPE container_cpu_usage_seconds_total counter",
        r#"container_cpu_usage_seconds_total{container="app",namespace="default",pod="web-edge-1"} 1.5 1700000123456"#,
        r#"container_memory_working_set_bytes{container="sidecar",namespace="default",pod="web-edge-1"} 1024 1700000123456"#,
        r#"container_start_time_seconds{container="db",namespace="default",pod="db-edge-1"} 1700000000"#,
        "node_cpu_usage_seconds_total 2500 1700000124000",
        "node_memory_working_set_bytes 1073741824 1700000124000",
        r#"pod_cpu_usage_seconds_total{namespace="default",pod="web-edge-1"} 2 1700000123456"#,
        r#"pod_memory_working_set_bytes{namespace="default",pod="web-edge-1"} 5120 1700000123456"#,
        r#"pod_memory_working_set_bytes{namespace="default",pod="db-edge-1"} 2048 1700000123456"#,
        "resource_scrape_error 0",
    ];
    for line in expected {
        assert!(text.lines().any(|l| l == line), "{line}\nnot in\n{text}");
    }
    assert_eq!(text.lines().filter(|l| l.starts_with("pod_cpu_usage_seconds_total{")).count(), 2);
    let failed = prometheus(&Usage { error: true, containers: vec![], node: None, ..usage() });
    assert!(failed.lines().any(|l| l == "resource_scrape_error 1"), "{failed}");
    assert!(!failed.lines().any(|l| l.starts_with("node_cpu_usage_seconds_total ")), "no node, no sample");
}

#[test]
fn the_summary_is_what_metrics_server_reads() {
    let s = summary(&usage());
    assert_eq!(s["node"]["nodeName"], "edge-1");
    assert_eq!(s["node"]["cpu"]["usageCoreNanoSeconds"], 2_500_000_000_000u64);
    assert_eq!(s["node"]["memory"]["workingSetBytes"], 1u64 << 30);
    assert_eq!(s["node"]["cpu"]["time"], "2023-11-14T22:15:24Z");
    let pods = s["pods"].as_array().unwrap();
    assert_eq!(pods.len(), 2);
    assert_eq!(
        pods[0]["podRef"],
        serde_json::json!({"name": "web-edge-1", "namespace": "default", "uid": "uid-web-edge-1"})
    );
    assert_eq!(pods[0]["cpu"]["usageCoreNanoSeconds"], 2_000_000_000u64);
    assert_eq!(pods[0]["containers"][1]["name"], "sidecar");
    assert_eq!(pods[0]["containers"][1]["memory"]["workingSetBytes"], 1024);
    assert_eq!(pods[0]["containers"][0]["startTime"], "2023-11-14T22:13:20Z");
}
