//! The manifest URL's HTTP client: one conditional GET of the URL (or of its signature at
//! `<url>.minisig`), a 10 s timeout, a size limit, redirects followed by hand so that headers
//! (tokens, often) never go to another origin and https never falls back to http, and errors
//! and URLs scrubbed of credentials and query values before anyone logs them.

use super::error::{Error, Kind};
use crate::pod;
use crate::trust::{MAX_SIGNATURE_BYTES, SIGNATURE_SUFFIX};
use serde::{Deserialize, Serialize};
use std::path::Path;
use std::time::Duration;

pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);

/// The URL as it may be logged: no user info, no query values.
pub fn redact_url(url: &str) -> String {
    let (scheme, rest) = url.split_once("://").unwrap_or(("", url));
    let (authority, path) = match rest.find('/') {
        Some(i) => rest.split_at(i),
        None => (rest, ""),
    };
    let authority = match authority.rsplit_once('@') {
        Some((_, host)) => format!("<redacted>@{host}"),
        None => authority.to_string(),
    };
    let path = match path.split_once('?') {
        Some((p, _)) => format!("{p}?<redacted>"),
        None => path.to_string(),
    };
    if scheme.is_empty() {
        format!("{authority}{path}")
    } else {
        format!("{scheme}://{authority}{path}")
    }
}

/// One poll's answer.
#[derive(Debug, PartialEq, Eq)]
pub enum Fetched {
    NotModified,
    /// A 200; `signature`: the body of `<url>.minisig`, when asked for and there is one.
    Body {
        bytes: Vec<u8>,
        etag: Option<String>,
        last_modified: Option<String>,
        signature: Option<Vec<u8>>,
    },
}

/// One GET's answer.
enum Got {
    NotModified,
    NotFound,
    Body { bytes: Vec<u8>, etag: Option<String>, last_modified: Option<String> },
}

/// The validators of the payload now in use, sent back to make an unchanged poll a 304.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Validators {
    pub etag: Option<String>,
    pub last_modified: Option<String>,
}

/// A blocking HTTP client for the manifest URL.
#[derive(Clone)]
pub struct Client {
    agent: std::sync::Arc<crate::http1::client::Agent>,
    url: String,
    headers: Vec<(String, String)>,
}

impl Client {
    pub fn new(
        url: &str,
        headers: Vec<(String, String)>,
        timeout: Duration,
        ca_file: Option<&Path>,
    ) -> Result<Client, String> {
        let lower = url.to_ascii_lowercase();
        if !(lower.starts_with("http://") || lower.starts_with("https://")) {
            return Err(format!("manifest URL {}: only http:// and https:// are supported", redact_url(url)));
        }
        let mut roots =
            crate::tls::pem_roots(&crate::tls::system_bundle()).unwrap_or_else(rustls::RootCertStore::empty);
        if let Some(path) = ca_file {
            let pem = std::fs::read(path).map_err(|e| format!("CA file {}: {e}", path.display()))?;
            let extra = crate::tls::pem_roots(&pem)
                .ok_or_else(|| format!("CA file {}: no PEM certificates in it", path.display()))?;
            roots.roots.extend(extra.roots);
        }
        let tls = crate::tls::client_config(Some(roots), None, &[b"http/1.1"])?;
        let agent = crate::http1::client::Agent::new(tls, concat!("atoll/", env!("CARGO_PKG_VERSION")), timeout);
        Ok(Client { agent: std::sync::Arc::new(agent), url: url.to_string(), headers })
    }

