//! The rollback stage with a node whose statuses the test sets, as the workers would.

use super::*;
use crate::node::Facts;
use crate::pod::status::{ContainerStatus, PodCondition, PodStatus};
use crate::trust::{test_key, Trust};

fn node() -> Arc<Node> {
    Node::new(Facts { name: "n1".into(), ..Default::default() })
}

/// The manifest file of the version of `web` that runs `image`, signed with test key 1.
fn payload(image: &str) -> Arc<Payload> {
    let yaml = format!("apiVersion: v1\nkind: Pod\nmetadata:\n  name: web\n  annotations: {{atoll.io/rollback-after: 60s, atoll.io/rollback-max-restarts: \"2\"}}\nspec:\n  containers:\n  - {{name: c, image: {image}}}\n");
    let signature = Some(test_key::sign(1, yaml.as_bytes(), "serial=1"));
    Arc::new(Payload { origin: Origin::File("/m/web.yaml".into()), bytes: yaml.into_bytes(), signature })
}

/// How the sources open payloads: with `trust`, on node n1.
fn intake(trust: Option<Trust>) -> Intake {
    Intake { trust, node: "n1".into(), ..Default::default() }
}

fn version(image: &str) -> crate::pod::StaticPod {
    intake(None).open(&payload(image)).unwrap().manifests.pods.remove(0)
}

/// What a worker publishes for `sp`: Ready or not, with `restarts`.
fn runs(node: &Node, sp: &crate::pod::StaticPod, ready: bool, restarts: u32) {
    node.statuses().set_pod(&sp.uid, &sp.pod);
    let status = if ready { "True" } else { "False" };
    node.statuses().set(
        &sp.uid,
        PodStatus {
            phase: "Running".into(),
            conditions: vec![PodCondition { type_: "Ready".into(), status: status.into(), ..Default::default() }],
            container_statuses: vec![ContainerStatus {
                name: "c".into(),
                restart_count: restarts,
                ..Default::default()
            }],
            ..Default::default()
        },
    );
}

fn snapshot(sp: &crate::pod::StaticPod) -> Update {
    let payloads = vec![payload(&sp.pod.spec.containers[0].image)];
    Update {
        source: SourceId::File,
        pods: vec![sp.clone()],
        objects: vec![],
        errors: vec![],
        payloads,
        leaving: vec![],
    }
}

