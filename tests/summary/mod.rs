//! `/stats/summary` whole, as kubelet fills it, checked on a real pod through the kubelet
//! server: a pod in its own network namespace that pings its gateway, writes 512 KiB into its
//! writable layer and 1 MiB into an emptyDir (with a symlink to `/` beside it, which the walk
//! must not follow), and logs a line. metrics-server's `only_cpu_and_memory=true` gets none of it.

use super::common::eventually;
use serde_json::Value;
use std::time::Duration;

/// The pod (`disk-tb`), pinging `gateway` so its eth0 has received something.
pub fn disk_pod(gateway: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata: {{name: disk}}\nspec:\n  terminationGracePeriodSeconds: 1\n  volumes:\n  - {{name: scratch, emptyDir: {{}}}}\n  containers:\n  - name: w\n    image: docker.io/library/busybox:1.36\n    volumeMounts: [{{name: scratch, mountPath: /scratch}}]\n    command: [sh, -c, 'head -c 1048576 /dev/urandom > /scratch/blob; ln -s / /scratch/root; dd if=/dev/urandom of=/layer bs=1024 count=512 2>/dev/null; echo written; trap \"exit 0\" TERM; while true; do ping -c 1 -W 1 {gateway} >/dev/null; sleep 1; done']\n"
    )
}

type Get<'a> = &'a dyn Fn(&str) -> Option<(u16, String)>;

fn summary(get: Get, path: &str) -> Value {
    let (status, body) = get(path).expect("an answer");
    assert_eq!(status, 200, "{body}");
    serde_json::from_str(&body).unwrap()
}

fn pod<'a>(s: &'a Value, name: &str) -> Option<&'a Value> {
    s["pods"].as_array()?.iter().find(|p| p["podRef"]["name"] == name)
}

fn n(v: &Value) -> u64 {
    v.as_u64().unwrap_or_default()
}

pub fn check(get: Get) {
    // Once containerd has measured the writable layer (it does every few seconds).
    let s = eventually(Duration::from_secs(90), "disk's writable layer and network in the summary", || {
        let s = summary(get, "/stats/summary");
        let p = pod(&s, "disk-tb")?;
        (n(&p["containers"][0]["rootfs"]["usedBytes"]) >= 512 << 10 && n(&p["network"]["rxBytes"]) > 0)
            .then(|| s.clone())
    });
    let node = &s["node"];
    let fs = &node["fs"];
    assert!(n(&fs["capacityBytes"]) > 0 && n(&fs["availableBytes"]) <= n(&fs["capacityBytes"]), "{fs}");
    assert!(n(&fs["usedBytes"]) > 0 && n(&fs["inodes"]) > 0 && n(&fs["inodesUsed"]) > 0, "{fs}");
    let image = &node["runtime"]["imageFs"];
    assert!(n(&image["usedBytes"]) > 1 << 20, "busybox and pause at least: {image}");
    assert!(n(&image["capacityBytes"]) > n(&image["usedBytes"]), "{image}");
    assert_eq!(node["runtime"]["containerFs"], *image, "one file system, as kubelet's CRI stats show it");
    assert!(node["network"]["interfaces"].as_array().is_some_and(|i| !i.is_empty()), "the host's: {node}");

    let p = pod(&s, "disk-tb").unwrap();
    let net = &p["network"];
    assert_eq!(net["name"], "eth0", "{net}");
    assert!(n(&net["txBytes"]) > 0 && net["time"].as_str().is_some_and(|t| t.ends_with('Z')), "{net}");
    assert!(net["interfaces"].as_array().unwrap().iter().any(|i| i["name"] == "eth0"), "{net}");
    let c = &p["containers"][0];
    assert_eq!(c["name"], "w");
    let rootfs = &c["rootfs"];
    assert!(n(&rootfs["capacityBytes"]) > 0 && n(&rootfs["usedBytes"]) < 64 << 20, "{rootfs}");
    let logs = &c["logs"];
    assert!(n(&logs["usedBytes"]) > 0 && n(&logs["inodesUsed"]) >= 1, "{logs}");
    assert_eq!(logs["capacityBytes"], fs["capacityBytes"], "logs live on the node's file system");
    let volumes = p["volume"].as_array().expect("volumes");
    let scratch = volumes.iter().find(|v| v["name"] == "scratch").expect("the emptyDir");
    // The directory, the blob and the link itself: `/` behind the link is not walked.
    assert_eq!(n(&scratch["inodesUsed"]), 3, "{scratch}");
    assert!((1 << 20..4 << 20).contains(&n(&scratch["usedBytes"])), "{scratch}");
    let eph = &p["ephemeral-storage"];
    let parts = n(&rootfs["usedBytes"]) + n(&logs["usedBytes"]) + n(&scratch["usedBytes"]);
    assert!(n(&eph["usedBytes"]) >= parts && n(&eph["capacityBytes"]) > 0, "{eph} < {parts}");
    // A host-network pod's sandbox is in the host's network namespace: its network is the
    // host's interfaces, as cAdvisor reads every sandbox's.
    let names = |v: &Value| -> Vec<String> {
        let list = v["network"]["interfaces"].as_array().cloned().unwrap_or_default();
        list.iter().filter_map(|i| i["name"].as_str().map(String::from)).collect()
    };
    let web = pod(&s, "web-tb").expect("web in the summary");
    assert!(web["containers"][0].get("logs").is_some(), "{web}");
    assert_eq!(names(web), names(node), "{web}");

    let only = summary(get, "/stats/summary?only_cpu_and_memory=true");
    assert!(only["node"].get("fs").is_none() && only["node"].get("network").is_none(), "{only}");
    let p = pod(&only, "disk-tb").expect("disk");
    for key in ["network", "volume", "ephemeral-storage"] {
        assert!(p.get(key).is_none(), "{key}: {p}");
    }
    assert!(p["containers"][0].get("rootfs").is_none() && n(&p["containers"][0]["memory"]["workingSetBytes"]) > 0);
}
