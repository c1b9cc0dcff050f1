//! Reading a manifest directory (or file) once, as kubelet's file source reads it: entries in
//! lexical order, dot-files and `*.minisig` signatures passed over, no recursion, other file
//! types skipped, a 10 MiB limit, one Pod, ConfigMap or Secret per file. Each file and its
//! signature are opened non-blocking and checked to be regular files on the descriptor (a FIFO
//! swapped in after the listing is refused, not waited on), then opened as a payload
//! (`payload::Intake`: the signature first, decryption of `*.age` files in memory).
//! `atoll validate` and `atoll doctor` call [`scan`]; the running source (`file`) rescans
//! through `scan_with` with a memo, so only changed files are parsed again, and off the
//! executor. Also here: what makes a `secretsDir` private enough to read.

use super::payload::{Intake, Opened, Payload};
use crate::pod::{self, Finding, ManifestError, Origin};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

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

/// A file that loaded: what it holds, and the payload it came from (kept with its signature).
#[derive(Clone, Debug)]
pub struct Good {
    pub opened: Opened,
    pub payload: Arc<Payload>,
}

/// What one scan found.
#[derive(Clone, Debug, Default)]
pub struct Scan {
    /// The files that loaded, in lexical order of path.
    pub good: BTreeMap<PathBuf, Good>,
    pub errors: BTreeMap<PathBuf, ManifestError>,
    /// Entries passed over, with why (sub-directories, sockets, ...).
    pub skipped: Vec<(PathBuf, String)>,
    /// Why the path itself is unusable (missing, not a file or directory, unreadable).
    pub path_problem: Option<String>,
}

/// What each file loaded to, by a digest of its bytes and signature: a rescan still reads
/// every file (a change of content shows whatever the file system's timestamps say), but
/// parses only what changed.
pub(super) type Memo = BTreeMap<PathBuf, ([u8; 32], Result<Good, ManifestError>)>;

/// Reads every manifest under `path` once (the pipeline `atoll validate` shares), each
/// opened by `intake`.
pub fn scan(path: &Path, intake: &Intake) -> Scan {
    scan_with(path, intake, &mut Memo::new())
}

/// [`scan`], reusing what `memo` holds for files whose bytes are unchanged (and keeping it
/// up to date).
pub(super) fn scan_with(path: &Path, intake: &Intake, memo: &mut Memo) -> Scan {
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
        let fail = |message: String, path: &str| ManifestError {
            origin: file.display().to_string(),
            problems: vec![Finding::new(path, message)],
        };
        let bytes = match read_manifest(&file) {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => {
                out.errors.insert(file.clone(), fail(e.to_string(), ""));
                continue;
            }
        };
        let signature = match intake.trust.as_ref().map(|_| crate::trust::signature_beside(&file)).transpose() {
            Ok(s) => s.flatten(),
            Err(e) => {
                out.errors.insert(file.clone(), fail(e.to_string(), "signature"));
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
                let payload = Arc::new(Payload { origin: Origin::File(absolute(&file)), bytes, signature });
                let loaded = intake.open(&payload).map(|opened| Good { opened, payload });
                let loaded = loaded.map_err(|e| ManifestError { origin: file.display().to_string(), ..e });
                memo.insert(file.clone(), (seen_as, loaded.clone()));
                loaded
            }
        };
        match loaded {
            Ok(good) => drop(out.good.insert(file, good)),
            Err(e) => drop(out.errors.insert(file, e)),
        }
    }
    out
}

/// A manifest file's bytes: opened non-blocking (a link followed, as kubelet), refused unless
/// the descriptor is a regular file, at most the manifest size limit.
fn read_manifest(file: &Path) -> std::io::Result<Vec<u8>> {
    crate::bounded::read_at_most(crate::bounded::open_following(file)?, pod::decode::MAX_MANIFEST_BYTES)
}

/// A Pod in the secrets directory is an error (pods belong in the manifest directory), its
/// file's objects are not used either.
pub(super) fn refuse_pods(scan: &mut Scan) {
    let with_pods: Vec<PathBuf> =
        scan.good.iter().filter(|(_, g)| !g.opened.manifests.pods.is_empty()).map(|(f, _)| f.clone()).collect();
    for file in with_pods {
        scan.good.remove(&file);
        let problem =
            Finding::new("kind", "secretsDir holds Secrets and ConfigMaps; a Pod goes in the manifest directory");
        scan.errors.insert(file.clone(), ManifestError { origin: file.display().to_string(), problems: vec![problem] });
    }
}

pub(super) fn absolute(p: &Path) -> PathBuf {
    std::path::absolute(p).unwrap_or_else(|_| p.to_path_buf())
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
    fn a_fifo_in_place_of_a_manifest_is_refused_at_once() {
        let dir = std::env::temp_dir().join(format!("atoll-scan-fifo-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let fifo = dir.join("web.yaml");
        rustix::fs::mkfifoat(rustix::fs::CWD, &fifo, rustix::fs::Mode::from_raw_mode(0o600)).unwrap();
        // Read on another thread: a blocking open would never return (no writer ever comes).
        let (tx, rx) = std::sync::mpsc::channel();
        let f = fifo.clone();
        std::thread::spawn(move || tx.send(read_manifest(&f).map_err(|e| e.to_string())));
        let got = rx.recv_timeout(std::time::Duration::from_secs(5)).expect("the read returned");
        assert!(got.unwrap_err().contains("not a regular file"));
        // A link to it too (manifests may be links).
        std::os::unix::fs::symlink(&fifo, dir.join("link.yaml")).unwrap();
        assert!(read_manifest(&dir.join("link.yaml")).is_err());
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
        let intake = Intake { node: "edge".into(), ..Default::default() };
        let first = scan_with(&dir, &intake, &mut memo);
        assert_eq!(first.good[&file].opened.manifests.pods.len(), 1);
        // What the memo says for unchanged bytes is what the scan gives: the file is not parsed.
        memo.get_mut(&file).unwrap().1.as_mut().unwrap().opened.manifests.pods.clear();
        let again = scan_with(&dir, &intake, &mut memo);
        assert!(again.good[&file].opened.manifests.pods.is_empty(), "parsed again although unchanged");
        // A change of content (even of the same size) is parsed, whatever the timestamps say.
        let mtime = std::fs::metadata(&file).unwrap().modified().unwrap();
        std::fs::write(&file, yaml("busybox:1.37")).unwrap();
        std::fs::File::options().write(true).open(&file).unwrap().set_modified(mtime).unwrap();
        let changed = scan_with(&dir, &intake, &mut memo);
        assert_eq!(changed.good[&file].opened.manifests.pods[0].pod.spec.containers[0].image, "busybox:1.37");
        // A file that goes leaves the memo.
        std::fs::remove_file(&file).unwrap();
        scan_with(&dir, &intake, &mut memo);
        assert!(memo.is_empty());
        let _ = std::fs::remove_dir_all(&dir);
    }
}
