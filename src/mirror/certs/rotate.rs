//! Client certificate rotation (`rotateCertificates`), as client-go's certificate manager does
//! it for kubelet: at a jittered point between 70 and 90 % of the certificate's lifetime a new
//! key and a CSR (`generateName: csr-`, usages `digital signature` and `client auth` for the
//! P-256 key) are sent with the current certificate's credentials, or the bootstrap
//! kubeconfig's once it has expired; the signed certificate is stored
//! (`kubelet-client-current.pem`) and the mirror's client presents it on its next connections
//! without a restart, while what is in progress goes on. A failure is counted
//! (`kubelet_certificate_manager_client_expiration_renew_errors`) and retried 2 s doubling five
//! times, then every 32 s; meanwhile the node goes on with the certificate it has. The
//! schedule is `schedule`'s; this file is the loop and its requests.

use super::request::{self, Ask, CLIENT_SIGNER};
use super::schedule;
use super::store::{Pair, Store};
use crate::mirror::apiserver::Client;
use crate::mirror::Options;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

/// How long one renewal waits for its CSR to be signed (client-go's).
pub const WAIT: Duration = Duration::from_secs(15 * 60);
/// The usages of a renewal's CSR for a P-256 key (client-go's `DefaultKubeletClientGetUsages`).
pub const USAGES: [&str; 2] = ["digital signature", "client auth"];

/// The validity of the certificate `client` presents now, and a store's newer one taken into
/// use when there is one (kubelet prefers the store's current certificate over the
/// kubeconfig's files).
pub fn start_with(
    client: &Client,
    store: &Store,
    kubeconfig_cert: Option<(SystemTime, SystemTime)>,
) -> Option<(SystemTime, SystemTime)> {
    let now = SystemTime::now();
    match store.current() {
        Ok(Some(pair)) if now <= pair.not_after && kubeconfig_cert.is_none_or(|(_, end)| pair.not_after > end) => {
            match take(client, &pair) {
                Ok(()) => return Some((pair.not_before, pair.not_after)),
                Err(e) => {
                    log::warn!("certificate rotation: the stored certificate {}: {e}", store.current_path().display())
                }
            }
        }
        Ok(_) => {}
        Err(e) => log::warn!("certificate rotation: {e}"),
    }
    kubeconfig_cert
}

/// Has `client` present `pair` from now on.
fn take(client: &Client, pair: &Pair) -> Result<(), crate::mirror::Error> {
    let cert: String = pair.chain.iter().map(|c| crate::x509::pem("CERTIFICATE", c)).collect();
    let key = crate::x509::pem("PRIVATE KEY", &pair.key_pkcs8);
    client.use_identity(cert.as_bytes(), key.as_bytes())?;
    crate::metrics::certificate(crate::metrics::Certificate::Client, Some(pair.not_after));
    Ok(())
}

/// Rotates the client certificate for as long as the process runs (the body of its thread).
/// `validity`: that of the certificate in use.
pub fn run(client: Arc<Client>, opts: Options, validity: Option<(SystemTime, SystemTime)>) {
    let store = Store::new(&opts.cert_dir, "kubelet-client");
    keep_renewed(crate::metrics::Certificate::Client, validity, |v| renew(&client, &opts, &store, v));
}

