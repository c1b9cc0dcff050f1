//! What can go wrong talking to the API server, as the mirror's callers (the mirror's loops,
//! the kubelet server's reviews, `atoll doctor`) get it: a kubeconfig that cannot be used, a
//! credential that cannot be read, a transport that failed, a request that failed (its verb
//! and path), or a protobuf answer that does not parse. `Display` gives the text logs, events
//! and `atoll doctor` show.

use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

#[derive(Debug)]
pub enum Error {
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
    Dial { addr: String, why: Box<Error> },
    /// No answer within the deadline.
    Timeout(Duration),
    /// An answer or event larger than the limit.
    TooLarge { what: &'static str, limit: usize },
    /// A request that failed: its verb and path, and why.
    Request { method: String, path: String, why: Box<Error> },
    /// A success whose body is not a JSON object (a broken or hostile server).
    NotAnObject { method: String, path: String, status: u16 },
    /// A watch that failed (its path), or whose events cannot be read.
    Watch { path: Option<String>, why: Box<Error> },
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
    Client(Box<Error>),
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

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Kubeconfig { file, problem } => write!(f, "kubeconfig {file}: {problem}"),
            Error::Credential { file, field, bad_data: None } => {
                write!(f, "{file}: {field}: give {field} or {field}-data, not both")
            }
            Error::Credential { file, field, bad_data: Some(why) } => write!(f, "{file}: {field}-data: {why}"),
            Error::Read { path, why } => write!(f, "{}: {why}", path.display()),
            Error::Setting { what, why } => write!(f, "{what}: {why}"),
            Error::Server { server, why } => write!(f, "server {server:?}: {why}"),
            Error::Transport(why) => f.write_str(why),
            Error::Dial { addr, why } => write!(f, "{addr}: {why}"),
            Error::Timeout(d) => write!(f, "no answer within {d:?}"),
            Error::TooLarge { what, limit } => write!(f, "{what} larger than {limit} bytes"),
            Error::Request { method, path, why } => write!(f, "{method} {path}: {why}"),
            Error::NotAnObject { method, path, status } => {
                write!(f, "{method} {path}: HTTP {status} with a body that is not a JSON object")
            }
            Error::Watch { path: Some(p), why } => write!(f, "watch {p}: {why}"),
            Error::Watch { path: None, why } => write!(f, "watch: {why}"),
            Error::Protobuf(m) => m.fmt(f),
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
        Error::Protobuf(m)
    }
}

impl From<h2::Error> for Error {
    fn from(e: h2::Error) -> Error {
        Error::Transport(e.to_string())
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
        let cases: [(Error, &str); 5] = [
            (
                Error::Kubeconfig {
                    file: "/k".into(),
                    problem: Problem::NoCluster { cluster: "c".into(), context: "x".into() },
                },
                "kubeconfig /k: clusters: no cluster named \"c\" (context \"x\")",
            ),
            (Malformed::WireType(7).into(), "protobuf: wire type 7 is not supported"),
            (
                Error::Request {
                    method: "GET".into(),
                    path: "/api".into(),
                    why: Box::new(Error::Timeout(Duration::from_secs(10))),
                },
                "GET /api: no answer within 10s",
            ),
            (Error::TooLarge { what: "an answer", limit: 5 }, "an answer larger than 5 bytes"),
            (
                Error::Credential { file: "/k".into(), field: "client-key", bad_data: Some("not base64".into()) },
                "/k: client-key-data: not base64",
            ),
        ];
        for (e, want) in cases {
            assert_eq!(e.to_string(), want);
        }
    }
}
