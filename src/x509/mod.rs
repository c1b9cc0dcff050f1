//! The X.509 atoll makes and reads itself, with ring's P-256 and a small DER writer: keys,
//! certificate signing requests (PKCS#10) as Go's `x509.CreateCertificateRequest` makes them
//! for kubelet, and a certificate's validity and names. The kubelet server's self-signed
//! certificate is built from the same pieces (`kubelet_server::cert`).

pub mod der;
mod read;

pub use der::pem;
pub use read::{alt_names, validity};

use der::{bits, der, extension, SEQ, SET};
use ring::rand::SystemRandom;
use ring::signature::{EcdsaKeyPair, KeyPair, ECDSA_P256_SHA256_ASN1_SIGNING};

/// What could not be made.
#[derive(Debug, PartialEq, Eq)]
pub enum Error {
    /// ring refused: generating, reading or signing with a key (what was being done).
    Key(&'static str),
    /// A subjectAltName that is neither an IP address nor a DNS name.
    BadName(String),
}

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Error::Key(what) => write!(f, "{what} failed"),
            Error::BadName(n) => write!(f, "{n:?} is neither an IP address nor a DNS name"),
        }
    }
}

/// A new ECDSA P-256 key, PKCS#8 DER (what kubelet makes for its CSRs).
pub fn new_key() -> Result<Vec<u8>, Error> {
    let key = EcdsaKeyPair::generate_pkcs8(&ECDSA_P256_SHA256_ASN1_SIGNING, &SystemRandom::new())
        .map_err(|_| Error::Key("generating a P-256 key"))?;
    Ok(key.as_ref().to_vec())
}

fn pair(pkcs8: &[u8]) -> Result<EcdsaKeyPair, Error> {
    EcdsaKeyPair::from_pkcs8(&ECDSA_P256_SHA256_ASN1_SIGNING, pkcs8, &SystemRandom::new())
        .map_err(|_| Error::Key("reading the P-256 key"))
}

/// The SubjectPublicKeyInfo of a P-256 key.
fn spki_of(pair: &EcdsaKeyPair) -> Vec<u8> {
    der(SEQ, &[&der(SEQ, &[der::OID_EC_KEY, der::OID_P256].concat())[..], &bits(pair.public_key().as_ref())].concat())
}

/// The SubjectPublicKeyInfo (DER) of the P-256 key `pkcs8`.
pub fn spki(pkcs8: &[u8]) -> Result<Vec<u8>, Error> {
    pair(pkcs8).map(|p| spki_of(&p))
}

/// Whether the certificate or request `der` is for the key whose SubjectPublicKeyInfo is
/// `spki` (it holds that SubjectPublicKeyInfo whole).
pub fn for_key(der: &[u8], spki: &[u8]) -> bool {
    !spki.is_empty() && der.windows(spki.len()).any(|w| w == spki)
}

/// A P-256 key in SEC1 form (`EC PRIVATE KEY`, as kubelet, Go and OpenSSL write them) as
/// PKCS#8, which ring reads: the same ECPrivateKey in a PrivateKeyInfo that names the curve.
/// `None` for another curve, or what does not read as an ECPrivateKey ring can use.
pub fn pkcs8_from_sec1(sec1: &[u8]) -> Option<Vec<u8>> {
    use crate::tls::der_element;
    let (SEQ, body, []) = der_element(sec1)? else { return None };
    let (0x02, [1], body) = der_element(body)? else { return None };
    let (0x04, _, mut optional) = der_element(body)? else { return None };
    while let Some((tag, content, rest)) = der_element(optional) {
        if tag == 0xa0 && content != der::OID_P256 {
            return None;
        }
        optional = rest;
    }
    let algorithm = der(SEQ, &[der::OID_EC_KEY, der::OID_P256].concat());
    let pkcs8 = der(SEQ, &[&[0x02, 0x01, 0x00][..], &algorithm, &der(0x04, sec1)].concat());
    pair(&pkcs8).ok().map(|_| pkcs8)
}

/// A certificate's or request's subject.
pub struct Subject<'a> {
    pub common_name: &'a str,
    pub organizations: &'a [&'a str],
}

/// A Name as Go's `pkix.Name.ToRDNSequence` orders it: the organizations in one RDN, then the
/// common name in its own; each value a PrintableString when it can be one, as Go marshals
/// strings, else a UTF8String.
pub fn name(subject: &Subject) -> Vec<u8> {
    let value = |s: &str| {
        let printable = s.bytes().all(|b| b.is_ascii_alphanumeric() || b" '()+,-./:=?".contains(&b));
        der(if printable { 0x13 } else { der::UTF8 }, s.as_bytes())
    };
    let mut rdns = Vec::new();
    if !subject.organizations.is_empty() {
        let orgs: Vec<u8> =
            subject.organizations.iter().flat_map(|o| der(SEQ, &[der::OID_O, &value(o)].concat())).collect();
        rdns.extend(der(SET, &orgs));
    }
    if !subject.common_name.is_empty() {
        rdns.extend(der(SET, &der(SEQ, &[der::OID_CN, &value(subject.common_name)].concat())));
    }
    der(SEQ, &rdns)
}

/// A PKCS#10 CertificationRequest (DER) for `subject`, signed with the P-256 key `pkcs8`
/// (ecdsa-with-SHA256); `names` (DNS names and IP addresses) go in a subjectAltName
/// extension requested through the extensionRequest attribute, none when empty.
pub fn csr(pkcs8: &[u8], subject: &Subject, names: &[String]) -> Result<Vec<u8>, Error> {
    let key = pair(pkcs8)?;
    let attributes = if names.is_empty() {
        Vec::new()
    } else {
        let sans = der::san_entries(names).map_err(Error::BadName)?;
        let extensions = der(SEQ, &extension(der::OID_SAN, false, &der(SEQ, &sans)));
        der(SEQ, &[der::OID_EXTENSION_REQUEST, &der(SET, &extensions)].concat())
    };
    let info = der(SEQ, &[&[0x02, 0x01, 0x00][..], &name(subject), &spki_of(&key), &der(0xa0, &attributes)].concat());
    let signature = key.sign(&SystemRandom::new(), &info).map_err(|_| Error::Key("signing the request"))?;
    Ok(der(SEQ, &[&info[..], &der(SEQ, der::OID_ECDSA_SHA256), &bits(signature.as_ref())].concat()))
}

#[cfg(test)]
mod tests;
