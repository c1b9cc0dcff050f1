//! How a pod uses local objects, as kubelet does, in pure functions: the files of a
//! `configMap`, `secret` or `projected` volume (every key, or the `items` asked for, each with
//! its mode), and the variables of `envFrom` and `configMapKeyRef`/`secretKeyRef`. A missing
//! object or key that is not `optional` is an error in kubelet's words (`configmap "x" not
//! found`, `couldn't find key k in Secret default/x`); values never appear in one.

use super::missing::{Kind, Missing};
use super::model::LocalObject;
use crate::pod::references::ObjectKind;
use crate::pod::refs::{EnvFromSource, KeySelector, KeyToPath};
use crate::pod::types::Volume;
use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

/// Where objects are looked up: the node's store, or the snapshot a container start took.
pub trait Lookup {
    fn object(&self, kind: ObjectKind, namespace: &str, name: &str) -> Option<Arc<LocalObject>>;
}

impl Lookup for super::store::Store {
    fn object(&self, kind: ObjectKind, namespace: &str, name: &str) -> Option<Arc<LocalObject>> {
        self.get(kind, namespace, name)
    }
}

impl Lookup for super::store::ForPod<'_> {
    fn object(&self, kind: ObjectKind, namespace: &str, name: &str) -> Option<Arc<LocalObject>> {
        self.store.scoped(self.api, kind, namespace, name)
    }
}

/// Objects by kind, namespace and name (a snapshot).
pub type Snapshot = BTreeMap<(ObjectKind, String, String), Arc<LocalObject>>;

impl Lookup for Snapshot {
    fn object(&self, kind: ObjectKind, namespace: &str, name: &str) -> Option<Arc<LocalObject>> {
        self.get(&(kind, namespace.to_string(), name.to_string())).cloned()
    }
}

/// One file of a volume: its path below the volume, its bytes and mode.
#[derive(Clone, PartialEq, Eq)]
pub struct File {
    pub path: String,
    pub data: Vec<u8>,
    pub mode: u32,
}

/// Path, size and mode only: the bytes may be a secret.
impl fmt::Debug for File {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "File({}, {} bytes, {:o})", self.path, self.data.len(), self.mode)
    }
}

/// Whether `v` is a volume of local objects.
pub fn is_object_volume(v: &Volume) -> bool {
    v.config_map.is_some() || v.secret.is_some() || v.projected.is_some()
}

/// Whether `v` holds a Secret, so it lives on tmpfs (a projected volume always does, as in kubelet).
pub fn in_memory(v: &Volume) -> bool {
    v.secret.is_some() || v.projected.is_some()
}

/// The files of volume `v` of the pod `uid` in `namespace`, sorted by path (`None`: not an
/// object volume). Modes are the API's (`items[].mode`, else `defaultMode`, else 0644). A
/// service account token projection is the token the API source holds for the pod.
pub fn volume_files(namespace: &str, uid: &str, v: &Volume, lookup: &dyn Lookup) -> Option<Result<Vec<File>, Missing>> {
    let mut files = Vec::new();
    let mut add = |kind, name: &str, items: &[KeyToPath], optional: Option<bool>, mode: Option<i64>| {
        project(kind, namespace, name, items, optional.unwrap_or(false), mode_of(mode), lookup, &mut files)
    };
    let result = if let Some(c) = &v.config_map {
        add(ObjectKind::ConfigMap, &c.name, &c.items, c.optional, c.default_mode)
    } else if let Some(s) = &v.secret {
        add(ObjectKind::Secret, &s.secret_name, &s.items, s.optional, s.default_mode)
    } else if let Some(p) = &v.projected {
        p.sources.iter().enumerate().try_for_each(|(j, src)| {
            if let Some(c) = &src.config_map {
                add(ObjectKind::ConfigMap, &c.name, &c.items, c.optional, p.default_mode)?;
            }
            if let Some(s) = &src.secret {
                add(ObjectKind::Secret, &s.name, &s.items, s.optional, p.default_mode)?;
            }
            if let Some(t) = &src.service_account_token {
                let path = crate::pod::references::token_path(t).to_string();
                let item = [KeyToPath { key: "token".into(), path, mode: None }];
                add(
                    ObjectKind::Secret,
                    &crate::pod::references::token_object(uid, &v.name, j),
                    &item,
                    None,
                    p.default_mode,
                )?;
            }
            Ok(())
        })
    } else {
        return None;
    };
    Some(result.map(|()| {
        files.sort_by(|a, b| a.path.cmp(&b.path));
        files
    }))
}

fn mode_of(mode: Option<i64>) -> u32 {
    mode.and_then(|m| u32::try_from(m).ok()).map_or(0o644, |m| m & 0o777)
}