    /// One GET, conditional on `validators`. Redirects are followed (at most 10), but never
    /// from https to http, and the configured headers (tokens, often) go only to the URL's own
    /// scheme, host and port: a redirect elsewhere is followed without them.
    /// With `signed`, the signature at `<url>.minisig` (its path with `.minisig` added, the
    /// query kept) is fetched after a 200, in the same way.
    pub fn fetch(&self, validators: &Validators, signed: bool) -> Result<Fetched, Error> {
        let limit = pod::decode::MAX_MANIFEST_BYTES as u64;
        let (bytes, etag, last_modified) = match self.get(&self.url, validators, limit)? {
            Got::NotModified => return Ok(Fetched::NotModified),
            Got::NotFound => return Err(Error::from(Kind::Status { url: redact_url(&self.url), status: 404 })),
            Got::Body { bytes, etag, last_modified } => (bytes, etag, last_modified),
        };
        let signature = match signed {
            false => None,
            true => match self.get(&signature_url(&self.url), &Validators::default(), MAX_SIGNATURE_BYTES as u64)? {
                Got::Body { bytes, .. } => Some(bytes),
                _ => None,
            },
        };
        Ok(Fetched::Body { bytes, etag, last_modified, signature })
    }

    /// One GET of `url` (the configured URL or its signature's) at most `limit` bytes long.
    fn get(&self, start: &str, validators: &Validators, limit: u64) -> Result<Got, Error> {
        let shown = redact_url(start);
        let home = origin(&self.url);
        let mut url = start.to_string();
        for _ in 0..=MAX_REDIRECTS {
            let mut headers: Vec<(&str, &str)> = Vec::new();
            if origin(&url) == home {
                headers.extend(self.headers.iter().map(|(n, v)| (n.as_str(), v.as_str())));
            }
            if let Some(etag) = &validators.etag {
                headers.push(("If-None-Match", etag.as_str()));
            }
            if let Some(lm) = &validators.last_modified {
                headers.push(("If-Modified-Since", lm.as_str()));
            }
            let resp = self.agent.call("GET", &url, &headers, b"", None).map_err(|e| transport(&shown, &e, &url))?;
            let status = resp.status;
            if matches!(status, 301 | 302 | 303 | 307 | 308) {
                let location = resp.header("location").unwrap_or("");
                let next = resolve(&url, location)
                    .ok_or_else(|| Error::from(Kind::NoLocation { url: shown.clone(), status }))?;
                if url.to_ascii_lowercase().starts_with("https://")
                    && !next.to_ascii_lowercase().starts_with("https://")
                {
                    return Err(Error::from(Kind::Downgrade { url: shown, to: redact_url(&next) }));
                }
                url = next;
                continue;
            }
            if status == 304 {
                return Ok(Got::NotModified);
            }
            if status == 404 || status == 410 {
                return Ok(Got::NotFound);
            }
            if status != 200 {
                return Err(Error::from(Kind::Status { url: shown, status }));
            }
            let header = |name: &str| resp.header(name).map(str::to_string);
            let (etag, last_modified) = (header("etag"), header("last-modified"));
            return match resp.read_to_vec(limit) {
                Ok(bytes) => Ok(Got::Body { bytes, etag, last_modified }),
                Err(e) if e.kind() == std::io::ErrorKind::FileTooLarge => {
                    Err(Error::from(Kind::TooLarge { url: shown, limit }))
                }
                Err(e) => Err(transport(&shown, &e.to_string(), &url)),
            };
        }
        Err(Error::from(Kind::Redirects { url: shown, max: MAX_REDIRECTS }))
    }
}

/// Where the signature of the payload at `url` is: its path with `.minisig` added.
pub fn signature_url(url: &str) -> String {
    let (path, rest) = url.find(['?', '#']).and_then(|end| url.split_at_checked(end)).unwrap_or((url, ""));
    format!("{path}{SIGNATURE_SUFFIX}{rest}")
}

/// How many redirects one poll follows.
const MAX_REDIRECTS: usize = 10;

/// `scheme://host:port` of a URL, lowercased, for same-origin checks.
fn origin(url: &str) -> String {
    let (scheme, rest) = url.split_once("://").unwrap_or(("", url));
    let authority = rest.split(['/', '?', '#']).next().unwrap_or("");
    let host = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
    format!("{}://{}", scheme.to_ascii_lowercase(), host.to_ascii_lowercase())
}

