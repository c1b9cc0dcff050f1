//! A small HTTP/1.1 server for the local API: one request per connection, `Connection: close`,
//! request bodies ignored, responses with a Content-Length or, when streaming (`logs -f`),
//! ended by closing the connection. It runs on smol's reactor like everything else.

use smol::io::{AsyncRead, AsyncWrite, AsyncWriteExt};
use std::collections::BTreeMap;

const HEAD_LIMIT: usize = 16 * 1024;
/// How long a client may take to accept a write before its connection is closed.
pub const WRITE_DEADLINE: std::time::Duration = std::time::Duration::from_secs(10);

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Request {
    pub method: String,
    /// The path, percent-decoded.
    pub path: String,
    pub query: BTreeMap<String, String>,
}

/// A complete response.
#[derive(Debug)]
pub struct Response {
    pub status: u16,
    pub content_type: &'static str,
    pub body: Vec<u8>,
}

impl Response {
    pub fn json(status: u16, value: &impl serde::Serialize) -> Response {
        let mut body = serde_json::to_vec_pretty(value).unwrap_or_default();
        body.push(b'\n');
        Response { status, content_type: "application/json", body }
    }

    pub fn text(status: u16, text: impl Into<String>) -> Response {
        Response { status, content_type: "text/plain; charset=utf-8", body: text.into().into_bytes() }
    }

    /// A Kubernetes-style Status object for errors.
    pub fn error(status: u16, reason: &str, message: impl Into<String>) -> Response {
        let message = message.into();
        Response::json(
            status,
            &serde_json::json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": reason, "message": message, "code": status}),
        )
    }
}

fn reason_phrase(status: u16) -> &'static str {
    match status {
        200 => "OK",
        400 => "Bad Request",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "Not Found",
        405 => "Method Not Allowed",
        422 => "Unprocessable Entity",
        500 => "Internal Server Error",
        501 => "Not Implemented",
        502 => "Bad Gateway",
        503 => "Service Unavailable",
        _ => "",
    }
}

fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'%' => match (bytes.get(i + 1).and_then(hex), bytes.get(i + 2).and_then(hex)) {
                (Some(hi), Some(lo)) => {
                    out.push(hi << 4 | lo);
                    i += 3;
                    continue;
                }
                _ => out.push(b'%'),
            },
            b'+' => out.push(b' '),
            b => out.push(b),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The value of one hex digit (only `0-9a-fA-F`: `u8::from_str_radix` would also take a `+`).
fn hex(c: &u8) -> Option<u8> {
    (*c as char).to_digit(16).map(|d| d as u8)
}

/// Every value of query parameter `key` in a request head, in order (`command=sh&command=-c`).
pub fn query_all(head: &str, key: &str) -> Vec<String> {
    let target = head.lines().next().unwrap_or_default().split(' ').nth(1).unwrap_or_default();
    let query = target.split_once('?').map_or("", |(_, q)| q);
    query
        .split('&')
        .filter_map(|kv| kv.split_once('=').or(Some((kv, ""))))
        .filter(|(k, _)| percent_decode(k) == key)
        .map(|(_, v)| percent_decode(v))
        .collect()
}

/// Parses a request head (`GET /path?x=1 HTTP/1.1` and headers).
pub fn parse_head(head: &str) -> Result<Request, String> {
    let line = head.lines().next().unwrap_or_default();
    let mut parts = line.split(' ');
    let (method, target, version) = (parts.next(), parts.next(), parts.next());
    let (Some(method), Some(target), Some(version)) = (method, target, version) else {
        return Err(format!("malformed request line {line:?}"));
    };
    if !version.starts_with("HTTP/1.") {
        return Err(format!("unsupported protocol {version:?}"));
    }
    let (path, query) = target.split_once('?').unwrap_or((target, ""));
    let query = query
        .split('&')
        .filter(|kv| !kv.is_empty())
        .map(|kv| {
            let (k, v) = kv.split_once('=').unwrap_or((kv, "true"));
            (percent_decode(k), percent_decode(v))
        })
        .collect();
    Ok(Request { method: method.to_string(), path: percent_decode(path), query })
}

/// Reads the request head from a connection (its body, if any, is not read): parsed, and as
/// it came (an upgrade forwards some of its headers).
pub async fn read_request<S: AsyncRead + Unpin>(s: &mut S) -> Result<(Request, String), String> {
    let (head, _) = crate::http1::read_head(s, HEAD_LIMIT).await?;
    Ok((parse_head(&head)?, head))
}

/// Writes a complete response.
pub async fn write_response<S: AsyncWrite + Unpin>(s: &mut S, r: &Response) -> std::io::Result<()> {
    let head = format!(
        "HTTP/1.1 {} {}\r\nContent-Type: {}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        r.status,
        reason_phrase(r.status),
        r.content_type,
        r.body.len()
    );
    s.write_all(head.as_bytes()).await?;
    s.write_all(&r.body).await?;
    s.flush().await
}

/// Writes a whole response, unless the client will not take it within [`WRITE_DEADLINE`].
pub async fn respond<W: AsyncWrite + Unpin>(w: &mut W, r: &Response) {
    let _ = crate::deadline::with_deadline(WRITE_DEADLINE, write_response(w, r)).await;
}

/// Starts a streamed response; the body ends when the connection closes.
pub async fn start_stream<S: AsyncWrite + Unpin>(s: &mut S, content_type: &str) -> std::io::Result<()> {
    let head = format!("HTTP/1.1 200 OK\r\nContent-Type: {content_type}\r\nConnection: close\r\n\r\n");
    s.write_all(head.as_bytes()).await?;
    s.flush().await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_heads_parse_with_decoded_paths_and_queries() {
        let r = parse_head("GET /logs/default/web%2D1/c?follow&tail=10&x=a%20b HTTP/1.1\r\nHost: x").unwrap();
        assert_eq!(r.method, "GET");
        assert_eq!(r.path, "/logs/default/web-1/c");
        assert_eq!(r.query.get("follow").map(String::as_str), Some("true"));
        assert_eq!(r.query.get("tail").map(String::as_str), Some("10"));
        assert_eq!(r.query.get("x").map(String::as_str), Some("a b"));
        assert!(parse_head("GET /").is_err());
        assert!(parse_head("GET / SPDY/3").is_err());
        assert_eq!(percent_decode("100%"), "100%");
        assert_eq!(percent_decode("%zz"), "%zz");
    }

    #[test]
    fn only_two_hex_digits_make_an_escape() {
        // Seen while writing fuzz/fuzz_targets/http_head.rs (its reference decoder disagreed):
        // `%+1` decoded to byte 1, as from_str_radix takes a leading `+` (a `+` is a space).
        for (raw, decoded) in
            [("%+1", "% 1"), ("%+f", "% f"), ("%-1", "%-1"), ("%2F", "/"), ("%2f%41", "/A"), ("%é", "%é"), ("%4", "%4")]
        {
            assert_eq!(percent_decode(raw), decoded, "{raw}");
        }
    }
}