/// One object's keys as files, appended to `out` (kubelet's MakePayload).
#[allow(clippy::too_many_arguments)]
fn project(
    kind: ObjectKind,
    namespace: &str,
    name: &str,
    items: &[KeyToPath],
    optional: bool,
    default_mode: u32,
    lookup: &dyn Lookup,
    out: &mut Vec<File>,
) -> Result<(), Missing> {
    let Some(o) = lookup.object(kind, namespace, name) else {
        return if optional { Ok(()) } else { Err(not_found(kind, name)) };
    };
    if items.is_empty() {
        for (k, data) in &o.data {
            out.push(File { path: k.clone(), data: data.clone(), mode: default_mode });
        }
        return Ok(());
    }
    for item in items {
        match o.data.get(&item.key) {
            Some(data) => out.push(File {
                path: item.path.clone(),
                data: data.clone(),
                mode: item.mode.map_or(default_mode, |m| mode_of(Some(m))),
            }),
            None if optional => {}
            None => {
                return Err(Kind::VolumeKey { kind, name: name.to_string(), key: item.key.clone() }.into());
            }
        }
    }
    Ok(())
}

/// kubelet's words for an object that is not there.
pub fn not_found(kind: ObjectKind, name: &str) -> Missing {
    Kind::Object { kind, name: name.to_string() }.into()
}

/// The variables of one `envFrom` source, prefixed, in key order (nothing for a missing
/// optional object). Validated keys and prefixes always make valid names; anything else is
/// left out rather than passed to the runtime.
pub fn env_from(namespace: &str, ef: &EnvFromSource, lookup: &dyn Lookup) -> Result<Vec<(String, String)>, Missing> {
    let (kind, r) = match (&ef.config_map_ref, &ef.secret_ref) {
        (Some(r), _) => (ObjectKind::ConfigMap, r),
        (None, Some(r)) => (ObjectKind::Secret, r),
        (None, None) => return Ok(Vec::new()),
    };
    let Some(o) = lookup.object(kind, namespace, &r.name) else {
        return if r.optional.unwrap_or(false) { Ok(Vec::new()) } else { Err(not_found(kind, &r.name)) };
    };
    let prefix = ef.prefix.as_deref().unwrap_or("");
    Ok(o.data
        .iter()
        .map(|(k, v)| (format!("{prefix}{k}"), String::from_utf8_lossy(v).into_owned()))
        .filter(|(name, _)| crate::pod::validate::objects::env_name(name))
        .collect())
}

/// The value of a `configMapKeyRef`/`secretKeyRef`; `Ok(None)` when it is optional and missing
/// (the variable is then not set).
pub fn key_ref(
    namespace: &str,
    kind: ObjectKind,
    sel: &KeySelector,
    lookup: &dyn Lookup,
) -> Result<Option<String>, Missing> {
    let optional = sel.optional.unwrap_or(false);
    let Some(o) = lookup.object(kind, namespace, &sel.name) else {
        return if optional { Ok(None) } else { Err(not_found(kind, &sel.name)) };
    };
    match o.data.get(&sel.key) {
        Some(v) => Ok(Some(String::from_utf8_lossy(v).into_owned())),
        None if optional => Ok(None),
        None => Err(Kind::EnvKey { kind, object: o.key(), key: sel.key.clone() }.into()),
    }
}

/// The objects `pod` references that the box has, for one container start.
pub fn snapshot(pod: &crate::pod::types::Pod, lookup: &dyn Lookup) -> Snapshot {
    let ns = &pod.metadata.namespace;
    crate::pod::references::object_refs(pod)
        .into_iter()
        .filter_map(|r| lookup.object(r.kind, ns, &r.name).map(|o| ((r.kind, ns.clone(), r.name), o)))
        .collect()
}

/// The references of `pod` that `lookup` cannot satisfy and that are not optional, each as
/// (field path, what is missing): what `atoll validate` reports across the files it is given.
pub fn unresolved(pod: &crate::pod::types::Pod, lookup: &dyn Lookup) -> Vec<(String, String)> {
    let ns = &pod.metadata.namespace;
    let mut out = Vec::new();
    for r in crate::pod::references::object_refs(pod).into_iter().filter(|r| !r.optional) {
        match (lookup.object(r.kind, ns, &r.name), &r.key) {
            (None, _) => out.push((r.path, format!("{} {ns}/{} not found", r.kind.as_str(), r.name))),
            (Some(o), Some(key)) if !o.data.contains_key(key) => {
                out.push((r.path, format!("{} {} has no key {key:?}", r.kind.as_str(), o.key())))
            }
            _ => {}
        }
    }
    out
}
