//! The file source (`staticPodPath`, `--pod-manifest-path`): a directory of manifests, or a
//! single manifest file.
//!
//! Reads as kubelet does (`scan`: lexical order, dot-files ignored, no recursion, a 10 MiB
//! limit, one Pod, ConfigMap or Secret per file); a `namespace/name` in two files goes to the
//! lexically last one, with a warning naming both. With signatures trusted, one trust decision
//! covers the whole scan (`decide`): see `trust::versions`.
//! It rescans on inotify events (`watch`: a complete write at once, a delete or an open write
//! when the edit is whole), and fully every `fileCheckFrequency`. A path that does not exist
//! yet is looked for every second.
//!
//! Better than kubelet: when a file that produced a pod becomes invalid, its last valid pods
//! stay in the snapshot (the pod keeps running) and the error is reported; kubelet kills the
//! pod at the next rescan. The last valid version is kept on disk too (`kept`), so this holds
//! across a restart of atoll. Out: an [`Update`] after every scan whose result changed.

use super::last_wins::{last_wins, news, Level, Note};
use super::payload::{claim, Intake};
use super::scan::{absolute, private_dir_problem, refuse_pods, scan_with, Good, Memo, Scan};
use super::{SourceId, Update};
use crate::dirwatch::{self as watch, Pending, Watch};
use crate::objects::{self, LocalObject};
use crate::pod::{Finding, ManifestError, StaticPod};
use crate::trust::Versions;
use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How often a missing path is looked for (kubelet retries its watch every second).
const MISSING_POLL: Duration = Duration::from_secs(1);

#[derive(Clone, Debug)]
pub struct FileSourceConfig {
    pub path: PathBuf,
    pub check_frequency: Duration,
    /// How its files are opened: signatures trusted (`manifestTrust`), the decryption identity
    /// for `*.age` files (`decryptionKeyFile`), the node, strictness.
    pub intake: Intake,
    /// Where the last valid version of each file is kept (`<root-dir>/sources/files`).
    pub kept_dir: Option<PathBuf>,
    /// Where the newest signed version accepted for each item is kept
    /// (`<root-dir>/trust/file-versions.json`), when signatures are trusted.
    pub versions: Option<PathBuf>,
    /// `secretsDir`: a private directory of Secrets and ConfigMaps (no pods), read only while
    /// it is root's alone ([`private_dir_problem`]).
    pub secrets: bool,
}

impl FileSourceConfig {
    fn id(&self) -> SourceId {
        if self.secrets {
            SourceId::Secrets
        } else {
            SourceId::File
        }
    }

    /// How its log lines start.
    fn label(&self) -> &'static str {
        if self.secrets {
            "secrets dir"
        } else {
            "file source"
        }
    }
}

/// A snapshot as sent: pods, objects, errors.
type Sent = (Vec<StaticPod>, Vec<Arc<LocalObject>>, Vec<ManifestError>);
/// Pods by `namespace/name`, with the file each comes from; objects by kind and name.
type PodsByName = BTreeMap<String, (PathBuf, StaticPod)>;
type ObjectsByName = BTreeMap<(objects::ObjectKind, String), Arc<LocalObject>>;

/// The running source: remembers what every file last gave.
struct FileSource {
    cfg: FileSourceConfig,
    /// Each file as it runs: its current content, or its last valid version while it is
    /// broken (from memory, or kept on disk from before a restart).
    good: BTreeMap<PathBuf, Good>,
    kept: Option<super::kept::Kept>,
    /// What the last rescan decided to keep on disk, written once its update is sent.
    unstored: Option<Unstored>,
    /// What was last logged, so a rescan repeats nothing.
    reported: BTreeSet<Note>,
    last_sent: Option<Sent>,
    /// What each file loaded to, by its bytes.
    memo: Memo,
    /// The newest signed version accepted for each item (with signatures trusted), and the
    /// refusals already counted.
    versions: Option<Versions>,
    refusals: BTreeSet<(PathBuf, String)>,
    /// Which file each pod (`namespace/name`) of the last snapshot sent came from.
    owners: BTreeMap<String, PathBuf>,
}

