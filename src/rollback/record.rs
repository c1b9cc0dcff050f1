//! One pod's rollback record (its last good version, its trial, the version rolled back from)
//! and the record's transitions as pure functions: what a snapshot's pod does to it
//! ([`admit`]), and what a look at a trial does to it ([`advance_trial`]). The stage in
//! `rollback` reads the pods' statuses, opens versions again, logs and writes records.

use super::judge::{self, Policy, Seen, Verdict};
use crate::pod::{Origin, PodKey, PodUid};
use crate::source::payload::Payload;
use std::path::PathBuf;
use std::time::Duration;

/// One pod's memory, by `namespace/name`.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Record {
    pub key: PodKey,
    /// The last version that passed (or was running when its pod came under a policy).
    pub good: Option<Version>,
    pub trial: Option<Trial>,
    /// The version rolled back from, and why; forgotten when the source changes again.
    pub bad: Option<(PodUid, String)>,
}

impl Record {
    pub fn empty(key: &PodKey) -> Record {
        Record { key: key.clone(), ..Default::default() }
    }
}

/// A version of a pod: its UID and the payload it came from.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Version {
    pub uid: PodUid,
    /// The manifest file; none: the URL configured (a URL may hold credentials: not kept).
    pub file: Option<PathBuf>,
    /// The payload's bytes in base64, as read (an encrypted file's stay encrypted).
    pub body: String,
    pub signature: Option<String>,
}

impl Version {
    pub fn new(uid: &PodUid, payload: &Payload) -> Version {
        Version {
            uid: uid.clone(),
            file: match &payload.origin {
                Origin::File(p) => Some(p.clone()),
                Origin::Url(_) | Origin::Api => None,
            },
            body: crate::base64::encode(&payload.bytes),
            signature: payload.signature.as_deref().map(|s| String::from_utf8_lossy(s).into_owned()),
        }
    }
}

#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Trial {
    pub version: Version,
    /// When the new version's worker began (seconds since the epoch, wall clock, so a
    /// restart or a reboot counts); 0 until then: an update waits for its images, and perhaps
    /// for the old version's grace period, before its window opens.
    pub since: u64,
    pub policy: Policy,
    /// The restarts its containers had when the trial began.
    pub restarts_before: u32,
}

impl Record {
    /// Nothing is known: the record is forgotten.
    pub fn is_empty(&self) -> bool {
        self.good.is_none() && self.trial.is_none() && self.bad.is_none()
    }
}

/// The good version to run in place of version `uid`, and the annotation saying so, when
/// `uid` was rolled back from.
pub fn rollback_to<'a>(r: &'a Record, uid: &str) -> Option<(&'a Version, String)> {
    match (&r.bad, &r.good) {
        (Some((bad, why)), Some(good)) if bad == uid => Some((good, format!("{bad}: {why}"))),
        _ => None,
    }
}

/// What a snapshot's pod did to its record.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Admitted {
    /// The bad version is replaced by the good one.
    RolledBack,
    /// No policy: nothing is kept.
    NoPolicy,
    /// The good version runs (a trial of another one, if any, is over), or the trial goes on,
    /// or the version was rolled back from and the good one cannot run again: no new trial.
    Unchanged,
    /// A new version, on trial.
    OnTrial,
    /// The first version under a policy: the good one once it is Ready.
    First,
}

/// What version `uid` of the pod does to its record `r`. `rolled_back`: the good version
/// [`rollback_to`] named runs in its place (it could be opened again); `trial`: the trial of a
/// new version, if one can start (its payload is known).
pub fn admit(
    mut r: Record,
    uid: &str,
    policy: Option<Policy>,
    rolled_back: bool,
    trial: impl FnOnce(Policy) -> Option<Trial>,
) -> (Record, Admitted) {
    if r.bad.as_ref().is_some_and(|(bad, _)| bad != uid) {
        r.bad = None; // the source changed again: the new content gets its chance
    }
    if rolled_back && rollback_to(&r, uid).is_some() {
        return (r, Admitted::RolledBack);
    }
    let Some(policy) = policy else { return (Record::empty(&r.key), Admitted::NoPolicy) };
    if r.good.as_ref().is_some_and(|g| g.uid == uid) {
        r.trial = None;
        return (r, Admitted::Unchanged);
    }
    let on_trial = r.trial.as_ref().is_some_and(|t| t.version.uid == uid);
    let rolled_back_from = r.bad.as_ref().is_some_and(|(bad, _)| bad == uid);
    if on_trial || rolled_back_from {
        return (r, Admitted::Unchanged);
    }
    if r.good.is_none() {
        return (r, Admitted::First);
    }
    r.trial = trial(policy);
    (r, Admitted::OnTrial)
}

/// What a look at a trial came to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TrialStep {
    /// No trial, or its pod shows nothing yet, or it goes on.
    Nothing,
    /// Its worker runs: the window opens now.
    Opened,
    /// It passed: the new version is the one to keep.
    Kept { uid: PodUid },
    /// It failed: version `uid` is rolled back from.
    RolledBack { uid: PodUid, why: String },
}

/// Looks at `r`'s trial: `seen` is what its pod shows (Ready, its restarts in all), `now` in
/// seconds since the epoch (wall clock, so a restart or a reboot counts).
pub fn advance_trial(r: &mut Record, seen: Option<(bool, u32)>, now: u64) -> TrialStep {
    let (Some(t), Some((ready, restarts))) = (&mut r.trial, seen) else { return TrialStep::Nothing };
    if t.since == 0 {
        t.since = now;
        return TrialStep::Opened;
    }
    let elapsed = Duration::from_secs(now.saturating_sub(t.since));
    let seen = Seen { ready, restarts: restarts.saturating_sub(t.restarts_before) };
    match judge::judge(t.policy, elapsed, seen) {
        Verdict::OnTrial => TrialStep::Nothing,
        Verdict::Keep => {
            let uid = t.version.uid.clone();
            r.good = r.trial.take().map(|t| t.version);
            TrialStep::Kept { uid }
        }
        Verdict::RollBack(why) => {
            let uid = t.version.uid.clone();
            r.bad = Some((uid.clone(), why.clone()));
            r.trial = None;
            TrialStep::RolledBack { uid, why }
        }
    }
}

#[cfg(test)]
#[path = "record_tests.rs"]
mod tests;
