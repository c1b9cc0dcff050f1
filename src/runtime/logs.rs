//! Container log rotation (kubelet's containerLogMaxSize / containerLogMaxFiles).
//!
//! A running container's CRI log file that has grown past the limit is renamed to
//! `<file>.<UTC timestamp>` and the runtime is asked to reopen its log (ReopenContainerLog);
//! rotated files beyond `max_files - 1` are removed, oldest first, so the current file and the
//! rotated ones together are at most `max_files`. If the runtime cannot reopen, the rename is
//! undone. (kubelet also gzips older rotated files; atoll keeps them as they are.)

use crate::cri::RuntimeService;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

/// kubelet's defaults.
pub const DEFAULT_MAX_SIZE: u64 = 10 << 20;
pub const DEFAULT_MAX_FILES: usize = 5;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Rotation {
    pub max_size: u64,
    pub max_files: usize,
}

impl Default for Rotation {
    fn default() -> Self {
        Rotation { max_size: DEFAULT_MAX_SIZE, max_files: DEFAULT_MAX_FILES }
    }
}

/// Rotated files of `log`, oldest first (their suffixes are sortable timestamps).
pub fn rotated(log: &Path) -> Vec<PathBuf> {
    let (Some(dir), Some(name)) = (log.parent(), log.file_name().and_then(|n| n.to_str())) else {
        return Vec::new();
    };
    let prefix = format!("{name}.");
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .map(|entries| {
            entries
                .filter_map(|e| e.ok())
                .filter(|e| e.file_name().to_str().is_some_and(|n| n.starts_with(&prefix) && !n.ends_with(".tmp")))
                .map(|e| e.path())
                .collect()
        })
        .unwrap_or_default();
    files.sort();
    files
}

/// Rotates `log` of container `id` if it is over the limit. Returns whether it rotated.
pub async fn rotate_if_needed<R: RuntimeService>(
    cri: &R,
    id: &str,
    log: &Path,
    rotation: Rotation,
) -> Result<bool, String> {
    let size = match std::fs::metadata(log) {
        Ok(m) => m.len(),
        Err(_) => return Ok(false),
    };
    if size <= rotation.max_size {
        return Ok(false);
    }
    // Make room: keep at most max_files - 2 old files, as one more is about to be added.
    let old = rotated(log);
    let keep = rotation.max_files.saturating_sub(2);
    for f in old.iter().take(old.len().saturating_sub(keep)) {
        let _ = std::fs::remove_file(f);
    }
    let stamp = stamp(SystemTime::now());
    let target = PathBuf::from(format!("{}.{stamp}", log.display()));
    std::fs::rename(log, &target).map_err(|e| format!("rotating {}: {e}", log.display()))?;
    if let Err(e) = cri.reopen_container_log(id).await {
        let _ = std::fs::rename(&target, log);
        return Err(format!("reopening the log of {id}: {e}"));
    }
    Ok(true)
}

/// `20261122-193045.123456789`: sortable, unique enough for one file per rotation.
fn stamp(t: SystemTime) -> String {
    let s = crate::rfc3339::format_nanos(t);
    let (date, time) = s.trim_end_matches('Z').split_once('T').unwrap_or((&s, ""));
    let (hms, frac) = time.split_once('.').unwrap_or((time, "0"));
    format!("{}-{}.{frac:0<9}", date.replace('-', ""), hms.replace(':', ""))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn stamps_sort_in_time_order() {
        let a = stamp(SystemTime::UNIX_EPOCH + Duration::new(1_795_373_717, 5));
        let b = stamp(SystemTime::UNIX_EPOCH + Duration::new(1_795_373_717, 40));
        let c = stamp(SystemTime::UNIX_EPOCH + Duration::new(1_795_373_718, 0));
        assert_eq!(a, "20261122-185517.000000005");
        assert!(a < b && b < c, "{a} {b} {c}");
    }

    #[test]
    fn rotated_files_are_found_oldest_first() {
        let dir = std::env::temp_dir().join(format!("atoll-logs-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let log = dir.join("0.log");
        for name in [
            "0.log",
            "0.log.20260101-000002.000000000",
            "0.log.20260101-000001.000000000",
            "1.log.20260101-000000.000000000",
        ] {
            std::fs::write(dir.join(name), "x").unwrap();
        }
        let found: Vec<String> =
            rotated(&log).iter().map(|p| p.file_name().unwrap().to_string_lossy().into_owned()).collect();
        assert_eq!(found, vec!["0.log.20260101-000001.000000000", "0.log.20260101-000002.000000000"]);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
