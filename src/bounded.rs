//! Bounded reads: the one way atoll reads a file a container can write (termination messages,
//! container logs), a file someone else may replace (manifests, signatures, image tarballs) or
//! a body someone else sends. Nothing here reads more than the caller's limit into memory,
//! follows a symlink at the last component (unless asked to, for manifests, which kubelet
//! follows), or blocks on a FIFO: every file is opened non-blocking and checked to be a
//! regular file on the opened descriptor, so one swapped in after a stat is refused, not
//! waited on. A container that writes 300 MB and exits costs the agent at most the limit.

use std::fs::File;
use std::io::{self, Read, Seek, SeekFrom};
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

/// Opens a regular file for reading without following a symlink at its last component and
/// without blocking (a FIFO in its place is refused, not waited on).
pub fn open_regular(path: &Path) -> io::Result<File> {
    open(path, rustix::fs::OFlags::NOFOLLOW)
}

/// [`open_regular`], a symlink followed (manifest files may be links, as kubelet reads them).
pub fn open_following(path: &Path) -> io::Result<File> {
    open(path, rustix::fs::OFlags::empty())
}

fn open(path: &Path, flags: rustix::fs::OFlags) -> io::Result<File> {
    let f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags((flags | rustix::fs::OFlags::NONBLOCK).bits() as i32)
        .open(path)?;
    if !f.metadata()?.is_file() {
        return Err(io::Error::other(format!("{} is not a regular file", path.display())));
    }
    Ok(f)
}

/// The last `max` bytes of a regular file, and whether anything before them was left out.
pub fn read_tail(path: &Path, max: usize) -> io::Result<(Vec<u8>, bool)> {
    let mut f = open_regular(path)?;
    let len = f.metadata()?.len();
    let start = len.saturating_sub(max as u64);
    f.seek(SeekFrom::Start(start))?;
    let mut buf = Vec::with_capacity(max.min(len as usize));
    f.take(max as u64).read_to_end(&mut buf)?;
    Ok((buf, start > 0))
}

/// Reads everything from `r` if it is at most `max` bytes; more is an error, never a
/// truncated read taken for the whole.
pub fn read_at_most(r: impl Read, max: usize) -> io::Result<Vec<u8>> {
    let mut buf = Vec::new();
    r.take(max as u64 + 1).read_to_end(&mut buf)?;
    if buf.len() > max {
        return Err(io::Error::other(format!("larger than the {max} byte limit")));
    }
    Ok(buf)
}

/// A whole regular file of at most `max` bytes.
pub fn read_file(path: &Path, max: usize) -> io::Result<Vec<u8>> {
    read_at_most(open_regular(path)?, max)
}

/// [`read_file`] with a symlink at the last component followed: for the files the operator
/// names (settings, kubeconfigs and their certificates, keys, `/etc/resolv.conf`), which are
/// links on many hosts (kubeadm's `kubelet-client-current.pem`, systemd-resolved's
/// resolv.conf) and which no container writes.
pub fn read_following(path: &Path, max: usize) -> io::Result<Vec<u8>> {
    read_at_most(open_following(path)?, max)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dir(name: &str) -> std::path::PathBuf {
        let d = std::env::temp_dir().join(format!("atoll-bounded-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn tails_and_whole_files_stay_within_their_limit() {
        let d = dir("tail");
        let big = d.join("big");
        std::fs::write(&big, vec![b'x'; 100_000]).unwrap();
        std::fs::write(d.join("small"), b"hello").unwrap();
        let (tail, cut) = read_tail(&big, 4096).unwrap();
        assert_eq!((tail.len(), cut), (4096, true));
        assert_eq!(read_tail(&d.join("small"), 4096).unwrap(), (b"hello".to_vec(), false));
        assert!(read_file(&big, 1000).unwrap_err().to_string().contains("larger than the 1000 byte limit"));
        assert_eq!(read_file(&d.join("small"), 5).unwrap(), b"hello");
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn symlinks_fifos_and_directories_are_not_read() {
        let d = dir("kinds");
        std::fs::write(d.join("target"), b"secret").unwrap();
        std::os::unix::fs::symlink(d.join("target"), d.join("link")).unwrap();
        assert!(read_tail(&d.join("link"), 10).is_err(), "a symlink is not followed");
        rustix::fs::mkfifoat(rustix::fs::CWD, d.join("fifo"), rustix::fs::Mode::from_raw_mode(0o600)).unwrap();
        let e = read_tail(&d.join("fifo"), 10).unwrap_err();
        assert!(e.to_string().contains("not a regular file"), "{e}");
        assert!(read_file(&d, 10).is_err(), "a directory is not a file");
        // Followed on request, but a FIFO at the end of the link is still refused.
        assert_eq!(read_at_most(open_following(&d.join("link")).unwrap(), 10).unwrap(), b"secret");
        std::os::unix::fs::symlink(d.join("fifo"), d.join("to-fifo")).unwrap();
        assert!(open_following(&d.join("to-fifo")).unwrap_err().to_string().contains("not a regular file"));
        let _ = std::fs::remove_dir_all(&d);
    }
}
