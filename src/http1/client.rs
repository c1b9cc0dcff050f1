//! atoll's blocking HTTP/1.1 client, over rustls: the manifest URL's GETs and the mirror's
//! requests where HTTP/2 is not spoken (an `http://` server, a server that does not offer
//! h2, a proxy: `proxy`). One deadline per request covers resolving aside, connecting, the
//! TLS handshake, sending and reading: every system call on the socket waits at most what is
//! left of it. A connection is kept for the next request when its answer was HTTP/1.1, read
//! to its end with nothing after it, and not `Connection: close`; a kept one is checked
//! before it is used, and an idempotent request (GET, HEAD, PUT, DELETE) whose kept
//! connection turns out closed before any answer is sent once more on a new one. Redirects
//! are the caller's. A URL's `user:pass@` is sent as Basic authorization unless the request
//! has its own.

use super::body::{self, Framing};
pub use super::proxy::Proxy;
pub use super::url::Url;
use std::io::{BufRead, BufReader, ErrorKind, Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// `Basic` credentials of a URL's user info (percent-decoded; `user` alone is `user:`).
fn basic(userinfo: &str) -> String {
    let mut raw = Vec::new();
    let b = userinfo.as_bytes();
    let mut i = 0;
    while let Some(&c) = b.get(i) {
        let hex = |j: usize| b.get(j).and_then(|c| (*c as char).to_digit(16));
        match (c, hex(i + 1), hex(i + 2)) {
            (b'%', Some(h), Some(l)) => {
                raw.push((h * 16 + l) as u8);
                i += 3;
            }
            _ => {
                raw.push(c);
                i += 1;
            }
        }
    }
    if !userinfo.contains(':') {
        raw.push(b':');
    }
    format!("Basic {}", crate::base64::encode(&raw))
}

/// A TCP socket whose every read and write waits at most until `deadline`.
struct Timed {
    tcp: TcpStream,
    deadline: Instant,
}

impl Timed {
    fn left(&self) -> std::io::Result<Duration> {
        let left = self.deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(std::io::Error::new(ErrorKind::TimedOut, "timed out"));
        }
        Ok(left)
    }
}

impl Read for Timed {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        self.tcp.set_read_timeout(Some(self.left()?))?;
        self.tcp.read(buf)
    }
}

impl Write for Timed {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.tcp.set_write_timeout(Some(self.left()?))?;
        self.tcp.write(buf)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.tcp.flush()
    }
}

/// A connection: TCP, maybe TLS over it, every system call under the deadline.
enum Conn {
    Plain(Timed),
    Tls(Box<rustls::StreamOwned<rustls::ClientConnection, Timed>>),
}

impl Conn {
    fn timed(&mut self) -> &mut Timed {
        match self {
            Conn::Plain(t) => t,
            Conn::Tls(s) => &mut s.sock,
        }
    }

    /// Whether a kept connection is still fit for a request: no byte, no end and no TLS
    /// alert has come from the server since its last answer.
    fn quiet(&mut self) -> bool {
        if let Conn::Tls(s) = self {
            if s.conn.process_new_packets().map_or(true, |state| state.plaintext_bytes_to_read() > 0) {
                return false;
            }
        }
        let tcp = &self.timed().tcp;
        if tcp.set_nonblocking(true).is_err() {
            return false;
        }
        let quiet = matches!(tcp.peek(&mut [0u8; 1]), Err(e) if e.kind() == ErrorKind::WouldBlock);
        tcp.set_nonblocking(false).is_ok() && quiet
    }
}

impl Read for Conn {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        match self {
            Conn::Plain(t) => t.read(buf),
            Conn::Tls(s) => s.read(buf),
        }
    }
}

impl Write for Conn {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        match self {
            Conn::Plain(t) => t.write(buf),
            Conn::Tls(s) => s.write(buf),
        }
    }

    fn flush(&mut self) -> std::io::Result<()> {
        match self {
            Conn::Plain(t) => t.flush(),
            Conn::Tls(s) => s.flush(),
        }
    }
}

/// How long a connection is kept idle, and how many.
const IDLE_AGE: Duration = Duration::from_secs(30);
const IDLE_MAX: usize = 4;

/// A client: its TLS configuration, user agent, deadline and kept connections.
pub struct Agent {
    tls: Arc<rustls::ClientConfig>,
    user_agent: String,
    timeout: Duration,
    proxy: Option<Proxy>,
    idle: Mutex<Vec<(String, BufReader<Conn>, Instant)>>,
}

/// A response: its status and head, and its body to read.
pub struct Response<'a> {
    pub status: u16,
    pub head: String,
    framing: Framing,
    /// The connection may serve another request once this body is read.
    keep: bool,
    conn: Option<BufReader<Conn>>,
    key: String,
    agent: &'a Agent,
}

