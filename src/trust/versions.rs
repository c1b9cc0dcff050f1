//! Anti-rollback: the newest signed version atoll accepted for each item (a pod, a ConfigMap,
//! a Secret, the URL's payload as a whole), kept on disk (`<root-dir>/trust/*-versions.json`,
//! root only), so an older signed payload, replayed by whoever can write the directory or
//! answer the URL, is refused even after a restart.
//!
//! A version is `(scheme, number)`: `serial=N` or minisign's `timestamp:N`, compared only
//! within a scheme. Serials win over timestamps: an item may move from timestamps to serials
//! (an explicit version is a fleet's deliberate choice), never back, so an old default-signed
//! file cannot be replayed over serials, nor freeze them. An unsigned payload is older than any
//! signed version: an item once signed stays signed. [`decide`] is the whole decision for one
//! scan or one poll (pure: the refusals and the record to write); [`Versions::decide`] commits
//! it, and a record that cannot be written refuses what would have raised it (fail closed).
//!
//! Records written before versions had schemes (`{"pods":{"ns/name":N}}`, or an item whose
//! scheme is `unknown`) are migrated when loaded by [`legacy_version`]: a number that can only
//! be a Unix time is a timestamp, anything else a serial.

use std::collections::BTreeMap;
use std::fmt;
use std::path::PathBuf;

/// How a signature numbers its versions.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Scheme {
    /// `serial=N` in the trusted comment.
    Serial,
    /// minisign's own `timestamp:N`.
    Timestamp,
    /// A number recorded by an atoll that did not record the scheme. Only read from disk:
    /// [`Versions::open`] migrates it to one of the others ([`legacy_version`]).
    Unknown,
}

/// A signed version.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Version {
    pub scheme: Scheme,
    pub number: u64,
}

impl Version {
    pub fn serial(number: u64) -> Version {
        Version { scheme: Scheme::Serial, number }
    }

    pub fn timestamp(number: u64) -> Version {
        Version { scheme: Scheme::Timestamp, number }
    }

    /// Whether this version may replace `recorded` (is not older).
    pub fn supersedes(self, recorded: Version) -> bool {
        match (self.scheme, recorded.scheme) {
            (Scheme::Timestamp, Scheme::Serial) => false,
            (Scheme::Serial, Scheme::Timestamp) => true,
            _ => self.number >= recorded.number,
        }
    }
}

impl fmt::Display for Version {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.scheme {
            Scheme::Serial => write!(f, "serial={}", self.number),
            Scheme::Timestamp => write!(f, "timestamp:{}", self.number),
            Scheme::Unknown => write!(f, "version {}", self.number),
        }
    }
}

/// The earliest number taken for a Unix time: 2001-09-09 (10^9). minisign has written
/// `timestamp:N` since long after; a counter-style serial (`serial=8`) is far below it.
pub const FIRST_PLAUSIBLE_TIME: u64 = 1_000_000_000;

/// A time this code was written after (2026-11-27): a box whose clock is behind (no RTC, no
/// NTP yet) still reads a timestamp recorded before this release as one.
const RELEASED: u64 = 1_795_800_000;

/// Slack for a signer's clock ahead of the box's.
const CLOCK_SLACK: u64 = 86_400;

/// What a number recorded without a scheme was, read at Unix time `now`: a timestamp when it
/// can only be a Unix time, between [`FIRST_PLAUSIBLE_TIME`] and now (or this release, if the
/// clock is behind) plus a day; a serial otherwise. A timestamp was a signing time, so it is
/// not in the future; a date-style serial (`2026112801`) is, and stays a serial. A serial that
/// is itself a past Unix time (`serial=$(date +%s)`) reads as a timestamp: serials win over
/// timestamps, so the fleet's next serial is taken, as is (once, until that next one) an older
/// serial-signed file replayed before it.
pub fn legacy_version(number: u64, now: u64) -> Version {
    let latest = now.max(RELEASED).saturating_add(CLOCK_SLACK);
    match (FIRST_PLAUSIBLE_TIME..=latest).contains(&number) {
        true => Version::timestamp(number),
        false => Version::serial(number),
    }
}

