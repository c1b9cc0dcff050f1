//! Health-gated rollback (atoll's): a pod whose manifest changed is on trial. It must be
//! Ready at the end of its window (`atoll.io/rollback-after`, or atoll's `rollbackAfter`) and
//! restart at most `atoll.io/rollback-max-restarts` times (3) within it; otherwise atoll runs
//! the previous version again, records the failed version (its UID, a hash of its content) as
//! bad so it is not tried again until the source changes, and says so: a `RolledBack` event,
//! `atoll_pod_rollbacks_total`, and the annotation `atoll.io/rolled-back-from` (`<uid>:
//! <reason>`) on the running version, which `atoll describe` and the mirror pod show. The
//! manifest file is never rewritten: this stage sits between the sources and the merger and
//! substitutes the last good version for a bad one in each snapshot. Each pod's record (the
//! last good version, the trial, the bad version) is on disk under `<root-dir>/rollback`, so a
//! trial or a rollback carries on across an agent restart or a reboot.
//!
//! A version is kept as the payload it came from (the manifest file's bytes, an `.age` file's
//! still encrypted, or the URL's body, with its signature; never the URL itself), and opened
//! again through the sources' intake whenever it is used: its signature is checked under the
//! trust settings of the moment (what cannot be verified does not run), and an encrypted pod's
//! plain text is never written.

pub mod judge;
pub mod record;

use crate::node::Node;
use crate::pod::{Origin, PodKey, PodUid, StaticPod};
use crate::source::payload::{Intake, Payload};
use crate::source::{SourceId, Update};
use judge::Policy;
use record::{Admitted, Record, TrialStep, Version};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

pub use crate::pod::rollback_policy::ROLLED_BACK_FROM;

/// How often trials are looked at while any runs.
pub const CHECK: Duration = Duration::from_secs(1);

pub struct Rollback {
    dir: Option<PathBuf>,
    default: Option<Policy>,
    /// How versions are opened again (as the sources open them), and the URL configured.
    intake: Intake,
    url: Option<String>,
    records: BTreeMap<PodKey, Record>,
    /// The last snapshot of each source as it came, to apply again after a verdict.
    raw: BTreeMap<SourceId, Update>,
    /// Pods under a policy whose good version is not known yet.
    unknown: std::collections::BTreeSet<String>,
}

impl Rollback {
    /// `dir`: where records live (`None`: in memory only); `default`: atoll's config default;
    /// `intake`, `url`: how the sources open payloads, and the manifest URL.
    pub fn new(dir: Option<PathBuf>, default: Option<Policy>, intake: Intake, url: Option<String>) -> Rollback {
        let mut records = BTreeMap::new();
        if let Some(d) = &dir {
            for entry in std::fs::read_dir(d).into_iter().flatten().flatten() {
                if let Some(r) = crate::records::read::<Record>(&entry.path()) {
                    records.insert(r.key.clone(), r);
                }
            }
        }
        Rollback { dir, default, intake, url, records, raw: BTreeMap::new(), unknown: Default::default() }
    }

    /// Whether any trial runs.
    pub fn on_trial(&self) -> bool {
        self.records.values().any(|r| r.trial.is_some())
    }

    /// Whether [`Rollback::check`] has something to look at (the owner calls it every
    /// [`CHECK`] while so): a trial, or a pod under a policy with no good version yet.
    pub fn needs_check(&self) -> bool {
        self.on_trial() || !self.unknown.is_empty()
    }

    /// A source's snapshot as it should run: a bad version replaced by the last good one, a
    /// changed pod put on trial.
    pub fn filter(&mut self, update: Update, node: &Node) -> Update {
        if update.source == crate::source::SourceId::Api {
            return update; // the cluster's pods: rolled out and back by the cluster
        }
        self.raw.insert(update.source, update.clone());
        let payloads = update.payloads.clone();
        let mut out = update;
        for sp in &mut out.pods {
            let key = sp.key();
            let policy = match judge::policy(&sp.pod, self.default) {
                Ok(p) => p,
                Err(e) => {
                    log::warn!("pod {key}: {e}; no rollback for it");
                    None
                }
            };
            let r = self.record(&key);
            // A bad version is replaced by the good one (opened again only then).
            let good = record::rollback_to(&r, &sp.uid).and_then(|(v, from)| Some((self.reopen(v, &key)?, from)));
            let new_trial = |policy| {
                let payload = payloads.iter().find(|p| p.origin == sp.origin)?;
                let restarts_before = node.statuses().get(&sp.uid).map_or(0, |s| s.restarts());
                Some(record::Trial { version: Version::new(&sp.uid, payload), since: 0, policy, restarts_before })
            };
            let (r, admitted) = record::admit(r, &sp.uid, policy, good.is_some(), new_trial);
            match (admitted, good) {
                (Admitted::RolledBack, Some((good, from))) => {
                    *sp = good;
                    Arc::make_mut(&mut sp.pod).metadata.annotations.insert(ROLLED_BACK_FROM.into(), from);
                }
                (Admitted::OnTrial, _) => {
                    log::info!("pod {key} ({}): a new version, on trial for {:?}", sp.uid, policy.map(|p| p.window));
                }
                // The first version: the good one once it is Ready (`check`).
                (Admitted::First, _) => {
                    self.unknown.insert(key.to_string());
                }
                _ => {}
            }
            self.store(r);
        }
        out
    }

