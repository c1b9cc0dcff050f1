//! The ledger's decisions, as tables of changes and the acts they must give.

use super::*;
use crate::pod::types::Pod;
use crate::pod::{Origin, PodKey, PodUid};
use std::collections::HashSet;

/// A pod `name` in the default namespace, with `uid` and a 30 s grace period.
fn pod(name: &str, uid: &str) -> StaticPod {
    let mut p = Pod::default();
    p.metadata.name = name.to_string();
    p.metadata.namespace = "default".to_string();
    p.metadata.uid = uid.to_string();
    StaticPod { pod: std::sync::Arc::new(p), uid: uid.into(), origin: Origin::File("/m/x.yaml".into()) }
}

fn terminate(uid: &str) -> Act {
    Act::Terminate { uid: uid.into(), grace: Duration::from_secs(30) }
}

#[test]
fn adds_updates_and_removes_reach_one_worker_per_uid() {
    let mut l = Ledger::default();
    let (a, b) = (pod("web", "u1"), pod("db", "u2"));
    assert_eq!(l.apply(Change::Add(a.clone())), [Act::Start(a.clone())]);
    assert_eq!(l.apply(Change::Add(b.clone())), [Act::Start(b.clone())]);
    assert_eq!(l.apply(Change::Update(a.clone())), [Act::Update(a.clone())]);
    assert_eq!(l.apply(Change::Remove(a.clone())), [terminate("u1")]);
    assert_eq!(l.running(), ["u1".into(), "u2".into()].into(), "stopping still holds it");
    assert_eq!(l.worker_done(&"u1".into()), []);
    assert_eq!(l.running(), ["u2".into()].into());
    assert_eq!(l.worker_done(&"nobody".into()), [], "an unknown UID changes nothing");
}

#[test]
fn a_new_uid_of_a_name_waits_for_the_old_one_to_finish() {
    let mut l = Ledger::default();
    let (v1, v2, v3) = (pod("web", "u1"), pod("web", "u2"), pod("web", "u3"));
    l.apply(Change::Add(v1.clone()));
    // Removed and added in separate batches: no replacement, the new one just waits.
    assert_eq!(l.apply(Change::Remove(v1.clone())), [terminate("u1")]);
    assert_eq!(l.apply(Change::Add(v2.clone())), []);
    assert_eq!(l.apply(Change::Add(v3.clone())), []);
    // An update to a waiting pod is kept for when it starts.
    let mut v2b = v2.clone();
    std::sync::Arc::make_mut(&mut v2b.pod).metadata.labels.insert("v".into(), "b".into());
    assert_eq!(l.apply(Change::Update(v2b.clone())), []);
    assert_eq!(l.worker_done(&"u1".into()), [Act::Start(v2b)]);
    // The third waits for the second; removing it from the queue means it never starts.
    assert_eq!(l.apply(Change::Remove(v3)), []);
    assert_eq!(l.apply(Change::Remove(v2.clone())), [terminate("u2")]);
    assert_eq!(l.worker_done(&"u2".into()), []);
    assert!(l.running().is_empty());
}

#[test]
fn a_replacement_keeps_the_old_version_until_its_pull_and_a_removal_drops_the_pull() {
    let mut l = Ledger::default();
    let (v1, v2) = (pod("web", "u1"), pod("web", "u2"));
    l.apply(Change::Add(v1.clone()));
    let acts = l.apply_all(vec![Change::Remove(v1.clone()), Change::Add(v2.clone())]);
    assert_eq!(acts, [Act::Prepull { old: v1.clone(), new: v2.clone() }], "no terminate before the pull");
    // A newer version replaces the pull; the old one still runs.
    let v3 = pod("web", "u3");
    let acts = l.apply_all(vec![Change::Remove(v2.clone()), Change::Add(v3.clone())]);
    assert_eq!(acts, [Act::Prepull { old: v1.clone(), new: v3.clone() }]);
    // The pull ends by terminating u1 (the engine's task does): then u3 starts.
    assert_eq!(l.worker_done(&"u1".into()), [Act::DropPrepull { key: "default/web".into() }, Act::Start(v3.clone())]);
    // Removing the old version outright drops its pull.
    let (w1, w2) = (pod("api", "w1"), pod("api", "w2"));
    l.apply(Change::Add(w1.clone()));
    l.apply_all(vec![Change::Remove(w1.clone()), Change::Add(w2.clone())]);
    let acts = l.apply(Change::Remove(w1.clone()));
    assert_eq!(acts, [Act::DropPrepull { key: "default/api".into() }, terminate("w1")]);
}