impl Response<'_> {
    /// The value of header `name` (any case).
    pub fn header(&self, name: &str) -> Option<&str> {
        super::header(&self.head, name)
    }

    /// The whole body, at most `limit` bytes (more is an error). The connection is kept.
    pub fn read_to_vec(mut self, limit: u64) -> std::io::Result<Vec<u8>> {
        let conn = self.conn.as_mut().ok_or_else(|| std::io::Error::other("no connection"))?;
        let bytes = body::read_all(conn, &mut self.framing, limit)?;
        if let Some(conn) = self.conn.take().filter(|c| self.keep && self.framing.finished() && c.buffer().is_empty()) {
            let mut idle = crate::locks::lock(&self.agent.idle);
            idle.retain(|(_, _, at)| at.elapsed() < IDLE_AGE);
            if idle.len() < IDLE_MAX {
                idle.push((std::mem::take(&mut self.key), conn, Instant::now()));
            }
        }
        Ok(bytes)
    }
}

impl Read for Response<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        match self.conn.as_mut() {
            Some(conn) => body::read_body(conn, &mut self.framing, buf),
            None => Ok(0),
        }
    }
}

/// Whether a header name is a token (RFC 9110 5.1), so a line of its own.
fn token(name: &str) -> bool {
    !name.is_empty() && name.bytes().all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
}

impl Agent {
    /// A client verifying and presenting what `tls` says, each request given `timeout`, through
    /// the environment's proxy.
    pub fn new(tls: Arc<rustls::ClientConfig>, user_agent: &str, timeout: Duration) -> Agent {
        Agent { tls, user_agent: user_agent.into(), timeout, proxy: Proxy::from_env(), idle: Mutex::new(Vec::new()) }
    }

    /// The same client through `proxy` (none: direct), whatever the environment says.
    pub fn with_proxy(mut self, proxy: Option<Proxy>) -> Agent {
        self.proxy = proxy;
        self
    }

    /// Whether requests go through a proxy (to some hosts, at least).
    pub fn proxied(&self) -> bool {
        self.proxy.is_some()
    }

    /// The request's head: ours, then the caller's headers (a `Host` of theirs replaces ours;
    /// the body's length is ours alone).
    fn head(&self, method: &str, url: &Url, headers: &[(&str, &str)], body: &[u8]) -> Result<String, String> {
        let theirs = |name: &str| headers.iter().any(|(n, _)| n.eq_ignore_ascii_case(name));
        let mut head = format!("{method} {} HTTP/1.1\r\n", url.target);
        if !theirs("host") {
            head.push_str(&format!("Host: {}\r\n", url.host_header()));
        }
        head.push_str(&format!("User-Agent: {}\r\n", self.user_agent));
        if let Some(userinfo) = url.userinfo.as_deref().filter(|_| !theirs("authorization")) {
            head.push_str(&format!("Authorization: {}\r\n", basic(userinfo)));
        }
        for (name, value) in headers {
            let framing = name.eq_ignore_ascii_case("content-length") || name.eq_ignore_ascii_case("transfer-encoding");
            if !token(name) || framing || value.bytes().any(|b| b.is_ascii_control() && b != b'\t') {
                return Err(format!("the header {name:?} cannot be sent"));
            }
            head.push_str(&format!("{name}: {value}\r\n"));
        }
        if !body.is_empty() || matches!(method, "POST" | "PUT" | "PATCH") {
            head.push_str(&format!("Content-Length: {}\r\n", body.len()));
        }
        head.push_str("\r\n");
        Ok(head)
    }

