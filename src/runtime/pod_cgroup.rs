//! A pod's own cgroup, for a pod with pod-level limits (`spec.resources.limits`). atoll leaves
//! a pod's cgroups to the runtime (an empty `cgroup_parent`) unless the pod sets pod-level
//! limits; then, as kubelet's pod cgroup does, `/atoll/pod<uid>` (cgroupfs layout, v1 or v2)
//! holds the pod's limits and bounds its containers: it is made before the sandbox, named as
//! the sandbox's (and so the containers') cgroup parent, and removed with the pod. The values
//! are pure functions (kubelet's ResourceConfigForPod and the v1 and v2 file formats); the
//! I/O is [`create`] and [`remove`].

use crate::cri::api::LinuxContainerResources;
use crate::pod::paths;
use crate::pod::types::Pod;
use std::path::Path;

/// Where the cgroup file systems are mounted.
pub const ROOT: &str = "/sys/fs/cgroup";

/// kubelet's CFS period, in microseconds.
const PERIOD: i64 = 100_000;

/// kubelet's MilliCPUToShares: at least 2, at most 262144 (saturating: quantities are input).
pub fn shares(milli: Option<i64>) -> i64 {
    milli.map_or(2, |m| (m.saturating_mul(1024) / 1000).clamp(2, 262_144))
}

/// kubelet's MilliCPUToQuota over a 100 ms period: at least 1 ms.
pub fn quota(milli: i64) -> i64 {
    (milli.saturating_mul(PERIOD) / 1000).max(1000)
}

/// The pod cgroup's settings, from its pod-level requests and limits: cpu shares, a CFS quota
/// (none: 0) and a memory limit in bytes (none: 0). `None`: the pod sets no cpu or memory
/// limit at pod level, and gets no cgroup of its own.
pub fn values(pod: &Pod) -> Option<LinuxContainerResources> {
    let r = pod.spec.resources.as_ref()?;
    let cpu = r.limits.get("cpu").map(|q| q.milli_value()).filter(|m| *m > 0);
    let memory = r.limits.get("memory").map(|q| q.value()).filter(|b| *b > 0);
    if cpu.is_none() && memory.is_none() {
        return None;
    }
    Some(LinuxContainerResources {
        cpu_shares: shares(r.requests.get("cpu").map(|q| q.milli_value())),
        cpu_period: PERIOD,
        cpu_quota: cpu.map_or(0, quota),
        memory_limit_in_bytes: memory.unwrap_or(0),
        ..Default::default()
    })
}

/// The pod cgroup's path, the sandbox's `cgroup_parent`: empty (the runtime's choice) for a pod
/// without pod-level limits.
pub fn parent(pod: &Pod) -> String {
    match values(pod) {
        Some(_) => format!("/atoll/pod{}", pod.metadata.uid),
        None => String::new(),
    }
}

/// The files of the pod cgroup and their contents, in the order they are written: for cgroup
/// v2 `(file, value)` in the pod's directory, for v1 `controller/file`.
pub fn files(v: &LinuxContainerResources, v2: bool) -> Vec<(&'static str, String)> {
    let unbounded = |n: i64| if n > 0 { n.to_string() } else { "max".to_string() };
    if v2 {
        // kubelet's CpuSharesToCpuWeight.
        let weight = 1 + (v.cpu_shares - 2).saturating_mul(9999) / 262_142;
        return vec![
            ("cpu.weight", weight.to_string()),
            ("cpu.max", format!("{} {}", unbounded(v.cpu_quota), v.cpu_period)),
            ("memory.max", unbounded(v.memory_limit_in_bytes)),
        ];
    }
    let v1 = |n: i64| if n > 0 { n.to_string() } else { "-1".to_string() };
    vec![
        ("cpu/cpu.shares", v.cpu_shares.to_string()),
        ("cpu/cpu.cfs_period_us", v.cpu_period.to_string()),
        ("cpu/cpu.cfs_quota_us", v1(v.cpu_quota)),
        ("memory/memory.limit_in_bytes", v1(v.memory_limit_in_bytes)),
    ]
}

/// Makes (or updates) `pod`'s cgroup under `root` when it has pod-level limits; anything made
/// is removed again if a step fails.
pub fn create(root: &Path, pod: &Pod) -> Result<(), String> {
    let Some(v) = values(pod) else { return Ok(()) };
    let made = write(root, &pod.metadata.uid, &v);
    if made.is_err() {
        let _ = remove(root, &pod.metadata.uid);
    }
    made
}

fn write(root: &Path, uid: &str, v: &LinuxContainerResources) -> Result<(), String> {
    let name = format!("pod{uid}");
    let shown = |p: &Path, e: std::io::Error| format!("pod cgroup {}: {e}", p.display());
    let v2 = root.join("cgroup.controllers").exists();
    if v2 {
        // Each level's subtree must offer cpu and memory for the level below to have them.
        let pod_dir = paths::under(root, &["atoll", &name]).map_err(|e| e.to_string())?;
        for (d, below) in [(root.to_path_buf(), root.join("atoll")), (root.join("atoll"), pod_dir)] {
            let at = d.join("cgroup.subtree_control");
            std::fs::write(&at, "+cpu +memory").map_err(|e| shown(&at, e))?;
            std::fs::create_dir_all(&below).map_err(|e| shown(&below, e))?;
        }
    }
    for (file, value) in files(v, v2) {
        let (controller, file) = file.split_once('/').unwrap_or(("", file));
        let dir = paths::under(&root.join(controller), &["atoll", &name]).map_err(|e| e.to_string())?;
        std::fs::create_dir_all(&dir).map_err(|e| shown(&dir, e))?;
        let at = dir.join(file);
        std::fs::write(&at, value).map_err(|e| shown(&at, e))?;
    }
    Ok(())
}

