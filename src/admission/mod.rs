//! Admission: the stage between the desired pods and the engine, as kubelet's
//! `HandlePodAdditions` runs it. Each new pod is admitted or rejected once, against the node
//! (`verdict`, pure) and the pods admitted before it that still run; an admitted pod goes to
//! the engine, a rejected one never starts: it is shown `Failed` with kubelet's reason and
//! message (`Pod was rejected: ...`) in the node's status store (so in `atoll pods`,
//! `describe`, the kubelet server and the mirror pod) and as a Warning event.
//!
//! A batch of changes is taken as kubelet takes its updates: removals first (their room is
//! free again), then updates of known pods (not admitted again), then additions, oldest
//! `creationTimestamp` first, a higher `spec.priority` first among equals, then in the order
//! the sources gave them. As in kubelet, a rejected pod stays rejected until its manifest
//! changes (a new UID) or atoll restarts; a pod already admitted is never evicted.

mod requests;
pub mod sysctls;
pub mod verdict;

pub use verdict::{admit, NodeInfo, Rejection};

use crate::node::Node;
use crate::pod::status::PodStatus;
use crate::pod::{Change, PodUid, StaticPod};

/// What admission keeps: the pods it admitted and those it rejected (a node's few pods: lists).
#[derive(Default)]
pub struct Admission {
    admitted: Vec<StaticPod>,
    rejected: Vec<(PodUid, Rejection)>,
}

impl Admission {
    /// Admits or rejects the additions of `changes`; returns what the engine is to do.
    pub fn apply(&mut self, changes: Vec<Change>, node: &Node) -> Vec<Change> {
        let info = node_info(node.facts());
        let (mut out, mut adds) = (Vec::new(), Vec::new());
        let (removes, rest): (Vec<Change>, Vec<Change>) =
            changes.into_iter().partition(|c| matches!(c, Change::Remove(_)));
        for change in removes.into_iter().chain(rest) {
            match change {
                Change::Remove(sp) => {
                    if self.rejection(&sp.uid).is_some() {
                        self.rejected.retain(|(uid, _)| *uid != sp.uid);
                        node.statuses().remove(&sp.uid);
                    } else {
                        self.admitted.retain(|p| p.uid != sp.uid);
                        out.push(Change::Remove(sp));
                    }
                }
                Change::Update(sp) if self.admitted.iter().any(|p| p.uid == sp.uid) => {
                    self.admitted.retain(|p| p.uid != sp.uid);
                    self.admitted.push(sp.clone());
                    out.push(Change::Update(sp));
                }
                Change::Update(sp) if self.rejection(&sp.uid).is_some() => node.statuses().set_pod(&sp.uid, &sp.pod),
                Change::Add(sp) | Change::Update(sp) => adds.push(sp),
            }
        }
        in_order(&mut adds);
        for sp in adds {
            let running: Vec<&crate::pod::Pod> = self
                .admitted
                .iter()
                .filter(|p| node.statuses().get(&p.uid).is_none_or(|s| s.phase != "Succeeded" && s.phase != "Failed"))
                .map(|p| p.pod.as_ref())
                .collect();
            match admit(&sp.pod, true, &running, &info) {
                Ok(()) => {
                    self.admitted.push(sp.clone());
                    out.push(Change::Add(sp));
                }
                Err(r) => {
                    reject(node, &sp, &r);
                    self.rejected.push((sp.uid.clone(), r));
                }
            }
        }
        out
    }

    /// Why `uid` was rejected, if it was.
    pub fn rejection(&self, uid: &PodUid) -> Option<&Rejection> {
        self.rejected.iter().find(|(u, _)| u == uid).map(|(_, r)| r)
    }
}

/// The verdicts of admitting `pods` together on a node where nothing runs yet, in admission's
/// order (`atoll validate`'s verdicts, as the agent would give them at its start).
pub fn admit_together<'a>(pods: &[&'a StaticPod], info: &NodeInfo) -> Vec<(&'a StaticPod, Rejection)> {
    let mut order = pods.to_vec();
    in_order(&mut order);
    let mut admitted: Vec<&crate::pod::Pod> = Vec::new();
    let mut rejected = Vec::new();
    for sp in order {
        match admit(&sp.pod, true, &admitted, info) {
            Ok(()) => admitted.push(&sp.pod),
            Err(r) => rejected.push((sp, r)),
        }
    }
    rejected
}

/// What admission reads of the node's facts.
pub fn node_info(f: &crate::node::Facts) -> NodeInfo {
    NodeInfo {
        name: f.name.clone(),
        labels: f.labels.clone(),
        allocatable: f.allocatable,
        apparmor: f.apparmor,
        allowed_sysctls: f.allowed_unsafe_sysctls.clone(),
    }
}

/// Puts additions in the order they are admitted in: oldest first, then higher priority, then
/// as given. An insertion sort: a node's few pods, and a few bytes of code.
fn in_order<P: std::borrow::Borrow<StaticPod>>(pods: &mut [P]) {
    let key = |p: &P| {
        let m = &p.borrow().pod;
        let created = m.metadata.creation_timestamp.as_ref().and_then(|v| v.as_str());
        // No time is Go's zero time: before any.
        let at = created.and_then(crate::rfc3339::parse_nanos).unwrap_or(i128::MIN);
        (at, -i64::from(m.spec.priority.unwrap_or(0)))
    };
    for i in 1..pods.len() {
        let mut j = i;
        while j > 0 && key(&pods[j - 1]) > key(&pods[j]) {
            pods.swap(j - 1, j);
            j -= 1;
        }
    }
}

/// The status kubelet's `rejectPod` sets.
pub fn rejected_status(pod: &crate::pod::Pod, r: &Rejection) -> PodStatus {
    PodStatus {
        phase: "Failed".into(),
        reason: Some(r.reason.clone()),
        message: Some(format!("Pod was rejected: {}", r.message)),
        qos_class: crate::pod::derived::qos_class(pod).into(),
        ..Default::default()
    }
}

fn reject(node: &Node, sp: &StaticPod, r: &Rejection) {
    node.statuses().set_pod(&sp.uid, &sp.pod);
    node.statuses().set(&sp.uid, rejected_status(&sp.pod, r));
    node.events().record(&sp.pod, true, &r.reason, &r.message);
}

#[cfg(test)]
mod tests;
