//! The API server client: the kubeconfig's server, CA, client certificate or bearer token,
//! over HTTP/2 where the server offers it (`h2.rs`, as kubelet's client) and HTTP/1.1
//! otherwise (`http1.rs`). Blocking calls with a deadline each, made from the mirror's own
//! threads, so nothing here can hold up the pod engine.
//!
//! Answers are returned whatever their status; transport failures (refused, reset, timed
//! out, TLS) are errors. A bearer token file is re-read when it changes on disk (rotated
//! tokens apply without a restart).

pub use super::error::Error;
use super::error::{Kind, Problem};
use super::h2::H2;
use super::http1::Http1;
use super::kubeconfig::{Connection, Source};
use super::wire::Ask;
pub use super::wire::{Answer, Reply, REQUEST_TIMEOUT};
use std::sync::{Arc, Mutex, PoisonError, RwLock};
use std::time::{Duration, Instant, SystemTime};

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

pub struct Client {
    /// Made again, whole, when the client certificate is renewed.
    transport: RwLock<Arc<Transport>>,
    conn: Connection,
    server: String,
    token: Option<Token>,
    /// Where the kubeconfig came from, for log lines.
    pub context: String,
    /// Until when the server asked this node to wait (a 429's or 503's Retry-After), when
    /// every request waits for it (`holding`): the mirror's loops then send nothing while the
    /// node is told to wait, whichever of them was told.
    hold: Option<Mutex<Option<Instant>>>,
}

/// The connections, made for one client identity.
struct Transport {
    /// None for an `http://` server, or when a proxy is set in the environment.
    h2: Option<H2>,
    http1: Http1,
    /// When the client certificate ends.
    certificate_end: Option<SystemTime>,
}

struct Token {
    source: Source,
    /// The file's modification time and the token read then.
    cached: Mutex<Option<(SystemTime, String)>>,
}

impl Token {
    fn value(&self) -> Result<String, Error> {
        let read = || self.source.read().map(|b| String::from_utf8_lossy(&b).trim().to_string());
        let Source::File(path) = &self.source else { return read() };
        let mtime = std::fs::metadata(path)
            .and_then(|m| m.modified())
            .map_err(|e| Error::from(Kind::Read { path: path.clone(), why: e.to_string() }))?;
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

impl Client {
    /// The client for the current context of the kubeconfig at `path`; errors name the file.
    pub fn from_kubeconfig(path: &std::path::Path) -> Result<Client, Error> {
        let conn = super::kubeconfig::load(path, None)?;
        Client::new(&conn).map_err(|e| {
            Error::from(Kind::Kubeconfig { file: path.display().to_string(), problem: Problem::Client(e) })
        })
    }

    pub fn new(conn: &Connection) -> Result<Client, Error> {
        let lower = conn.server.to_ascii_lowercase();
        if !(lower.starts_with("https://") || lower.starts_with("http://")) {
            return Err(Error::from(Kind::Server { server: conn.server.clone(), why: "not an http(s) URL".into() }));
        }
        let identity = match (&conn.client_certificate, &conn.client_key) {
            (Some(cert), Some(key)) => Some((cert.read()?, key.read()?)),
            (None, None) => None,
            _ => return Err(setting("client-certificate and client-key", "go together")),
        };
        let transport = Transport::new(conn, identity)?;
        let token = conn.token.clone().map(|source| Token { source, cached: Mutex::new(None) });
        Ok(Client {
            transport: RwLock::new(Arc::new(transport)),
            conn: conn.clone(),
            server: conn.server.trim_end_matches('/').to_string(),
            token,
            context: conn.context.clone(),
            hold: None,
        })
    }

    /// From now on, new connections present `cert` (a PEM chain) and `key` (PEM): a renewed
    /// client certificate. Requests and watches in progress finish on their own connection.
    pub fn use_identity(&self, cert: &[u8], key: &[u8]) -> Result<(), Error> {
        let transport = Arc::new(Transport::new(&self.conn, Some((cert.to_vec(), key.to_vec())))?);
        *self.transport.write().unwrap_or_else(PoisonError::into_inner) = transport;
        Ok(())
    }

    /// When the client certificate in use ends (None: it presents none, or its end cannot be
    /// read; kubelet shows either as a TTL of +Inf).
    pub fn certificate_end(&self) -> Option<SystemTime> {
        self.transport().certificate_end
    }

    fn transport(&self) -> Arc<Transport> {
        self.transport.read().unwrap_or_else(PoisonError::into_inner).clone()
    }

    /// A client whose every request waits out a Retry-After the server gave any of them (the
    /// mirror's; others, as the kubelet server's reviews, fail fast instead).
    pub fn holding(mut self) -> Client {
        self.hold = Some(Mutex::new(None));
        self
    }

    /// Waits out a Retry-After in force, including one another request was given meanwhile.
    fn wait_as_told(&self) {
        let Some(hold) = &self.hold else { return };
        loop {
            let left = crate::locks::lock(hold).map_or(Duration::ZERO, |u| u.saturating_duration_since(Instant::now()));
            if left.is_zero() {
                return;
            }
            std::thread::sleep(left);
        }
    }

    /// Notes an answer's Retry-After (429, 503), spread as the back-off spreads it.
    fn told(&self, a: &Answer) {
        let (Some(hold), Some(ra), 429 | 503) = (&self.hold, a.retry_after, a.status) else { return };
        let until = Instant::now() + super::retry::retry_after(ra);
        let mut h = crate::locks::lock(hold);
        *h = Some(h.map_or(until, |was| was.max(until)));
    }

    /// The API server's URL.
    pub fn server(&self) -> &str {
        &self.server
    }

    fn ask<'a>(
        &self,
        method: &'a str,
        path: &'a str,
        content_type: &'a str,
        accept: &'a str,
        body: &'a [u8],
    ) -> Result<Ask<'a>, Error> {
        let bearer = match &self.token {
            Some(t) => Some(format!("Bearer {}", t.value()?)),
            None => None,
        };
        Ok(Ask { method, path, content_type, accept, bearer, body })
    }

