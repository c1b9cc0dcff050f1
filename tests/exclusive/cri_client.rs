//! The CRI client against a real, private containerd (tests/testbed). Each test drives the
//! runtime through atoll's client and checks what the runtime did.

use crate::common;

use atoll::cri::api::{
    ContainerConfig, ContainerFilter, ContainerMetadata, ContainerState, ContainerStatsFilter, ExecSyncRequest,
    ImageSpec, LinuxContainerResources, PodSandboxConfig, PodSandboxFilter, PodSandboxState, PodSandboxStateValue,
};
use atoll::cri::{Code, Cri};
use common::{eventually, sandbox_config, testbed, unique, Testbed};
use std::collections::HashMap;
use std::time::{Duration, Instant};

/// A sandbox that is stopped and removed when the test ends, pass or fail.
struct Pod<'a> {
    cri: &'a Cri,
    id: String,
    config: PodSandboxConfig,
}

impl Drop for Pod<'_> {
    fn drop(&mut self) {
        let _ = smol::block_on(async {
            self.cri.stop_pod_sandbox(&self.id).await?;
            self.cri.remove_pod_sandbox(&self.id).await
        });
    }
}

async fn run_pod<'a>(cri: &'a Cri, tb: &Testbed, name: &str, host_network: bool) -> Pod<'a> {
    let config = sandbox_config(tb, name, host_network);
    let id = cri.run_pod_sandbox(config.clone(), "").await.expect("RunPodSandbox");
    Pod { cri, id, config }
}

fn container(tb: &Testbed, name: &str, args: &[&str]) -> ContainerConfig {
    ContainerConfig {
        metadata: Some(ContainerMetadata { name: name.into(), attempt: 0 }),
        image: Some(ImageSpec { image: tb.busybox.clone(), ..Default::default() }),
        command: vec!["sh".into(), "-c".into()],
        args: args.iter().map(|s| s.to_string()).collect(),
        log_path: format!("{name}/0.log"),
        labels: HashMap::from([("io.kubernetes.container.name".to_string(), name.to_string())]),
        ..Default::default()
    }
}

/// Creates the per-container log directory (kubelet does this before CreateContainer) and
/// the container; returns its id.
async fn create(cri: &Cri, pod: &Pod<'_>, config: ContainerConfig) -> String {
    let name = &config.metadata.as_ref().unwrap().name;
    std::fs::create_dir_all(std::path::Path::new(&pod.config.log_directory).join(name)).unwrap();
    cri.create_container(&pod.id, config, pod.config.clone()).await.expect("CreateContainer")
}

async fn state_of(cri: &Cri, id: &str) -> ContainerState {
    let s = cri.container_status(id, false).await.expect("ContainerStatus").status.unwrap();
    ContainerState::try_from(s.state).unwrap()
}

