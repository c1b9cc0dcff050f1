//! What a request to the API server and its answer are, as both transports (`h2.rs`,
//! `http1.rs`) carry them and the client (`apiserver.rs`) reads them.

use std::time::Duration;

/// The deadline of one request (the whole exchange, body included).
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);
/// The largest answer read (a pod list of a busy node stays far below).
pub(super) const MAX_BODY: usize = 16 << 20;
pub(super) const USER_AGENT: &str = concat!("atoll/", env!("CARGO_PKG_VERSION"));

/// One request, as either transport sends it.
pub(super) struct Ask<'a> {
    pub(super) method: &'a str,
    pub(super) path: &'a str,
    pub(super) content_type: &'a str,
    pub(super) accept: &'a str,
    /// `Bearer <token>`.
    pub(super) bearer: Option<String>,
    pub(super) body: &'a [u8],
}

/// An answer as a transport read it.
pub struct Answer {
    pub status: u16,
    pub retry_after: Option<Duration>,
    /// The answer's Content-Type, without parameters.
    pub content_type: String,
    pub body: Vec<u8>,
}

impl Answer {
    /// An answer from its status, its `Retry-After` and `Content-Type` headers and its body.
    pub(super) fn new(status: u16, retry_after: Option<&str>, content_type: Option<&str>, body: Vec<u8>) -> Answer {
        let retry_after = retry_after.and_then(|v| v.trim().parse::<u64>().ok()).map(Duration::from_secs);
        let content_type = content_type.map_or("", |v| v.split(';').next().unwrap_or("").trim()).to_string();
        Answer { status, retry_after, content_type, body }
    }

    /// An answer from an HTTP/2 response's head.
    pub(super) fn of_h2(status: http::StatusCode, headers: &http::HeaderMap, body: Vec<u8>) -> Answer {
        let header = |name: http::header::HeaderName| headers.get(name).and_then(|v| v.to_str().ok());
        Answer::new(status.as_u16(), header(http::header::RETRY_AFTER), header(http::header::CONTENT_TYPE), body)
    }

    pub fn ok(&self) -> bool {
        (200..300).contains(&self.status)
    }

    /// As a Reply: the JSON body, or a protobuf Status read into the fields a JSON one has
    /// (Null when it is neither).
    pub fn reply(&self) -> Reply {
        let body = if self.content_type == super::proto::CONTENT_TYPE {
            super::proto::open(&self.body)
                .ok()
                .filter(|(kind, _)| kind == "Status")
                .and_then(|(_, raw)| super::proto::status(raw).ok())
                .unwrap_or(serde_json::Value::Null)
        } else {
            crate::parse::json(&self.body).unwrap_or(serde_json::Value::Null)
        };
        Reply { status: self.status, body, retry_after: self.retry_after }
    }
}

/// One answer from the API server.
#[derive(Debug)]
pub struct Reply {
    pub status: u16,
    pub body: serde_json::Value,
    /// `Retry-After` in seconds (429 and 503 answers).
    pub retry_after: Option<Duration>,
}

impl Reply {
    pub fn ok(&self) -> bool {
        (200..300).contains(&self.status)
    }

    /// The `reason` of a Status answer (`AlreadyExists`, `Conflict`, `NotFound`, ...).
    pub fn reason(&self) -> &str {
        self.body["reason"].as_str().unwrap_or("")
    }

    /// The status and message of a failed answer, for logs and local reports.
    pub fn describe(&self) -> String {
        match self.body["message"].as_str() {
            Some(m) => format!("HTTP {}: {m}", self.status),
            None => format!("HTTP {}", self.status),
        }
    }
}
