//! The file source (`staticPodPath`, `--pod-manifest-path`): a directory of manifests, or a
//! single manifest file.
//!
//! Reads as kubelet does (`scan`: lexical order, dot-files ignored, no recursion, a 10 MiB
//! limit, one Pod, ConfigMap or Secret per file); a `namespace/name` in two files goes to the
//! lexically last one, with a warning naming both.
//! It rescans on inotify events (`watch`: a complete write at once, a delete or an open write
//! when the edit is whole), and fully every `fileCheckFrequency`. A path that does not exist
//! yet is looked for every second.
//!
//! Better than kubelet: when a file that produced a pod becomes invalid, its last valid pods
//! stay in the snapshot (the pod keeps running) and the error is reported; kubelet kills the
//! pod at the next rescan. The last valid version is kept on disk too (`kept`), so this holds
//! across a restart of atoll. Out: an [`Update`] after every scan whose result changed.

use super::scan::{absolute, private_dir_problem, refuse_pods, scan_with, Memo, Scan};
use super::{SourceId, Update};
use crate::dirwatch::{self as watch, Pending, Watch};
use crate::objects::{self, LocalObject};
use crate::pod::{Finding, ManifestError, Policy, StaticPod};
use crate::trust::Trust;
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
    pub node: String,
    pub policy: Policy,
    /// Where the last valid version of each file is kept (`<root-dir>/sources/files`).
    pub kept_dir: Option<PathBuf>,
    /// Signed manifests (`manifestTrust`), and where the newest signed version accepted for
    /// each pod is kept (`<root-dir>/trust/file-versions.json`).
    pub trust: Option<Trust>,
    pub versions: Option<PathBuf>,
    /// `decryptionKeyFile`: the identity `*.age` manifests are decrypted with (in memory).
    pub key: Option<std::sync::Arc<crate::age::Identity>>,
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