/// The rotation loop of either certificate: waits for the deadline the validity gives (none:
/// at once), renews, and on failure counts it and tries again on client-go's back-off.
pub fn keep_renewed(
    which: crate::metrics::Certificate,
    mut validity: Option<(SystemTime, SystemTime)>,
    mut renew: impl FnMut(Option<(SystemTime, SystemTime)>) -> Result<Pair, String>,
) {
    let what = if which == crate::metrics::Certificate::Client { "client" } else { "serving" };
    loop {
        let now = SystemTime::now();
        let deadline = validity.map_or(now, |(from, until)| schedule::deadline(from, until, jitter()));
        if let Ok(wait) = deadline.duration_since(now) {
            log::info!("certificate rotation: the {what} certificate is renewed in {}s", wait.as_secs());
            sleep_until(deadline);
        }
        let mut failures = 0u32;
        loop {
            match renew(validity) {
                Ok(pair) => {
                    let until = crate::rfc3339::format_seconds(pair.not_after);
                    log::info!("certificate rotation: a new {what} certificate, valid until {until}");
                    validity = Some((pair.not_before, pair.not_after));
                    break;
                }
                Err(e) => {
                    failures = failures.saturating_add(1);
                    crate::metrics::renewal_failed(which);
                    log::error!("certificate rotation ({what}): {e}");
                    if failures == 5 {
                        log::error!("Reached backoff limit, still unable to rotate certs: {e}");
                    }
                    std::thread::sleep(schedule::retry_after(failures, jitter()));
                }
            }
        }
    }
}

/// One renewal: a new key, its CSR, the wait, the store, the client.
fn renew(
    client: &Client,
    opts: &Options,
    store: &Store,
    validity: Option<(SystemTime, SystemTime)>,
) -> Result<Pair, String> {
    // An expired certificate authenticates nothing: the bootstrap credentials ask instead.
    let expired = validity.is_none_or(|(_, until)| schedule::expired(until, SystemTime::now()));
    let bootstrap_client = match (&opts.bootstrap_kubeconfig, expired) {
        (Some(path), true) => Some(
            crate::mirror::kubeconfig::load(path, None)
                .and_then(|c| Client::new(&c))
                .map_err(|e| format!("Unable to load a client to request certificates: {e}"))?,
        ),
        _ => None,
    };
    let asker = bootstrap_client.as_ref().unwrap_or(client);
    let pair = issue(asker, store, (CLIENT_SIGNER, &USAGES), &opts.node, &[])?;
    take(client, &pair).map_err(|e| format!("the new certificate cannot be used: {e}"))?;
    Ok(pair)
}

/// A new key, a CSR for the node (`sans` as subjectAltNames) to `signer` with `usages`, sent
/// by `client` and waited on, and the certificate stored: client-go's `rotateCerts`, with
/// its words for each failure.
pub fn issue(
    client: &Client,
    store: &Store,
    (signer, usages): (&str, &[&str]),
    node: &str,
    sans: &[String],
) -> Result<Pair, String> {
    let csr_failed = |e: crate::x509::Error| format!("Unable to generate a certificate signing request: {e}");
    let key = crate::x509::new_key().map_err(csr_failed)?;
    let cn = super::bootstrap::common_name(node);
    let subject = crate::x509::Subject { common_name: &cn, organizations: &["system:nodes"] };
    let pem = crate::x509::pem("CERTIFICATE REQUEST", &crate::x509::csr(&key, &subject, sans).map_err(csr_failed)?);
    let ask = Ask { name: None, signer, usages, request_pem: &pem, expiration_seconds: None };
    let sent = request::create(client, &ask, &[]);
    let (name, uid) =
        sent.map_err(|e| format!("Failed while requesting a signed certificate from the control plane: {e}"))?;
    log::info!("certificate rotation: csr {name} sent to {signer}");
    let cert =
        request::wait(client, &name, &uid, WAIT).map_err(|e| format!("Certificate request was not signed: {e}"))?;
    store.update(&cert, &key, SystemTime::now()).map_err(|e| format!("Unable to store the new cert/key pair: {e}"))
}

/// Sleeps until `t` by the wall clock, in steps, so a clock that jumps (an edge box setting
/// its time after boot) is followed.
fn sleep_until(t: SystemTime) {
    while let Ok(left) = t.duration_since(SystemTime::now()) {
        std::thread::sleep(left.min(Duration::from_secs(60)));
    }
}

/// A number in [0, 1) from the system's randomness.
fn jitter() -> f64 {
    let mut b = [0u8; 4];
    let _ = ring::rand::SecureRandom::fill(&ring::rand::SystemRandom::new(), &mut b);
    f64::from(u32::from_le_bytes(b)) / (f64::from(u32::MAX) + 1.0)
}