/// The kept copies' disk work a rescan decided: each file's last valid content to keep
/// (`None`: a Secret's or an encrypted file's, to forget), and the files present (`None`: the
/// directory could not be read, so no record is dropped). A whole picture, so a later scan's
/// may take the place of one not yet stored.
struct Unstored {
    files: Vec<(PathBuf, Option<Arc<super::payload::Payload>>)>,
    present: Option<BTreeSet<PathBuf>>,
}

/// What a rescan came to.
#[derive(Debug)]
enum Rescan {
    Changed(Update),
    Unchanged,
    /// A pod sent from one file is also in a new one: most likely a tool's copy about to be
    /// renamed over the original (`sed -i`). Looked at again when the edit is whole.
    HalfEdit,
}

/// How a rescan ended for the source's loop.
enum Done {
    /// Its update (if any) is sent.
    Scanned,
    HalfEdit,
    /// The agent is gone.
    Closed,
}

fn holds_secret(g: &Good) -> bool {
    g.payload.encrypted() || g.opened.manifests.objects.iter().any(|o| o.kind == objects::ObjectKind::Secret)
}

impl FileSource {
    fn new(cfg: FileSourceConfig) -> FileSource {
        let kept = cfg.kept_dir.clone().map(super::kept::Kept::new);
        let versions = cfg.intake.trust.is_some().then(|| Versions::open(cfg.versions.clone()));
        FileSource {
            cfg,
            good: BTreeMap::new(),
            kept,
            unstored: None,
            reported: BTreeSet::new(),
            last_sent: None,
            memo: Memo::new(),
            versions,
            refusals: BTreeSet::new(),
            owners: BTreeMap::new(),
        }
    }

    /// Scans and builds the snapshot (blocking: run off the executor). With `may_hold`, a
    /// half-done edit is held back.
    fn rescan(&mut self, may_hold: bool) -> Rescan {
        let private = if self.cfg.secrets { private_dir_problem(&self.cfg.path) } else { None };
        let mut scan = match private {
            Some(problem) => Scan { path_problem: Some(problem), ..Scan::default() },
            None => scan_with(&self.cfg.path, &self.cfg.intake, &mut self.memo),
        };
        if self.cfg.secrets {
            refuse_pods(&mut scan);
        }
        self.decide(&mut scan);
        if may_hold && self.claimed_anew(&scan) {
            return Rescan::HalfEdit;
        }
        let errors = scan.errors.len() + usize::from(scan.path_problem.is_some());
        if errors == 0 {
            super::source_success(&self.cfg.id().to_string());
        } else {
            let source = self.cfg.id().to_string();
            crate::metrics::add(&crate::metrics::SOURCE_ERRORS, &[("source", &source)], errors as f64);
        }
        let mut notes = BTreeSet::new();
        if let Some(p) = &scan.path_problem {
            notes.insert(Note::about(Level::Warn, &self.cfg.path, format!("{p}; no file pods until that changes")));
        }
        for (p, why) in &scan.skipped {
            notes.insert(Note::about(Level::Info, p, why));
        }
        for (p, g) in &scan.good {
            for w in &g.opened.manifests.warnings {
                notes.insert(Note::about(Level::Warn, p, w));
            }
        }
        // Files that vanished take their pods with them; files that broke keep their last good.
        self.good.retain(|p, _| scan.good.contains_key(p) || scan.errors.contains_key(p));
        self.bring_back_kept(&scan);
        for (p, e) in &scan.errors {
            let kept = self.good.get(p).is_some_and(|g| !g.opened.manifests.pods.is_empty());
            let suffix = if kept { " (keeping the last valid version of its pod running)" } else { "" };
            for line in e.to_string().lines() {
                notes.insert(Note::new(Level::Error, format!("{line}{suffix}")));
            }
        }
        let present = scan
            .path_problem
            .is_none()
            .then(|| scan.good.keys().chain(scan.errors.keys()).map(|p| absolute(p)).collect());
        self.good.extend(scan.good);
        self.keep_copies(present);
        let (by_key, objects_by_key) = self.by_name(&mut notes);
        for n in news(&notes, &self.reported) {
            let (label, text) = (self.cfg.label(), &n.text);
            match n.level {
                Level::Error => log::error!("{label}: {text}"),
                Level::Warn => log::warn!("{label}: {text}"),
                Level::Info => log::info!("{label}: {text}"),
            }
        }
        self.reported = notes;
        let owners: BTreeMap<String, PathBuf> = by_key.iter().map(|(k, (p, _))| (k.clone(), p.clone())).collect();
        let pods: Vec<StaticPod> = by_key.into_values().map(|(_, sp)| sp).collect();
        let objects: Vec<Arc<LocalObject>> = objects_by_key.into_values().collect();
        let errors: Vec<ManifestError> = scan.errors.into_values().collect();
        // A new error is news even when the pods stay the same (they are kept running).
        if self.last_sent.as_ref().is_some_and(|(p, o, e)| *p == pods && *o == objects && *e == errors) {
            return Rescan::Unchanged;
        }
        self.last_sent = Some((pods.clone(), objects.clone(), errors.clone()));
        self.owners = owners;
        let payloads = self.good.values().map(|g| g.payload.clone()).collect();
        Rescan::Changed(Update { source: self.cfg.id(), pods, objects, errors, payloads, leaving: vec![] })
    }

