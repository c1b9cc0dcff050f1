//! kubelet's `terminated.message` of an exited container: the runtime's message, then the
//! container's termination-log file (its last 4096 bytes), or with `FallbackToLogsOnError` and
//! a failure that left the file empty, the last 80 lines (at most 2048 bytes) of its log.
//!
//! Both files are written by the container, so both are read through `bounded`: a container
//! that writes 300 MB to `/dev/termination-log` or to stdout costs at most a few KiB here.

use crate::cri::api::ContainerStatus;
use std::path::Path;

/// kubelet's limit on a termination message.
pub const MAX_MESSAGE: usize = 4096;
/// kubelet's FallbackToLogsOnError limits.
const LOG_LINES: usize = 80;
const LOG_BYTES: usize = 2048;
/// How much of the log's end is read to find its last lines (each CRI line carries a prefix
/// of about 40 bytes, and one line may be cut at the start of the window).
const LOG_WINDOW: usize = 64 * 1024;

/// The message for an exited container's status.
pub fn message(st: &ContainerStatus) -> String {
    let ann = |k: &str| st.annotations.get(k).cloned().unwrap_or_default();
    let path = ann("io.kubernetes.container.terminationMessagePath");
    let mut own = String::new();
    if !path.is_empty() {
        if let Some(m) = st.mounts.iter().find(|m| m.container_path == path) {
            if let Ok((bytes, _)) = crate::bounded::read_tail(Path::new(&m.host_path), MAX_MESSAGE) {
                own = String::from_utf8_lossy(&bytes).into_owned();
            }
        }
    }
    let fallback = ann("io.kubernetes.container.terminationMessagePolicy") == "FallbackToLogsOnError";
    if own.is_empty() && fallback && st.exit_code != 0 && !st.log_path.is_empty() {
        own = log_tail(Path::new(&st.log_path));
    }
    match (st.message.is_empty(), own.is_empty()) {
        (_, true) => st.message.clone(),
        (true, false) => own,
        (false, false) => format!("{}: {own}", st.message),
    }
}

/// The text of the last 80 CRI log lines of `path`, at most its last 2048 bytes.
fn log_tail(path: &Path) -> String {
    let Ok((window, cut)) = crate::bounded::read_tail(path, LOG_WINDOW) else { return String::new() };
    let text = String::from_utf8_lossy(&window);
    let mut lines: Vec<&str> = text.lines().collect();
    if cut && !lines.is_empty() {
        lines.remove(0); // begins mid-line
    }
    let tail: Vec<&str> =
        lines[lines.len().saturating_sub(LOG_LINES)..].iter().map(|l| l.splitn(4, ' ').nth(3).unwrap_or("")).collect();
    let joined = tail.join("\n");
    let mut start = joined.len().saturating_sub(LOG_BYTES);
    while !joined.is_char_boundary(start) {
        start += 1;
    }
    joined.get(start..).unwrap_or_default().to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cri::api::Mount;

    fn status(dir: &Path, policy: &str) -> ContainerStatus {
        ContainerStatus {
            exit_code: 1,
            log_path: dir.join("0.log").to_string_lossy().into_owned(),
            annotations: [
                ("io.kubernetes.container.terminationMessagePath".to_string(), "/dev/termination-log".to_string()),
                ("io.kubernetes.container.terminationMessagePolicy".to_string(), policy.to_string()),
            ]
            .into(),
            mounts: vec![Mount {
                container_path: "/dev/termination-log".into(),
                host_path: dir.join("tlog").to_string_lossy().into_owned(),
                ..Default::default()
            }],
            ..Default::default()
        }
    }

    #[test]
    fn huge_files_give_kubelets_bounded_message() {
        let dir = std::env::temp_dir().join(format!("atoll-termination-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let mut big = vec![b'a'; 8 << 20];
        big.extend_from_slice(b"THE END");
        std::fs::write(dir.join("tlog"), &big).unwrap();
        let m = message(&status(&dir, "File"));
        assert_eq!(m.len(), MAX_MESSAGE);
        assert!(m.ends_with("THE END"));
        // An empty file, a failure and FallbackToLogsOnError: the log's last lines.
        std::fs::write(dir.join("tlog"), b"").unwrap();
        let mut log = String::new();
        for i in 0..200_000 {
            log.push_str(&format!("2026-01-01T00:00:00.000000000Z stdout F line {i}\n"));
        }
        std::fs::write(dir.join("0.log"), log).unwrap();
        let m = message(&status(&dir, "FallbackToLogsOnError"));
        assert!(m.len() <= LOG_BYTES && m.ends_with("line 199999"), "{m}");
        assert_eq!(m.lines().count(), LOG_LINES.min(m.lines().count()));
        assert!(m.lines().all(|l| l.starts_with("line ") || l.len() < 12), "prefixes stripped: {m}");
        assert_eq!(message(&status(&dir, "File")), "", "File policy: no log fallback");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
