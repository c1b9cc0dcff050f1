//! The HTTP GET of httpGet probes, as kubelet makes it (pkg/probe/http): HTTP/1.1 with no
//! keep-alive, no proxy, TLS without certificate verification; `User-Agent: kube-probe/x.y`
//! and `Accept: */*` unless the probe's headers say otherwise (an empty Accept removes it; a
//! Host header sets the request's host); redirects followed while they stay on the same host
//! name (at most 10), a redirect elsewhere returned as it is (success with a warning); the
//! body read up to 10 KiB. Success iff 200 <= status < 400.
//!
//! It runs on smol's reactor, so a probe is a timer and a socket, never a thread.

use smol::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use std::time::{Duration, Instant};

/// kubelet's probe user agent (`kube-probe/<major>.<minor>` of the Kubernetes version atoll
/// follows: the same as the Node's kubeletVersion, `mirror::objects::KUBELET_VERSION`).
pub const USER_AGENT: &str = "kube-probe/1.36";
/// kubelet's user agent for a lifecycle hook's httpGet.
pub const LIFECYCLE_USER_AGENT: &str = "kube-lifecycle/1.35";
/// kubelet reads at most this much of a probe's response body.
pub const BODY_LIMIT: usize = 10 * 1024;
const HEADER_LIMIT: usize = 64 * 1024;
const MAX_REDIRECTS: usize = 10;

/// A probe's request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HttpGet {
    /// `http` or `https`.
    pub scheme: String,
    pub host: String,
    pub port: u16,
    /// The path with its query, starting with '/'.
    pub path: String,
    pub headers: Vec<(String, String)>,
    /// [`USER_AGENT`] for probes, [`LIFECYCLE_USER_AGENT`] for hooks.
    pub user_agent: &'static str,
}

/// How an HTTP probe ended (kubelet's success, warning or failure).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum HttpResult {
    Success(u16),
    /// A redirect to another host, not followed: counted as a success, with this warning.
    Warning(String),
    Failure(String),
}

/// The response's status code and its `Location`, if any.
struct Response {
    status: u16,
    location: Option<String>,
}

/// One GET within `timeout`, no redirect followed: the status, or the transport error. A
/// lifecycle hook's httpGet (kubelet does not look at the status of those).
pub async fn get_once(target: &HttpGet, timeout: Duration) -> Result<u16, String> {
    match crate::deadline::with_deadline(timeout, get(target)).await {
        None => Err(format!("{}: timed out after {timeout:?}", url(target))),
        Some(Err(e)) => Err(format!("{}: {e}", url(target))),
        Some(Ok(r)) => Ok(r.status),
    }
}

/// Runs the probe's GET within `timeout`, redirects included.
pub async fn probe(target: &HttpGet, timeout: Duration) -> HttpResult {
    let started = Instant::now();
    let mut current = target.clone();
    for _ in 0..=MAX_REDIRECTS {
        let left = timeout.saturating_sub(started.elapsed());
        let resp = match crate::deadline::with_deadline(left, get(&current)).await {
            None => return HttpResult::Failure(format!("{}: timed out after {timeout:?}", url(&current))),
            Some(Err(e)) => return HttpResult::Failure(format!("{}: {e}", url(&current))),
            Some(Ok(r)) => r,
        };
        let redirect = (300..400).contains(&resp.status) && resp.status != 304;
        match resp.location.filter(|_| redirect) {
            Some(location) => {
                let next = follow(&current, &location);
                if next.host != target.host {
                    return HttpResult::Warning(format!(
                        "probe terminated redirects for {}, response: {} to {location:?}",
                        url(target),
                        resp.status
                    ));
                }
                current = next;
            }
            None if (200..400).contains(&resp.status) => return HttpResult::Success(resp.status),
            None => return HttpResult::Failure(format!("HTTP probe failed with statuscode: {}", resp.status)),
        }
    }
    HttpResult::Failure(format!("{}: stopped after {MAX_REDIRECTS} redirects", url(target)))
}