    /// Looks at every trial and at pods not yet known good; returns the snapshots to apply
    /// again (a rollback happened in them).
    pub fn check(&mut self, node: &Node, now: SystemTime) -> Vec<Update> {
        let mut again = Vec::new();
        let raw = &self.raw;
        self.unknown.retain(|k| raw.values().any(|u| u.pods.iter().any(|p| p.key() == *k)));
        let statuses: BTreeMap<PodUid, (Arc<crate::pod::Pod>, bool, u32)> = node
            .statuses()
            .pods()
            .into_iter()
            .map(|(p, st)| {
                let (ready, restarts) = st.map_or((false, 0), |s| (s.ready(), s.restarts()));
                (PodUid::from(p.metadata.uid.as_str()), (p, ready, restarts))
            })
            .collect();
        let keys: Vec<PodKey> = self.records.keys().cloned().collect();
        for key in keys {
            let mut r = self.record(&key);
            let uid = r.trial.as_ref().map(|t| t.version.uid.clone()).unwrap_or_default();
            let seen = statuses.get(&uid).map(|s| (s.1, s.2));
            match record::advance_trial(&mut r, seen, unix(now)) {
                TrialStep::Nothing => continue,
                TrialStep::Opened => {}
                TrialStep::Kept { uid } => {
                    log::info!("pod {key} ({uid}): passed its trial; it is the version to keep");
                }
                TrialStep::RolledBack { uid, why } => {
                    let message = format!("rolled back from {uid}: {why}");
                    match statuses.get(&uid) {
                        Some((pod, _, _)) => node.events().record(pod, true, "RolledBack", &message),
                        None => log::warn!("pod {key}: {message}"),
                    }
                    crate::metrics::add(&crate::metrics::ROLLBACKS, &[], 1.0);
                    again.extend(self.raw.values().filter(|u| u.pods.iter().any(|p| p.key() == key)).cloned());
                }
            }
            self.store(r);
        }
        // A pod under a policy with no good version yet: the one that runs and is Ready is it.
        for (uid, (pod, ready, _)) in &statuses {
            let key = PodKey::from(pod.key());
            let known = self.records.get(&key).is_some_and(|r| r.good.is_some() || r.trial.is_some());
            if *ready && !known && matches!(judge::policy(pod, self.default), Ok(Some(_))) {
                if let Some(payload) = self.payload_of(uid) {
                    let mut r = self.record(&key);
                    r.good = Some(Version::new(uid, &payload));
                    self.store(r);
                }
            }
            if self.records.get(&key).is_some_and(|r| r.good.is_some()) {
                self.unknown.remove(key.as_str());
            }
        }
        again.into_iter().map(|u| self.filter(u, node)).collect()
    }

    /// The payload the pod `uid` of a source's last snapshot came from.
    fn payload_of(&self, uid: &PodUid) -> Option<Arc<Payload>> {
        self.raw.values().find_map(|u| {
            let sp = u.pods.iter().find(|p| p.uid == *uid)?;
            u.payloads.iter().find(|p| p.origin == sp.origin).cloned()
        })
    }

    /// Pod `key` at version `v`, its payload opened again as the sources open it (its
    /// signature checked under the trust of the moment); `None`, and a warning, when it does
    /// not open or no longer gives that pod.
    fn reopen(&self, v: &Version, key: &PodKey) -> Option<StaticPod> {
        let origin = match (&v.file, &self.url) {
            (Some(f), _) => Origin::File(f.clone()),
            (None, Some(url)) => Origin::Url(url.clone()),
            (None, None) => return None,
        };
        let bytes = crate::base64::decode(&v.body).ok()?;
        let payload = Payload { origin, bytes, signature: v.signature.clone().map(String::into_bytes) };
        match self.intake.open(&payload) {
            Ok(opened) => opened.manifests.pods.into_iter().find(|sp| sp.uid == v.uid && sp.key() == *key),
            Err(e) => {
                log::warn!("pod {key}: its last good version ({}) cannot run again: {e}", v.uid);
                None
            }
        }
    }

    /// What is known of pod `key` (nothing yet: an empty record).
    fn record(&self, key: &PodKey) -> Record {
        self.records.get(key).cloned().unwrap_or_else(|| Record::empty(key))
    }

    /// Keeps `r` (in memory and on disk when it changed); an empty record is forgotten.
    fn store(&mut self, r: Record) {
        if self.records.get(&r.key) == Some(&r) {
            return;
        }
        let empty = r.is_empty();
        if let Some(dir) = &self.dir {
            let path = crate::records::path_for(dir, "pod", &r.key);
            let written = if empty {
                crate::records::remove(&path);
                Ok(())
            } else {
                crate::records::write(&path, &r)
            };
            if let Err(e) = written {
                log::warn!("rollback: cannot record pod {} in {}: {e}", r.key, dir.display());
            }
        }
        if empty {
            self.records.remove(&r.key);
        } else {
            self.records.insert(r.key.clone(), r);
        }
    }
}

fn unix(t: SystemTime) -> u64 {
    t.duration_since(SystemTime::UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

#[cfg(test)]
#[path = "tests.rs"]
mod tests;
