//! The API server connection: HTTPS (rustls through ureq) with the kubeconfig's CA, client
//! certificate or bearer token. Blocking calls with a deadline each, made from the mirror's
//! own threads, so nothing here can hold up the pod engine.
//!
//! Answers are returned whatever their status; transport failures (refused, reset, timed
//! out, TLS) are errors. A bearer token file is re-read when it changes on disk (rotated
//! tokens apply without a restart).

use super::kubeconfig::{Connection, Source};
use std::io::{BufRead, Read as _};
use std::sync::Mutex;
use std::time::{Duration, SystemTime};

/// The deadline of one request (the whole exchange, body included).
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);
/// The largest answer read (a pod list of a busy node stays far below).
const MAX_BODY: u64 = 16 << 20;

/// One answer from the API server.
#[derive(Debug)]
pub struct Reply {
    pub status: u16,
    pub body: serde_json::Value,
    /// `Retry-After` in seconds (429 and 503 answers).
    pub retry_after: Option<Duration>,
}

/// Sets `value` at `path` in a JSON object from a server, creating objects where nothing is,
/// and refusing (false) where something else is: `v["a"]["b"] = x` panics on a list or a
/// string, and release builds abort on panic.
pub fn set_path(v: &mut serde_json::Value, path: &[&str], value: serde_json::Value) -> bool {
    let Some((last, parents)) = path.split_last() else { return false };
    let mut at = v;
    for p in parents {
        if at.is_null() {
            *at = serde_json::json!({});
        }
        let Some(obj) = at.as_object_mut() else { return false };
        at = obj.entry(p.to_string()).or_insert(serde_json::Value::Null);
    }
    if at.is_null() {
        *at = serde_json::json!({});
    }
    match at.as_object_mut() {
        Some(obj) => {
            obj.insert(last.to_string(), value);
            true
        }
        None => false,
    }
}

impl Reply {
    pub fn ok(&self) -> bool {
        (200..300).contains(&self.status)
    }

    /// The `reason` of a Status answer (`AlreadyExists`, `Conflict`, `NotFound`, ...).
    pub fn reason(&self) -> &str {
        self.body["reason"].as_str().unwrap_or("")
    }

    /// The status and message of a failed answer, for logs and local reports.
    pub fn describe(&self) -> String {
        match self.body["message"].as_str() {
            Some(m) => format!("HTTP {}: {m}", self.status),
            None => format!("HTTP {}", self.status),
        }
    }
}

pub struct Client {
    agent: ureq::Agent,
    server: String,
    token: Option<Token>,
    /// Where the kubeconfig came from, for log lines.
    pub context: String,
}

struct Token {
    source: Source,
    /// The file's modification time and the token read then.
    cached: Mutex<Option<(SystemTime, String)>>,
}

impl Token {
    fn value(&self) -> Result<String, String> {
        let read = || self.source.read().map(|b| String::from_utf8_lossy(&b).trim().to_string());
        let Source::File(path) = &self.source else { return read() };
        let mtime =
            std::fs::metadata(path).and_then(|m| m.modified()).map_err(|e| format!("{}: {e}", path.display()))?;
        let mut cached = crate::locks::lock(&self.cached);
        match &*cached {
            Some((when, token)) if *when == mtime => Ok(token.clone()),
            _ => {
                let token = read()?;
                *cached = Some((mtime, token.clone()));
                Ok(token)
            }
        }
    }
}

/// Whether TLS can use this certificate and key: a key of another certificate, or of a kind
/// the TLS library does not sign with, is refused here, naming the fields (ureq would panic).
fn check_client_cert(cert_pem: &[u8], key_pem: &[u8]) -> Result<(), String> {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::PrivateKeyDer;
    let certs = crate::tls::pem_chain(cert_pem);
    let key = PrivateKeyDer::from_pem_slice(key_pem).map_err(|e| format!("client-key: {e}"))?;
    rustls::ClientConfig::builder_with_provider(std::sync::Arc::new(rustls::crypto::ring::default_provider()))
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .with_root_certificates(rustls::RootCertStore::empty())
        .with_client_auth_cert(certs, key)
        .map(|_| ())
        .map_err(|e| format!("client-certificate and client-key cannot be used together: {e}"))
}

