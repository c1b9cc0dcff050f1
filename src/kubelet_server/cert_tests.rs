use super::*;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer, ServerName};
use std::sync::Arc;

fn names(list: &[&str]) -> Vec<String> {
    list.iter().map(|s| s.to_string()).collect()
}

/// A TLS handshake in memory: a client that trusts only `cert` dials `server_name`.
fn handshake(s: &Serving, server_name: &str) -> Result<(), rustls::Error> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut roots = rustls::RootCertStore::empty();
    roots.add(CertificateDer::from(s.cert.clone())).expect("the certificate parses as a trust anchor");
    let client = rustls::ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()?
        .with_root_certificates(roots)
        .with_no_client_auth();
    let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(s.key.clone()));
    let server = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_no_client_auth()
        .with_single_cert(vec![CertificateDer::from(s.cert.clone())], key)?;
    let name = ServerName::try_from(server_name.to_string()).expect("a server name");
    let mut c = rustls::ClientConnection::new(Arc::new(client), name)?;
    let mut srv = rustls::ServerConnection::new(Arc::new(server))?;
    for _ in 0..10 {
        let mut buf = Vec::new();
        c.write_tls(&mut buf).expect("write");
        srv.read_tls(&mut &buf[..]).expect("read");
        srv.process_new_packets()?;
        buf.clear();
        srv.write_tls(&mut buf).expect("write");
        c.read_tls(&mut &buf[..]).expect("read");
        c.process_new_packets()?;
        if !c.is_handshaking() && !srv.is_handshaking() {
            return Ok(());
        }
    }
    panic!("the handshake did not finish");
}

#[test]
fn clients_accept_it_for_each_name_and_only_those() {
    let s = make(&names(&["gw-1", "192.168.7.10", "fd00::10", "gw-1.example"]), SystemTime::now()).unwrap();
    for name in ["gw-1", "192.168.7.10", "fd00::10", "gw-1.example"] {
        handshake(&s, name).unwrap_or_else(|e| panic!("{name}: {e}"));
    }
    for other in ["gw-2", "192.168.7.11", "example"] {
        let e = handshake(&s, other).expect_err(other);
        assert!(e.to_string().contains("not valid for name"), "{other}: {e}");
    }
}

#[test]
fn it_is_valid_from_an_hour_ago_for_a_year() {
    let an_hour_ago = SystemTime::now() - Duration::from_secs(3000);
    handshake(&make(&names(&["127.0.0.1"]), an_hour_ago).unwrap(), "127.0.0.1").unwrap();
    let expired = SystemTime::now() - VALIDITY - Duration::from_secs(60);
    let e = handshake(&make(&names(&["127.0.0.1"]), expired).unwrap(), "127.0.0.1").unwrap_err();
    assert!(e.to_string().contains("expired"), "{e}");
    let future = SystemTime::now() + Duration::from_secs(7200);
    let e = handshake(&make(&names(&["127.0.0.1"]), future).unwrap(), "127.0.0.1").unwrap_err();
    assert!(e.to_string().contains("not valid yet"), "{e}");
    // After 2049 the times are GeneralizedTime.
    assert_eq!(time(SystemTime::UNIX_EPOCH + Duration::from_secs(2_556_144_000))[0], 0x18);
    assert_eq!(time(SystemTime::UNIX_EPOCH)[0], 0x17);
}

#[test]
fn names_that_are_neither_address_nor_dns_name_are_refused() {
    for bad in ["", "gw 1", "gw/1", "ü"] {
        assert!(make(&names(&[bad]), SystemTime::now()).is_err(), "{bad:?}");
    }
    assert!(make(&[], SystemTime::now()).is_err());
}

#[test]
fn it_is_kept_until_the_names_change_or_its_end_nears() {
    let dir = std::env::temp_dir().join(format!("atoll-cert-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let now = SystemTime::now();
    let first = load_or_make(&dir, &names(&["gw-1", "10.0.0.1"]), now).unwrap();
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(dir.join("kubelet.key")).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o600);
    let again = load_or_make(&dir, &names(&["gw-1", "10.0.0.1"]), now + Duration::from_secs(86400)).unwrap();
    assert_eq!(again.cert, first.cert, "the same names: the same certificate");
    assert_eq!(again.key, first.key);
    let moved = load_or_make(&dir, &names(&["gw-1", "10.0.0.2"]), now).unwrap();
    assert_ne!(moved.cert, first.cert, "a new address: a new certificate");
    handshake(&moved, "10.0.0.2").unwrap();
    let late = now + VALIDITY - RENEW_BEFORE + Duration::from_secs(1);
    let renewed = load_or_make(&dir, &names(&["gw-1", "10.0.0.2"]), late).unwrap();
    assert_ne!(renewed.cert, moved.cert, "near its end: a new certificate");
    std::fs::write(dir.join("kubelet.crt"), "garbage").unwrap();
    let repaired = load_or_make(&dir, &names(&["gw-1", "10.0.0.2"]), late).unwrap();
    assert_ne!(repaired.cert, renewed.cert, "an unreadable certificate is made again");
    assert_eq!(load_or_make(&dir, &names(&["gw-1", "10.0.0.2"]), late).unwrap().cert, repaired.cert);
    let _ = std::fs::remove_dir_all(&dir);
}

/// `/metrics`' server TTL reads the end the certificate was made with, in both time forms,
/// and the end openssl writes.
#[test]
fn a_made_certificates_end_reads_back() {
    let at = |s: u64| SystemTime::UNIX_EPOCH + Duration::from_secs(s);
    // 2026-11-28T08:00:00Z (UTCTime), and 2049-06-03 whose end is past 2050 (GeneralizedTime).
    for (now, end) in [(at(1_795_852_800), "2027-11-28T08:00:00Z"), (at(2_506_291_200), "2050-06-03T00:00:00Z")] {
        let s = make(&names(&["gw-1"]), now).unwrap();
        let until = crate::x509::validity(&s.cert).map(|(_, until)| crate::rfc3339::format_seconds(until));
        assert_eq!(until.as_deref(), Some(end));
        assert_eq!(crate::rfc3339::parse_seconds(end), Some(now + VALIDITY));
    }
    let dir = std::env::temp_dir().join(format!("atoll-cert-end-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let made = std::process::Command::new("openssl")
        .args(["req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-days", "30"])
        .args(["-subj", "/CN=n", "-outform", "DER", "-keyout"])
        .arg(dir.join("key.pem"))
        .arg("-out")
        .arg(dir.join("cert.der"))
        .stderr(std::process::Stdio::null())
        .status()
        .expect("openssl is needed (tests/run.sh installs it)");
    assert!(made.success());
    let (_, end) = crate::x509::validity(&std::fs::read(dir.join("cert.der")).unwrap()).unwrap();
    let left = end.duration_since(SystemTime::now()).unwrap();
    assert!(left > Duration::from_secs(29 * 86400) && left <= Duration::from_secs(30 * 86400), "{end:?}");
    let _ = std::fs::remove_dir_all(&dir);
}