fn url(t: &HttpGet) -> String {
    let host = if t.host.contains(':') { format!("[{}]", t.host) } else { t.host.clone() };
    format!("{}://{host}:{}{}", t.scheme, t.port, t.path)
}

/// The target a `Location` header points to, relative to `from`.
fn follow(from: &HttpGet, location: &str) -> HttpGet {
    let mut next = from.clone();
    let rest = if let Some((scheme, rest)) = location.split_once("://") {
        next.scheme = scheme.to_ascii_lowercase();
        Some(rest)
    } else {
        location.strip_prefix("//")
    };
    match rest {
        Some(rest) => {
            let (authority, path) = rest.find(['/', '?']).and_then(|i| rest.split_at_checked(i)).unwrap_or((rest, "/"));
            let default_port = if next.scheme == "https" { 443 } else { 80 };
            let (host, port) = split_authority(authority, default_port);
            next.host = host;
            next.port = port;
            next.path = if path.starts_with('?') { format!("/{path}") } else { path.to_string() };
        }
        None if location.starts_with('/') => next.path = location.to_string(),
        None => {
            let base = from.path.split('?').next().unwrap_or("/");
            let dir = base.rfind('/').and_then(|i| base.get(..=i)).unwrap_or("");
            next.path = format!("{}{location}", if dir.is_empty() { "/" } else { dir });
        }
    }
    next
}

fn split_authority(authority: &str, default_port: u16) -> (String, u16) {
    if let Some(rest) = authority.strip_prefix('[') {
        let (host, after) = rest.split_once(']').unwrap_or((rest, ""));
        let port = after.strip_prefix(':').and_then(|p| p.parse().ok()).unwrap_or(default_port);
        return (host.to_string(), port);
    }
    match authority.rsplit_once(':') {
        Some((h, p)) if p.parse::<u16>().is_ok() => (h.to_string(), p.parse().unwrap_or(default_port)),
        _ => (authority.to_string(), default_port),
    }
}

/// The request's bytes, with kubelet's header rules.
fn request(t: &HttpGet) -> Vec<u8> {
    let default_port = if t.scheme == "https" { 443 } else { 80 };
    let mut host = if t.host.contains(':') { format!("[{}]", t.host) } else { t.host.clone() };
    if t.port != default_port {
        host = format!("{host}:{}", t.port);
    }
    let given = |name: &str| t.headers.iter().find(|(n, _)| n.eq_ignore_ascii_case(name)).map(|(_, v)| v.as_str());
    let host = given("Host").unwrap_or(&host).to_string();
    let mut out = format!("GET {} HTTP/1.1\r\nHost: {host}\r\n", t.path);
    if given("User-Agent").is_none() {
        out.push_str(&format!("User-Agent: {}\r\n", t.user_agent));
    }
    if given("Accept").is_none() {
        out.push_str("Accept: */*\r\n");
    }
    for (name, value) in &t.headers {
        let lower = name.to_ascii_lowercase();
        if lower == "host" || (lower == "accept" && value.is_empty()) || lower == "connection" {
            continue;
        }
        // Header names and values come from a validated manifest; CR/LF are never passed on.
        if name.contains(['\r', '\n']) || value.contains(['\r', '\n']) {
            continue;
        }
        out.push_str(&format!("{name}: {value}\r\n"));
    }
    out.push_str("Connection: close\r\n\r\n");
    out.into_bytes()
}

async fn get(t: &HttpGet) -> Result<Response, String> {
    let stream = smol::net::TcpStream::connect((t.host.as_str(), t.port)).await.map_err(|e| e.to_string())?;
    let _ = stream.set_nodelay(true);
    if t.scheme == "https" {
        let name = rustls::pki_types::ServerName::try_from(t.host.clone()).map_err(|e| format!("host name: {e}"))?;
        // Boxed: only HTTPS attempts carry a TLS connection's state.
        Box::pin(async {
            let tls = futures_rustls::TlsConnector::from(crate::tls::insecure_client())
                .connect(name, stream)
                .await
                .map_err(|e| e.to_string())?;
            exchange(tls, t).await
        })
        .await
    } else {
        exchange(stream, t).await
    }
}

