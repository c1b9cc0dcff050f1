//! The store against certificates openssl makes for our keys: what is written, what is read,
//! what is refused.

use super::*;
use std::os::unix::fs::PermissionsExt;

/// A key and a self-signed certificate for it (openssl, `days` long).
fn issued(dir: &Path, days: &str) -> (Vec<u8>, Vec<u8>) {
    let key = crate::x509::new_key().unwrap();
    let key_file = dir.join("k.pem");
    std::fs::write(&key_file, crate::x509::pem("PRIVATE KEY", &key)).unwrap();
    let out = std::process::Command::new("openssl")
        .args(["req", "-x509", "-subj", "/CN=system:node:edge-1", "-days", days, "-key"])
        .arg(&key_file)
        .output()
        .expect("openssl runs");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    (out.stdout, key)
}

#[test]
fn an_update_is_a_dated_private_file_the_current_link_points_to() {
    let dir = crate::testdir::TestDir::new("cert-store");
    let store = Store::new(&dir.join("pki"), "kubelet-client");
    assert!(store.current().unwrap().is_none(), "nothing stored yet");
    let (cert, key) = issued(&dir, "2");
    let t = SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(1_795_000_000); // 2026-11-18T11:06:40Z
    let stored = store.update(&cert, &key, t).unwrap();
    let file = dir.join("pki/kubelet-client-2026-11-18-11-06-40.pem");
    assert_eq!(std::fs::read_link(store.current_path()).unwrap(), file, "an absolute link, as client-go's");
    assert_eq!(std::fs::metadata(&file).unwrap().permissions().mode() & 0o777, 0o600);
    let text = std::fs::read_to_string(&file).unwrap();
    assert!(text.starts_with("-----BEGIN CERTIFICATE-----") && text.contains("-----BEGIN PRIVATE KEY-----"));
    let current = store.current().unwrap().expect("a current pair");
    assert_eq!((current.key_pkcs8, current.not_after), (key, stored.not_after));
    assert_eq!(stored.not_after.duration_since(stored.not_before).unwrap().as_secs(), 2 * 86400);

    let (cert2, key2) = issued(&dir, "3");
    store.update(&cert2, &key2, t + std::time::Duration::from_secs(60)).unwrap();
    assert_eq!(store.current().unwrap().unwrap().key_pkcs8, key2, "the newer is current");
    assert!(file.exists(), "the older file stays, as kubelet leaves it");
}

#[test]
fn a_certificate_for_another_key_or_a_link_out_of_the_dir_is_refused() {
    let dir = crate::testdir::TestDir::new("cert-store-bad");
    let store = Store::new(&dir.join("pki"), "kubelet-server");
    let (cert, _) = issued(&dir, "1");
    let other = crate::x509::new_key().unwrap();
    let e = store.update(&cert, &other, SystemTime::now()).err().unwrap();
    assert!(e.contains("not for the key"), "{e}");
    assert!(store.current().unwrap().is_none(), "nothing was made current");
    assert!(store.update(b"junk", &other, SystemTime::now()).is_err());

    std::fs::create_dir_all(dir.join("pki")).unwrap();
    std::fs::write(dir.join("elsewhere.pem"), &cert).unwrap();
    std::os::unix::fs::symlink(dir.join("elsewhere.pem"), store.current_path()).unwrap();
    let e = store.current().err().unwrap();
    assert!(e.contains("points out of"), "{e}");
}

#[test]
fn a_pair_kubelet_wrote_with_an_ec_private_key_is_read() {
    let dir = crate::testdir::TestDir::new("cert-store-sec1");
    let (cert, key) = issued(&dir, "2");
    // OpenSSL writes the key in SEC1 form (curve named, public key included), as Go does.
    let out = std::process::Command::new("openssl").args(["ec", "-in"]).arg(dir.join("k.pem")).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let sec1 = out.stdout;
    assert!(String::from_utf8_lossy(&sec1).starts_with("-----BEGIN EC PRIVATE KEY-----"));
    let pki = dir.join("pki");
    std::fs::create_dir_all(&pki).unwrap();
    let file = pki.join("kubelet-client-2026-11-18-11-06-40.pem");
    std::fs::write(&file, [cert, sec1].concat()).unwrap();
    std::os::unix::fs::symlink(&file, pki.join("kubelet-client-current.pem")).unwrap();
    let got = Store::new(&pki, "kubelet-client").current().unwrap().expect("the pair");
    assert_eq!(crate::x509::spki(&got.key_pkcs8), crate::x509::spki(&key), "the same key, as PKCS#8");
    // Another curve's key is refused by name.
    let p384 = std::process::Command::new("openssl")
        .args(["ecparam", "-name", "secp384r1", "-genkey", "-noout"])
        .output()
        .unwrap()
        .stdout;
    use rustls::pki_types::pem::PemObject;
    let der = rustls::pki_types::PrivateSec1KeyDer::from_pem_slice(&p384).unwrap();
    assert_eq!(crate::x509::pkcs8_from_sec1(der.secret_sec1_der()), None);
    assert_eq!(crate::x509::pkcs8_from_sec1(&[0x30, 0x03, 0x02, 0x01, 0x01]), None, "no private key");
}