    fn exchange(&self, ask: &Ask<'_>) -> Result<Answer, Error> {
        let transport = self.transport();
        if let Some(h2) = transport.h2() {
            match h2.call(ask, REQUEST_TIMEOUT) {
                // The server turned out to speak HTTP/1.1 only: this request goes that way.
                Err(_) if !h2.offered() => {}
                r => return r,
            }
        }
        transport.http1.call(ask)
    }

    /// One request with a body of `content_type` (or none), asking for `accept`; the answer
    /// as it came, whatever its status.
    pub fn call_bytes(
        &self,
        method: &str,
        path: &str,
        content_type: &str,
        accept: &str,
        body: &[u8],
    ) -> Result<Answer, Error> {
        let ask = self.ask(method, path, content_type, accept, body)?;
        self.wait_as_told();
        let started = std::time::Instant::now();
        let result = self.exchange(&ask);
        if let Ok(a) = &result {
            self.told(a);
        }
        let took = started.elapsed();
        let code = result.as_ref().map_or_else(|_| "error".to_string(), |a| a.status.to_string());
        crate::metrics::add(&crate::metrics::MIRROR_REQUESTS, &[("verb", method), ("code", &code)], 1.0);
        if result.is_ok() {
            crate::metrics::add(&crate::metrics::MIRROR_SECONDS, &[("verb", method)], took.as_secs_f64());
        }
        result.map_err(|e| Error::from(Kind::Request { method: method.to_string(), path: path.to_string(), why: e }))
    }

    /// One request with a JSON body (or none); the answer's JSON (Null when not JSON).
    pub fn call(
        &self,
        method: &str,
        path: &str,
        content_type: &str,
        body: Option<&serde_json::Value>,
    ) -> Result<Reply, Error> {
        let bytes = body.map(|b| serde_json::to_vec(b).unwrap_or_default()).unwrap_or_default();
        let reply = self.call_bytes(method, path, content_type, "application/json", &bytes)?.reply();
        // A success answers with an object (the resource, or a Status); anything else is a
        // broken or hostile server, never something to index into.
        if reply.ok() && !reply.body.is_object() {
            return Err(Error::from(Kind::NotAnObject {
                method: method.to_string(),
                path: path.to_string(),
                status: reply.status,
            }));
        }
        Ok(reply)
    }

