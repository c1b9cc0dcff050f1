//! Scratch directories for the tests, `/tmp/atoll-<tag>-<pid>-<n>`: made fresh, and removed,
//! with every mount under them unmounted first (a pod's Secret tmpfs, a subPath bind mount),
//! when the guard drops, also when the test fails.

use std::ops::Deref;
use std::path::{Path, PathBuf};

/// A scratch directory owned by one test; dropping it unmounts and removes it.
pub struct Scratch(PathBuf);

impl Scratch {
    /// A new, empty `/tmp/atoll-<tag>-<pid>-<n>`, unique in this run.
    pub fn new(tag: &str) -> Scratch {
        let dir = std::env::temp_dir().join(super::unique(&format!("atoll-{tag}")));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("create a scratch dir");
        Scratch(dir)
    }

    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Deref for Scratch {
    type Target = Path;
    fn deref(&self) -> &Path {
        &self.0
    }
}

impl AsRef<Path> for Scratch {
    fn as_ref(&self) -> &Path {
        &self.0
    }
}

impl AsRef<std::ffi::OsStr> for Scratch {
    fn as_ref(&self) -> &std::ffi::OsStr {
        self.0.as_os_str()
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        unmount_under(&self.0);
        if let Err(e) = std::fs::remove_dir_all(&self.0) {
            if e.kind() != std::io::ErrorKind::NotFound {
                eprintln!("cannot remove the scratch dir {}: {e}", self.0.display());
            }
        }
    }
}

/// The mount points at or under `dir` in this mount namespace, deepest first.
pub fn mounts_under(dir: &Path) -> Vec<PathBuf> {
    let table = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    let mut found: Vec<PathBuf> = table
        .lines()
        .filter_map(|line| line.split(' ').nth(4))
        .map(|p| PathBuf::from(unescape(p)))
        .filter(|p| p.starts_with(dir))
        .collect();
    found.sort_by_key(|p| std::cmp::Reverse(p.components().count()));
    found.dedup();
    found
}

/// Detaches every mount at or under `dir` (lazily: a container may still hold one).
pub fn unmount_under(dir: &Path) {
    for point in mounts_under(dir) {
        let _ = std::process::Command::new("umount").arg("-l").arg(&point).status();
    }
}

/// A mountinfo path with its octal escapes (`\040` for a space) decoded.
fn unescape(field: &str) -> String {
    let bytes = field.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let octal = bytes.get(i + 1..i + 4).filter(|d| d.iter().all(|b| (b'0'..=b'7').contains(b)));
        match (bytes[i], octal) {
            (b'\\', Some(d)) => {
                out.push((d[0] - b'0') * 64 + (d[1] - b'0') * 8 + (d[2] - b'0'));
                i += 4;
            }
            (b, _) => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}
