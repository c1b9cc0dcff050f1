//! atoll's blocking HTTP/1.1 client, over rustls: the manifest URL's GETs and the mirror's
//! requests where HTTP/2 is not spoken (an `http://` server, a server that does not offer
//! h2, a proxy). One deadline per request covers connecting, sending and reading (each
//! socket operation waits at most what is left of it). Connections are kept between
//! requests for a while when a response was read to its end; a kept connection the server
//! has since closed is replaced once. Redirects are the caller's. A proxy from the
//! environment (`ALL_PROXY`, `HTTPS_PROXY`, `HTTP_PROXY`, lower case too, the first set; an
//! `http://` proxy, with `user:pass@` sent as Basic) is asked to `CONNECT` to the server,
//! unless `NO_PROXY` names it (`*`, a host, or `.domain` and `*.domain` for the hosts under
//! it). A URL's `user:pass@` is sent as Basic authorization unless the request has its own.

use super::body::{self, Framing};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// A URL taken apart.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Url {
    pub https: bool,
    /// As in the URL (an IPv6 address in brackets).
    pub host: String,
    pub port: u16,
    /// Path and query (`/` when empty), without the fragment.
    pub target: String,
    pub userinfo: Option<String>,
}

impl Url {
    pub fn parse(url: &str) -> Result<Url, String> {
        if url.bytes().any(|b| b.is_ascii_whitespace() || b.is_ascii_control()) {
            return Err("a space or a control character in the URL".into());
        }
        let (scheme, rest) = url.split_once("://").ok_or("no scheme")?;
        let https = match scheme.to_ascii_lowercase().as_str() {
            "https" => true,
            "http" => false,
            _ => return Err(format!("the scheme {scheme:?} is not http or https")),
        };
        let rest = rest.split('#').next().unwrap_or_default();
        let end = rest.find(['/', '?']).unwrap_or(rest.len());
        let (authority, target) = rest.split_at_checked(end).ok_or("a URL that does not split")?;
        let (userinfo, hostport) = match authority.rsplit_once('@') {
            Some((u, h)) => (Some(u.to_string()), h),
            None => (None, authority),
        };
        let (host, port) = match hostport.rsplit_once(':').filter(|(h, p)| !p.contains(']') && !h.is_empty()) {
            Some((h, p)) => (h, p.parse().map_err(|_| format!("the port {p:?}"))?),
            None => (hostport, if https { 443 } else { 80 }),
        };
        if host.is_empty() {
            return Err("no host".into());
        }
        let target = if target.starts_with('/') { target.to_string() } else { format!("/{target}") };
        Ok(Url { https, host: host.to_string(), port, target, userinfo })
    }

    /// `host:port`, the `Host` header's and `CONNECT`'s authority.
    pub fn authority(&self) -> String {
        format!("{}:{}", self.host, self.port)
    }

    /// The host without IPv6 brackets: what is resolved and what TLS names.
    fn bare_host(&self) -> &str {
        self.host.strip_prefix('[').and_then(|h| h.strip_suffix(']')).unwrap_or(&self.host)
    }
}

/// The proxy from the environment and the hosts it is not for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Proxy {
    pub url: Url,
    pub no_proxy: Vec<String>,
}

impl Proxy {
    /// The proxy the environment names.
    pub fn from_env() -> Option<Proxy> {
        Proxy::from_vars(&|k| std::env::var(k).ok())
    }

    /// The first proxy variable set to an `http://` proxy (a bare `host:port` is one), read
    /// through `get`.
    pub fn from_vars(get: &dyn Fn(&str) -> Option<String>) -> Option<Proxy> {
        let var = |k: &str| get(k).filter(|v| !v.trim().is_empty());
        let names = ["ALL_PROXY", "all_proxy", "HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy"];
        let url = names.iter().filter_map(|k| var(k)).find_map(|v| {
            let v = if v.contains("://") { v } else { format!("http://{v}") };
            Url::parse(&v).ok().filter(|u| !u.https && v.to_ascii_lowercase().starts_with("http://"))
        })?;
        let no_proxy = var("NO_PROXY").or_else(|| var("no_proxy")).unwrap_or_default();
        let no_proxy = no_proxy.split(',').map(|e| e.trim().to_ascii_lowercase()).filter(|e| !e.is_empty()).collect();
        Some(Proxy { url, no_proxy })
    }

