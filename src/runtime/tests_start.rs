//! What a pod's start does around its sandbox. The files it needs on the host are made while
//! RunPodSandbox runs (`host_files`): the fake runtime holds the sandbox until the last of them
//! is there, which it never would be if they were made after it; a pod-network pod's hosts
//! file, which names the pod's IP, follows; a container whose own files cannot be made waits
//! alone. A new sandbox with nothing to start still needs the pod's log directory: without it
//! the sync fails. The follow-up sync reads only what the start left when every start went
//! through (`observe`), and lists otherwise, when the sandbox's status read after
//! RunPodSandbox serves it.

use super::errors::SyncError;
use super::sync::{sync, Mode, Synced};
use super::tests::{context, dir, static_pod};
use crate::cri::api::ContainerState;
use crate::cri::fake::FakeRuntime;
use crate::cri::RuntimeService;
use crate::node::observed::{ContainerState as ContainerObsState, ProbeVerdicts, WaitReason, Waits};

const POD: &str = "apiVersion: v1
kind: Pod
metadata: {name: files, uid: hf-1}
spec:
  hostNetwork: true
  containers:
  - {name: c, image: docker.io/library/busybox:1.36}
";

/// The pod with a container `a` before `c`.
fn two_containers() -> String {
    POD.replace("  - {name: c,", "  - {name: a, image: docker.io/library/busybox:1.36}\n  - {name: c,")
}

fn started(rt: &FakeRuntime) -> Vec<(String, ContainerState)> {
    rt.containers().into_iter().map(|c| (c.0, c.1)).collect()
}

/// One sync of `yaml` against a runtime that holds RunPodSandbox until `held` (in the pod's
/// directory) exists; it must succeed and start the container. The test's directory.
fn sync_held(tag: &str, yaml: &str, held: &str) -> crate::testdir::TestDir {
    let root = dir(tag);
    let rt = FakeRuntime::default().with_image("docker.io/library/busybox:1.36");
    let rt = rt.hold_sandbox_until(root.join("state/pods/hf-1").join(held));
    let cx = context(&root, &rt);
    let sp = static_pod(yaml);
    let synced = smol::block_on(sync(&cx, &sp.pod, Mode::Run, &ProbeVerdicts::default(), &mut Waits::new()));
    assert!(synced.is_ok(), "{:?}", synced.err());
    assert_eq!(started(&rt), [("c".to_string(), ContainerState::ContainerRunning)]);
    root
}

#[test]
fn a_host_network_pods_files_are_made_while_its_sandbox_is() {
    // The termination-log file is the last file made: all were there before the sandbox.
    let root = sync_held("host-files-hostnet", POD, "containers/c/00000000");
    assert!(root.join("state/pods/hf-1/etc-hosts").is_file(), "the hosts file");
    assert!(root.join("logs/default_files-n1_hf-1/c").is_dir(), "the container's log directory");
}

#[test]
fn a_pod_network_pods_hosts_file_names_the_ip_its_sandbox_got() {
    let pod = POD.replace("  hostNetwork: true\n", "");
    let root = sync_held("host-files-podnet", &pod, "containers/c/00000000");
    let hosts = std::fs::read_to_string(root.join("state/pods/hf-1/etc-hosts")).unwrap();
    let ip = hosts.lines().last().and_then(|l| l.strip_suffix("\tfiles-n1")).unwrap_or_default();
    assert!(ip.starts_with("10.0.0."), "the sandbox's IP, from the fake: {hosts}");
}

#[test]
fn a_container_whose_files_cannot_be_made_waits_and_the_other_starts() {
    let (root, rt) = (dir("host-files-one-fails"), FakeRuntime::default().with_image("docker.io/library/busybox:1.36"));
    let (cx, sp) = (context(&root, &rt), static_pod(&two_containers()));
    // A file where a's log directory goes.
    let logs = root.join("logs/default_files-n1_hf-1");
    std::fs::create_dir_all(&logs).unwrap();
    std::fs::write(logs.join("a"), "").unwrap();
    let mut waits = Waits::new();
    let synced = smol::block_on(sync(&cx, &sp.pod, Mode::Run, &ProbeVerdicts::default(), &mut waits));
    let (synced, _) = synced.expect("the sync itself goes on");
    assert_eq!(started(&rt), [("c".to_string(), ContainerState::ContainerRunning)]);
    let wait = waits.get("a").expect("a waits");
    assert_eq!(wait.reason, WaitReason::CreateContainerConfigError);
    assert!(wait.message.contains(&logs.join("a").display().to_string()), "{}", wait.message);
    assert_eq!(synced, Synced::Again(Some(std::time::Duration::ZERO)), "c started: looked at again at once");
}

