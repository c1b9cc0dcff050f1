//! One certificate through the certificates API, as client-go's `csr` package asks for it: a
//! `CertificateSigningRequest` (certificates.k8s.io/v1) created by name (kubelet's bootstrap
//! names it from a digest of the key and subject, so a retry finds its own) or with
//! `generateName: csr-` (rotation), then listed and watched by `metadata.name` until it is
//! approved and signed, denied, failed, deleted or replaced, or the wait times out. What it
//! says when one of those happens is client-go's wording, so an operator's searches find it.
//!
//! [`verdict`] reads one state of the object and is pure; the requests are at the edges.

use crate::mirror::apiserver::Client;
use serde_json::{json, Value};
use std::fmt;
use std::time::{Duration, Instant};

/// The signer of kubelets' client certificates.
pub const CLIENT_SIGNER: &str = "kubernetes.io/kube-apiserver-client-kubelet";
/// The signer of kubelets' serving certificates.
pub const SERVING_SIGNER: &str = "kubernetes.io/kubelet-serving";

const PATH: &str = "/apis/certificates.k8s.io/v1/certificatesigningrequests";

/// Why no certificate came.
#[derive(Debug)]
pub enum Failure {
    /// The API server could not be asked (transport, credentials).
    Api(crate::mirror::Error),
    /// The create was refused (its status and the server's message).
    NotCreated {
        status: u16,
        message: String,
    },
    /// A CSR of that name exists for another key or subject.
    NotCompatible(String),
    Denied {
        reason: String,
        message: String,
    },
    Failed {
        reason: String,
        message: String,
    },
    Deleted(String),
    ChangedUid(String),
    /// Approved with a `status.certificate` that is not base64 or holds no certificate.
    BadCertificate(String),
    /// Not approved and signed within the wait.
    TimedOut,
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Failure::Api(e) => write!(f, "{e}"),
            Failure::NotCreated { status, message } => {
                write!(f, "cannot create certificate signing request: {message} (HTTP {status})")
            }
            Failure::NotCompatible(why) => write!(f, "retrieved csr is not compatible: {why}"),
            Failure::Denied { reason, message } => {
                write!(f, "certificate signing request is denied, reason: {reason}, message: {message}")
            }
            Failure::Failed { reason, message } => {
                write!(f, "certificate signing request failed, reason: {reason}, message: {message}")
            }
            Failure::Deleted(name) => write!(f, "csr {name:?} was deleted"),
            Failure::ChangedUid(name) => write!(f, "csr {name:?} changed UIDs"),
            Failure::BadCertificate(why) => write!(f, "the issued certificate cannot be used: {why}"),
            Failure::TimedOut => write!(f, "timed out waiting for the condition"),
        }
    }
}

impl Failure {
    /// Whether this CSR will never be signed (denied, failed, gone, not ours): asking again
    /// needs a new one.
    pub fn is_final(&self) -> bool {
        matches!(
            self,
            Failure::Denied { .. }
                | Failure::Failed { .. }
                | Failure::Deleted(_)
                | Failure::ChangedUid(_)
                | Failure::NotCompatible(_)
        )
    }
}

impl From<crate::mirror::Error> for Failure {
    fn from(e: crate::mirror::Error) -> Failure {
        Failure::Api(e)
    }
}

/// What is asked for.
pub struct Ask<'a> {
    /// `None`: `generateName: csr-`.
    pub name: Option<&'a str>,
    pub signer: &'a str,
    pub usages: &'a [&'a str],
    /// The PKCS#10 request, PEM.
    pub request_pem: &'a str,
    /// `spec.expirationSeconds` (kubelet leaves it unset: the signer's duration applies).
    pub expiration_seconds: Option<u32>,
}

