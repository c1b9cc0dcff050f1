//! The whole summary for a made-up node, exactly: network from the scrape, disks from the
//! walks, kubelet's sums; and the query that asks for CPU and memory alone.

use super::*;
use crate::api::cadvisor::Labels;
use crate::api::usage::{Container, Reading};
use disks::{ImageFs, PodDisks, VolumeUse};

const AT: i64 = 1_700_000_124_000;

fn usage() -> Usage {
    let reading = Reading { cpu_ns: 5, memory: 7, at_ms: AT };
    Usage {
        node_name: "edge-1".into(),
        node: Some(reading),
        containers: vec![Container {
            namespace: "default".into(),
            pod: "web-edge-1".into(),
            pod_uid: "u1".into(),
            name: "app".into(),
            started: None,
            reading,
        }],
        error: false,
    }
}

fn iface(name: &str, rx: u64, tx: u64) -> Interface {
    Interface { name: name.into(), rx: [rx, 2, 3, 4], tx: [tx, 6, 7, 8] }
}

fn scrape() -> Scrape {
    let entry = |container: &str, id: &str, uid: &str| Entry {
        labels: Labels { container: container.into(), id: id.into(), ..Default::default() },
        pod_uid: uid.into(),
        at_ms: AT,
        ..Default::default()
    };
    Scrape {
        entries: vec![
            Entry { network: vec![iface("ens3", 100, 200)], ..entry("", "/", "") },
            Entry { network: vec![iface("lo", 1, 1), iface("eth0", 1000, 2000)], ..entry("", "/pod/sb", "u1") },
            Entry { fs: Some(("/var/lib/containerd".into(), 40960)), ..entry("app", "/pod/app", "u1") },
        ],
        ..Default::default()
    }
}

fn disks() -> Disks {
    let fs =
        |capacity: u64| Fs { capacity, available: capacity / 2, used: capacity / 4, inodes: 1000, inodes_free: 600 };
    let used = |bytes: u64, inodes: u64| Used { bytes, inodes, complete: true };
    Disks {
        at_ms: AT,
        node: Some(fs(1 << 30)),
        image: Some(ImageFs { used: 5 << 20, inodes_used: Some(300), at_ms: AT, fs: Some(fs(1 << 31)) }),
        mounts: vec![("/var/lib/containerd".into(), fs(1 << 31))],
        pods: vec![PodDisks {
            uid: "u1".into(),
            volumes: vec![
                VolumeUse { name: "cache".into(), used: used(8192, 3), fs: Some(fs(1 << 30)), ephemeral: true },
                VolumeUse { name: "creds".into(), used: used(4096, 2), fs: Some(fs(1 << 20)), ephemeral: false },
            ],
            logs: vec![("app".into(), used(12288, 2))],
            pod_logs: Some(used(0, 0)),
            etc_hosts: Some(used(4096, 1)),
        }],
    }
}

