//! TLS material shared by atoll's clients: the system's CA bundle and PEM certificates (the
//! manifest URL and the mirror, through ureq; chains and CA files for rustls: the kubelet
//! server, the tunnel), and the certificate-ignoring client kubelet's probes and hooks use
//! (through futures-rustls). One rustls with the ring provider serves all.

use std::path::PathBuf;
use std::sync::Arc;

pub fn pem_certs(pem: &[u8]) -> Vec<ureq::tls::Certificate<'static>> {
    ureq::tls::parse_pem(pem)
        .filter_map(|item| match item {
            Ok(ureq::tls::PemItem::Certificate(c)) => Some(c),
            _ => None,
        })
        .collect()
}

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

/// The system's CA bundle, for ureq.
pub fn system_roots() -> Vec<ureq::tls::Certificate<'static>> {
    pem_certs(&system_bundle())
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
