//! Orphan removal sweeps every sandbox atoll made that no manifest wants, so it runs in the
//! `exclusive` test binary (a test bed of its own, its files taking turns), away from the other
//! engine tests' pods, and its tests take turns.

use crate::common;

use atoll::cri::api::{ContainerFilter, ContainerState, PodSandboxFilter, PodSandboxState};
use atoll::pod::Change;
use atoll::pod::{self, Origin, Policy, Shape};
use common::{eventually, testbed, unique};
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// One test at a time: each engine here removes every pod it was not given.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

#[test]
fn orphans_are_removed_and_foreign_sandboxes_left_alone() {
    let _room = common::room(module_path!());
    let _alone = common::alone();
    let _turn = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    let tb = testbed();
    let sh = common::engine_env(tb, "orphans", Duration::from_millis(300), Default::default());
    let name = unique("orphan");
    let yaml = format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\nspec:\n  hostNetwork: true\n  terminationGracePeriodSeconds: 1\n  containers:\n  - name: main\n    image: docker.io/library/busybox:1.36\n    command: [sleep, \"3600\"]\n"
    );
    let origin = Origin::File(format!("/manifests/{name}.yaml").into());
    let sp = pod::load(yaml.as_bytes(), Shape::SinglePod, &origin, "tb", Policy::default()).unwrap().pods.remove(0);
    let uid = sp.uid.clone();
    let selector = HashMap::from([("io.kubernetes.pod.uid".to_string(), uid.to_string())]);
    let cri = tb.cri();
    {
        let mut engine = sh.engine();
        engine.apply(Change::Add(sp));
        eventually(Duration::from_secs(30), "the container running", || {
            let list = smol::block_on(
                cri.list_containers(Some(ContainerFilter { label_selector: selector.clone(), ..Default::default() })),
            )
            .unwrap();
            list.iter().any(|c| c.state == ContainerState::ContainerRunning as i32).then_some(())
        });
        // atoll stops here; the pod keeps running.
    }
    // A sandbox some other tool made: atoll must never touch it.
    let foreign =
        smol::block_on(cri.run_pod_sandbox(common::sandbox_config(tb, &unique("foreign"), true), "")).unwrap();

    // atoll starts again and its sources no longer hold the pod.
    let mut engine = sh.engine();
    smol::block_on(async {
        engine.adopt().await;
        engine.remove_orphans(&Default::default()).await;
        // Other orphans of this test bed may be swept too; wait for ours.
        let done = engine.finished();
        loop {
            let finished = atoll::deadline::with_deadline(Duration::from_secs(60), done.recv()).await;
            let finished = finished.and_then(|r| r.ok()).expect("the orphan's removal ended");
            engine.worker_done(&finished);
            if finished == uid {
                break;
            }
        }
    });
    let left = smol::block_on(
        cri.list_pod_sandbox(Some(PodSandboxFilter { label_selector: selector.clone(), ..Default::default() })),
    )
    .unwrap();
    assert!(left.is_empty(), "atoll's pod that nobody wants is gone: {left:?}");
    let containers =
        smol::block_on(cri.list_containers(Some(ContainerFilter { label_selector: selector, ..Default::default() })))
            .unwrap();
    assert!(containers.is_empty());
    let st = smol::block_on(cri.pod_sandbox_status(&foreign, false)).unwrap().status.unwrap();
    assert_eq!(st.state, PodSandboxState::SandboxReady as i32, "the foreign sandbox is untouched");
    smol::block_on(async {
        cri.stop_pod_sandbox(&foreign).await.unwrap();
        cri.remove_pod_sandbox(&foreign).await.unwrap();
    });
}

