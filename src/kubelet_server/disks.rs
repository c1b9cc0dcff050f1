//! The disk half of `/stats/summary`, read as kubelet reads it: file systems' sizes
//! (`statvfs`: the node's, of the state directory; the runtime's image file system, whose
//! use CRI `ImageFsInfo` tells; the one under each container's writable layer), and what a
//! pod keeps on them: its volumes in the pod directory, each container's log files, its
//! managed hosts file.
//!
//! Volumes are written by containers, so their walk trusts nothing in them: every directory
//! is opened relative to the one before it with `O_NOFOLLOW|O_DIRECTORY` and every entry is
//! `fstatat`-ed without following, so a symlink is counted as itself and never entered, and a
//! directory swapped for a symlink mid-walk is refused by the kernel. The walk stays on the
//! volume's file system (`du -x`), counts allocated blocks (`du`) and each inode once, and is
//! bounded: [`WALK_ENTRIES`] entries and [`WALK_DEPTH`] levels per walk, [`SCRAPE_ENTRIES`]
//! in one scrape; what a bound cut off is not counted (the number is then a lower bound), so a
//! container that makes a million files costs a scrape some milliseconds, not minutes. All of
//! it is blocking and runs in one `task::unblock`.

use crate::api::cadvisor::{now_ms, Scrape};
use crate::api::view::Api;
use crate::cri::RuntimeService;
use crate::pod::types::Volume;
use rustix::fs::{AtFlags, Dir, FileType, Mode, OFlags};
use std::collections::HashSet;
use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// At most this many entries counted by one walk (a volume, a container's log directory).
pub const WALK_ENTRIES: usize = 16_384;
/// At most this many directory levels below a walk's top (each level holds one open fd).
pub const WALK_DEPTH: usize = 32;
/// At most this many entries counted in one scrape, all walks together.
pub const SCRAPE_ENTRIES: usize = 131_072;

/// A file system's size, as `statvfs` tells it (bytes and inodes).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Fs {
    pub capacity: u64,
    pub available: u64,
    /// In use by anyone: total less free blocks.
    pub used: u64,
    pub inodes: u64,
    pub inodes_free: u64,
}

/// What a walk counted: allocated bytes, inodes, and whether it saw everything.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Used {
    pub bytes: u64,
    pub inodes: u64,
    pub complete: bool,
}

/// One pod volume's use and the file system it is on.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct VolumeUse {
    pub name: String,
    pub used: Used,
    pub fs: Option<Fs>,
    /// Counted in the pod's ephemeral storage (kubelet's local ephemeral volumes).
    pub ephemeral: bool,
}

/// What one pod keeps on disk.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PodDisks {
    pub uid: String,
    pub volumes: Vec<VolumeUse>,
    /// Each container's log files (`<pod log dir>/<container>/`), by container name.
    pub logs: Vec<(String, Used)>,
    /// Files directly in the pod's log directory.
    pub pod_logs: Option<Used>,
    /// The managed hosts file.
    pub etc_hosts: Option<Used>,
}

/// The runtime's image file system: CRI's use of it and its size.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ImageFs {
    pub used: u64,
    pub inodes_used: Option<u64>,
    pub at_ms: i64,
    pub fs: Option<Fs>,
}

/// Everything the disk half of a summary shows.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Disks {
    pub at_ms: i64,
    /// The file system of the state directory (kubelet's root dir).
    pub node: Option<Fs>,
    pub image: Option<ImageFs>,
    /// The file systems of the writable layers, by CRI's mount point.
    pub mounts: Vec<(String, Fs)>,
    pub pods: Vec<PodDisks>,
}

/// kubelet's local ephemeral volumes (`IsLocalEphemeralVolume`): an emptyDir not in memory, a
/// ConfigMap, the downward API. They count in the pod's `ephemeral-storage`.
pub fn ephemeral(v: &Volume) -> bool {
    v.empty_dir.as_ref().is_some_and(|e| e.medium.as_deref() != Some("Memory"))
        || v.config_map.is_some()
        || v.downward_api.is_some()
}

/// One pod's paths, made on the executor from its spec (no I/O).
struct Plan {
    uid: String,
    volumes: Vec<(String, PathBuf, bool)>,
    log_dir: Option<PathBuf>,
    containers: Vec<String>,
    etc_hosts: Option<PathBuf>,
}