/// Where a `Location` header sends a request for `from`.
fn resolve(from: &str, location: &str) -> Option<String> {
    let location = location.trim();
    if location.is_empty() {
        return None;
    }
    if location.contains("://") {
        let lower = location.to_ascii_lowercase();
        return (lower.starts_with("http://") || lower.starts_with("https://")).then(|| location.to_string());
    }
    let (scheme, rest) = from.split_once("://")?;
    if let Some(net) = location.strip_prefix("//") {
        return Some(format!("{scheme}://{net}"));
    }
    let authority = rest.split(['/', '?', '#']).next().unwrap_or("");
    if location.starts_with('/') {
        return Some(format!("{scheme}://{authority}{location}"));
    }
    let path = rest.strip_prefix(authority).unwrap_or_default().split(['?', '#']).next().unwrap_or("");
    let dir = path.rfind('/').and_then(|i| path.get(..=i)).unwrap_or("");
    let dir = if dir.is_empty() { "/" } else { dir };
    Some(format!("{scheme}://{authority}{dir}{location}"))
}

/// A failed request or body read of `url` (shown as `shown`), its message scrubbed.
fn transport(shown: &str, e: &str, url: &str) -> Error {
    Error::from(Kind::Transport { url: shown.to_string(), why: scrub(e, url) })
}

/// An error message with the URL's credentials and query taken out, whatever the library put
/// in it.
fn scrub(message: &str, url: &str) -> String {
    let mut out = message.replace(url, &redact_url(url));
    let (_, rest) = url.split_once("://").unwrap_or(("", url));
    if let Some((userinfo, _)) = rest.split(['/', '?']).next().unwrap_or("").rsplit_once('@') {
        out = out.replace(userinfo, "<redacted>");
    }
    if let Some((_, query)) = url.split_once('?') {
        if !query.is_empty() {
            out = out.replace(query, "<redacted>");
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_are_logged_without_credentials_or_query_values() {
        assert_eq!(
            redact_url("https://user:pw@h.example:8443/pods?token=s3cret"),
            "https://<redacted>@h.example:8443/pods?<redacted>"
        );
        assert_eq!(redact_url("http://127.0.0.1:8080/pods.yaml"), "http://127.0.0.1:8080/pods.yaml");
        assert_eq!(redact_url("http://h"), "http://h");
    }

    #[test]
    fn redirects_resolve_and_origins_compare_without_credentials() {
        assert_eq!(resolve("https://h:8443/a/b?x=1", "/c").as_deref(), Some("https://h:8443/c"));
        assert_eq!(resolve("https://h/a/b", "c?d").as_deref(), Some("https://h/a/c?d"));
        assert_eq!(resolve("https://h/a", "//other/p").as_deref(), Some("https://other/p"));
        assert_eq!(resolve("https://h/a", "http://x/p").as_deref(), Some("http://x/p"));
        assert_eq!(resolve("https://h/a", "ftp://x/p"), None);
        assert_eq!(origin("https://u:p@H:8443/x?y"), "https://h:8443");
        assert_ne!(origin("https://h/x"), origin("http://h/x"));
        let scrubbed =
            scrub("io: https://u:pw@h/p?token=s3cret failed for pw@h?token=s3cret", "https://u:pw@h/p?token=s3cret");
        assert!(!scrubbed.contains("s3cret") && !scrubbed.contains("u:pw"), "{scrubbed}");
    }

    #[test]
    fn the_signature_is_beside_the_path_with_the_query_kept() {
        assert_eq!(signature_url("https://h/m/pods.yaml"), "https://h/m/pods.yaml.minisig");
        assert_eq!(signature_url("https://h/pods?node=a&t=x#f"), "https://h/pods.minisig?node=a&t=x#f");
    }

    #[test]
    fn only_http_and_https_urls_are_accepted() {
        let e = Client::new("ftp://x/p", vec![], DEFAULT_TIMEOUT, None).err().unwrap();
        assert!(e.contains("only http:// and https://"), "{e}");
        let e =
            Client::new("https://x/p", vec![], DEFAULT_TIMEOUT, Some(Path::new("/nonexistent/ca.pem"))).err().unwrap();
        assert!(e.contains("/nonexistent/ca.pem"), "{e}");
    }
}
