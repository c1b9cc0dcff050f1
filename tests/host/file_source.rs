//! The file source on real directories with real inotify: what an operator does to a
//! manifest directory, and what atoll makes of it.

use crate::common::signing;

use atoll::pod::Policy;
use atoll::source::file::{self, FileSourceConfig};
use atoll::source::payload::Intake;
use atoll::source::{SourceId, Update};
use atoll::trust::Trust;
use smol::channel::Receiver;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// A temporary manifest directory and a running file source on it.
struct Bed {
    dir: PathBuf,
    rx: Receiver<Update>,
    _task: smol::Task<()>,
}

impl Drop for Bed {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn tempdir(name: &str) -> crate::common::Scratch {
    crate::common::Scratch::new(&format!("file-source-{name}"))
}

/// Starts a source on `path` (which may not exist yet). The periodic rescan is long (60 s),
/// so every update a test sees within seconds came from inotify.
fn start(dir: PathBuf, path: PathBuf) -> Bed {
    start_trusting(dir, path, None, None)
}

/// [`start`] with signed manifests trusted (`trust`), the accepted versions kept at `versions`.
fn start_trusting(dir: PathBuf, path: PathBuf, trust: Option<Trust>, versions: Option<PathBuf>) -> Bed {
    start_keeping(dir, path, trust, versions, None)
}

/// [`start_trusting`], the last valid version of each file kept in `kept`.
fn start_keeping(
    dir: PathBuf,
    path: PathBuf,
    trust: Option<Trust>,
    versions: Option<PathBuf>,
    kept: Option<PathBuf>,
) -> Bed {
    let (tx, rx) = smol::channel::bounded(64);
    let cfg = FileSourceConfig {
        path,
        check_frequency: Duration::from_secs(60),
        intake: Intake { trust, node: "edge-1".into(), policy: Policy::default(), key: None },
        kept_dir: kept,
        versions,
        secrets: false,
    };
    let task = smol::spawn(file::run(cfg, tx));
    Bed { dir, rx, _task: task }
}

fn pod_yaml(name: &str, label: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\n  labels:\n    v: \"{label}\"\nspec:\n  containers:\n  - name: c\n    image: busybox:1.36\n"
    )
}

fn next(bed: &Bed) -> Update {
    smol::block_on(async {
        let timeout = async {
            smol::Timer::after(Duration::from_secs(5)).await;
            None
        };
        smol::future::or(async { bed.rx.recv().await.ok() }, timeout).await
    })
    .expect("an update within 5 s")
}

/// Asserts that no update arrives within `d`.
fn quiet(bed: &Bed, d: Duration) {
    let got = smol::block_on(async {
        let timeout = async {
            smol::Timer::after(d).await;
            None
        };
        smol::future::or(async { bed.rx.recv().await.ok() }, timeout).await
    });
    if let Some(u) = got {
        panic!("expected no update, got {:?}", names(&u));
    }
}

fn names(u: &Update) -> Vec<String> {
    u.pods.iter().map(|p| p.pod.metadata.name.clone()).collect()
}

fn uid_of(u: &Update, name: &str) -> String {
    u.pods.iter().find(|p| p.pod.metadata.name == name).map(|p| p.uid.to_string()).unwrap_or_default()
}

fn write(path: &Path, text: &str) {
    std::fs::write(path, text).unwrap();
}

