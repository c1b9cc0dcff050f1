//! Orphan removal sweeps every sandbox atoll made that no manifest wants, so it runs in a test
//! binary (and test bed) of its own, away from the other engine tests' pods.

mod common;

use atoll::cri::api::{ContainerFilter, ContainerState, PodSandboxFilter, PodSandboxState};
use atoll::pod::{self, Origin, Policy, Shape};
use atoll::runtime::engine::Engine;
use atoll::source::merge::Change;
use common::{eventually, testbed, unique};
use std::collections::HashMap;
use std::time::Duration;

#[test]
fn orphans_are_removed_and_foreign_sandboxes_left_alone() {
    let tb = testbed();
    let sh = common::engine_shared(tb, "orphans", Duration::from_millis(300), Default::default());
    let name = unique("orphan");
    let yaml = format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\nspec:\n  hostNetwork: true\n  terminationGracePeriodSeconds: 1\n  containers:\n  - name: main\n    image: docker.io/library/busybox:1.36\n    command: [sleep, \"3600\"]\n"
    );
    let origin = Origin::File(format!("/manifests/{name}.yaml").into());
    let sp = pod::load(yaml.as_bytes(), Shape::SinglePod, &origin, "tb", Policy::default()).unwrap().pods.remove(0);
    let uid = sp.uid.clone();
    let selector = HashMap::from([("io.kubernetes.pod.uid".to_string(), uid.clone())]);
    let cri = tb.cri();
    {
        let mut engine = Engine::new(sh.clone());
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
    let engine = Engine::new(sh);
    smol::block_on(engine.remove_orphans(&Default::default()));
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