/// Why `version` of `item` may not replace `recorded` (`None`: it may).
pub fn refusal(item: &str, version: Option<Version>, recorded: Version) -> Option<String> {
    match version {
        None => Some(format!("unsigned, but {item} was signed before ({recorded} accepted); it stays signed")),
        Some(v) if v.supersedes(recorded) => None,
        Some(v) if v.scheme == Scheme::Timestamp && recorded.scheme == Scheme::Serial => Some(format!(
            "signed with {v}, but {item} is versioned by serial ({recorded} accepted): a timestamp cannot be compared with it (sign with serial={} or higher)",
            recorded.number.saturating_add(1)
        )),
        Some(v) => Some(format!(
            "version {v} of {item} is older than {recorded}, accepted before (a replayed manifest is refused)"
        )),
    }
}

/// What one payload defines and the version its signature gives (`None`: unsigned).
pub struct Claim {
    pub items: Vec<String>,
    pub version: Option<Version>,
}

#[derive(Debug, Default)]
pub struct Versions {
    path: Option<PathBuf>,
    newest: BTreeMap<String, Version>,
}

#[derive(serde::Serialize, serde::Deserialize, Default)]
struct Record {
    #[serde(default)]
    items: BTreeMap<String, Version>,
    /// Written by atoll before versions had schemes: pods by `namespace/name`.
    #[serde(default, skip_serializing)]
    pods: BTreeMap<String, u64>,
}

impl Versions {
    /// The record at `path` (none yet: empty); `None` keeps it in memory only.
    /// Numbers recorded without a scheme are migrated ([`legacy_version`]) and written back.
    pub fn open(path: Option<PathBuf>) -> Versions {
        let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs());
        let record = path.as_deref().and_then(crate::records::read::<Record>).unwrap_or_default();
        let (newest, legacy) = migrate(record, now);
        let versions = Versions { path, newest };
        if legacy {
            if let Err(e) = versions.write(&versions.newest) {
                // Migrated again at the next start; the records in memory are the same.
                log::warn!("signed manifests: cannot write the migrated version record: {e}");
            }
        }
        versions
    }

    /// Why the payload `claim` may not be used now (`None`: it may). Checks a copy that was
    /// accepted before (kept on disk, the last valid one, the URL's cache) as well as a new one.
    pub fn check(&self, claim: &Claim) -> Option<String> {
        check(&self.newest, claim)
    }

    /// The trust decision for every payload of one scan (or poll) at once ([`decide`]), then
    /// its commit: the raised record is written before any payload is used. Returns, per
    /// claim, why it is refused. When the record cannot be written, every payload that would
    /// have raised it is refused too (fail closed).
    pub fn decide(&mut self, claims: &[Claim]) -> Vec<Option<String>> {
        let decision = decide(&self.newest, claims);
        self.commit(decision)
    }

    /// Writes `decision`'s record (if it changed) and returns its refusals; when the write
    /// fails, nothing that needed the record is taken and the record in memory stays.
    fn commit(&mut self, decision: Decision) -> Vec<Option<String>> {
        let Decision { mut refused, record, needs_record } = decision;
        let Some(record) = record else { return refused };
        if let Err(e) = self.write(&record) {
            for (r, _) in refused.iter_mut().zip(&needs_record).filter(|(_, needs)| **needs) {
                *r = Some(format!("cannot record its signed version ({e}); refused until it can be"));
            }
            return refused;
        }
        self.newest = record;
        refused
    }

    fn write(&self, items: &BTreeMap<String, Version>) -> std::io::Result<()> {
        match &self.path {
            Some(path) => crate::records::write(path, &Record { items: items.clone(), pods: BTreeMap::new() }),
            None => Ok(()),
        }
    }
}

/// The items of `record` with every number recorded without a scheme migrated, read at `now`,
/// and whether any was (the record is then written back). Pure.
fn migrate(record: Record, now: u64) -> (BTreeMap<String, Version>, bool) {
    let legacy = !record.pods.is_empty() || record.items.values().any(|v| v.scheme == Scheme::Unknown);
    let mut newest: BTreeMap<String, Version> = record
        .items
        .into_iter()
        .map(|(item, v)| (item, if v.scheme == Scheme::Unknown { legacy_version(v.number, now) } else { v }))
        .collect();
    for (pod, number) in record.pods {
        newest.entry(format!("pod {pod}")).or_insert(legacy_version(number, now));
    }
    (newest, legacy)
}

/// Why `claim` may not replace what `record` holds for its items (`None`: it may).
fn check(record: &BTreeMap<String, Version>, claim: &Claim) -> Option<String> {
    claim.items.iter().find_map(|i| refusal(i, claim.version, *record.get(i)?))
}

