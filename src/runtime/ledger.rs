//! The engine's ledger of pod workers by name, as a pure state machine (kubelet keeps and tests
//! the same maps in `pod_workers.go`: `startedStaticPodsByFullname`,
//! `waitingToStartStaticPodsByFullname`). Never two workers for one `namespace/name`: a new
//! UID waits in `pending` until the old one has finished. A replacement (a remove and an add of
//! the same name in one batch) keeps the old version `retiring` while the new one's images are
//! pulled, and terminates it only then. Pods the runtime ran when atoll started that no worker
//! took over are `found`: stopped before a new UID of their name starts, or as orphans once
//! every source has spoken. Each call returns what the engine must do ([`Act`]) and keeps what
//! it decided that the engine should tell ([`Note`], taken by [`Ledger::take_notes`]); the
//! engine spawns, sends and logs, the ledger decides. Nothing here does I/O.

use crate::pod::{Change, PodKey, PodUid, StaticPod};
use std::collections::{HashMap, HashSet};
use std::fmt;
use std::time::Duration;

/// What the engine does for the ledger.
#[derive(Clone, Debug, PartialEq)]
pub enum Act {
    /// Start a worker for this pod.
    Start(StaticPod),
    /// Hand a new version (same UID) to its worker.
    Update(StaticPod),
    /// Tell the worker of `uid` to stop its pod within `grace` and end.
    Terminate { uid: PodUid, grace: Duration },
    /// Pull `new`'s images while `old` runs, then terminate `old` (replacing any pull under
    /// way for the name).
    Prepull { old: StaticPod, new: StaticPod },
    /// Drop the pull for this name (its old version retires no more).
    DropPrepull { key: PodKey },
    /// Stop and remove a pod found in the runtime that nobody wants; it holds its name until
    /// its removal finishes like a worker.
    RemoveFound { uid: PodUid },
}

/// What the ledger decided that is worth a log line; the engine logs it ([`fmt::Display`]).
#[derive(Clone, Debug, PartialEq)]
pub enum Note {
    /// A new version of `key` arrived in the same batch: the old one (`uid`) keeps running
    /// until the new one's images are on the node.
    Retiring { key: PodKey, uid: PodUid },
    /// `key` (`uid`) was removed from the manifests and is terminated.
    Terminating { key: PodKey, uid: PodUid },
    /// An older version (`uid`, found in the runtime) of `key` is stopped before the new one.
    ReplacedWhileDown { key: PodKey, uid: PodUid },
    /// `key`'s new version `uid` waits for the previous one to terminate.
    Waiting { key: PodKey, uid: PodUid },
    /// A pod found in the runtime that no manifest wants is removed.
    Orphan { uid: PodUid },
}

impl fmt::Display for Note {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Note::Retiring { key, uid } => write!(
                f,
                "pod {key} ({uid}): a new version arrived; it is stopped once the new version's images are on the node"
            ),
            Note::Terminating { key, uid } => write!(f, "pod {key} ({uid}): removed from the manifests; terminating"),
            Note::ReplacedWhileDown { key, uid } => {
                write!(f, "pod {key} ({uid}): replaced while atoll was down; stopping the old version first")
            }
            Note::Waiting { key, uid } => write!(f, "pod {key} ({uid}): waiting for the previous version to terminate"),
            Note::Orphan { uid } => write!(f, "pod {uid}: no longer in any manifest; stopping and removing it"),
        }
    }
}

#[derive(Debug, Default)]
pub struct Ledger {
    /// Live workers (and orphans being removed): UID → `namespace/name`.
    live: HashMap<PodUid, PodKey>,
    /// New UIDs waiting for the old one of their name to finish, in order.
    pending: HashMap<PodKey, Vec<StaticPod>>,
    /// Old versions kept running while their replacement's images are pulled.
    retiring: HashMap<PodKey, StaticPod>,
    /// Pods the runtime runs that no worker owns: UID → `namespace/name`.
    found: HashMap<PodUid, PodKey>,
    /// What was decided since the engine last took the notes, in order.
    notes: Vec<Note>,
}

impl Ledger {
    /// A pod of atoll's the runtime runs (adoption, at start and before orphans go).
    pub fn found(&mut self, uid: PodUid, key: PodKey) {
        if !self.live.contains_key(&uid) {
            self.found.entry(uid).or_insert(key);
        }
    }

    /// What the ledger decided since the last call, for the engine to log.
    pub fn take_notes(&mut self) -> Vec<Note> {
        std::mem::take(&mut self.notes)
    }

    /// UIDs with a live worker (a pod running or stopping, or an orphan being removed).
    pub fn running(&self) -> HashSet<PodUid> {
        self.live.keys().cloned().collect()
    }