#[test]
fn files_added_edited_and_deleted_become_snapshots() {
    let dir = tempdir("lifecycle");
    std::fs::create_dir_all(&dir).unwrap();
    write(&dir.join("a.yaml"), &pod_yaml("a", "1"));
    let bed = start(dir.to_path_buf(), dir.to_path_buf());
    let first = next(&bed);
    assert_eq!(first.source, SourceId::File);
    assert_eq!(names(&first), vec!["a-edge-1"]);
    let a1 = uid_of(&first, "a-edge-1");

    write(
        &dir.join("b.json"),
        r#"{"apiVersion":"v1","kind":"Pod","metadata":{"name":"b"},"spec":{"containers":[{"name":"c","image":"x:1"}]}}"#,
    );
    assert_eq!(names(&next(&bed)), vec!["a-edge-1", "b-edge-1"]);

    write(&dir.join("a.yaml"), &pod_yaml("a", "2"));
    let edited = next(&bed);
    assert_ne!(uid_of(&edited, "a-edge-1"), a1, "a semantic edit gives a new UID");

    // Re-formatting with the same meaning: no update at all.
    write(
        &dir.join("a.yaml"),
        &format!("# a comment\n{}", pod_yaml("a", "2").replace("  labels:\n    v: \"2\"", "  labels: {v: \"2\"}")),
    );
    quiet(&bed, Duration::from_millis(600));

    std::fs::remove_file(dir.join("b.json")).unwrap();
    assert_eq!(names(&next(&bed)), vec!["a-edge-1"]);
}

#[test]
fn an_atomic_replace_is_one_update_even_through_a_visible_temp_file() {
    let dir = tempdir("atomic");
    std::fs::create_dir_all(&dir).unwrap();
    write(&dir.join("a.yaml"), &pod_yaml("a", "1"));
    let bed = start(dir.to_path_buf(), dir.to_path_buf());
    let first = next(&bed);

    // What `sed -i` and many config tools do: a full copy under another (non-dot) name, then
    // a rename over the original.
    // The tool takes a moment between the two steps, as real ones can.
    let tmp = dir.join("sedXy12Z");
    write(&tmp, &pod_yaml("a", "2"));
    std::thread::sleep(Duration::from_millis(30));
    std::fs::rename(&tmp, dir.join("a.yaml")).unwrap();
    let u = next(&bed);
    assert_eq!(names(&u), vec!["a-edge-1"]);
    assert_ne!(uid_of(&u, "a-edge-1"), uid_of(&first, "a-edge-1"));
    assert_eq!(u.pods[0].origin.to_string(), dir.join("a.yaml").display().to_string(), "the pod belongs to a.yaml");
    quiet(&bed, Duration::from_millis(600));

    // And an editor's dot-file temp: likewise one update.
    let dot = dir.join(".a.yaml.swp");
    write(&dot, &pod_yaml("a", "3"));
    std::fs::rename(&dot, dir.join("a.yaml")).unwrap();
    assert_eq!(names(&next(&bed)), vec!["a-edge-1"]);
    quiet(&bed, Duration::from_millis(600));
}

#[test]
fn dot_files_sub_directories_and_other_files_are_not_pods() {
    let dir = tempdir("ignored");
    std::fs::create_dir_all(dir.join("sub")).unwrap();
    write(&dir.join("a.yaml"), &pod_yaml("a", "1"));
    write(&dir.join("sub/x.yaml"), &pod_yaml("x", "1"));
    let bed = start(dir.to_path_buf(), dir.to_path_buf());
    assert_eq!(names(&next(&bed)), vec!["a-edge-1"]);

    write(&dir.join(".hidden.yaml"), &pod_yaml("hidden", "1"));
    quiet(&bed, Duration::from_millis(600));
    write(&dir.join("sub/y.yaml"), &pod_yaml("y", "1"));
    quiet(&bed, Duration::from_millis(600));
    // A file that is not a manifest is an error of its own; the other pods stay.
    write(&dir.join("README.md"), "# notes\nnot a pod\n");
    let u = next(&bed);
    assert_eq!(names(&u), vec!["a-edge-1"]);
    assert_eq!(u.errors.len(), 1);
    assert!(u.errors[0].to_string().contains("README.md"), "{}", u.errors[0]);
}

