//! A response as atoll's HTTP/1.1 client reads it from any blocking reader: the head (at most
//! [`HEAD_LIMIT`] bytes, `1xx` heads skipped) and the body as its framing says: a
//! `Content-Length`, `chunked` (each size line and the trailers bounded), or until the server
//! closes. Whatever the server sends, reading ends in bytes, an end or an error; the callers
//! bound how many bytes they take.

use std::io::{BufRead, Read};

/// The most a response head (status line and headers) may take.
pub const HEAD_LIMIT: usize = 64 << 10;
/// The most a chunk-size line or one trailer line may take.
const LINE_LIMIT: u64 = 4 << 10;

/// How the body ends.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Framing {
    /// This many bytes are left.
    Length(u64),
    /// Chunked: bytes left of the current chunk (0: a size line comes next), or done.
    Chunked { left: u64, done: bool },
    /// Until the server closes.
    Close,
}

impl Framing {
    /// The framing of a response to `method` with `status` and `head` (RFC 9112 6.3): any
    /// `Transfer-Encoding` wins, chunked when it ends so and else until the close; then
    /// `Content-Length`, whose values must be digits and agree; else until the close.
    pub fn of(method: &str, status: u16, head: &str) -> std::io::Result<Framing> {
        if status == 101 {
            return Err(bad("101 Switching Protocols, which nothing asked for".into()));
        }
        if method == "HEAD" || status == 204 || status == 304 || (100..200).contains(&status) {
            return Ok(Framing::Length(0));
        }
        let codings: Vec<&str> = values(head, "transfer-encoding").flat_map(|v| v.split(',')).map(str::trim).collect();
        if let Some(last) = codings.iter().rev().find(|c| !c.is_empty()) {
            let chunked = last.eq_ignore_ascii_case("chunked");
            return Ok(if chunked { Framing::Chunked { left: 0, done: false } } else { Framing::Close });
        }
        let mut length = None;
        for n in values(head, "content-length").flat_map(|v| v.split(',')).map(str::trim) {
            let parsed = n.parse::<u64>().ok().filter(|_| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()));
            match (parsed, length) {
                (None, _) => return Err(bad(format!("Content-Length {n:?}"))),
                (Some(v), Some(was)) if v != was => return Err(bad("Content-Lengths that differ".into())),
                (Some(v), _) => length = Some(v),
            }
        }
        Ok(length.map_or(Framing::Close, Framing::Length))
    }

    /// Whether all of the body has been read.
    pub fn finished(&self) -> bool {
        matches!(self, Framing::Length(0) | Framing::Chunked { done: true, .. })
    }
}

/// The values of every `name` line of `head` (any case; names are read exactly, as
/// `read_head` checked them).
fn values<'a>(head: &'a str, name: &'a str) -> impl Iterator<Item = &'a str> + 'a {
    head.lines().skip(1).filter_map(move |l| {
        let (n, v) = l.split_once(':')?;
        n.eq_ignore_ascii_case(name).then_some(v.trim())
    })
}

/// Whether the connection may carry another request after this answer: no `close` among its
/// `Connection` options, and not both framings (RFC 9112 6.3: a sign of smuggling).
pub fn reusable(head: &str) -> bool {
    let close = values(head, "connection").flat_map(|v| v.split(',')).any(|o| o.trim().eq_ignore_ascii_case("close"));
    let both = values(head, "transfer-encoding").next().is_some() && values(head, "content-length").next().is_some();
    !close && !both
}

fn bad(what: String) -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::InvalidData, format!("malformed response: {what}"))
}

/// One line (through `\n`) of at most `limit` bytes, `\r\n` taken off.
fn line<R: BufRead>(r: &mut R, limit: u64, into: &mut Vec<u8>) -> std::io::Result<()> {
    into.clear();
    r.by_ref().take(limit).read_until(b'\n', into)?;
    if into.is_empty() && limit > 0 {
        return Err(std::io::Error::new(std::io::ErrorKind::UnexpectedEof, "the connection closed"));
    }
    if into.last() != Some(&b'\n') {
        let why = if into.len() as u64 >= limit { "a line too long" } else { "the connection closed in a line" };
        return Err(bad(why.into()));
    }
    into.pop();
    if into.last() == Some(&b'\r') {
        into.pop();
    }
    Ok(())
}

