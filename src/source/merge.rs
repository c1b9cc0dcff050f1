//! Snapshots from the sources → the desired set of pods, keyed by UID, and the changes to it.
//!
//! Each source owns its pods; a snapshot replaces that source's set. New UIDs are added (and
//! stamped with `kubernetes.io/config.seen`), vanished UIDs removed, and a known UID whose pod
//! changed (possible only with an explicit `metadata.uid`) is updated. Changes come out in
//! kubelet's order: removes, then adds, then updates. Admission and the pod engine consume them;
//! the agent asks [`Merger::all_sources_seen`] before its first full sync, when the engine
//! removes the pods nobody asked for.

use super::{SourceId, Update};
use crate::pod::identity::ANNOTATION_SEEN;
use crate::pod::{Change, PodUid, StaticPod};
use std::collections::{BTreeMap, BTreeSet};
use std::time::SystemTime;

/// The desired set of pods across all sources.
#[derive(Debug, Default)]
pub struct Merger {
    by_source: BTreeMap<SourceId, BTreeMap<PodUid, StaticPod>>,
    expected: BTreeSet<SourceId>,
}

impl Merger {
    /// A merger expecting snapshots from `sources` (the configured ones).
    pub fn new(sources: impl IntoIterator<Item = SourceId>) -> Merger {
        Merger { by_source: BTreeMap::new(), expected: sources.into_iter().collect() }
    }

    /// Applies a source's snapshot; returns the changes it makes.
    pub fn apply(&mut self, update: Update, now: SystemTime) -> Vec<Change> {
        let old = self.by_source.remove(&update.source).unwrap_or_default();
        let mut new: BTreeMap<PodUid, StaticPod> = BTreeMap::new();
        let (mut removes, mut adds, mut updates) = (Vec::new(), Vec::new(), Vec::new());
        for mut sp in update.pods {
            match old.get(&sp.uid) {
                Some(prev) => {
                    let seen = prev.pod.metadata.annotations.get(ANNOTATION_SEEN).cloned().unwrap_or_default();
                    std::sync::Arc::make_mut(&mut sp.pod).metadata.annotations.insert(ANNOTATION_SEEN.into(), seen);
                    if prev != &sp {
                        updates.push(Change::Update(sp.clone()));
                    } else {
                        sp = prev.clone(); // the Arc the engine and worker hold, not a third copy
                    }
                }
                None => {
                    std::sync::Arc::make_mut(&mut sp.pod)
                        .metadata
                        .annotations
                        .insert(ANNOTATION_SEEN.into(), crate::rfc3339::format_nanos(now));
                    adds.push(Change::Add(sp.clone()));
                }
            }
            new.insert(sp.uid.clone(), sp);
        }
        for (uid, sp) in old {
            if !new.contains_key(&uid) {
                // Its grace period as it left, when the source gave one.
                let sp = update.leaving.iter().find(|l| l.uid == uid).cloned().unwrap_or(sp);
                removes.push(Change::Remove(sp));
            }
        }
        self.by_source.insert(update.source, new);
        removes.into_iter().chain(adds).chain(updates).collect()
    }

    /// Whether every configured source has delivered at least one snapshot.
    pub fn all_sources_seen(&self) -> bool {
        self.expected.iter().all(|s| self.by_source.contains_key(s))
    }