#[test]
fn an_invalid_edit_keeps_the_last_valid_pod_and_reports_the_field() {
    let dir = tempdir("invalid-edit");
    std::fs::create_dir_all(&dir).unwrap();
    write(&dir.join("a.yaml"), &pod_yaml("a", "1"));
    write(&dir.join("b.yaml"), &pod_yaml("b", "1"));
    let bed = start(dir.to_path_buf(), dir.to_path_buf());
    let first = next(&bed);
    let a = uid_of(&first, "a-edge-1");

    write(&dir.join("a.yaml"), &pod_yaml("a", "1").replace("image: busybox:1.36", "image: \"\""));
    let u = next(&bed);
    assert_eq!(names(&u), vec!["a-edge-1", "b-edge-1"], "a keeps running in its last valid form");
    assert_eq!(uid_of(&u, "a-edge-1"), a);
    let err = u.errors.iter().map(|e| e.to_string()).collect::<Vec<_>>().join("\n");
    assert!(err.contains("a.yaml: spec.containers[0].image: an image is required"), "{err}");

    // Fixed again: the error goes, the pod follows the file.
    write(&dir.join("a.yaml"), &pod_yaml("a", "9"));
    let u = next(&bed);
    assert!(u.errors.is_empty());
    assert_ne!(uid_of(&u, "a-edge-1"), a);
}

#[test]
fn a_directory_created_later_is_picked_up() {
    let dir = tempdir("later");
    let bed = start(dir.to_path_buf(), dir.to_path_buf());
    let first = next(&bed);
    assert!(first.pods.is_empty(), "a missing directory is an empty snapshot");
    std::fs::create_dir_all(&dir).unwrap();
    write(&dir.join("a.yaml"), &pod_yaml("a", "1"));
    let u = next(&bed);
    let u = if u.pods.is_empty() { next(&bed) } else { u };
    assert_eq!(names(&u), vec!["a-edge-1"]);
    // And it is watched from then on.
    write(&dir.join("b.yaml"), &pod_yaml("b", "1"));
    assert_eq!(names(&next(&bed)), vec!["a-edge-1", "b-edge-1"]);
}

#[test]
fn a_single_manifest_file_can_be_the_path() {
    let dir = tempdir("single");
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("only.yaml");
    write(&file, &pod_yaml("only", "1"));
    write(&dir.join("other.yaml"), &pod_yaml("other", "1"));
    let bed = start(dir.to_path_buf(), file.clone());
    assert_eq!(names(&next(&bed)), vec!["only-edge-1"]);
    write(&dir.join("other.yaml"), &pod_yaml("other", "2"));
    quiet(&bed, Duration::from_millis(600));
    write(&file, &pod_yaml("only", "2"));
    assert_eq!(names(&next(&bed)), vec!["only-edge-1"]);
}

#[test]
fn the_same_pod_in_two_files_goes_to_the_lexically_last() {
    let dir = tempdir("dup");
    std::fs::create_dir_all(&dir).unwrap();
    write(&dir.join("1-a.yaml"), &pod_yaml("a", "first"));
    write(&dir.join("2-a.yaml"), &pod_yaml("a", "second"));
    let bed = start(dir.to_path_buf(), dir.to_path_buf());
    let u = next(&bed);
    assert_eq!(names(&u), vec!["a-edge-1"]);
    assert_eq!(u.pods[0].pod.metadata.labels["v"], "second");
    assert!(u.pods[0].origin.to_string().ends_with("2-a.yaml"));
}

/// Writes `text` to `file` with its signature by key `name` made first (beside it, via
/// `keys`), trusted comment `serial=N`, so the source sees the pair whole.
fn write_signed(keys: &Path, file: &Path, text: &str, name: &str, serial: u32) {
    let mut sig = file.as_os_str().to_owned();
    sig.push(".minisig");
    std::fs::write(keys.join("staged.minisig"), signing::sign(keys, text, name, serial)).unwrap();
    std::fs::rename(keys.join("staged.minisig"), &sig).unwrap();
    std::fs::write(keys.join("staged"), text).unwrap();
    std::fs::rename(keys.join("staged"), file).unwrap();
}

