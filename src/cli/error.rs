//! Why a command failed, as `main` prints it after the command's name (`atoll logs: …`).
//! The agent's and the runtime's own words, and kubectl's where atoll says what kubectl says,
//! are kept as text.

use std::fmt;
use std::io;

#[derive(Debug)]
pub enum Error {
    /// The settings did not load.
    Config(crate::config::Error),
    /// The agent's local API socket cannot be reached.
    Unreachable { socket: String, source: io::Error },
    /// The exchange with the agent broke after connecting.
    Exchange { socket: String, reason: String },
    /// The agent (or the runtime behind it) refused: its message.
    Refused(String),
    /// The agent's reply is not JSON.
    Reply(serde_json::Error),
    /// A streaming session (exec, attach, port-forward) broke: `what`, and why.
    Session { what: &'static str, source: io::Error },
    /// The exec error stream said something that is not an exit status.
    Protocol(String),
    /// Reading the agent's answer or writing to the terminal.
    Io(io::Error),
    /// The runtime endpoint given.
    Endpoint(crate::cri::BadEndpoint),
    /// No `ctr` to import with.
    NoCtr(crate::images::import::NoCtr),
    /// `atoll images import FILE` failed.
    Import { file: String, error: Box<crate::images::import::ImportError> },
    /// What the command line asked for cannot be done (kubectl's words where it has them).
    Failed(String),
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Config(e) => e.fmt(f),
            Error::Unreachable { socket, source } => write!(
                f,
                "cannot reach atoll's local API at {socket}: {source} (is `atoll run` running? as root? see --api-socket)"
            ),
            Error::Exchange { socket, reason } => write!(f, "{socket}: {reason}"),
            Error::Refused(s) | Error::Failed(s) => f.write_str(s),
            Error::Reply(e) => write!(f, "the agent's reply: {e}"),
            Error::Session { what, source } => write!(f, "{what}: {source}"),
            Error::Protocol(s) => write!(f, "error stream protocol error: {s}"),
            Error::Io(e) => e.fmt(f),
            Error::Endpoint(e) => e.fmt(f),
            Error::NoCtr(e) => e.fmt(f),
            Error::Import { file, error } => write!(f, "{file}: {error}"),
        }
    }
}

impl std::error::Error for Error {}

impl From<crate::config::Error> for Error {
    fn from(e: crate::config::Error) -> Error {
        Error::Config(e)
    }
}

impl From<io::Error> for Error {
    fn from(e: io::Error) -> Error {
        Error::Io(e)
    }
}

impl From<String> for Error {
    fn from(s: String) -> Error {
        Error::Failed(s)
    }
}
