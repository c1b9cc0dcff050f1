//! `/metrics/cadvisor`'s text from a made-up scrape: cAdvisor's names, label order, stamps and
//! the series that exist only under a condition (CFS only under a quota, network only where
//! read), plus the sysfs CPU list.

use super::*;

fn scrape() -> Scrape {
    let sample = Sample {
        cpu_ns: Some(1_500_000_000),
        user_ns: Some(1_000_000_000),
        system_ns: Some(500_000_000),
        cfs: Some((10, 4, 250_000_000)),
        memory: Some(4096),
        working_set: Some(2048),
        rss: Some(1024),
        cache: Some(3072),
        swap: Some(0),
        failcnt: Some(1),
        oom_kills: Some(2),
        quota: 10_000,
        period: Some(100_000),
        shares: Some(102),
        memory_limit: Some(33_554_432),
        io: vec![("8:0".into(), [11, 22, 3, 4]), ("9:9".into(), [1, 1, 1, 1])],
    };
    let labels = |container: &str, id: &str| Labels {
        container: container.into(),
        id: id.into(),
        image: "docker.io/library/busybox:1.36".into(),
        name: id.trim_start_matches("/k8s.io/").into(),
        namespace: "default".into(),
        pod: "web-n\"1".into(),
    };
    let app = Entry {
        labels: labels("app", "/k8s.io/c1"),
        pod_uid: "u1".into(),
        sample,
        fs: Some(("/var/lib/containerd".into(), 8192)),
        network: Vec::new(),
        started: Some(1_700_000_000),
        at_ms: 1_700_000_123_456,
    };
    let sandbox = Entry {
        labels: Labels { container: String::new(), ..labels("", "/k8s.io/s1") },
        pod_uid: "u1".into(),
        sample: Sample { cpu_ns: Some(0), memory: Some(100), quota: 0, cfs: Some((5, 0, 0)), ..Default::default() },
        network: vec![Interface { name: "eth0".into(), rx: [1, 2, 3, 4], tx: [5, 6, 7, 8] }],
        at_ms: 1_700_000_123_457,
        ..Default::default()
    };
    let root = Entry {
        labels: Labels { id: "/".into(), ..Default::default() },
        sample: Sample { cpu_ns: Some(9_000_000_000), memory: Some(1), memory_limit: None, ..Default::default() },
        at_ms: 1_700_000_123_400,
        ..Default::default()
    };
    Scrape {
        entries: vec![root, sandbox, app],
        machine: Machine {
            cores: 4,
            memory: 1 << 30,
            boot_id: "b".into(),
            machine_id: "m".into(),
            system_uuid: String::new(),
        },
        devices: vec![("8:0".into(), "/dev/sda".into())],
        now_ms: 1_700_000_124_000,
        error: false,
    }
}

