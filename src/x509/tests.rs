//! The requests checked by openssl, as a signer reads them; validity and names read back from
//! certificates openssl made.

use super::*;
use std::process::Command;

fn openssl(args: &[&str], input: Option<&std::path::Path>) -> String {
    let mut c = Command::new("openssl");
    c.args(args);
    if let Some(i) = input {
        c.arg("-in").arg(i);
    }
    let out = c.output().expect("openssl runs");
    assert!(out.status.success(), "openssl {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr)
}

#[test]
fn a_request_openssl_verifies_with_kubelets_subject_and_names() {
    let dir = crate::testdir::TestDir::new("x509-csr");
    let key = new_key().unwrap();
    let subject = Subject { common_name: "system:node:edge-1", organizations: &["system:nodes"] };
    let names = vec!["edge-1".to_string(), "10.0.0.5".to_string(), "fd00::5".to_string()];
    let path = dir.join("serving.csr");
    std::fs::write(&path, pem("CERTIFICATE REQUEST", &csr(&key, &subject, &names).unwrap())).unwrap();
    let text = openssl(&["req", "-noout", "-verify", "-text"], Some(&path));
    assert!(text.contains("verify OK") || text.contains("Certificate request self-signature verify OK"), "{text}");
    assert!(text.contains("O = system:nodes, CN = system:node:edge-1"), "O then CN, as Go orders them: {text}");
    assert!(text.contains("DNS:edge-1, IP Address:10.0.0.5, IP Address:FD00:0:0:0:0:0:0:5"), "{text}");
    assert!(text.contains("ecdsa-with-SHA256") && text.contains("prime256v1"), "{text}");

    let bare = dir.join("client.csr");
    std::fs::write(&bare, pem("CERTIFICATE REQUEST", &csr(&key, &subject, &[]).unwrap())).unwrap();
    let text = openssl(&["req", "-noout", "-verify", "-text"], Some(&bare));
    assert!(text.contains("verify OK") && !text.contains("Subject Alternative Name"), "{text}");
    // The public key in the request is the key's (what a signer certifies).
    let spki_pem = pem("PUBLIC KEY", &spki(&key).unwrap());
    assert!(openssl(&["req", "-noout", "-pubkey"], Some(&bare)).contains(spki_pem.trim()), "the request's key is ours");
}

#[test]
fn a_bad_name_or_key_makes_no_request() {
    let key = new_key().unwrap();
    let subject = Subject { common_name: "system:node:edge-1", organizations: &["system:nodes"] };
    assert_eq!(csr(&key, &subject, &["not a name".into()]), Err(Error::BadName("not a name".into())));
    assert_eq!(csr(b"not a key", &subject, &[]), Err(Error::Key("reading the P-256 key")));
}

#[test]
fn validity_and_names_read_back_from_a_certificate_openssl_made() {
    let dir = crate::testdir::TestDir::new("x509-read");
    std::fs::write(dir.join("ext"), "subjectAltName=DNS:edge-1,IP:10.0.0.5,IP:fd00::5\n").unwrap();
    let d = dir.to_str().unwrap();
    openssl(
        &[
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
            "-keyout",
            &format!("{d}/k"),
            "-out",
            &format!("{d}/c.pem"),
            "-days",
            "3",
            "-subj",
            "/CN=x",
            "-addext",
            "subjectAltName=DNS:edge-1,IP:10.0.0.5,IP:fd00::5",
        ],
        None,
    );
    let pem_text = std::fs::read(dir.join("c.pem")).unwrap();
    let cert = crate::tls::pem_chain(&pem_text).remove(0);
    let (from, until) = validity(&cert).expect("validity reads");
    assert_eq!(until.duration_since(from).unwrap().as_secs(), 3 * 86400);
    let now = std::time::SystemTime::now();
    assert!(from <= now && now < until);
    assert_eq!(alt_names(&cert), Some(vec!["edge-1".into(), "10.0.0.5".into(), "fd00::5".into()]));
    assert_eq!(validity(&cert[..cert.len() - 1]), None, "a cut certificate does not read");
    assert_eq!(alt_names(b"\x30\x05junk"), None);
}

/// A DER element as the tests write one (short lengths only).
fn el(tag: u8, content: &[u8]) -> Vec<u8> {
    [&[tag, content.len() as u8][..], content].concat()
}

/// A certificate's bones: the fields before validity, then validity's two times.
fn cert(versioned: bool, until: (u8, &str)) -> Vec<u8> {
    let version = if versioned { el(0xa0, &el(0x02, &[2])) } else { vec![] };
    let validity = el(0x30, &[el(0x17, b"260101000000Z"), el(until.0, until.1.as_bytes())].concat());
    let tbs = [version, el(0x02, &[7]), el(0x30, &[]), el(0x30, &[]), validity, el(0x30, &[])].concat();
    el(0x30, &[el(0x30, &tbs), el(0x30, &[])].concat())
}

fn not_after(der: &[u8]) -> Option<String> {
    validity(der).map(|(_, until)| crate::rfc3339::format_seconds(until))
}

#[test]
fn a_certificates_end_reads_from_either_time_form() {
    for (versioned, until, want) in [
        (true, (0x17, "271128070000Z"), Some("2027-11-28T07:00:00Z")),
        (false, (0x17, "271128070000Z"), Some("2027-11-28T07:00:00Z")),
        (true, (0x17, "491231235959Z"), Some("2049-12-31T23:59:59Z")),
        (true, (0x17, "500101000000Z"), Some("1970-01-01T00:00:00Z")), // 1950: before the epoch, taken as it
        (true, (0x18, "20510101000000Z"), Some("2051-01-01T00:00:00Z")),
        (true, (0x18, "99991231235959Z"), Some("9999-12-31T23:59:59Z")),
        (true, (0x17, "2711280700Z"), None),
        (true, (0x17, "271128070000"), None),
        (true, (0x17, "27112807000aZ"), None),
        (true, (0x18, "271128070000Z"), None),
        (true, (0x04, "271128070000Z"), None),
    ] {
        assert_eq!(not_after(&cert(versioned, until)).as_deref(), want, "{until:?}");
    }
}

/// Any cut, any flipped byte: an answer or none, never a panic.
#[test]
fn damaged_certificates_have_no_validity_or_a_wrong_one_never_a_panic() {
    let der = cert(true, (0x17, "271128070000Z"));
    for end in 0..der.len() {
        assert_eq!(validity(&der[..end]), None);
        let _ = alt_names(&der[..end]);
    }
    for i in 0..der.len() {
        let mut bad = der.clone();
        bad[i] ^= 0xff;
        let _ = (validity(&bad), alt_names(&bad));
    }
}
