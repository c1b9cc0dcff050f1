//! A pod's directory on the host, `<root>/pods/<uid>` (kubelet's `/var/lib/kubelet/pods/<uid>`):
//! where its volumes live and how they are prepared (emptyDir, a sized tmpfs for
//! `medium: Memory`, hostPath type checks; the object volumes' files are `object_volumes`'s), the files atoll manages for it (the hosts file,
//! one termination-log file per container instance), subPath mount targets, and its removal.
//!
//! Every path is built by `pod::paths` from validated names, and removal never crosses a
//! mount: everything mounted below the directory is unmounted first, and if anything is still
//! mounted there the directory is left in place (and reported) rather than followed into a
//! volume's contents. `std::fs::remove_dir_all` does not follow symlinks a container made.

use crate::pod::paths::PodDir;
use crate::pod::types::{Pod, Volume};
use std::path::{Path, PathBuf};

/// `<root>/pods/<uid>`, made once per sync and handed to what works inside it.
pub fn pod_dir(root: &Path, uid: &str) -> Result<PodDir, String> {
    PodDir::new(root, uid).map_err(|e| format!("pod directory: {e}"))
}

/// Where a volume lives on the host (`None` for a type atoll does not mount).
pub fn volume_path(dir: &PodDir, v: &Volume) -> Result<Option<PathBuf>, String> {
    if let Some(hp) = &v.host_path {
        return Ok(Some(PathBuf::from(&hp.path)));
    }
    // kubelet's plugin directory names.
    let plugin = if v.empty_dir.is_some() {
        "kubernetes.io~empty-dir"
    } else if v.config_map.is_some() {
        "kubernetes.io~configmap"
    } else if v.secret.is_some() {
        "kubernetes.io~secret"
    } else if v.projected.is_some() {
        "kubernetes.io~projected"
    } else if v.downward_api.is_some() {
        "kubernetes.io~downward-api"
    } else {
        return Ok(None);
    };
    let path = dir.under(&["volumes", plugin, &v.name]).map_err(|e| format!("volume {:?}: {e}", v.name))?;
    Ok(Some(path))
}

/// Makes a volume's directory (`volume_path`). The plugin directory of a volume that holds
/// Secrets (`kubernetes.io~secret`, `~projected`) is root's alone (0700), so its tmpfs, which
/// the container's users must be able to read inside it, is out of other host users' reach
/// even if the state directory above is opened up.
pub fn make_volume_dir(dir: &Path, secret: bool) -> Result<(), String> {
    use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
    let plugin = dir.parent().ok_or("a volume directory has a parent")?;
    let shown = |e: std::io::Error| format!("creating {}: {e}", dir.display());
    std::fs::DirBuilder::new().recursive(true).mode(0o750).create(plugin).map_err(shown)?;
    if secret {
        let m = std::fs::symlink_metadata(plugin).map_err(shown)?;
        if !m.is_dir() {
            return Err(format!("{} is not a directory", plugin.display()));
        }
        if m.permissions().mode() & 0o077 != 0 {
            std::fs::set_permissions(plugin, std::fs::Permissions::from_mode(0o700)).map_err(shown)?;
        }
    }
    match std::fs::create_dir(dir) {
        Err(e) if e.kind() != std::io::ErrorKind::AlreadyExists => Err(shown(e)),
        _ => Ok(()),
    }
}

/// `<pod dir>/volume-subpaths/<volume>/<container>/<index>`: where a subPath is bind-mounted
/// before the runtime mounts it into the container (kubelet's layout).
pub fn subpath_target(dir: &PodDir, volume: &str, container: &str, index: usize) -> Result<PathBuf, String> {
    dir.under(&["volume-subpaths", volume, container, &index.to_string()]).map_err(|e| e.to_string())
}

/// Creates emptyDir directories and checks or creates hostPath paths by their `type`.
pub fn prepare_volumes(pod: &Pod, dir: &PodDir) -> Result<(), String> {
    for v in &pod.spec.volumes {
        let Some(path) = volume_path(dir, v)? else { continue };
        if let Some(ed) = &v.empty_dir {
            std::fs::create_dir_all(&path).map_err(|e| format!("emptyDir {}: {e}", v.name))?;
            if ed.medium.as_deref() == Some("Memory") {
                // A tmpfs, sized by sizeLimit when given (kubelet's SizeMemoryBackedVolumes).
                let data = match ed.size_limit.map(|q| q.value()).filter(|b| *b > 0) {
                    Some(bytes) => format!("mode=0777,size={bytes}"),
                    None => "mode=0777".to_string(),
                };
                tmpfs(&path, &data).map_err(|e| format!("emptyDir {}: {e}", v.name))?;
            }
            continue;
        }
        if let Some(hp) = &v.host_path {
            check_host_path(&v.name, &path, hp.type_.as_deref().unwrap_or(""))?;
        }
    }
    Ok(())
}

