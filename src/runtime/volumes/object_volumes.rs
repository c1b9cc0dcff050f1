//! A pod's ConfigMap, Secret and projected volumes on the host, as kubelet sets them up:
//! `<pod dir>/volumes/kubernetes.io~{configmap,secret,projected}/<name>`, its files written by
//! the `atomic_writer` from the node's local objects (`objects::resolve`). A volume holding a
//! Secret (secret, projected) is a tmpfs first, so its values are never written to disk: if
//! the tmpfs cannot be mounted, nothing is written. The worker sets the volumes up before a
//! container starts (a missing object keeps the container waiting) and refreshes them at its
//! syncs, so a changed object reaches running containers without a restart (as kubelet does
//! for mounts without a subPath); a vanished object leaves the last files in place.

use super::atomic_writer;
use super::poddir;
use crate::objects::resolve::{self, Lookup};
use crate::pod::types::{Pod, Volume};
use std::path::Path;

/// What setting up one volume came to.
#[derive(Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Its files are the objects' current content (`true`: they were just written).
    Current(bool),
    /// It cannot be set up: kubelet's message (`configmap "app" not found`).
    Failed(String),
}

/// Sets up (or refreshes) each object volume of `pod`, by volume name.
pub fn set_up(root: &Path, pod: &Pod, lookup: &dyn Lookup) -> Vec<(String, Outcome)> {
    pod.spec
        .volumes
        .iter()
        .filter(|v| resolve::is_object_volume(v))
        .map(|v| {
            let outcome = match one(root, pod, v, lookup) {
                Ok(written) => Outcome::Current(written),
                Err(e) => Outcome::Failed(e),
            };
            (v.name.clone(), outcome)
        })
        .collect()
}

fn one(root: &Path, pod: &Pod, v: &Volume, lookup: &dyn Lookup) -> Result<bool, String> {
    let Some(files) = resolve::volume_files(&pod.metadata.namespace, v, lookup) else { return Ok(false) };
    let files = files?;
    let dir = poddir::volume_path(root, &pod.metadata.uid, v)?.ok_or("not an object volume")?;
    let gid = pod.spec.security_context.as_ref().and_then(|s| s.fs_group).and_then(|g| u32::try_from(g).ok());
    // The common case at a sync: nothing changed, nothing to mount or write.
    if atomic_writer::is_current(&dir, &files, gid) {
        return Ok(false);
    }
    poddir::make_volume_dir(&dir, resolve::in_memory(v))?;
    if resolve::in_memory(v) {
        // Secrets live in memory only: no tmpfs, no files.
        poddir::tmpfs(&dir, "mode=0755")?;
        if !poddir::mount_points_under(&dir).contains(&dir) {
            return Err(format!("{} is not a tmpfs; not writing secrets to disk", dir.display()));
        }
    }
    atomic_writer::write(&dir, &files, gid)
}

/// Whether `pod` has a volume of local objects.
pub fn any(pod: &Pod) -> bool {
    pod.spec.volumes.iter().any(resolve::is_object_volume)
}