async fn exchange<S: AsyncRead + AsyncWrite + Unpin>(mut s: S, t: &HttpGet) -> Result<Response, String> {
    s.write_all(&request(t)).await.map_err(|e| e.to_string())?;
    s.flush().await.map_err(|e| e.to_string())?;
    let (head, already) = crate::http1::read_head(&mut s, HEADER_LIMIT).await?;
    let status = crate::http1::status(&head)?;
    let location = crate::http1::header(&head, "location").map(String::from);
    // Read (and drop) the body up to kubelet's limit; a short or truncated body is fine.
    let mut chunk = [0u8; 2048];
    let mut body = already.len();
    while body < BODY_LIMIT {
        match s.read(&mut chunk).await {
            Ok(0) | Err(_) => break,
            Ok(n) => body += n,
        }
    }
    Ok(Response { status, location })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{BufRead, BufReader, Write};

    fn target(port: u16, path: &str) -> HttpGet {
        HttpGet {
            scheme: "http".into(),
            host: "127.0.0.1".into(),
            port,
            path: path.into(),
            headers: vec![],
            user_agent: USER_AGENT,
        }
    }

    /// A server on 127.0.0.1 answering each connection with `reply(path, request headers)`.
    fn server(reply: fn(&str, &[String]) -> String) -> u16 {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port();
        std::thread::spawn(move || {
            for s in l.incoming().flatten() {
                let mut r = BufReader::new(s.try_clone().unwrap());
                let mut first = String::new();
                r.read_line(&mut first).unwrap();
                let path = first.split(' ').nth(1).unwrap_or("").to_string();
                let mut headers = Vec::new();
                loop {
                    let mut l = String::new();
                    r.read_line(&mut l).unwrap();
                    if l.trim().is_empty() {
                        break;
                    }
                    headers.push(l.trim().to_string());
                }
                let _ = (&s).write_all(reply(&path, &headers).as_bytes());
            }
        });
        port
    }

    fn status(code: u16) -> String {
        format!("HTTP/1.1 {code} X\r\nContent-Length: 2\r\n\r\nok")
    }

    #[test]
    fn success_is_200_to_399() {
        let port = server(|path, _| status(path.trim_start_matches('/').parse().unwrap()));
        for code in [200, 204, 301, 399] {
            let got = smol::block_on(probe(&target(port, &format!("/{code}")), Duration::from_secs(2)));
            assert_eq!(got, HttpResult::Success(code), "{code}");
        }
        for code in [199, 400, 404, 500] {
            let got = smol::block_on(probe(&target(port, &format!("/{code}")), Duration::from_secs(2)));
            assert_eq!(got, HttpResult::Failure(format!("HTTP probe failed with statuscode: {code}")), "{code}");
        }
    }

    #[test]
    fn same_host_redirects_are_followed_and_others_are_a_warning() {
        let port = server(|path, _| match path {
            "/start" => "HTTP/1.1 302 Found\r\nLocation: /next?x=1\r\nContent-Length: 0\r\n\r\n".into(),
            "/next?x=1" => "HTTP/1.1 302 Found\r\nLocation: bad\r\nContent-Length: 0\r\n\r\n".into(),
            "/bad" => status(500),
            "/away" => "HTTP/1.1 301 Moved\r\nLocation: http://example.invalid/\r\nContent-Length: 0\r\n\r\n".into(),
            "/loop" => "HTTP/1.1 302 Found\r\nLocation: /loop\r\nContent-Length: 0\r\n\r\n".into(),
            "/moved" => "HTTP/1.1 302 Found\r\nLocation: /fine\r\nContent-Length: 0\r\n\r\n".into(),
            "/fine" => status(200),
            _ => status(404),
        });
        let got = smol::block_on(probe(&target(port, "/start"), Duration::from_secs(2)));
        assert_eq!(got, HttpResult::Failure("HTTP probe failed with statuscode: 500".into()), "followed to /bad");
        let got = smol::block_on(probe(&target(port, "/moved"), Duration::from_secs(2)));
        assert_eq!(got, HttpResult::Success(200), "a 302 to a 200 on the same host");
        let got = smol::block_on(probe(&target(port, "/away"), Duration::from_secs(2)));
        assert!(matches!(&got, HttpResult::Warning(w) if w.contains("301")), "{got:?}");
        let got = smol::block_on(probe(&target(port, "/loop"), Duration::from_secs(2)));
        assert!(matches!(&got, HttpResult::Failure(f) if f.contains("stopped after 10 redirects")), "{got:?}");
    }

    #[test]
    fn headers_follow_kubelets_rules() {
        let port = server(|_, headers| {
            let has = |h: &str| headers.iter().any(|l| l.eq_ignore_ascii_case(h));
            let ok = has("user-agent: kube-probe/1.36") && has("accept: */*") && has("x-custom: 1");
            status(if ok { 200 } else { 418 })
        });
        let mut t = target(port, "/");
        t.headers = vec![("X-Custom".into(), "1".into())];
        assert_eq!(smol::block_on(probe(&t, Duration::from_secs(2))), HttpResult::Success(200));
        let r = String::from_utf8(request(&HttpGet {
            headers: vec![
                ("Accept".into(), "".into()),
                ("Host".into(), "svc.local".into()),
                ("User-Agent".into(), "me".into()),
            ],
            ..target(8080, "/h")
        }))
        .unwrap();
        assert_eq!(r, "GET /h HTTP/1.1\r\nHost: svc.local\r\nUser-Agent: me\r\nConnection: close\r\n\r\n");
    }

    #[test]
    fn a_closed_port_and_a_silent_server_fail() {
        let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let got = smol::block_on(probe(&target(closed, "/"), Duration::from_secs(2)));
        assert!(matches!(got, HttpResult::Failure(_)), "{got:?}");
        let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = silent.local_addr().unwrap().port();
        let started = Instant::now();
        let got = smol::block_on(probe(&target(port, "/"), Duration::from_millis(300)));
        assert!(matches!(&got, HttpResult::Failure(f) if f.contains("timed out")), "{got:?}");
        assert!(started.elapsed() < Duration::from_secs(2));
        drop(silent);
    }

    #[test]
    fn https_probes_skip_certificate_verification() {
        let dir = std::env::temp_dir().join(format!("atoll-probe-tls-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("ok.html"), "ok").unwrap();
        // A self-signed certificate for another name: kubelet's probes accept it.
        let out = std::process::Command::new("openssl")
            .args(["req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "k.pem", "-out", "c.pem"])
            .args(["-days", "1", "-subj", "/CN=not-this-host.example"])
            .current_dir(&dir)
            .output()
            .expect("openssl (tests/run.sh installs it)");
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let mut tls_server = std::process::Command::new("openssl")
            .args(["s_server", "-quiet", "-accept", &format!("127.0.0.1:{port}"), "-cert", "c.pem", "-key", "k.pem"])
            .arg("-WWW")
            .current_dir(&dir)
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        for _ in 0..100 {
            if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
                break;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let mut t = target(port, "/ok.html");
        t.scheme = "https".into();
        assert_eq!(smol::block_on(probe(&t, Duration::from_secs(5))), HttpResult::Success(200));
        // HTTPS to a plain HTTP server: the handshake fails, and so does the probe.
        let plain = server(|_, _| status(200));
        let mut t = target(plain, "/");
        t.scheme = "https".into();
        assert!(matches!(smol::block_on(probe(&t, Duration::from_secs(5))), HttpResult::Failure(_)));
        let _ = tls_server.kill();
        let _ = tls_server.wait();
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn redirect_targets_resolve_like_urls() {
        let from = target(8080, "/a/b?q");
        assert_eq!(follow(&from, "/x").path, "/x");
        assert_eq!(follow(&from, "c").path, "/a/c");
        let t = follow(&from, "https://h.example:8443/p");
        assert_eq!((t.scheme.as_str(), t.host.as_str(), t.port, t.path.as_str()), ("https", "h.example", 8443, "/p"));
        let t = follow(&from, "//[::1]/z");
        assert_eq!((t.host.as_str(), t.port, t.path.as_str()), ("::1", 80, "/z"));
    }
}
