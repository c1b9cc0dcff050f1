//! Local ConfigMaps and Secrets: the objects a static pod's `configMap`, `secret` and
//! `projected` volumes, `configMapKeyRef`/`secretKeyRef` and `envFrom` name, which live on the
//! box instead of in an API server.
//!
//! They come in with the pods: a manifest file may hold one ConfigMap or Secret instead of a
//! Pod, a URL's v1 List may mix them ([`load`] is the intake both sources use). `decode`
//! turns one into a [`LocalObject`] (field paths in every error); `store` is the node's set of
//! them, written by the agent from the sources' snapshots and read by the workers;
//! `resolve` is the pure part of their use (a volume's files, a container's environment).
//!
//! Secret values never leave these types except into a container: [`LocalObject`]'s `Debug`
//! shows keys and sizes only, and nothing here logs. Above `pod`, below the sources and the
//! node.

pub mod decode;
pub mod resolve;
pub mod store;

pub use crate::pod::refs::ObjectKind;
pub use store::Store;

use crate::pod::{self, Finding, ManifestError, Origin, Policy, Shape, StaticPod};
use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

/// The most data one object may hold (the API server's limit for a ConfigMap or Secret).
pub const MAX_OBJECT_BYTES: usize = 1 << 20;

/// A ConfigMap or Secret, decoded: `data` holds every key's bytes (a ConfigMap's `data` and
/// `binaryData`; a Secret's `data` decoded from base64, with `stringData` over it).
#[derive(Clone, PartialEq, Eq)]
pub struct LocalObject {
    pub kind: ObjectKind,
    pub namespace: String,
    pub name: String,
    pub data: BTreeMap<String, Vec<u8>>,
    /// `immutable: true`: its data may not change while it exists.
    pub immutable: bool,
    /// A Secret's `type` (`Opaque` when not given).
    pub secret_type: String,
    /// Where it was read (a file or the URL).
    pub origin: String,
}

impl LocalObject {
    /// `namespace/name`.
    pub fn key(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
    }

    /// The total size of its data.
    pub fn size(&self) -> usize {
        self.data.values().map(Vec::len).sum()
    }
}

/// Keys and sizes only: a Secret's values never reach a log line through `{:?}`.
impl fmt::Debug for LocalObject {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let keys: Vec<String> = self.data.iter().map(|(k, v)| format!("{k} ({} bytes)", v.len())).collect();
        f.debug_struct("LocalObject")
            .field("kind", &self.kind)
            .field("key", &self.key())
            .field("keys", &keys)
            .field("immutable", &self.immutable)
            .field("origin", &self.origin)
            .finish()
    }
}

/// What one payload held: pods, local objects and the warnings about either.
#[derive(Clone, Debug, Default)]
pub struct Manifests {
    pub pods: Vec<StaticPod>,
    pub objects: Vec<Arc<LocalObject>>,
    pub warnings: Vec<Finding>,
}

/// The intake of one file or URL payload: the pods through `pod::load`, the ConfigMaps and
/// Secrets beside them through [`decode`]. A payload is used whole or not at all.
pub fn load(
    bytes: &[u8],
    shape: Shape,
    origin: &Origin,
    node: &str,
    policy: Policy,
) -> Result<Manifests, ManifestError> {
    let loaded = pod::load(bytes, shape, origin, node, policy)?;
    let mut warnings = loaded.warnings;
    let mut objects = Vec::with_capacity(loaded.others.len());
    let mut problems = Vec::new();
    let mut seen = std::collections::BTreeSet::new();
    for (prefix, value) in loaded.others {
        match decode::decode(value, &prefix, &origin.to_string(), &mut warnings) {
            Ok(o) => {
                if !seen.insert((o.kind, o.key())) {
                    let path =
                        if prefix.is_empty() { "metadata.name".to_string() } else { format!("{prefix}.metadata.name") };
                    problems.push(Finding::new(&path, format!("duplicate {} {}", o.kind.as_str(), o.key())));
                }
                objects.push(Arc::new(o));
            }
            Err(mut e) => problems.append(&mut e),
        }
    }
    if policy.strict && !warnings.is_empty() {
        problems.extend(warnings.drain(..).map(|w| Finding { message: format!("{} (--strict)", w.message), ..w }));
    }
    if !problems.is_empty() {
        return Err(ManifestError { origin: origin.to_string(), problems });
    }
    Ok(Manifests { pods: loaded.pods, objects, warnings })
}

#[cfg(test)]
mod tests;
