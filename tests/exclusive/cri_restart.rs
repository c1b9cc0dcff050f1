//! The CRI client across a runtime restart: in the `exclusive` test binary (a test bed of its
//! own, its files taking turns), because restarting containerd would disturb other tests.

use crate::common;

use atoll::cri::api::{ContainerConfig, ContainerMetadata, ContainerState, ImageSpec};
use atoll::cri::Code;
use common::{sandbox_config, testbed, unique};
use std::time::{Duration, Instant};

#[test]
fn client_survives_containerd_restarts_and_reports_unavailable_while_it_is_down() {
    let _room = common::room(module_path!());
    let _alone = common::alone();
    let tb = testbed();
    let cri = tb.cri();
    let name = unique("restart");
    let config = sandbox_config(tb, &name, true);
    let (pod, ctr) = smol::block_on(async {
        let pod = cri.run_pod_sandbox(config.clone(), "").await.expect("RunPodSandbox");
        std::fs::create_dir_all(std::path::Path::new(&config.log_directory).join("main")).unwrap();
        let c = ContainerConfig {
            metadata: Some(ContainerMetadata { name: "main".into(), attempt: 0 }),
            image: Some(ImageSpec { image: tb.busybox.clone(), ..Default::default() }),
            command: vec!["sleep".into(), "3600".into()],
            log_path: "main/0.log".into(),
            ..Default::default()
        };
        let ctr = cri.create_container(&pod, c, config.clone()).await.expect("CreateContainer");
        cri.start_container(&ctr).await.expect("StartContainer");
        (pod, ctr)
    });

    // A restart between two calls: the client notices the dead connection and dials again.
    tb.restart_containerd();
    smol::block_on(async {
        let v = cri.version().await.expect("Version after a restart");
        assert_eq!(v.runtime_name, "containerd");
        let st = cri.container_status(&ctr, false).await.expect("ContainerStatus after a restart");
        assert_eq!(
            st.status.unwrap().state,
            ContainerState::ContainerRunning as i32,
            "the container outlives containerd"
        );
    });

    // While the runtime is down, calls fail fast with a typed Unavailable.
    tb.stop_containerd();
    smol::block_on(async {
        let started = Instant::now();
        let err = cri.version().await.unwrap_err();
        assert_eq!(err.code, Code::Unavailable, "{err}");
        assert!(err.is_transient());
        assert!(started.elapsed() < Duration::from_secs(10), "a down runtime must not hang the caller");
        let err = cri.list_pod_sandbox(None).await.unwrap_err();
        assert_eq!(err.code, Code::Unavailable, "{err}");
    });

    // And once it is back, the same client works again with no help.
    tb.restart_containerd();
    smol::block_on(async {
        let listed = cri.list_pod_sandbox(None).await.expect("ListPodSandbox after the runtime returned");
        assert!(listed.iter().any(|s| s.id == pod), "sandbox {pod} survived");
        cri.stop_pod_sandbox(&pod).await.expect("StopPodSandbox");
        cri.remove_pod_sandbox(&pod).await.expect("RemovePodSandbox");
    });
}
