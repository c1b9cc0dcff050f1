//! The serving certificate when none is configured (`tlsCertFile`/`tlsPrivateKeyFile` unset):
//! as kubelet, a self-signed certificate kept under the root dir (`pki/kubelet.crt` and
//! `pki/kubelet.key`, the key 0600, written as `records` writes: whole or not at all). Unlike
//! kubelet, whose self-signed certificate keeps the names it was first made with, atoll makes
//! a new one when the node's published addresses or hostname change or it comes within 30
//! days of expiry, so a client that checks names never meets "certificate is valid for X,
//! not Y".
//!
//! ECDSA P-256 with SHA-256 (ring), one year of validity from an hour ago (clock skew), the
//! SANs each an IP address or a DNS name, `serverAuth` only. The DER is written here by hand
//! (`x509::der`), and the tests check it with rustls and webpki, as clients will.

use super::error::{Error, Kind};
use crate::x509::der::{bits, der, extension, pem, time, OID_BASIC, OID_CN, OID_ECDSA_SHA256, OID_EC_KEY};
use crate::x509::der::{OID_EXT_KEY_USAGE, OID_KEY_USAGE, OID_P256, OID_SAN, OID_SERVER_AUTH, SEQ, SET, UTF8};
use ring::rand::SystemRandom;
use ring::signature::{EcdsaKeyPair, KeyPair, ECDSA_P256_SHA256_ASN1_SIGNING};
use std::path::Path;
use std::time::{Duration, SystemTime};

/// How long a made certificate is valid.
const VALIDITY: Duration = Duration::from_secs(365 * 24 * 3600);
/// A certificate this close to its end is made again.
const RENEW_BEFORE: Duration = Duration::from_secs(30 * 24 * 3600);

/// A certificate and its key, both DER.
pub struct Serving {
    pub cert: Vec<u8>,
    /// PKCS#8.
    pub key: Vec<u8>,
}

/// The certificate in `dir` when it was made for exactly `names` and is not near its end,
/// else a new one (written there). `names`: IP addresses and DNS names, the first the subject.
pub fn load_or_make(dir: &Path, names: &[String], now: SystemTime) -> Result<Serving, Error> {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivatePkcs8KeyDer};
    let (cert_path, key_path, record_path) =
        (dir.join("kubelet.crt"), dir.join("kubelet.key"), dir.join("kubelet-names.json"));
    let kept = || -> Option<Serving> {
        let made: Made = crate::records::read(&record_path)?;
        let until = SystemTime::UNIX_EPOCH + Duration::from_secs(made.until);
        if made.names != names || until < now + RENEW_BEFORE {
            return None;
        }
        let read = |p: &Path| crate::bounded::read_file(p, 64 << 10).ok();
        let cert = CertificateDer::from_pem_slice(&read(&cert_path)?).ok()?.to_vec();
        let key = PrivatePkcs8KeyDer::from_pem_slice(&read(&key_path)?).ok()?.secret_pkcs8_der().to_vec();
        Some(Serving { cert, key })
    };
    if let Some(s) = kept() {
        return Ok(s);
    }
    let made = make(names, now)?;
    let until = (now + VALIDITY).duration_since(SystemTime::UNIX_EPOCH).map_or(0, |d| d.as_secs());
    let written = crate::records::write_bytes(&key_path, pem("PRIVATE KEY", &made.key).as_bytes())
        .and_then(|()| crate::records::write_bytes(&cert_path, pem("CERTIFICATE", &made.cert).as_bytes()))
        .and_then(|()| crate::records::write(&record_path, &Made { until, names: names.to_vec() }));
    written.map_err(|e| Error::from(Kind::Keep { dir: dir.to_path_buf(), why: e.to_string() }))?;
    Ok(made)
}

/// What the kept certificate was made for, and until when (seconds since the epoch).
#[derive(serde::Serialize, serde::Deserialize)]
struct Made {
    until: u64,
    names: Vec<String>,
}

/// A new self-signed certificate for `names`, valid from an hour before `now` for a year.
pub fn make(names: &[String], now: SystemTime) -> Result<Serving, Error> {
    let subject =
        names.first().ok_or_else(|| Error::from(Kind::Make("a serving certificate needs at least one name")))?;
    let rng = SystemRandom::new();
    let key = EcdsaKeyPair::generate_pkcs8(&ECDSA_P256_SHA256_ASN1_SIGNING, &rng)
        .map_err(|_| Error::from(Kind::Make("generating a P-256 key failed")))?;
    let pair = EcdsaKeyPair::from_pkcs8(&ECDSA_P256_SHA256_ASN1_SIGNING, key.as_ref(), &rng)
        .map_err(|_| Error::from(Kind::Make("reading the new P-256 key failed")))?;
    let mut serial = [0u8; 16];
    ring::rand::SecureRandom::fill(&rng, &mut serial)
        .map_err(|_| Error::from(Kind::Make("no randomness for a serial")))?;
    serial[0] &= 0x7f; // positive
    serial[0] |= 0x40; // and of its full length
    let at = now.duration_since(SystemTime::UNIX_EPOCH).map_or(0, |d| d.as_secs());
    let name = der(SEQ, &der(SET, &der(SEQ, &[OID_CN, &der(UTF8, format!("{subject}@{at}").as_bytes())].concat())));
    let from = now.checked_sub(Duration::from_secs(3600)).unwrap_or(now);
    let validity = der(SEQ, &[time(from), time(now + VALIDITY)].concat());
    let spki = der(SEQ, &[&der(SEQ, &[OID_EC_KEY, OID_P256].concat())[..], &bits(pair.public_key().as_ref())].concat());
    let extensions = der(
        0xa3,
        &der(
            SEQ,
            &[
                extension(OID_BASIC, true, &der(SEQ, &[])),
                extension(OID_KEY_USAGE, true, &[0x03, 0x02, 0x07, 0x80]),
                extension(OID_EXT_KEY_USAGE, false, &der(SEQ, OID_SERVER_AUTH)),
                extension(
                    OID_SAN,
                    false,
                    &der(SEQ, &crate::x509::der::san_entries(names).map_err(|n| Error::from(Kind::BadName(n)))?),
                ),
            ]
            .concat(),
        ),
    );
    let tbs = der(
        SEQ,
        &[
            &[0xa0, 0x03, 0x02, 0x01, 0x02][..],
            &der(0x02, &serial),
            &der(SEQ, OID_ECDSA_SHA256),
            &name,
            &validity,
            &name,
            &spki,
            &extensions,
        ]
        .concat(),
    );
    let signature = pair.sign(&rng, &tbs).map_err(|_| Error::from(Kind::Make("signing the certificate failed")))?;
    let cert = der(SEQ, &[&tbs[..], &der(SEQ, OID_ECDSA_SHA256), &bits(signature.as_ref())].concat());
    Ok(Serving { cert, key: key.as_ref().to_vec() })
}

#[cfg(test)]
#[path = "cert_tests.rs"]
mod tests;
