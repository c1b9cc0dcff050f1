//! kubelet's atomic writer: a ConfigMap, Secret or projected volume's files are written into a
//! fresh hidden directory (`..<time>.<tag>`), and one `rename` of the `..data` symlink swaps
//! the whole set, so a reader in the container sees the old files or the new ones, never a
//! mix. Each top-level name is a symlink through `..data` (`app.yaml -> ..data/app.yaml`);
//! names no longer in the set are removed after the swap, and the old directory last.
//!
//! The tag is a keyed digest of the content (the key is random per process, so the name says
//! nothing about a Secret's value): an unchanged set is not written again. Nothing here follows
//! a link it did not make: the volume directory must be a real directory, the old data
//! directory is removed only if `..data` names a plain `..` entry of the volume, stale entries
//! are removed only if they are symlinks, and `remove_dir_all` never follows links.

use crate::objects::resolve::File;
use crate::pod::paths;
use std::collections::BTreeSet;
use std::io::Write;
use std::os::unix::fs::{symlink, OpenOptionsExt, PermissionsExt};
use std::path::Path;
use std::sync::OnceLock;

const DATA: &str = "..data";
const DATA_TMP: &str = "..data_tmp";

/// Writes `files` into the volume directory `dir`, with the group `gid` (fsGroup) owning them
/// and able to read them. Returns whether anything changed.
pub fn write(dir: &Path, files: &[File], gid: Option<u32>) -> Result<bool, String> {
    let meta = std::fs::symlink_metadata(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    if !meta.is_dir() {
        return Err(format!("{} is not a directory", dir.display()));
    }
    let tag = tag(files, gid);
    if holds(dir, files, &tag) {
        return Ok(false);
    }
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    let name = format!("..{}_{:09}.{tag}", now.as_secs(), now.subsec_nanos());
    let fresh = dir.join(&name);
    std::fs::create_dir(&fresh).map_err(|e| format!("creating {}: {e}", fresh.display()))?;
    let written = write_files(&fresh, files, gid);
    if let Err(e) = written {
        let _ = std::fs::remove_dir_all(&fresh);
        return Err(e);
    }
    // The swap: a new link renamed over the old one.
    let tmp = dir.join(DATA_TMP);
    let _ = std::fs::remove_file(&tmp);
    symlink(&name, &tmp).map_err(|e| format!("linking {}: {e}", tmp.display()))?;
    std::fs::rename(&tmp, dir.join(DATA)).map_err(|e| format!("swapping {DATA} in {}: {e}", dir.display()))?;
    // Top-level names: the new ones linked, the ones gone removed (only links atoll made).
    let wanted: BTreeSet<&str> = files.iter().filter_map(|f| f.path.split('/').next()).collect();
    for top in &wanted {
        let link = paths::descending(dir, top).map_err(|e| e.to_string())?;
        let target = format!("{DATA}/{top}");
        if std::fs::read_link(&link).is_ok_and(|t| t == Path::new(&target)) {
            continue;
        }
        // Something else under that name (left by a crash, or planted): removed, not followed.
        match std::fs::symlink_metadata(&link) {
            Ok(m) if m.is_dir() => std::fs::remove_dir_all(&link),
            Ok(_) => std::fs::remove_file(&link),
            Err(_) => Ok(()),
        }
        .map_err(|e| format!("removing {}: {e}", link.display()))?;
        symlink(&target, &link).map_err(|e| format!("linking {}: {e}", link.display()))?;
    }
    for entry in std::fs::read_dir(dir).map_err(|e| format!("{}: {e}", dir.display()))?.flatten() {
        let file_name = entry.file_name();
        let entry_name = file_name.to_string_lossy();
        let is_link = entry.file_type().is_ok_and(|t| t.is_symlink());
        if entry_name.starts_with("..") {
            // Old data directories (this swap's predecessor, or one a crash left), never ours.
            if entry_name != name && entry_name != DATA && !is_link && !entry_name.contains('/') {
                let _ = std::fs::remove_dir_all(entry.path());
            }
        } else if is_link && !wanted.contains(entry_name.as_ref()) {
            let _ = std::fs::remove_file(entry.path());
        }
    }
    Ok(true)
}

/// Whether `dir` holds exactly this set already (written by this process): one `readlink`
/// and one per top-level name, nothing read.
pub fn is_current(dir: &Path, files: &[File], gid: Option<u32>) -> bool {
    holds(dir, files, &tag(files, gid))
}

/// Whether `..data` names the set tagged `tag` and every top-level link is in place.
fn holds(dir: &Path, files: &[File], tag: &str) -> bool {
    let current = std::fs::read_link(dir.join(DATA)).ok().and_then(|t| t.to_str().map(str::to_string));
    current.is_some_and(|c| c.ends_with(&format!(".{tag}"))) && links_in_place(dir, files)
}

/// Every top-level name of `files` is the link through `..data` atoll makes.
fn links_in_place(dir: &Path, files: &[File]) -> bool {
    files
        .iter()
        .filter_map(|f| f.path.split('/').next())
        .all(|top| std::fs::read_link(dir.join(top)).is_ok_and(|t| t == Path::new(DATA).join(top)))
}

fn write_files(base: &Path, files: &[File], gid: Option<u32>) -> Result<(), String> {
    for f in files {
        let path = paths::descending(base, &f.path).map_err(|e| e.to_string())?;
        if let Some(parent) = path.parent().filter(|p| *p != base) {
            std::fs::create_dir_all(parent).map_err(|e| format!("creating {}: {e}", parent.display()))?;
            chown_group(parent, gid)?;
        }
        // kubelet's fsGroup rule for read-only volumes: the group may read.
        let mode = if gid.is_some() { f.mode | 0o440 } else { f.mode };
        let mut out = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .custom_flags(rustix::fs::OFlags::NOFOLLOW.bits() as i32)
            .open(&path)
            .map_err(|e| format!("writing {}: {e}", path.display()))?;
        out.write_all(&f.data).map_err(|e| format!("writing {}: {e}", path.display()))?;
        chown_group(&path, gid)?;
        out.set_permissions(std::fs::Permissions::from_mode(mode))
            .map_err(|e| format!("setting the mode of {}: {e}", path.display()))?;
    }
    chown_group(base, gid)?;
    std::fs::set_permissions(base, std::fs::Permissions::from_mode(0o755)).map_err(|e| e.to_string())
}

fn chown_group(path: &Path, gid: Option<u32>) -> Result<(), String> {
    match gid {
        Some(g) => std::os::unix::fs::lchown(path, None, Some(g)).map_err(|e| format!("chown {}: {e}", path.display())),
        None => Ok(()),
    }
}

/// A digest of the set under this process's random key, as 16 hex digits.
fn tag(files: &[File], gid: Option<u32>) -> String {
    static KEY: OnceLock<ring::hmac::Key> = OnceLock::new();
    let key = KEY.get_or_init(|| {
        ring::hmac::Key::generate(ring::hmac::HMAC_SHA256, &ring::rand::SystemRandom::new())
            .unwrap_or_else(|_| ring::hmac::Key::new(ring::hmac::HMAC_SHA256, &std::process::id().to_le_bytes()))
    });
    let mut ctx = ring::hmac::Context::with_key(key);
    ctx.update(&gid.map_or(u64::MAX, u64::from).to_le_bytes());
    for f in files {
        for part in [f.path.as_bytes(), &f.mode.to_le_bytes(), &(f.data.len() as u64).to_le_bytes(), &f.data] {
            ctx.update(part);
        }
    }
    ctx.sign().as_ref()[..8].iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dir(name: &str) -> std::path::PathBuf {
        let d = std::env::temp_dir().join(format!("atoll-writer-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    fn file(path: &str, data: &str) -> File {
        File { path: path.into(), data: data.as_bytes().to_vec(), mode: 0o644 }
    }

    #[test]
    fn a_swap_replaces_the_whole_set_and_removes_what_went() {
        let d = dir("swap");
        assert!(write(&d, &[file("a.yaml", "1"), file("conf/b", "2")], None).unwrap());
        assert_eq!(std::fs::read_to_string(d.join("a.yaml")).unwrap(), "1");
        assert_eq!(std::fs::read_to_string(d.join("conf/b")).unwrap(), "2");
        assert_eq!(std::fs::read_link(d.join("a.yaml")).unwrap(), Path::new("..data/a.yaml"));
        let first = std::fs::read_link(d.join(DATA)).unwrap();
        // The same content again: nothing written.
        assert!(!write(&d, &[file("a.yaml", "1"), file("conf/b", "2")], None).unwrap());
        assert_eq!(std::fs::read_link(d.join(DATA)).unwrap(), first);
        // New content: a new data directory, the old one gone, and the name no longer there too.
        assert!(write(&d, &[file("a.yaml", "3")], None).unwrap());
        assert_eq!(std::fs::read_to_string(d.join("a.yaml")).unwrap(), "3");
        assert!(std::fs::symlink_metadata(d.join("conf")).is_err());
        assert!(std::fs::symlink_metadata(d.join(&first)).is_err());
        let names: Vec<String> =
            std::fs::read_dir(&d).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
        assert_eq!(names.len(), 3, "{names:?}"); // ..data, one data directory, a.yaml
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn modes_and_the_group_are_applied() {
        let d = dir("modes");
        let f = File { path: "pw".into(), data: b"x".to_vec(), mode: 0o400 };
        write(&d, std::slice::from_ref(&f), None).unwrap();
        assert_eq!(std::fs::metadata(d.join("pw")).unwrap().permissions().mode() & 0o777, 0o400);
        write(&d, &[f], Some(2000)).unwrap();
        let m = std::fs::metadata(d.join("pw")).unwrap();
        assert_eq!(m.permissions().mode() & 0o777, 0o440);
        assert_eq!(std::os::unix::fs::MetadataExt::gid(&m), 2000);
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn links_planted_in_the_volume_are_never_followed() {
        let d = dir("planted");
        let outside = dir("planted-outside");
        std::fs::write(outside.join("keep"), "precious").unwrap();
        // `..data` pointing outside, and a top-level name that is a link outside.
        symlink(&outside, d.join(DATA)).unwrap();
        symlink(outside.join("keep"), d.join("a.yaml")).unwrap();
        write(&d, &[file("a.yaml", "new"), file("b", "b")], None).unwrap();
        assert_eq!(std::fs::read_to_string(outside.join("keep")).unwrap(), "precious");
        assert!(outside.is_dir(), "the outside directory was removed");
        // The planted name is replaced by atoll's own link, never written through.
        assert_eq!(std::fs::read_to_string(d.join("a.yaml")).unwrap(), "new");
        assert_eq!(std::fs::read_link(d.join("a.yaml")).unwrap(), Path::new("..data/a.yaml"));
        // A volume directory that is itself a link is refused.
        let link = d.parent().unwrap().join(format!("atoll-writer-link-{}", std::process::id()));
        let _ = std::fs::remove_file(&link);
        symlink(&outside, &link).unwrap();
        assert!(write(&link, &[file("x", "1")], None).is_err());
        assert!(!outside.join("x").exists());
        let _ = std::fs::remove_file(&link);
        let _ = std::fs::remove_dir_all(&d);
        let _ = std::fs::remove_dir_all(&outside);
    }
}
