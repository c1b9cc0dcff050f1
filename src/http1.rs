//! The bits of HTTP/1.1 atoll speaks itself (the local API's server, the probes' and hooks'
//! GET, the CLI's requests to the local API): reading a message head up to a limit, parsing a
//! status line, finding a header; one async reading of a head, for requests and responses
//! alike. `client` is the blocking client of the manifest URL and the mirror, `body` its
//! reader of responses (line by line, each header line checked, the body as its framing
//! says), `proxy` the environment's proxy, `url` a URL taken apart.

use smol::io::{AsyncRead, AsyncReadExt};

pub mod body;
pub mod client;
pub mod proxy;
pub mod url;

/// Why no message head was read.
#[derive(Debug)]
pub enum Error {
    /// Over the limit without its end.
    TooLarge,
    /// The peer closed the connection first.
    Closed,
    Io(std::io::Error),
}

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Error::TooLarge => f.write_str("message head too large"),
            Error::Closed => f.write_str("connection closed before a complete message head"),
            Error::Io(e) => e.fmt(f),
        }
    }
}

impl std::error::Error for Error {}

/// A first line that is not `HTTP/1.x CODE …` (the line as it came).
#[derive(Debug, PartialEq, Eq)]
pub struct BadStatusLine(pub String);

impl std::fmt::Display for BadStatusLine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "malformed HTTP status line {:?}", self.0)
    }
}

impl std::error::Error for BadStatusLine {}

/// For the rooms whose errors are still text.
impl From<Error> for String {
    fn from(e: Error) -> String {
        e.to_string()
    }
}

/// For the rooms whose errors are still text.
impl From<BadStatusLine> for String {
    fn from(e: BadStatusLine) -> String {
        e.to_string()
    }
}

/// Reads until the end of a message head (`\r\n\r\n`), at most `limit` bytes of it. Returns
/// the head (without the blank line) and whatever of the body came with it.
pub async fn read_head<S: AsyncRead + Unpin>(s: &mut S, limit: usize) -> Result<(String, Vec<u8>), Error> {
    let mut buf = Vec::with_capacity(1024);
    let mut chunk = [0u8; 2048];
    loop {
        if let Some(end) = head_end(&buf) {
            let head = String::from_utf8_lossy(&buf[..end]).into_owned();
            return Ok((head, buf[end + 4..].to_vec()));
        }
        if buf.len() > limit {
            return Err(Error::TooLarge);
        }
        let n = s.read(&mut chunk).await.map_err(Error::Io)?;
        if n == 0 {
            return Err(Error::Closed);
        }
        buf.extend_from_slice(&chunk[..n]);
    }
}

/// Where the head in `buf` ends (the index of its `\r\n\r\n`), if it has.
pub fn head_end(buf: &[u8]) -> Option<usize> {
    buf.windows(4).position(|w| w == b"\r\n\r\n")
}

/// The status code of a response head's first line (`HTTP/1.1 200 OK`).
pub fn status(head: &str) -> Result<u16, BadStatusLine> {
    let line = head.lines().next().unwrap_or_default();
    let mut parts = line.splitn(3, ' ');
    let version = parts.next().unwrap_or_default();
    parts
        .next()
        .and_then(|c| c.parse().ok())
        .filter(|_| version.starts_with("HTTP/1."))
        .ok_or_else(|| BadStatusLine(line.to_string()))
}

/// The value of header `name` (any case), trimmed.
pub fn header<'a>(head: &'a str, name: &str) -> Option<&'a str> {
    head.lines()
        .skip(1)
        .filter_map(|l| l.split_once(':'))
        .find(|(n, _)| n.trim().eq_ignore_ascii_case(name))
        .map(|(_, v)| v.trim())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn heads_statuses_and_headers_read_as_written() {
        let raw = b"HTTP/1.1 302 Found\r\nLocation: /next\r\ncontent-length: 2\r\n\r\nok";
        let (head, rest) = smol::block_on(read_head(&mut &raw[..], 1024)).unwrap();
        assert_eq!((status(&head), header(&head, "location"), rest.as_slice()), (Ok(302), Some("/next"), &b"ok"[..]));
        assert_eq!(header(&head, "Content-Length"), Some("2"));
        assert!(status("SPDY/3 200 OK").is_err());
        let long = vec![b'x'; 5000];
        assert_eq!(smol::block_on(read_head(&mut &long[..], 1024)).unwrap_err().to_string(), "message head too large");
        assert!(smol::block_on(read_head(&mut &b"HTTP/1.1 200 OK\r\n"[..], 1024)).is_err());
        // A blocking reader (the CLI's socket) is read the same way.
        let mut blocking = smol::io::AssertAsync::new(std::io::Cursor::new(raw.to_vec()));
        let (head, rest) = smol::block_on(read_head(&mut blocking, 1024)).unwrap();
        assert_eq!((status(&head), rest.as_slice()), (Ok(302), &b"ok"[..]));
    }
}