/// Updates until one satisfies `ok` (a plain write can show a half-written file first).
fn until(bed: &Bed, ok: impl Fn(&Update) -> bool) -> Update {
    loop {
        let u = next(bed);
        if ok(&u) {
            return u;
        }
    }
}

fn errors(u: &Update) -> String {
    u.errors.iter().map(|e| e.to_string()).collect::<Vec<_>>().join("\n")
}

#[test]
fn only_manifests_signed_by_a_trusted_key_run_and_older_signed_versions_are_refused() {
    let dir = tempdir("signed");
    let keys = dir.with_extension("keys");
    let _ = std::fs::remove_dir_all(&keys);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::create_dir_all(&keys).unwrap();
    let fleet = signing::key(&keys, "fleet");
    let other = signing::key(&keys, "other");
    let trust = Trust { keys: vec![fleet], require: true };
    let versions = keys.join("state").join("versions.json");
    write_signed(&keys, &dir.join("a.yaml"), &pod_yaml("a", "1"), "fleet", 1);
    let bed = start_trusting(dir.to_path_buf(), dir.to_path_buf(), Some(trust.clone()), Some(versions.clone()));
    let first = next(&bed);
    assert_eq!(names(&first), vec!["a-edge-1"], "{}", errors(&first));
    let a1 = uid_of(&first, "a-edge-1");

    // Unsigned, and signed by a key that is not trusted: errors naming the file and the key.
    write(&dir.join("b.yaml"), &pod_yaml("b", "1"));
    let u = until(&bed, |u| errors(u).contains("b.yaml"));
    assert_eq!(names(&u), vec!["a-edge-1"]);
    assert!(errors(&u).contains("signature: unsigned: no b.yaml.minisig"), "{}", errors(&u));
    write_signed(&keys, &dir.join("c.yaml"), &pod_yaml("c", "1"), "other", 1);
    let u = until(&bed, |u| errors(u).contains("c.yaml"));
    assert_eq!(names(&u), vec!["a-edge-1"]);
    let e = errors(&u);
    assert!(e.contains(&format!("c.yaml.minisig: signed by key {}, which is not trusted", other.id())), "{e}");

    // Altered after signing: refused, the last valid version keeps running.
    write(&dir.join("a.yaml"), &pod_yaml("a", "2"));
    let u = until(&bed, |u| errors(u).contains("does not match the content"));
    assert_eq!(uid_of(&u, "a-edge-1"), a1, "the last valid version of a stays");

    // A newer signed version runs; the older one, replayed with its own good signature, does not.
    write_signed(&keys, &dir.join("a.yaml"), &pod_yaml("a", "1"), "fleet", 1);
    until(&bed, |u| !errors(u).contains("a.yaml"));
    let old_sig = std::fs::read(dir.join("a.yaml.minisig")).unwrap();
    write_signed(&keys, &dir.join("a.yaml"), &pod_yaml("a", "3"), "fleet", 3);
    let u = until(&bed, |u| uid_of(u, "a-edge-1") != a1);
    let a3 = uid_of(&u, "a-edge-1");
    assert!(!a3.is_empty() && !errors(&u).contains("a.yaml"), "{}", errors(&u));
    std::fs::write(keys.join("replay.minisig"), &old_sig).unwrap();
    std::fs::write(keys.join("replay.yaml"), pod_yaml("a", "1")).unwrap();
    std::fs::rename(keys.join("replay.minisig"), dir.join("a.yaml.minisig")).unwrap();
    std::fs::rename(keys.join("replay.yaml"), dir.join("a.yaml")).unwrap();
    let u = until(&bed, |u| errors(u).contains("older"));
    assert_eq!(uid_of(&u, "a-edge-1"), a3, "version 3 keeps running");
    assert!(errors(&u).contains("version serial=1 of pod default/a-edge-1 is older than serial=3"), "{}", errors(&u));
    drop(bed);

    // After a restart the replay is still refused (the versions are on disk).
    std::fs::create_dir_all(&dir).unwrap();
    write_signed(&keys, &dir.join("a.yaml"), &pod_yaml("a", "1"), "fleet", 1);
    let bed = start_trusting(dir.to_path_buf(), dir.to_path_buf(), Some(trust), Some(versions));
    let u = next(&bed);
    assert!(names(&u).is_empty() && errors(&u).contains("older than serial=3"), "{:?} {}", names(&u), errors(&u));
    drop(bed);
    let _ = std::fs::remove_dir_all(&keys);
}