/// Asks the runtime for its image file system (at most 5 s), then reads every size and walks
/// every pod's volumes and logs off the executor.
pub async fn collect<RT: RuntimeService>(api: &Api<RT>, scrape: &Scrape) -> Disks {
    let info = crate::deadline::with_deadline(Duration::from_secs(5), api.runtime.image_fs_info()).await;
    let image = info.and_then(Result::ok).and_then(|r| r.image_filesystems.into_iter().next()).map(|fs| {
        let mount = fs.fs_id.map(|f| f.mountpoint).unwrap_or_default();
        let at_ms = fs.timestamp / 1_000_000;
        (mount, fs.used_bytes.map_or(0, |v| v.value), fs.inodes_used.map(|v| v.value), at_ms)
    });
    let mut mounts: Vec<String> = Vec::new();
    for (mount, _) in scrape.entries.iter().filter_map(|e| e.fs.as_ref()) {
        if !mount.is_empty() && !mounts.contains(mount) {
            mounts.push(mount.clone());
        }
    }
    let facts = api.node.facts();
    let (root, logs) = (facts.root_dir.clone(), facts.pod_logs_dir.clone());
    let plans: Vec<Plan> = api
        .node
        .statuses()
        .pods()
        .iter()
        .map(|(pod, _)| {
            let m = &pod.metadata;
            let pod_dir = crate::runtime::volumes::poddir::pod_dir(&root, &m.uid).ok();
            let volumes = pod
                .spec
                .volumes
                .iter()
                .filter(|v| v.host_path.is_none())
                .filter_map(|v| {
                    let path = crate::runtime::volumes::poddir::volume_path(pod_dir.as_ref()?, v).ok()??;
                    Some((v.name.clone(), path, ephemeral(v)))
                })
                .collect();
            Plan {
                uid: m.uid.clone(),
                volumes,
                log_dir: crate::pod::paths::pod_log_dir(&logs, &m.namespace, &m.name, &m.uid).ok(),
                containers: pod
                    .spec
                    .init_containers
                    .iter()
                    .chain(&pod.spec.containers)
                    .map(|c| c.name.clone())
                    .collect(),
                etc_hosts: pod_dir.map(|d| d.path().join("etc-hosts")),
            }
        })
        .collect();
    crate::task::unblock(move || read(&root, image, mounts, plans)).await
}

/// The blocking part of [`collect`].
fn read(root: &Path, image: Option<(String, u64, Option<u64>, i64)>, mounts: Vec<String>, plans: Vec<Plan>) -> Disks {
    let mut budget = SCRAPE_ENTRIES;
    let image = image.map(|(mount, used, inodes_used, at_ms)| ImageFs {
        used,
        inodes_used,
        at_ms,
        fs: (!mount.is_empty()).then(|| statvfs(Path::new(&mount))).flatten(),
    });
    let mounts = mounts.into_iter().filter_map(|m| Some((m.clone(), statvfs(Path::new(&m))?))).collect();
    let pods = plans
        .into_iter()
        .map(|p| {
            let volumes = p
                .volumes
                .into_iter()
                .filter_map(|(name, path, ephemeral)| {
                    let (used, fs) = walk(&path, WALK_ENTRIES, &mut budget)?;
                    Some(VolumeUse { name, used, fs: Some(fs), ephemeral })
                })
                .collect();
            let logs = p
                .containers
                .iter()
                .filter_map(|c| {
                    let dir = crate::pod::paths::under(p.log_dir.as_deref()?, &[c]).ok()?;
                    Some((c.clone(), files(&dir, &mut budget)?))
                })
                .collect();
            let pod_logs = p.log_dir.as_deref().and_then(|d| files(d, &mut budget));
            let etc_hosts = p.etc_hosts.as_deref().and_then(file);
            PodDisks { uid: p.uid, volumes, logs, pod_logs, etc_hosts }
        })
        .collect();
    Disks { at_ms: now_ms(), node: statvfs(root), image, mounts, pods }
}

/// A file system's size from `statvfs`.
pub fn sizes(st: &rustix::fs::StatVfs) -> Fs {
    let block = st.f_frsize.max(1);
    Fs {
        capacity: st.f_blocks.saturating_mul(block),
        available: st.f_bavail.saturating_mul(block),
        used: st.f_blocks.saturating_sub(st.f_bfree).saturating_mul(block),
        inodes: st.f_files,
        inodes_free: st.f_ffree,
    }
}

fn statvfs(path: &Path) -> Option<Fs> {
    rustix::fs::statvfs(path).ok().map(|st| sizes(&st))
}

/// Allocated bytes of an inode (`du`'s count: 512-byte blocks).
#[allow(clippy::useless_conversion, clippy::unnecessary_fallible_conversions)]
fn allocated(st: &rustix::fs::Stat) -> u64 {
    u64::try_from(st.st_blocks).unwrap_or(0).saturating_mul(512)
}