    /// Keeps each file's last valid version on disk, a broken file's too (not a Secret's, nor
    /// an encrypted file's): a whole picture, so a later scan's may take the place of one not
    /// yet stored. `present`: the files the scan found (`None`: the directory could not be
    /// read). The writes are left to [`store_kept`](Self::store_kept).
    fn keep_copies(&mut self, present: Option<BTreeSet<PathBuf>>) {
        if self.kept.is_none() {
            return;
        }
        let files = self.good.iter().map(|(p, g)| (absolute(p), (!holds_secret(g)).then(|| g.payload.clone())));
        self.unstored = Some(Unstored { files: files.collect(), present });
    }

    /// Brings back from disk the kept version of a broken file that has none in memory (after
    /// a restart), opened again and checked against the version records.
    fn bring_back_kept(&mut self, scan: &Scan) {
        let Some(kept) = &mut self.kept else { return };
        let broken: Vec<&PathBuf> = scan.errors.keys().filter(|p| !self.good.contains_key(*p)).collect();
        for p in broken {
            let Some((opened, payload)) = kept.load(&absolute(p), &self.cfg.intake) else { continue };
            if let Some(why) = self.versions.as_ref().and_then(|v| v.check(&claim(&opened, None))) {
                log::warn!("{}: the kept copy of {} is not used: {why}", self.cfg.label(), p.display());
                kept.forget(&absolute(p));
                continue;
            }
            let label = self.cfg.label();
            log::warn!("{label}: {} is invalid; running its last valid version, kept from before", p.display());
            self.good.insert(p.clone(), Good { opened, payload });
        }
    }

    /// Writes what the last rescan decided to keep (a record is two fsyncs): after its update
    /// is sent, once the directory is quiet ([`KEPT_AFTER_QUIET`]), so a pod does not wait on
    /// the disk to start. Blocking: run off the executor.
    fn store_kept(&mut self) {
        let (Some(kept), Some(work)) = (&mut self.kept, self.unstored.take()) else { return };
        for (file, payload) in work.files {
            match payload {
                Some(payload) => kept.keep(&file, &payload),
                None => kept.forget(&file),
            }
        }
        if let Some(present) = work.present {
            kept.retain(&present);
        }
    }

