//! A directory's inotify watch, and when its events call for a scan (the manifest directory's
//! and the images directory's).
//!
//! A complete write is acted on at once: a file renamed into place (IN_MOVED_TO), a write
//! closed (IN_CLOSE_WRITE), a changed mode. What may be half of an edit waits:
//! - a file deleted or renamed away may be about to be re-created (an editor's save, a
//!   script's `rm` then `cp`): from then on, until the scan, the directory must be quiet for
//!   [`FOLD`] before it is read, so the whole edit is seen at once and a pod is not stopped
//!   only to be started again;
//! - a file open for writing is not read before it is closed.
//!
//! No scan waits more than [`MAX_DELAY`] after the first event it answers. Hidden files
//! (editors' temporaries) are ignored, as the scan ignores them.

use smol::Async;
use std::collections::BTreeSet;
use std::ffi::{OsStr, OsString};
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// How long the directory must be quiet after a delete or a rename away before it is read.
pub const FOLD: Duration = Duration::from_millis(10);
/// The longest events can hold a scan back.
pub const MAX_DELAY: Duration = Duration::from_secs(1);

/// What one read of the watch saw.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Batch {
    /// A write was completed (closed, renamed in, mode changed).
    pub complete: bool,
    /// A file went away (deleted, renamed away): a re-create may follow.
    pub fold: bool,
    /// A file was created or written and is not closed yet.
    pub writing: bool,
    /// The watched directory went away, or the kernel's queue overflowed: scan now.
    pub now: bool,
    /// The watched directory itself is gone (the watch must be set up again).
    pub gone: bool,
}

/// A scan that events asked for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Pending {
    /// The first event since the last scan.
    pub first: Instant,
    /// When to scan, if no file is still being written.
    pub at: Instant,
    /// A delete or rename away came: every event waits for quiet.
    pub folding: bool,
}

impl Pending {
    /// When the scan is due: at `at`, or while a file is still open for writing, when it is
    /// closed (a new event) or at the latest `MAX_DELAY` after the first event.
    pub fn due(&self, open_writes: bool) -> Instant {
        if open_writes {
            self.first + MAX_DELAY
        } else {
            self.at
        }
    }
}

/// The scan to do after `batch` arrived at `now`, given the one already pending.
pub fn schedule(pending: Option<Pending>, batch: Batch, now: Instant) -> Option<Pending> {
    if batch == Batch::default() {
        return pending;
    }
    let first = pending.map_or(now, |p| p.first);
    let cap = first + MAX_DELAY;
    let folding = pending.is_some_and(|p| p.folding) || batch.fold;
    let at = if batch.now {
        now
    } else if folding {
        now + FOLD
    } else if batch.complete {
        now
    } else {
        pending.map_or(cap, |p| p.at) // a write not closed yet: its close decides
    };
    Some(Pending { first, at: at.min(cap), folding })
}

/// The watch's next events, or `None` when `deadline` comes first (always, with no watch).
pub async fn next_before(watch: &mut Option<Watch>, deadline: Instant) -> Option<std::io::Result<Batch>> {
    let timer = async {
        smol::Timer::at(deadline).await;
        None
    };
    let event = async {
        match watch {
            Some(w) => Some(w.next().await),
            None => std::future::pending().await,
        }
    };
    smol::future::or(event, timer).await
}

/// An inotify watch on the directory that holds the manifests (the path itself, or the
/// parent of a single manifest file).
pub struct Watch {
    fd: Async<OwnedFd>,
    dir: PathBuf,
    /// For a single-file path: only events about this name matter.
    only: Option<OsString>,
    /// Names created or written and not closed since the last scan.
    writing: BTreeSet<OsString>,
}

impl Watch {
    pub fn new(path: &Path) -> std::io::Result<Watch> {
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
        Ok(Watch { fd: Async::new(fd)?, dir, only, writing: BTreeSet::new() })
    }

    /// Whether a file is still open for writing.
    pub fn open_writes(&self) -> bool {
        !self.writing.is_empty()
    }

    /// A scan read the directory: what was being written is read as it is.
    pub fn scanned(&mut self) {
        self.writing.clear();
    }

    /// Waits for events and says what they ask for.
    pub async fn next(&mut self) -> std::io::Result<Batch> {
        use rustix::fs::inotify::{ReadFlags, Reader};
        self.fd.readable().await?;
        let mut buf = [std::mem::MaybeUninit::<u8>::uninit(); 8192];
        let mut reader = Reader::new(self.fd.get_ref(), &mut buf);
        let mut batch = Batch::default();
        loop {
            let event = match reader.next() {
                Ok(e) => e,
                Err(rustix::io::Errno::AGAIN) => break,
                Err(e) => return Err(e.into()),
            };
            let flags = event.events();
            if flags.intersects(ReadFlags::DELETE_SELF | ReadFlags::MOVE_SELF | ReadFlags::IGNORED) {
                batch.gone = true;
                batch.now = true;
            }
            if flags.contains(ReadFlags::QUEUE_OVERFLOW) {
                batch.now = true;
            }
            let Some(name) = event.file_name() else { continue };
            let name = <OsStr as std::os::unix::ffi::OsStrExt>::from_bytes(name.to_bytes());
            let hidden = name.to_string_lossy().starts_with('.');
            if hidden || self.only.as_deref().is_some_and(|only| only != name) {
                continue;
            }
            if flags.intersects(ReadFlags::DELETE | ReadFlags::MOVED_FROM) {
                self.writing.remove(name);
                batch.fold = true;
            } else if flags.contains(ReadFlags::CLOSE_WRITE) {
                self.writing.remove(name);
                batch.complete = true;
            } else if flags.intersects(ReadFlags::MOVED_TO | ReadFlags::ATTRIB) {
                batch.complete = true;
            } else if flags.contains(ReadFlags::ISDIR) {
                batch.complete = true; // a sub-directory: logged by the scan, never read
            } else if flags.contains(ReadFlags::CREATE) && !self.is_regular(name) {
                batch.complete = true; // a symlink or a hard link: there is no write to wait for
            } else if flags.intersects(ReadFlags::CREATE | ReadFlags::MODIFY) {
                self.writing.insert(name.to_os_string());
                batch.writing = true;
            }
            if reader.is_buffer_empty() {
                break;
            }
        }
        Ok(batch)
    }

