//! The images directory (`imagesDir` in atoll's config, default `<root-dir>/images`): every
//! tarball in it (docker or OCI archive, plain, gzip or zstd; hidden files are ignored, as in
//! the manifest directory) is imported into the runtime at start and whenever one appears or
//! changes (inotify, and a rescan every minute as the safety net). A file still open for
//! writing is not read before its close.
//!
//! Each file is imported once per content: what was imported is remembered under the root
//! dir (`image-imports.json`: each file's size, mtime and inode, its sha256 and its images), so
//! an unchanged file costs a stat, a touched or renamed one a read to hash it, and only new
//! content is streamed into the runtime. A remembered image the runtime no longer has (removed
//! by hand) is imported again. Before anything is imported every waiting file is marked in
//! `node::imports`, so a pod whose image is not on disk waits (`ImageImporting`) instead of
//! failing; every worker is woken after each pass. Every look at the directory and every read
//! runs off the executor, each file opened non-blocking and checked to be a regular file, so a
//! FIFO or a stuck file system stalls the imports at most. An import that would take the image
//! filesystem above `imageGCHighThresholdPercent` is refused as it streams (`import`).

use super::import::{self, Containerd};
use crate::cri::Cri;
use crate::node::imports::FileState;
use crate::node::Node;
use std::collections::BTreeMap;
use std::os::unix::fs::MetadataExt;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

/// The safety-net rescan of the images directory.
pub const RESCAN: Duration = Duration::from_secs(60);

pub struct DirConfig {
    /// The images directory.
    pub dir: PathBuf,
    /// Where what was imported is remembered.
    pub record: PathBuf,
    /// `ctrPath`, when configured.
    pub ctr: Option<PathBuf>,
    /// containerd's socket (the CRI endpoint's).
    pub address: PathBuf,
    /// imageGCHighThresholdPercent: an import stops before the image filesystem is this full.
    pub high_percent: u8,
}

/// One file as imported.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Seen {
    stat: Stat,
    digest: String,
    images: Vec<String>,
}

/// What says a file is unchanged without reading it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Stat {
    size: u64,
    mtime_ns: i64,
    ino: u64,
}

#[derive(Default)]
struct Record {
    files: BTreeMap<String, Seen>,
    /// Files whose import failed, as they were then: not tried again until they change; or,
    /// when the image filesystem had no room for them, until it has more (the collector frees
    /// some).
    failed: BTreeMap<String, (Stat, Option<u64>)>,
}

impl Record {
    /// `{"files": {name: {size, mtimeNs, ino, digest, images}}}`, written by hand (smaller in the
    /// binary than a derive for these few fields).
    fn to_json(&self) -> serde_json::Value {
        let files = self.files.iter().map(|(name, s)| {
            let v = serde_json::json!({
                "size": s.stat.size, "mtimeNs": s.stat.mtime_ns, "ino": s.stat.ino, "digest": s.digest, "images": s.images,
            });
            (name.clone(), v)
        });
        serde_json::json!({ "files": files.collect::<serde_json::Map<_, _>>() })
    }

    /// The record as [`Record::to_json`] writes it; an entry that does not read as one is left
    /// out (its file is imported again).
    fn from_json(v: &serde_json::Value) -> Record {
        let mut out = Record::default();
        for (name, f) in v.get("files").and_then(|f| f.as_object()).into_iter().flatten() {
            let (Some(size), Some(mtime_ns), Some(ino), Some(digest)) =
                (f["size"].as_u64(), f["mtimeNs"].as_i64(), f["ino"].as_u64(), f["digest"].as_str())
            else {
                continue;
            };
            let images = f["images"].as_array().into_iter().flatten().filter_map(|i| i.as_str().map(String::from));
            let seen =
                Seen { stat: Stat { size, mtime_ns, ino }, digest: digest.to_string(), images: images.collect() };
            out.files.insert(name.clone(), seen);
        }
        out
    }
}

/// Starts importing the directory's tarballs (until the task is dropped; `wake` after each
/// pass). Before it returns, every file not imported as it is now is marked pending, so no pod
/// that needs one of its images starts without it.
pub async fn start(cfg: DirConfig, node: Arc<Node>, runtime: Cri, wake: Arc<dyn Fn() + Send + Sync>) -> smol::Task<()> {
    let (dir, path) = (cfg.dir.clone(), cfg.record.clone());
    let (record, files) = crate::task::unblock(move || {
        if let Err(e) = crate::records::private_dir(&dir) {
            log::warn!("images: cannot make {}: {e}", dir.display());
        }
        let record = crate::records::read::<serde_json::Value>(&path).map(|v| Record::from_json(&v));
        (record.unwrap_or_default(), list(&dir))
    })
    .await;
    for (name, stat) in files {
        if record.files.get(&name).is_none_or(|seen| seen.stat != stat) {
            node.imports().set(&name, FileState::Pending);
        }
    }
    crate::task::spawn(run(cfg, node, runtime, wake, record))
}

