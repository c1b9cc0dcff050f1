//! The registry's table tests: counters, histograms, each path's families, certificates.

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

#[test]
fn histograms_render_cumulative_buckets_with_kubelets_bounds() {
    cri_call("TestPodSandboxRun", "ok", Duration::from_millis(20));
    cri_call("TestPodSandboxRun", "DeadlineExceeded", Duration::from_secs(2));
    cri_call("TestPodSandboxRun", "ok", Duration::from_secs(1000));
    let mut out = String::new();
    render_registry(&mut out);
    let op = "operation_type=\"test_podsandbox_run\"";
    for line in [
        "# TYPE kubelet_runtime_operations_duration_seconds histogram\n".to_string(),
        format!("kubelet_runtime_operations_total{{{op}}} 3\n"),
        format!("kubelet_runtime_operations_errors_total{{{op}}} 1\n"),
        // 20 ms is in the third bucket, 2 s in the seventh; 1000 s only in +Inf.
        format!("kubelet_runtime_operations_duration_seconds_bucket{{{op},le=\"0.0125\"}} 0\n"),
        format!("kubelet_runtime_operations_duration_seconds_bucket{{{op},le=\"0.03125\"}} 1\n"),
        format!("kubelet_runtime_operations_duration_seconds_bucket{{{op},le=\"1.220703125\"}} 1\n"),
        format!("kubelet_runtime_operations_duration_seconds_bucket{{{op},le=\"3.0517578125\"}} 2\n"),
        format!("kubelet_runtime_operations_duration_seconds_bucket{{{op},le=\"745.0580596923828\"}} 2\n"),
        format!("kubelet_runtime_operations_duration_seconds_bucket{{{op},le=\"+Inf\"}} 3\n"),
        format!("kubelet_runtime_operations_duration_seconds_sum{{{op}}} 1002.02\n"),
        format!("kubelet_runtime_operations_duration_seconds_count{{{op}}} 3\n"),
    ] {
        assert!(out.contains(&line), "{line} in {out}");
    }
    // Go's ExponentialBuckets(.005, 2.5, 14), digit for digit.
    let les: Vec<String> = RUNTIME_BUCKETS.iter().map(|b| format_value(*b)).collect();
    assert_eq!(les.first().map(String::as_str), Some("0.005"));
    assert_eq!(les.get(12).map(String::as_str), Some("298.0232238769531"));
    // A bound is inclusive, as Prometheus's `le`.
    observe(&POD_START_SECONDS, &[("test", "le")], 0.5);
    let mut out = String::new();
    render_registry(&mut out);
    assert!(out.contains("kubelet_pod_start_duration_seconds_bucket{test=\"le\",le=\"0.5\"} 1\n"), "{out}");
}

#[test]
fn kubelets_operation_types() {
    for (method, op) in [
        ("RunPodSandbox", "run_podsandbox"),
        ("ListPodSandbox", "list_podsandbox"),
        ("PodSandboxStatus", "podsandbox_status"),
        ("ListPodSandboxStats", "list_podsandbox_stats"),
        ("CreateContainer", "create_container"),
        ("UpdateContainerResources", "update_container"),
        ("ExecSync", "exec_sync"),
        ("ImageFsInfo", "image_fs_info"),
        ("Version", "version"),
    ] {
        assert_eq!(operation_type(method), op);
    }
}

#[test]
fn each_path_serves_its_own_series() {
    add(&PROBE_RESULTS, &[("probe_type", "Liveness"), ("result", "failed"), ("pod_uid", "paths")], 1.0);
    observe(&PROBE_SECONDS_KUBELET, &[("probe_type", "Liveness"), ("pod", "paths")], 0.02);
    healthchecks(false);
    let render = |path| {
        let mut out = String::new();
        render_path(&mut out, path);
        out
    };
    let (main, probes, slis) = (render(Path::Main), render(Path::Probes), render(Path::Slis));
    assert!(!main.contains("prober_probe_total{") && !main.contains("kubernetes_healthcheck"), "{main}");
    assert!(
        probes.contains("prober_probe_total{probe_type=\"Liveness\",result=\"failed\",pod_uid=\"paths\"}"),
        "{probes}"
    );
    assert!(probes.contains("# TYPE prober_probe_duration_seconds histogram\n"), "{probes}");
    assert!(
        probes.contains("prober_probe_duration_seconds_bucket{probe_type=\"Liveness\",pod=\"paths\",le=\"0.025\"} 1\n")
    );
    assert!(!probes.contains("atoll_") && !slis.contains("prober_"), "{probes}{slis}");
    assert!(slis.contains("kubernetes_healthcheck{name=\"syncloop\",type=\"healthz\"} 0\n"), "{slis}");
    assert!(slis.contains("kubernetes_healthcheck{name=\"ping\",type=\"healthz\"} 1\n"), "{slis}");
    assert!(slis.contains("kubernetes_healthchecks_total{name=\"syncloop\",status=\"error\",type=\"healthz\"}"));
}