/// A pod whose manifest changed while atoll was down: the old version (found running at
/// start) is stopped with its own grace period and preStop hook, rebuilt from the annotations
/// atoll wrote, and only then does the new version start; the two never run side by side.
#[test]
fn a_pod_replaced_while_atoll_was_down_stops_with_its_hook_before_the_new_one_starts() {
    let _room = common::room(module_path!());
    let _alone = common::alone();
    let _turn = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    let tb = testbed();
    let sh = common::engine_env(tb, "replaced", Duration::from_millis(300), Default::default());
    let name = unique("replaced");
    let shared_dir = crate::common::Scratch::new("replaced");
    std::fs::create_dir_all(&shared_dir).unwrap();
    let journal = shared_dir.join("journal");
    let manifest = |version: &str, script: &str| {
        format!(
            "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\n  labels:\n    version: {version}\nspec:\n  hostNetwork: true\n  terminationGracePeriodSeconds: 20\n  volumes:\n  - name: shared\n    hostPath:\n      path: {dir}\n  containers:\n  - name: main\n    image: docker.io/library/busybox:1.36\n    command: [sh, -c, {script:?}]\n    volumeMounts:\n    - name: shared\n      mountPath: /shared\n    lifecycle:\n      preStop:\n        exec:\n          command: [sh, -c, \"echo {version}-prestop >> /shared/journal; sleep 2\"]\n",
            dir = shared_dir.display()
        )
    };
    // v1 lingers a second after SIGTERM, writing; v2 writes as it starts.
    let v1 = manifest("v1", "trap 'echo v1-term >> /shared/journal; sleep 1; echo v1-exit >> /shared/journal; exit 0' TERM; echo v1-start >> /shared/journal; while true; do sleep 0.1; done");
    let v2 = manifest("v2", "echo v2-start >> /shared/journal; exec sleep 3600");
    let origin = Origin::File(format!("/manifests/{name}.yaml").into());
    let load =
        |y: &str| pod::load(y.as_bytes(), Shape::SinglePod, &origin, "tb", Policy::default()).unwrap().pods.remove(0);
    let (old, new) = (load(&v1), load(&v2));
    assert_ne!(old.uid, new.uid);
    let running = |uid: &str| {
        let sel = HashMap::from([("io.kubernetes.pod.uid".to_string(), uid.to_string())]);
        let list = smol::block_on(
            tb.cri().list_containers(Some(ContainerFilter { label_selector: sel, ..Default::default() })),
        )
        .unwrap();
        list.iter().any(|c| c.state == ContainerState::ContainerRunning as i32).then_some(())
    };
    {
        let mut engine = sh.engine();
        engine.apply(Change::Add(old.clone()));
        eventually(Duration::from_secs(30), "v1 running", || running(&old.uid));
        // atoll stops; while it is down the manifest is replaced by v2.
    }
    let mut engine = sh.engine();
    let started = Instant::now();
    smol::block_on(async {
        engine.adopt().await;
        engine.apply(Change::Add(new.clone()));
        // The engine's owner passes finished workers on, as atoll's main loop does.
        let done = engine.finished();
        let finished = atoll::deadline::with_deadline(Duration::from_secs(60), done.recv()).await;
        let uid = finished.and_then(|r| r.ok()).expect("the old version's removal ended");
        assert_eq!(uid, old.uid);
        engine.worker_done(&uid);
    });
    eventually(Duration::from_secs(30), "v2 running", || running(&new.uid));
    let text = eventually(Duration::from_secs(10), "v2 in the journal", || {
        std::fs::read_to_string(&journal).ok().filter(|t| t.contains("v2-start"))
    });
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines, ["v1-start", "v1-prestop", "v1-term", "v1-exit", "v2-start"], "{text}");
    assert!(started.elapsed() >= Duration::from_secs(3), "preStop (2 s) and the trap (1 s) had their time");
    let sel = HashMap::from([("io.kubernetes.pod.uid".to_string(), old.uid.to_string())]);
    assert!(smol::block_on(
        tb.cri().list_pod_sandbox(Some(PodSandboxFilter { label_selector: sel, ..Default::default() }))
    )
    .unwrap()
    .is_empty());
    engine.apply(Change::Remove(new.clone()));
    eventually(Duration::from_secs(30), "v2 removed", || running(&new.uid).is_none().then_some(()));
    let _ = std::fs::remove_dir_all(&shared_dir);
}
