//! The URL source (`staticPodURL`, `--manifest-url`, with `staticPodURLHeader` /
//! `--manifest-url-header`).
//!
//! Polls at start and then every `httpCheckFrequency` after each poll ends: a 10 s timeout,
//! a 10 MiB body limit, the configured headers (repeatable, multi-valued), `If-None-Match` /
//! `If-Modified-Since` from the last good payload so an unchanged payload costs a 304.
//! The body is a Pod, a PodList or a v1 List; one bad item rejects the whole payload.
//! Errors, timeouts and non-200 answers keep the previous pods; a 200 with an empty body
//! removes the URL's pods (kubelet rule).
//!
//! Better than kubelet: the last good payload is kept on disk (written atomically and synced)
//! and served at start when the URL cannot be reached, so an offline reboot brings URL pods
//! back. Header values and URL credentials never reach the logs.

use super::{SourceId, Update};
use crate::pod::{self, Origin, Policy, Shape};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);

#[derive(Clone, Debug)]
pub struct HttpSourceConfig {
    pub url: String,
    /// Header name and value pairs, sent in order (a name may repeat).
    pub headers: Vec<(String, String)>,
    pub check_frequency: Duration,
    pub timeout: Duration,
    /// Extra trusted CA certificates (PEM), for a private PKI.
    pub ca_file: Option<PathBuf>,
    /// Where the last good payload is kept; `None` keeps none.
    pub cache_dir: Option<PathBuf>,
    pub node: String,
    pub policy: Policy,
}

/// Parses kubelet's `--manifest-url-header` value: `Name:value,Name:value`.
pub fn parse_header_flag(s: &str) -> Result<Vec<(String, String)>, String> {
    let mut out = Vec::new();
    for part in s.split(',').filter(|p| !p.trim().is_empty()) {
        let Some((name, value)) = part.split_once(':') else {
            return Err(format!("manifest URL header {part:?} is not Name:value"));
        };
        let name = name.trim();
        if name.is_empty() || !name.chars().all(|c| c.is_ascii_alphanumeric() || "-_!#$%&'*+.^`|~".contains(c)) {
            return Err(format!("manifest URL header name {name:?} is not a valid header name"));
        }
        out.push((name.to_string(), value.trim().to_string()));
    }
    Ok(out)
}

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
    agent: ureq::Agent,
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
        let mut certs = crate::tls::system_roots();
        if let Some(path) = ca_file {
            let pem = std::fs::read(path).map_err(|e| format!("CA file {}: {e}", path.display()))?;
            let before = certs.len();
            certs.extend(crate::tls::pem_certs(&pem));
            if certs.len() == before {
                return Err(format!("CA file {}: no PEM certificates in it", path.display()));
            }
        }
        let tls = ureq::tls::TlsConfig::builder().root_certs(ureq::tls::RootCerts::new_with_certs(&certs)).build();
        let config = ureq::Agent::config_builder()
            .timeout_global(Some(timeout))
            .http_status_as_error(false)
            // Redirects are followed here, not by ureq: see `fetch`.
            .max_redirects(0)
            .user_agent(concat!("atoll/", env!("CARGO_PKG_VERSION")))
            .tls_config(tls)
            .build();
        Ok(Client { agent: config.into(), url: url.to_string(), headers })
    }

    /// One GET, conditional on `validators`. Redirects are followed (at most 10), but never
    /// from https to http, and the configured headers (tokens, often) go only to the URL's own
    /// scheme, host and port: a redirect elsewhere is followed without them.
    pub fn fetch(&self, validators: &Validators) -> Result<Fetched, String> {
        let shown = redact_url(&self.url);
        let home = origin(&self.url);
        let mut url = self.url.clone();
        for _ in 0..=MAX_REDIRECTS {
            let mut req = self.agent.get(&url);
            if origin(&url) == home {
                for (name, value) in &self.headers {
                    req = req.header(name.as_str(), value.as_str());
                }
            }
            if let Some(etag) = &validators.etag {
                req = req.header("If-None-Match", etag.as_str());
            }
            if let Some(lm) = &validators.last_modified {
                req = req.header("If-Modified-Since", lm.as_str());
            }
            let mut resp = req.call().map_err(|e| format!("{shown}: {}", scrub(&e.to_string(), &url)))?;
            let status = resp.status().as_u16();
            if matches!(status, 301 | 302 | 303 | 307 | 308) {
                let location = resp.headers().get("location").and_then(|v| v.to_str().ok()).unwrap_or("");
                let next = resolve(&url, location)
                    .ok_or_else(|| format!("{shown}: HTTP {status} without a usable Location"))?;
                if url.to_ascii_lowercase().starts_with("https://")
                    && !next.to_ascii_lowercase().starts_with("https://")
                {
                    return Err(format!("{shown}: refusing a redirect from https to {}", redact_url(&next)));
                }
                url = next;
                continue;
            }
            if status == 304 {
                return Ok(Fetched::NotModified);
            }
            if status != 200 {
                return Err(format!("{shown}: HTTP {status}"));
            }
            let header = |name: &str| resp.headers().get(name).and_then(|v| v.to_str().ok()).map(str::to_string);
            let (etag, last_modified) = (header("etag"), header("last-modified"));
            let limit = pod::decode::MAX_MANIFEST_BYTES as u64;
            let bytes = resp
                .body_mut()
                .with_config()
                .limit(limit + 1)
                .read_to_vec()
                .map_err(|e| format!("{shown}: {}", scrub(&e.to_string(), &url)))?;
            if bytes.len() as u64 > limit {
                return Err(format!("{shown}: body is larger than the {limit} byte limit"));
            }
            return Ok(Fetched::Body { bytes, etag, last_modified });
        }
        Err(format!("{shown}: stopped after {MAX_REDIRECTS} redirects"))
    }
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
    let path = rest[authority.len()..].split(['?', '#']).next().unwrap_or("");
    let dir = &path[..path.rfind('/').map_or(0, |i| i + 1)];
    let dir = if dir.is_empty() { "/" } else { dir };
    Some(format!("{scheme}://{authority}{dir}{location}"))
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

