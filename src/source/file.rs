//! The file source (`staticPodPath`, `--pod-manifest-path`): a directory of manifests, or a
//! single manifest file.
//!
//! Reads as kubelet does: entries in lexical order, dot-files ignored, no recursion into
//! sub-directories (logged once), other file types skipped, a 10 MiB limit, one Pod per file;
//! a `namespace/name` in two files goes to the lexically last one, with a warning naming both.
//! It rescans on inotify events (`watch`: a complete write at once, a delete or an open write
//! when the edit is whole), and fully every `fileCheckFrequency`. A path that does not exist
//! yet is looked for every second.
//!
//! Better than kubelet: when a file that produced a pod becomes invalid, its last valid pods
//! stay in the snapshot (the pod keeps running) and the error is reported; kubelet kills the
//! pod at the next rescan. The last valid version is kept on disk too (`kept`), so this holds
//! across a restart of atoll. Out: an [`Update`] after every scan whose result changed.

use super::{SourceId, Update};
use crate::dirwatch::{self as watch, Pending, Watch};
use crate::objects::{self, LocalObject};
use crate::pod::{self, Finding, ManifestError, Origin, Policy, Shape, StaticPod};
use crate::trust::{Trust, Verified};
use std::collections::{BTreeMap, BTreeSet};
use std::io::Read;
use std::path::{Path, PathBuf};
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

/// Why `dir` may not hold Secrets: it must be a directory (not a link) owned by root that only
/// root can enter (mode 0700). `None` when it is fine; `atoll doctor` says the same.
pub fn private_dir_problem(dir: &Path) -> Option<String> {
    use std::os::unix::fs::MetadataExt;
    let m = match std::fs::symlink_metadata(dir) {
        Ok(m) => m,
        Err(e) => return Some(format!("{}: {e}", dir.display())),
    };
    if !m.is_dir() {
        return Some(format!("{} is not a directory", dir.display()));
    }
    if m.uid() != 0 || m.mode() & 0o077 != 0 {
        return Some(format!(
            "{} is owned by uid {} with mode {:04o}: it must be owned by root with mode 0700 (chown root: {0}; chmod 700 {0}); its Secrets are not read until it is",
            dir.display(),
            m.uid(),
            m.mode() & 0o7777
        ));
    }
    None
}

/// What one scan found.
#[derive(Clone, Debug, Default)]
pub struct Scan {
    /// Pods by file, in lexical order of path.
    pub by_file: BTreeMap<PathBuf, Vec<StaticPod>>,
    /// Local ConfigMaps and Secrets by file (a file holds a Pod or one of them).
    pub objects_by_file: BTreeMap<PathBuf, Vec<Arc<LocalObject>>>,
    pub errors: BTreeMap<PathBuf, ManifestError>,
    pub warnings: Vec<(PathBuf, Finding)>,
    /// Entries passed over, with why (sub-directories, sockets, ...).
    pub skipped: Vec<(PathBuf, String)>,
    /// Why the path itself is unusable (missing, not a file or directory, unreadable).
    pub path_problem: Option<String>,
    /// The content of each file in `by_file` (what loaded).
    pub contents: BTreeMap<PathBuf, Vec<u8>>,
    /// What the signature of each signed file in `by_file` says.
    pub signed: BTreeMap<PathBuf, crate::trust::Verified>,
}

/// What each file loaded to, by a digest of its bytes: a rescan still reads every file (a
/// change of content shows whatever the file system's timestamps say), but parses only what
/// changed.
type Memo = BTreeMap<PathBuf, ([u8; 32], Loaded)>;
type Loaded = Result<(objects::Manifests, Option<Verified>), ManifestError>;

/// Reads every manifest under `path` once (the pipeline `atoll validate` shares); with
/// `trust`, each is checked against its signature file (`pod.yaml.minisig`).
pub fn scan(path: &Path, node: &str, policy: Policy, trust: Option<&Trust>) -> Scan {
    scan_with(path, node, policy, trust, &mut Memo::new())
}

/// [`scan`], reusing what `memo` holds for files whose bytes are unchanged (and keeping it
/// up to date).
fn scan_with(path: &Path, node: &str, policy: Policy, trust: Option<&Trust>, memo: &mut Memo) -> Scan {
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
            .filter(|e| {
                let name = e.file_name();
                let name = name.to_string_lossy();
                // Signatures go with their manifests; they are not manifests themselves.
                !name.starts_with('.') && !name.ends_with(crate::trust::SIGNATURE_SUFFIX)
            })
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
    memo.retain(|p, _| files.contains(p));
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
        let signature = match trust.map(|_| crate::trust::signature_beside(&file)).transpose() {
            Ok(s) => s.flatten(),
            Err(e) => {
                out.errors.insert(file.clone(), signature_error(&file, e));
                continue;
            }
        };
        let mut digest = ring::digest::Context::new(&ring::digest::SHA256);
        digest.update(&bytes);
        if let Some(sig) = &signature {
            digest.update(b"\0signature\0");
            digest.update(sig);
        }
        let mut seen_as = [0u8; 32];
        seen_as.copy_from_slice(digest.finish().as_ref());
        let loaded = match memo.get(&file) {
            Some((seen, loaded)) if *seen == seen_as => loaded.clone(),
            _ => {
                let loaded = load_file(&file, &bytes, signature.as_deref(), node, policy, trust);
                memo.insert(file.clone(), (seen_as, loaded.clone()));
                loaded
            }
        };
        match loaded {
            Ok((loaded, verified)) => {
                out.warnings.extend(loaded.warnings.into_iter().map(|w| (file.clone(), w)));
                out.by_file.insert(file.clone(), loaded.pods);
                if !loaded.objects.is_empty() {
                    out.objects_by_file.insert(file.clone(), loaded.objects);
                }
                if let Some(v) = verified {
                    out.signed.insert(file.clone(), v);
                }
                out.contents.insert(file, bytes);
            }
            Err(e) => {
                out.errors.insert(file, e);
            }
        }
    }
    out
}

