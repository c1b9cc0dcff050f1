//! Pod-level resources end to end, against the real private containerd: a pod whose
//! `spec.resources.limits.memory` is set gets its own cgroup (`/atoll/pod<uid>`), its
//! container (with no limit of its own) runs inside it and is bounded by the pod's limit, the
//! container sees that limit through the downward API, and the cgroup goes with the pod.

use crate::common;

use common::{eventually, testbed, Agent};
use std::path::{Path, PathBuf};
use std::time::Duration;

const UID: &str = "7f3e9a10-pod-level-test";

const POD: &str = "apiVersion: v1
kind: Pod
metadata: {name: bounded, uid: 7f3e9a10-pod-level-test}
spec:
  hostNetwork: true
  terminationGracePeriodSeconds: 0
  resources: {limits: {memory: 96Mi}}
  containers:
  - name: c
    image: docker.io/library/busybox:1.36
    command: [sleep, '3600']
    env:
    - {name: MEM_LIMIT, valueFrom: {resourceFieldRef: {resource: limits.memory, divisor: 1Mi}}}
";

/// The host path of the memory cgroup of process `pid` (v1's memory hierarchy, or v2's).
fn memory_cgroup(pid: u64) -> PathBuf {
    let text = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).unwrap();
    let v2 = Path::new("/sys/fs/cgroup/cgroup.controllers").exists();
    let line = text
        .lines()
        .find(|l| {
            if v2 {
                l.starts_with("0::")
            } else {
                l.split(':').nth(1).is_some_and(|c| c.split(',').any(|c| c == "memory"))
            }
        })
        .unwrap_or_else(|| panic!("no memory cgroup in {text}"));
    let path = line.splitn(3, ':').nth(2).unwrap().trim_start_matches('/');
    Path::new(if v2 { "/sys/fs/cgroup" } else { "/sys/fs/cgroup/memory" }).join(path)
}

#[test]
fn a_pod_level_memory_limit_bounds_its_container_through_the_pods_own_cgroup() {
    let _room = common::room(module_path!());
    let tb = testbed();
    let dir = crate::common::Scratch::new("podlevel");
    let manifests = dir.join("manifests");
    std::fs::create_dir_all(&manifests).unwrap();
    std::fs::write(manifests.join("bounded.yaml"), POD).unwrap();
    let agent = Agent::start(tb, &dir, "", &[], &[]);
    let id = eventually(Duration::from_secs(60), "the pod running", || tb.running_in("bounded-tb").pop().map(|c| c.id));

    let status = smol::block_on(tb.cri().container_status(&id, true)).expect("ContainerStatus");
    let info: serde_json::Value = serde_json::from_str(&status.info["info"]).unwrap();
    let pid = info["pid"].as_u64().expect("the container's pid");
    let cgroup = memory_cgroup(pid);
    let v2 = Path::new("/sys/fs/cgroup/cgroup.controllers").exists();
    let pod_cgroup = cgroup.parent().unwrap().to_path_buf();
    assert!(pod_cgroup.ends_with(format!("atoll/pod{UID}")), "{}", cgroup.display());
    let limit_file = if v2 { "memory.max" } else { "memory.limit_in_bytes" };
    let read = |p: &Path| std::fs::read_to_string(p).unwrap().trim().to_string();
    assert_eq!(read(&pod_cgroup.join(limit_file)), (96u64 << 20).to_string());
    if !v2 {
        // The container's own limit is unbounded; the hierarchy bounds it at the pod's.
        let stat = read(&cgroup.join("memory.stat"));
        assert!(stat.lines().any(|l| l == format!("hierarchical_memory_limit {}", 96u64 << 20)), "{stat}");
    }
    // The container sees the pod's limit as its own (it sets none).
    let env = smol::block_on(tb.cri().exec_sync(
        &id,
        vec!["sh".into(), "-c".into(), "echo $MEM_LIMIT".into()],
        Duration::from_secs(10),
    ))
    .expect("ExecSync");
    assert_eq!(String::from_utf8_lossy(&env.stdout), "96\n");
    let pod = agent.pod("bounded-tb").expect("the pod");
    assert_eq!(pod["status"]["qosClass"], "Burstable", "{pod}");

    std::fs::remove_file(manifests.join("bounded.yaml")).unwrap();
    eventually(Duration::from_secs(60), "the pod gone", || tb.sandboxes_of("bounded-tb").is_empty().then_some(()));
    eventually(Duration::from_secs(30), "the pod cgroup removed", || (!pod_cgroup.exists()).then_some(()));
    if !v2 {
        for hierarchy in std::fs::read_dir("/sys/fs/cgroup").unwrap().flatten() {
            let left = hierarchy.path().join(format!("atoll/pod{UID}"));
            assert!(!left.exists(), "{} was left behind", left.display());
        }
    }
    drop(agent);
    let _ = std::fs::remove_dir_all(&dir);
}
