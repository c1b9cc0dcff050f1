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
//!
//! Signed payloads (`manifestTrust`): the signature is fetched from `<url>.minisig` (its path
//! with `.minisig` added; what `minisign -S` writes beside the file on the web server) after
//! each new payload and checked before the body is parsed, an empty body included. A payload
//! that fails the check, or is older than a signed version accepted before for the payload
//! or for one of its items, is refused whole as an invalid one. The cached copy keeps its
//! signature and is checked again, under the trust of the moment, before it is served.

use super::error::{Error, Kind};
use super::payload::{claim, Intake, Payload};
use super::{SourceId, Update};
use crate::pod::{self, Origin};
use crate::trust::Versions;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

pub use super::fetch::{redact_url, signature_url, Client, Fetched, Validators, DEFAULT_TIMEOUT};

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
    /// How payloads are opened: signatures trusted (`manifestTrust`), the node, strictness.
    pub intake: Intake,
    /// Where the newest signed version accepted for each item is kept, with signatures trusted.
    pub versions: Option<PathBuf>,
}

/// Parses kubelet's `--manifest-url-header` value: `Name:value,Name:value`.
pub fn parse_header_flag(s: &str) -> Result<Vec<(String, String)>, Error> {
    let mut out = Vec::new();
    for part in s.split(',').filter(|p| !p.trim().is_empty()) {
        let Some((name, value)) = part.split_once(':') else {
            return Err(Error::from(Kind::HeaderForm(part.to_string())));
        };
        let name = name.trim();
        if name.is_empty() || !name.chars().all(|c| c.is_ascii_alphanumeric() || "-_!#$%&'*+.^`|~".contains(c)) {
            return Err(Error::from(Kind::HeaderName(name.to_string())));
        }
        out.push((name.to_string(), value.trim().to_string()));
    }
    Ok(out)
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
    /// The payload's signature (`<url>.minisig`), when it was signed.
    #[serde(default)]
    pub signature: Option<String>,
}

impl CacheRecord {
    pub fn new(url: &str, validators: Validators, body: String, signature: Option<String>) -> CacheRecord {
        CacheRecord {
            url: redact_url(url),
            url_hash: url_hash(url),
            validators,
            fetched_at: crate::rfc3339::format_nanos(SystemTime::now()),
            body,
            signature,
        }
    }

    /// Whether this copy is `url`'s (atoll before 0.2 wrote the whole URL instead of a hash).
    pub fn belongs_to(&self, url: &str) -> bool {
        self.url_hash == url_hash(url) || self.url == url
    }
}

/// The URL source's snapshot: what one payload held.
fn snapshot(m: crate::objects::Manifests, payload: Arc<Payload>) -> Update {
    let (pods, objects) = (m.pods, m.objects);
    Update { source: SourceId::Http, pods, objects, errors: vec![], payloads: vec![payload], leaving: vec![] }
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
    /// The last 200 (body and signature), good or bad: a bad payload served again is not
    /// re-parsed. Shared with the snapshot that delivered it.
    last_body: Option<Arc<Payload>>,
    /// With signatures trusted: the newest version accepted for the payload and its items.
    versions: Option<Versions>,
    validators: Validators,
    failures: u32,
    delivered: bool,
}

impl Poller {
    fn shown(&self) -> String {
        redact_url(&self.cfg.url)
    }

    /// The payload as a whole is an item of its own (for the URL configured): an old signed
    /// payload, an empty one included, cannot be replayed over a newer one.
    fn payload_item(&self) -> String {
        format!("payload {}", url_hash(&self.cfg.url))
    }

