//! TLS bootstrap, as kubelet's `LoadClientCert`: when the kubeconfig is missing, or its client
//! certificate cannot be read or has expired, a key is made (kept in `kubelet-client.key.tmp`
//! until a certificate comes, so a retry asks again for the same key), a CSR for
//! `system:node:<name>` is sent with the bootstrap kubeconfig's credentials under a name
//! digested from the key and subject (a retry finds its own CSR), the signed certificate is
//! stored as `kubelet-client-current.pem`, and a kubeconfig is written that uses it: the
//! bootstrap kubeconfig's server and CA, the pem file as both certificate and key. A restart
//! with a valid kubeconfig sends nothing.

use super::request::{self, Ask, Failure, CLIENT_SIGNER};
use super::store::Store;
use crate::mirror::apiserver::Client;
use crate::mirror::kubeconfig::{self, Connection, Source};
use std::path::Path;
use std::time::{Duration, SystemTime};

/// How long bootstrap waits for its CSR to be signed (kubelet's: an hour).
pub const WAIT: Duration = Duration::from_secs(3600);
/// The usages of the bootstrap CSR, as kubelet sends them whatever the key.
pub const USAGES: [&str; 3] = ["digital signature", "key encipherment", "client auth"];
const TMP_KEY: &str = "kubelet-client.key.tmp";

/// Why bootstrap did not end with a usable kubeconfig.
#[derive(Debug)]
pub enum Error {
    /// The bootstrap kubeconfig, or its client.
    Bootstrap(crate::mirror::Error),
    /// The certificate store, a key, the CSR.
    Local(String),
    Request(Failure),
}

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Error::Bootstrap(e) => write!(f, "unable to load bootstrap kubeconfig: {e}"),
            Error::Local(why) => write!(f, "{why}"),
            Error::Request(e) => write!(f, "{e}"),
        }
    }
}

/// The node's subject: `CN=system:node:<node>`, `O=system:nodes`.
pub fn common_name(node: &str) -> String {
    format!("system:node:{node}")
}

/// The client certificate chain the kubeconfig at `path` presents, when it can be read.
fn client_chain(path: &Path) -> Option<Vec<rustls::pki_types::CertificateDer<'static>>> {
    let conn = kubeconfig::load(path, None).ok()?;
    let pem = conn.client_certificate.as_ref()?.read().ok()?;
    Some(crate::tls::pem_chain(&pem)).filter(|chain| !chain.is_empty())
}

/// When the kubeconfig at `path` holds a client certificate none of whose certificates has
/// expired at `now` (kubelet's `isClientConfigStillValid`); an unreadable one is not valid.
pub fn still_valid(path: &Path, now: SystemTime) -> bool {
    client_chain(path)
        .is_some_and(|chain| chain.iter().all(|c| crate::x509::validity(c).is_some_and(|(_, end)| now <= end)))
}

/// The validity (notBefore, notAfter) of the client certificate the kubeconfig at `path`
/// presents, when it presents one that can be read.
pub fn leaf_validity(path: &Path) -> Option<(SystemTime, SystemTime)> {
    crate::x509::validity(client_chain(path)?.first()?)
}

/// Makes sure `kubeconfig` holds a valid client certificate, bootstrapping one through the
/// bootstrap kubeconfig when it does not. Blocks while the CSR waits (up to [`WAIT`]).
pub fn ensure(kubeconfig: &Path, bootstrap: &Path, cert_dir: &Path, node: &str) -> Result<(), Error> {
    if still_valid(kubeconfig, SystemTime::now()) {
        log::debug!("kubeconfig {} exists and is valid, skipping bootstrap", kubeconfig.display());
        return Ok(());
    }
    log::info!(
        "using bootstrap kubeconfig {} to generate TLS client cert, key and kubeconfig file",
        bootstrap.display()
    );
    let conn = kubeconfig::load(bootstrap, None).map_err(Error::Bootstrap)?;
    let client = Client::new(&conn).map_err(Error::Bootstrap)?;
    let store = Store::new(cert_dir, "kubelet-client");
    // A key of its own for each certificate; the one an attempt that did not end left is
    // used again (its CSR, by the same digested name, is waited on rather than sent anew).
    let key = load_or_make_key(&cert_dir.join(TMP_KEY))?;
    wait_for_server(&client, Duration::from_secs(60));
    let cert = match request_certificate(&client, &key, node) {
        Ok(c) => c,
        Err(e) => {
            if matches!(&e, Error::Request(f) if f.is_final()) {
                // Unlike kubelet, which asks again under the same name and meets the same
                // verdict until the CSR is cleaned up (an hour), the next attempt is a new
                // key and a new CSR an operator can approve.
                let _ = std::fs::remove_file(cert_dir.join(TMP_KEY));
            }
            return Err(e);
        }
    };
    store.update(&cert, &key, SystemTime::now()).map_err(|e| Error::Local(e.to_string()))?;
    let _ = std::fs::remove_file(cert_dir.join(TMP_KEY));
    write_kubeconfig(&conn, kubeconfig, &store.current_path()).map_err(Error::Local)?;
    log::info!(
        "bootstrap: a client certificate for {} issued; kubeconfig {} written",
        common_name(node),
        kubeconfig.display()
    );
    Ok(())
}