    /// Sends `method url` with `headers` and `body` (a `Content-Length` when there is one),
    /// and reads the response's head; `timeout` replaces the agent's for this request (a
    /// watch's). The error says what failed.
    pub fn call(
        &self,
        method: &str,
        url: &str,
        headers: &[(&str, &str)],
        body: &[u8],
        timeout: Option<Duration>,
    ) -> Result<Response<'_>, String> {
        let url = Url::parse(url)?;
        let now = Instant::now();
        let deadline = now.checked_add(timeout.unwrap_or(self.timeout)).unwrap_or(now + Duration::from_secs(86_400));
        let key = format!("{}://{}", if url.https { "https" } else { "http" }, url.authority());
        let request = self.head(method, &url, headers, body)?;
        let idempotent = matches!(method, "GET" | "HEAD" | "PUT" | "DELETE" | "OPTIONS");
        for attempt in 0..2 {
            let kept = if attempt == 0 { self.take_idle(&key) } else { None };
            let reused = kept.is_some();
            let mut conn = match kept {
                Some(mut c) => {
                    c.get_mut().timed().deadline = deadline;
                    c
                }
                None => BufReader::new(self.connect(&url, deadline)?),
            };
            let sent = conn.get_mut().write_all(request.as_bytes()).and_then(|()| conn.get_mut().write_all(body));
            let answered = sent.and_then(|()| conn.get_mut().flush()).and_then(|()| body::read_head(&mut conn));
            match answered {
                Ok((head, status)) => {
                    let framing = Framing::of(method, status, &head).map_err(|e| e.to_string())?;
                    let keep = head.starts_with("HTTP/1.1 ") && body::reusable(&head);
                    return Ok(Response { status, head, framing, keep, conn: Some(conn), key, agent: self });
                }
                // The server closed the kept connection before it read the request.
                Err(e) if reused && idempotent && closed(&e) => continue,
                Err(e) => return Err(e.to_string()),
            }
        }
        Err("the connection closed".into())
    }

    /// The newest kept connection to `key` that is still quiet.
    fn take_idle(&self, key: &str) -> Option<BufReader<Conn>> {
        let mut idle = crate::locks::lock(&self.idle);
        idle.retain(|(_, _, at)| at.elapsed() < IDLE_AGE);
        while let Some(i) = idle.iter().rposition(|(k, _, _)| k == key) {
            let (_, mut conn, _) = idle.remove(i);
            if conn.get_mut().quiet() {
                return Some(conn);
            }
        }
        None
    }

    /// TCP to the server or the proxy (then `CONNECT`), and TLS for `https`.
    fn connect(&self, url: &Url, deadline: Instant) -> Result<Conn, String> {
        let via = self.proxy.as_ref().filter(|p| p.serves(url.bare_host()));
        let proxy = match via.map(|p| &p.url) {
            Some(Err(why)) => return Err(why.clone()),
            Some(Ok(p)) => Some(p),
            None => None,
        };
        let tcp = dial(proxy.unwrap_or(url), deadline)?;
        let mut timed = Timed { tcp, deadline };
        if let Some(proxy) = proxy {
            let mut ask =
                format!("CONNECT {0} HTTP/1.1\r\nHost: {0}\r\nUser-Agent: {1}\r\n", url.authority(), self.user_agent);
            if let Some(userinfo) = &proxy.userinfo {
                ask.push_str(&format!("Proxy-Authorization: {}\r\n", basic(userinfo)));
            }
            ask.push_str("\r\n");
            timed.write_all(ask.as_bytes()).map_err(|e| format!("the proxy {}: {e}", proxy.authority()))?;
            let mut reader = BufReader::new(timed);
            let (_, status) = body::read_head(&mut reader).map_err(|e| format!("the proxy: {e}"))?;
            if !(200..300).contains(&status) || !reader.buffer().is_empty() {
                return Err(format!("the proxy {} refused CONNECT with {status}", proxy.authority()));
            }
            timed = reader.into_inner();
        }
        if !url.https {
            return Ok(Conn::Plain(timed));
        }
        let name = rustls::pki_types::ServerName::try_from(url.bare_host().to_string())
            .map_err(|e| format!("{}: {e}", url.host))?;
        let tls = rustls::ClientConnection::new(self.tls.clone(), name).map_err(|e| e.to_string())?;
        let mut stream = rustls::StreamOwned::new(tls, timed);
        while stream.conn.is_handshaking() {
            stream.conn.complete_io(&mut stream.sock).map_err(|e| format!("{}: {e}", url.authority()))?;
        }
        Ok(Conn::Tls(Box::new(stream)))
    }
}

/// Whether a failed request's error is the connection's end before any answer.
fn closed(e: &std::io::Error) -> bool {
    use ErrorKind::*;
    matches!(e.kind(), UnexpectedEof | ConnectionReset | ConnectionAborted | BrokenPipe)
}

/// A TCP connection to one of `url`'s addresses, within the deadline. (Resolving has the
/// system resolver's own timeouts.)
fn dial(url: &Url, deadline: Instant) -> Result<TcpStream, String> {
    let addrs = (url.bare_host(), url.port).to_socket_addrs().map_err(|e| format!("resolving {}: {e}", url.host))?;
    let mut last = format!("{}: no address", url.host);
    for addr in addrs {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(format!("connecting to {}: timed out", url.authority()));
        }
        match TcpStream::connect_timeout(&addr, left) {
            Ok(tcp) => {
                let _ = tcp.set_nodelay(true);
                return Ok(tcp);
            }
            Err(e) => last = format!("connecting to {addr}: {e}"),
        }
    }
    Err(last)
}

/// Reads `r` a line at a time (at most `limit` bytes each), giving each line to `each` until
/// it says stop or the body ends.
pub fn lines(r: impl Read, limit: u64, each: &mut dyn FnMut(&[u8]) -> bool) -> std::io::Result<()> {
    let mut reader = BufReader::new(r);
    let mut line = Vec::new();
    loop {
        line.clear();
        let n = reader.by_ref().take(limit).read_until(b'\n', &mut line)?;
        if n == 0 || !each(&line) {
            return Ok(());
        }
    }
}

#[cfg(test)]
#[path = "client_tests.rs"]
mod tests;