/// The on-disk copy of the last good payload (`cache`: 0600 in a 0700 directory). It names its
/// URL only redacted, plus a hash of the whole URL to tell whether it belongs to the one
/// configured; the URL's credentials and query never reach the disk.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CacheRecord {
    /// The URL, redacted (for the operator's eyes).
    pub url: String,
    /// FNV-128 of the full URL.
    #[serde(default)]
    pub url_hash: String,
    pub validators: Validators,
    pub fetched_at: String,
    pub body: String,
}

impl CacheRecord {
    pub fn new(url: &str, validators: Validators, body: String) -> CacheRecord {
        CacheRecord {
            url: redact_url(url),
            url_hash: url_hash(url),
            validators,
            fetched_at: crate::rfc3339::format_nanos(SystemTime::now()),
            body,
        }
    }

    /// Whether this copy is `url`'s (atoll before 0.2 wrote the whole URL instead of a hash).
    pub fn belongs_to(&self, url: &str) -> bool {
        self.url_hash == url_hash(url) || self.url == url
    }
}

fn url_hash(url: &str) -> String {
    format!("{:032x}", crate::fnv::fnv1a_128(url.as_bytes()))
}

/// `<dir>/manifest-url-<FNV-128 of the URL>.json`
pub fn cache_path(dir: &Path, url: &str) -> PathBuf {
    crate::records::path_for(dir, "manifest-url", url)
}

/// Where atoll before 0.2 kept the copy (a 64-bit hash of the URL), read once and moved.
fn old_cache_path(dir: &Path, url: &str) -> PathBuf {
    dir.join(format!("manifest-url-{:016x}.json", crate::fnv::fnv1a_64(url.as_bytes())))
}

/// Writes the record atomically and privately.
pub fn write_cache(path: &Path, record: &CacheRecord) -> std::io::Result<()> {
    crate::records::write(path, record)
}

/// The cached payload for `url`, if there is one and it is for this URL.
pub fn read_cache(path: &Path, url: &str) -> Option<CacheRecord> {
    crate::records::read::<CacheRecord>(path).filter(|r| r.belongs_to(url))
}