    /// Handles one poll result; returns the snapshot to send, if any.
    fn handle(&mut self, result: Result<Fetched, Error>) -> Option<Update> {
        match result {
            Ok(Fetched::NotModified) => {
                self.failures = 0;
                super::source_success("http");
                None
            }
            Ok(Fetched::Body { bytes, etag, last_modified, signature }) => {
                self.failures = 0;
                let payload = Arc::new(Payload { origin: Origin::Url(self.cfg.url.clone()), bytes, signature });
                if self.last_body.as_ref() == Some(&payload) {
                    return None;
                }
                self.last_body = Some(payload.clone());
                let validators = Validators { etag, last_modified };
                match self.take(&payload) {
                    Ok(update) => {
                        match payload.blank() {
                            true => {
                                log::warn!("URL source: {} returned an empty body; removing its pods", self.shown())
                            }
                            false => log::info!(
                                "URL source: {} delivered {} pod(s) and {} object(s)",
                                self.shown(),
                                update.pods.len(),
                                update.objects.len()
                            ),
                        }
                        super::source_success("http");
                        self.accept(&payload, validators);
                        Some(update)
                    }
                    Err(e) => {
                        log::error!("URL source: payload rejected, keeping the previous pods:\n{e}");
                        crate::metrics::add(&crate::metrics::SOURCE_ERRORS, &[("source", "http")], 1.0);
                        if self.delivered {
                            return None;
                        }
                        // Nothing served yet (a captive portal's page at boot, say): the last
                        // good payload from disk, as when the URL cannot be reached.
                        let cached = self.serve_cached();
                        self.last_body = Some(payload);
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

    /// A new payload as a snapshot: opened (its signature first), then the one trust decision
    /// for it (refused whole when older than what was accepted for it or any of its items; its
    /// version recorded before it is used, or refused when that cannot be written).
    fn take(&mut self, payload: &Arc<Payload>) -> Result<Update, pod::ManifestError> {
        let opened = self.cfg.intake.open(payload)?;
        let claim = claim(&opened, Some(self.payload_item()));
        if let Some(versions) = &mut self.versions {
            if let Some(why) = versions.decide(&[claim]).remove(0) {
                crate::metrics::add(&crate::metrics::SIGNATURE_REFUSALS, &[("source", "http")], 1.0);
                let problems = vec![pod::Finding::new("signature", why)];
                return Err(pod::ManifestError { origin: payload.shown(), problems });
            }
        }
        for w in &opened.manifests.warnings {
            log::warn!("URL source: {}: {w}", self.shown());
        }
        Ok(snapshot(opened.manifests, payload.clone()))
    }

    /// Takes a good payload into use: validators for the next poll, and the disk copy.
    fn accept(&mut self, payload: &Payload, validators: Validators) {
        self.validators = validators.clone();
        self.delivered = true;
        let Some(path) = &self.cache else { return };
        let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
        let signature = payload.signature.as_deref().map(text);
        let record = CacheRecord::new(&self.cfg.url, validators, text(&payload.bytes), signature);
        if let Err(e) = write_cache(path, &record) {
            log::warn!("URL source: cannot keep the payload in {}: {e}", path.display());
        }
    }

    /// At start with the URL unreachable: the last good payload from disk, opened again (its
    /// signature checked under the trust of the moment, and against anti-rollback).
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
        let payload = Arc::new(Payload {
            origin: Origin::Url(self.cfg.url.clone()),
            bytes: record.body.into_bytes(),
            signature: record.signature.map(String::into_bytes),
        });
        let opened = self.cfg.intake.open(&payload).map_err(|e| e.to_string());
        let refused = opened.as_ref().ok().and_then(|o| {
            let claim = claim(o, Some(self.payload_item()));
            self.versions.as_ref().and_then(|v| v.check(&claim))
        });
        let opened = match (opened, refused) {
            (Ok(o), None) => o,
            (Err(why), _) | (Ok(_), Some(why)) => {
                log::warn!("URL source: the cached payload in {} is not used: {why}", path.display());
                return None;
            }
        };
        log::warn!(
            "URL source: {} unreachable; serving the last good payload from {} (fetched {}, {} pod(s))",
            self.shown(),
            path.display(),
            record.fetched_at,
            opened.manifests.pods.len()
        );
        self.validators = record.validators;
        self.delivered = true;
        self.last_body = Some(payload.clone());
        Some(snapshot(opened.manifests, payload))
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
    let signed = cfg.intake.trust.is_some();
    let versions = signed.then(|| Versions::open(cfg.versions.clone()));
    let mut poller = Poller {
        cfg,
        cache,
        last_body: None,
        versions,
        validators: Validators::default(),
        failures: 0,
        delivered: false,
    };
    loop {
        // The poll, the checks and the disk copy (written and synced) run off the executor.
        let c = client.clone();
        let (back, update) = crate::task::unblock(move || {
            let result = c.fetch(&poller.validators, signed);
            let update = poller.handle(result);
            (poller, update)
        })
        .await;
        poller = back;
        if let Some(update) = update {
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
        assert!(parse_header_flag("novalue").unwrap_err().to_string().contains("not Name:value"));
        assert!(parse_header_flag("bad name:v").unwrap_err().to_string().contains("not a valid header name"));
    }

    #[test]
    fn the_cache_belongs_to_one_url_and_keeps_no_credentials() {
        let dir = std::env::temp_dir().join(format!("atoll-cache-test-{}", std::process::id()));
        let url = "https://user:pw@127.0.0.1/a?token=s3cret";
        let path = cache_path(&dir, url);
        let validators = Validators { etag: Some("\"v1\"".into()), last_modified: None };
        let rec = CacheRecord::new(url, validators, "x".into(), None);
        write_cache(&path, &rec).unwrap();
        assert_eq!(read_cache(&path, url), Some(rec));
        assert_eq!(read_cache(&path, "http://127.0.0.1/other"), None);
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(!text.contains("s3cret") && !text.contains("pw@"), "{text}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