fn open_dir(at: impl AsFd, name: &std::ffi::CStr) -> Option<OwnedFd> {
    let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC | OFlags::NOCTTY;
    rustix::fs::openat(at, name, flags, Mode::empty()).ok()
}

fn c_path(path: &Path) -> Option<std::ffi::CString> {
    std::ffi::CString::new(std::os::unix::ffi::OsStrExt::as_bytes(path.as_os_str())).ok()
}

/// What a directory tree holds (`du -s -x` and `find -xdev | wc -l`), its top included, and
/// the size of its file system: never following a symlink, at most `limit` entries and
/// `budget` (which it spends), at most [`WALK_DEPTH`] levels down. `None` if the top is not
/// a directory (a symlink to one included).
pub fn walk(top: &Path, limit: usize, budget: &mut usize) -> Option<(Used, Fs)> {
    let fd = open_dir(rustix::fs::CWD, &c_path(top)?)?;
    let st = rustix::fs::fstat(&fd).ok()?;
    let fs = rustix::fs::fstatvfs(&fd).ok().map(|s| sizes(&s)).unwrap_or_default();
    let allowed = limit.min(*budget);
    let mut w = Walker { dev: st.st_dev, left: allowed, seen: HashSet::new(), complete: true };
    let mut used = Used { bytes: allocated(&st), inodes: 1, complete: true };
    w.visit(fd, 0, &mut used);
    *budget = budget.saturating_sub(allowed.saturating_sub(w.left));
    used.complete = w.complete;
    Some((used, fs))
}

struct Walker {
    dev: u64,
    left: usize,
    /// Inodes with more than one link already counted (`du` counts each once).
    seen: HashSet<u64>,
    complete: bool,
}

impl Walker {
    fn visit(&mut self, fd: OwnedFd, depth: usize, used: &mut Used) {
        let Ok(mut dir) = Dir::new(fd) else { return };
        while let Some(entry) = dir.read() {
            let Ok(entry) = entry else {
                self.complete = false;
                return;
            };
            let name = entry.file_name();
            if name.to_bytes() == b"." || name.to_bytes() == b".." {
                continue;
            }
            if self.left == 0 {
                self.complete = false;
                return;
            }
            self.left -= 1;
            let Ok(at) = dir.fd() else { return };
            let Ok(st) = rustix::fs::statat(at, name, AtFlags::SYMLINK_NOFOLLOW) else { continue };
            let kind = FileType::from_raw_mode(st.st_mode);
            if kind != FileType::Directory && st.st_nlink > 1 && !self.seen.insert(st.st_ino) {
                continue;
            }
            used.inodes = used.inodes.saturating_add(1);
            used.bytes = used.bytes.saturating_add(allocated(&st));
            if kind != FileType::Directory || st.st_dev != self.dev {
                continue;
            }
            if depth >= WALK_DEPTH {
                self.complete = false;
                continue;
            }
            if let Some(child) = open_dir(at, name) {
                self.visit(child, depth + 1, used);
            }
        }
    }
}

/// The regular files directly in a directory (kubelet's log directories: each file's `du`),
/// spending `budget`; `None` if the directory cannot be opened (no logs yet).
pub fn files(dir: &Path, budget: &mut usize) -> Option<Used> {
    let fd = open_dir(rustix::fs::CWD, &c_path(dir)?)?;
    let mut dir = Dir::new(fd).ok()?;
    let mut used = Used { complete: true, ..Default::default() };
    while let Some(entry) = dir.read() {
        let Ok(entry) = entry else { break };
        if *budget == 0 {
            used.complete = false;
            break;
        }
        *budget -= 1;
        let Ok(at) = dir.fd() else { break };
        let Ok(st) = rustix::fs::statat(at, entry.file_name(), AtFlags::SYMLINK_NOFOLLOW) else { continue };
        if FileType::from_raw_mode(st.st_mode) == FileType::RegularFile {
            used.bytes = used.bytes.saturating_add(allocated(&st));
            used.inodes = used.inodes.saturating_add(1);
        }
    }
    Some(used)
}

/// One regular file's use, not following a symlink.
fn file(path: &Path) -> Option<Used> {
    let st = rustix::fs::lstat(path).ok()?;
    (FileType::from_raw_mode(st.st_mode) == FileType::RegularFile).then(|| Used {
        bytes: allocated(&st),
        inodes: 1,
        complete: true,
    })
}

#[cfg(test)]
#[path = "disks_tests.rs"]
mod tests;