/// The object client-go sends (username, uid and groups are the server's to set).
pub fn object(ask: &Ask) -> Value {
    let metadata = match ask.name {
        Some(n) => json!({ "name": n }),
        None => json!({ "generateName": "csr-" }),
    };
    let mut spec = json!({
        "request": crate::base64::encode(ask.request_pem.as_bytes()),
        "signerName": ask.signer,
        "usages": ask.usages,
    });
    if let (Some(s), Some(obj)) = (ask.expiration_seconds, spec.as_object_mut()) {
        obj.insert("expirationSeconds".into(), json!(s));
    }
    json!({"apiVersion": "certificates.k8s.io/v1", "kind": "CertificateSigningRequest", "metadata": metadata, "spec": spec})
}

/// Creates the CSR; its name and UID. A named CSR that already exists is taken when it is for
/// the same key `spki` (a retry after a crash), as client-go's `ensureCompatible`.
pub fn create(client: &Client, ask: &Ask, spki: &[u8]) -> Result<(String, String), Failure> {
    let r = client.call("POST", PATH, "application/json", Some(&object(ask)))?;
    let named = |v: &Value| {
        let meta = &v["metadata"];
        (meta["name"].as_str().unwrap_or_default().to_string(), meta["uid"].as_str().unwrap_or_default().to_string())
    };
    match (r.status, ask.name) {
        (200 | 201, _) => {
            let (name, uid) = named(&r.body);
            // The name goes into paths: a server's odd answer is refused, not followed.
            let usable = !name.is_empty()
                && name.len() <= 253
                && name.bytes().all(|b| b.is_ascii_alphanumeric() || b"-._".contains(&b));
            if !usable {
                return Err(Failure::NotCreated { status: r.status, message: format!("the server named it {name:?}") });
            }
            Ok((name, uid))
        }
        (409, Some(name)) if r.reason() == "AlreadyExists" => {
            log::info!("csr for this node already exists, reusing");
            let got = client.call("GET", &format!("{PATH}/{name}"), "", None)?;
            if !got.ok() {
                return Err(Failure::NotCreated { status: got.status, message: got.describe() });
            }
            compatible(&got.body, ask, spki).map_err(Failure::NotCompatible)?;
            Ok(named(&got.body))
        }
        (status, _) => Err(Failure::NotCreated { status, message: r.describe() }),
    }
}

/// Whether an existing CSR of the same name is ours to wait on, as client-go's
/// `ensureCompatible` decides: a request for the same key (`spki`), the same signer, and no
/// issued certificate that has expired.
fn compatible(existing: &Value, ask: &Ask, spki: &[u8]) -> Result<(), String> {
    let spec = &existing["spec"];
    use rustls::pki_types::{pem::PemObject, CertificateSigningRequestDer};
    let pem = spec["request"].as_str().and_then(|r| crate::base64::decode(r).ok()).unwrap_or_default();
    let der = CertificateSigningRequestDer::from_pem_slice(&pem).map(|d| d.as_ref().to_vec()).unwrap_or_default();
    if !crate::x509::for_key(&der, spki) {
        return Err("the existing request is for another key".into());
    }
    if spec["signerName"].as_str() != Some(ask.signer) {
        return Err(format!("csr signerNames differ: new {:?}, orig: {}", ask.signer, spec["signerName"]));
    }
    let issued =
        existing["status"]["certificate"].as_str().and_then(|c| crate::base64::decode(c).ok()).unwrap_or_default();
    let now = std::time::SystemTime::now();
    for cert in crate::tls::pem_chain(&issued) {
        if crate::x509::validity(&cert).is_some_and(|(_, end)| now > end) {
            return Err("one of the certificates for the CSR has expired".into());
        }
    }
    Ok(())
}