/// The key a previous attempt left, else a new one written there first (0600).
fn load_or_make_key(path: &Path) -> Result<Vec<u8>, Error> {
    use rustls::pki_types::pem::PemObject;
    if let Ok(pem) = crate::bounded::read_file(path, 64 << 10) {
        if let Ok(key) = rustls::pki_types::PrivatePkcs8KeyDer::from_pem_slice(&pem) {
            return Ok(key.secret_pkcs8_der().to_vec());
        }
    }
    let key = crate::x509::new_key().map_err(|e| Error::Local(e.to_string()))?;
    crate::records::write_bytes(path, crate::x509::pem("PRIVATE KEY", &key).as_bytes())
        .map_err(|e| Error::Local(format!("{}: {e}", path.display())))?;
    Ok(key)
}

/// Up to `limit` of polling `/healthz` every 2 s; on regardless (kubelet's `waitForServer`).
fn wait_for_server(client: &Client, limit: Duration) {
    let until = std::time::Instant::now() + limit;
    loop {
        match client.call_bytes("GET", "/healthz", "", "text/plain", &[]) {
            Ok(a) if a.ok() => return,
            Ok(a) => log::info!("failed to connect to apiserver: /healthz answered {}", a.status),
            Err(e) => log::info!("failed to connect to apiserver: {e}"),
        }
        if std::time::Instant::now() >= until {
            log::info!("error waiting for apiserver to come up: timed out waiting to connect to apiserver");
            return;
        }
        std::thread::sleep(Duration::from_secs(2));
    }
}

/// kubelet's `requestNodeCertificate`: the CSR, named from its digest, and the wait.
fn request_certificate(client: &Client, key: &[u8], node: &str) -> Result<Vec<u8>, Error> {
    let cn = common_name(node);
    let subject = crate::x509::Subject { common_name: &cn, organizations: &["system:nodes"] };
    let der = crate::x509::csr(key, &subject, &[])
        .map_err(|e| Error::Local(format!("unable to generate certificate request: {e}")))?;
    let spki = crate::x509::spki(key).map_err(|e| Error::Local(e.to_string()))?;
    let name = digested_name(&spki, &cn, &["system:nodes"], &USAGES);
    let pem = crate::x509::pem("CERTIFICATE REQUEST", &der);
    let ask =
        Ask { name: Some(&name), signer: CLIENT_SIGNER, usages: &USAGES, request_pem: &pem, expiration_seconds: None };
    let (name, uid) = request::create(client, &ask, &spki).map_err(Error::Request)?;
    log::info!("waiting for client certificate to be issued (csr {name})");
    request::wait(client, &name, &uid, WAIT).map_err(Error::Request)
}

/// kubelet's CSR name: `node-csr-` and the unpadded base64url of a SHA-512/256 over the
/// public key, the subject and the usages, each base64url'd and ended by `|`.
pub fn digested_name(spki: &[u8], cn: &str, orgs: &[&str], usages: &[&str]) -> String {
    let mut ctx = ring::digest::Context::new(&ring::digest::SHA512_256);
    let mut write = |data: &[u8]| {
        ctx.update(url64(data).as_bytes());
        ctx.update(b"|");
    };
    write(spki);
    write(cn.as_bytes());
    orgs.iter().for_each(|o| write(o.as_bytes()));
    usages.iter().for_each(|u| write(u.as_bytes()));
    format!("node-csr-{}", url64(ctx.finish().as_ref()))
}