#[test]
fn pods_found_in_the_runtime_are_adopted_replaced_or_removed_as_orphans() {
    let mut l = Ledger::default();
    l.found("u1".into(), "default/web".into());
    l.found("o1".into(), "default/old".into());
    l.found("r1".into(), "default/db".into());
    // Adopted: the same UID is desired, its worker takes over.
    let web = pod("web", "u1");
    assert_eq!(l.apply(Change::Add(web.clone())), [Act::Start(web)]);
    // Replaced while atoll was down: the old UID is stopped first, the new one waits.
    let db = pod("db", "r2");
    assert_eq!(l.apply(Change::Add(db.clone())), [Act::RemoveFound { uid: "r1".into() }]);
    assert_eq!(l.worker_done(&"r1".into()), [Act::Start(db)]);
    // Once every source has spoken, the rest go.
    let desired: HashSet<PodUid> = ["u1".into(), "r2".into()].into();
    assert_eq!(l.orphans(&desired), [Act::RemoveFound { uid: "o1".into() }]);
    assert_eq!(l.orphans(&desired), [], "once");
    // A found UID that already has a worker is not found again.
    l.found("u1".into(), "default/web".into());
    assert_eq!(l.orphans(&HashSet::new()), []);
}

#[test]
fn what_the_ledger_decided_is_returned_as_notes_for_the_engine_to_log() {
    let key = || PodKey::from("default/web");
    let mut l = Ledger::default();
    let (v1, v2, v3) = (pod("web", "u1"), pod("web", "u2"), pod("web", "u3"));
    l.found("o1".into(), "default/old".into());
    l.found("r1".into(), key());
    // (what, the call, the notes it leaves)
    type Call = Box<dyn Fn(&mut Ledger) -> Vec<Act>>;
    let (a1, a2, a3) = (v1.clone(), v2.clone(), v3.clone());
    let cases: Vec<(&str, Call, Vec<Note>)> = vec![
        (
            "an older version found in the runtime goes first, the new one waits",
            Box::new(move |l| l.apply(Change::Add(a1.clone()))),
            vec![
                Note::ReplacedWhileDown { key: key(), uid: "r1".into() },
                Note::Waiting { key: key(), uid: "u1".into() },
            ],
        ),
        ("a worker that ends says nothing", Box::new(|l| l.worker_done(&"r1".into())), vec![]),
        (
            "a new UID of a running name waits (the removed one never ran: no retiring)",
            Box::new(move |l| l.apply_all(vec![Change::Remove(a2.clone()), Change::Add(a3.clone())])),
            vec![Note::Waiting { key: key(), uid: "u3".into() }],
        ),
        (
            "a removal terminates",
            Box::new(move |l| l.apply(Change::Remove(v1.clone()))),
            vec![Note::Terminating { key: key(), uid: "u1".into() }],
        ),
        ("orphans are removed", Box::new(|l| l.orphans(&HashSet::new())), vec![Note::Orphan { uid: "o1".into() }]),
        ("taken once", Box::new(|_| Vec::new()), vec![]),
    ];
    for (what, call, want) in cases {
        call(&mut l);
        assert_eq!(l.take_notes(), want, "{what}");
    }
    // A replacement of a running pod in one batch: the old one retires.
    let mut l = Ledger::default();
    l.apply(Change::Add(v2.clone()));
    l.take_notes();
    l.apply_all(vec![Change::Remove(v2), Change::Add(v3)]);
    let notes = l.take_notes();
    assert_eq!(
        notes,
        [Note::Retiring { key: key(), uid: "u2".into() }, Note::Waiting { key: key(), uid: "u3".into() }]
    );
    assert_eq!(
        notes[0].to_string(),
        "pod default/web (u2): a new version arrived; it is stopped once the new version's images are on the node"
    );
    assert_eq!(
        Note::Orphan { uid: "o1".into() }.to_string(),
        "pod o1: no longer in any manifest; stopping and removing it"
    );
}