/// A directory writer without the key: signed files copied, kept copies and objects.
struct Writer {
    dir: crate::common::Scratch,
    keys: PathBuf,
    trust: Trust,
}

impl Writer {
    fn new(name: &str) -> Writer {
        let dir = tempdir(name);
        let keys = dir.with_extension("keys");
        let _ = std::fs::remove_dir_all(&keys);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::create_dir_all(&keys).unwrap();
        let trust = Trust { keys: vec![signing::key(&keys, "fleet")], require: true };
        Writer { dir, keys, trust }
    }

    /// A source on the directory as atoll runs it: versions and kept copies on "disk". The
    /// directory outlives the source (a restart is a new source on the same directory).
    fn start(&self, trust: Option<Trust>) -> Bed {
        let (versions, kept) = (self.keys.join("state/versions.json"), self.keys.join("state/files"));
        start_keeping(self.keys.join("scratch"), self.dir.to_path_buf(), trust, Some(versions), Some(kept))
    }

    /// Waits until a kept copy holds `text` (the source keeps them just after it sends the
    /// update: a restart at once could come before).
    fn kept_holds(&self, text: &str) {
        let holds = || {
            let Ok(entries) = std::fs::read_dir(self.keys.join("state/files")) else { return false };
            // Records only: not a temporary file, which holds the text before its fsync and rename.
            let records = entries.filter_map(|e| e.ok()).filter(|e| !e.file_name().to_string_lossy().starts_with('.'));
            records.filter_map(|e| std::fs::read(e.path()).ok()).any(|bytes| {
                serde_json::from_slice::<serde_json::Value>(&bytes)
                    .is_ok_and(|v| v["body"].as_str().is_some_and(|b| b.contains(text)))
            })
        };
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        while !holds() {
            assert!(std::time::Instant::now() < deadline, "no kept copy holds {text:?}");
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// Copies `from` (and its signature) to `to`, as anyone who can write the directory can.
    fn copy(&self, from: &str, to: &str) {
        for suffix in ["", ".minisig"] {
            let staged = self.keys.join("copy");
            std::fs::copy(self.dir.join(format!("{from}{suffix}")), &staged).unwrap();
            std::fs::rename(&staged, self.dir.join(format!("{to}{suffix}"))).unwrap();
        }
    }
}

impl Drop for Writer {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.keys);
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

#[test]
fn a_copy_of_a_signed_file_under_a_later_name_cannot_hold_back_the_next_version() {
    let w = Writer::new("copy-later");
    let web = |v: &str| pod_yaml("web", v);
    write_signed(&w.keys, &w.dir.join("web.yaml"), &web("6"), "fleet", 6);
    let bed = w.start(Some(w.trust.clone()));
    assert_eq!(names(&next(&bed)), vec!["web-edge-1"]);
    // The current version copied under a name that sorts later: it wins by name order...
    w.copy("web.yaml", "zz-web.yaml");
    let u = until(&bed, |u| u.pods.iter().any(|p| p.origin.to_string().ends_with("zz-web.yaml")));
    assert_eq!(names(&u), vec!["web-edge-1"]);
    // ...until the fleet's version 7 arrives: then the copy is an older version, refused with its
    // last valid version, and version 7 runs.
    write_signed(&w.keys, &w.dir.join("web.yaml"), &web("7"), "fleet", 7);
    let u = until(&bed, |u| u.pods.iter().any(|p| p.pod.metadata.labels.get("v").is_some_and(|v| v == "7")));
    assert_eq!(names(&u), vec!["web-edge-1"], "{}", errors(&u));
    assert!(u.pods[0].origin.to_string().ends_with("/web.yaml"));
    let e = errors(&u);
    assert!(
        e.contains("zz-web.yaml: signature: version serial=6 of pod default/web-edge-1 is older than serial=7"),
        "{e}"
    );
    w.kept_holds("v: \"7\"");
    drop(bed);
    // After a restart, with the fleet's file broken meanwhile: neither the copy nor its kept
    // copy runs; the kept version 7 of web.yaml does.
    write(&w.dir.join("web.yaml"), "not: [a pod");
    let bed = w.start(Some(w.trust.clone()));
    let u = next(&bed);
    assert_eq!(names(&u), vec!["web-edge-1"], "{}", errors(&u));
    assert_eq!(u.pods[0].pod.metadata.labels["v"], "7");
    assert!(u.pods[0].origin.to_string().ends_with("/web.yaml"));
}

#[test]
fn turning_require_on_stops_a_pod_nobody_signed_even_from_its_kept_copy() {
    let w = Writer::new("require-on");
    write(&w.dir.join("web.yaml"), &pod_yaml("web", "1"));
    let bed = w.start(None);
    assert_eq!(names(&next(&bed)), vec!["web-edge-1"]);
    // The file breaks, and manifestTrust is turned on (a restart): the last valid version was
    // never signed, so it does not run either.
    write(&w.dir.join("web.yaml"), "not: [a pod");
    until(&bed, |u| !u.errors.is_empty());
    drop(bed);
    let bed = w.start(Some(w.trust.clone()));
    let u = next(&bed);
    assert!(names(&u).is_empty(), "the unsigned kept copy ran under require: {:?}", names(&u));
}

#[test]
fn configmaps_and_secrets_are_versioned_like_pods() {
    let w = Writer::new("objects-versioned");
    let secret = |password: &str| {
        format!("apiVersion: v1\nkind: Secret\nmetadata: {{name: db}}\nstringData: {{password: {password}}}\n")
    };
    write_signed(&w.keys, &w.dir.join("db.yaml"), &secret("revoked"), "fleet", 4);
    let old_sig = std::fs::read(w.dir.join("db.yaml.minisig")).unwrap();
    let bed = w.start(Some(w.trust.clone()));
    assert_eq!(next(&bed).objects[0].data["password"], b"revoked");
    write_signed(&w.keys, &w.dir.join("db.yaml"), &secret("rotated"), "fleet", 5);
    until(&bed, |u| u.objects.first().is_some_and(|o| o.data["password"] == b"rotated"));
    // The revoked credential put back with its own good signature, under another name too.
    std::fs::write(w.dir.join("old-db.yaml.minisig"), &old_sig).unwrap();
    write(&w.dir.join("old-db.yaml"), &secret("revoked"));
    // Written in place, not renamed: a scan may first see the file half written, which its
    // signature does not match; the version check comes once it is whole.
    let u = until(&bed, |u| errors(u).contains("old-db.yaml: signature: version serial=4"));
    assert!(errors(&u).contains("version serial=4 of secret default/db is older than serial=5"), "{}", errors(&u));
    assert_eq!(u.objects.len(), 1);
    assert_eq!(u.objects[0].data["password"], b"rotated");
}

#[test]
fn an_old_default_signed_file_neither_runs_over_serials_nor_freezes_them() {
    let w = Writer::new("schemes");
    let web = |v: &str| pod_yaml("web", v);
    // Signed long ago with minisign's default comment (timestamp:N), kept by the attacker.
    let old = signing::sign_with(&w.keys, &web("old"), "fleet", None);
    write_signed(&w.keys, &w.dir.join("web.yaml"), &web("7"), "fleet", 7);
    let bed = w.start(Some(w.trust.clone()));
    assert_eq!(next(&bed).pods[0].pod.metadata.labels["v"], "7");
    std::fs::write(w.keys.join("old.minisig"), &old).unwrap();
    std::fs::rename(w.keys.join("old.minisig"), w.dir.join("web.yaml.minisig")).unwrap();
    write(&w.dir.join("web.yaml"), &web("old"));
    let u = until(&bed, |u| errors(u).contains("timestamp"));
    assert!(errors(&u).contains("versioned by serial (serial=7 accepted)"), "{}", errors(&u));
    assert_eq!(u.pods[0].pod.metadata.labels["v"], "7", "the old version ran");
    // The fleet's next serial is still taken.
    write_signed(&w.keys, &w.dir.join("web.yaml"), &web("8"), "fleet", 8);
    let u = until(&bed, |u| u.pods.first().is_some_and(|p| p.pod.metadata.labels["v"] == "8"));
    assert!(u.errors.is_empty(), "{}", errors(&u));
}

#[test]
fn an_upgrade_keeps_a_pod_signed_with_timestamps_open_to_serials() {
    let w = Writer::new("upgrade");
    let web = |v: &str| pod_yaml("web", v);
    // The box ran web signed with minisign's default comment under the release before version
    // schemes, which recorded the bare number in this format (trust/file-versions.json).
    let signed = signing::sign_with(&w.keys, &web("old"), "fleet", None);
    let comment = String::from_utf8_lossy(&signed).into_owned();
    let after = comment.split("timestamp:").nth(1).expect("minisign's default trusted comment");
    let timestamp: u64 = after.chars().take_while(char::is_ascii_digit).collect::<String>().parse().unwrap();
    std::fs::create_dir_all(w.keys.join("state")).unwrap();
    std::fs::write(w.keys.join("state/versions.json"), format!(r#"{{"pods":{{"default/web-edge-1":{timestamp}}}}}"#))
        .unwrap();
    // After the upgrade the fleet moves to serials, as the README allows: serial=1 runs.
    write_signed(&w.keys, &w.dir.join("web.yaml"), &web("1"), "fleet", 1);
    let bed = w.start(Some(w.trust.clone()));
    let u = next(&bed);
    assert_eq!(names(&u), vec!["web-edge-1"], "{}", errors(&u));
    assert_eq!(u.pods[0].pod.metadata.labels["v"], "1");
    // And the record now says serial=1: a replay of the old default-signed file is refused.
    std::fs::write(w.keys.join("old.minisig"), &signed).unwrap();
    std::fs::rename(w.keys.join("old.minisig"), w.dir.join("web.yaml.minisig")).unwrap();
    write(&w.dir.join("web.yaml"), &web("old"));
    let u = until(&bed, |u| errors(u).contains("timestamp"));
    assert!(errors(&u).contains("versioned by serial (serial=1 accepted)"), "{}", errors(&u));
}

/// A valid edit broken again at once, before the kept copies are written (they wait for the
/// directory to be quiet): the valid edit is what is kept on disk, not the version before it.
#[test]
fn a_valid_edit_broken_at_once_is_the_version_kept() {
    let w = Writer::new("broken-at-once");
    write(&w.dir.join("web.yaml"), &pod_yaml("web", "1"));
    let bed = w.start(None);
    assert_eq!(names(&next(&bed)), vec!["web-edge-1"]);
    w.kept_holds("v: \"1\"");
    let v = |u: &Update| u.pods.iter().map(|p| p.pod.metadata.labels["v"].clone()).collect::<Vec<_>>();
    write(&w.dir.join("web.yaml"), &pod_yaml("web", "2"));
    until(&bed, |u| v(u) == ["2"]);
    write(&w.dir.join("web.yaml"), "not: [a pod");
    let u = until(&bed, |u| !errors(u).is_empty());
    assert_eq!(v(&u), ["2"], "the last valid version runs on");
    w.kept_holds("v: \"2\"");
}
