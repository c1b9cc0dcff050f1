//! The last valid version of each manifest file, kept on disk (`<root-dir>/sources/files`),
//! so that atoll's promise "an invalid edit keeps the last valid pod" survives a restart: a
//! file that is invalid when atoll starts serves the version that last loaded. The copy keeps
//! its signature and is opened again like the file itself (`payload::Intake`), under the trust
//! settings of the moment, so the same UID comes back, today's validation rules apply, and
//! nothing unverified returns; the source also checks it against anti-rollback. A record is
//! written when a file's valid content changes and removed with the file. A file holding a
//! Secret, or encrypted, is never kept: its last valid version lasts only while atoll runs.

use super::payload::{Intake, Opened, Payload};
use crate::pod::Origin;
use crate::records as cache;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;

const PREFIX: &str = "manifest-file";

/// What a record holds, in short: its body and signature.
fn content_hash(body: &str, signature: Option<&str>) -> u64 {
    let mut h = crate::fnv::fnv1a_64(body.as_bytes());
    if let Some(sig) = signature {
        h ^= crate::fnv::fnv1a_64(sig.as_bytes()).rotate_left(1);
    }
    h
}

#[derive(Serialize, Deserialize)]
struct Record {
    path: PathBuf,
    body: String,
    /// The signature file's text, when the file was signed.
    #[serde(default)]
    signature: Option<String>,
}

/// The on-disk records and what they hold (by FNV-64 of the content), as far as known.
pub struct Kept {
    dir: PathBuf,
    known: BTreeMap<PathBuf, u64>,
    tidied: bool,
}

impl Kept {
    pub fn new(dir: PathBuf) -> Kept {
        Kept { dir, known: BTreeMap::new(), tidied: false }
    }

    /// Records `payload` as `file`'s last valid content, unless that is what is kept already.
    pub fn keep(&mut self, file: &Path, payload: &Payload) {
        let (Ok(body), Ok(signature)) =
            (std::str::from_utf8(&payload.bytes), payload.signature.as_deref().map(std::str::from_utf8).transpose())
        else {
            return; // not text: it did not load as a manifest either
        };
        let h = content_hash(body, signature);
        if self.known.get(file) == Some(&h) {
            return;
        }
        let path = cache::path_for(&self.dir, PREFIX, &file.to_string_lossy());
        let on_disk: Option<Record> = cache::read(&path);
        let same = on_disk.is_some_and(|r| r.path == file && r.body == body && r.signature.as_deref() == signature);
        let record = Record { path: file.to_path_buf(), body: body.into(), signature: signature.map(String::from) };
        if !same {
            if let Err(e) = cache::write(&path, &record) {
                log::warn!("file source: cannot keep the last valid version of {}: {e}", file.display());
                return;
            }
        }
        self.known.insert(file.to_path_buf(), h);
    }

    /// Keeps nothing for `file` (it holds a Secret, or its copy may no longer be used).
    pub fn forget(&mut self, file: &Path) {
        if self.known.remove(file).is_some() || !self.tidied {
            cache::remove(&cache::path_for(&self.dir, PREFIX, &file.to_string_lossy()));
        }
    }

    /// The kept version of `file`, opened by `intake` (its signature checked again), if there
    /// is one and it still opens.
    /// The record is known from then on, so it goes with the file (`forget`, `retain`), also
    /// when it no longer opens.
    pub fn load(&mut self, file: &Path, intake: &Intake) -> Option<(Opened, Arc<Payload>)> {
        let record: Record = cache::read(&cache::path_for(&self.dir, PREFIX, &file.to_string_lossy()))?;
        if record.path != file {
            return None;
        }
        self.known.insert(file.to_path_buf(), content_hash(&record.body, record.signature.as_deref()));
        let payload = Payload {
            origin: Origin::File(file.to_path_buf()),
            bytes: record.body.into_bytes(),
            signature: record.signature.map(String::into_bytes),
        };
        match intake.open(&payload) {
            Ok(opened) => Some((opened, Arc::new(payload))),
            Err(e) => {
                log::warn!("file source: the kept copy of {} is not used: {e}", file.display());
                None
            }
        }
    }