struct Poller {
    cfg: HttpSourceConfig,
    cache: Option<PathBuf>,
    /// The body of the last 200, good or bad: a bad payload served again is not re-parsed.
    last_body: Option<Vec<u8>>,
    validators: Validators,
    failures: u32,
    delivered: bool,
}

impl Poller {
    fn shown(&self) -> String {
        redact_url(&self.cfg.url)
    }

    /// Handles one poll result; returns the snapshot to send, if any.
    fn handle(&mut self, result: Result<Fetched, String>) -> Option<Update> {
        match result {
            Ok(Fetched::NotModified) => {
                self.failures = 0;
                super::source_success("http");
                None
            }
            Ok(Fetched::Body { bytes, etag, last_modified }) => {
                self.failures = 0;
                if self.last_body.as_ref() == Some(&bytes) {
                    return None;
                }
                self.last_body = Some(bytes.clone());
                let validators = Validators { etag, last_modified };
                if bytes.iter().all(u8::is_ascii_whitespace) {
                    log::warn!("URL source: {} returned an empty body; removing its pods", self.shown());
                    self.accept(&bytes, validators);
                    return Some(Update { source: SourceId::Http, pods: vec![], errors: vec![] });
                }
                let origin = Origin::Url(self.cfg.url.clone());
                match pod::load(&bytes, Shape::PodOrList, &origin, &self.cfg.node, self.cfg.policy) {
                    Ok(loaded) => {
                        for w in &loaded.warnings {
                            log::warn!("URL source: {}: {w}", self.shown());
                        }
                        log::info!("URL source: {} delivered {} pod(s)", self.shown(), loaded.pods.len());
                        super::source_success("http");
                        self.accept(&bytes, validators);
                        Some(Update { source: SourceId::Http, pods: loaded.pods, errors: vec![] })
                    }
                    Err(mut e) => {
                        e.origin = self.shown();
                        log::error!("URL source: payload rejected, keeping the previous pods:\n{e}");
                        crate::metrics::add(&crate::metrics::SOURCE_ERRORS, &[("source", "http")], 1.0);
                        if self.delivered {
                            return None;
                        }
                        // Nothing served yet (a captive portal's page at boot, say): the last
                        // good payload from disk, as when the URL cannot be reached.
                        let cached = self.serve_cached();
                        self.last_body = Some(bytes);
                        cached
                    }
                }
            }
            Err(e) => {
                self.failures += 1;
                crate::metrics::add(&crate::metrics::SOURCE_ERRORS, &[("source", "http")], 1.0);
                match self.failures {
                    1..=3 => log::warn!("URL source: {e}; keeping the previous pods"),
                    4 => log::warn!("URL source: {e}; further failures are logged at debug level until it answers"),
                    _ => log::debug!("URL source: {e}"),
                }
                if self.delivered {
                    return None;
                }
                self.serve_cached()
            }
        }
    }

    /// Takes a good payload into use: validators for the next poll, and the disk copy.
    fn accept(&mut self, bytes: &[u8], validators: Validators) {
        self.validators = validators.clone();
        self.delivered = true;
        let Some(path) = &self.cache else { return };
        let record = CacheRecord::new(&self.cfg.url, validators, String::from_utf8_lossy(bytes).into_owned());
        if let Err(e) = write_cache(path, &record) {
            log::warn!("URL source: cannot keep the payload in {}: {e}", path.display());
        }
    }

