//! Reading a manifest directory (or file) once, as kubelet's file source reads it: entries in
//! lexical order, dot-files and `*.minisig` signatures passed over, no recursion, other file
//! types skipped, a 10 MiB limit, one Pod, ConfigMap or Secret per file; each file's signature
//! checked when signatures are trusted and `*.age` files decrypted in memory when a key is
//! given. `atoll validate` and `atoll doctor` call [`scan`]; the running source (`file`)
//! rescans through [`scan_with`] with a memo, so only changed files are parsed again. Also
//! here: what makes a `secretsDir` private enough to read.

use crate::age::Identity;
use crate::objects::{self, LocalObject};
use crate::pod::{self, Finding, ManifestError, Origin, Policy, Shape, StaticPod};
use crate::trust::{Trust, Verified};
use std::collections::BTreeMap;
use std::io::Read;
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
pub(super) type Memo = BTreeMap<PathBuf, ([u8; 32], Loaded)>;
type Loaded = Result<(objects::Manifests, Option<Verified>), ManifestError>;
/// What manifests are checked and opened with: signatures trusted, the decryption identity.
pub(super) type Keys<'a> = (Option<&'a Trust>, Option<&'a Identity>);

/// Reads every manifest under `path` once (the pipeline `atoll validate` shares); with
/// `trust`, each is checked against its signature file (`pod.yaml.minisig`); with `key`, files
/// ending in `.age` are decrypted (in memory only).
pub fn scan(path: &Path, node: &str, policy: Policy, trust: Option<&Trust>, key: Option<&Identity>) -> Scan {
    scan_with(path, node, policy, (trust, key), &mut Memo::new())
}

/// [`scan`], reusing what `memo` holds for files whose bytes are unchanged (and keeping it
/// up to date).
pub(super) fn scan_with(path: &Path, node: &str, policy: Policy, keys: Keys<'_>, memo: &mut Memo) -> Scan {
    let (trust, _) = keys;
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
                let loaded = load_file(&file, &bytes, signature.as_deref(), node, policy, keys);
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
    (trust, key): Keys<'_>,
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
    // An encrypted manifest: its plaintext lives in memory only (never kept on disk).
    let plain;
    let bytes = if file.to_string_lossy().ends_with(crate::age::SUFFIX) {
        let fail =
            |m: String| ManifestError { origin: file.display().to_string(), problems: vec![Finding::new("", m)] };
        let key = key.ok_or_else(|| fail("encrypted (age), and no decryptionKeyFile is configured".into()))?;
        plain = key.decrypt(bytes).map_err(|e| fail(format!("cannot decrypt: {e}")))?;
        &plain[..]
    } else {
        bytes
    };
    objects::load(bytes, Shape::SinglePod, &origin, node, policy).map(|l| (l, verified))
}

/// A manifest refused for its signature.
fn signature_error(file: &Path, message: String) -> ManifestError {
    crate::metrics::add(&crate::metrics::SIGNATURE_REFUSALS, &[("source", "file")], 1.0);
    ManifestError { origin: file.display().to_string(), problems: vec![Finding::new("signature", message)] }
}

/// A Pod in the secrets directory is an error (pods belong in the manifest directory), its
/// file's objects are not used either.
pub(super) fn refuse_pods(scan: &mut Scan) {
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
    fn a_rescan_parses_only_files_whose_bytes_changed() {
        let dir = std::env::temp_dir().join(format!("atoll-file-memo-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("web.yaml");
        let yaml = |image: &str| {
            format!("apiVersion: v1\nkind: Pod\nmetadata:\n  name: web\nspec:\n  containers:\n  - name: c\n    image: {image}\n")
        };
        std::fs::write(&file, yaml("busybox:1.36")).unwrap();
        let mut memo = Memo::new();
        let first = scan_with(&dir, "edge", Policy::default(), (None, None), &mut memo);
        assert_eq!(first.by_file[&file].len(), 1);
        // What the memo says for unchanged bytes is what the scan gives: the file is not parsed.
        memo.get_mut(&file).unwrap().1.as_mut().unwrap().0.pods.clear();
        let again = scan_with(&dir, "edge", Policy::default(), (None, None), &mut memo);
        assert!(again.by_file[&file].is_empty(), "parsed again although unchanged");
        // A change of content (even of the same size) is parsed, whatever the timestamps say.
        let mtime = std::fs::metadata(&file).unwrap().modified().unwrap();
        std::fs::write(&file, yaml("busybox:1.37")).unwrap();
        std::fs::File::options().write(true).open(&file).unwrap().set_modified(mtime).unwrap();
        let changed = scan_with(&dir, "edge", Policy::default(), (None, None), &mut memo);
        assert_eq!(changed.by_file[&file][0].pod.spec.containers[0].image, "busybox:1.37");
        // A file that goes leaves the memo.
        std::fs::remove_file(&file).unwrap();
        scan_with(&dir, "edge", Policy::default(), (None, None), &mut memo);
        assert!(memo.is_empty());
        let _ = std::fs::remove_dir_all(&dir);
    }
}