    /// A watch (one copy of the transports' code for every caller: `each` is dynamic): calls
    /// `each` with every event object (`{"type": ..., "object": ...}`) until
    /// the server ends the stream (after `timeout`) or `each` returns false. Returns the
    /// status of a refused watch (410 when the resourceVersion is too old) as a Reply.
    pub fn watch(
        &self,
        path: &str,
        timeout: Duration,
        each: &mut dyn FnMut(serde_json::Value) -> bool,
    ) -> Result<Option<Reply>, Error> {
        let ask = self.ask("GET", path, "", "application/json", &[])?;
        self.wait_as_told();
        // The server ends the watch after timeoutSeconds; a silent connection ends here.
        let limit = timeout + Duration::from_secs(30);
        let mut bad = None;
        let mut on_line = |line: &[u8]| {
            if line.iter().all(u8::is_ascii_whitespace) {
                return true;
            }
            match crate::parse::json(line) {
                Ok(event) if event["object"].is_object() => each(event),
                Ok(_) => {
                    bad = Some("an event without an object".to_string());
                    false
                }
                Err(e) => {
                    bad = Some(format!("an event that is not JSON: {e}"));
                    false
                }
            }
        };
        let mut result = None;
        let transport = self.transport();
        if let Some(h2) = transport.h2() {
            match h2.watch(&ask, limit, &mut on_line) {
                Err(_) if !h2.offered() => {}
                r => result = Some(r),
            }
        }
        let result = match result {
            Some(r) => r,
            None => transport.http1.watch(&ask, limit, &mut on_line),
        };
        let answer = result.map_err(|e| Error::from(Kind::Watch { path: Some(path.to_string()), why: e }))?;
        if let Some(why) = bad {
            return Err(Error::from(Kind::Watch { path: None, why: Error::from(Kind::Transport(why)) }));
        }
        let status = answer.as_ref().map_or(200, |a| a.status);
        crate::metrics::add(&crate::metrics::MIRROR_REQUESTS, &[("verb", "WATCH"), ("code", &status.to_string())], 1.0);
        if let Some(a) = &answer {
            self.told(a);
        }
        Ok(answer.map(|a| a.reply()))
    }
}

impl Transport {
    /// The connections for `conn`'s server and CA, presenting `identity` (PEM certificate
    /// chain and key) when given.
    fn new(conn: &Connection, identity: Option<(Vec<u8>, Vec<u8>)>) -> Result<Transport, Error> {
        use rustls::pki_types::pem::PemObject;
        let roots = match &conn.ca {
            Some(ca) => ca.read()?,
            None => crate::tls::system_bundle(),
        };
        let store = crate::tls::pem_roots(&roots);
        if store.is_none() && conn.ca.is_some() {
            return Err(setting("certificate-authority", "no PEM certificates in it"));
        }
        // The TLS library's checks of the pair, whichever transport is used.
        let mut certificate_end = None;
        let rustls_identity = match &identity {
            Some((cert, key)) => {
                let chain = crate::tls::pem_chain(cert);
                if chain.is_empty() {
                    return Err(setting("client-certificate", "no PEM certificate in it"));
                }
                certificate_end = chain.first().and_then(|c| crate::x509::validity(c)).map(|(_, until)| until);
                let key = rustls::pki_types::PrivateKeyDer::from_pem_slice(key)
                    .map_err(|e| setting("client-key", &format!("not a PEM private key: {e}")))?;
                Some((chain, key))
            }
            None => None,
        };
        let verify =
            if conn.insecure_skip_tls_verify { None } else { Some(store.unwrap_or_else(rustls::RootCertStore::empty)) };
        let tls = crate::tls::client_config(verify, rustls_identity, &[b"h2", b"http/1.1"])
            .map_err(|e| setting("client-certificate and client-key", &format!("cannot be used together: {e}")))?;
        let https = conn.server.to_ascii_lowercase().starts_with("https://");
        let http1 = Http1::new(conn, tls.clone());
        let h2 = if https && !http1.proxied() { Some(H2::new(&conn.server, tls)?) } else { None };
        Ok(Transport { h2, http1, certificate_end })
    }

    /// The HTTP/2 transport while the server offers it.
    fn h2(&self) -> Option<&H2> {
        self.h2.as_ref().filter(|h| h.offered())
    }
}

fn setting(what: &'static str, why: &str) -> Error {
    Error::from(Kind::Setting { what, why: why.to_string() })
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
