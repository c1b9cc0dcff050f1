//! What can go wrong for the kubelet server before or while it serves, as its callers (the
//! agent, `atoll doctor`) log or show it: a configured TLS file that cannot be used, the
//! self-signed certificate that cannot be made or kept, and a review the API server could not
//! answer. `Display` gives the text logs and `atoll doctor` show.

use std::fmt;
use std::path::PathBuf;

/// What went wrong, boxed: the server's `Result`s (and the futures holding them) stay a word
/// wide.
#[derive(Debug)]
pub struct Error(Box<Kind>);

#[derive(Debug)]
pub enum Kind {
    /// A configured file that cannot be used: its config field, the file, and why.
    Config { field: &'static str, path: PathBuf, why: String },
    /// Neither a configured certificate nor a made one.
    NoCertificate,
    /// rustls refused the settings.
    Tls(String),
    /// The self-signed certificate cannot be made (no key, no randomness).
    Make(&'static str),
    /// A name for the certificate that is neither an IP address nor a DNS name.
    BadName(String),
    /// The made certificate cannot be written where it is kept.
    Keep { dir: PathBuf, why: String },
    /// No kubeconfig: no API server to ask.
    NoApiServer,
    /// The API server could not be asked.
    ApiServer(crate::mirror::Error),
    /// The API server answered a review with a failure (`describe`: its status and message).
    Refused { path: &'static str, describe: String },
    /// A review's reply that cannot be read: which review, and why.
    Reply { review: &'static str, why: String },
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
            Kind::Config { field, path, why } => write!(f, "config field {field}: {}: {why}", path.display()),
            Kind::NoCertificate => f.write_str("the kubelet server has no certificate"),
            Kind::Tls(why) => f.write_str(why),
            Kind::Make(what) => f.write_str(what),
            Kind::BadName(n) => write!(f, "{n:?} is neither an IP address nor a DNS name"),
            Kind::Keep { dir, why } => write!(f, "{}: {why}", dir.display()),
            Kind::NoApiServer => f.write_str("no API server (no kubeconfig)"),
            Kind::ApiServer(e) => e.fmt(f),
            Kind::Refused { path, describe } => write!(f, "POST {path}: {describe}"),
            Kind::Reply { review, why } => write!(f, "{review} reply: {why}"),
        }
    }
}

impl std::error::Error for Error {}

impl From<crate::mirror::Error> for Error {
    fn from(e: crate::mirror::Error) -> Error {
        Kind::ApiServer(e).into()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_read_as_they_always_have() {
        let cases = [
            (
                Kind::Config { field: "tlsCertFile", path: "/c.pem".into(), why: "no PEM certificate".into() },
                "config field tlsCertFile: /c.pem: no PEM certificate",
            ),
            (Kind::BadName("a b".into()), "\"a b\" is neither an IP address nor a DNS name"),
            (Kind::Refused { path: "/x", describe: "HTTP 403".into() }, "POST /x: HTTP 403"),
            (Kind::Reply { review: "TokenReview", why: "EOF".into() }, "TokenReview reply: EOF"),
        ];
        for (e, want) in cases {
            assert_eq!(e.to_string(), want);
        }
    }
}