#[test]
fn a_new_sandbox_with_nothing_to_start_fails_the_sync_without_its_log_directory() {
    let (root, rt) =
        (dir("start-nothing-no-log-dir"), FakeRuntime::default().with_image("docker.io/library/busybox:1.36"));
    let (cx, sp) = (context(&root, &rt), static_pod(POD));
    let (mut waits, verdicts) = (Waits::new(), ProbeVerdicts::default());
    let once = |waits: &mut Waits| smol::block_on(sync(&cx, &sp.pod, Mode::Run, &verdicts, waits));
    // c exits twice: restarted at once, then backing off.
    once(&mut waits).unwrap();
    for _ in 0..2 {
        let c = rt.containers().into_iter().next_back().expect("c");
        rt.exit(&c.3, 1);
        once(&mut waits).unwrap();
        once(&mut waits).unwrap();
    }
    assert_eq!(waits.get("c").map(|w| w.reason), Some(WaitReason::CrashLoopBackOff));
    // The sandbox stops, and a file stands where the pod's log directory goes.
    let (first, _) = rt.sandboxes()[0].clone();
    smol::block_on(rt.stop_pod_sandbox(&first)).unwrap();
    let logs = root.join("logs/default_files-n1_hf-1");
    std::fs::remove_dir_all(&logs).unwrap();
    std::fs::write(&logs, "").unwrap();
    rt.forget_calls();
    let failed = once(&mut waits).expect_err("no log directory for the new sandbox");
    assert!(
        matches!(&failed, SyncError::Host(e) if e.contains(&logs.display().to_string())),
        "the sync's own error, naming the directory: {failed:?}"
    );
    assert_eq!(rt.count("RunPodSandbox"), 1, "the new sandbox was made meanwhile: {:?}", rt.calls());
    assert_eq!(rt.count("ImageStatus") + rt.count("CreateContainer"), 0, "nothing starts: {:?}", rt.calls());
}

#[test]
fn the_follow_up_of_a_start_reads_what_it_left_and_lists_nothing() {
    let root = dir("start-follow-up");
    let rt = FakeRuntime::default().with_image("docker.io/library/busybox:1.36");
    let cx = context(&root, &rt);
    let sp = static_pod(POD);
    let mut waits = Waits::new();
    let verdicts = ProbeVerdicts::default();
    smol::block_on(sync(&cx, &sp.pod, Mode::Run, &verdicts, &mut waits)).unwrap();
    assert_eq!(rt.count("PodSandboxStatus"), 1, "once, after RunPodSandbox");
    rt.forget_calls();
    // The sandbox's and the started container's statuses, read afresh; no list.
    let (_, obs) = smol::block_on(sync(&cx, &sp.pod, Mode::Run, &verdicts, &mut waits)).unwrap();
    assert_eq!(rt.calls(), ["PodSandboxStatus", "ContainerStatus"]);
    assert!(obs.sandboxes.first().is_some_and(|s| s.ready && s.host_network), "{:?}", obs.sandboxes);
    assert!(obs.containers.iter().any(|c| c.name == "c" && c.state == ContainerObsState::Running));
    // The sync after it lists, as every sync not following a start, and takes the sandbox
    // as its status showed it a moment ago.
    rt.forget_calls();
    smol::block_on(sync(&cx, &sp.pod, Mode::Run, &verdicts, &mut waits)).unwrap();
    assert_eq!((rt.count("ListPodSandbox"), rt.count("ListContainers")), (1, 1), "{:?}", rt.calls());
    assert_eq!(rt.count("PodSandboxStatus"), 0, "{:?}", rt.calls());
}

#[test]
fn the_follow_up_of_a_start_that_did_not_all_go_through_lists() {
    let (root, rt) = (dir("start-left-partly"), FakeRuntime::default().with_image("docker.io/library/busybox:1.36"));
    let (cx, sp) = (context(&root, &rt), static_pod(&two_containers()));
    let (mut waits, verdicts) = (Waits::new(), ProbeVerdicts::default());
    // a's StartContainer fails: the runtime holds an a the sync made but did not start.
    rt.fail_next("StartContainer", crate::cri::Code::Unknown);
    smol::block_on(sync(&cx, &sp.pod, Mode::Run, &verdicts, &mut waits)).unwrap();
    assert_eq!(
        started(&rt),
        [("a".into(), ContainerState::ContainerCreated), ("c".into(), ContainerState::ContainerRunning)]
    );
    rt.forget_calls();
    let (_, obs) = smol::block_on(sync(&cx, &sp.pod, Mode::Run, &verdicts, &mut waits)).unwrap();
    assert_eq!(rt.count("ListContainers"), 1, "{:?}", rt.calls());
    assert!(obs.containers.iter().any(|c| c.name == "a"), "the a it made is seen: {:?}", obs.containers);
    // The sandbox's status read after RunPodSandbox serves the follow-up.
    assert_eq!(rt.count("PodSandboxStatus"), 0, "{:?}", rt.calls());
}