impl Client {
    /// The client for the current context of the kubeconfig at `path`; errors name the file.
    pub fn from_kubeconfig(path: &std::path::Path) -> Result<Client, String> {
        let conn = super::kubeconfig::load(path, None)?;
        Client::new(&conn).map_err(|e| format!("kubeconfig {}: {e}", path.display()))
    }

    pub fn new(conn: &Connection) -> Result<Client, String> {
        let lower = conn.server.to_ascii_lowercase();
        if !(lower.starts_with("https://") || lower.starts_with("http://")) {
            return Err(format!("server {:?}: not an http(s) URL", conn.server));
        }
        let roots = match &conn.ca {
            Some(ca) => {
                let certs = crate::tls::pem_certs(&ca.read()?);
                if certs.is_empty() {
                    return Err("certificate-authority: no PEM certificates in it".into());
                }
                certs
            }
            None => crate::tls::system_roots(),
        };
        let client_cert = match (&conn.client_certificate, &conn.client_key) {
            (Some(cert), Some(key)) => {
                let (cert, key) = (cert.read()?, key.read()?);
                check_client_cert(&cert, &key)?;
                let chain = crate::tls::pem_certs(&cert);
                if chain.is_empty() {
                    return Err("client-certificate: no PEM certificate in it".into());
                }
                let key = ureq::tls::PrivateKey::from_pem(&key)
                    .map_err(|e| format!("client-key: not a PEM private key: {e}"))?;
                Some(ureq::tls::ClientCert::new_with_certs(&chain, key))
            }
            (None, None) => None,
            _ => return Err("client-certificate and client-key go together".into()),
        };
        let tls = ureq::tls::TlsConfig::builder()
            .root_certs(ureq::tls::RootCerts::new_with_certs(&roots))
            .client_cert(client_cert)
            .disable_verification(conn.insecure_skip_tls_verify)
            .build();
        let config = ureq::Agent::config_builder()
            .timeout_global(Some(REQUEST_TIMEOUT))
            .http_status_as_error(false)
            .max_redirects(0)
            // The lease renews every 10 s: keep its connection between renewals.
            .max_idle_age(Duration::from_secs(30))
            .max_idle_connections(4)
            .user_agent(concat!("atoll/", env!("CARGO_PKG_VERSION")))
            .tls_config(tls)
            .build();
        let token = conn.token.clone().map(|source| Token { source, cached: Mutex::new(None) });
        Ok(Client {
            agent: config.into(),
            server: conn.server.trim_end_matches('/').to_string(),
            token,
            context: conn.context.clone(),
        })
    }

    /// The API server's URL.
    pub fn server(&self) -> &str {
        &self.server
    }

    fn request(
        &self,
        method: &str,
        path: &str,
        content_type: &str,
        body: &[u8],
    ) -> Result<http::Request<Vec<u8>>, String> {
        let mut req = http::Request::builder()
            .method(method)
            .uri(format!("{}{path}", self.server))
            .header("Accept", "application/json");
        if !body.is_empty() {
            req = req.header("Content-Type", content_type);
        }
        if let Some(t) = &self.token {
            req = req.header("Authorization", format!("Bearer {}", t.value()?));
        }
        req.body(body.to_vec()).map_err(|e| format!("{method} {path}: {e}"))
    }