async fn run(cfg: DirConfig, node: Arc<Node>, runtime: Cri, wake: Arc<dyn Fn() + Send + Sync>, mut record: Record) {
    let mut watch = None;
    loop {
        if watch.is_none() {
            let dir = cfg.dir.clone();
            watch = crate::task::unblock(move || crate::dirwatch::Watch::new(&dir).ok()).await;
        }
        if let Some(w) = &mut watch {
            w.scanned();
        }
        let (before, states) = (record.files.clone(), node.imports().all());
        let tried = pass(&cfg, &node, &runtime, &mut record).await;
        if record.files != before {
            let (path, json) = (cfg.record.clone(), record.to_json());
            if let Err(e) = crate::task::unblock(move || crate::records::write(&path, &json)).await {
                log::warn!("images: remembering the imports in {}: {e}", cfg.record.display());
            }
        }
        // Pods waiting for an import look again; a rescan that changed nothing wakes no one.
        if tried || node.imports().all() != states {
            wake();
        }
        // Until a write is complete (or the rescan is due).
        let deadline = std::time::Instant::now() + RESCAN;
        loop {
            match crate::dirwatch::next_before(&mut watch, deadline).await {
                Some(Ok(batch)) if batch.gone => {
                    watch = None;
                    break;
                }
                Some(Ok(batch)) if batch.complete || batch.now => {
                    if !watch.as_ref().is_some_and(|w| w.open_writes()) {
                        break;
                    }
                }
                Some(Ok(_)) => {}
                Some(Err(_)) => {
                    watch = None;
                    break;
                }
                None => break,
            }
        }
    }
}

/// One look at the directory: marks what needs importing, then imports it, one file at a time.
/// Whether any file needed importing.
async fn pass(cfg: &DirConfig, node: &Node, runtime: &Cri, record: &mut Record) -> bool {
    let dir = cfg.dir.clone();
    let files = crate::task::unblock(move || list(&dir)).await;
    let names: Vec<String> = files.iter().map(|(n, _)| n.clone()).collect();
    node.imports().retain(&names);
    record.files.retain(|n, _| names.contains(n));
    record.failed.retain(|n, _| names.contains(n));
    // The image filesystem is looked at only when a file refused for room waits to be tried
    // again, and before each import (one import takes room from the next).
    let waiting_for_room = files.iter().any(|(n, st)| matches!(record.failed.get(n), Some((s, Some(_))) if s == st));
    let room = match waiting_for_room {
        true => room_left(cfg, runtime).await,
        false => None,
    };
    let mut todo = Vec::new();
    for (name, stat) in &files {
        match record.failed.get(name) {
            // Failed as it is: its state says why.
            Some((seen, None)) if seen == stat => continue,
            Some((seen, Some(then))) if seen == stat && room.is_none_or(|now| now <= *then) => continue,
            _ => {}
        }
        match record.files.get(name) {
            Some(seen) if seen.stat == *stat && all_present(runtime, &seen.images).await => {
                node.imports().set(name, imported(seen));
            }
            _ => {
                node.imports().set(name, FileState::Pending);
                todo.push((name.clone(), *stat));
            }
        }
    }
    if todo.is_empty() {
        return false;
    }
    let target = match target(cfg.ctr.as_deref(), &cfg.address, runtime).await {
        Ok(t) => t,
        Err(e) => {
            log::warn!("images: cannot import {} file(s) from {}: {e}", todo.len(), cfg.dir.display());
            for (name, _) in &todo {
                node.imports().set(name, FileState::Failed(e.to_string()));
            }
            return true;
        }
    };
    for (name, stat) in todo {
        node.imports().set(&name, FileState::Importing);
        let path = cfg.dir.join(&name);
        // The same content seen before (touched, renamed, copied again): no second import.
        let hashed = {
            let path = path.clone();
            crate::task::unblock(move || import::digest_of(&path)).await
        };
        let known = hashed.ok().and_then(|d| record.files.values().find(|s| s.digest == d).cloned());
        if let Some(seen) = known {
            if all_present(runtime, &seen.images).await {
                crate::metrics::add(&crate::metrics::IMAGE_IMPORTS, &[("result", "skipped")], 1.0);
                let seen = Seen { stat, ..seen };
                node.imports().set(&name, imported(&seen));
                record.files.insert(name, seen);
                continue;
            }
        }
        let started = std::time::Instant::now();
        let t = target.clone();
        let before = names_present(runtime).await;
        let room = room_left(cfg, runtime).await;
        let result = crate::task::unblock(move || import::import_file(&path, &t, &before, room, &mut |_, _| {})).await;
        let result = match result {
            Ok(done) => match missing(runtime, &done.images).await {
                None if done.images.is_empty() => {
                    Err("the archive names no image (an OCI archive needs io.containerd.image.name or a whole reference as its ref name)".into())
                }
                None => Ok(done),
                Some(image) => Err(format!("the runtime has no image {image:?} after the import").into()),
            },
            Err(e) => Err(e),
        };
        match result {
            Ok(done) => {
                log::info!(
                    "images: imported {name} ({} bytes, {}) in {:.1?}: {}",
                    done.bytes,
                    done.digest,
                    started.elapsed(),
                    done.images.join(", ")
                );
                crate::metrics::add(&crate::metrics::IMAGE_IMPORTS, &[("result", "imported")], 1.0);
                crate::metrics::add(&crate::metrics::IMAGE_IMPORT_BYTES, &[], done.bytes as f64);
                let seen = Seen { stat, digest: done.digest, images: done.images };
                node.imports().set(&name, imported(&seen));
                record.files.insert(name, seen);
            }
            Err(e) => {
                log::warn!("images: {}: not imported: {e}", path_shown(cfg, &name));
                crate::metrics::add(&crate::metrics::IMAGE_IMPORTS, &[("result", "failed")], 1.0);
                let no_room = matches!(e, import::ImportError::NoRoom { .. });
                node.imports().set(&name, FileState::Failed(e.to_string()));
                record.failed.insert(name, (stat, room.filter(|_| no_room)));
            }
        }
    }
    true
}

