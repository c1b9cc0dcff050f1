//! TLS material shared by atoll's clients: the system's CA bundle and PEM certificates
//! (chains and CA files for rustls: the manifest URL, the mirror, the kubelet server, the
//! tunnel), and the certificate-ignoring client kubelet's probes and hooks use
//! (through futures-rustls). One rustls with the ring provider serves all. A certificate's
//! DER elements are read here, every length checked (`der_element`, which `x509` builds on).
//! A server's certificate that can be swapped while it serves ([`Serving`]).

use std::path::PathBuf;
use std::sync::Arc;

/// The certificates of a PEM bundle, for rustls (a chain to present); unreadable blocks are
/// skipped.
pub fn pem_chain(pem: &[u8]) -> Vec<rustls::pki_types::CertificateDer<'static>> {
    use rustls::pki_types::pem::PemObject;
    rustls::pki_types::CertificateDer::pem_slice_iter(pem).filter_map(Result::ok).collect()
}

/// The certificates of a PEM bundle as trust roots (a CA file); none when it holds no usable
/// certificate.
pub fn pem_roots(pem: &[u8]) -> Option<rustls::RootCertStore> {
    let mut roots = rustls::RootCertStore::empty();
    for c in pem_chain(pem) {
        let _ = roots.add(c);
    }
    (!roots.is_empty()).then_some(roots)
}

/// The system's CA bundle (`SSL_CERT_FILE`, or the usual Linux locations), as PEM: the first
/// of them that holds a certificate.
pub fn system_bundle() -> Vec<u8> {
    let candidates = std::env::var_os("SSL_CERT_FILE").map(PathBuf::from).into_iter().chain(
        ["/etc/ssl/certs/ca-certificates.crt", "/etc/pki/tls/certs/ca-bundle.crt", "/etc/ssl/cert.pem"]
            .map(PathBuf::from),
    );
    for path in candidates {
        if let Ok(pem) = std::fs::read(&path) {
            if !pem_chain(&pem).is_empty() {
                return pem;
            }
        }
    }
    Vec::new()
}

/// A rustls client: the server verified against `roots` (None: not verified, a kubeconfig's
/// `insecure-skip-tls-verify`), presenting `identity` (a chain and its key) if given, offering
/// `alpn`. The error is the TLS library's word on an identity it cannot use.
pub fn client_config(
    roots: Option<rustls::RootCertStore>,
    identity: Option<(Vec<rustls::pki_types::CertificateDer<'static>>, rustls::pki_types::PrivateKeyDer<'static>)>,
    alpn: &[&[u8]],
) -> Result<Arc<rustls::ClientConfig>, String> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?;
    let builder = match roots {
        Some(roots) => builder.with_root_certificates(roots),
        None => builder.dangerous().with_custom_certificate_verifier(Arc::new(NoVerification(provider))),
    };
    let mut config = match identity {
        None => builder.with_no_client_auth(),
        Some((chain, key)) => builder.with_client_auth_cert(chain, key).map_err(|e| e.to_string())?,
    };
    config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    Ok(Arc::new(config))
}

/// kubelet's probes skip certificate verification (InsecureSkipVerify); the handshake's
/// signatures are still checked.
pub fn insecure_client() -> Arc<rustls::ClientConfig> {
    static CONFIG: std::sync::OnceLock<Arc<rustls::ClientConfig>> = std::sync::OnceLock::new();
    CONFIG
        .get_or_init(|| {
            client_config(None, None, &[]).expect("ring supports the default protocol versions with no identity")
        })
        .clone()
}

#[derive(Debug)]
struct NoVerification(Arc<rustls::crypto::CryptoProvider>);

impl rustls::client::danger::ServerCertVerifier for NoVerification {
    fn verify_server_cert(
        &self,
        _end_entity: &rustls::pki_types::CertificateDer<'_>,
        _intermediates: &[rustls::pki_types::CertificateDer<'_>],
        _server_name: &rustls::pki_types::ServerName<'_>,
        _ocsp_response: &[u8],
        _now: rustls::pki_types::UnixTime,
    ) -> Result<rustls::client::danger::ServerCertVerified, rustls::Error> {
        Ok(rustls::client::danger::ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &rustls::pki_types::CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.0.signature_verification_algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &rustls::pki_types::CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.0.signature_verification_algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

/// One DER element: its tag, its content and what follows it (`None` when a length does not
/// fit the bytes or takes more than four bytes).
pub fn der_element(bytes: &[u8]) -> Option<(u8, &[u8], &[u8])> {
    let (&tag, rest) = bytes.split_first()?;
    let (&first, rest) = rest.split_first()?;
    let (len, rest) = if first < 0x80 {
        (usize::from(first), rest)
    } else {
        let n = usize::from(first & 0x7f);
        if n == 0 || n > 4 || rest.len() < n {
            return None;
        }
        let (len, rest) = rest.split_at(n);
        (len.iter().fold(0usize, |acc, b| (acc << 8) | usize::from(*b)), rest)
    };
    Some((tag, rest.get(..len)?, rest.get(len..)?))
}

/// A server's certificate, swapped whole when a new one is issued: each handshake presents
/// the one set at its start, so sessions in progress keep theirs.
#[derive(Debug, Default)]
pub struct Serving(std::sync::RwLock<Option<Arc<rustls::sign::CertifiedKey>>>);

impl Serving {
    /// Presents `chain` and `key` from the next handshake on; the TLS library's word when the
    /// key cannot sign or does not match the certificate.
    pub fn set(
        &self,
        chain: Vec<rustls::pki_types::CertificateDer<'static>>,
        key: rustls::pki_types::PrivateKeyDer<'static>,
    ) -> Result<(), String> {
        let provider = rustls::crypto::ring::default_provider();
        let certified = rustls::sign::CertifiedKey::from_der(chain, key, &provider).map_err(|e| e.to_string())?;
        *self.0.write().unwrap_or_else(std::sync::PoisonError::into_inner) = Some(Arc::new(certified));
        Ok(())
    }

    /// Whether a certificate is set.
    pub fn is_set(&self) -> bool {
        self.0.read().unwrap_or_else(std::sync::PoisonError::into_inner).is_some()
    }
}

impl rustls::server::ResolvesServerCert for Serving {
    fn resolve(&self, _: rustls::server::ClientHello<'_>) -> Option<Arc<rustls::sign::CertifiedKey>> {
        self.0.read().unwrap_or_else(std::sync::PoisonError::into_inner).clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn der_elements_read_only_what_their_lengths_allow() {
        assert_eq!(der_element(&[0x30, 0x84, 0xff, 0xff, 0xff, 0xff]), None);
        assert_eq!(der_element(&[0x30, 0x80]), None);
        assert_eq!(der_element(&[0x30, 0x81, 0x01, 0x05]), Some((0x30, &[0x05][..], &[][..])));
    }
}
