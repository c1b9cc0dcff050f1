//! The engine learns of container exits from the runtime itself, not from its relist: the
//! event stream where the runtime has one (containerd 1.7 and 2.x), pidfds on the container
//! processes where it does not (1.6). With the relist and resync set to an hour, a crashed
//! container and a killed sandbox are still replaced at once.

use crate::common;

use atoll::cri::api::{ContainerFilter, ContainerState, PodSandboxFilter};
use atoll::pod::{self, Change, Origin, Policy, Shape};
use atoll::runtime::pleg::Signal;
use common::{eventually, testbed, unique};
use std::collections::HashMap;
use std::path::PathBuf;
use std::time::Duration;

fn by_uid(uid: &str) -> HashMap<String, String> {
    HashMap::from([("io.kubernetes.pod.uid".to_string(), uid.to_string())])
}

#[test]
fn exits_are_acted_on_when_they_happen_not_at_the_next_relist() {
    let _room = common::room(module_path!());
    let tb = testbed();
    let cri = tb.cri();
    let mut sh = common::engine_env(tb, "signals", Duration::from_secs(3600), Default::default());
    sh.config.relist = Duration::from_secs(3600);
    let mut engine = sh.engine();
    let control = engine.control();
    let version = smol::block_on(cri.version()).expect("Version").runtime_version;
    let expected: &[Signal] = if version.starts_with("1.6") || version.starts_with("v1.6") {
        &[Signal::Exits]
    } else {
        // containerd 1.7 hands each event to one reader: with the other test binaries' agents
        // reading too, atoll may add process exits.
        &[Signal::Events, Signal::EventsAndExits]
    };
    eventually(Duration::from_secs(10), "the runtime's signal chosen", || {
        expected.contains(&control.runtime_signal()).then_some(())
    });

    let name = unique("signals");
    let yaml = format!(
        "apiVersion: v1\nkind: Pod\nmetadata: {{name: {name}}}\nspec:\n  hostNetwork: true\n  terminationGracePeriodSeconds: 0\n  containers:\n  - name: c\n    image: {}\n    command: [sh, -c, 'sleep 2; exit 3']\n",
        tb.busybox
    );
    let origin = Origin::File(PathBuf::from(format!("/manifests/{name}.yaml")));
    let sp = pod::load(yaml.as_bytes(), Shape::SinglePod, &origin, "tb", Policy::default()).unwrap().pods.remove(0);
    let uid = sp.uid.clone();
    engine.apply(Change::Add(sp.clone()));
    let restarts = || {
        smol::block_on(
            cri.list_containers(Some(ContainerFilter { label_selector: by_uid(&uid), ..Default::default() })),
        )
        .unwrap()
        .into_iter()
        .filter(|c| c.state == ContainerState::ContainerRunning as i32)
        .filter_map(|c| c.annotations.get("io.kubernetes.container.restartCount")?.parse::<u32>().ok())
        .max()
    };
    // The first restart comes without back-off; the relist would take an hour.
    eventually(Duration::from_secs(30), "the crashed container restarted", || restarts().filter(|n| *n >= 1));

    let sandboxes = || {
        smol::block_on(
            cri.list_pod_sandbox(Some(PodSandboxFilter { label_selector: by_uid(&uid), ..Default::default() })),
        )
        .unwrap()
    };
    // The sandbox's process killed behind atoll's back: a new sandbox, at once.
    let first = sandboxes().into_iter().find(|s| s.state == 0).expect("a ready sandbox");
    let killed = std::process::Command::new(tb.var("ATOLL_TB_CTR"))
        .args(["--address", tb.var("ATOLL_TB_SOCKET"), "--namespace", "k8s.io", "tasks", "kill", "--signal", "SIGKILL"])
        .arg(&first.id)
        .status()
        .expect("run ctr");
    assert!(killed.success());
    eventually(Duration::from_secs(30), "a new sandbox", || {
        sandboxes().into_iter().find(|s| s.id != first.id && s.state == 0).map(|_| ())
    });
    engine.apply(Change::Remove(sp));
    eventually(Duration::from_secs(30), "the pod removed", || sandboxes().is_empty().then_some(()));
}
