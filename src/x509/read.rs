//! What atoll reads of a DER certificate: its validity and its subjectAltName names, every
//! length checked (`tls::der_element`), `None` for anything that does not read.

use crate::tls::der_element as el;
use std::time::SystemTime;

/// The elements of a certificate's TBSCertificate after its version: serial, signature,
/// issuer, validity, subject, SPKI, then the optional ones.
fn tbs_fields(cert: &[u8]) -> Option<&[u8]> {
    let (0x30, certificate, _) = el(cert)? else { return None };
    let (0x30, tbs, _) = el(certificate)? else { return None };
    let (first, _, after) = el(tbs)?;
    Some(if first == 0xa0 { after } else { tbs })
}

/// notBefore and notAfter. UTCTime's two-digit years are 1950 to 2049 (RFC 5280).
pub fn validity(cert: &[u8]) -> Option<(SystemTime, SystemTime)> {
    let mut rest = tbs_fields(cert)?;
    for _ in 0..3 {
        rest = el(rest)?.2;
    }
    let (0x30, validity, _) = el(rest)? else { return None };
    let (tag, from, rest) = el(validity)?;
    let from = time(tag, from)?;
    let (tag, until, _) = el(rest)?;
    Some((from, time(tag, until)?))
}

fn time(tag: u8, bytes: &[u8]) -> Option<SystemTime> {
    let digits = std::str::from_utf8(bytes.strip_suffix(b"Z")?).ok()?;
    if !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let full = match (tag, digits.len()) {
        (0x17, 12) => format!("{}{digits}", if digits < "50" { "20" } else { "19" }),
        (0x18, 14) => digits.to_string(),
        _ => return None,
    };
    if full.as_str() < "1970" {
        return Some(SystemTime::UNIX_EPOCH); // long past: as good as the epoch for any check here
    }
    let f = |r: std::ops::Range<usize>| full.get(r);
    let text = format!("{}-{}-{}T{}:{}:{}Z", f(0..4)?, f(4..6)?, f(6..8)?, f(8..10)?, f(10..12)?, f(12..14)?);
    crate::rfc3339::parse_seconds(&text)
}

/// The DNS names and IP addresses (as text) of the subjectAltName; empty when it has none.
pub fn alt_names(cert: &[u8]) -> Option<Vec<String>> {
    let mut rest = tbs_fields(cert)?;
    for _ in 0..6 {
        rest = el(rest)?.2;
    }
    let mut names = Vec::new();
    while !rest.is_empty() {
        let (tag, content, next) = el(rest)?;
        rest = next;
        if tag != 0xa3 {
            continue;
        }
        let (0x30, mut exts, _) = el(content)? else { return None };
        while !exts.is_empty() {
            let (0x30, ext, next) = el(exts)? else { return None };
            exts = next;
            let (0x06, oid, mut value) = el(ext)? else { return None };
            if oid != [0x55, 0x1d, 0x11] {
                continue;
            }
            if let Some((0x01, _, after)) = el(value) {
                value = after; // critical
            }
            let (0x04, octets, _) = el(value)? else { return None };
            let (0x30, general, _) = el(octets)? else { return None };
            names.extend(general_names(general)?);
        }
    }
    Some(names)
}

fn general_names(mut general: &[u8]) -> Option<Vec<String>> {
    let mut names = Vec::new();
    while !general.is_empty() {
        let (tag, name, next) = el(general)?;
        general = next;
        match (tag, name.len()) {
            (0x82, _) => names.push(std::str::from_utf8(name).ok()?.to_string()),
            (0x87, 4) => names.push(std::net::Ipv4Addr::from(<[u8; 4]>::try_from(name).ok()?).to_string()),
            (0x87, 16) => names.push(std::net::Ipv6Addr::from(<[u8; 16]>::try_from(name).ok()?).to_string()),
            _ => {}
        }
    }
    Some(names)
}
