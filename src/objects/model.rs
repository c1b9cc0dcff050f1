//! A local ConfigMap or Secret as atoll holds it: every key's bytes, its identity and origin.
//! `Debug` shows keys and sizes only.

use crate::pod::references::ObjectKind;
use std::collections::BTreeMap;
use std::fmt;

/// The origin of the objects the API source fetched from the API server.
pub const FROM_API: &str = "the API server";

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
