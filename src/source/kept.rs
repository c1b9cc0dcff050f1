//! The last valid version of each manifest file, kept on disk (`<root-dir>/sources/files`),
//! so that atoll's promise "an invalid edit keeps the last valid pod" survives a restart: a
//! file that is invalid when atoll starts serves the version that last loaded, re-read through
//! the same pipeline (so the same UID, and today's validation rules). A record is written when
//! a file's valid content changes and removed with the file. A file holding a Secret is never
//! kept: its last valid version lasts only while atoll runs.

use crate::objects::{self, Manifests};
use crate::pod::{Origin, Policy, Shape};
use crate::records as cache;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

const PREFIX: &str = "manifest-file";

#[derive(Serialize, Deserialize)]
struct Record {
    path: PathBuf,
    body: String,
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

    /// Records `bytes` as `file`'s last valid content, unless that is what is kept already.
    pub fn keep(&mut self, file: &Path, bytes: &[u8]) {
        let h = crate::fnv::fnv1a_64(bytes);
        if self.known.get(file) == Some(&h) {
            return;
        }
        let path = cache::path_for(&self.dir, PREFIX, &file.to_string_lossy());
        let on_disk: Option<Record> = cache::read(&path);
        let same = on_disk.is_some_and(|r| r.path == file && r.body.as_bytes() == bytes);
        let record = Record { path: file.to_path_buf(), body: String::from_utf8_lossy(bytes).into_owned() };
        if !same {
            if let Err(e) = cache::write(&path, &record) {
                log::warn!("file source: cannot keep the last valid version of {}: {e}", file.display());
                return;
            }
        }
        self.known.insert(file.to_path_buf(), h);
    }

    /// Keeps nothing for `file` (it holds a Secret: atoll never copies one to disk).
    pub fn forget(&mut self, file: &Path) {
        if self.known.remove(file).is_some() || !self.tidied {
            cache::remove(&cache::path_for(&self.dir, PREFIX, &file.to_string_lossy()));
        }
    }

    /// The kept version of `file` as pods or objects, if there is one and it still loads.
    pub fn load(&self, file: &Path, node: &str, policy: Policy) -> Option<Manifests> {
        let record: Record = cache::read(&cache::path_for(&self.dir, PREFIX, &file.to_string_lossy()))?;
        if record.path != file {
            return None;
        }
        let origin = Origin::File(file.to_path_buf());
        objects::load(record.body.as_bytes(), Shape::SinglePod, &origin, node, policy).ok()
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

    const POD: &str =
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: web\nspec:\n  containers:\n  - name: c\n    image: x:1\n";

    #[test]
    fn the_last_valid_version_comes_back_and_goes_with_its_file() {
        let dir = std::env::temp_dir().join(format!("atoll-kept-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let file = PathBuf::from("/etc/kubernetes/manifests/web.yaml");
        let mut kept = Kept::new(dir.clone());
        kept.keep(&file, POD.as_bytes());
        // A restart: a new Kept finds the same pods, with the same UID.
        let again = Kept::new(dir.clone());
        let pods = again.load(&file, "n1", Policy::default()).expect("kept").pods;
        let direct =
            crate::pod::load(POD.as_bytes(), Shape::SinglePod, &Origin::File(file.clone()), "n1", Policy::default());
        assert_eq!(pods[0].uid, direct.unwrap().pods[0].uid);
        assert!(again.load(Path::new("/etc/kubernetes/manifests/other.yaml"), "n1", Policy::default()).is_none());
        // The file is deleted: its record goes too, also one left from before a restart.
        let mut fresh = Kept::new(dir.clone());
        fresh.retain(&BTreeSet::new());
        assert!(fresh.load(&file, "n1", Policy::default()).is_none());
        assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 0);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