/// Mounts a tmpfs with `options` on the directory `path`, unless one is mounted there already.
pub fn tmpfs(path: &Path, options: &str) -> Result<(), String> {
    if mount_points_under(path).iter().any(|p| p == path) {
        return Ok(());
    }
    let data = std::ffi::CString::new(options).map_err(|e| e.to_string())?;
    let flags = rustix::mount::MountFlags::NOSUID | rustix::mount::MountFlags::NODEV;
    rustix::mount::mount("tmpfs", path, "tmpfs", flags, Some(data.as_c_str()))
        .map_err(|e| format!("mounting a tmpfs on {}: {e}", path.display()))
}

/// kubelet's hostPath `type` checks (and creation for the `...OrCreate` types).
fn check_host_path(name: &str, path: &Path, kind: &str) -> Result<(), String> {
    use std::os::unix::fs::FileTypeExt;
    let meta = std::fs::metadata(path);
    let fail = |what: &str| Err(format!("hostPath volume {name:?}: {} {what}", path.display()));
    let is = |f: &dyn Fn(&std::fs::Metadata) -> bool| meta.as_ref().is_ok_and(f);
    match kind {
        "DirectoryOrCreate" if meta.is_err() => {
            std::fs::create_dir_all(path).map_err(|e| format!("hostPath {name}: {e}"))?;
        }
        "DirectoryOrCreate" | "Directory" if !is(&|m| m.is_dir()) => return fail("is not a directory"),
        "FileOrCreate" if meta.is_err() => {
            if let Some(parent) = path.parent() {
                std::fs::create_dir_all(parent).map_err(|e| format!("hostPath {name}: {e}"))?;
            }
            std::fs::File::create(path).map_err(|e| format!("hostPath {name}: {e}"))?;
        }
        "FileOrCreate" | "File" if !is(&|m| m.is_file()) => return fail("is not a file"),
        "Socket" if !is(&|m| m.file_type().is_socket()) => return fail("is not a socket"),
        "CharDevice" if !is(&|m| m.file_type().is_char_device()) => return fail("is not a character device"),
        "BlockDevice" if !is(&|m| m.file_type().is_block_device()) => return fail("is not a block device"),
        _ => {}
    }
    Ok(())
}

/// Writes the managed /etc/hosts (kubelet's layout), rewritten on every container start.
pub fn write_hosts(pod: &Pod, dir: &PodDir, pod_ip: &str, hostname: &str) -> Result<PathBuf, String> {
    let pod_dir = dir.path();
    let mut text = String::new();
    if pod.spec.host_network {
        text.push_str("# Kubernetes-managed hosts file (host network).\n");
        let host = crate::bounded::read_following(Path::new("/etc/hosts"), 1 << 20).unwrap_or_default();
        text.push_str(&String::from_utf8_lossy(&host));
    } else {
        text.push_str(
            "# Kubernetes-managed hosts file.\n127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n",
        );
        text.push_str(
            "fe00::0\tip6-localnet\nfe00::0\tip6-mcastprefix\nfe00::1\tip6-allnodes\nfe00::2\tip6-allrouters\n",
        );
        text.push_str(&format!("{pod_ip}\t{hostname}\n"));
    }
    if !pod.spec.host_aliases.is_empty() {
        text.push_str("\n# Entries added by HostAliases.\n");
        for a in &pod.spec.host_aliases {
            text.push_str(&format!("{}\t{}\n", a.ip, a.hostnames.join("\t")));
        }
    }
    std::fs::create_dir_all(pod_dir).map_err(|e| format!("creating {}: {e}", pod_dir.display()))?;
    let path = pod_dir.join("etc-hosts");
    std::fs::write(&path, text).map_err(|e| format!("writing {}: {e}", path.display()))?;
    Ok(path)
}

/// A fresh, world-writable termination-log file for one container instance:
/// `<pod dir>/containers/<name>/<restart, 8 hex digits>`.
pub fn termination_log_file(pod_dir: &PodDir, name: &str, restart: u32) -> Result<PathBuf, String> {
    use std::os::unix::fs::PermissionsExt;
    let path = pod_dir.under(&["containers", name, &format!("{restart:08x}")]).map_err(|e| e.to_string())?;
    let dir = path.parent().unwrap_or(pod_dir.path());
    std::fs::create_dir_all(dir).map_err(|e| format!("creating {}: {e}", dir.display()))?;
    std::fs::write(&path, b"").map_err(|e| format!("writing {}: {e}", path.display()))?;
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o666)).map_err(|e| e.to_string())?;
    Ok(path)
}