/// The running source: remembers the last good pods of every file.
struct FileSource {
    cfg: FileSourceConfig,
    last_good: BTreeMap<PathBuf, Vec<StaticPod>>,
    last_good_objects: BTreeMap<PathBuf, Vec<Arc<LocalObject>>>,
    kept: Option<super::kept::Kept>,
    /// What was last logged, so a rescan repeats nothing.
    reported: BTreeSet<String>,
    last_sent: Option<Sent>,
    /// What each file loaded to, by its bytes.
    memo: Memo,
    /// The newest signed version accepted for each pod, and the replays already counted.
    versions: crate::trust::Versions,
    replays: BTreeSet<(PathBuf, u64)>,
    /// Which file each pod (`namespace/name`) of the last snapshot sent came from.
    owners: BTreeMap<String, PathBuf>,
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

impl FileSource {
    /// Scans and builds the snapshot. With `may_hold`, a half-done edit is held back.
    fn rescan(&mut self, may_hold: bool) -> Rescan {
        let private = if self.cfg.secrets { private_dir_problem(&self.cfg.path) } else { None };
        let mut scan = match private {
            Some(problem) => Scan { path_problem: Some(problem), ..Scan::default() },
            None => {
                let keys = (self.cfg.trust.as_ref(), self.cfg.key.as_deref());
                scan_with(&self.cfg.path, &self.cfg.node, self.cfg.policy, keys, &mut self.memo)
            }
        };
        if self.cfg.secrets {
            refuse_pods(&mut scan);
        }
        self.refuse_replays(&mut scan);
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
        self.last_good_objects.retain(|p, _| scan.by_file.contains_key(p) || scan.errors.contains_key(p));
        if let Some(kept) = &mut self.kept {
            for (p, bytes) in &scan.contents {
                // Neither a Secret nor an encrypted file's plaintext is ever copied to disk.
                let secret = scan
                    .objects_by_file
                    .get(p)
                    .is_some_and(|o| o.iter().any(|o| o.kind == objects::ObjectKind::Secret))
                    || p.to_string_lossy().ends_with(crate::age::SUFFIX);
                match secret {
                    true => kept.forget(&absolute(p)),
                    false => kept.keep(&absolute(p), bytes),
                }
            }
            let broken: Vec<&PathBuf> = scan.errors.keys().filter(|p| !self.last_good.contains_key(*p)).collect();
            for p in broken {
                if let Some(kept) = kept.load(&absolute(p), &self.cfg.node, self.cfg.policy) {
                    log::warn!(
                        "{}: {} is invalid; running its last valid version, kept from before",
                        self.cfg.label(),
                        p.display()
                    );
                    self.last_good.insert(p.clone(), kept.pods);
                    self.last_good_objects.insert(p.clone(), kept.objects);
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
            if let Some(version) = scan.signed.get(p).and_then(|v| v.version) {
                for sp in pods {
                    self.versions.accept(&sp.pod.key(), version);
                }
            }
            self.last_good.insert(p.clone(), pods.clone());
            match scan.objects_by_file.get(p) {
                Some(o) => self.last_good_objects.insert(p.clone(), o.clone()),
                None => self.last_good_objects.remove(p),
            };
        }
        // Objects from files: one per name, the lexically last file winning as for pods.
        let mut objects_by_key: BTreeMap<(objects::ObjectKind, String), (PathBuf, Arc<LocalObject>)> = BTreeMap::new();
        for (p, objs) in &self.last_good_objects {
            for o in objs {
                if let Some((prev, _)) = objects_by_key.insert((o.kind, o.key()), (p.clone(), o.clone())) {
                    messages.insert(format!(
                        "W{}: {} {} is also defined in {}; using {}",
                        p.display(),
                        o.kind.as_str(),
                        o.key(),
                        prev.display(),
                        p.display()
                    ));
                }
            }
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
                "E" => log::error!("{}: {text}", self.cfg.label()),
                "W" => log::warn!("{}: {text}", self.cfg.label()),
                _ => log::info!("{}: {text}", self.cfg.label()),
            }
        }
        self.reported = messages;
        let owners: BTreeMap<String, PathBuf> = by_key.iter().map(|(k, (p, _))| (k.clone(), p.clone())).collect();
        let pods: Vec<StaticPod> = by_key.into_values().map(|(_, sp)| sp).collect();
        let objects: Vec<Arc<LocalObject>> = objects_by_key.into_values().map(|(_, o)| o).collect();
        let errors: Vec<ManifestError> = scan.errors.into_values().collect();
        // A new error is news even when the pods stay the same (they are kept running).
        if self.last_sent.as_ref().is_some_and(|(p, o, e)| *p == pods && *o == objects && *e == errors) {
            return Rescan::Unchanged;
        }
        self.last_sent = Some((pods.clone(), objects.clone(), errors.clone()));
        self.owners = owners;
        Rescan::Changed(Update { source: self.cfg.id(), pods, objects, errors })
    }

    /// Refuses signed files older than a version accepted before for one of their pods (a
    /// replay): they become errors, and their pods' last valid versions keep running.
    fn refuse_replays(&mut self, scan: &mut Scan) {
        let mut replayed = Vec::new();
        for (file, v) in &scan.signed {
            let (Some(version), Some(pods)) = (v.version, scan.by_file.get(file)) else { continue };
            if let Some(e) = pods.iter().find_map(|sp| self.versions.check(&sp.pod.key(), version).err()) {
                replayed.push((file.clone(), version, e));
            }
        }
        for (file, version, e) in replayed {
            scan.by_file.remove(&file);
            scan.objects_by_file.remove(&file);
            scan.contents.remove(&file);
            scan.signed.remove(&file);
            scan.warnings.retain(|(p, _)| *p != file);
            if self.replays.insert((file.clone(), version)) {
                crate::metrics::add(&crate::metrics::SIGNATURE_REFUSALS, &[("source", "file")], 1.0);
            }
            let problems = vec![Finding::new("signature", e)];
            scan.errors.insert(file.clone(), ManifestError { origin: file.display().to_string(), problems });
        }
    }

    /// Whether a pod of the last snapshot is now also defined by another file, while the file
    /// it came from still defines it.
    fn claimed_anew(&self, scan: &Scan) -> bool {
        scan.by_file.iter().any(|(p, pods)| {
            pods.iter().any(|sp| {
                self.owners.get(&sp.pod.key()).is_some_and(|owner| {
                    owner != p && scan.by_file.get(owner).is_some_and(|v| v.iter().any(|o| o.pod.key() == sp.pod.key()))
                })
            })
        })
    }
}

/// Runs the file source until the receiver goes away.
pub async fn run(cfg: FileSourceConfig, tx: smol::channel::Sender<Update>) {
    let kept = cfg.kept_dir.clone().map(super::kept::Kept::new);
    let versions = crate::trust::Versions::open(cfg.versions.clone());
    let mut src = FileSource {
        cfg,
        last_good: BTreeMap::new(),
        last_good_objects: BTreeMap::new(),
        kept,
        reported: BTreeSet::new(),
        last_sent: None,
        memo: Memo::new(),
        versions,
        replays: BTreeSet::new(),
        owners: BTreeMap::new(),
    };
    let mut watch: Option<Watch> = None;
    let mut watch_error_logged = false;
    let mut next_full = Instant::now();
    let mut pending: Option<Pending> = None;
    loop {
        if watch.is_none() && src.cfg.path.exists() {
            match Watch::new(&src.cfg.path) {
                Ok(w) => {
                    log::debug!("{}: watching {}", src.cfg.label(), src.cfg.path.display());
                    watch = Some(w);
                    watch_error_logged = false;
                    next_full = Instant::now(); // it just appeared (or at start): scan now
                }
                Err(e) if !watch_error_logged => {
                    log::warn!(
                        "{}: cannot watch {}: {e}; rescanning every {:?}",
                        src.cfg.label(),
                        src.cfg.path.display(),
                        MISSING_POLL
                    );
                    watch_error_logged = true;
                }
                Err(_) => {}
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
            match src.rescan(may_hold) {
                Rescan::HalfEdit => {
                    pending = pending.map(|p| Pending { at: p.first + watch::MAX_DELAY, folding: true, ..p });
                    continue;
                }
                Rescan::Changed(update) => {
                    if tx.send(update).await.is_err() {
                        return;
                    }
                }
                Rescan::Unchanged => {}
            }
            pending = None;
            next_full = now + src.cfg.check_frequency;
            if let Some(w) = &mut watch {
                w.scanned();
            }
            continue;
        }
        let mut wait = due - now;
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
            None => {
                if watch.is_none() && src.cfg.path.exists() {
                    continue; // set up the watch and scan at once
                }
            }
        }
    }
}
