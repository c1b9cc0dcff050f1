//! The file source (`staticPodPath`, `--pod-manifest-path`): a directory of manifests, or a
//! single manifest file.
//!
//! Reads as kubelet does: entries in lexical order, dot-files ignored, no recursion into
//! sub-directories (logged once), other file types skipped, a 10 MiB limit, one Pod per file;
//! a `namespace/name` in two files goes to the lexically last one, with a warning naming both.
//! It rescans on inotify events (create, close-write, modify, delete, moves, attrib) after a
//! short quiet period that folds an editor's write-and-rename into one scan, and fully every
//! `fileCheckFrequency`. A path that does not exist yet is looked for every second.
//!
//! Better than kubelet: when a file that produced a pod becomes invalid, its last valid pods
//! stay in the snapshot (the pod keeps running) and the error is reported; kubelet kills the
//! pod at the next rescan. The last valid version is kept on disk too (`kept`), so this holds
//! across a restart of atoll. Out: an [`Update`] after every scan whose result changed.

use super::{SourceId, Update};
use crate::pod::{self, Finding, ManifestError, Origin, Policy, Shape, StaticPod};
use smol::Async;
use std::collections::{BTreeMap, BTreeSet};
use std::io::Read;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// How long the directory must be quiet after an event before it is scanned.
pub const QUIET_PERIOD: Duration = Duration::from_millis(100);
/// The longest a burst of events can hold a scan back.
const MAX_DELAY: Duration = Duration::from_secs(1);
/// How often a missing path is looked for (kubelet retries its watch every second).
const MISSING_POLL: Duration = Duration::from_secs(1);

#[derive(Clone, Debug)]
pub struct FileSourceConfig {
    pub path: PathBuf,
    pub check_frequency: Duration,
    pub node: String,
    pub policy: Policy,
    /// Where the last valid version of each file is kept (`<root-dir>/sources/files`).
    pub kept_dir: Option<PathBuf>,
}

/// What one scan found.
#[derive(Clone, Debug, Default)]
pub struct Scan {
    /// Pods by file, in lexical order of path.
    pub by_file: BTreeMap<PathBuf, Vec<StaticPod>>,
    pub errors: BTreeMap<PathBuf, ManifestError>,
    pub warnings: Vec<(PathBuf, Finding)>,
    /// Entries passed over, with why (sub-directories, sockets, ...).
    pub skipped: Vec<(PathBuf, String)>,
    /// Why the path itself is unusable (missing, not a file or directory, unreadable).
    pub path_problem: Option<String>,
    /// The content of each file in `by_file` (what loaded).
    pub contents: BTreeMap<PathBuf, Vec<u8>>,
}

/// Reads every manifest under `path` once (the pipeline `atoll validate` shares).
pub fn scan(path: &Path, node: &str, policy: Policy) -> Scan {
    let mut out = Scan::default();
    let meta = match std::fs::metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            out.path_problem = Some("path does not exist".into());
            return out;
        }
        Err(e) => {
            out.path_problem = Some(e.to_string());
            return out;
        }
    };
    let files: Vec<PathBuf> = if meta.is_file() {
        vec![path.to_path_buf()]
    } else if meta.is_dir() {
        let entries = match std::fs::read_dir(path) {
            Ok(e) => e,
            Err(e) => {
                out.path_problem = Some(format!("cannot list: {e}"));
                return out;
            }
        };
        let mut names: Vec<PathBuf> = entries
            .filter_map(|e| e.ok())
            .filter(|e| !e.file_name().to_string_lossy().starts_with('.'))
            .map(|e| e.path())
            .collect();
        names.sort();
        let mut files = Vec::new();
        for p in names {
            match std::fs::metadata(&p) {
                Ok(m) if m.is_file() => files.push(p),
                Ok(m) if m.is_dir() => out.skipped.push((p, "sub-directory: not recursing".into())),
                Ok(_) => out.skipped.push((p, "not a regular file: skipped".into())),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {} // vanished meanwhile
                Err(e) => out.skipped.push((p, format!("cannot stat: {e}"))),
            }
        }
        files
    } else {
        out.path_problem = Some("path is not a directory or file".into());
        return out;
    };
    for file in files {
        let bytes = match read_limited(&file) {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => {
                let err =
                    ManifestError { origin: file.display().to_string(), problems: vec![Finding::root(e.to_string())] };
                out.errors.insert(file, err);
                continue;
            }
        };
        let origin = Origin::File(absolute(&file));
        match pod::load(&bytes, Shape::SinglePod, &origin, node, policy) {
            Ok(loaded) => {
                out.warnings.extend(loaded.warnings.into_iter().map(|w| (file.clone(), w)));
                out.by_file.insert(file.clone(), loaded.pods);
                out.contents.insert(file, bytes);
            }
            Err(e) => {
                out.errors.insert(file, e);
            }
        }
    }
    out
}