#[test]
fn series_carry_cadvisors_names_labels_and_stamps() {
    let text = render(&scrape());
    let c1 = "container=\"app\",id=\"/k8s.io/c1\",image=\"docker.io/library/busybox:1.36\",name=\"c1\",namespace=\"default\",pod=\"web-n\\\"1\"";
    let cpu = "container=\"app\",cpu=\"total\",id=\"/k8s.io/c1\",image=\"docker.io/library/busybox:1.36\",name=\"c1\",namespace=\"default\",pod=\"web-n\\\"1\"";
    for line in [
        "# TYPE container_cpu_usage_seconds_total counter\n".to_string(),
        format!("container_cpu_usage_seconds_total{{{cpu}}} 1.5 1700000123456\n"),
        format!("container_cpu_user_seconds_total{{{c1}}} 1 1700000123456\n"),
        format!("container_cpu_cfs_periods_total{{{c1}}} 10 1700000123456\n"),
        format!("container_cpu_cfs_throttled_periods_total{{{c1}}} 4 1700000123456\n"),
        format!("container_cpu_cfs_throttled_seconds_total{{{c1}}} 0.25 1700000123456\n"),
        format!("container_memory_working_set_bytes{{{c1}}} 2048 1700000123456\n"),
        format!("container_memory_rss{{{c1}}} 1024 1700000123456\n"),
        format!("container_memory_cache{{{c1}}} 3072 1700000123456\n"),
        format!("container_memory_failcnt{{{c1}}} 1 1700000123456\n"),
        format!("container_oom_events_total{{{c1}}} 2 1700000123456\n"),
        "# TYPE container_memory_working_set_bytes gauge\n".to_string(),
        format!("container_spec_cpu_quota{{{c1}}} 10000\n"),
        format!("container_spec_cpu_period{{{c1}}} 100000\n"),
        format!("container_spec_cpu_shares{{{c1}}} 102\n"),
        format!("container_spec_memory_limit_bytes{{{c1}}} 33554432\n"),
        format!("container_start_time_seconds{{{c1}}} 1700000000\n"),
        format!("container_last_seen{{{c1}}} 1700000124 1700000124000\n"),
        "machine_cpu_cores{boot_id=\"b\",machine_id=\"m\",system_uuid=\"\"} 4 1700000124000\n".to_string(),
        "machine_memory_bytes{boot_id=\"b\",machine_id=\"m\",system_uuid=\"\"} 1073741824 1700000124000\n".to_string(),
        "container_scrape_error 0\n".to_string(),
    ] {
        assert!(text.contains(&line), "{line} in\n{text}");
    }
    let with = |label: &str| c1.replacen(",id=", &format!(",{label},id="), 1);
    assert!(text.contains(&format!("container_fs_usage_bytes{{{}}} 8192 ", with("device=\"/var/lib/containerd\""))));
    assert!(text.contains(&format!("container_fs_reads_bytes_total{{{}}} 11 ", with("device=\"/dev/sda\""))));
    assert!(text.contains(&format!("container_fs_writes_bytes_total{{{}}} 22 ", with("device=\"/dev/sda\""))));
    assert!(text.contains(&format!("container_fs_reads_total{{{}}} 3 ", with("device=\"/dev/sda\""))));
    assert!(text.contains(&format!("container_fs_writes_total{{{}}} 4 ", with("device=\"/dev/sda\""))));
    assert!(text.contains(&format!("container_fs_reads_total{{{}}} 1 ", with("device=\"\""))), "no name: \"\"");
    // The sandbox: network per interface, no CFS series without a quota, no CPU total of 0.
    let s1 = "container=\"\",id=\"/k8s.io/s1\",image=\"docker.io/library/busybox:1.36\",interface=\"eth0\",name=\"s1\"";
    for (family, v) in [
        ("receive_bytes", 1),
        ("receive_packets", 2),
        ("receive_errors", 3),
        ("receive_packets_dropped", 4),
        ("transmit_bytes", 5),
        ("transmit_packets", 6),
        ("transmit_errors", 7),
        ("transmit_packets_dropped", 8),
    ] {
        let line = format!(
            "container_network_{family}_total{{{s1},namespace=\"default\",pod=\"web-n\\\"1\"}} {v} 1700000123457\n"
        );
        assert!(text.contains(&line), "{line} in\n{text}");
    }
    assert!(!text.contains("container_cpu_cfs_periods_total{container=\"\",id=\"/k8s.io/s1\""), "{text}");
    assert!(!text.contains("container_cpu_usage_seconds_total{container=\"\",cpu=\"total\",id=\"/k8s.io/s1\""));
    // The root: readings, no spec of its own.
    let root = "container=\"\",cpu=\"total\",id=\"/\",image=\"\",name=\"\",namespace=\"\",pod=\"\"";
    assert!(text.contains(&format!("container_cpu_usage_seconds_total{{{root}}} 9 1700000123400\n")), "{text}");
    assert!(!text.contains("container_spec_memory_limit_bytes{container=\"\",id=\"/\""), "{text}");
    // Every family once, HELP before TYPE, every sample under its own family.
    let mut family = "";
    for l in text.lines() {
        if let Some(rest) = l.strip_prefix("# TYPE ") {
            family = rest.split(' ').next().unwrap_or("");
        } else if !l.starts_with('#') {
            assert!(l.starts_with(family), "{l} under {family}");
        }
    }
    assert_eq!(text.matches("# TYPE container_memory_rss ").count(), 1);
}

#[test]
fn an_unlimited_container_shows_a_zero_limit_and_no_quota() {
    let mut s = scrape();
    if let Some(e) = s.entries.get_mut(2) {
        e.sample.quota = 0;
        e.sample.memory_limit = Some(0);
    }
    let text = render(&s);
    assert!(text.contains("container_spec_memory_limit_bytes{container=\"app\",id=\"/k8s.io/c1\""), "{text}");
    assert!(text
        .lines()
        .any(|l| l.starts_with("container_spec_memory_limit_bytes{container=\"app\"") && l.ends_with(" 0")));
    assert!(!text.contains("container_spec_cpu_quota{container=\"app\""));
    assert!(!text.contains("container_cpu_cfs_periods_total{container=\"app\""));
    s.error = true;
    assert!(render(&s).contains("container_scrape_error 1\n"));
}

#[test]
fn sysfs_cpu_lists_count_cpus() {
    for (list, n) in [("0-3", 4), ("0", 1), ("0-3,6,8-9", 7), ("", 0), ("3-1", 0), ("x", 0)] {
        assert_eq!(online_cpus(list), n, "{list:?}");
    }
}

#[test]
fn a_runtimes_verbose_info_gives_the_pid_and_image() {
    let info = |t: &str| HashMap::from([("info".to_string(), t.to_string())]);
    assert_eq!(
        verbose_info(&info(r#"{"pid": 42, "image": "registry.k8s.io/pause:3.10"}"#)),
        Some((42, "registry.k8s.io/pause:3.10".into()))
    );
    assert_eq!(verbose_info(&info(r#"{"pid": 42}"#)), Some((42, String::new())));
    for bad in [r#"{"pid": 0}"#, r#"{"pid": -1}"#, r#"{"pid": 99999999999}"#, "not json", r#"{"pid": "42"}"#] {
        assert_eq!(verbose_info(&info(bad)), None, "{bad}");
    }
    assert_eq!(verbose_info(&HashMap::new()), None);
}