    /// At start with the URL unreachable: the last good payload from disk.
    fn serve_cached(&mut self) -> Option<Update> {
        let path = self.cache.clone()?;
        let record = match read_cache(&path, &self.cfg.url) {
            Some(r) => r,
            None => {
                // A copy written by an older atoll: moved to today's name and form.
                let old = old_cache_path(path.parent()?, &self.cfg.url);
                let mut r = read_cache(&old, &self.cfg.url)?;
                r.url = redact_url(&self.cfg.url);
                r.url_hash = url_hash(&self.cfg.url);
                if write_cache(&path, &r).is_ok() {
                    crate::records::remove(&old);
                }
                r
            }
        };
        let origin = Origin::Url(self.cfg.url.clone());
        let pods = if record.body.trim().is_empty() {
            vec![]
        } else {
            match pod::load(record.body.as_bytes(), Shape::PodOrList, &origin, &self.cfg.node, self.cfg.policy) {
                Ok(l) => l.pods,
                Err(e) => {
                    log::warn!("URL source: the cached payload in {} is no longer valid: {e}", path.display());
                    return None;
                }
            }
        };
        log::warn!(
            "URL source: {} unreachable; serving the last good payload from {} (fetched {}, {} pod(s))",
            self.shown(),
            path.display(),
            record.fetched_at,
            pods.len()
        );
        self.validators = record.validators;
        self.last_body = Some(record.body.into_bytes());
        self.delivered = true;
        Some(Update { source: SourceId::Http, pods, errors: vec![] })
    }
}

/// Runs the URL source until the receiver goes away.
pub async fn run(cfg: HttpSourceConfig, tx: smol::channel::Sender<Update>) {
    let client = match Client::new(&cfg.url, cfg.headers.clone(), cfg.timeout, cfg.ca_file.as_deref()) {
        Ok(c) => c,
        Err(e) => {
            log::error!("URL source disabled: {e}");
            return;
        }
    };
    let names: Vec<&str> = cfg.headers.iter().map(|(n, _)| n.as_str()).collect();
    log::info!(
        "URL source: polling {} every {:?}{}",
        redact_url(&cfg.url),
        cfg.check_frequency,
        if names.is_empty() { String::new() } else { format!(" with headers {}", names.join(", ")) }
    );
    let cache = cfg.cache_dir.as_deref().map(|d| cache_path(d, &cfg.url));
    let every = cfg.check_frequency;
    let mut poller =
        Poller { cfg, cache, last_body: None, validators: Validators::default(), failures: 0, delivered: false };
    loop {
        let (c, v) = (client.clone(), poller.validators.clone());
        let result = smol::unblock(move || c.fetch(&v)).await;
        if let Some(update) = poller.handle(result) {
            if tx.send(update).await.is_err() {
                return;
            }
        }
        smol::Timer::after(every).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_flags_parse_like_kubelet() {
        assert_eq!(
            parse_header_flag("a:hello,b:again,c:world").unwrap(),
            vec![("a".into(), "hello".into()), ("b".into(), "again".into()), ("c".into(), "world".into())]
        );
        assert_eq!(
            parse_header_flag("Authorization: Bearer x:y").unwrap(),
            vec![("Authorization".into(), "Bearer x:y".into())]
        );
        assert!(parse_header_flag("novalue").unwrap_err().contains("not Name:value"));
        assert!(parse_header_flag("bad name:v").unwrap_err().contains("not a valid header name"));
    }

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
    fn only_http_and_https_urls_are_accepted() {
        let e = Client::new("ftp://x/p", vec![], DEFAULT_TIMEOUT, None).err().unwrap();
        assert!(e.contains("only http:// and https://"), "{e}");
        let e =
            Client::new("https://x/p", vec![], DEFAULT_TIMEOUT, Some(Path::new("/nonexistent/ca.pem"))).err().unwrap();
        assert!(e.contains("/nonexistent/ca.pem"), "{e}");
    }

    #[test]
    fn the_cache_belongs_to_one_url_and_keeps_no_credentials() {
        let dir = std::env::temp_dir().join(format!("atoll-cache-test-{}", std::process::id()));
        let url = "https://user:pw@127.0.0.1/a?token=s3cret";
        let path = cache_path(&dir, url);
        let rec = CacheRecord::new(url, Validators { etag: Some("\"v1\"".into()), last_modified: None }, "x".into());
        write_cache(&path, &rec).unwrap();
        assert_eq!(read_cache(&path, url), Some(rec));
        assert_eq!(read_cache(&path, "http://127.0.0.1/other"), None);
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(!text.contains("s3cret") && !text.contains("pw@"), "{text}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
