//! Admission as a stage: what reaches the engine, and what a rejected pod shows.

use super::*;
use crate::pod::{Origin, Pod};
use serde_json::json;

fn sp(name: &str, uid: &str, spec: serde_json::Value) -> StaticPod {
    let mut spec = spec;
    spec["containers"] = json!([{"name": "c", "image": "x"}]);
    let p: Pod =
        serde_json::from_value(json!({"metadata": {"name": name, "namespace": "default", "uid": uid}, "spec": spec}))
            .unwrap();
    StaticPod { pod: std::sync::Arc::new(p), uid: uid.into(), origin: Origin::File(format!("/m/{name}.yaml").into()) }
}

fn node(pods: i64) -> std::sync::Arc<Node> {
    let mut facts = crate::node::Facts { name: "gw1".into(), ..Default::default() };
    facts.labels = crate::node::machine::labels("gw1", &Default::default());
    facts.allocatable =
        crate::node::machine::Resources { cpu_millis: 1000, memory_bytes: 1 << 30, ephemeral_bytes: 0, pods };
    Node::new(facts)
}

fn uids(changes: &[Change]) -> Vec<String> {
    changes.iter().map(|c| format!("{:?}:{}", std::mem::discriminant(c), c.pod().uid)).collect()
}

#[test]
fn the_pod_over_max_pods_is_rejected_and_shown_failed() {
    let (n, mut a) = (node(2), Admission::default());
    let adds: Vec<Change> = ["a", "b", "c"].iter().map(|u| Change::Add(sp(u, u, json!({})))).collect();
    let out = a.apply(adds, &n);
    assert_eq!(out.len(), 2, "{:?}", uids(&out));
    let uid: PodUid = "c".into();
    assert_eq!(a.rejection(&uid).map(|r| r.reason.as_str()), Some("UnexpectedAdmissionError"));
    let status = n.statuses().get("c").unwrap();
    assert_eq!(status.phase, "Failed");
    assert_eq!(status.reason.as_deref(), Some("UnexpectedAdmissionError"));
    assert!(status.message.as_deref().unwrap().starts_with("Pod was rejected: Unexpected error"), "{status:?}");
    assert_eq!(status.qos_class, "BestEffort");
    let events = n.events().all();
    assert!(events.iter().any(|e| e.pod == "c" && e.type_ == "Warning" && e.reason == "UnexpectedAdmissionError"));
    // Its removal never reaches the engine, and clears its status.
    let out = a.apply(vec![Change::Remove(sp("c", "c", json!({})))], &n);
    assert!(out.is_empty());
    assert!(n.statuses().get("c").is_none());
}

#[test]
fn removals_free_room_before_additions_and_updates_are_not_admitted_again() {
    let (n, mut a) = (node(1), Admission::default());
    assert_eq!(a.apply(vec![Change::Add(sp("a", "a1", json!({})))], &n).len(), 1);
    // A replacement: the old version goes, the new one comes, in one batch.
    let out = a.apply(vec![Change::Add(sp("a", "a2", json!({}))), Change::Remove(sp("a", "a1", json!({})))], &n);
    assert_eq!(out.len(), 2);
    assert!(matches!(out[0], Change::Remove(_)) && matches!(out[1], Change::Add(_)));
    // An update of an admitted pod passes as it is.
    let out = a.apply(vec![Change::Update(sp("a", "a2", json!({"nodeSelector": {"x": "y"}})))], &n);
    assert!(matches!(out.as_slice(), [Change::Update(_)]));
}

#[test]
fn a_finished_pod_takes_no_room() {
    let (n, mut a) = (node(1), Admission::default());
    a.apply(vec![Change::Add(sp("job", "j", json!({})))], &n);
    n.statuses().set(&"j".into(), PodStatus { phase: "Succeeded".into(), ..Default::default() });
    assert_eq!(a.apply(vec![Change::Add(sp("b", "b", json!({})))], &n).len(), 1);
}

#[test]
fn oldest_then_highest_priority_first() {
    let (n, mut a) = (node(1), Admission::default());
    let low = sp("low", "l", json!({"priority": 0}));
    let high = sp("high", "h", json!({"priority": 2000001000}));
    let out = a.apply(vec![Change::Add(low), Change::Add(high)], &n);
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].pod().uid.to_string(), "h");
    let (n, mut a) = (node(1), Admission::default());
    let mut old = sp("old", "o", json!({}));
    std::sync::Arc::make_mut(&mut old.pod).metadata.creation_timestamp = Some(json!("2020-01-01T00:00:00Z"));
    let mut new = sp("new", "n", json!({"priority": 9}));
    std::sync::Arc::make_mut(&mut new.pod).metadata.creation_timestamp = Some(json!("2024-01-01T00:00:00Z"));
    let out = a.apply(vec![Change::Add(new), Change::Add(old)], &n);
    assert_eq!(out[0].pod().uid.to_string(), "o");
}
