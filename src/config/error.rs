//! What is wrong with the settings, and where: the flag, or the file and the field, as the
//! operator reads it (`flag --sync-frequency: …`, `config field maxPods: …`,
//! `config /etc/atoll/atoll.yaml: imageGCPeriod: …`).

use super::flags::Flag;
use std::fmt;

/// A setting that is wrong, naming the flag or the file and field.
#[derive(Debug)]
pub enum Error {
    /// A flag's value: `flag --NAME: reason`.
    Flag { flag: Flag, reason: String },
    /// A field of the KubeletConfiguration (`--config`): `config field FIELD: reason`.
    Kubelet { field: String, reason: String },
    /// A field of the file `File` names, by its path in it: `FIELD: reason`.
    Field { field: String, reason: String },
    /// Something in the settings file `file`: `config FILE: error`.
    File { file: String, error: Box<Error> },
    /// The file could not be read.
    Read(std::io::Error),
    /// The file is not YAML or JSON (or over the parser's budget).
    Parse(crate::parse::Error),
    /// The file is not of the kind expected (`expected` names the kind and apiVersion).
    Kind { expected: &'static str, kind: String, api_version: String },
    /// The node's name is not a DNS subdomain.
    NodeName { name: String, reason: String },
    /// A message that names its own place (two fields at once, the runtime endpoint, a
    /// registry credential).
    Invalid(String),
}

impl Error {
    pub(super) fn flag(flag: Flag, reason: String) -> Error {
        Error::Flag { flag, reason }
    }

    pub(super) fn kubelet(field: &str, reason: String) -> Error {
        Error::Kubelet { field: field.into(), reason }
    }

    pub(super) fn field(field: &str, reason: String) -> Error {
        Error::Field { field: field.into(), reason }
    }

    /// `field: reason` in the file shown as `file`.
    pub(super) fn in_file(file: &str, field: &str, reason: String) -> Error {
        Error::field(field, reason).within(file)
    }

    /// This error, in the file shown as `file`.
    pub(super) fn within(self, file: &str) -> Error {
        Error::File { file: file.into(), error: Box::new(self) }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Flag { flag, reason } => write!(f, "flag --{}: {reason}", flag.name()),
            Error::Kubelet { field, reason } => write!(f, "config field {field}: {reason}"),
            Error::Field { field, reason } => write!(f, "{field}: {reason}"),
            Error::File { file, error } => write!(f, "config {file}: {error}"),
            Error::Read(e) => e.fmt(f),
            Error::Parse(e) => e.fmt(f),
            Error::Kind { expected, kind, api_version } => {
                write!(f, "expected kind {expected}, found kind {kind:?} of {api_version:?}")
            }
            Error::NodeName { name, reason } => write!(f, "node name {name:?} {reason}"),
            Error::Invalid(s) => f.write_str(s),
        }
    }
}

impl std::error::Error for Error {}
