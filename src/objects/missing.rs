//! What a pod names that the local objects do not have, as kubelet words it: an object that is
//! not there, or a key it does not hold. The runtime shows it in the pod's events and
//! status; callers that collect text take it with `?` or `to_string()`.

use super::ObjectKind;
use std::fmt;

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Missing {
    /// No such ConfigMap or Secret (and the reference is not optional).
    Object { kind: ObjectKind, name: String },
    /// A volume's `items[].key` the object does not hold.
    VolumeKey { kind: ObjectKind, name: String, key: String },
    /// An environment variable's key the object (`namespace/name`) does not hold.
    EnvKey { kind: ObjectKind, object: String, key: String },
}

impl fmt::Display for Missing {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Missing::Object { kind, name } => write!(f, "{} {name:?} not found", kind.resource()),
            Missing::VolumeKey { kind, name, key } => {
                let what = if *kind == ObjectKind::Secret { "secret" } else { "config" };
                write!(f, "{} {name:?} references non-existent {what} key: {key}", kind.resource())
            }
            Missing::EnvKey { kind, object, key } => write!(f, "couldn't find key {key} in {} {object}", kind.as_str()),
        }
    }
}

impl std::error::Error for Missing {}

/// The runtime's steps report text: a `Missing` joins it as its message.
impl From<Missing> for String {
    fn from(m: Missing) -> String {
        m.to_string()
    }
}