#[test]
fn a_crashing_update_is_rolled_back_and_stays_so_across_a_restart() {
    let dir = std::env::temp_dir().join(format!("atoll-rollback-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let node = node();
    let t0 = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000);
    let mut rb = Rollback::new(Some(dir.clone()), None, intake(None), None);
    let (v1, v2) = (version("app:1"), version("app:2"));
    assert_eq!(rb.filter(snapshot(&v1), &node).pods[0].uid, v1.uid);
    runs(&node, &v1, true, 0);
    assert!(rb.check(&node, t0).is_empty());
    assert!(!rb.on_trial(), "the first version has nothing to roll back to");

    // v2 arrives: on trial; it restarts three times (two allowed) within its window.
    assert_eq!(rb.filter(snapshot(&v2), &node).pods[0].uid, v2.uid);
    assert!(rb.on_trial());
    node.statuses().remove(&v1.uid);
    runs(&node, &v2, false, 2);
    assert!(rb.check(&node, t0 + Duration::from_secs(5)).is_empty(), "two restarts are allowed");
    runs(&node, &v2, false, 3);
    let again = rb.check(&node, t0 + Duration::from_secs(6));
    assert_eq!(again.len(), 1, "the file source's snapshot applied again");
    let back = &again[0].pods[0];
    assert_eq!(back.uid, v1.uid, "v1 runs again");
    assert_eq!(back.pod.spec.containers[0].image, "app:1");
    let why = &back.pod.metadata.annotations[ROLLED_BACK_FROM];
    assert!(why.starts_with(v2.uid.as_str()) && why.contains("restarted 3 times within 60s"), "{why}");
    assert!(node.events().all().iter().any(|e| e.reason == "RolledBack"));

    // The source still says v2: v1 it is, also for a restarted agent.
    assert_eq!(rb.filter(snapshot(&v2), &node).pods[0].uid, v1.uid);
    let mut restarted = Rollback::new(Some(dir.clone()), None, intake(None), None);
    assert_eq!(restarted.filter(snapshot(&v2), &node).pods[0].uid, v1.uid);
    // A new version (v3) gets its chance; Ready at the end of its window, it is kept.
    let v3 = version("app:3");
    assert_eq!(restarted.filter(snapshot(&v3), &node).pods[0].uid, v3.uid);
    assert!(restarted.check(&node, t0 + Duration::from_secs(20)).is_empty());
    assert!(restarted.on_trial(), "v3 waits to start: its window is not open yet");
    runs(&node, &v3, true, 0);
    assert!(restarted.check(&node, t0 + Duration::from_secs(30)).is_empty(), "its window opens at 30 s");
    assert!(restarted.check(&node, t0 + Duration::from_secs(89)).is_empty());
    assert!(restarted.on_trial());
    assert!(restarted.check(&node, t0 + Duration::from_secs(91)).is_empty());
    assert!(!restarted.on_trial(), "v3 passed");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_version_never_ready_in_its_window_is_rolled_back_and_without_a_policy_nothing_is_judged() {
    let node = node();
    let t0 = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000);
    let mut rb = Rollback::new(None, None, intake(None), None);
    let (v1, v2) = (version("app:1"), version("app:2"));
    rb.filter(snapshot(&v1), &node);
    runs(&node, &v1, true, 0);
    rb.check(&node, t0);
    rb.filter(snapshot(&v2), &node);
    runs(&node, &v2, false, 0);
    assert!(rb.check(&node, t0 + Duration::from_secs(1)).is_empty(), "the window opens");
    assert!(rb.check(&node, t0 + Duration::from_secs(60)).is_empty());
    let again = rb.check(&node, t0 + Duration::from_secs(62));
    assert!(again[0].pods[0].pod.metadata.annotations[ROLLED_BACK_FROM].contains("not Ready within 60s"));

    let plain = |sp: &crate::pod::StaticPod| {
        let mut sp = sp.clone();
        std::sync::Arc::make_mut(&mut sp.pod).metadata.annotations.remove(judge::AFTER);
        sp
    };
    let mut off = Rollback::new(None, None, intake(None), None);
    off.filter(snapshot(&plain(&v1)), &node);
    assert!(!off.on_trial());
    assert_eq!(off.filter(snapshot(&plain(&v2)), &node).pods[0].uid, plain(&v2).uid);
    assert!(!off.on_trial(), "no policy, no trial");
}

#[test]
fn a_good_version_runs_again_only_if_its_signature_still_checks_out() {
    let dir = std::env::temp_dir().join(format!("atoll-rollback-trust-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let node = node();
    let t0 = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000);
    let fleet = |seed| Some(Trust { keys: vec![test_key::key(seed)], require: true });
    let mut rb = Rollback::new(Some(dir.clone()), None, intake(fleet(1)), None);
    let (v1, v2) = (version("app:1"), version("app:2"));
    rb.filter(snapshot(&v1), &node);
    runs(&node, &v1, true, 0);
    rb.check(&node, t0);
    rb.filter(snapshot(&v2), &node);
    node.statuses().remove(&v1.uid);
    runs(&node, &v2, false, 3);
    rb.check(&node, t0 + Duration::from_secs(1));
    let again = rb.check(&node, t0 + Duration::from_secs(2));
    assert_eq!(again[0].pods[0].uid, v1.uid, "signed by the fleet: v1 runs again");
    // The record keeps the payload and its signature, not a pod of atoll's making.
    let record = std::fs::read_dir(&dir).unwrap().next().unwrap().unwrap().path();
    let text = std::fs::read_to_string(&record).unwrap();
    assert!(text.contains("trusted comment: serial=1") && !text.contains("app:1"), "{text}");
    // The fleet's key is replaced (the old one revoked): the old version no longer runs; the
    // source's version does.
    let mut rotated = Rollback::new(Some(dir.clone()), None, intake(fleet(2)), None);
    assert_eq!(rotated.filter(snapshot(&v2), &node).pods[0].uid, v2.uid);
    assert!(!rotated.on_trial(), "no trial that could only end in the same rollback");
    // Someone with the disk rewrites the good version: it does not verify, so it does not run.
    let forged = text.replace(&crate::base64::encode(&payload("app:1").bytes), &crate::base64::encode(b"x"));
    std::fs::write(&record, forged).unwrap();
    let mut edited = Rollback::new(Some(dir.clone()), None, intake(fleet(1)), None);
    assert_eq!(edited.filter(snapshot(&v2), &node).pods[0].uid, v2.uid);
    let _ = std::fs::remove_dir_all(&dir);
}