    /// Whether `host` goes through the proxy.
    pub fn serves(&self, host: &str) -> bool {
        let host = host.to_ascii_lowercase();
        !self.no_proxy.iter().any(|e| {
            let suffix = e.strip_prefix('*').unwrap_or(e);
            e == "*" || (suffix.starts_with('.') && host.ends_with(suffix)) || *e == host
        })
    }
}

/// A connection: TCP, maybe TLS over it.
enum Stream {
    Plain(TcpStream),
    Tls(Box<rustls::StreamOwned<rustls::ClientConnection, TcpStream>>),
}

impl Stream {
    fn tcp(&self) -> &TcpStream {
        match self {
            Stream::Plain(t) => t,
            Stream::Tls(t) => &t.sock,
        }
    }
}

/// A connection whose every read and write waits at most until `deadline`.
struct Conn {
    stream: Stream,
    deadline: Instant,
}

impl Conn {
    fn left(&self) -> std::io::Result<Duration> {
        let left = self.deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(std::io::Error::new(std::io::ErrorKind::TimedOut, "timed out"));
        }
        Ok(left)
    }
}

impl Read for Conn {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let left = self.left()?;
        self.stream.tcp().set_read_timeout(Some(left))?;
        match &mut self.stream {
            Stream::Plain(t) => t.read(buf),
            Stream::Tls(t) => t.read(buf),
        }
    }
}

