//! The one way a name from a manifest (or from a runtime label atoll once wrote from one)
//! becomes a path: [`under`] joins single path segments onto a base and proves the result
//! stays below it. A UID, namespace, pod, container or volume name that is empty, `.`, `..`,
//! holds a `/` or a NUL, or starts with a dot is refused, so no pod can name a directory
//! outside atoll's own (`uid: ../../etc`, `uid: /`). Pure: nothing here touches the disk.

use crate::pod::invalid::{Invalid, Kind};
use std::fmt;
use std::path::{Component, Path, PathBuf};

/// The longest UID atoll accepts (a UUID is 36; kubelet's content hashes are 32).
pub const MAX_UID_LEN: usize = 128;

/// A name that cannot be a path segment under a base.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UnsafeName(pub String);

impl fmt::Display for UnsafeName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?} cannot be used as a directory name", self.0)
    }
}

impl std::error::Error for UnsafeName {}

/// Whether `s` is safe as one path segment: not empty, no `/` or NUL, not starting with `.`.
pub fn is_segment(s: &str) -> bool {
    !s.is_empty() && !s.starts_with('.') && !s.contains(['/', '\0'])
}

/// The rule for `metadata.uid`: 1 to 128 letters, digits, '-', '_' and '.', not starting with
/// '.'. Every real UID (a UUID, kubelet's hash) passes.
pub fn check_uid(uid: &str) -> Result<(), Invalid> {
    let chars_ok = uid.chars().all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c));
    if uid.is_empty() || uid.len() > MAX_UID_LEN || !chars_ok || uid.starts_with('.') {
        return Err(Invalid::from(Kind::Uid { uid: uid.to_string(), max: MAX_UID_LEN }));
    }
    Ok(())
}

/// `base/seg1/seg2/...`, each segment checked, the result proven to lie strictly below `base`.
pub fn under(base: &Path, segments: &[&str]) -> Result<PathBuf, UnsafeName> {
    let mut out = base.to_path_buf();
    for s in segments {
        if !is_segment(s) {
            return Err(UnsafeName(s.to_string()));
        }
        out.push(s);
    }
    // The proof, independent of the checks above: exactly one normal component per segment.
    let extra: Vec<Component<'_>> = out.strip_prefix(base).map(|r| r.components().collect()).unwrap_or_default();
    if extra.len() != segments.len() || !extra.iter().all(|c| matches!(c, Component::Normal(_))) {
        return Err(UnsafeName(segments.join("/")));
    }
    Ok(out)
}

/// `<root>/pods/<uid>`: a pod's own directory (volumes, hosts file, termination logs), made
/// once per sync and proven (by [`under`]) to lie below the root; what lies inside it is
/// joined on by [`PodDir::under`], checked the same way.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PodDir(PathBuf);

impl PodDir {
    pub fn new(root: &Path, uid: &str) -> Result<PodDir, UnsafeName> {
        under(root, &["pods", uid]).map(PodDir)
    }

    pub fn path(&self) -> &Path {
        &self.0
    }

    /// `<pod dir>/seg1/seg2/...`, each segment checked ([`under`]).
    pub fn under(&self, segments: &[&str]) -> Result<PathBuf, UnsafeName> {
        under(&self.0, segments)
    }
}

/// `<podLogsDir>/<namespace>_<name>_<uid>`, kubelet's pod log directory.
pub fn pod_log_dir(logs: &Path, namespace: &str, name: &str, uid: &str) -> Result<PathBuf, UnsafeName> {
    for part in [namespace, name, uid] {
        if !is_segment(part) {
            return Err(UnsafeName(part.to_string()));
        }
    }
    under(logs, &[&format!("{namespace}_{name}_{uid}")])
}

/// Whether `rel` may be a file inside a ConfigMap or Secret volume (an `items[].path`, or a
/// key): relative, `/`-separated, no empty, `.` or `..` element, no NUL, and not starting with
/// `..` (kubelet's atomic writer keeps `..data` and its timestamped directories there).
pub fn check_descending(rel: &str) -> Result<(), Invalid> {
    let bad = rel.is_empty()
        || rel.starts_with("..")
        || rel.len() > 4096
        || rel.split('/').any(|e| e.is_empty() || e == "." || e == ".." || e.contains('\0'));
    if bad {
        return Err(Invalid::from(Kind::Descending(rel.to_string())));
    }
    Ok(())
}

/// `base/<rel>` for a checked [`check_descending`] path, proven to lie strictly below `base`.
pub fn descending(base: &Path, rel: &str) -> Result<PathBuf, UnsafeName> {
    check_descending(rel).map_err(|_| UnsafeName(rel.to_string()))?;
    let out = base.join(rel);
    let extra: Vec<Component<'_>> = out.strip_prefix(base).map(|r| r.components().collect()).unwrap_or_default();
    if extra.is_empty() || !extra.iter().all(|c| matches!(c, Component::Normal(_))) {
        return Err(UnsafeName(rel.to_string()));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn volume_file_paths_stay_below_the_volume() {
        let base = Path::new("/v");
        for bad in ["", "/etc/passwd", "..", "../x", "a/../../x", "..data", "..2026", "a//b", "a/./b", "a\0b"] {
            assert!(descending(base, bad).is_err(), "{bad:?} accepted");
        }
        assert_eq!(descending(base, "conf/app.yaml").unwrap(), Path::new("/v/conf/app.yaml"));
        assert_eq!(descending(base, ".env").unwrap(), Path::new("/v/.env"));
    }

    #[test]
    fn names_that_would_leave_the_base_are_refused() {
        let root = Path::new("/var/lib/atoll");
        for bad in ["", ".", "..", "../x", "/", "/etc", "a/b", "a\0b", ".hidden"] {
            assert!(PodDir::new(root, bad).is_err(), "{bad:?} accepted");
            assert!(check_uid(bad).is_err(), "{bad:?} passes validation");
        }
        let dir = PodDir::new(root, "1f0e-ab").unwrap();
        assert_eq!(dir.path(), Path::new("/var/lib/atoll/pods/1f0e-ab"));
        assert_eq!(dir.under(&["volumes", "v"]).unwrap(), Path::new("/var/lib/atoll/pods/1f0e-ab/volumes/v"));
        assert!(dir.under(&["volumes", ".."]).is_err() && dir.under(&["a/b"]).is_err());
        assert!(pod_log_dir(Path::new("/var/log/pods"), "default", "web-n1", "..").is_err());
        assert!(pod_log_dir(Path::new("/var/log/pods"), "..", "x", "u").is_err());
        assert_eq!(
            pod_log_dir(Path::new("/var/log/pods"), "default", "web-n1", "u1").unwrap(),
            Path::new("/var/log/pods/default_web-n1_u1")
        );
    }

    #[test]
    fn real_uids_pass() {
        assert!(check_uid("8f1c8d8e-6a4b-4c55-9d2c-0d7b0b0b3c1e").is_ok());
        assert!(check_uid("370fe659c2061095a1a95dcf39cd4cd8").is_ok());
        assert!(check_uid(&"a".repeat(MAX_UID_LEN + 1)).is_err());
        assert!(check_uid("a b").is_err());
    }
}
