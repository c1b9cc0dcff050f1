//! atoll's memory on disk: small JSON records written whole or not at all (a temporary file,
//! fsync, rename, fsync of the directory), readable by root only (the directory 0700, every
//! file 0600, whatever the umask), read back through the bounded reader and the parser's
//! budget. The sources keep the manifest URL's last good payload and each manifest file's last
//! valid version here, under `<root-dir>/sources`; the images directory keeps what it imported.
//! Payloads can hold secrets (env values, the URL's query), so records are named by the
//! FNV-128 of what they belong to, never by a name an input chose.

use std::io::Write;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// The largest record read back: a manifest at its limit, escaped as a JSON string.
const MAX_RECORD: usize = 2 * crate::pod::decode::MAX_MANIFEST_BYTES + 64 * 1024;

/// `<dir>/<prefix>-<FNV-128 of key>.json`
pub fn path_for(dir: &Path, prefix: &str, key: &str) -> PathBuf {
    dir.join(format!("{prefix}-{:032x}.json", crate::fnv::fnv1a_128(key.as_bytes())))
}

/// Makes `dir` (0700, its parents as the umask says) and tightens it if it is looser.
pub fn private_dir(dir: &Path) -> std::io::Result<()> {
    std::fs::create_dir_all(dir)?;
    let meta = std::fs::metadata(dir)?;
    if meta.permissions().mode() & 0o077 != 0 {
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))?;
    }
    Ok(())
}

/// Writes `record` as JSON so that a crash leaves the old file or the new one, readable by
/// root only.
pub fn write<T: serde::Serialize>(path: &Path, record: &T) -> std::io::Result<()> {
    write_bytes(path, &serde_json::to_vec(record).map_err(std::io::Error::other)?)
}

/// Writes `bytes` the same way: whole or not at all, readable by root only.
pub fn write_bytes(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    private_dir(parent(path))?;
    replace(path, bytes)
}

/// The directory `path` is in (`.` for a bare file name).
fn parent(path: &Path) -> &Path {
    path.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."))
}

/// `bytes` to `path` whole or not at all: a temporary file beside it (0600), fsync, rename,
/// fsync of the directory. The directory must exist; its mode is left as it is (a kubeconfig's
/// directory is the operator's).
pub fn replace(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let dir = parent(path);
    let tmp = dir.join(format!(".{}.tmp", path.file_name().and_then(|n| n.to_str()).unwrap_or("record")));
    {
        let mut f = std::fs::OpenOptions::new().write(true).create(true).truncate(true).mode(0o600).open(&tmp)?;
        // An old file left with looser permissions is tightened before anything is written.
        f.set_permissions(std::fs::Permissions::from_mode(0o600))?;
        f.write_all(bytes)?;
        f.sync_all()?;
    }
    std::fs::rename(&tmp, path)?;
    std::fs::File::open(dir)?.sync_all()
}

/// The record at `path`, if there is one and it reads as a `T`.
pub fn read<T: serde::de::DeserializeOwned>(path: &Path) -> Option<T> {
    let bytes = crate::bounded::read_file(path, MAX_RECORD).ok()?;
    crate::parse::json_as(&bytes).ok()
}

/// Removes the record at `path` (gone already is fine).
pub fn remove(path: &Path) {
    if let Err(e) = std::fs::remove_file(path) {
        if e.kind() != std::io::ErrorKind::NotFound {
            log::warn!("removing {}: {e}", path.display());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_are_private_atomic_and_round_trip() {
        let dir = std::env::temp_dir().join(format!("atoll-records-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
        let path = path_for(&dir, "manifest-url", "http://127.0.0.1/a?token=s3cret");
        assert!(!path.to_string_lossy().contains("s3cret"));
        assert_ne!(path, path_for(&dir, "manifest-url", "http://127.0.0.1/b"));
        // A file from an older atoll, world-readable.
        std::fs::write(&path, b"{}").unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        write(&path, &serde_json::json!({"body": "x"})).unwrap();
        assert_eq!(read::<serde_json::Value>(&path), Some(serde_json::json!({"body": "x"})));
        assert_eq!(std::fs::metadata(&path).unwrap().permissions().mode() & 0o777, 0o600);
        assert_eq!(std::fs::metadata(&dir).unwrap().permissions().mode() & 0o777, 0o700);
        let names: Vec<_> = std::fs::read_dir(&dir).unwrap().filter_map(|e| e.ok()).map(|e| e.file_name()).collect();
        assert_eq!(names.len(), 1, "no temporary file left behind: {names:?}");
        remove(&path);
        remove(&path);
        assert_eq!(read::<serde_json::Value>(&path), None);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