/// Reads at most the manifest limit; a larger file is an error, not a truncated manifest.
fn read_limited(path: &Path) -> std::io::Result<Vec<u8>> {
    let mut buf = Vec::new();
    std::fs::File::open(path)?.take(pod::decode::MAX_MANIFEST_BYTES as u64 + 1).read_to_end(&mut buf)?;
    if buf.len() > pod::decode::MAX_MANIFEST_BYTES {
        return Err(std::io::Error::other(format!(
            "file is larger than the {} byte limit for a manifest",
            pod::decode::MAX_MANIFEST_BYTES
        )));
    }
    Ok(buf)
}

fn absolute(p: &Path) -> PathBuf {
    std::path::absolute(p).unwrap_or_else(|_| p.to_path_buf())
}

/// The running source: remembers the last good pods of every file.
struct FileSource {
    cfg: FileSourceConfig,
    last_good: BTreeMap<PathBuf, Vec<StaticPod>>,
    kept: Option<super::kept::Kept>,
    /// What was last logged, so a rescan repeats nothing.
    reported: BTreeSet<String>,
    last_sent: Option<Vec<(String, String)>>,
}

impl FileSource {
    /// Scans and builds the snapshot; `None` when nothing changed since the last one sent.
    fn rescan(&mut self) -> Option<Update> {
        let scan = scan(&self.cfg.path, &self.cfg.node, self.cfg.policy);
        let errors = scan.errors.len() + usize::from(scan.path_problem.is_some());
        if errors == 0 {
            super::source_success("file");
        } else {
            crate::metrics::add(&crate::metrics::SOURCE_ERRORS, &[("source", "file")], errors as f64);
        }
        let mut messages = BTreeSet::new();
        if let Some(p) = &scan.path_problem {
            messages.insert(format!("W{}: {p}; no file pods until that changes", self.cfg.path.display()));
        }
        for (p, why) in &scan.skipped {
            messages.insert(format!("I{}: {why}", p.display()));
        }
        for (p, w) in &scan.warnings {
            messages.insert(format!("W{}: {w}", p.display()));
        }
        // Files that vanished take their pods with them; files that broke keep their last good.
        self.last_good.retain(|p, _| scan.by_file.contains_key(p) || scan.errors.contains_key(p));
        if let Some(kept) = &mut self.kept {
            for (p, bytes) in &scan.contents {
                kept.keep(&absolute(p), bytes);
            }
            let broken: Vec<&PathBuf> = scan.errors.keys().filter(|p| !self.last_good.contains_key(*p)).collect();
            for p in broken {
                if let Some(pods) = kept.load(&absolute(p), &self.cfg.node, self.cfg.policy) {
                    log::warn!(
                        "file source: {} is invalid; running its last valid version, kept from before",
                        p.display()
                    );
                    self.last_good.insert(p.clone(), pods);
                }
            }
            if scan.path_problem.is_none() {
                kept.retain(&scan.by_file.keys().chain(scan.errors.keys()).map(|p| absolute(p)).collect());
            }
        }
        for (p, e) in &scan.errors {
            let kept = self.last_good.get(p).is_some_and(|v| !v.is_empty());
            let suffix = if kept { " (keeping the last valid version of its pod running)" } else { "" };
            for line in e.to_string().lines() {
                messages.insert(format!("E{line}{suffix}"));
            }
        }
        for (p, pods) in &scan.by_file {
            self.last_good.insert(p.clone(), pods.clone());
        }
        // Same namespace/name in two files: the lexically last file wins, as kubelet.
        let mut by_key: BTreeMap<String, (PathBuf, StaticPod)> = BTreeMap::new();
        for (p, pods) in &self.last_good {
            for sp in pods {
                if let Some((prev, _)) = by_key.insert(sp.pod.key(), (p.clone(), sp.clone())) {
                    messages.insert(format!(
                        "W{}: pod {} is also defined in {}; using {}",
                        p.display(),
                        sp.pod.key(),
                        prev.display(),
                        p.display()
                    ));
                }
            }
        }
        for m in messages.difference(&self.reported) {
            let (level, text) = m.split_at(1);
            match level {
                "E" => log::error!("file source: {text}"),
                "W" => log::warn!("file source: {text}"),
                _ => log::info!("file source: {text}"),
            }
        }
        self.reported = messages;
        let pods: Vec<StaticPod> = by_key.into_values().map(|(_, sp)| sp).collect();
        let errors: Vec<ManifestError> = scan.errors.into_values().collect();
        // A new error is news even when the pods stay the same (they are kept running).
        let fingerprint: Vec<(String, String)> = pods
            .iter()
            .map(|sp| (sp.uid.clone(), serde_json::to_string(&sp.pod).unwrap_or_default()))
            .chain(errors.iter().map(|e| ("error".to_string(), e.to_string())))
            .collect();
        if self.last_sent.as_ref() == Some(&fingerprint) {
            return None;
        }
        self.last_sent = Some(fingerprint);
        Some(Update { source: SourceId::File, pods, errors })
    }
}

/// An inotify watch on the directory that holds the manifests (the path itself, or the
/// parent of a single manifest file).
struct Watch {
    fd: Async<OwnedFd>,
    /// For a single-file path: only events about this name matter.
    only: Option<std::ffi::OsString>,
}

