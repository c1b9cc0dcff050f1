//! A record's transitions, snapshot by snapshot and look by look, with no disk and no node.

use super::*;

fn version(uid: &str) -> Version {
    Version { uid: uid.into(), file: Some("/m/web.yaml".into()), body: String::new(), signature: None }
}

fn policy() -> Policy {
    Policy { window: Duration::from_secs(60), max_restarts: 2 }
}

fn trial(uid: &str, since: u64) -> Trial {
    Trial { version: version(uid), since, policy: policy(), restarts_before: 1 }
}

fn record(good: Option<&str>, trial_of: Option<&str>, bad: Option<&str>) -> Record {
    Record {
        key: "default/web".into(),
        good: good.map(version),
        trial: trial_of.map(|u| trial(u, 0)),
        bad: bad.map(|u| (u.into(), "not Ready within 60s".to_string())),
    }
}

/// (record, uid in the snapshot, policy, the good version opens, what comes, the record after)
type Case = (Record, &'static str, Option<Policy>, bool, Admitted, Record);

#[test]
fn a_snapshot_rolls_back_keeps_or_puts_a_version_on_trial() {
    let new_trial = |uid: &'static str| move |p: Policy| Some(Trial { policy: p, ..trial(uid, 0) });
    let none = |_: Policy| -> Option<Trial> { None };
    let cases: Vec<Case> = vec![
        // The bad version again: the good one runs in its place.
        (
            record(Some("v1"), None, Some("v2")),
            "v2",
            Some(policy()),
            true,
            Admitted::RolledBack,
            record(Some("v1"), None, Some("v2")),
        ),
        // ... unless the good one cannot be opened again: the source's version, no new trial.
        (
            record(Some("v1"), None, Some("v2")),
            "v2",
            Some(policy()),
            false,
            Admitted::Unchanged,
            record(Some("v1"), None, Some("v2")),
        ),
        // The source changed again: the bad mark goes and the new content is tried.
        (
            record(Some("v1"), None, Some("v2")),
            "v3",
            Some(policy()),
            false,
            Admitted::OnTrial,
            Record { trial: Some(trial("v3", 0)), ..record(Some("v1"), None, None) },
        ),
        // No policy: forgotten.
        (
            record(Some("v1"), Some("v2"), None),
            "v2",
            None,
            false,
            Admitted::NoPolicy,
            Record::empty(&"default/web".into()),
        ),
        // Back to the good version: the trial of another is over.
        (
            record(Some("v1"), Some("v2"), None),
            "v1",
            Some(policy()),
            false,
            Admitted::Unchanged,
            record(Some("v1"), None, None),
        ),
        // The version on trial again: the trial goes on.
        (
            record(Some("v1"), Some("v2"), None),
            "v2",
            Some(policy()),
            false,
            Admitted::Unchanged,
            record(Some("v1"), Some("v2"), None),
        ),
        // The first version under a policy.
        (record(None, None, None), "v1", Some(policy()), false, Admitted::First, record(None, None, None)),
    ];
    for (i, (r, uid, p, opens, admitted, after)) in cases.into_iter().enumerate() {
        let (got, what) = admit(r, uid, p, opens, new_trial("v3"));
        assert_eq!((what, got), (admitted, after), "case {i}");
    }
    // A new version whose payload is unknown cannot be tried.
    let (r, what) = admit(record(Some("v1"), None, None), "v9", Some(policy()), false, none);
    assert_eq!((what, r.trial), (Admitted::OnTrial, None));
}

#[test]
fn a_trial_opens_when_its_pod_runs_then_is_kept_or_rolled_back() {
    let mut r = record(Some("v1"), Some("v2"), None);
    assert_eq!(advance_trial(&mut r, None, 1000), TrialStep::Nothing, "its pod shows nothing yet");
    assert_eq!(advance_trial(&mut r, Some((false, 1)), 1000), TrialStep::Opened);
    assert_eq!(r.trial.as_ref().map(|t| t.since), Some(1000));
    assert_eq!(advance_trial(&mut r, Some((false, 3)), 1030), TrialStep::Nothing, "two restarts since: allowed");
    let mut kept = r.clone();
    assert_eq!(advance_trial(&mut kept, Some((true, 3)), 1060), TrialStep::Kept { uid: "v2".into() });
    assert_eq!((kept.good.map(|g| g.uid), kept.trial), (Some("v2".into()), None));
    let mut late = r.clone();
    let step = advance_trial(&mut late, Some((false, 3)), 1061);
    assert_eq!(step, TrialStep::RolledBack { uid: "v2".into(), why: "not Ready within 60s".into() });
    assert_eq!(
        (late.good.map(|g| g.uid), late.trial, late.bad.map(|b| b.0)),
        (Some("v1".into()), None, Some("v2".into()))
    );
    // Three restarts since the trial began (four in all): rolled back before the window ends.
    let mut crashing = r.clone();
    assert!(matches!(advance_trial(&mut crashing, Some((true, 4)), 1010), TrialStep::RolledBack { .. }));
    // No trial: nothing to do.
    assert_eq!(advance_trial(&mut record(Some("v1"), None, None), Some((true, 0)), 1000), TrialStep::Nothing);
}

#[test]
fn a_record_reads_and_writes_byte_for_byte_as_before_its_keys_were_typed() {
    // As an atoll with `String` keys wrote it.
    let json = r#"{"key":"default/web","good":{"uid":"u1","file":"/m/w.yaml","body":"YQ==","signature":null},"trial":null,"bad":["u2","not Ready within 60s"]}"#;
    let r: Record = serde_json::from_str(json).unwrap();
    assert_eq!((r.key.as_str(), r.good.as_ref().map(|g| g.uid.as_str())), ("default/web", Some("u1")));
    assert_eq!(serde_json::to_string(&r).unwrap(), json);
}