/// Where one state of the CSR leaves the wait: `None` to go on waiting, else the certificate
/// (PEM) or why none will come. `kind` is the watch event's type (`ADDED` for a listed one).
pub fn verdict(kind: &str, csr: &Value, name: &str, uid: &str) -> Option<Result<Vec<u8>, Failure>> {
    match kind {
        "ADDED" | "MODIFIED" => {}
        "DELETED" => return Some(Err(Failure::Deleted(name.to_string()))),
        _ => return None,
    }
    if csr["metadata"]["uid"].as_str() != Some(uid) {
        return Some(Err(Failure::ChangedUid(name.to_string())));
    }
    let text = |c: &Value, k: &str| c[k].as_str().unwrap_or_default().to_string();
    let mut approved = false;
    for c in csr["status"]["conditions"].as_array().into_iter().flatten() {
        match c["type"].as_str() {
            Some("Denied") => {
                return Some(Err(Failure::Denied { reason: text(c, "reason"), message: text(c, "message") }))
            }
            Some("Failed") => {
                return Some(Err(Failure::Failed { reason: text(c, "reason"), message: text(c, "message") }))
            }
            Some("Approved") => approved = true,
            _ => {}
        }
    }
    let issued = csr["status"]["certificate"].as_str().filter(|c| !c.is_empty())?;
    if !approved {
        return None;
    }
    Some(match crate::base64::decode(issued) {
        Ok(pem) if !crate::tls::pem_chain(&pem).is_empty() => Ok(pem),
        Ok(_) => Err(Failure::BadCertificate("no PEM certificate in status.certificate".into())),
        Err(e) => Err(Failure::BadCertificate(format!("status.certificate: {e}"))),
    })
}

