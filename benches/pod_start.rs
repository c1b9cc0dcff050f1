//! Manifest dropped into the watched directory → container RUNNING (seen through CRI), through
//! atoll's file source, merge and pod engine, next to the CRI floor: the same runtime calls
//! (RunPodSandbox, CreateContainer, StartContainer, statuses) made directly, with no agent.
//! Uses the private containerd test bed. Prints figures; asserts nothing about time.
//!
//!   cargo bench --bench pod_start

#[path = "../tests/common/mod.rs"]
mod common;

use atoll::cri::api::{
    ContainerConfig, ContainerFilter, ContainerMetadata, ContainerState, ImageSpec, PodSandboxFilter,
};
use atoll::pod::Policy;
use atoll::runtime::engine::Engine;
use atoll::source::{file, merge};
use std::collections::HashMap;
use std::time::{Duration, Instant, SystemTime};

const ROUNDS: usize = 10;

fn pct(v: &mut [Duration], p: usize) -> Duration {
    v.sort();
    v[(v.len() * p / 100).min(v.len() - 1)]
}

fn main() {
    let tb = common::testbed();
    let cri = tb.cri();
    let dir = std::env::temp_dir().join(format!("atoll-bench-start-{}", std::process::id()));
    let manifests = dir.join("manifests");
    std::fs::create_dir_all(&manifests).unwrap();

    // The agent, in-process: file source → merge → engine.
    let shared = common::engine_shared(tb, "bench-start", Duration::from_secs(10), Default::default());
    let (tx, rx) = smol::channel::bounded(16);
    let cfg = file::FileSourceConfig {
        path: manifests.clone(),
        check_frequency: Duration::from_secs(20),
        node: "bench".into(),
        policy: Policy::default(),
    };
    let _source = smol::spawn(file::run(cfg, tx));
    let _agent = smol::spawn(async move {
        let mut merger = merge::Merger::new([atoll::source::SourceId::File]);
        let mut engine = Engine::new(shared);
        let finished = engine.finished();
        loop {
            let next =
                smol::future::or(async { rx.recv().await.ok().map(Ok) }, async { finished.recv().await.ok().map(Err) })
                    .await;
            match next {
                Some(Ok(update)) => {
                    for change in merger.apply(update, SystemTime::now()) {
                        engine.apply(change);
                    }
                }
                Some(Err(uid)) => engine.worker_done(&uid),
                None => return,
            }
        }
    });

    let running = |name: &str| {
        let sel = HashMap::from([("io.kubernetes.pod.name".to_string(), name.to_string())]);
        let list =
            smol::block_on(cri.list_containers(Some(ContainerFilter { label_selector: sel, ..Default::default() })))
                .unwrap();
        list.iter().any(|c| c.state == ContainerState::ContainerRunning as i32)
    };
    let sandboxes = |name: &str| {
        let sel = HashMap::from([("io.kubernetes.pod.name".to_string(), name.to_string())]);
        smol::block_on(cri.list_pod_sandbox(Some(PodSandboxFilter { label_selector: sel, ..Default::default() })))
            .unwrap()
            .len()
    };

    let mut agent = Vec::new();
    for i in 0..ROUNDS {
        let name = format!("start{i}");
        let yaml = format!(
            "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\nspec:\n  hostNetwork: true\n  terminationGracePeriodSeconds: 0\n  containers:\n  - name: c\n    image: docker.io/library/busybox:1.36\n    command: [sleep, \"3600\"]\n"
        );
        let tmp = manifests.join(format!(".{name}.tmp"));
        let t0 = Instant::now();
        std::fs::write(&tmp, yaml).unwrap();
        std::fs::rename(&tmp, manifests.join(format!("{name}.yaml"))).unwrap();
        while !running(&format!("{name}-bench")) {
            std::thread::sleep(Duration::from_millis(5));
        }
        agent.push(t0.elapsed());
        std::fs::remove_file(manifests.join(format!("{name}.yaml"))).unwrap();
        while sandboxes(&format!("{name}-bench")) > 0 {
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    // The floor: the same calls, made directly.
    let mut floor = Vec::new();
    for i in 0..ROUNDS {
        let config = common::sandbox_config(tb, &format!("floor{i}"), true);
        let t0 = Instant::now();
        smol::block_on(async {
            let sb = cri.run_pod_sandbox(config.clone(), "").await.unwrap();
            cri.pod_sandbox_status(&sb, false).await.unwrap();
            let _ = cri.image_status(&tb.busybox).await.unwrap();
            std::fs::create_dir_all(std::path::Path::new(&config.log_directory).join("c")).unwrap();
            let c = ContainerConfig {
                metadata: Some(ContainerMetadata { name: "c".into(), attempt: 0 }),
                image: Some(ImageSpec { image: tb.busybox.clone(), ..Default::default() }),
                command: vec!["sleep".into(), "3600".into()],
                log_path: "c/0.log".into(),
                ..Default::default()
            };
            let id = cri.create_container(&sb, c, config.clone()).await.unwrap();
            cri.start_container(&id).await.unwrap();
            cri.container_status(&id, false).await.unwrap();
            floor.push(t0.elapsed());
            cri.stop_pod_sandbox(&sb).await.unwrap();
            cri.remove_pod_sandbox(&sb).await.unwrap();
        });
    }
    let (am, a90) = (pct(&mut agent, 50), pct(&mut agent, 90));
    let (fm, f90) = (pct(&mut floor, 50), pct(&mut floor, 90));
    let version =
        smol::block_on(cri.version()).map(|v| format!("{} {}", v.runtime_name, v.runtime_version)).unwrap_or_default();
    println!("pod start, host network, {ROUNDS} rounds ({version}, private test bed):");
    println!("  manifest written -> container RUNNING via atoll: median {am:?}  p90 {a90:?}");
    println!("  same CRI calls made directly (floor):          median {fm:?}  p90 {f90:?}");
    println!("  ratio atoll/floor (median): {:.2}", am.as_secs_f64() / fm.as_secs_f64());
    let _ = std::fs::remove_dir_all(&dir);
}