/// Unpadded base64url.
fn url64(data: &[u8]) -> String {
    crate::base64::encode(data)
        .trim_end_matches('=')
        .chars()
        .map(|c| match c {
            '+' => '-',
            '/' => '_',
            c => c,
        })
        .collect()
}

/// The kubeconfig kubelet writes after bootstrap: the bootstrap kubeconfig's server and CA, the
/// store's current pem as certificate and key; whole or not at all, 0600.
pub fn write_kubeconfig(boot: &Connection, path: &Path, pem: &Path) -> Result<(), String> {
    let q = |s: &str| serde_json::to_string(s).unwrap_or_default();
    let ca = match &boot.ca {
        Some(Source::File(f)) => format!("    certificate-authority: {}\n", q(&f.display().to_string())),
        Some(Source::Data(d)) => format!("    certificate-authority-data: {}\n", crate::base64::encode(d)),
        None => String::new(),
    };
    let insecure = if boot.insecure_skip_tls_verify { "    insecure-skip-tls-verify: true\n" } else { "" };
    let pem = q(&pem.display().to_string());
    let text = format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- cluster:\n{ca}{insecure}    server: {}\n  name: default-cluster\n\
         contexts:\n- context:\n    cluster: default-cluster\n    namespace: default\n    user: default-auth\n  name: default-context\n\
         current-context: default-context\npreferences: {{}}\nusers:\n- name: default-auth\n  user:\n    client-certificate: {pem}\n    client-key: {pem}\n",
        q(&boot.server)
    );
    write_whole(path, text.as_bytes()).map_err(|e| format!("writing kubeconfig {}: {e}", path.display()))
}

/// `bytes` to `path` whole (`records::replace`, 0600); the directory is made if missing but
/// its mode is left alone (it is the operator's, as /etc/kubernetes).
fn write_whole(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir)?;
    }
    crate::records::replace(path, bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_csr_name_is_kubelets_digest() {
        // The same digest by another hand (Python's hashlib sha512_256 and urlsafe_b64encode,
        // padding stripped), over the same fields in kubelet's order.
        let name = digested_name(b"spki", "system:node:edge-1", &["system:nodes"], &USAGES);
        assert_eq!(name, "node-csr-nV6MEfN0vH7194DaD8BKSoApBFt61b0ynY47yOPGNio");
        assert_ne!(name, digested_name(b"spki", "system:node:edge-2", &["system:nodes"], &USAGES));
        assert_ne!(name, digested_name(b"spkj", "system:node:edge-1", &["system:nodes"], &USAGES));
        assert_eq!(name, digested_name(b"spki", "system:node:edge-1", &["system:nodes"], &USAGES));
    }

    #[test]
    fn the_written_kubeconfig_reads_back_as_the_bootstrap_server_with_the_pem() {
        let dir = crate::testdir::TestDir::new("bootstrap-kubeconfig");
        let boot = Connection {
            server: "https://10.0.0.1:6443".into(),
            ca: Some(Source::Data(b"CA PEM".to_vec())),
            insecure_skip_tls_verify: false,
            client_certificate: None,
            client_key: None,
            token: Some(Source::Data(b"abcdef.0123456789abcdef".to_vec())),
            context: "tls-bootstrap".into(),
        };
        let path = dir.join("kubelet.conf");
        let pem = dir.join("pki/kubelet-client-current.pem");
        write_kubeconfig(&boot, &path, &pem).unwrap();
        let conn = kubeconfig::load(&path, None).unwrap();
        assert_eq!(conn.server, boot.server);
        assert_eq!(conn.ca, boot.ca);
        assert_eq!(conn.token, None, "the bootstrap token is not carried over");
        assert_eq!(conn.client_certificate, Some(Source::File(pem.clone())));
        assert_eq!(conn.client_key, Some(Source::File(pem)));
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(std::fs::metadata(&path).unwrap().permissions().mode() & 0o777, 0o600);
        assert!(!still_valid(&path, SystemTime::now()), "no certificate there yet: not valid");
    }
}
