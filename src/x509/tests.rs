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
