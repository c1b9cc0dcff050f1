//! subPath mounts, safe against symlinks a pod made (CVE-2017-1002101's class), as kubelet
//! does since 1.10: the subPath is resolved below the volume's root one component at a time,
//! each opened with `O_PATH|O_NOFOLLOW` relative to the directory before it, so the kernel
//! never follows a link on atoll's behalf. A symlink found on the way is read and resolved by
//! these same rules: a relative one within the volume, an absolute one only if it names a
//! place inside the volume's root on the host, `..` never above the root. What was resolved
//! is then bind-mounted through its open descriptor (`/proc/self/fd/N`) onto
//! `<pod dir>/volume-subpaths/<volume>/<container>/<index>`, and that path, which no
//! container can write, is what the runtime mounts. Missing directories of the subPath are
//! created (with the volume root's mode), again one `mkdirat` at a time.

use rustix::fs::{FileType, Mode, OFlags};
use std::collections::VecDeque;
use std::ffi::OsString;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path, PathBuf};

/// kubelet's (and Linux's) limit on symlinks followed in one resolution.
const MAX_LINKS: usize = 40;

/// Why a subPath cannot be mounted.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SubPathError {
    /// A symlink (or `..`) in the subPath leads out of the volume.
    Outside {
        sub_path: String,
        via: String,
    },
    TooManyLinks {
        sub_path: String,
    },
    Io {
        sub_path: String,
        what: String,
    },
}

impl std::fmt::Display for SubPathError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SubPathError::Outside { sub_path, via } => {
                write!(f, "subPath {sub_path:?} leads outside the volume (through {via}); refused")
            }
            SubPathError::TooManyLinks { sub_path } => {
                write!(f, "subPath {sub_path:?}: more than {MAX_LINKS} symlinks; refused")
            }
            SubPathError::Io { sub_path, what } => write!(f, "subPath {sub_path:?}: {what}"),
        }
    }
}

/// Resolves `sub_path` below `root` (creating missing directories) and returns an `O_PATH`
/// descriptor of what it names. Nothing outside `root` can be reached.
pub fn resolve(root: &Path, sub_path: &str) -> Result<OwnedFd, SubPathError> {
    let io = |what: String| SubPathError::Io { sub_path: sub_path.to_string(), what };
    let open_flags = OFlags::PATH | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    // The root itself is the operator's (a hostPath) or atoll's (an emptyDir): resolved as given.
    let root_fd = rustix::fs::open(root, OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC, Mode::empty())
        .map_err(|e| io(format!("opening the volume {}: {e}", root.display())))?;
    let root_mode = rustix::fs::fstat(&root_fd).map(|s| s.st_mode & 0o7777).unwrap_or(0o755);
    let real_root = std::fs::canonicalize(root).map_err(|e| io(format!("{}: {e}", root.display())))?;
    let mut stack: Vec<OwnedFd> = vec![root_fd];
    let mut queue: VecDeque<OsString> = components(Path::new(sub_path));
    let mut links = 0;
    while let Some(name) = queue.pop_front() {
        if name == ".." {
            if stack.len() == 1 {
                return Err(SubPathError::Outside { sub_path: sub_path.into(), via: "..".into() });
            }
            stack.pop();
            continue;
        }
        let parent = stack.last().expect("the root is never popped");
        let fd = match rustix::fs::openat(parent, name.as_os_str(), open_flags, Mode::empty()) {
            Ok(fd) => fd,
            Err(rustix::io::Errno::NOENT) => {
                match rustix::fs::mkdirat(parent, name.as_os_str(), Mode::from_raw_mode(root_mode)) {
                    Ok(()) | Err(rustix::io::Errno::EXIST) => {}
                    Err(e) => return Err(io(format!("creating {:?}: {e}", name))),
                }
                rustix::fs::openat(parent, name.as_os_str(), open_flags, Mode::empty())
                    .map_err(|e| io(format!("opening {:?}: {e}", name)))?
            }
            Err(e) => return Err(io(format!("opening {:?}: {e}", name))),
        };
        let stat = rustix::fs::fstat(&fd).map_err(|e| io(format!("{:?}: {e}", name)))?;
        if FileType::from_raw_mode(stat.st_mode) != FileType::Symlink {
            stack.push(fd);
            continue;
        }
        links += 1;
        if links > MAX_LINKS {
            return Err(SubPathError::TooManyLinks { sub_path: sub_path.into() });
        }
        let target = rustix::fs::readlinkat(parent, name.as_os_str(), Vec::new())
            .map_err(|e| io(format!("reading the link {:?}: {e}", name)))?;
        let target = PathBuf::from(std::ffi::OsStr::from_bytes(target.as_bytes()));
        let rest = if target.is_absolute() {
            // kubelet resolves links on the host: an absolute link is fine only if it names a
            // place inside this volume.
            let inside = target.strip_prefix(&real_root).map_err(|_| SubPathError::Outside {
                sub_path: sub_path.into(),
                via: format!("{:?} -> {}", name, target.display()),
            })?;
            stack.truncate(1);
            components(inside)
        } else {
            components(&target)
        };
        for part in rest.into_iter().rev() {
            queue.push_front(part);
        }
    }
    Ok(stack.pop().expect("the root is never popped"))
}

fn components(p: &Path) -> VecDeque<OsString> {
    p.components()
        .filter_map(|c| match c {
            Component::Normal(n) => Some(n.to_os_string()),
            Component::ParentDir => Some("..".into()),
            _ => None,
        })
        .collect()
}