    /// Every file's pods and objects by name: the lexically last file wins a name two define
    /// (as kubelet), with a warning naming both.
    fn by_name(&self, notes: &mut BTreeSet<Note>) -> (PodsByName, ObjectsByName) {
        let files = || self.good.iter().map(|(p, g)| (p, &g.opened.manifests));
        let objects = files().flat_map(|(p, m)| {
            m.objects
                .iter()
                .map(|o| (p.clone(), (o.kind, o.key()), format!("{} {}", o.kind.as_str(), o.key()), o.clone()))
        });
        let pods = files().flat_map(|(p, m)| {
            m.pods.iter().map(|sp| (p.clone(), sp.pod.key(), format!("pod {}", sp.pod.key()), sp.clone()))
        });
        let (objects, object_notes) = last_wins(objects);
        let (pods, pod_notes) = last_wins(pods);
        notes.extend(object_notes.into_iter().chain(pod_notes));
        (pods, objects.into_iter().map(|(k, (_, o))| (k, o)).collect())
    }

    /// The trust decision for the whole scan (with signatures trusted): a file older than a
    /// version accepted before for one of its items, or than another file that defines one of
    /// them, is refused whole (an error; a replay is refused); the others' versions are
    /// recorded. A last valid version that the records now refuse goes too, with its kept
    /// copy: a copy of an old version cannot outlive the fleet's newer one.
    fn decide(&mut self, scan: &mut Scan) {
        let Some(versions) = &mut self.versions else { return };
        let files: Vec<PathBuf> = scan.good.keys().cloned().collect();
        let claims: Vec<_> = scan.good.values().map(|g| claim(&g.opened, None)).collect();
        for (file, why) in files.into_iter().zip(versions.decide(&claims)) {
            let Some(why) = why else { continue };
            scan.good.remove(&file);
            if self.refusals.insert((file.clone(), why.clone())) {
                crate::metrics::add(&crate::metrics::SIGNATURE_REFUSALS, &[("source", "file")], 1.0);
            }
            let problems = vec![Finding::new("signature", why)];
            scan.errors.insert(file.clone(), ManifestError { origin: file.display().to_string(), problems });
        }
        // Counted once while they last (a file that goes and comes back is counted again).
        self.refusals.retain(|(f, _)| scan.errors.contains_key(f));
        let stale: Vec<PathBuf> = self
            .good
            .iter()
            .filter(|(f, g)| !scan.good.contains_key(*f) && versions.check(&claim(&g.opened, None)).is_some())
            .map(|(f, _)| f.clone())
            .collect();
        for f in stale {
            self.good.remove(&f);
            if let Some(kept) = &mut self.kept {
                kept.forget(&absolute(&f));
            }
        }
    }

    /// Whether a pod of the last snapshot is now also defined by another file, while the file
    /// it came from still defines it.
    fn claimed_anew(&self, scan: &Scan) -> bool {
        let defines = |g: &Good, key: &str| g.opened.manifests.pods.iter().any(|o| o.pod.key() == key);
        scan.good.iter().any(|(p, g)| {
            g.opened.manifests.pods.iter().any(|sp| {
                let key = sp.pod.key();
                self.owners
                    .get(&key)
                    .is_some_and(|owner| owner != p && scan.good.get(owner).is_some_and(|o| defines(o, &key)))
            })
        })
    }
}

/// How long the directory stays quiet after a scan before the kept copies of its files are
/// written (at the latest [`watch::MAX_DELAY`] after the first scan not yet kept): the files
/// of a burst come well within it, and a lone pod's copy is written while the runtime makes
/// its sandbox, as before. Their fsyncs run on the same blocking job as the scans, so written
/// at once they held back the scan of the next files of a burst (ten manifests copied in at
/// once started in two or three groups, 6 to 16 ms apart). A stop of atoll within that time
/// keeps the copies of before the last edit.
const KEPT_AFTER_QUIET: Duration = Duration::from_millis(10);