/// What one scan's (or poll's) claims come to against the record `newest`: pure.
#[derive(Debug, PartialEq)]
pub struct Decision {
    /// Per claim, why it is refused once `record` is written.
    pub refused: Vec<Option<String>>,
    /// The record to write before any payload is used (`None`: it stays as it is).
    pub record: Option<BTreeMap<String, Version>>,
    /// Per claim, whether it raises the record (refused, fail closed, if it cannot be written).
    pub needs_record: Vec<bool>,
}

/// Each claim is refused when it is older than what `newest` records for any of its items, or
/// than another claim of the same scan that defines one of them; the others' versions raise
/// the record.
pub fn decide(newest: &BTreeMap<String, Version>, claims: &[Claim]) -> Decision {
    let first: Vec<Option<String>> = claims.iter().map(|c| check(newest, c)).collect();
    let mut raised = newest.clone();
    for (c, _) in claims.iter().zip(&first).filter(|(_, r)| r.is_none()) {
        let Some(v) = c.version else { continue };
        for item in &c.items {
            if raised.get(item).is_none_or(|r| v.supersedes(*r) && v != *r) {
                raised.insert(item.clone(), v);
            }
        }
    }
    let needs_record: Vec<bool> = claims
        .iter()
        .zip(&first)
        .map(|(c, r)| r.is_none() && c.items.iter().any(|i| raised.get(i) != newest.get(i)))
        .collect();
    let refused = claims.iter().zip(first).map(|(c, r)| r.or_else(|| check(&raised, c))).collect();
    let record = (raised != *newest).then_some(raised);
    Decision { refused, record, needs_record }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn claim(items: &[&str], version: Option<Version>) -> Claim {
        Claim { items: items.iter().map(|s| s.to_string()).collect(), version }
    }

    fn dir(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("atoll-versions-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        d
    }

    #[test]
    fn an_older_version_is_refused_also_after_a_restart() {
        let d = dir("restart");
        let path = d.join("trust").join("versions.json");
        let mut v = Versions::open(Some(path.clone()));
        assert_eq!(v.decide(&[claim(&["pod default/web"], Some(Version::serial(5)))]), [None]);
        assert_eq!(v.decide(&[claim(&["pod default/web"], Some(Version::serial(5)))]), [None], "the same again");
        assert_eq!(v.decide(&[claim(&["pod default/db"], Some(Version::serial(1)))]), [None], "per item");
        let again = Versions::open(Some(path.clone()));
        let e = again.check(&claim(&["pod default/web"], Some(Version::serial(4)))).unwrap();
        assert!(e.contains("version serial=4 of pod default/web is older than serial=5, accepted"), "{e}");
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(std::fs::metadata(&path).unwrap().permissions().mode() & 0o777, 0o600);
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn serials_and_timestamps_are_compared_only_within_their_scheme() {
        let mut v = Versions::open(None);
        let web = |version| claim(&["pod default/web"], version);
        // Timestamps first (minisign's default), then the fleet moves to serials.
        assert_eq!(v.decide(&[web(Some(Version::timestamp(1_795_000_000)))]), [None]);
        assert_eq!(v.decide(&[web(Some(Version::serial(7)))]), [None], "serials replace timestamps");
        // A replayed default-signed file is refused (it cannot be compared), and does not
        // freeze the serials: serial=8 still goes.
        let e = v.decide(&[web(Some(Version::timestamp(1_800_000_000)))]).remove(0).unwrap();
        assert!(e.contains("versioned by serial (serial=7 accepted)") && e.contains("serial=8 or higher"), "{e}");
        assert_eq!(v.decide(&[web(Some(Version::serial(8)))]), [None]);
        // An unsigned version of a signed item is older than any signed one.
        assert!(v.decide(&[web(None)]).remove(0).unwrap().contains("was signed before (serial=8 accepted)"));
        assert_eq!(v.decide(&[claim(&["pod default/other"], None)]), [None], "never signed: fine");
    }

    #[test]
    fn one_decision_per_scan_refuses_the_older_copy_of_a_newer_payload() {
        let mut v = Versions::open(None);
        let web = |n| claim(&["pod default/web", "configmap default/web"], Some(Version::serial(n)));
        // The current file copied under another name: both version 6, both fine.
        assert_eq!(v.decide(&[web(6), web(6)]), [None, None]);
        // The fleet signs 7: the copy still at 6 is refused in the same scan, whatever the order.
        let got = v.decide(&[web(6), web(7)]);
        assert!(got[0].as_ref().unwrap().contains("serial=6 of pod default/web is older than serial=7"), "{got:?}");
        assert_eq!(got[1], None);
        // A payload is refused whole: one of its items older is enough.
        let mixed = claim(&["pod default/new", "configmap default/web"], Some(Version::serial(6)));
        assert!(v.decide(&[mixed]).remove(0).unwrap().contains("configmap default/web"));
        assert!(v.check(&claim(&["pod default/new"], Some(Version::serial(6)))).is_none(), "nothing was recorded");
    }

    #[test]
    fn a_record_that_cannot_be_written_refuses_what_would_raise_it() {
        let d = dir("readonly");
        std::fs::create_dir_all(&d).unwrap();
        // Where the record should go is a file: the write fails.
        std::fs::write(d.join("trust"), b"").unwrap();
        let mut v = Versions::open(Some(d.join("trust").join("versions.json")));
        let got = v.decide(&[claim(&["pod default/web"], Some(Version::serial(3))), claim(&["pod default/u"], None)]);
        assert!(got[0].as_ref().unwrap().starts_with("cannot record its signed version"), "{got:?}");
        assert_eq!(got[1], None, "an unsigned pod needs no record");
        assert!(v.check(&claim(&["pod default/web"], Some(Version::serial(1)))).is_none(), "nothing recorded");
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn the_pure_decision_returns_the_refusals_and_the_record_to_write() {
        let s = Version::serial;
        let rec = |items: &[(&str, Version)]| -> BTreeMap<String, Version> {
            items.iter().map(|(i, v)| (i.to_string(), *v)).collect()
        };
        let web = "pod default/web";
        let db = "pod default/db";
        // (what, recorded, claims, refused (substring or ""), record to write, needs_record)
        type Case<'a> = (
            &'a str,
            BTreeMap<String, Version>,
            Vec<Claim>,
            Vec<&'a str>,
            Option<BTreeMap<String, Version>>,
            Vec<bool>,
        );
        let cases: Vec<Case<'_>> = vec![
            ("nothing claimed", rec(&[(web, s(2))]), vec![], vec![], None, vec![]),
            (
                "a new item is recorded",
                rec(&[]),
                vec![claim(&[web], Some(s(1)))],
                vec![""],
                Some(rec(&[(web, s(1))])),
                vec![true],
            ),
            (
                "the same version: no write",
                rec(&[(web, s(2))]),
                vec![claim(&[web], Some(s(2)))],
                vec![""],
                None,
                vec![false],
            ),
            (
                "a newer one raises",
                rec(&[(web, s(2))]),
                vec![claim(&[web], Some(s(3)))],
                vec![""],
                Some(rec(&[(web, s(3))])),
                vec![true],
            ),
            (
                "an older one is refused",
                rec(&[(web, s(2))]),
                vec![claim(&[web], Some(s(1)))],
                vec!["serial=1 of pod default/web is older than serial=2"],
                None,
                vec![false],
            ),
            ("unsigned, never signed", rec(&[]), vec![claim(&[web], None)], vec![""], None, vec![false]),
            (
                "unsigned, once signed",
                rec(&[(web, s(2))]),
                vec![claim(&[web], None)],
                vec!["was signed before"],
                None,
                vec![false],
            ),
            (
                "the older copy in one scan",
                rec(&[(web, s(5))]),
                vec![claim(&[web], Some(s(6))), claim(&[web], Some(s(7)))],
                vec!["serial=6 of pod default/web is older than serial=7", ""],
                Some(rec(&[(web, s(7))])),
                vec![true, true],
            ),
            (
                "one refused item refuses the payload, which raises nothing",
                rec(&[(web, s(5))]),
                vec![claim(&[db, web], Some(s(4))), claim(&[db], Some(s(1)))],
                vec!["pod default/web is older", ""],
                Some(rec(&[(web, s(5)), (db, s(1))])),
                vec![false, true],
            ),
        ];
        for (what, recorded, claims, want_refused, want_record, want_needs) in cases {
            let d = decide(&recorded, &claims);
            assert_eq!(d.refused.len(), want_refused.len(), "{what}");
            for (got, want) in d.refused.iter().zip(&want_refused) {
                match (got, want.is_empty()) {
                    (None, true) => {}
                    (Some(g), false) => assert!(g.contains(want), "{what}: {g}"),
                    _ => panic!("{what}: got {got:?}, want {want:?}"),
                }
            }
            assert_eq!(d.record, want_record, "{what}");
            assert_eq!(d.needs_record, want_needs, "{what}");
        }
    }

    #[test]
    fn migration_is_pure_and_says_whether_the_record_must_be_written_back() {
        let now = 1_800_000_000;
        // (what, the record as read, its items migrated, whether it is written back)
        type Case<'a> = (&'a str, &'a str, &'a [(&'a str, Version)], bool);
        let cases: &[Case<'_>] = &[
            ("empty", "{}", &[], false),
            (
                "current",
                r#"{"items":{"pod a/b":{"scheme":"serial","number":3}}}"#,
                &[("pod a/b", Version::serial(3))],
                false,
            ),
            (
                "unknown scheme",
                r#"{"items":{"pod a/b":{"scheme":"unknown","number":3}}}"#,
                &[("pod a/b", Version::serial(3))],
                true,
            ),
            ("pods by name", r#"{"pods":{"a/b":1795000000}}"#, &[("pod a/b", Version::timestamp(1_795_000_000))], true),
        ];
        for &(what, json, want, legacy) in cases {
            let record: Record = serde_json::from_str(json).unwrap();
            let want: BTreeMap<String, Version> = want.iter().map(|(i, v)| (i.to_string(), *v)).collect();
            assert_eq!(migrate(record, now), (want, legacy), "{what}");
        }
    }

    #[test]
    fn a_number_recorded_without_a_scheme_is_a_timestamp_only_if_it_can_only_be_a_unix_time() {
        let now = 1_800_000_000; // 2027-01-15
        let cases: &[(u64, u64, Version, &str)] = &[
            (0, now, Version::serial(0), "zero"),
            (8, now, Version::serial(8), "a counter"),
            (20_261_128, now, Version::serial(20_261_128), "YYYYMMDD"),
            (999_999_999, now, Version::serial(999_999_999), "just before 2001-09-09"),
            (FIRST_PLAUSIBLE_TIME, now, Version::timestamp(FIRST_PLAUSIBLE_TIME), "2001-09-09"),
            (1_795_000_000, now, Version::timestamp(1_795_000_000), "minisign's default, last year"),
            (now, now, Version::timestamp(now), "signed just now"),
            (now + 86_400, now, Version::timestamp(now + 86_400), "a signer's clock a day ahead"),
            (now + 86_401, now, Version::serial(now + 86_401), "in the future: not a signing time"),
            (2_026_112_801, now, Version::serial(2_026_112_801), "YYYYMMDDNN"),
            (u64::MAX, now, Version::serial(u64::MAX), "the largest"),
            // A clock still at 1970 (no RTC): this release's date bounds it instead.
            (1_795_000_000, 0, Version::timestamp(1_795_000_000), "clock behind"),
            (RELEASED + 86_400, 0, Version::timestamp(RELEASED + 86_400), "clock behind, a day's slack"),
            (2_000_000_000, 0, Version::serial(2_000_000_000), "clock behind, future"),
        ];
        for &(number, now, want, what) in cases {
            assert_eq!(legacy_version(number, now), want, "{what}: {number} at {now}");
        }
    }

    #[test]
    fn a_record_from_before_schemes_is_migrated_and_written_back() {
        let d = dir("legacy");
        let path = d.join("file-versions.json");
        std::fs::create_dir_all(&d).unwrap();
        // As the release before schemes wrote it: a minisign timestamp and a serial; and an
        // item this release's predecessor wrote with scheme "unknown".
        std::fs::write(&path, br#"{"pods":{"default/web":1795000000,"default/db":5}}"#).unwrap();
        let v = Versions::open(Some(path.clone()));
        let web = |version| claim(&["pod default/web"], Some(version));
        assert!(v.check(&web(Version::serial(1))).is_none(), "timestamps to serials: serial=1 is taken");
        assert!(v.check(&web(Version::timestamp(1_794_999_999))).is_some(), "an older timestamp is not");
        assert!(v.check(&claim(&["pod default/db"], Some(Version::serial(4)))).is_some());
        assert!(v.check(&claim(&["pod default/db"], Some(Version::serial(5)))).is_none());
        let written = std::fs::read_to_string(&path).unwrap();
        assert!(written.contains(r#""pod default/web":{"scheme":"timestamp","number":1795000000}"#), "{written}");
        assert!(!written.contains("pods"), "{written}");
        std::fs::write(&path, br#"{"items":{"pod default/web":{"scheme":"unknown","number":1795000000}}}"#).unwrap();
        assert!(Versions::open(Some(path)).check(&web(Version::serial(1))).is_none());
        let _ = std::fs::remove_dir_all(&d);
    }
}
