//! What a pod names that the local objects do not have, as kubelet words it: an object that is
//! not there, or a key it does not hold. The runtime shows it in the pod's events and
//! status; callers that collect text take it with `?` or `to_string()`.

use crate::pod::references::ObjectKind;
use std::fmt;

/// What is missing, boxed: the runtime's `Result`s stay a word wide.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Missing(Box<Kind>);

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Kind {
    /// No such ConfigMap or Secret (and the reference is not optional).
    Object { kind: ObjectKind, name: String },
    /// A volume's `items[].key` the object does not hold.
    VolumeKey { kind: ObjectKind, name: String, key: String },
    /// An environment variable's key the object (`namespace/name`) does not hold.
    EnvKey { kind: ObjectKind, object: String, key: String },
}

impl Missing {
    pub fn kind(&self) -> &Kind {
        &self.0
    }
}

impl From<Kind> for Missing {
    fn from(k: Kind) -> Missing {
        Missing(Box::new(k))
    }
}

impl fmt::Display for Missing {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

impl fmt::Display for Kind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Kind::Object { kind, name } => write!(f, "{} {name:?} not found", kind.resource()),
            Kind::VolumeKey { kind, name, key } => {
                let what = if *kind == ObjectKind::Secret { "secret" } else { "config" };
                write!(f, "{} {name:?} references non-existent {what} key: {key}", kind.resource())
            }
            Kind::EnvKey { kind, object, key } => write!(f, "couldn't find key {key} in {} {object}", kind.as_str()),
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