/// Runs the file source until the receiver goes away. Every look at the file system (the
/// watch's set-up, each scan) runs off the executor: a FIFO, a slow or a stuck file system
/// stalls this source at most, never the agent.
pub async fn run(cfg: FileSourceConfig, tx: smol::channel::Sender<Update>) {
    let mut src = FileSource::new(cfg);
    let mut watch: Option<Watch> = None;
    let mut watch_error_logged = false;
    let mut next_full = Instant::now();
    let mut pending: Option<Pending> = None;
    // When to write the kept copies: once quiet, and at the latest (a directory never quiet
    // for long, a file rewritten over and over, does not hold them back for good).
    let mut store_at: Option<(Instant, Instant)> = None;
    loop {
        if watch.is_none() {
            let path = src.cfg.path.clone();
            match crate::task::unblock(move || path.exists().then(|| Watch::new(&path))).await {
                Some(Ok(w)) => {
                    log::debug!("{}: watching {}", src.cfg.label(), src.cfg.path.display());
                    watch = Some(w);
                    watch_error_logged = false;
                    next_full = Instant::now(); // it just appeared (or at start): scan now
                }
                Some(Err(e)) if !watch_error_logged => {
                    log::warn!(
                        "{}: cannot watch {}: {e}; rescanning every {:?}",
                        src.cfg.label(),
                        src.cfg.path.display(),
                        MISSING_POLL
                    );
                    watch_error_logged = true;
                }
                _ => {}
            }
        }
        let now = Instant::now();
        let open_writes = watch.as_ref().is_some_and(|w| w.open_writes());
        let due = match pending {
            Some(p) => p.due(open_writes).min(next_full),
            None => next_full,
        };
        if now >= due {
            // A half-done edit is held until it is whole, at most MAX_DELAY.
            let may_hold = pending.is_some_and(|p| now < p.first + watch::MAX_DELAY);
            let tx = tx.clone();
            let (back, done) = crate::task::unblock(move || {
                let done = match src.rescan(may_hold) {
                    Rescan::HalfEdit => Done::HalfEdit,
                    Rescan::Changed(update) => match tx.send_blocking(update) {
                        Ok(()) => Done::Scanned,
                        Err(_) => Done::Closed,
                    },
                    Rescan::Unchanged => Done::Scanned,
                };
                (src, done)
            })
            .await;
            src = back;
            match done {
                Done::HalfEdit => {
                    pending = pending.map(|p| Pending { at: p.first + watch::MAX_DELAY, folding: true, ..p });
                    continue;
                }
                Done::Closed => {
                    crate::task::unblock(move || src.store_kept()).await;
                    return;
                }
                Done::Scanned => {}
            }
            pending = None;
            next_full = now + src.cfg.check_frequency;
            let latest = store_at.map_or(now + watch::MAX_DELAY, |(_, latest)| latest);
            store_at = src.unstored.is_some().then(|| (Instant::now() + KEPT_AFTER_QUIET, latest));
            if let Some(w) = &mut watch {
                w.scanned();
            }
            continue;
        }
        // The kept copies (two fsyncs each) once the directory is quiet, not between the scans
        // of a burst of files: the update is sent first, so no pod waits on the disk to start.
        if store_at.is_some_and(|(quiet, latest)| (now >= quiet && pending.is_none()) || now >= latest) {
            src = crate::task::unblock(move || {
                src.store_kept();
                src
            })
            .await;
            store_at = None;
            continue;
        }
        let store_due = store_at.map(|(quiet, latest)| if pending.is_none() { quiet.min(latest) } else { latest });
        let due = store_due.map_or(due, |at| at.min(due));
        let mut wait = due.saturating_duration_since(now);
        if watch.is_none() {
            wait = wait.min(MISSING_POLL);
        }
        let deadline = Instant::now().checked_add(wait).unwrap_or_else(|| Instant::now() + MISSING_POLL);
        match watch::next_before(&mut watch, deadline).await {
            Some(Ok(batch)) => {
                pending = watch::schedule(pending, batch, Instant::now());
                if batch.gone {
                    log::warn!("{}: {} was removed or moved", src.cfg.label(), src.cfg.path.display());
                    watch = None;
                }
            }
            Some(Err(e)) => {
                log::warn!("{}: watch failed: {e}; setting it up again", src.cfg.label());
                watch = None;
            }
            None => {}
        }
    }
}