/// The next final response head (a `1xx` one is read past): the head without its blank line,
/// and its status.
pub fn read_head<R: BufRead>(r: &mut R) -> std::io::Result<(String, u16)> {
    loop {
        let mut head = Vec::new();
        let mut l = Vec::new();
        loop {
            let left = (HEAD_LIMIT as u64).saturating_sub(head.len() as u64);
            if left == 0 {
                return Err(bad("a head over 64 KiB".into()));
            }
            let got = line(r, left, &mut l);
            got.map_err(|e| if l.len() as u64 >= left { bad("a head over 64 KiB".into()) } else { e })?;
            if l.is_empty() {
                break;
            }
            let is_header = !head.is_empty();
            let name = l.split(|&b| b == b':').next().unwrap_or_default();
            if is_header && (name.len() == l.len() || name.is_empty() || name.iter().any(|b| b.is_ascii_whitespace())) {
                return Err(bad(format!("the header line {:?}", String::from_utf8_lossy(&l))));
            }
            head.extend_from_slice(&l);
            head.extend_from_slice(b"\r\n");
        }
        let head = String::from_utf8_lossy(&head).into_owned();
        let status = super::status(&head).map_err(|e| bad(e.to_string()))?;
        if !(100..200).contains(&status) || status == 101 {
            return Ok((head, status));
        }
        // A 1xx answer: the final one follows.
    }
}

/// Reads body bytes framed by `framing` into `buf`: how many (0 at the end).
pub fn read_body<R: BufRead>(r: &mut R, framing: &mut Framing, buf: &mut [u8]) -> std::io::Result<usize> {
    match framing {
        // A TLS server may close without close_notify: the end of such a body all the same.
        Framing::Close => match r.read(buf) {
            Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => Ok(0),
            read => read,
        },
        Framing::Length(left) => {
            if *left == 0 || buf.is_empty() {
                return Ok(0);
            }
            let want = buf.len().min(usize::try_from(*left).unwrap_or(usize::MAX));
            let n = r.read(&mut buf[..want])?;
            if n == 0 {
                return Err(bad("the connection closed before the body's end".into()));
            }
            *left = left.saturating_sub(n as u64);
            Ok(n)
        }
        Framing::Chunked { left, done } => {
            if *done || buf.is_empty() {
                return Ok(0);
            }
            let mut l = Vec::new();
            if *left == 0 {
                line(r, LINE_LIMIT, &mut l)?;
                let size = l.split(|&b| b == b';').next().unwrap_or_default();
                let size = std::str::from_utf8(size).unwrap_or("").trim();
                *left = u64::from_str_radix(size, 16)
                    .ok()
                    .filter(|_| !size.is_empty() && size.bytes().all(|b| b.is_ascii_hexdigit()))
                    .ok_or_else(|| bad(format!("chunk size {size:?}")))?;
                if *left == 0 {
                    // Trailers, up to the blank line.
                    for _ in 0..64 {
                        line(r, LINE_LIMIT, &mut l)?;
                        if l.is_empty() {
                            *done = true;
                            return Ok(0);
                        }
                    }
                    return Err(bad("too many trailers".into()));
                }
            }
            let want = buf.len().min(usize::try_from(*left).unwrap_or(usize::MAX));
            let n = r.read(&mut buf[..want])?;
            if n == 0 {
                return Err(bad("the connection closed in a chunk".into()));
            }
            *left = left.saturating_sub(n as u64);
            if *left == 0 {
                line(r, 3, &mut l)?;
                if !l.is_empty() {
                    return Err(bad("no line end after a chunk".into()));
                }
            }
            Ok(n)
        }
    }
}

