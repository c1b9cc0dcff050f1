//! Pod-level resources against the in-memory runtime: the sandbox of such a pod names its
//! own cgroup and carries its resources, a pod without them is as before, and a runtime that
//! drives cgroups through systemd fails the pod before anything runs (the real cgroup is
//! `tests/runtime/pod_resources.rs`'s).

use super::sync::{sync, Mode};
use super::tests::{context, dir, static_pod};
use crate::cri::fake::FakeRuntime;
use crate::node::observed::{ProbeVerdicts, Waits};

const BOUNDED: &str = "apiVersion: v1
kind: Pod
metadata: {name: bounded, uid: b-1}
spec:
  resources: {limits: {memory: 64Mi, cpu: 500m}}
  containers:
  - {name: c, image: docker.io/library/busybox:1.36}
";

#[test]
fn the_sandbox_of_a_pod_with_pod_level_limits_names_its_cgroup_and_resources() {
    let root = dir("podlevel");
    let rt = FakeRuntime::default();
    let cx = context(&root, &rt);
    let sp = static_pod(BOUNDED);
    let linux = super::sandbox::sandbox_config(&sp.pod, 0, cx.node.facts()).unwrap().linux.unwrap();
    assert_eq!(linux.cgroup_parent, "/atoll/podb-1");
    let r = linux.resources.unwrap();
    assert_eq!((r.memory_limit_in_bytes, r.cpu_quota, r.cpu_period, r.cpu_shares), (64 << 20, 50_000, 100_000, 512));
    let plain = static_pod(&BOUNDED.replace("  resources: {limits: {memory: 64Mi, cpu: 500m}}\n", ""));
    let linux = super::sandbox::sandbox_config(&plain.pod, 0, cx.node.facts()).unwrap().linux.unwrap();
    assert_eq!((linux.cgroup_parent.as_str(), linux.resources), ("", None));
}

#[test]
fn a_runtime_on_the_systemd_cgroup_driver_fails_the_pod_before_its_sandbox() {
    let root = dir("podlevel-systemd");
    let rt = FakeRuntime::default();
    rt.set_systemd_cgroups(true);
    let cx = context(&root, &rt);
    let sp = static_pod(BOUNDED);
    let e = smol::block_on(sync(&cx, &sp.pod, Mode::Run, &ProbeVerdicts::default(), &mut Waits::new())).unwrap_err();
    assert!(matches!(&e, super::errors::SyncError::Refused(f) if f.reason == "PodLevelResourcesNotSupported"), "{e}");
    assert!(e.to_string().contains("systemd cgroup driver"), "{e}");
    assert_eq!(rt.count("RunPodSandbox"), 0);
}