#[test]
fn version_and_status_report_a_ready_containerd() {
    let _room = common::room(module_path!());
    let _alone = common::alone();
    let tb = testbed();
    let cri = tb.cri();
    smol::block_on(async {
        let v = cri.version().await.expect("Version");
        assert_eq!(v.runtime_name, "containerd");
        assert_eq!(v.runtime_api_version, "v1");
        assert!(!v.runtime_version.is_empty());
        let st = cri.status(false).await.expect("Status").status.expect("runtime status");
        let ready = |t: &str| st.conditions.iter().find(|c| c.r#type == t).map(|c| c.status);
        assert_eq!(ready("RuntimeReady"), Some(true), "{st:?}");
        assert_eq!(ready("NetworkReady"), Some(true), "{st:?}");
    });
}

#[test]
fn host_network_sandbox_runs_lists_stops_and_is_removed() {
    let _room = common::room(module_path!());
    let _alone = common::alone();
    let tb = testbed();
    let cri = tb.cri();
    let name = unique("hostnet");
    smol::block_on(async {
        let config = sandbox_config(tb, &name, true);
        let id = cri.run_pod_sandbox(config.clone(), "").await.expect("RunPodSandbox");

        let st = cri.pod_sandbox_status(&id, false).await.unwrap().status.unwrap();
        assert_eq!(st.state, PodSandboxState::SandboxReady as i32);
        assert_eq!(st.metadata.as_ref().unwrap().name, name);
        assert_eq!(st.network.map(|n| n.ip).unwrap_or_default(), "", "host network sandboxes get no pod IP");
        assert_eq!(st.labels.get("io.kubernetes.pod.uid").map(String::as_str), Some(format!("uid-{name}").as_str()));

        let selector = HashMap::from([("io.kubernetes.pod.name".to_string(), name.clone())]);
        let filter = PodSandboxFilter { label_selector: selector.clone(), ..Default::default() };
        let listed = cri.list_pod_sandbox(Some(filter)).await.unwrap();
        assert_eq!(listed.iter().map(|s| s.id.as_str()).collect::<Vec<_>>(), vec![id.as_str()]);

        cri.stop_pod_sandbox(&id).await.expect("StopPodSandbox");
        let st = cri.pod_sandbox_status(&id, false).await.unwrap().status.unwrap();
        assert_eq!(st.state, PodSandboxState::SandboxNotready as i32);
        let ready_only = PodSandboxFilter {
            label_selector: selector,
            state: Some(PodSandboxStateValue { state: PodSandboxState::SandboxReady as i32 }),
            ..Default::default()
        };
        assert!(cri.list_pod_sandbox(Some(ready_only)).await.unwrap().is_empty());

        cri.remove_pod_sandbox(&id).await.expect("RemovePodSandbox");
        let err = cri.pod_sandbox_status(&id, false).await.unwrap_err();
        assert_eq!(err.code, Code::NotFound, "{err}");
        assert_eq!(err.method, "PodSandboxStatus");
    });
}

#[test]
fn bridge_sandbox_gets_an_ip_on_the_test_bed_network() {
    let _room = common::room(module_path!());
    let _alone = common::alone();
    let tb = testbed();
    let cri = tb.cri();
    let name = unique("bridge");
    smol::block_on(async {
        let pod = run_pod(&cri, tb, &name, false).await;
        let st = cri.pod_sandbox_status(&pod.id, false).await.unwrap().status.unwrap();
        let ip = st.network.map(|n| n.ip).unwrap_or_default();
        assert!(ip.starts_with(&tb.subnet_prefix), "pod IP {ip:?} not in {}", tb.var("ATOLL_TB_SUBNET"));
        assert_ne!(ip, tb.var("ATOLL_TB_GATEWAY"));
    });
}

#[test]
fn container_is_created_started_stopped_and_removed_with_state_transitions() {
    let _room = common::room(module_path!());
    let _alone = common::alone();
    let tb = testbed();
    let cri = tb.cri();
    smol::block_on(async {
        let pod = run_pod(&cri, tb, &unique("lifecycle"), true).await;
        // This container ignores SIGTERM, so StopContainer must kill it once the grace runs out.
        let stubborn = "trap '' TERM; while :; do sleep 1; done";
        let id = create(&cri, &pod, container(tb, "main", &[stubborn])).await;
        assert_eq!(state_of(&cri, &id).await, ContainerState::ContainerCreated);

        cri.start_container(&id).await.expect("StartContainer");
        assert_eq!(state_of(&cri, &id).await, ContainerState::ContainerRunning);
        let running = ContainerFilter {
            pod_sandbox_id: pod.id.clone(),
            state: Some(atoll::cri::api::ContainerStateValue { state: ContainerState::ContainerRunning as i32 }),
            ..Default::default()
        };
        let listed = cri.list_containers(Some(running)).await.unwrap();
        assert_eq!(listed.len(), 1);
        assert_eq!(listed[0].id, id);
        assert_eq!(listed[0].labels.get("io.kubernetes.container.name").map(String::as_str), Some("main"));

        let stopping = Instant::now();
        cri.stop_container(&id, Duration::from_secs(1)).await.expect("StopContainer");
        assert!(stopping.elapsed() >= Duration::from_secs(1), "stopped before the grace period ended");
        let st = cri.container_status(&id, false).await.unwrap().status.unwrap();
        assert_eq!(st.state, ContainerState::ContainerExited as i32);
        assert_eq!(st.exit_code, 137, "killed by SIGKILL after the grace period: {st:?}");
        assert!(st.finished_at >= st.started_at && st.started_at > 0);

        cri.remove_container(&id).await.expect("RemoveContainer");
        let err = cri.container_status(&id, false).await.unwrap_err();
        assert_eq!(err.code, Code::NotFound, "{err}");
    });
}

#[test]
fn container_that_exits_reports_its_exit_code_and_reason() {
    let _room = common::room(module_path!());
    let _alone = common::alone();
    let tb = testbed();
    let cri = tb.cri();
    smol::block_on(async {
        let pod = run_pod(&cri, tb, &unique("exit"), true).await;
        let id = create(&cri, &pod, container(tb, "fails", &["exit 3"])).await;
        cri.start_container(&id).await.unwrap();
        let st = eventually(Duration::from_secs(20), "the container to exit", || {
            let st = smol::block_on(cri.container_status(&id, false)).unwrap().status.unwrap();
            (st.state == ContainerState::ContainerExited as i32).then_some(st)
        });
        assert_eq!(st.exit_code, 3);
        assert_eq!(st.reason, "Error");
    });
}

#[test]
fn exec_sync_returns_exit_code_stdout_and_stderr() {
    let _room = common::room(module_path!());
    let _alone = common::alone();
    let tb = testbed();
    let cri = tb.cri();
    smol::block_on(async {
        let pod = run_pod(&cri, tb, &unique("exec"), true).await;
        let id = create(&cri, &pod, container(tb, "main", &["sleep 3600"])).await;
        cri.start_container(&id).await.unwrap();
        let cmd = ["sh", "-c", "echo to-out; echo to-err >&2; exit 3"].map(String::from).to_vec();
        let r = cri.exec_sync(&id, cmd, Duration::from_secs(10)).await.expect("ExecSync");
        assert_eq!(r.exit_code, 3);
        assert_eq!(String::from_utf8_lossy(&r.stdout), "to-out\n");
        assert_eq!(String::from_utf8_lossy(&r.stderr), "to-err\n");

        let ok = cri.exec_sync(&id, vec!["true".into()], Duration::from_secs(10)).await.unwrap();
        assert_eq!(ok.exit_code, 0);
    });
}

#[test]
fn local_deadline_ends_a_call_the_runtime_has_not_answered() {
    let _room = common::room(module_path!());
    let _alone = common::alone();
    let tb = testbed();
    let cri = tb.cri();
    smol::block_on(async {
        let pod = run_pod(&cri, tb, &unique("deadline"), true).await;
        let id = create(&cri, &pod, container(tb, "main", &["sleep 3600"])).await;
        cri.start_container(&id).await.unwrap();
        // No runtime-side timeout: only atoll's local deadline can end this call.
        let req = ExecSyncRequest { container_id: id.clone(), cmd: vec!["sleep".into(), "30".into()], timeout: 0 };
        let started = Instant::now();
        let err = cri.exec_sync_with_deadline(req, Some(Duration::from_secs(1))).await.unwrap_err();
        assert_eq!(err.code, Code::DeadlineExceeded, "{err}");
        assert!(started.elapsed() < Duration::from_secs(20), "the deadline did not cut the call");
        // The connection is still usable after a call was abandoned.
        assert_eq!(state_of(&cri, &id).await, ContainerState::ContainerRunning);
    });
}

#[test]
fn container_output_lands_in_a_cri_format_log_under_the_sandbox_log_directory() {
    let _room = common::room(module_path!());
    let _alone = common::alone();
    let tb = testbed();
    let cri = tb.cri();
    smol::block_on(async {
        let pod = run_pod(&cri, tb, &unique("logs"), true).await;
        let id = create(&cri, &pod, container(tb, "talker", &["echo hello-out; echo hello-err >&2; sleep 3600"])).await;
        cri.start_container(&id).await.unwrap();
        let st = cri.container_status(&id, false).await.unwrap().status.unwrap();
        let expected = std::path::Path::new(&pod.config.log_directory).join("talker/0.log");
        assert_eq!(std::path::Path::new(&st.log_path), expected);
        let text = eventually(Duration::from_secs(10), "two log lines", || {
            let t = std::fs::read_to_string(&expected).unwrap_or_default();
            (t.lines().count() >= 2).then_some(t)
        });
        let mut streams = Vec::new();
        for line in text.lines() {
            // <RFC 3339 time> <stream> <P|F> <content>
            let parts: Vec<&str> = line.splitn(4, ' ').collect();
            assert_eq!(parts.len(), 4, "not a CRI log line: {line:?}");
            assert!(parts[0].contains('T') && (parts[0].ends_with('Z') || parts[0].contains('+')), "{line:?}");
            assert_eq!(parts[2], "F", "{line:?}");
            streams.push((parts[1].to_string(), parts[3].to_string()));
        }
        streams.sort();
        assert_eq!(
            streams,
            vec![("stderr".to_string(), "hello-err".to_string()), ("stdout".to_string(), "hello-out".to_string())]
        );

        // After a rotation-style rename, ReopenContainerLog makes the runtime write a new file.
        std::fs::rename(&expected, expected.with_extension("log.1")).unwrap();
        cri.reopen_container_log(&id).await.expect("ReopenContainerLog");
        assert!(expected.exists(), "the runtime did not reopen {}", expected.display());
    });
}

#[test]
fn pull_of_a_registry_image_makes_it_present_and_remove_makes_it_absent() {
    let _room = common::room(module_path!());
    let _alone = common::alone();
    let tb = testbed();
    let cri = tb.cri();
    smol::block_on(async {
        let _ = cri.remove_image(&tb.pullable).await;
        assert!(cri.image_status(&tb.pullable).await.unwrap().is_none(), "image should start absent");
        let pod_config = sandbox_config(tb, &unique("pull"), true);
        let image_ref = cri.pull_image(&tb.pullable, None, Some(pod_config)).await.expect("PullImage");
        assert!(image_ref.starts_with("sha256:"), "{image_ref}");
        let image = cri.image_status(&tb.pullable).await.unwrap().expect("pulled image is present");
        assert_eq!(image.id, image_ref);
        assert!(image.repo_tags.contains(&tb.pullable), "{:?}", image.repo_tags);
        assert!(image.size > 0);

        // Pulling an image that is already present succeeds again with the same reference.
        let again = cri.pull_image(&tb.pullable, None, None).await.expect("second PullImage");
        assert_eq!(again, image_ref);

        let all = cri.list_images(None).await.unwrap();
        assert!(all.iter().any(|i| i.repo_tags.contains(&tb.busybox)));
        assert!(all.iter().any(|i| i.id == image_ref));

        cri.remove_image(&tb.pullable).await.expect("RemoveImage");
        assert!(cri.image_status(&tb.pullable).await.unwrap().is_none());
    });
}

#[test]
fn missing_images_and_containers_come_back_as_typed_errors() {
    let _room = common::room(module_path!());
    let _alone = common::alone();
    let tb = testbed();
    let cri = tb.cri();
    smol::block_on(async {
        assert!(cri.image_status("docker.io/library/absent:0").await.unwrap().is_none());

        let missing = format!("{}/atoll/absent:0", tb.var("ATOLL_TB_REGISTRY"));
        let err = cri.pull_image(&missing, None, None).await.unwrap_err();
        assert_eq!(err.method, "PullImage");
        assert_eq!(err.code, Code::NotFound, "{err}");

        let pod = run_pod(&cri, tb, &unique("missing"), true).await;
        let mut cfg = container(tb, "ghost", &["true"]);
        cfg.image = Some(ImageSpec { image: "docker.io/library/absent:0".into(), ..Default::default() });
        let err = cri.create_container(&pod.id, cfg, pod.config.clone()).await.unwrap_err();
        assert_eq!(err.code, Code::NotFound, "{err}");

        let ghost = "no-such-container";
        let errors = [
            cri.container_status(ghost, false).await.map(|_| ()).unwrap_err(),
            cri.start_container(ghost).await.unwrap_err(),
            cri.exec_sync(ghost, vec!["true".into()], Duration::from_secs(5)).await.map(|_| ()).unwrap_err(),
        ];
        for err in errors {
            assert_eq!(err.code, Code::NotFound, "{err}");
        }
        // StopContainer is idempotent: containerd 1.6 and 1.7 answer NotFound for a container
        // that does not exist, 2.x answers OK; CRI allows both, and atoll takes both as stopped.
        match cri.stop_container(ghost, Duration::ZERO).await {
            Ok(()) => {}
            Err(err) => assert_eq!(err.code, Code::NotFound, "{err}"),
        }
    });
}

#[test]
fn stats_and_resource_updates_reach_the_runtime() {
    let _room = common::room(module_path!());
    let _alone = common::alone();
    let tb = testbed();
    let cri = tb.cri();
    smol::block_on(async {
        let pod = run_pod(&cri, tb, &unique("stats"), true).await;
        let id = create(&cri, &pod, container(tb, "main", &["sleep 3600"])).await;
        cri.start_container(&id).await.unwrap();

        let limit = 64 << 20;
        let res = LinuxContainerResources {
            memory_limit_in_bytes: limit,
            cpu_period: 100_000,
            cpu_quota: 50_000,
            ..Default::default()
        };
        cri.update_container_resources(&id, res).await.expect("UpdateContainerResources");
        let st = cri.container_status(&id, false).await.unwrap().status.unwrap();
        let linux = st.resources.and_then(|r| r.linux).expect("resources in status");
        assert_eq!(linux.memory_limit_in_bytes, limit);
        assert_eq!(linux.cpu_quota, 50_000);
        // The limit is in force in the container's own cgroup (v2, or v1's memory controller).
        let read = "cat /sys/fs/cgroup/memory.max 2>/dev/null || cat /sys/fs/cgroup/memory/memory.limit_in_bytes";
        let cmd = ["sh", "-c", read].map(String::from).to_vec();
        let out = cri.exec_sync(&id, cmd, Duration::from_secs(10)).await.unwrap();
        assert_eq!(out.exit_code, 0, "{}", String::from_utf8_lossy(&out.stderr));
        assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), limit.to_string());

        let stats = cri.container_stats(&id).await.expect("ContainerStats").expect("stats for a running container");
        assert_eq!(stats.attributes.as_ref().unwrap().id, id);
        let mem = stats.memory.and_then(|m| m.working_set_bytes).map(|v| v.value).unwrap_or(0);
        assert!(mem > 0, "a running container uses some memory");
        let filter = ContainerStatsFilter { pod_sandbox_id: pod.id.clone(), ..Default::default() };
        let listed = cri.list_container_stats(Some(filter)).await.expect("ListContainerStats");
        assert_eq!(listed.iter().map(|s| s.attributes.as_ref().unwrap().id.clone()).collect::<Vec<_>>(), vec![id]);

        let fs = cri.image_fs_info().await.expect("ImageFsInfo");
        assert!(!fs.image_filesystems.is_empty());
        assert!(fs.image_filesystems[0].fs_id.as_ref().is_some_and(|f| !f.mountpoint.is_empty()));
    });
}