impl Watch {
    fn new(path: &Path) -> std::io::Result<Watch> {
        use rustix::fs::inotify;
        let meta = std::fs::metadata(path)?;
        let (dir, only) = if meta.is_dir() {
            (path.to_path_buf(), None)
        } else {
            let parent = path.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
            (parent.to_path_buf(), path.file_name().map(|n| n.to_os_string()))
        };
        let fd = inotify::init(inotify::CreateFlags::CLOEXEC | inotify::CreateFlags::NONBLOCK)?;
        let mask = inotify::WatchFlags::CREATE
            | inotify::WatchFlags::CLOSE_WRITE
            | inotify::WatchFlags::MODIFY
            | inotify::WatchFlags::DELETE
            | inotify::WatchFlags::MOVED_FROM
            | inotify::WatchFlags::MOVED_TO
            | inotify::WatchFlags::ATTRIB
            | inotify::WatchFlags::DELETE_SELF
            | inotify::WatchFlags::MOVE_SELF;
        inotify::add_watch(&fd, &dir, mask)?;
        Ok(Watch { fd: Async::new(fd)?, only })
    }

    /// Waits for events; returns (something relevant changed, the watched directory is gone).
    async fn next(&self) -> std::io::Result<(bool, bool)> {
        use rustix::fs::inotify::{ReadFlags, Reader};
        self.fd.readable().await?;
        let mut buf = [std::mem::MaybeUninit::<u8>::uninit(); 8192];
        let mut reader = Reader::new(self.fd.get_ref(), &mut buf);
        let (mut relevant, mut gone) = (false, false);
        loop {
            let event = match reader.next() {
                Ok(e) => e,
                Err(rustix::io::Errno::AGAIN) => break,
                Err(e) => return Err(e.into()),
            };
            let flags = event.events();
            if flags.intersects(ReadFlags::DELETE_SELF | ReadFlags::MOVE_SELF | ReadFlags::IGNORED) {
                gone = true;
            }
            if flags.contains(ReadFlags::QUEUE_OVERFLOW) {
                relevant = true;
            }
            if let Some(name) = event.file_name() {
                let name = <std::ffi::OsStr as std::os::unix::ffi::OsStrExt>::from_bytes(name.to_bytes());
                let hidden = name.to_string_lossy().starts_with('.');
                let wanted = self.only.as_deref().is_none_or(|only| only == name);
                if !hidden && wanted {
                    relevant = true;
                }
            }
            if reader.is_buffer_empty() {
                break;
            }
        }
        Ok((relevant, gone))
    }
}

/// Runs the file source until the receiver goes away.
pub async fn run(cfg: FileSourceConfig, tx: smol::channel::Sender<Update>) {
    let kept = cfg.kept_dir.clone().map(super::kept::Kept::new);
    let mut src = FileSource { cfg, last_good: BTreeMap::new(), kept, reported: BTreeSet::new(), last_sent: None };
    let mut watch: Option<Watch> = None;
    let mut watch_error_logged = false;
    let mut next_full = Instant::now();
    let mut pending: Option<(Instant, Instant)> = None; // (scan at, first event)
    loop {
        if watch.is_none() && src.cfg.path.exists() {
            match Watch::new(&src.cfg.path) {
                Ok(w) => {
                    log::debug!("file source: watching {}", src.cfg.path.display());
                    watch = Some(w);
                    watch_error_logged = false;
                    next_full = Instant::now(); // it just appeared (or at start): scan now
                }
                Err(e) if !watch_error_logged => {
                    log::warn!(
                        "file source: cannot watch {}: {e}; rescanning every {:?}",
                        src.cfg.path.display(),
                        MISSING_POLL
                    );
                    watch_error_logged = true;
                }
                Err(_) => {}
            }
        }
        let now = Instant::now();
        let due = match pending {
            Some((at, _)) => at.min(next_full),
            None => next_full,
        };
        if now >= due {
            pending = None;
            next_full = now + src.cfg.check_frequency;
            if let Some(update) = src.rescan() {
                if tx.send(update).await.is_err() {
                    return;
                }
            }
            continue;
        }
        let mut wait = due - now;
        if watch.is_none() {
            wait = wait.min(MISSING_POLL);
        }
        let timer = async {
            smol::Timer::after(wait).await;
            None
        };
        let event = async {
            match &watch {
                Some(w) => Some(w.next().await),
                None => std::future::pending().await,
            }
        };
        match smol::future::or(event, timer).await {
            Some(Ok((relevant, gone))) => {
                let now = Instant::now();
                if relevant || gone {
                    let first = pending.map(|(_, f)| f).unwrap_or(now);
                    pending = Some(((now + QUIET_PERIOD).min(first + MAX_DELAY), first));
                }
                if gone {
                    log::warn!("file source: {} was removed or moved", src.cfg.path.display());
                    watch = None;
                }
            }
            Some(Err(e)) => {
                log::warn!("file source: watch failed: {e}; setting it up again");
                watch = None;
            }
            None => {
                if watch.is_none() && src.cfg.path.exists() {
                    continue; // set up the watch and scan at once
                }
            }
        }
    }
}