    /// Every desired pod, by source then UID.
    pub fn desired(&self) -> impl Iterator<Item = &StaticPod> {
        self.by_source.values().flat_map(|m| m.values())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pod::identity::{make_static, Origin};
    use crate::pod::{defaults, Pod};
    use std::time::Duration;

    fn sp(name: &str, label: &str, origin: &Origin) -> StaticPod {
        let mut pod: Pod = serde_json::from_str(&format!(
            r#"{{"metadata":{{"name":"{name}","labels":{{"v":"{label}"}}}},"spec":{{"containers":[{{"name":"c","image":"x:1"}}]}}}}"#
        ))
        .unwrap();
        defaults::apply(&mut pod);
        make_static(pod, origin, "n1")
    }

    fn update(source: SourceId, pods: Vec<StaticPod>) -> Update {
        Update { source, pods, objects: vec![], errors: vec![], payloads: vec![], leaving: vec![] }
    }

    fn kinds(changes: &[Change]) -> Vec<String> {
        changes
            .iter()
            .map(|c| {
                let k = match c {
                    Change::Add(_) => "add",
                    Change::Update(_) => "update",
                    Change::Remove(_) => "remove",
                };
                format!("{k} {}", c.pod().pod.metadata.name)
            })
            .collect()
    }

    #[test]
    fn snapshots_become_adds_removes_and_nothing_for_unchanged_pods() {
        let f = Origin::File("/m/a.yaml".into());
        let g = Origin::File("/m/b.yaml".into());
        let t0 = SystemTime::UNIX_EPOCH + Duration::from_secs(1000);
        let mut m = Merger::new([SourceId::File, SourceId::Http]);
        assert!(!m.all_sources_seen());
        let c = m.apply(update(SourceId::File, vec![sp("a", "1", &f), sp("b", "1", &g)]), t0);
        assert_eq!(kinds(&c), vec!["add a-n1", "add b-n1"]);
        assert_eq!(c[0].pod().pod.metadata.annotations[ANNOTATION_SEEN], "1970-01-01T00:16:40Z");
        assert!(!m.all_sources_seen(), "the URL source has not spoken yet");

        // The same snapshot again: nothing to do.
        assert!(m.apply(update(SourceId::File, vec![sp("a", "1", &f), sp("b", "1", &g)]), t0).is_empty());
        // A label edit is a new UID: remove the old pod, add the new one; the seen time is new.
        let t1 = t0 + Duration::from_secs(5);
        let c = m.apply(update(SourceId::File, vec![sp("a", "2", &f), sp("b", "1", &g)]), t1);
        assert_eq!(kinds(&c), vec!["remove a-n1", "add a-n1"]);
        assert_eq!(c[1].pod().pod.metadata.annotations[ANNOTATION_SEEN], "1970-01-01T00:16:45Z");
        // A source's empty snapshot removes only its own pods.
        let u = Origin::Url("http://127.0.0.1/x".into());
        assert_eq!(kinds(&m.apply(update(SourceId::Http, vec![sp("u", "1", &u)]), t1)), vec!["add u-n1"]);
        assert!(m.all_sources_seen());
        assert_eq!(kinds(&m.apply(update(SourceId::Http, vec![]), t1)), vec!["remove u-n1"]);
        assert_eq!(m.desired().count(), 2);
    }

    #[test]
    fn an_unchanged_pod_keeps_the_copy_the_workers_hold() {
        let f = Origin::File("/m/a.yaml".into());
        let mut m = Merger::new([SourceId::File]);
        let added = m.apply(update(SourceId::File, vec![sp("a", "1", &f)]), SystemTime::UNIX_EPOCH);
        m.apply(update(SourceId::File, vec![sp("a", "1", &f), sp("b", "1", &f)]), SystemTime::UNIX_EPOCH);
        let kept = &m.by_source[&SourceId::File][&added[0].pod().uid];
        assert!(std::sync::Arc::ptr_eq(&kept.pod, &added[0].pod().pod));
    }

    #[test]
    fn a_changed_pod_with_a_fixed_uid_is_an_update_and_keeps_its_seen_time() {
        let f = Origin::File("/m/a.yaml".into());
        let t0 = SystemTime::UNIX_EPOCH;
        let mut m = Merger::new([SourceId::File]);
        let mut a = sp("a", "1", &f);
        a.uid = "fixed".into();
        m.apply(update(SourceId::File, vec![a.clone()]), t0);
        let mut b = sp("a", "2", &f);
        b.uid = "fixed".into();
        let c = m.apply(update(SourceId::File, vec![b]), t0 + Duration::from_secs(9));
        assert_eq!(kinds(&c), vec!["update a-n1"]);
        assert_eq!(c[0].pod().pod.metadata.annotations[ANNOTATION_SEEN], "1970-01-01T00:00:00Z");
    }
}
