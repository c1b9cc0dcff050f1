//! Why the manifest URL gave no payload this poll, or its header flag cannot be read. Every
//! URL here is already redacted (no credentials, no query values), and every library message
//! scrubbed of them, so `Display` is safe to log: it gives the text the logs and
//! `atoll validate` show.

use std::fmt;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Error {
    /// The request or its body failed (refused, TLS, timed out): the URL and the scrubbed why.
    Transport { url: String, why: String },
    /// An answer other than 200, 304 or a redirect.
    Status { url: String, status: u16 },
    /// A redirect without a Location that can be followed.
    NoLocation { url: String, status: u16 },
    /// A redirect from https to another scheme.
    Downgrade { url: String, to: String },
    /// A body over the limit.
    TooLarge { url: String, limit: u64 },
    /// More redirects than one poll follows.
    Redirects { url: String, max: usize },
    /// A `--manifest-url-header` item that is not `Name:value`.
    HeaderForm(String),
    /// A header name with characters a header name cannot have.
    HeaderName(String),
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Transport { url, why } => write!(f, "{url}: {why}"),
            Error::Status { url, status } => write!(f, "{url}: HTTP {status}"),
            Error::NoLocation { url, status } => write!(f, "{url}: HTTP {status} without a usable Location"),
            Error::Downgrade { url, to } => write!(f, "{url}: refusing a redirect from https to {to}"),
            Error::TooLarge { url, limit } => write!(f, "{url}: body is larger than the {limit} byte limit"),
            Error::Redirects { url, max } => write!(f, "{url}: stopped after {max} redirects"),
            Error::HeaderForm(part) => write!(f, "manifest URL header {part:?} is not Name:value"),
            Error::HeaderName(name) => write!(f, "manifest URL header name {name:?} is not a valid header name"),
        }
    }
}

impl std::error::Error for Error {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_read_as_they_always_have() {
        let url = "https://h/p?<redacted>".to_string();
        assert_eq!(Error::Status { url: url.clone(), status: 404 }.to_string(), "https://h/p?<redacted>: HTTP 404");
        assert_eq!(
            Error::TooLarge { url, limit: 9 }.to_string(),
            "https://h/p?<redacted>: body is larger than the 9 byte limit"
        );
    }
}