    /// One request with a JSON body (or none); the answer's JSON (Null when not JSON).
    pub fn call(
        &self,
        method: &str,
        path: &str,
        content_type: &str,
        body: Option<&serde_json::Value>,
    ) -> Result<Reply, String> {
        let bytes = body.map(|b| serde_json::to_vec(b).unwrap_or_default()).unwrap_or_default();
        let req = self.request(method, path, content_type, &bytes)?;
        let started = std::time::Instant::now();
        let result = self.agent.run(req);
        let took = started.elapsed();
        let mut resp = match result {
            Ok(r) => r,
            Err(e) => {
                crate::metrics::add(&crate::metrics::MIRROR_REQUESTS, &[("verb", method), ("code", "error")], 1.0);
                return Err(format!("{method} {path}: {e}"));
            }
        };
        let status = resp.status().as_u16();
        crate::metrics::add(&crate::metrics::MIRROR_REQUESTS, &[("verb", method), ("code", &status.to_string())], 1.0);
        crate::metrics::add(&crate::metrics::MIRROR_SECONDS, &[("verb", method)], took.as_secs_f64());
        let retry_after = resp
            .headers()
            .get("retry-after")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.trim().parse::<u64>().ok())
            .map(Duration::from_secs);
        let bytes =
            resp.body_mut().with_config().limit(MAX_BODY).read_to_vec().map_err(|e| format!("{method} {path}: {e}"))?;
        let body = crate::parse::json(&bytes).unwrap_or(serde_json::Value::Null);
        // A success answers with an object (the resource, or a Status); anything else is a
        // broken or hostile server, never something to index into.
        if (200..300).contains(&status) && !body.is_object() {
            return Err(format!("{method} {path}: HTTP {status} with a body that is not a JSON object"));
        }
        Ok(Reply { status, body, retry_after })
    }

    /// A watch: calls `each` with every event object (`{"type": ..., "object": ...}`) until
    /// the server ends the stream (after `timeout`) or `each` returns false. Returns the
    /// status of a refused watch (410 when the resourceVersion is too old) as a Reply.
    pub fn watch(
        &self,
        path: &str,
        timeout: Duration,
        mut each: impl FnMut(serde_json::Value) -> bool,
    ) -> Result<Option<Reply>, String> {
        let req = self.request("GET", path, "", &[])?;
        let req = self
            .agent
            .configure_request(req)
            // The server ends the watch after timeoutSeconds; a silent connection ends here.
            .timeout_global(Some(timeout + Duration::from_secs(30)))
            .build();
        let mut resp = self.agent.run(req).map_err(|e| format!("watch {path}: {e}"))?;
        let status = resp.status().as_u16();
        crate::metrics::add(&crate::metrics::MIRROR_REQUESTS, &[("verb", "WATCH"), ("code", &status.to_string())], 1.0);
        if status != 200 {
            let bytes = resp.body_mut().with_config().limit(MAX_BODY).read_to_vec().unwrap_or_default();
            let body = crate::parse::json(&bytes).unwrap_or(serde_json::Value::Null);
            return Ok(Some(Reply { status, body, retry_after: None }));
        }
        let mut reader = std::io::BufReader::new(resp.into_body().into_reader());
        let mut line = Vec::new();
        loop {
            line.clear();
            let n = reader.by_ref().take(MAX_BODY).read_until(b'\n', &mut line).map_err(|e| format!("watch: {e}"))?;
            if n == 0 {
                return Ok(None);
            }
            if line.iter().all(u8::is_ascii_whitespace) {
                continue;
            }
            let event = crate::parse::json(&line).map_err(|e| format!("watch: an event that is not JSON: {e}"))?;
            if !event["object"].is_object() {
                return Err("watch: an event without an object".into());
            }
            if !each(event) {
                return Ok(None);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn fields_are_set_only_where_the_servers_shape_allows() {
        let mut lease = json!({"metadata": {"name": "n"}});
        assert!(set_path(&mut lease, &["metadata", "ownerReferences"], json!([1])));
        assert!(set_path(&mut lease, &["spec"], json!({"a": 1})));
        assert_eq!(lease, json!({"metadata": {"name": "n", "ownerReferences": [1]}, "spec": {"a": 1}}));
        let mut hostile = json!({"metadata": []});
        assert!(!set_path(&mut hostile, &["metadata", "ownerReferences"], json!([])));
        assert!(!set_path(&mut json!([]), &["spec"], json!({})));
        assert!(!set_path(&mut json!("x"), &["status"], json!({})));
    }
}