/// Removes the cgroup of pod `uid` from every hierarchy under `root` (the runtime makes it in
/// all of them for the containers inside), child cgroups first; nothing there is fine.
pub fn remove(root: &Path, uid: &str) -> Result<(), String> {
    let name = format!("pod{uid}");
    let mut bases = vec![root.to_path_buf()];
    if !root.join("cgroup.controllers").exists() {
        let Ok(entries) = std::fs::read_dir(root) else { return Ok(()) };
        bases = entries.flatten().filter(|e| e.file_type().is_ok_and(|t| t.is_dir())).map(|e| e.path()).collect();
    }
    for base in bases {
        let dir = paths::under(&base, &["atoll", &name]).map_err(|e| e.to_string())?;
        if dir.is_dir() {
            rmdir_tree(&dir, 3).map_err(|e| format!("removing the pod cgroup {}: {e}", dir.display()))?;
        }
    }
    Ok(())
}

/// `rmdir` of `dir` after its subdirectories (child cgroups), never a file, never a link.
fn rmdir_tree(dir: &Path, depth: u32) -> std::io::Result<()> {
    if depth > 0 {
        for e in std::fs::read_dir(dir)?.flatten() {
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                rmdir_tree(&e.path(), depth - 1)?;
            }
        }
    }
    std::fs::remove_dir(dir)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(resources: &str) -> Pod {
        let mut p: Pod = serde_json::from_str(&format!(
            r#"{{"metadata":{{"uid":"u-1"}},"spec":{{"resources":{resources},"containers":[{{"name":"c","image":"i"}}]}}}}"#
        ))
        .unwrap();
        crate::pod::defaults::apply(&mut p);
        p
    }

    #[test]
    fn the_pod_cgroup_follows_kubelets_formulas() {
        // (resources, shares, quota, memory, v2 cpu.weight, cpu.max, memory.max)
        for (resources, want, v2) in [
            (r#"{"limits":{"memory":"64Mi"}}"#, (2, 0, 67_108_864), ["1", "max 100000", "67108864"]),
            (r#"{"limits":{"cpu":"500m"}}"#, (512, 50_000, 0), ["20", "50000 100000", "max"]),
            (
                r#"{"limits":{"cpu":"2","memory":"1Gi"},"requests":{"cpu":"250m"}}"#,
                (256, 200_000, 1 << 30),
                ["10", "200000 100000", "1073741824"],
            ),
            (r#"{"limits":{"cpu":"1m"}}"#, (2, 1000, 0), ["1", "1000 100000", "max"]),
        ] {
            let p = pod(resources);
            let v = values(&p).unwrap();
            assert_eq!((v.cpu_shares, v.cpu_quota, v.memory_limit_in_bytes), want, "{resources}");
            assert_eq!(v.cpu_period, 100_000);
            let got: Vec<String> = files(&v, true).into_iter().map(|(_, s)| s).collect();
            assert_eq!(got, v2, "{resources}");
            assert_eq!(parent(&p), "/atoll/podu-1");
        }
        let v = values(&pod(r#"{"limits":{"memory":"64Mi"}}"#)).unwrap();
        assert_eq!(
            files(&v, false),
            [
                ("cpu/cpu.shares", "2".to_string()),
                ("cpu/cpu.cfs_period_us", "100000".to_string()),
                ("cpu/cpu.cfs_quota_us", "-1".to_string()),
                ("memory/memory.limit_in_bytes", "67108864".to_string()),
            ]
        );
        // Requests alone, or nothing at pod level: no cgroup of its own, as today.
        for resources in [r#"{"requests":{"cpu":"1"}}"#, r#"{}"#, "null"] {
            assert_eq!(values(&pod(resources)), None, "{resources}");
            assert_eq!(parent(&pod(resources)), "");
        }
    }

    #[test]
    fn a_v1_pod_cgroup_is_a_directory_per_controller() {
        let root = std::env::temp_dir().join(format!("atoll-cgroup-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        std::fs::create_dir_all(&root).unwrap();
        create(&root, &pod(r#"{"limits":{"memory":"64Mi","cpu":"1"}}"#)).unwrap();
        let read = |p: &str| std::fs::read_to_string(root.join(p)).unwrap();
        assert_eq!(read("memory/atoll/podu-1/memory.limit_in_bytes"), "67108864");
        assert_eq!(read("cpu/atoll/podu-1/cpu.cfs_quota_us"), "100000");
        assert_eq!(read("cpu/atoll/podu-1/cpu.shares"), "1024");
        // A UID that is no directory name makes nothing.
        let mut bad = pod(r#"{"limits":{"memory":"64Mi"}}"#);
        bad.metadata.uid = "../x".into();
        assert!(create(&root, &bad).is_err() && !root.join("memory/x").exists());
        let _ = std::fs::remove_dir_all(&root);
    }
}
