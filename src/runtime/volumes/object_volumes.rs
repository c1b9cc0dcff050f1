//! A pod's ConfigMap, Secret, projected and downwardAPI volumes on the host, as kubelet sets
//! them up: `<pod dir>/volumes/kubernetes.io~{configmap,secret,projected,downward-api}/<name>`,
//! its files written by the `atomic_writer` from the node's local objects (`objects::resolve`)
//! and the pod's own fields and resources (`pod::fieldpath`). A volume holding a Secret
//! (secret, projected) or the downward API is a tmpfs first, as in kubelet, so its values are
//! never written to disk: if the tmpfs cannot be mounted, nothing is written. The worker sets
//! the volumes up before a container starts (a missing object keeps the container waiting)
//! and refreshes them at its syncs, so a changed object, or labels and annotations changed by
//! an edit that keeps the pod's UID, reach running containers without a restart (as kubelet
//! does for mounts without a subPath); a vanished object leaves the last files in place.

use super::atomic_writer;
use super::poddir;
use crate::objects::resolve::{self, File, Lookup};
use crate::pod::fieldpath::{self, Allocatable};
use crate::pod::paths::PodDir;
use crate::pod::types::{DownwardAPIVolumeFile, Pod, Volume};
use std::collections::BTreeMap;

/// What setting up one volume came to.
#[derive(Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Its files are the objects' current content (`true`: they were just written).
    Current(bool),
    /// It cannot be set up: kubelet's message (`configmap "app" not found`).
    Failed(String),
}

/// Sets up (or refreshes) each volume of `pod` whose files atoll writes, by volume name.
pub fn set_up(dir: &PodDir, pod: &Pod, lookup: &dyn Lookup, node: Allocatable) -> Vec<(String, Outcome)> {
    pod.spec
        .volumes
        .iter()
        .filter(|v| written(v))
        .map(|v| {
            let outcome = match one(dir, pod, v, lookup, node) {
                Ok(written) => Outcome::Current(written),
                Err(e) => Outcome::Failed(e),
            };
            (v.name.clone(), outcome)
        })
        .collect()
}

fn one(pod_dir: &PodDir, pod: &Pod, v: &Volume, lookup: &dyn Lookup, node: Allocatable) -> Result<bool, String> {
    let files = match (resolve::volume_files(&pod.metadata.namespace, &pod.metadata.uid, v, lookup), &v.downward_api) {
        (Some(files), _) => {
            let mut files = files?;
            // A projected volume's downwardAPI sources (paths unique across sources: validated).
            if let Some(p) = &v.projected {
                let mut more = BTreeMap::new();
                for d in p.sources.iter().filter_map(|s| s.downward_api.as_ref()) {
                    downward_files(pod, &d.items, p.default_mode, node, &mut more)?;
                }
                if !more.is_empty() {
                    files.extend(more.into_values());
                    files.sort_by(|a, b| a.path.cmp(&b.path));
                }
            }
            files
        }
        (None, Some(d)) => {
            let mut files = BTreeMap::new();
            downward_files(pod, &d.items, d.default_mode, node, &mut files)?;
            files.into_values().collect()
        }
        (None, None) => return Ok(false),
    };
    let dir = poddir::volume_path(pod_dir, v)?.ok_or("not an object volume")?;
    let gid = pod.spec.security_context.as_ref().and_then(|s| s.fs_group).and_then(|g| u32::try_from(g).ok());
    // The common case at a sync: nothing changed, nothing to mount or write.
    if atomic_writer::is_current(&dir, &files, gid) {
        return Ok(false);
    }
    let memory = resolve::in_memory(v) || v.downward_api.is_some();
    poddir::make_volume_dir(&dir, memory)?;
    if memory {
        // Secrets (and, as in kubelet, the downward API) live in memory only: no tmpfs, no files.
        poddir::tmpfs(&dir, "mode=0755")?;
        if !poddir::mount_points_under(&dir).contains(&dir) {
            return Err(format!("{} is not a tmpfs; not writing its files to disk", dir.display()));
        }
    }
    atomic_writer::write(&dir, &files, gid)
}

/// The files of downwardAPI `items` into `out` by path (a later item wins a path, as in
/// kubelet's map), each with its mode, else `default_mode`, else 0644.
fn downward_files(
    pod: &Pod,
    items: &[DownwardAPIVolumeFile],
    default_mode: Option<i64>,
    node: Allocatable,
    out: &mut BTreeMap<String, File>,
) -> Result<(), String> {
    for item in items {
        let data = match (&item.field_ref, &item.resource_field_ref) {
            (Some(f), _) => fieldpath::field(pod, &f.field_path, "", "")
                .ok_or_else(|| format!("unsupported fieldPath {:?}", f.field_path))?,
            (None, Some(r)) => fieldpath::resource(pod, None, r, node)?,
            (None, None) => continue,
        };
        let mode = item.mode.or(default_mode).and_then(|m| u32::try_from(m).ok()).map_or(0o644, |m| m & 0o777);
        out.insert(item.path.clone(), File { path: item.path.clone(), data: data.into_bytes(), mode });
    }
    Ok(())
}

/// Whether atoll writes `v`'s files: local objects, or the downward API.
pub fn written(v: &Volume) -> bool {
    resolve::is_object_volume(v) || v.downward_api.is_some()
}

/// Whether `pod` has a volume whose files atoll writes.
pub fn any(pod: &Pod) -> bool {
    pod.spec.volumes.iter().any(written)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn downward_items_become_files_with_their_modes_the_last_item_winning_a_path() {
        let pod: Pod = serde_json::from_str(
            r#"{"metadata":{"name":"w","labels":{"b":"2","a":"1"}},"spec":{"containers":[{"name":"c","image":"i",
            "resources":{"limits":{"memory":"32Mi"}}}],"volumes":[{"name":"d","downwardAPI":{"defaultMode":256,"items":[
            {"path":"labels","fieldRef":{"fieldPath":"metadata.labels"},"mode":420},
            {"path":"x/name","fieldRef":{"fieldPath":"metadata.name"}},
            {"path":"mem","resourceFieldRef":{"containerName":"c","resource":"limits.memory","divisor":"1Mi"}},
            {"path":"cpu","resourceFieldRef":{"containerName":"c","resource":"limits.cpu","divisor":"1m"}},
            {"path":"x/name","fieldRef":{"fieldPath":"metadata.labels['b']"}}]}}]}}"#,
        )
        .unwrap();
        let Some(d) = &pod.spec.volumes[0].downward_api else { panic!("a downwardAPI volume") };
        let mut out = BTreeMap::new();
        downward_files(
            &pod,
            &d.items,
            d.default_mode,
            Allocatable { cpu_millis: 2000, memory_bytes: 1 << 30 },
            &mut out,
        )
        .unwrap();
        let got: Vec<(&str, &str, u32)> =
            out.values().map(|f| (f.path.as_str(), std::str::from_utf8(&f.data).unwrap(), f.mode)).collect();
        assert_eq!(
            got,
            [
                ("cpu", "2000", 0o400),
                ("labels", "a=\"1\"\nb=\"2\"", 0o644),
                ("mem", "32", 0o400),
                ("x/name", "2", 0o400)
            ]
        );
        assert!(written(&pod.spec.volumes[0]) && any(&pod));
    }
}
