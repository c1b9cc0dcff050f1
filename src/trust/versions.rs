//! Anti-rollback: the newest signed version atoll accepted for each pod, kept on disk
//! (`<root-dir>/trust/versions.json`, root only), so an older signed manifest, replayed by
//! whoever can write the directory or answer the URL, is refused even after a restart.

use std::collections::BTreeMap;
use std::path::PathBuf;

#[derive(Debug, Default)]
pub struct Versions {
    path: Option<PathBuf>,
    newest: BTreeMap<String, u64>,
}

#[derive(serde::Serialize, serde::Deserialize)]
struct Record {
    pods: BTreeMap<String, u64>,
}

impl Versions {
    /// The record at `path` (none yet: empty); `None` keeps it in memory only.
    pub fn open(path: Option<PathBuf>) -> Versions {
        let newest = path.as_deref().and_then(crate::records::read::<Record>).map(|r| r.pods).unwrap_or_default();
        Versions { path, newest }
    }

    /// Refuses `version` of `pod` when a newer one was accepted before.
    pub fn check(&self, pod: &str, version: u64) -> Result<(), String> {
        match self.newest.get(pod) {
            Some(&seen) if seen > version => Err(format!(
                "signed version {version} of pod {pod} is older than version {seen} accepted before (a replayed manifest is refused)"
            )),
            _ => Ok(()),
        }
    }

    /// Remembers that `version` of `pod` runs (on disk before it is used, when it is new).
    pub fn accept(&mut self, pod: &str, version: u64) {
        if self.newest.get(pod).is_some_and(|&seen| seen >= version) {
            return;
        }
        self.newest.insert(pod.to_string(), version);
        if let Some(path) = &self.path {
            if let Err(e) = crate::records::write(path, &Record { pods: self.newest.clone() }) {
                log::warn!("signed manifests: cannot record the accepted versions in {}: {e}", path.display());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_older_version_is_refused_also_after_a_restart() {
        let dir = std::env::temp_dir().join(format!("atoll-versions-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let path = dir.join("trust").join("versions.json");
        let mut v = Versions::open(Some(path.clone()));
        assert!(v.check("default/web", 5).is_ok());
        v.accept("default/web", 5);
        v.accept("default/web", 3); // never lowers
        assert!(v.check("default/web", 5).is_ok(), "the same version again is fine");
        assert!(v.check("default/db", 1).is_ok(), "per pod");
        let again = Versions::open(Some(path.clone()));
        let e = again.check("default/web", 4).unwrap_err();
        assert!(e.contains("older than version 5"), "{e}");
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(std::fs::metadata(&path).unwrap().permissions().mode() & 0o777, 0o600);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
