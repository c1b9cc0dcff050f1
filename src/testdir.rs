//! Unit tests' scratch space under `/tmp`, removed when the guard drops (also when the test
//! fails): [`TestDir`], a directory of one test's own, and [`TestFile`], a file in a directory
//! the tests of one process share, which the last file to go takes with it.

use std::ops::Deref;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Mutex;

/// A fresh, empty `/tmp/atoll-<tag>-<pid>-<n>`, removed with what is in it when dropped.
#[derive(Debug)]
pub struct TestDir(PathBuf);

impl TestDir {
    pub fn new(tag: &str) -> TestDir {
        static N: AtomicU32 = AtomicU32::new(0);
        let n = N.fetch_add(1, Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!("atoll-{tag}-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("create a test dir");
        TestDir(dir)
    }
}

impl Deref for TestDir {
    type Target = Path;
    fn deref(&self) -> &Path {
        &self.0
    }
}

impl AsRef<Path> for TestDir {
    fn as_ref(&self) -> &Path {
        &self.0
    }
}

impl Drop for TestDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// How many [`TestFile`]s live in each shared directory.
static SHARED: Mutex<Vec<(PathBuf, usize)>> = Mutex::new(Vec::new());

/// `text` written to `name` in `/tmp/atoll-<tag>-<pid>`; the file goes when dropped, and the
/// directory with the last of its files.
#[derive(Debug)]
pub struct TestFile(PathBuf);

impl TestFile {
    pub fn new(tag: &str, name: &str, text: &str) -> TestFile {
        let dir = std::env::temp_dir().join(format!("atoll-{tag}-{}", std::process::id()));
        let mut shared = SHARED.lock().unwrap_or_else(|p| p.into_inner());
        std::fs::create_dir_all(&dir).expect("create a shared test dir");
        match shared.iter_mut().find(|(d, _)| *d == dir) {
            Some((_, n)) => *n += 1,
            None => shared.push((dir.clone(), 1)),
        }
        let path = dir.join(name);
        std::fs::write(&path, text).expect("write a test file");
        TestFile(path)
    }
}

impl Deref for TestFile {
    type Target = Path;
    fn deref(&self) -> &Path {
        &self.0
    }
}

impl std::fmt::Display for TestFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.0.display())
    }
}

impl AsRef<Path> for TestFile {
    fn as_ref(&self) -> &Path {
        &self.0
    }
}

impl Drop for TestFile {
    fn drop(&mut self) {
        let mut shared = SHARED.lock().unwrap_or_else(|p| p.into_inner());
        let _ = std::fs::remove_file(&self.0);
        let Some(dir) = self.0.parent() else { return };
        if let Some(i) = shared.iter().position(|(d, _)| d == dir) {
            shared[i].1 -= 1;
            if shared[i].1 == 0 {
                shared.remove(i);
                let _ = std::fs::remove_dir_all(dir);
            }
        }
    }
}