    /// One batch of changes (the merger's, for one snapshot). A pod removed and added again
    /// under the same name is a replacement: the old version keeps running until the new
    /// one's images are on the node.
    pub fn apply_all(&mut self, changes: Vec<Change>) -> Vec<Act> {
        let added: HashSet<String> = changes
            .iter()
            .filter_map(|c| match c {
                Change::Add(sp) => Some(sp.pod.key()),
                _ => None,
            })
            .collect();
        let mut acts = Vec::new();
        for change in changes {
            match change {
                Change::Remove(sp) if added.contains(sp.key().as_str()) && self.live.contains_key(&sp.uid) => {
                    self.notes.push(Note::Retiring { key: sp.key(), uid: sp.uid.clone() });
                    self.retiring.insert(sp.key(), sp);
                }
                other => acts.extend(self.apply(other)),
            }
        }
        acts
    }

    pub fn apply(&mut self, change: Change) -> Vec<Act> {
        match change {
            Change::Add(sp) => self.add(sp),
            Change::Update(sp) => {
                if self.live.contains_key(&sp.uid) {
                    return vec![Act::Update(sp)];
                }
                if let Some(q) = self.pending.get_mut(&sp.key()) {
                    for p in q.iter_mut().filter(|p| p.uid == sp.uid) {
                        *p = sp.clone();
                    }
                }
                Vec::new()
            }
            Change::Remove(sp) => {
                let key = sp.key();
                if let Some(q) = self.pending.get_mut(&key) {
                    q.retain(|p| p.uid != sp.uid);
                }
                let mut acts = self.retired(&key, &sp.uid);
                if self.live.contains_key(&sp.uid) {
                    self.notes.push(Note::Terminating { key: key.clone(), uid: sp.uid.clone() });
                    acts.push(Act::Terminate { uid: sp.uid.clone(), grace: super::stop::grace_of(&sp.pod) });
                }
                acts
            }
        }
    }

    fn add(&mut self, sp: StaticPod) -> Vec<Act> {
        let key = sp.key();
        let mut acts = Vec::new();
        self.found.remove(&sp.uid); // adopted by its worker
        let mut older: Vec<PodUid> =
            self.found.iter().filter(|(_, k)| **k == key).map(|(uid, _)| uid.clone()).collect();
        older.sort();
        for uid in older {
            self.notes.push(Note::ReplacedWhileDown { key: key.clone(), uid: uid.clone() });
            acts.extend(self.remove_found(uid));
        }
        if self.live.values().any(|k| *k == key) {
            self.notes.push(Note::Waiting { key: key.clone(), uid: sp.uid.clone() });
            if let Some(old) = self.retiring.get(&key) {
                acts.push(Act::Prepull { old: old.clone(), new: sp.clone() });
            }
            self.pending.entry(key).or_default().push(sp);
            return acts;
        }
        self.live.insert(sp.uid.clone(), key);
        acts.push(Act::Start(sp));
        acts
    }

    /// The old version `uid` of `key` retires no more (removed, or ended): its pull goes.
    fn retired(&mut self, key: &PodKey, uid: &PodUid) -> Vec<Act> {
        if self.retiring.get(key).is_some_and(|old| old.uid == *uid) {
            self.retiring.remove(key);
            return vec![Act::DropPrepull { key: key.clone() }];
        }
        Vec::new()
    }

    /// A worker (or an orphan's removal) has ended: the next version of its name starts, if
    /// one waits.
    pub fn worker_done(&mut self, uid: &PodUid) -> Vec<Act> {
        let Some(key) = self.live.remove(uid) else { return Vec::new() };
        let mut acts = self.retired(&key, uid);
        if let Some(mut q) = self.pending.remove(&key) {
            if !q.is_empty() {
                let next = q.remove(0);
                if !q.is_empty() {
                    self.pending.insert(key, q);
                }
                acts.extend(self.add(next));
            }
        }
        acts
    }

    /// The pods found in the runtime that are not `desired` and have no worker: each is
    /// removed (run once every source has delivered its first snapshot).
    pub fn orphans(&mut self, desired: &std::collections::HashSet<PodUid>) -> Vec<Act> {
        let mut orphans: Vec<PodUid> =
            self.found.keys().filter(|uid| !desired.contains(*uid) && !self.live.contains_key(*uid)).cloned().collect();
        orphans.sort();
        let mut acts = Vec::new();
        for uid in orphans {
            self.notes.push(Note::Orphan { uid: uid.clone() });
            acts.extend(self.remove_found(uid));
        }
        acts
    }

    fn remove_found(&mut self, uid: PodUid) -> Vec<Act> {
        let Some(key) = self.found.remove(&uid) else { return Vec::new() };
        self.live.insert(uid.clone(), key);
        vec![Act::RemoveFound { uid }]
    }
}

#[cfg(test)]
#[path = "ledger_tests.rs"]
mod tests;