impl Write for Conn {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let left = self.left()?;
        self.stream.tcp().set_write_timeout(Some(left))?;
        match &mut self.stream {
            Stream::Plain(t) => t.write(buf),
            Stream::Tls(t) => t.write(buf),
        }
    }

    fn flush(&mut self) -> std::io::Result<()> {
        match &mut self.stream {
            Stream::Plain(t) => t.flush(),
            Stream::Tls(t) => t.flush(),
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
        if let Some(conn) = self.conn.take().filter(|c| self.framing.finished() && c.buffer().is_empty()) {
            let mut idle = crate::locks::lock(&self.agent.idle);
            idle.retain(|(_, _, at)| at.elapsed() < IDLE_AGE);
            let close = super::header(&self.head, "connection").is_some_and(|c| c.eq_ignore_ascii_case("close"));
            if idle.len() < IDLE_MAX && !close && self.head.starts_with("HTTP/1.1 ") {
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

impl Agent {
    /// A client verifying and presenting what `tls` says, each request given `timeout`.
    pub fn new(tls: Arc<rustls::ClientConfig>, user_agent: &str, timeout: Duration) -> Agent {
        Agent { tls, user_agent: user_agent.into(), timeout, proxy: Proxy::from_env(), idle: Mutex::new(Vec::new()) }
    }

    /// The same client through `proxy` (none: direct), whatever the environment says.
    pub fn with_proxy(mut self, proxy: Option<Proxy>) -> Agent {
        self.proxy = proxy;
        self
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
        let deadline = Instant::now() + timeout.unwrap_or(self.timeout);
        let key = format!("{}://{}", if url.https { "https" } else { "http" }, url.authority());
        let default_port = url.port == if url.https { 443 } else { 80 };
        let host = if default_port { url.host.clone() } else { url.authority() };
        let mut request =
            format!("{method} {} HTTP/1.1\r\nHost: {host}\r\nUser-Agent: {}\r\n", url.target, self.user_agent);
        let own_auth = headers.iter().any(|(n, _)| n.eq_ignore_ascii_case("authorization"));
        if let Some(userinfo) = url.userinfo.as_ref().filter(|_| !own_auth) {
            request.push_str(&format!("Authorization: Basic {}\r\n", crate::base64::encode(userinfo.as_bytes())));
        }
        for (name, value) in headers {
            if value.contains(['\r', '\n']) || name.contains(['\r', '\n', ':']) {
                return Err(format!("the header {name:?} holds a line break"));
            }
            request.push_str(&format!("{name}: {value}\r\n"));
        }
        if !body.is_empty() || matches!(method, "POST" | "PUT" | "PATCH") {
            request.push_str(&format!("Content-Length: {}\r\n", body.len()));
        }
        request.push_str("\r\n");
        // A kept connection may have been closed by the server meanwhile: once more on a new one.
        for attempt in 0..2 {
            let kept = if attempt == 0 { self.take_idle(&key) } else { None };
            let reused = kept.is_some();
            let mut conn = match kept {
                Some(mut c) => {
                    c.get_mut().deadline = deadline;
                    c
                }
                None => BufReader::new(self.connect(&url, deadline)?),
            };
            let sent = conn.get_mut().write_all(request.as_bytes()).and_then(|()| conn.get_mut().write_all(body));
            let answered = sent.and_then(|()| conn.get_mut().flush()).and_then(|()| body::read_head(&mut conn));
            match answered {
                Ok((head, status)) => {
                    let framing = Framing::of(method, status, &head).map_err(|e| e.to_string())?;
                    return Ok(Response { status, head, framing, conn: Some(conn), key, agent: self });
                }
                Err(_) if reused => continue,
                Err(e) => return Err(e.to_string()),
            }
        }
        Err("the connection closed".into())
    }

    fn take_idle(&self, key: &str) -> Option<BufReader<Conn>> {
        let mut idle = crate::locks::lock(&self.idle);
        idle.retain(|(_, _, at)| at.elapsed() < IDLE_AGE);
        let i = idle.iter().position(|(k, _, _)| k == key)?;
        Some(idle.swap_remove(i).1)
    }

    /// TCP to the server or the proxy (then `CONNECT`), and TLS for `https`.
    fn connect(&self, url: &Url, deadline: Instant) -> Result<Conn, String> {
        let via = self.proxy.as_ref().filter(|p| p.serves(url.bare_host()));
        let first = via.map_or(url, |p| &p.url);
        let tcp = dial(first, deadline)?;
        let mut conn = Conn { stream: Stream::Plain(tcp), deadline };
        if let Some(proxy) = via {
            let mut ask = format!("CONNECT {0} HTTP/1.1\r\nHost: {0}\r\n", url.authority());
            if let Some(userinfo) = &proxy.url.userinfo {
                ask.push_str(&format!("Proxy-Authorization: Basic {}\r\n", crate::base64::encode(userinfo.as_bytes())));
            }
            ask.push_str("\r\n");
            conn.write_all(ask.as_bytes()).map_err(|e| format!("the proxy {}: {e}", proxy.url.authority()))?;
            let mut reader = BufReader::new(conn);
            let (_, status) = body::read_head(&mut reader).map_err(|e| format!("the proxy: {e}"))?;
            if !(200..300).contains(&status) || !reader.buffer().is_empty() {
                return Err(format!("the proxy {} refused CONNECT with {status}", proxy.url.authority()));
            }
            conn = reader.into_inner();
        }
        if !url.https {
            return Ok(conn);
        }
        let name = rustls::pki_types::ServerName::try_from(url.bare_host().to_string())
            .map_err(|e| format!("{}: {e}", url.host))?;
        let tls = rustls::ClientConnection::new(self.tls.clone(), name).map_err(|e| e.to_string())?;
        let Stream::Plain(tcp) = conn.stream else { return Err("TLS over TLS".into()) };
        let mut stream = rustls::StreamOwned::new(tls, tcp);
        while stream.conn.is_handshaking() {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(format!("{}: the TLS handshake timed out", url.authority()));
            }
            let _ = stream.sock.set_read_timeout(Some(left));
            let _ = stream.sock.set_write_timeout(Some(left));
            stream.conn.complete_io(&mut stream.sock).map_err(|e| format!("{}: {e}", url.authority()))?;
        }
        Ok(Conn { stream: Stream::Tls(Box::new(stream)), deadline })
    }
}

/// A TCP connection to one of `url`'s addresses, within the deadline.
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