#[test]
fn a_removed_pods_probe_series_are_forgotten() {
    let labels = |uid| [("probe_type", "Readiness"), ("result", "successful"), ("pod_uid", uid)];
    add(&PROBE_RESULTS, &labels("forget-me"), 1.0);
    add(&PROBE_RESULTS, &labels("keep-me"), 1.0);
    forget_pod("forget-me", "default", "forget-me");
    assert_eq!(value(&PROBE_RESULTS, &labels("forget-me")), 0.0);
    assert_eq!(value(&PROBE_RESULTS, &labels("keep-me")), 1.0);
}

#[test]
fn a_removed_pods_probe_durations_are_forgotten_too() {
    let counted = |uid, pod| {
        [
            ("probe_type", "Startup"),
            ("result", "successful"),
            ("container", "c"),
            ("pod", pod),
            ("namespace", "ns"),
            ("pod_uid", uid),
        ]
    };
    let timed = |pod| [("probe_type", "Startup"), ("container", "c"), ("pod", pod), ("namespace", "ns")];
    for (uid, pod) in [("timed-gone", "gone"), ("timed-kept", "kept")] {
        add(&PROBE_RESULTS, &counted(uid, pod), 1.0);
        observe(&PROBE_SECONDS_KUBELET, &timed(pod), 0.2);
    }
    forget_pod("timed-gone", "ns", "gone");
    let mut probes = String::new();
    render_path(&mut probes, Path::Probes);
    assert!(!probes.contains("pod=\"gone\""), "{probes}");
    assert!(probes.contains("prober_probe_duration_seconds_count{probe_type=\"Startup\",container=\"c\",pod=\"kept\",namespace=\"ns\"} 1\n"), "{probes}");
}

#[test]
fn ttls_are_whole_seconds_left_cut_toward_zero() {
    for (end, now, want) in [
        (1000.0, 400.0, 600.0),
        (1000.0, 400.5, 599.0),
        (1000.9, 400.0, 600.0),
        (400.0, 1000.0, -600.0),
        (400.0, 1000.5, -600.0),
        (1000.0, 1000.0, 0.0),
        (f64::INFINITY, 1e9, f64::INFINITY),
    ] {
        assert_eq!(ttl(end, now), want, "{end} at {now}");
    }
    for (v, text) in [(f64::INFINITY, "+Inf"), (f64::NEG_INFINITY, "-Inf"), (-600.0, "-600"), (0.25, "0.25")] {
        assert_eq!(format_value(v), text);
    }
}

/// The certificates' TTLs at the scrape's time, their renewal errors at 0, and whether the
/// last reload read its configuration: on `/metrics` only, as kubelet has them.
#[test]
fn certificates_and_the_config_error_show_on_metrics() {
    let at = |s: u64| SystemTime::UNIX_EPOCH + Duration::from_secs(s);
    certificate(Certificate::Server, Some(at(2_000_000_000)));
    certificate(Certificate::Client, None);
    config_read(false);
    let render = |path, now| {
        let mut out = String::new();
        render_at(&mut out, path, now);
        out
    };
    let main = render(Path::Main, 1_999_000_000.5);
    for line in [
        "# TYPE kubelet_certificate_manager_server_ttl_seconds gauge\n",
        "kubelet_certificate_manager_server_ttl_seconds 999999\n",
        "kubelet_certificate_manager_client_ttl_seconds +Inf\n",
        "# TYPE kubelet_server_expiration_renew_errors counter\n",
        "kubelet_server_expiration_renew_errors 0\n",
        "kubelet_certificate_manager_client_expiration_renew_errors 0\n",
        "kubelet_node_config_error 1\n",
    ] {
        assert!(main.contains(line), "{line} in {main}");
    }
    assert!(render(Path::Main, 2_000_000_100.0).contains("kubelet_certificate_manager_server_ttl_seconds -100\n"));
    config_read(true);
    assert!(render(Path::Main, 0.0).contains("kubelet_node_config_error 0\n"));
    for path in [Path::Probes, Path::Slis] {
        assert!(!render(path, 0.0).contains("kubelet_"), "{path:?}");
    }
}
