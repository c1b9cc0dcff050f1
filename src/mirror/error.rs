//! What can go wrong talking to the API server, as the mirror's callers (the mirror's loops,
//! the kubelet server's reviews, `atoll doctor`) get it: a kubeconfig that cannot be used, a
//! credential that cannot be read, a transport that failed, a request that failed (its verb
//! and path), or a protobuf answer that does not parse. `Display` gives the text logs, events
//! and `atoll doctor` show.

use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

/// What went wrong, boxed: every `Result` on the mirror's paths stays a word wide.
#[derive(Debug)]
pub struct Error(Box<Kind>);

#[derive(Debug)]
pub enum Kind {
    /// A kubeconfig that cannot be read or does not say how to connect.
    Kubeconfig { file: String, problem: Problem },
    /// A credential's field in a kubeconfig that cannot be used: given both as a file and
    /// as data (`bad_data` None), or with data that is not base64.
    Credential { file: String, field: &'static str, bad_data: Option<String> },
    /// A file (CA, certificate, key, token) that cannot be read.
    Read { path: PathBuf, why: String },
    /// A connection setting that cannot be used: which (`client-key`, ...) and why.
    Setting { what: &'static str, why: String },
    /// The server's URL cannot be dialled.
    Server { server: String, why: String },
    /// The exchange failed: refused, reset, TLS, a malformed answer.
    Transport(String),
    /// A dial of `addr` that failed.
    Dial { addr: String, why: Error },
    /// No answer within the deadline.
    Timeout(Duration),
    /// An answer or event larger than the limit.
    TooLarge { what: &'static str, limit: usize },
    /// A request that failed: its verb and path, and why.
    Request { method: String, path: String, why: Error },
    /// A success whose body is not a JSON object (a broken or hostile server).
    NotAnObject { method: String, path: String, status: u16 },
    /// A watch that failed (its path), or whose events cannot be read.
    Watch { path: Option<String>, why: Error },
    /// A protobuf message that does not parse.
    Protobuf(Malformed),
}

/// What is wrong with a kubeconfig.
#[derive(Debug)]
pub enum Problem {
    Unreadable(String),
    NoCurrentContext,
    NoContext(String),
    NoCluster {
        cluster: String,
        context: String,
    },
    NoUser {
        user: String,
        context: String,
    },
    NotHttp {
        cluster: String,
        server: String,
    },
    HalfPair {
        user: String,
    },
    /// The client cannot be built from what it says.
    Client(Error),
}

/// What is wrong with a protobuf message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Malformed {
    VarintCut,
    VarintLong,
    FieldNumber,
    Length,
    Overflow,
    WireType(u8),
    PastEnd,
    NoEnvelope,
    Compressed,
}

impl Error {
    pub fn kind(&self) -> &Kind {
        &self.0
    }
}

impl From<Kind> for Error {
    fn from(k: Kind) -> Error {
        Error(Box::new(k))
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

impl fmt::Display for Kind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Kind::Kubeconfig { file, problem } => write!(f, "kubeconfig {file}: {problem}"),
            Kind::Credential { file, field, bad_data: None } => {
                write!(f, "{file}: {field}: give {field} or {field}-data, not both")
            }
            Kind::Credential { file, field, bad_data: Some(why) } => write!(f, "{file}: {field}-data: {why}"),
            Kind::Read { path, why } => write!(f, "{}: {why}", path.display()),
            Kind::Setting { what, why } => write!(f, "{what}: {why}"),
            Kind::Server { server, why } => write!(f, "server {server:?}: {why}"),
            Kind::Transport(why) => f.write_str(why),
            Kind::Dial { addr, why } => write!(f, "{addr}: {why}"),
            Kind::Timeout(d) => write!(f, "no answer within {d:?}"),
            Kind::TooLarge { what, limit } => write!(f, "{what} larger than {limit} bytes"),
            Kind::Request { method, path, why } => write!(f, "{method} {path}: {why}"),
            Kind::NotAnObject { method, path, status } => {
                write!(f, "{method} {path}: HTTP {status} with a body that is not a JSON object")
            }
            Kind::Watch { path: Some(p), why } => write!(f, "watch {p}: {why}"),
            Kind::Watch { path: None, why } => write!(f, "watch: {why}"),
            Kind::Protobuf(m) => m.fmt(f),
        }
    }
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Problem::Unreadable(why) => f.write_str(why),
            Problem::NoCurrentContext => f.write_str("current-context is not set"),
            Problem::NoContext(name) => write!(f, "contexts: no context named {name:?}"),
            Problem::NoCluster { cluster, context } => {
                write!(f, "clusters: no cluster named {cluster:?} (context {context:?})")
            }
            Problem::NoUser { user, context } => write!(f, "users: no user named {user:?} (context {context:?})"),
            Problem::NotHttp { cluster, server } => {
                write!(f, "clusters[{cluster:?}].server: {server:?} is not an http(s) URL")
            }
            Problem::HalfPair { user } => {
                write!(f, "user {user:?}: a client certificate needs its key and the other way round")
            }
            Problem::Client(e) => e.fmt(f),
        }
    }
}

impl fmt::Display for Malformed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("protobuf: ")?;
        f.write_str(match self {
            Malformed::VarintCut => "a varint cut short",
            Malformed::VarintLong => "a varint longer than 10 bytes",
            Malformed::FieldNumber => "a bad field number",
            Malformed::Length => "a bad length",
            Malformed::Overflow => "overflow",
            Malformed::WireType(w) => return write!(f, "wire type {w} is not supported"),
            Malformed::PastEnd => "a field runs past the end of its message",
            Malformed::NoEnvelope => "no k8s envelope",
            Malformed::Compressed => "an encoded (compressed) object",
        })
    }
}

impl std::error::Error for Error {}

impl From<Malformed> for Error {
    fn from(m: Malformed) -> Error {
        Kind::Protobuf(m).into()
    }
}

impl From<h2::Error> for Error {
    fn from(e: h2::Error) -> Error {
        Kind::Transport(e.to_string()).into()
    }
}

/// A failure of one of the mirror's loops: what went wrong, and the wait the server asked for.
impl From<Error> for super::retry::Failure {
    fn from(e: Error) -> Self {
        (e.to_string(), None)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_read_as_they_always_have() {
        let cases: [(Kind, &str); 5] = [
            (
                Kind::Kubeconfig {
                    file: "/k".into(),
                    problem: Problem::NoCluster { cluster: "c".into(), context: "x".into() },
                },
                "kubeconfig /k: clusters: no cluster named \"c\" (context \"x\")",
            ),
            (Kind::Protobuf(Malformed::WireType(7)), "protobuf: wire type 7 is not supported"),
            (
                Kind::Request {
                    method: "GET".into(),
                    path: "/api".into(),
                    why: Kind::Timeout(Duration::from_secs(10)).into(),
                },
                "GET /api: no answer within 10s",
            ),
            (Kind::TooLarge { what: "an answer", limit: 5 }, "an answer larger than 5 bytes"),
            (
                Kind::Credential { file: "/k".into(), field: "client-key", bad_data: Some("not base64".into()) },
                "/k: client-key-data: not base64",
            ),
        ];
        for (e, want) in cases {
            assert_eq!(e.to_string(), want);
        }
    }
}