/// The whole body, at most `limit` bytes: more is an error of kind `FileTooLarge`.
pub fn read_all<R: BufRead>(r: &mut R, framing: &mut Framing, limit: u64) -> std::io::Result<Vec<u8>> {
    let mut out = Vec::new();
    let mut buf = [0u8; 8192];
    loop {
        let n = read_body(r, framing, &mut buf)?;
        if n == 0 {
            return Ok(out);
        }
        if out.len() as u64 + n as u64 > limit {
            let why = format!("the body is over its limit of {limit} bytes");
            return Err(std::io::Error::new(std::io::ErrorKind::FileTooLarge, why));
        }
        out.extend_from_slice(&buf[..n]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn whole(raw: &[u8], method: &str) -> Result<(u16, Vec<u8>, bool), String> {
        let mut r = std::io::Cursor::new(raw);
        let (head, status) = read_head(&mut r).map_err(|e| e.to_string())?;
        let mut framing = Framing::of(method, status, &head).map_err(|e| e.to_string())?;
        let body = read_all(&mut r, &mut framing, 100).map_err(|e| e.to_string())?;
        Ok((status, body, framing.finished()))
    }

    #[test]
    fn bodies_end_where_their_framing_says() {
        type Case = (&'static str, &'static [u8], &'static str, Result<(u16, &'static [u8], bool), &'static str>);
        let cases: &[Case] = &[
            ("length", b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nokEXTRA", "GET", Ok((200, b"ok", true))),
            (
                "chunked",
                b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2;x=y\r\nok\r\n1\r\n!\r\n0\r\nT: 1\r\n\r\n",
                "GET",
                Ok((200, b"ok!", true)),
            ),
            ("to the close", b"HTTP/1.0 200 OK\r\n\r\nall of it", "GET", Ok((200, b"all of it", false))),
            (
                "a 100 first",
                b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 201 Created\r\nContent-Length: 1\r\n\r\nx",
                "POST",
                Ok((201, b"x", true)),
            ),
            ("304: no body", b"HTTP/1.1 304 Not Modified\r\nContent-Length: 9\r\n\r\n", "GET", Ok((304, b"", true))),
            ("HEAD: no body", b"HTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\n", "HEAD", Ok((200, b"", true))),
            ("short", b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nok", "GET", Err("before the body's end")),
            ("a bad length", b"HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n", "GET", Err("Content-Length")),
            (
                "a bad chunk size",
                b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
                "GET",
                Err("chunk size"),
            ),
            (
                "a huge chunk size",
                b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nfffffffffffffffffff\r\n",
                "GET",
                Err("chunk size"),
            ),
            (
                "no CRLF after a chunk",
                b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n1\r\nxy\r\n",
                "GET",
                Err("line"),
            ),
            ("over the limit", b"HTTP/1.1 200 OK\r\nContent-Length: 101\r\n\r\n", "GET", Err("limit")),
            ("not HTTP", b"SSH-2.0-OpenSSH\r\n\r\n", "GET", Err("status line")),
            ("cut in the head", b"HTTP/1.1 200 OK\r\nContent-", "GET", Err("closed in a line")),
            ("closed at once", b"", "GET", Err("connection closed")),
            (
                "two lengths that differ",
                b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\nok",
                "GET",
                Err("differ"),
            ),
            (
                "two lengths that agree",
                b"HTTP/1.1 200 OK\r\nContent-Length: 2, 2\r\n\r\nok",
                "GET",
                Ok((200, b"ok", true)),
            ),
            ("a signed length", b"HTTP/1.1 200 OK\r\nContent-Length: +2\r\n\r\nok", "GET", Err("Content-Length")),
            (
                "a signed chunk size",
                b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n+2\r\nok\r\n0\r\n\r\n",
                "GET",
                Err("chunk size"),
            ),
            (
                "chunked wins over a length",
                b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nok\r\n0\r\n\r\n",
                "GET",
                Ok((200, b"ok", true)),
            ),
            (
                "another coding: to the close",
                b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\nContent-Length: 1\r\n\r\nabc",
                "GET",
                Ok((200, b"abc", false)),
            ),
            (
                "a space before the colon",
                b"HTTP/1.1 200 OK\r\nTransfer-Encoding : chunked\r\n\r\n",
                "GET",
                Err("header line"),
            ),
            ("a folded line", b"HTTP/1.1 200 OK\r\nX: a\r\n b\r\n\r\n", "GET", Err("header line")),
            ("101 unasked", b"HTTP/1.1 101 Switching Protocols\r\n\r\n", "GET", Err("101")),
        ];
        for (what, raw, method, want) in cases {
            let mut raw = raw.to_vec();
            if *what == "over the limit" {
                raw.extend(std::iter::repeat_n(b'x', 101));
            }
            match (whole(&raw, method), want) {
                (Ok((s, b, f)), Ok((ws, wb, wf))) => assert_eq!((s, b.as_slice(), f), (*ws, *wb, *wf), "{what}"),
                (Err(e), Err(w)) => assert!(e.contains(w), "{what}: {e}"),
                (got, _) => panic!("{what}: {got:?}"),
            }
        }
        assert!(reusable("HTTP/1.1 200 OK\r\nConnection: keep-alive\r\n"));
        assert!(!reusable("HTTP/1.1 200 OK\r\nConnection: Keep-Alive, CLOSE\r\n"));
        assert!(!reusable("HTTP/1.1 200 OK\r\nContent-Length: 2\r\nTransfer-Encoding: chunked\r\n"));
        let endless = [&b"HTTP/1.1 200 OK\r\n"[..], &b"X: y\r\n".repeat(20_000)].concat();
        assert!(whole(&endless, "GET").unwrap_err().contains("64 KiB"), "a head without end");
    }
}