    /// Forgets every file not in `present` (deleted, or gone while atoll was down).
    pub fn retain(&mut self, present: &BTreeSet<PathBuf>) {
        self.known.retain(|p, _| {
            let keep = present.contains(p);
            if !keep {
                cache::remove(&cache::path_for(&self.dir, PREFIX, &p.to_string_lossy()));
            }
            keep
        });
        if std::mem::replace(&mut self.tidied, true) {
            return;
        }
        let Ok(entries) = std::fs::read_dir(&self.dir) else { return };
        for e in entries.filter_map(|e| e.ok()) {
            let name = e.file_name().to_string_lossy().into_owned();
            if !name.starts_with(PREFIX) {
                continue;
            }
            let record: Option<Record> = cache::read(&e.path());
            if record.is_none_or(|r| !present.contains(&r.path)) {
                cache::remove(&e.path());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::trust::{test_key, Trust};

    const POD: &str =
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: web\nspec:\n  containers:\n  - name: c\n    image: x:1\n";

    fn payload(file: &Path, signature: Option<Vec<u8>>) -> Payload {
        Payload { origin: Origin::File(file.to_path_buf()), bytes: POD.as_bytes().to_vec(), signature }
    }

    #[test]
    fn the_last_valid_version_comes_back_and_goes_with_its_file() {
        let dir = std::env::temp_dir().join(format!("atoll-kept-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let file = PathBuf::from("/etc/kubernetes/manifests/web.yaml");
        let mut kept = Kept::new(dir.clone());
        kept.keep(&file, &payload(&file, None));
        // A restart: a new Kept finds the same pods, with the same UID.
        let mut again = Kept::new(dir.clone());
        let intake = Intake { node: "n1".into(), ..Default::default() };
        let pods = again.load(&file, &intake).expect("kept").0.manifests.pods;
        let direct = intake.open(&payload(&file, None)).unwrap().manifests.pods;
        assert_eq!(pods[0].uid, direct[0].uid);
        assert!(again.load(Path::new("/etc/kubernetes/manifests/other.yaml"), &intake).is_none());
        // The file is deleted: its record goes too, also one left from before a restart.
        let mut fresh = Kept::new(dir.clone());
        fresh.retain(&BTreeSet::new());
        assert!(fresh.load(&file, &intake).is_none());
        assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 0);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_copy_brought_back_after_a_restart_goes_with_its_file() {
        let dir = std::env::temp_dir().join(format!("atoll-kept-back-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let file = PathBuf::from("/etc/kubernetes/manifests/web.yaml");
        Kept::new(dir.clone()).keep(&file, &payload(&file, None));
        // After a restart the file is broken: its copy is brought back, and the first rescan
        // tidies the directory with the file still there.
        let mut again = Kept::new(dir.clone());
        let intake = Intake { node: "n1".into(), ..Default::default() };
        assert!(again.load(&file, &intake).is_some());
        again.retain(&BTreeSet::from([file.clone()]));
        assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 1);
        // Then it is deleted: the copy goes too (it would come back with a broken file of the
        // same name).
        again.retain(&BTreeSet::new());
        assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 0, "the brought-back copy stayed");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_kept_copy_is_verified_again_under_the_trust_of_the_moment() {
        let dir = std::env::temp_dir().join(format!("atoll-kept-trust-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let (signed, plain) = (PathBuf::from("/m/signed.yaml"), PathBuf::from("/m/plain.yaml"));
        let mut kept = Kept::new(dir.clone());
        kept.keep(&signed, &payload(&signed, Some(test_key::sign(3, POD.as_bytes(), "serial=2"))));
        kept.keep(&plain, &payload(&plain, None)); // kept before trust was turned on
        let require = Trust { keys: vec![test_key::key(3)], require: true };
        let intake = Intake { trust: Some(require), node: "n1".into(), ..Default::default() };
        let (opened, _) = kept.load(&signed, &intake).expect("the signed copy");
        assert_eq!(opened.signed.and_then(|v| v.version), Some(crate::trust::Version::serial(2)));
        assert!(kept.load(&plain, &intake).is_none(), "an unsigned copy came back under require");
        // Someone with the disk edits the kept copy: the signature no longer matches.
        let path = cache::path_for(&dir, PREFIX, &signed.to_string_lossy());
        let text = std::fs::read_to_string(&path).unwrap().replace("x:1", "evil:1");
        std::fs::write(&path, text).unwrap();
        assert!(kept.load(&signed, &intake).is_none(), "an altered copy came back");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
