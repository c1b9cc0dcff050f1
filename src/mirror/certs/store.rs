//! kubelet's certificate files (client-go's `certificate_store.go`): in `certDir`, each issued
//! certificate is `<prefix>-<YYYY-MM-DD-HH-MM-SS>.pem` (the certificate chain, then the key;
//! 0600; synced), and `<prefix>-current.pem` is a symlink to the one in use, replaced by a
//! rename so a crash leaves the old one or the new one. `<prefix>` is `kubelet-client` or
//! `kubelet-server`. Reading `-current.pem` follows that one link only to a file of the same
//! directory. Keys are written as PKCS#8 and read in that form or in kubelet's (SEC1, `EC
//! PRIVATE KEY`), so a `certDir` kubelet wrote serves as it is.
use rustls::pki_types::CertificateDer;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

/// A pem file larger than this is refused (a chain and a key are a few KiB).
const MAX_PEM: usize = 256 << 10;

/// One kind of certificate in one directory.
pub struct Store {
    dir: PathBuf,
    prefix: &'static str,
}

/// A certificate and its key, as stored.
pub struct Pair {
    pub chain: Vec<CertificateDer<'static>>,
    pub key_pkcs8: Vec<u8>,
    pub not_before: SystemTime,
    pub not_after: SystemTime,
}

impl Store {
    pub fn new(dir: &Path, prefix: &'static str) -> Store {
        Store { dir: dir.to_path_buf(), prefix }
    }

    /// `<dir>/<prefix>-current.pem`.
    pub fn current_path(&self) -> PathBuf {
        self.dir.join(format!("{}-current.pem", self.prefix))
    }

    /// The pair in use: none when there is no current link yet; an error naming the file
    /// when it cannot be read or used.
    pub fn current(&self) -> Result<Option<Pair>, String> {
        let link = self.current_path();
        let target = match std::fs::read_link(&link) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(format!("{}: not a link to a pem file: {e}", link.display())),
        };
        let file = match target.file_name() {
            Some(name) if target.parent().is_none_or(|p| p.as_os_str().is_empty() || p == self.dir) => {
                self.dir.join(name)
            }
            _ => return Err(format!("{}: points out of {}", link.display(), self.dir.display())),
        };
        let pem = crate::bounded::read_file(&file, MAX_PEM).map_err(|e| format!("{}: {e}", file.display()))?;
        pair(&pem).map(Some).map_err(|why| format!("{}: {why}", file.display()))
    }

    /// Stores `cert_pem` (a PEM chain) with `key_pkcs8` as a new dated file and makes it the
    /// current one. The certificate must be for that key.
    pub fn update(&self, cert_pem: &[u8], key_pkcs8: &[u8], now: SystemTime) -> Result<Pair, String> {
        let chain = crate::tls::pem_chain(cert_pem);
        if chain.is_empty() {
            return Err("invalid certificate data: no PEM certificate".into());
        }
        let mut text: String = chain.iter().map(|c| crate::x509::pem("CERTIFICATE", c)).collect();
        text.push_str(&crate::x509::pem("PRIVATE KEY", key_pkcs8));
        let stored = pair(text.as_bytes())?;
        crate::records::private_dir(&self.dir).map_err(|e| format!("{}: {e}", self.dir.display()))?;
        let stamp: String = crate::rfc3339::format_seconds(now).chars().filter(char::is_ascii_digit).collect();
        let f = |r: std::ops::Range<usize>| stamp.get(r).unwrap_or("00");
        let name =
            format!("{}-{}-{}-{}-{}-{}-{}.pem", self.prefix, f(0..4), f(4..6), f(6..8), f(8..10), f(10..12), f(12..14));
        let file = self.dir.join(&name);
        crate::records::write_bytes(&file, text.as_bytes()).map_err(|e| format!("{}: {e}", file.display()))?;
        let updated = self.dir.join(format!("{}-updated.pem", self.prefix));
        let _ = std::fs::remove_file(&updated);
        let linked = std::os::unix::fs::symlink(&file, &updated)
            .and_then(|()| std::fs::rename(&updated, self.current_path()))
            .and_then(|()| std::fs::File::open(&self.dir)?.sync_all());
        linked.map_err(|e| format!("making {} current: {e}", file.display()))?;
        Ok(stored)
    }
}

/// The chain and key of a pem file, checked to go together, and the leaf's validity.
fn pair(pem: &[u8]) -> Result<Pair, String> {
    use rustls::pki_types::pem::PemObject;
    let chain = crate::tls::pem_chain(pem);
    let leaf = chain.first().ok_or("no certificate in it")?;
    let (not_before, not_after) = crate::x509::validity(leaf).ok_or("the certificate's validity does not read")?;
    // kubelet writes its keys in SEC1 form (`EC PRIVATE KEY`); atoll in PKCS#8.
    let key_pkcs8 = match rustls::pki_types::PrivatePkcs8KeyDer::from_pem_slice(pem) {
        Ok(key) => key.secret_pkcs8_der().to_vec(),
        Err(_) => rustls::pki_types::PrivateSec1KeyDer::from_pem_slice(pem)
            .ok()
            .and_then(|key| crate::x509::pkcs8_from_sec1(key.secret_sec1_der()))
            .ok_or("no PKCS#8 key and no P-256 EC PRIVATE KEY in it")?,
    };
    let spki = crate::x509::spki(&key_pkcs8).map_err(|e| e.to_string())?;
    if !crate::x509::for_key(leaf, &spki) {
        return Err("the certificate is not for the key".into());
    }
    Ok(Pair { chain, key_pkcs8, not_before, not_after })
}

#[cfg(test)]
#[path = "store_tests.rs"]
mod tests;
