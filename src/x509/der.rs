//! A DER writer for the few fixed structures atoll makes (a self-signed certificate, a
//! certificate signing request): elements with definite lengths, bit strings of whole bytes,
//! extensions, subjectAltName entries, RFC 5280 times, and PEM around the result.

use std::net::IpAddr;
use std::time::SystemTime;

pub const SEQ: u8 = 0x30;
pub const SET: u8 = 0x31;
pub const UTF8: u8 = 0x0c;
pub const OID_CN: &[u8] = &[0x06, 0x03, 0x55, 0x04, 0x03];
pub const OID_O: &[u8] = &[0x06, 0x03, 0x55, 0x04, 0x0a];
pub const OID_ECDSA_SHA256: &[u8] = &[0x06, 0x08, 0x2a, 0x86, 0x48, 0xce, 0x3d, 0x04, 0x03, 0x02];
pub const OID_EC_KEY: &[u8] = &[0x06, 0x07, 0x2a, 0x86, 0x48, 0xce, 0x3d, 0x02, 0x01];
pub const OID_P256: &[u8] = &[0x06, 0x08, 0x2a, 0x86, 0x48, 0xce, 0x3d, 0x03, 0x01, 0x07];
pub const OID_BASIC: &[u8] = &[0x06, 0x03, 0x55, 0x1d, 0x13];
pub const OID_KEY_USAGE: &[u8] = &[0x06, 0x03, 0x55, 0x1d, 0x0f];
pub const OID_EXT_KEY_USAGE: &[u8] = &[0x06, 0x03, 0x55, 0x1d, 0x25];
pub const OID_SAN: &[u8] = &[0x06, 0x03, 0x55, 0x1d, 0x11];
pub const OID_SERVER_AUTH: &[u8] = &[0x06, 0x08, 0x2b, 0x06, 0x01, 0x05, 0x05, 0x07, 0x03, 0x01];
/// PKCS#9 extensionRequest.
pub const OID_EXTENSION_REQUEST: &[u8] = &[0x06, 0x09, 0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x09, 0x0e];

/// One DER element: tag, definite length, content.
pub fn der(tag: u8, content: &[u8]) -> Vec<u8> {
    let len = content.len();
    let mut out = vec![tag];
    if len < 0x80 {
        out.push(len as u8);
    } else {
        let bytes: Vec<u8> = len.to_be_bytes().into_iter().skip_while(|b| *b == 0).collect();
        out.push(0x80 | bytes.len() as u8);
        out.extend(bytes);
    }
    out.extend_from_slice(content);
    out
}

/// A BIT STRING of whole bytes.
pub fn bits(bytes: &[u8]) -> Vec<u8> {
    der(0x03, &[&[0u8][..], bytes].concat())
}

pub fn extension(oid: &[u8], critical: bool, value: &[u8]) -> Vec<u8> {
    let critical: &[u8] = if critical { &[0x01, 0x01, 0xff] } else { &[] };
    der(SEQ, &[oid, critical, &der(0x04, value)].concat())
}

/// The SAN entries: `iPAddress` for an address, `dNSName` otherwise; `Err` names one that
/// is neither.
pub fn san_entries(names: &[String]) -> Result<Vec<u8>, String> {
    let mut out = Vec::new();
    for n in names {
        match n.parse::<IpAddr>() {
            Ok(IpAddr::V4(ip)) => out.extend(der(0x87, &ip.octets())),
            Ok(IpAddr::V6(ip)) => out.extend(der(0x87, &ip.octets())),
            Err(_) if !n.is_empty() && n.bytes().all(|b| b.is_ascii_alphanumeric() || b"-.".contains(&b)) => {
                out.extend(der(0x82, n.as_bytes()))
            }
            Err(_) => return Err(n.clone()),
        }
    }
    Ok(out)
}

/// UTCTime through 2049, GeneralizedTime after (RFC 5280).
pub fn time(t: SystemTime) -> Vec<u8> {
    let text = crate::rfc3339::format_seconds(t); // 2026-11-26T08:00:00Z
    let digits: String = text.chars().filter(char::is_ascii_digit).collect();
    if digits.as_str() < "2050" {
        der(0x17, format!("{}Z", digits.get(2..).unwrap_or_default()).as_bytes())
    } else {
        der(0x18, format!("{digits}Z").as_bytes())
    }
}

/// `der` in PEM armour under `label`.
pub fn pem(label: &str, der: &[u8]) -> String {
    let b64 = crate::base64::encode(der);
    let lines: Vec<&str> = b64.as_bytes().chunks(64).filter_map(|c| std::str::from_utf8(c).ok()).collect();
    format!("-----BEGIN {label}-----\n{}\n-----END {label}-----\n", lines.join("\n"))
}