    /// Whether `name` in the directory is a regular file with one link (a file being written,
    /// not a link to one that exists).
    fn is_regular(&self, name: &OsStr) -> bool {
        use std::os::unix::fs::MetadataExt;
        std::fs::symlink_metadata(self.dir.join(name)).is_ok_and(|m| m.is_file() && m.nlink() == 1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    fn complete() -> Batch {
        Batch { complete: true, ..Default::default() }
    }
    fn fold() -> Batch {
        Batch { fold: true, ..Default::default() }
    }
    fn writing() -> Batch {
        Batch { writing: true, ..Default::default() }
    }

    #[test]
    fn a_file_renamed_into_place_is_read_at_once() {
        let t = Instant::now();
        let p = schedule(None, complete(), t).unwrap();
        assert_eq!(p.due(false), t);
    }

    #[test]
    fn a_write_waits_for_its_close() {
        let t = Instant::now();
        let p = schedule(None, writing(), t).unwrap();
        assert_eq!(p.due(true), t + MAX_DELAY);
        let p = schedule(Some(p), complete(), t + 5 * MS).unwrap();
        assert_eq!(p.due(false), t + 5 * MS);
        // Another file still open holds every scan back, at most MAX_DELAY.
        assert_eq!(p.due(true), t + MAX_DELAY);
    }

    #[test]
    fn a_delete_and_a_re_create_are_read_together() {
        let t = Instant::now();
        let p = schedule(None, fold(), t).unwrap();
        assert_eq!(p.due(false), t + FOLD);
        // vim: the original renamed to a backup, the new file written, the backup deleted.
        let p = schedule(Some(p), complete(), t + MS).unwrap();
        assert_eq!(p.due(false), t + MS + FOLD, "a complete write in a fold waits for quiet");
        let p = schedule(Some(p), writing(), t + 2 * MS).unwrap();
        let p = schedule(Some(p), complete(), t + 40 * MS).unwrap();
        let p = schedule(Some(p), fold(), t + 41 * MS).unwrap();
        assert_eq!(p.due(false), t + 41 * MS + FOLD);
    }

    #[test]
    fn no_scan_waits_longer_than_the_cap() {
        let t = Instant::now();
        let mut p = schedule(None, fold(), t);
        for i in 1..200 {
            p = schedule(p, fold(), t + i * 8 * MS);
        }
        assert_eq!(p.unwrap().due(false), t + MAX_DELAY);
        assert_eq!(schedule(p, Batch::default(), t + 2 * MAX_DELAY), p, "nothing relevant changes nothing");
    }

    #[test]
    fn a_gone_directory_or_an_overflow_is_scanned_now() {
        let t = Instant::now();
        let p = schedule(None, fold(), t);
        let now = Batch { now: true, ..Default::default() };
        assert_eq!(schedule(p, now, t + MS).unwrap().due(false), t + MS);
    }

    #[test]
    fn events_are_classified_as_editors_make_them() {
        let dir = std::env::temp_dir().join(format!("atoll-watch-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let mut w = Watch::new(&dir).unwrap();
        let next = |w: &mut Watch| smol::block_on(w.next()).unwrap();
        // A write renamed into place (the hidden temporary is ignored).
        std::fs::write(dir.join(".a.tmp"), "x").unwrap();
        std::fs::rename(dir.join(".a.tmp"), dir.join("a.yaml")).unwrap();
        assert_eq!(next(&mut w), complete());
        // A file opened and written, not yet closed.
        let mut f = std::fs::File::create(dir.join("b.yaml")).unwrap();
        std::io::Write::write_all(&mut f, b"y").unwrap();
        let b = next(&mut w);
        assert!(b.writing && !b.complete, "{b:?}");
        assert!(w.open_writes());
        drop(f);
        assert_eq!(next(&mut w), complete());
        assert!(!w.open_writes());
        // A symlink has no close to wait for.
        std::os::unix::fs::symlink(dir.join("a.yaml"), dir.join("c.yaml")).unwrap();
        assert_eq!(next(&mut w), complete());
        std::fs::remove_file(dir.join("a.yaml")).unwrap();
        assert_eq!(next(&mut w), fold());
        let _ = std::fs::remove_dir_all(&dir);
    }
}
