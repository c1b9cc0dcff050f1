//! gRPC status codes and the typed error every CRI call returns.
//!
//! A call either succeeds or yields a [`Status`]: the gRPC code (from the runtime, or made
//! locally for transport failures and deadlines), the runtime's message, and the RPC it came
//! from. Callers branch on [`Code`], never on message text.

use std::fmt;

/// The canonical gRPC status codes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Code {
    Ok,
    Cancelled,
    Unknown,
    InvalidArgument,
    DeadlineExceeded,
    NotFound,
    AlreadyExists,
    PermissionDenied,
    ResourceExhausted,
    FailedPrecondition,
    Aborted,
    OutOfRange,
    Unimplemented,
    Internal,
    Unavailable,
    DataLoss,
    Unauthenticated,
}

impl Code {
    /// Maps the numeric `grpc-status` value; numbers outside the spec are `Unknown`.
    pub fn from_i32(n: i32) -> Code {
        use Code::*;
        match n {
            0 => Ok,
            1 => Cancelled,
            3 => InvalidArgument,
            4 => DeadlineExceeded,
            5 => NotFound,
            6 => AlreadyExists,
            7 => PermissionDenied,
            8 => ResourceExhausted,
            9 => FailedPrecondition,
            10 => Aborted,
            11 => OutOfRange,
            12 => Unimplemented,
            13 => Internal,
            14 => Unavailable,
            15 => DataLoss,
            16 => Unauthenticated,
            _ => Unknown,
        }
    }

    /// The code a gRPC client reports for a non-200 HTTP status with no `grpc-status`
    /// (gRPC's HTTP-to-gRPC status mapping).
    pub fn from_http(status: u16) -> Code {
        match status {
            400 => Code::Internal,
            401 => Code::Unauthenticated,
            403 => Code::PermissionDenied,
            404 => Code::Unimplemented,
            429 | 502 | 503 | 504 => Code::Unavailable,
            _ => Code::Unknown,
        }
    }
}

impl fmt::Display for Code {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self, f)
    }
}

/// A failed CRI call.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Status {
    pub code: Code,
    pub message: String,
    /// The RPC, e.g. `RunPodSandbox`; empty when the failure is not tied to one call.
    pub method: &'static str,
}

impl Status {
    pub fn new(code: Code, message: impl Into<String>) -> Status {
        Status { code, message: message.into(), method: "" }
    }

    pub(crate) fn in_method(mut self, method: &'static str) -> Status {
        self.method = method;
        self
    }

    pub fn is_not_found(&self) -> bool {
        self.code == Code::NotFound
    }

    /// True for failures that say nothing about the request itself: the runtime is down,
    /// restarting or too slow. Such a call may be tried again later.
    pub fn is_transient(&self) -> bool {
        matches!(self.code, Code::Unavailable | Code::DeadlineExceeded | Code::ResourceExhausted)
    }
}

impl fmt::Display for Status {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if !self.method.is_empty() {
            write!(f, "CRI {}: ", self.method)?;
        }
        write!(f, "{}", self.code)?;
        if !self.message.is_empty() {
            write!(f, ": {}", self.message)?;
        }
        Ok(())
    }
}

impl std::error::Error for Status {}

/// Decodes a `grpc-message` value, which gRPC percent-encodes.
pub(crate) fn decode_grpc_message(raw: &[u8]) -> String {
    let mut out = Vec::with_capacity(raw.len());
    let mut i = 0;
    while i < raw.len() {
        if raw[i] == b'%' && i + 2 < raw.len() {
            let hex = std::str::from_utf8(&raw[i + 1..i + 3]).ok().and_then(|h| u8::from_str_radix(h, 16).ok());
            if let Some(b) = hex {
                out.push(b);
                i += 3;
                continue;
            }
        }
        out.push(raw[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numeric_codes_map_both_ways_and_unknown_numbers_are_unknown() {
        assert_eq!(Code::from_i32(5), Code::NotFound);
        assert_eq!(Code::from_i32(14), Code::Unavailable);
        assert_eq!(Code::from_i32(4), Code::DeadlineExceeded);
        assert_eq!(Code::from_i32(16), Code::Unauthenticated);
        assert_eq!(Code::from_i32(2), Code::Unknown);
        assert_eq!(Code::from_i32(17), Code::Unknown);
        assert_eq!(Code::from_i32(-1), Code::Unknown);
    }

    #[test]
    fn http_statuses_follow_the_grpc_mapping() {
        assert_eq!(Code::from_http(400), Code::Internal);
        assert_eq!(Code::from_http(401), Code::Unauthenticated);
        assert_eq!(Code::from_http(403), Code::PermissionDenied);
        assert_eq!(Code::from_http(404), Code::Unimplemented);
        for s in [429, 502, 503, 504] {
            assert_eq!(Code::from_http(s), Code::Unavailable);
        }
        assert_eq!(Code::from_http(500), Code::Unknown);
    }

    #[test]
    fn grpc_message_is_percent_decoded() {
        assert_eq!(decode_grpc_message(b"no such container %22abc%22"), "no such container \"abc\"");
        assert_eq!(decode_grpc_message(b"caf%C3%A9"), "café");
        // A stray or truncated escape is kept as it is.
        assert_eq!(decode_grpc_message(b"100% sure"), "100% sure");
        assert_eq!(decode_grpc_message(b"end%4"), "end%4");
        assert_eq!(decode_grpc_message(b"end%"), "end%");
    }

    #[test]
    fn display_names_method_code_and_message() {
        let s = Status::new(Code::NotFound, "container \"x\" not found").in_method("ContainerStatus");
        assert_eq!(s.to_string(), "CRI ContainerStatus: NotFound: container \"x\" not found");
        assert!(s.is_not_found());
        assert!(!s.is_transient());
        assert!(Status::new(Code::Unavailable, "").is_transient());
    }
}