/// Mount points at or below `dir` (from /proc/self/mountinfo), deepest first.
pub fn mount_points_under(dir: &Path) -> Vec<PathBuf> {
    let text = crate::bounded::read_file(Path::new("/proc/self/mountinfo"), 64 << 20).unwrap_or_default();
    let mut points: Vec<PathBuf> = String::from_utf8_lossy(&text)
        .lines()
        .filter_map(|l| l.split(' ').nth(4))
        .map(|p| PathBuf::from(unescape_mountinfo(p)))
        .filter(|p| p.starts_with(dir))
        .collect();
    points.sort_by_key(|p| std::cmp::Reverse(p.components().count()));
    points
}

/// mountinfo writes space, tab, newline and backslash as octal escapes (`\040`).
fn unescape_mountinfo(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let octal = b.get(i + 1..i + 4).and_then(|d| std::str::from_utf8(d).ok()).and_then(|d| {
            if d.bytes().all(|c| (b'0'..=b'7').contains(&c)) {
                u8::from_str_radix(d, 8).ok()
            } else {
                None
            }
        });
        match (b[i], octal) {
            (b'\\', Some(c)) => {
                out.push(c);
                i += 4;
            }
            (c, _) => {
                out.push(c);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Removes a pod's directory: unmounts everything below it (tmpfs emptyDirs, subPath binds),
/// then deletes it, but only if nothing is mounted there any more, so a failed unmount never
/// turns into deleting a volume's contents.
pub fn remove(dir: &Path) -> Result<(), String> {
    for p in mount_points_under(dir) {
        if let Err(e) = rustix::mount::unmount(&p, rustix::mount::UnmountFlags::DETACH) {
            log::warn!("unmounting {}: {e}", p.display());
        }
    }
    let left = mount_points_under(dir);
    if !left.is_empty() {
        return Err(format!(
            "{} still has {} mount(s) below it (first {}); not removing it",
            dir.display(),
            left.len(),
            left[0].display()
        ));
    }
    match std::fs::remove_dir_all(dir) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(format!("removing {}: {e}", dir.display())),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mountinfo_escapes_are_read() {
        assert_eq!(unescape_mountinfo(r"/a\040b\134c"), r"/a b\c");
        assert_eq!(unescape_mountinfo(r"/plain\09"), r"/plain\09");
    }

    #[test]
    fn a_secret_volume_lives_in_a_directory_only_root_can_enter() {
        use std::os::unix::fs::PermissionsExt;
        let d = std::env::temp_dir().join(format!("atoll-poddir-secret-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        let secret = d.join("volumes/kubernetes.io~secret/db");
        let config = d.join("volumes/kubernetes.io~configmap/cfg");
        make_volume_dir(&secret, true).unwrap();
        make_volume_dir(&config, false).unwrap();
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(secret.parent().unwrap()), 0o700);
        assert_eq!(mode(config.parent().unwrap()), 0o750);
        // One from an older atoll, open to all: tightened.
        std::fs::set_permissions(secret.parent().unwrap(), std::fs::Permissions::from_mode(0o755)).unwrap();
        make_volume_dir(&secret, true).unwrap();
        assert_eq!(mode(secret.parent().unwrap()), 0o700);
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn removal_never_descends_into_something_still_mounted() {
        let d = std::env::temp_dir().join(format!("atoll-poddir-{}", std::process::id()));
        let outside = d.join("outside");
        let pod = d.join("pods/u1");
        std::fs::create_dir_all(&outside).unwrap();
        std::fs::write(outside.join("keep"), b"x").unwrap();
        std::fs::create_dir_all(pod.join("volume-subpaths/v/c/0")).unwrap();
        // A pod dir holding a bind of a directory outside it, and a symlink out.
        rustix::mount::mount_bind(&outside, pod.join("volume-subpaths/v/c/0")).unwrap();
        std::os::unix::fs::symlink(&outside, pod.join("link")).unwrap();
        remove(&pod).unwrap();
        assert!(!pod.exists());
        assert!(outside.join("keep").exists(), "neither the bind nor the link was followed");
        let _ = std::fs::remove_dir_all(&d);
    }
}