/// Waits for the CSR `name` (of `uid`) to be signed, listing then watching it by name, for at
/// most `wait`. A broken watch is taken up again from a new list.
pub fn wait(client: &Client, name: &str, uid: &str, wait: Duration) -> Result<Vec<u8>, Failure> {
    let until = Instant::now() + wait;
    let selector = format!("fieldSelector=metadata.name%3D{name}");
    loop {
        let left = until.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(Failure::TimedOut);
        }
        let list = match client.call("GET", &format!("{PATH}?{selector}"), "", None) {
            Ok(l) if l.ok() => l,
            Ok(l) => {
                log::info!("csr {name}: listing it: {}", l.describe());
                std::thread::sleep(Duration::from_secs(1).min(left));
                continue;
            }
            Err(e) => {
                log::info!("csr {name}: listing it: {e}");
                std::thread::sleep(Duration::from_secs(1).min(left));
                continue;
            }
        };
        for item in list.body["items"].as_array().into_iter().flatten() {
            if let Some(done) = verdict("ADDED", item, name, uid) {
                return done;
            }
        }
        let rv = list.body["metadata"]["resourceVersion"].as_str().unwrap_or_default().to_string();
        let seconds = left.as_secs().clamp(1, 300);
        let path = format!(
            "{PATH}?{selector}&watch=true&allowWatchBookmarks=true&resourceVersion={rv}&timeoutSeconds={seconds}"
        );
        let mut done = None;
        let watched = client.watch(&path, Duration::from_secs(seconds), &mut |event| {
            let kind = event["type"].as_str().unwrap_or_default().to_string();
            done = verdict(&kind, &event["object"], name, uid);
            done.is_none()
        });
        if let Some(d) = done {
            return d;
        }
        if let Err(e) = watched {
            log::info!("csr {name}: watching it: {e}");
            std::thread::sleep(Duration::from_secs(1).min(until.saturating_duration_since(Instant::now())));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn csr(uid: &str, conditions: Value, certificate: Option<&str>) -> Value {
        let mut status = json!({ "conditions": conditions });
        if let Some(c) = certificate {
            status["certificate"] = json!(c);
        }
        json!({"metadata": {"name": "csr-1", "uid": uid}, "status": status})
    }

    const CERT_PEM: &str = "-----BEGIN CERTIFICATE-----\nMAA=\n-----END CERTIFICATE-----\n";

    #[test]
    fn the_waits_verdicts_are_client_gos() {
        let signed = crate::base64::encode(CERT_PEM.as_bytes());
        let approved = json!([{"type": "Approved", "status": "True", "reason": "AutoApproved"}]);
        let denied = json!([{"type": "Denied", "status": "True", "reason": "Nope", "message": "not you"}]);
        let failed =
            json!([{"type": "Approved"}, {"type": "Failed", "reason": "SignerValidationFailure", "message": "bad"}]);
        let say = |v: Option<Result<Vec<u8>, Failure>>| match v {
            None => "wait".to_string(),
            Some(Ok(pem)) => format!("ok {}", pem.len()),
            Some(Err(e)) => e.to_string(),
        };
        type Case<'a> = (&'a str, &'a str, Value, &'a str);
        let cases: Vec<Case> = vec![
            ("pending", "ADDED", csr("u", json!([]), None), "wait"),
            ("approved, not yet signed", "MODIFIED", csr("u", approved.clone(), None), "wait"),
            ("signed before approval shows", "MODIFIED", csr("u", json!([]), Some(&signed)), "wait"),
            ("approved and signed", "MODIFIED", csr("u", approved.clone(), Some(&signed)), "ok 59"),
            (
                "denied",
                "MODIFIED",
                csr("u", denied, None),
                "certificate signing request is denied, reason: Nope, message: not you",
            ),
            (
                "failed",
                "MODIFIED",
                csr("u", failed, None),
                "certificate signing request failed, reason: SignerValidationFailure, message: bad",
            ),
            ("deleted", "DELETED", csr("u", json!([]), None), "csr \"csr-1\" was deleted"),
            ("replaced", "MODIFIED", csr("other", approved.clone(), Some(&signed)), "csr \"csr-1\" changed UIDs"),
            ("a bookmark", "BOOKMARK", csr("", json!([]), None), "wait"),
            (
                "not base64",
                "MODIFIED",
                csr("u", approved.clone(), Some("%%")),
                "the issued certificate cannot be used: status.certificate: ",
            ),
            (
                "no certificate in it",
                "MODIFIED",
                csr("u", approved, Some("aGVsbG8=")),
                "the issued certificate cannot be used: no PEM certificate in status.certificate",
            ),
        ];
        for (what, kind, obj, want) in cases {
            let got = say(verdict(kind, &obj, "csr-1", "u"));
            assert!(got.starts_with(want), "{what}: {got:?}, want {want:?}");
        }
    }

    #[test]
    fn the_object_is_client_gos_and_compatibility_is_key_signer_and_a_live_certificate() {
        let usages = ["digital signature", "client auth"];
        let key = crate::x509::new_key().unwrap();
        let spki = crate::x509::spki(&key).unwrap();
        let subject = crate::x509::Subject { common_name: "system:node:edge-1", organizations: &["system:nodes"] };
        let pem = crate::x509::pem("CERTIFICATE REQUEST", &crate::x509::csr(&key, &subject, &[]).unwrap());
        let ask = Ask {
            name: Some("node-csr-x"),
            signer: CLIENT_SIGNER,
            usages: &usages,
            request_pem: &pem,
            expiration_seconds: None,
        };
        let o = object(&ask);
        assert_eq!(o["metadata"], json!({"name": "node-csr-x"}));
        assert_eq!(o["spec"]["signerName"], CLIENT_SIGNER);
        assert_eq!(o["spec"]["usages"], json!(usages));
        assert_eq!(crate::base64::decode(o["spec"]["request"].as_str().unwrap()).unwrap(), pem.as_bytes());
        let generated = object(&Ask { name: None, expiration_seconds: Some(3600), ..ask });
        assert_eq!(generated["metadata"], json!({"generateName": "csr-"}));
        assert_eq!(generated["spec"]["expirationSeconds"], 3600);
        // Another signature over the same key and subject (ECDSA's differ each time) is ours.
        let again = crate::x509::pem("CERTIFICATE REQUEST", &crate::x509::csr(&key, &subject, &[]).unwrap());
        assert_eq!(compatible(&o, &Ask { request_pem: &again, ..ask }, &spki), Ok(()));
        let other = crate::x509::spki(&crate::x509::new_key().unwrap()).unwrap();
        assert!(compatible(&o, &ask, &other).is_err(), "another key");
        assert!(compatible(&o, &Ask { signer: SERVING_SIGNER, ..ask }, &spki).is_err());
    }
}
