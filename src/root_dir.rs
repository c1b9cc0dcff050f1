//! atoll's state directory (`--root-dir`, `stateDir`; `/var/lib/atoll`), made private in the one
//! place that makes it, at start: the directory itself 0700 and `pods/` 0750 (kubelet's mode),
//! both root's, created so or tightened (and taken back from another owner) when they are
//! looser, whatever the umask. Everything below is then out of other users' reach: the pods'
//! volumes (Secrets among them), the sources' copies, the trust and rollback records, the
//! images directory. A leaf: the agent calls [`prepare`], `atoll doctor` calls [`problem`].

use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// The state directory's mode.
pub const ROOT_MODE: u32 = 0o700;
/// `<root-dir>/pods`: kubelet's mode for its pods directory.
pub const PODS_MODE: u32 = 0o750;

/// Why a state directory could not be made private.
#[derive(Debug)]
pub enum Error {
    /// It could not be created.
    Create { dir: PathBuf, source: std::io::Error },
    /// It is there, but not a directory.
    NotDir(PathBuf),
    /// It could not be opened, looked at or tightened.
    Io { dir: PathBuf, source: std::io::Error },
}

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Error::Create { dir, source } => write!(f, "creating {}: {source}", dir.display()),
            Error::NotDir(dir) => write!(f, "{} is not a directory", dir.display()),
            Error::Io { dir, source } => write!(f, "{}: {source}", dir.display()),
        }
    }
}

impl std::error::Error for Error {}

/// Makes `root` and `root/pods` (private, as above); says what it had to tighten.
pub fn prepare(root: &Path) -> Result<(), Error> {
    make(root, ROOT_MODE)?;
    make(&root.join("pods"), PODS_MODE)
}

/// Why `root` is not private (`None`: it is, or it does not exist yet and will be made so).
pub fn problem(root: &Path) -> Option<String> {
    [(root.to_path_buf(), ROOT_MODE), (root.join("pods"), PODS_MODE)].into_iter().find_map(|(dir, mode)| {
        let m = std::fs::metadata(&dir).ok()?;
        loose(&m, mode).then(|| {
            format!(
                "{} is owned by uid {} with mode {:04o}; atoll makes it root's with mode {mode:04o} when it starts",
                dir.display(),
                m.uid(),
                m.mode() & 0o7777
            )
        })
    })
}

fn loose(m: &std::fs::Metadata, mode: u32) -> bool {
    m.uid() != rustix::process::geteuid().as_raw() || m.mode() & 0o777 & !mode != 0
}

/// `dir` made with `mode` if missing; else owned by this user and no looser than `mode`.
fn make(dir: &Path, mode: u32) -> Result<(), Error> {
    let shown = dir.display();
    if let Err(source) = std::fs::DirBuilder::new().recursive(true).mode(mode).create(dir) {
        return Err(Error::Create { dir: dir.into(), source });
    }
    let io = |source| Error::Io { dir: dir.into(), source };
    let f = std::fs::File::open(dir).map_err(io)?;
    let m = f.metadata().map_err(io)?;
    if !m.is_dir() {
        return Err(Error::NotDir(dir.into()));
    }
    if !loose(&m, mode) {
        return Ok(());
    }
    log::warn!(
        "{shown} was owned by uid {} with mode {:04o}: making it private ({mode:04o})",
        m.uid(),
        m.mode() & 0o7777
    );
    let (uid, gid) = (rustix::process::geteuid(), rustix::process::getegid());
    rustix::fs::fchown(&f, Some(uid), Some(gid)).map_err(|e| io(e.into()))?;
    let tightened = (m.mode() & 0o777) & mode;
    f.set_permissions(std::fs::Permissions::from_mode(tightened)).map_err(io)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_state_directory_is_made_private_and_tightened_if_looser() {
        let d = std::env::temp_dir().join(format!("atoll-root-dir-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o7777;
        // Made under a permissive umask: the modes are ours, not the umask's.
        let old = rustix::process::umask(rustix::fs::Mode::empty());
        prepare(&d).unwrap();
        rustix::process::umask(old);
        assert_eq!((mode(&d), mode(&d.join("pods"))), (0o700, 0o750));
        assert_eq!(problem(&d), None);
        // An operator opened them up: named by doctor, then tightened at the next start.
        std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o755)).unwrap();
        std::fs::set_permissions(d.join("pods"), std::fs::Permissions::from_mode(0o777)).unwrap();
        assert!(problem(&d).unwrap().contains("with mode 0755; atoll makes it root's with mode 0700"));
        prepare(&d).unwrap();
        assert_eq!((mode(&d), mode(&d.join("pods"))), (0o700, 0o750));
        // Tighter than asked stays so.
        std::fs::set_permissions(d.join("pods"), std::fs::Permissions::from_mode(0o700)).unwrap();
        prepare(&d).unwrap();
        assert_eq!(mode(&d.join("pods")), 0o700);
        // Not a directory: an error naming it.
        let file = d.join("file");
        std::fs::write(&file, b"").unwrap();
        assert!(prepare(&file).unwrap_err().to_string().contains("file"));
        let _ = std::fs::remove_dir_all(&d);
    }
}