#[test]
fn the_summary_has_kubelets_network_and_disks() {
    let s = render(&usage(), &scrape(), &disks());
    let t = "2023-11-14T22:15:24Z";
    let node_fs = json!({"time": t, "availableBytes": 1u64 << 29, "capacityBytes": 1u64 << 30, "usedBytes": 1u64 << 28,
        "inodesFree": 600, "inodes": 1000, "inodesUsed": 400});
    let image = json!({"time": t, "availableBytes": 1u64 << 30, "capacityBytes": 1u64 << 31, "usedBytes": 5u64 << 20,
        "inodesFree": 600, "inodes": 1000, "inodesUsed": 300});
    let expected = json!({
        "node": {
            "nodeName": "edge-1",
            "cpu": {"time": t, "usageCoreNanoSeconds": 5},
            "memory": {"time": t, "workingSetBytes": 7},
            "network": {"time": t, "name": "", "interfaces": [
                {"name": "ens3", "rxBytes": 100, "rxErrors": 3, "txBytes": 200, "txErrors": 7}]},
            "fs": node_fs,
            "runtime": {"imageFs": image, "containerFs": image},
        },
        "pods": [{
            "podRef": {"name": "web-edge-1", "namespace": "default", "uid": "u1"},
            "cpu": {"time": t, "usageCoreNanoSeconds": 5},
            "memory": {"time": t, "workingSetBytes": 7},
            "network": {"time": t, "name": "eth0", "rxBytes": 1000, "rxErrors": 3, "txBytes": 2000, "txErrors": 7,
                "interfaces": [
                    {"name": "lo", "rxBytes": 1, "rxErrors": 3, "txBytes": 1, "txErrors": 7},
                    {"name": "eth0", "rxBytes": 1000, "rxErrors": 3, "txBytes": 2000, "txErrors": 7}]},
            "containers": [{
                "name": "app", "startTime": null,
                "cpu": {"time": t, "usageCoreNanoSeconds": 5},
                "memory": {"time": t, "workingSetBytes": 7},
                "rootfs": {"time": t, "availableBytes": 1u64 << 30, "capacityBytes": 1u64 << 31, "usedBytes": 40960,
                    "inodesFree": 600, "inodes": 1000},
                "logs": {"time": t, "availableBytes": 1u64 << 29, "capacityBytes": 1u64 << 30, "usedBytes": 12288,
                    "inodesFree": 600, "inodes": 1000, "inodesUsed": 2},
            }],
            "volume": [
                {"name": "cache", "time": t, "availableBytes": 1u64 << 29, "capacityBytes": 1u64 << 30,
                    "usedBytes": 8192, "inodesFree": 600, "inodes": 1000, "inodesUsed": 3},
                {"name": "creds", "time": t, "availableBytes": 1u64 << 19, "capacityBytes": 1u64 << 20,
                    "usedBytes": 4096, "inodesFree": 600, "inodes": 1000, "inodesUsed": 2},
            ],
            // rootfs 40960 + logs 12288 + the emptyDir 8192 + the hosts file 4096 (not the
            // memory-backed volume); inodes: logs 2 + cache 3 + hosts 1.
            "ephemeral-storage": {"time": t, "availableBytes": 1u64 << 29, "capacityBytes": 1u64 << 30,
                "usedBytes": 65536, "inodesFree": 600, "inodes": 1000, "inodesUsed": 6},
        }],
    });
    assert_eq!(s, expected, "{}", serde_json::to_string_pretty(&s).unwrap_or_default());
}

#[test]
fn missing_parts_are_left_out() {
    // A host-network pod (no interfaces in its sandbox), no disks read, the runtime silent.
    let mut sc = scrape();
    sc.entries[1].network.clear();
    sc.entries[2].fs = None;
    let s = render(&usage(), &sc, &Disks { at_ms: AT, ..Default::default() });
    for key in ["fs", "runtime"] {
        assert!(s["node"].get(key).is_none(), "{key}: {s}");
    }
    let pod = &s["pods"][0];
    for key in ["network", "volume", "ephemeral-storage"] {
        assert!(pod.get(key).is_none(), "{key}: {pod}");
    }
    assert!(pod["containers"][0].get("rootfs").is_none() && pod["containers"][0].get("logs").is_none());
    // Without eth0 the top names no interface, as kubelet's.
    assert_eq!(s["node"]["network"]["name"], "");
}

#[test]
fn only_cpu_and_memory_is_gos_parse_bool() {
    let table = [
        (None, false),
        (Some("true"), true),
        (Some("1"), true),
        (Some("t"), true),
        (Some("TRUE"), true),
        (Some("True"), true),
        (Some("false"), false),
        (Some(""), false),
        (Some("yes"), false),
        (Some("tRuE"), false),
    ];
    for (value, want) in table {
        assert_eq!(only_cpu_and_memory(value), want, "{value:?}");
    }
}
