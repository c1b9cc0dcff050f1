//! What is wrong with the settings, and where: the flag, or the file and the field, as the
//! operator reads it (`flag --sync-frequency: …`, `config field maxPods: …`,
//! `config /etc/atoll/atoll.yaml: imageGCPeriod: …`).

use super::flags::Flag;
use std::fmt;

/// A setting that is wrong: [`Problem`] says what and where. Boxed, so that the `?` after
/// each of the field walker's reads moves a pointer (with the enum inline, every read's
/// result was three times larger: 4 KB more aarch64 code).
#[derive(Debug)]
pub struct Error(Box<Problem>);

/// What is wrong, naming the flag or the file and field.
#[derive(Debug)]
pub enum Problem {
    /// A flag's value: `flag --NAME: reason`.
    Flag { flag: Flag, reason: String },
    /// A field of the KubeletConfiguration (`--config`): `config field FIELD: reason`.
    Kubelet { field: String, reason: String },
    /// A field of the file `File` names, by its path in it: `FIELD: reason`.
    Field { field: String, reason: String },
    /// Something in the settings file `file`: `config FILE: error`.
    File { file: String, error: Error },
    /// The file could not be read.
    Read(std::io::Error),
    /// The file is not YAML or JSON (or over the parser's budget).
    Parse(crate::parse::Error),
    /// The file is not of the kind expected (`expected` names the kind and apiVersion).
    Kind { expected: &'static str, kind: String, api_version: String },
    /// The node's name is not a DNS subdomain.
    NodeName { name: String, reason: String },
    /// The runtime endpoint (flag or field) is not one atoll can use.
    Endpoint(crate::cri::BadEndpoint),
    /// A message that names its own place (two fields at once, a registry credential).
    Invalid(String),
}

impl Error {
    /// What is wrong, and where.
    pub fn problem(&self) -> &Problem {
        &self.0
    }

    pub(super) fn flag(flag: Flag, reason: String) -> Error {
        Problem::Flag { flag, reason }.into()
    }

    pub(super) fn kubelet(field: &str, reason: String) -> Error {
        Problem::Kubelet { field: field.into(), reason }.into()
    }

    pub(super) fn field(field: &str, reason: String) -> Error {
        Problem::Field { field: field.into(), reason }.into()
    }

    pub(super) fn invalid(message: String) -> Error {
        Problem::Invalid(message).into()
    }

    /// `field: reason` in the file shown as `file`.
    pub(super) fn in_file(file: &str, field: &str, reason: String) -> Error {
        Error::field(field, reason).within(file)
    }

    /// This error, in the file shown as `file`.
    pub(super) fn within(self, file: &str) -> Error {
        Problem::File { file: file.into(), error: self }.into()
    }
}

impl From<Problem> for Error {
    fn from(p: Problem) -> Error {
        Error(Box::new(p))
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &*self.0 {
            Problem::Flag { flag, reason } => write!(f, "flag --{}: {reason}", flag.name()),
            Problem::Kubelet { field, reason } => write!(f, "config field {field}: {reason}"),
            Problem::Field { field, reason } => write!(f, "{field}: {reason}"),
            Problem::File { file, error } => write!(f, "config {file}: {error}"),
            Problem::Read(e) => e.fmt(f),
            Problem::Parse(e) => e.fmt(f),
            Problem::Kind { expected, kind, api_version } => {
                write!(f, "expected kind {expected}, found kind {kind:?} of {api_version:?}")
            }
            Problem::NodeName { name, reason } => write!(f, "node name {name:?} {reason}"),
            Problem::Endpoint(e) => e.fmt(f),
            Problem::Invalid(s) => f.write_str(s),
        }
    }
}

impl std::error::Error for Error {}
