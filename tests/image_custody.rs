//! Images on a box without a registry, against the real private containerd: a pod whose pull
//! policy is Always starts from the image on disk when the registry cannot be reached (with a
//! warning event), and keeps kubelet's failure with `strictImagePullPolicy`.

mod common;

use atoll::cri::api::{ContainerFilter, ContainerState};
use atoll::node::observed::WaitReason;
use atoll::pod::{self, Change, Origin, Policy, Shape};
use common::{eventually, testbed, unique, Testbed};
use std::collections::HashMap;
use std::path::PathBuf;
use std::time::Duration;

fn ctr(tb: &Testbed, args: &[&str]) {
    let out = std::process::Command::new(tb.var("ATOLL_TB_CTR"))
        .args(["--address", tb.var("ATOLL_TB_SOCKET"), "--namespace", "k8s.io"])
        .args(args)
        .output()
        .expect("run ctr");
    assert!(out.status.success(), "ctr {args:?}: {}", String::from_utf8_lossy(&out.stderr));
}

fn pod_with(name: &str, image: &str) -> atoll::pod::StaticPod {
    let yaml = format!(
        "apiVersion: v1\nkind: Pod\nmetadata: {{name: {name}}}\nspec:\n  hostNetwork: true\n  terminationGracePeriodSeconds: 0\n  containers:\n  - name: c\n    image: {image}\n    imagePullPolicy: Always\n    command: [sleep, '3600']\n"
    );
    let origin = Origin::File(PathBuf::from(format!("/manifests/{name}.yaml")));
    pod::load(yaml.as_bytes(), Shape::SinglePod, &origin, "tb", Policy::default()).unwrap().pods.remove(0)
}

fn running(tb: &Testbed, uid: &str) -> bool {
    let filter = ContainerFilter {
        label_selector: HashMap::from([("io.kubernetes.pod.uid".to_string(), uid.to_string())]),
        ..Default::default()
    };
    smol::block_on(tb.cri().list_containers(Some(filter)))
        .unwrap()
        .iter()
        .any(|c| c.state == ContainerState::ContainerRunning as i32)
}

#[test]
fn offline_a_pull_policy_always_pod_starts_from_the_image_on_disk_unless_strict() {
    let tb = testbed();
    // The test bed's busybox under the name of a registry nobody answers for (port 1).
    let image = format!("127.0.0.1:1/atoll/offline:{}", std::process::id());
    ctr(tb, &["images", "tag", "--force", &tb.busybox, &image]);

    let sh = common::engine_env(tb, "offline", Duration::from_secs(30), Default::default());
    let mut engine = sh.engine();
    let sp = pod_with(&unique("offline"), &image);
    engine.apply(Change::Add(sp.clone()));
    eventually(Duration::from_secs(60), "the container running from the local image", || {
        running(tb, &sp.uid).then_some(())
    });
    let events = sh.node.events().all();
    let warning = events.iter().find(|e| e.reason == "UsingLocalImage" && e.uid == sp.uid).expect("a warning");
    assert_eq!(warning.type_, "Warning");
    assert!(warning.message.contains(&image) && warning.message.contains("sha256:"), "{warning:?}");

    let mut strict = common::engine_env(tb, "offline-strict", Duration::from_secs(30), Default::default());
    strict.config.strict_image_pull_policy = true;
    let mut strict_engine = strict.engine();
    let kept = pod_with(&unique("offline-strict"), &image);
    strict_engine.apply(Change::Add(kept.clone()));
    let waiting = eventually(Duration::from_secs(60), "the pull failed", || {
        let status = strict.statuses().get(&kept.uid)?;
        let c = status.container_statuses.first()?;
        let reason = c.state.waiting.as_ref()?.reason.clone();
        (reason == WaitReason::ErrImagePull.as_str() || reason == WaitReason::ImagePullBackOff.as_str())
            .then_some(reason)
    });
    assert!(!running(tb, &kept.uid), "strict: nothing runs ({waiting})");

    engine.apply(Change::Remove(sp.clone()));
    strict_engine.apply(Change::Remove(kept.clone()));
    eventually(Duration::from_secs(30), "both pods removed", || {
        (!running(tb, &sp.uid) && !running(tb, &kept.uid)).then_some(())
    });
    ctr(tb, &["images", "rm", &image]);
}