/// The bytes the image filesystem may still take below imageGCHighThresholdPercent (`None`:
/// not known).
async fn room_left(cfg: &DirConfig, runtime: &Cri) -> Option<u64> {
    super::gc::disk(runtime).await.map(|d| d.room_below(cfg.high_percent))
}

fn path_shown(cfg: &DirConfig, name: &str) -> String {
    cfg.dir.join(name).display().to_string()
}

fn imported(seen: &Seen) -> FileState {
    FileState::Imported { digest: seen.digest.clone(), images: seen.images.clone() }
}

/// Why nothing can be imported.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NoTarget {
    /// The runtime does not answer (yet).
    NotAnswering(String),
    /// The runtime is not containerd, or it has no `ctr`: so for as long as atoll runs.
    Unsupported(String),
}

impl std::fmt::Display for NoTarget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            NoTarget::NotAnswering(e) => write!(f, "the runtime does not answer: {e}"),
            NoTarget::Unsupported(e) => f.write_str(e),
        }
    }
}

/// Where to import to, or why nothing can be: the runtime must be containerd, with its `ctr`.
pub(super) async fn target(
    ctr: Option<&std::path::Path>,
    address: &std::path::Path,
    runtime: &Cri,
) -> Result<Containerd, NoTarget> {
    let v = runtime.version().await.map_err(|e| NoTarget::NotAnswering(e.to_string()))?;
    if v.runtime_name != "containerd" {
        return Err(NoTarget::Unsupported(format!(
            "the runtime is {} {}: atoll imports image tarballs into containerd only",
            v.runtime_name, v.runtime_version
        )));
    }
    let ctr = import::find_ctr(ctr).map_err(|e| NoTarget::Unsupported(e.to_string()))?;
    Ok(Containerd { ctr, address: address.to_path_buf() })
}

/// Every image name the runtime has, by tag or by digest (what a failed import must leave
/// alone, what the pins look at).
pub async fn names_present(runtime: &Cri) -> std::collections::BTreeSet<String> {
    let images = runtime.list_images(None).await.unwrap_or_default();
    images.into_iter().flat_map(|i| i.repo_tags.into_iter().chain(i.repo_digests)).collect()
}

async fn all_present(runtime: &Cri, images: &[String]) -> bool {
    missing(runtime, images).await.is_none()
}

/// The first of `images` the runtime does not have.
async fn missing(runtime: &Cri, images: &[String]) -> Option<String> {
    for image in images {
        if !matches!(runtime.image_status(image).await, Ok(Some(_))) {
            return Some(image.clone());
        }
    }
    None
}

/// The directory's tarballs: regular files (a link is followed), not hidden, by name.
fn list(dir: &std::path::Path) -> Vec<(String, Stat)> {
    let Ok(entries) = std::fs::read_dir(dir) else { return Vec::new() };
    let mut out: Vec<(String, Stat)> = entries
        .filter_map(|e| e.ok())
        .filter_map(|e| {
            let name = e.file_name().to_str()?.to_string();
            if name.starts_with('.') {
                return None;
            }
            let m = std::fs::metadata(e.path()).ok().filter(|m| m.is_file())?;
            let mtime_ns = m.mtime().saturating_mul(1_000_000_000).saturating_add(m.mtime_nsec());
            Some((name, Stat { size: m.len(), mtime_ns, ino: m.ino() }))
        })
        .collect();
    out.sort_by(|a, b| a.0.cmp(&b.0));
    out
}