/// One manifest file's pods: its signature checked first when signatures are trusted.
fn load_file(
    file: &Path,
    bytes: &[u8],
    signature: Option<&[u8]>,
    node: &str,
    policy: Policy,
    trust: Option<&Trust>,
) -> Loaded {
    let verified = match trust {
        Some(t) => {
            let mut shown = file.file_name().unwrap_or_default().to_os_string();
            shown.push(crate::trust::SIGNATURE_SUFFIX);
            t.check(bytes, signature, &shown.to_string_lossy()).map_err(|e| signature_error(file, e))?
        }
        None => None,
    };
    let origin = Origin::File(absolute(file));
    objects::load(bytes, Shape::SinglePod, &origin, node, policy).map(|l| (l, verified))
}

/// A manifest refused for its signature.
fn signature_error(file: &Path, message: String) -> ManifestError {
    crate::metrics::add(&crate::metrics::SIGNATURE_REFUSALS, &[("source", "file")], 1.0);
    ManifestError { origin: file.display().to_string(), problems: vec![Finding::new("signature", message)] }
}

/// A Pod in the secrets directory is an error (pods belong in the manifest directory), its
/// file's objects are not used either.
fn refuse_pods(scan: &mut Scan) {
    let with_pods: Vec<PathBuf> = scan.by_file.iter().filter(|(_, p)| !p.is_empty()).map(|(f, _)| f.clone()).collect();
    for file in with_pods {
        scan.by_file.remove(&file);
        scan.objects_by_file.remove(&file);
        scan.contents.remove(&file);
        let problem =
            Finding::new("kind", "secretsDir holds Secrets and ConfigMaps; a Pod goes in the manifest directory");
        scan.errors.insert(file.clone(), ManifestError { origin: file.display().to_string(), problems: vec![problem] });
    }
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
            None => scan_with(&self.cfg.path, &self.cfg.node, self.cfg.policy, self.cfg.trust.as_ref(), &mut self.memo),
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
                let secret = scan
                    .objects_by_file
                    .get(p)
                    .is_some_and(|o| o.iter().any(|o| o.kind == objects::ObjectKind::Secret));
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_secrets_dir_must_be_roots_alone() {
        use std::os::unix::fs::PermissionsExt;
        let dir = std::env::temp_dir().join(format!("atoll-private-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
        let problem = private_dir_problem(&dir).expect("0755 accepted");
        assert!(problem.contains("mode 0755: it must be owned by root with mode 0700"), "{problem}");
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700)).unwrap();
        assert_eq!(private_dir_problem(&dir), None);
        // Not through a link (whoever can change the link chooses the directory).
        let link = dir.with_extension("link");
        let _ = std::fs::remove_file(&link);
        std::os::unix::fs::symlink(&dir, &link).unwrap();
        assert!(private_dir_problem(&link).unwrap().contains("is not a directory"));
        let _ = std::fs::remove_file(&link);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_rescan_parses_only_files_whose_bytes_changed() {
        let dir = std::env::temp_dir().join(format!("atoll-file-memo-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("web.yaml");
        let yaml = |image: &str| {
            format!("apiVersion: v1\nkind: Pod\nmetadata:\n  name: web\nspec:\n  containers:\n  - name: c\n    image: {image}\n")
        };
        std::fs::write(&file, yaml("busybox:1.36")).unwrap();
        let mut memo = Memo::new();
        let first = scan_with(&dir, "edge", Policy::default(), None, &mut memo);
        assert_eq!(first.by_file[&file].len(), 1);
        // What the memo says for unchanged bytes is what the scan gives: the file is not parsed.
        memo.get_mut(&file).unwrap().1.as_mut().unwrap().0.pods.clear();
        let again = scan_with(&dir, "edge", Policy::default(), None, &mut memo);
        assert!(again.by_file[&file].is_empty(), "parsed again although unchanged");
        // A change of content (even of the same size) is parsed, whatever the timestamps say.
        let mtime = std::fs::metadata(&file).unwrap().modified().unwrap();
        std::fs::write(&file, yaml("busybox:1.37")).unwrap();
        std::fs::File::options().write(true).open(&file).unwrap().set_modified(mtime).unwrap();
        let changed = scan_with(&dir, "edge", Policy::default(), None, &mut memo);
        assert_eq!(changed.by_file[&file][0].pod.spec.containers[0].image, "busybox:1.37");
        // A file that goes leaves the memo.
        std::fs::remove_file(&file).unwrap();
        scan_with(&dir, "edge", Policy::default(), None, &mut memo);
        assert!(memo.is_empty());
        let _ = std::fs::remove_dir_all(&dir);
    }
}