/// Resolves `sub_path` under `root` and bind-mounts it onto `target` (replacing an earlier
/// mount there). Returns `target`, the path to give the runtime.
pub fn mount(root: &Path, sub_path: &str, target: &Path) -> Result<PathBuf, SubPathError> {
    let io = |what: String| SubPathError::Io { sub_path: sub_path.to_string(), what };
    let fd = resolve(root, sub_path)?;
    let is_dir = rustix::fs::fstat(&fd).map(|s| FileType::from_raw_mode(s.st_mode) == FileType::Directory);
    let is_dir = is_dir.map_err(|e| io(e.to_string()))?;
    if super::poddir::mount_points_under(target).iter().any(|p| p == target) {
        rustix::mount::unmount(target, rustix::mount::UnmountFlags::DETACH)
            .map_err(|e| io(format!("unmounting the earlier {}: {e}", target.display())))?;
    }
    let parent = target.parent().unwrap_or(Path::new("/"));
    std::fs::create_dir_all(parent).map_err(|e| io(format!("creating {}: {e}", parent.display())))?;
    match (std::fs::symlink_metadata(target), is_dir) {
        (Ok(m), true) if m.is_dir() => {}
        (Ok(m), false) if m.is_file() => {}
        (existing, _) => {
            if existing.is_ok() {
                let _ = std::fs::remove_file(target).or_else(|_| std::fs::remove_dir(target));
            }
            let made = if is_dir { std::fs::create_dir(target) } else { std::fs::File::create(target).map(drop) };
            made.map_err(|e| io(format!("creating {}: {e}", target.display())))?;
        }
    }
    let source = format!("/proc/self/fd/{}", fd.as_raw_fd());
    rustix::mount::mount_bind(source.as_str(), target)
        .map_err(|e| io(format!("bind-mounting onto {}: {e}", target.display())))?;
    Ok(target.to_path_buf())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    fn volume(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("atoll-subpath-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(d.join("vol/real/deep")).unwrap();
        std::fs::write(d.join("vol/real/file"), b"inside").unwrap();
        std::fs::write(d.join("canary"), b"outside").unwrap();
        d
    }

    /// What the descriptor names, read back through /proc.
    fn named(fd: &OwnedFd) -> PathBuf {
        std::fs::read_link(format!("/proc/self/fd/{}", fd.as_raw_fd())).unwrap()
    }

    #[test]
    fn links_inside_the_volume_resolve_and_links_out_are_refused() {
        let d = volume("resolve");
        let vol = d.join("vol");
        symlink("real", vol.join("alias")).unwrap();
        symlink(vol.join("real/deep"), vol.join("abs-inside")).unwrap();
        symlink("../..", vol.join("real/up2")).unwrap();
        symlink("/", vol.join("root")).unwrap();
        symlink(d.join("canary"), vol.join("abs-outside")).unwrap();
        symlink("loop-b", vol.join("loop-a")).unwrap();
        symlink("loop-a", vol.join("loop-b")).unwrap();
        symlink("real/up2/x", vol.join("chain")).unwrap();

        let real = std::fs::canonicalize(&vol).unwrap();
        assert_eq!(named(&resolve(&vol, "alias/file").unwrap()), real.join("real/file"));
        assert_eq!(named(&resolve(&vol, "abs-inside").unwrap()), real.join("real/deep"));
        assert_eq!(named(&resolve(&vol, "alias/deep/..").unwrap()), real.join("real"));
        assert_eq!(named(&resolve(&vol, "new/dirs").unwrap()), real.join("new/dirs"), "missing dirs are made");

        for bad in ["root", "root/etc", "abs-outside", "real/up2", "chain", "alias/../.."] {
            let e = resolve(&vol, bad).unwrap_err();
            assert!(matches!(e, SubPathError::Outside { .. }), "{bad}: {e}");
        }
        assert_eq!(resolve(&vol, "loop-a").unwrap_err(), SubPathError::TooManyLinks { sub_path: "loop-a".into() });
        assert!(!d.join("x").exists(), "nothing was created outside the volume");
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn the_mount_shows_what_was_resolved_not_what_the_path_names_later() {
        let d = volume("mount");
        let vol = d.join("vol");
        let target = d.join("pod/volume-subpaths/v/c/0");
        let t = mount(&vol, "real", &target).unwrap();
        assert_eq!(std::fs::read(t.join("file")).unwrap(), b"inside");
        // The pod swaps the directory for a link to the host's root: the mount does not move.
        std::fs::rename(vol.join("real"), vol.join("moved")).unwrap();
        symlink("/", vol.join("real")).unwrap();
        assert_eq!(std::fs::read(target.join("file")).unwrap(), b"inside");
        assert!(!target.join("etc").exists());
        // Mounting again resolves again, and refuses now.
        assert!(matches!(mount(&vol, "real", &target), Err(SubPathError::Outside { .. })));
        let _ = rustix::mount::unmount(&target, rustix::mount::UnmountFlags::DETACH);
        // A file subPath becomes a file mount.
        let f = mount(&vol, "moved/file", &d.join("pod/volume-subpaths/v/c/1")).unwrap();
        assert_eq!(std::fs::read(&f).unwrap(), b"inside");
        let _ = rustix::mount::unmount(&f, rustix::mount::UnmountFlags::DETACH);
        let _ = std::fs::remove_dir_all(&d);
    }
}
