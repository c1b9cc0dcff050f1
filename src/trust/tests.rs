//! Signatures made with the stock `minisign` 0.11 CLI (prehashed default and `-l` legacy).

use super::*;

const PUB: &str = "untrusted comment: minisign public key 9766568A35A74399\nRWSZQ6c1ilZml5y6wD4PC2h11yUzhxyBXiiDjnUr2taaDCOxlw8edujl\n";
const HASHED: &str = "untrusted comment: signature from minisign secret key\nRUSZQ6c1ilZml/4kwjVKHVnnSU4HM8xQFtkhDW3zfOwsjTmTcB8SfoXZmthwQ6g9Y2UU90Z2H9grFGmbduXjMbNp+dIg4crx+QQ=\ntrusted comment: timestamp:1795459492\tfile:pod.yaml\thashed\n2c1Omx5C3TTsUi6VLdQ0OA1pyqwX7j+Cp1FxecD9EMbjg6pj8wBpA+2X5YPW8cUjiG/+1DJIT6C5eVm33GfNDQ==\n";
const LEGACY: &str = "untrusted comment: signature from minisign secret key\nRWSZQ6c1ilZml8osXA8rB6h7LT0sOE+wkjCHwOvigyJ2vyyhp4tAbtf0Zqo4ge7RQUPEmWlAe+dfAlumdsY3n9oBY5ud4B0DYw4=\ntrusted comment: atoll serial=42\n6gceGj9Z0Q4BH59IUt5OcCakclFPbfZRwJx/L4G/kYe2+twqiaILhr8ZU4nCX1SgfoXG2AC1h+mlM7PclQqFAg==\n";

/// The signed file: 1290 bytes, several BLAKE2b blocks.
fn message() -> Vec<u8> {
    (0..20)
        .map(|i| format!("line {i} of a manifest long enough to span several blake2b blocks\n"))
        .collect::<String>()
        .into_bytes()
}

#[test]
fn stock_minisign_signatures_verify() {
    let keys = [PublicKey::parse(PUB).unwrap()];
    assert_eq!(keys[0].id(), "9766568A35A74399");
    let v = verify(&keys, &message(), HASHED.as_bytes()).unwrap();
    assert_eq!((v.key.as_str(), v.version), ("9766568A35A74399", Some(Version::timestamp(1795459492))));
    let v = verify(&keys, &message(), LEGACY.as_bytes()).unwrap();
    assert_eq!((v.trusted_comment.as_str(), v.version), ("atoll serial=42", Some(Version::serial(42))));
    // Windows line ends do not matter.
    assert!(verify(&keys, &message(), HASHED.replace('\n', "\r\n").as_bytes()).is_ok());
}

#[test]
fn tampered_content_comment_or_key_is_refused() {
    let keys = [PublicKey::parse(PUB).unwrap()];
    let mut changed = message();
    changed[100] ^= 1;
    for sig in [HASHED, LEGACY] {
        let e = verify(&keys, &changed, sig.as_bytes()).unwrap_err().to_string();
        assert!(e.contains("does not match the content") && e.contains("9766568A35A74399"), "{e}");
    }
    let comment = HASHED.replace("timestamp:1795459492", "timestamp:1895459492");
    let e = verify(&keys, &message(), comment.as_bytes()).unwrap_err().to_string();
    assert!(e.contains("trusted comment") && e.contains("altered"), "{e}");
    // Another key with the same id (a forged id) still fails on the signature itself.
    let mut other = keys[0].clone();
    other.key[0] ^= 1;
    assert!(verify(&[other], &message(), HASHED.as_bytes()).is_err());
    // No trusted key with that id.
    let e = verify(&[], &message(), HASHED.as_bytes()).unwrap_err().to_string();
    assert_eq!(e, "signed by key 9766568A35A74399, which is not trusted");
}

#[test]
fn malformed_input_is_an_error_never_a_panic() {
    let keys = [PublicKey::parse(PUB).unwrap()];
    for bad in [
        "",
        "untrusted comment: x",
        "untrusted comment: x\nAAAA\ntrusted comment: t\nAAAA\n",
        "untrusted comment: x\n!!!!\ntrusted comment: t\nAAAA\n",
        "no comment\nRUSZ\ntrusted comment: t\nAAAA\n",
    ] {
        assert!(verify(&keys, b"m", bad.as_bytes()).is_err(), "{bad:?}");
    }
    assert!(verify(&keys, b"m", &[0xff, 0xfe]).is_err());
    assert!(verify(&keys, b"m", &vec![b'a'; MAX_SIGNATURE_BYTES + 1]).unwrap_err().to_string().contains("larger"));
    for bad in ["", "untrusted comment: k\n", "RWSZ", "RUSZQ6c1ilZml5y6wD4PC2h11yUzhxyBXiiDjnUr2taaDCOxlw8edujl"] {
        assert!(PublicKey::parse(bad).is_err(), "{bad:?}");
    }
}

#[test]
fn the_version_comes_from_serial_then_timestamp() {
    assert_eq!(version_of("timestamp:17\tfile:a.yaml"), Some(Version::timestamp(17)));
    assert_eq!(version_of("serial=3 timestamp:17"), Some(Version::serial(3)));
    assert_eq!(version_of("release 2"), None);
    assert_eq!(version_of("serial=-1"), None);
    assert_eq!(version_of("serial=99999999999999999999999"), None);
}

#[test]
fn a_signature_may_name_the_nodes_it_is_for() {
    let trust = Trust { keys: vec![test_key::key(7)], require: true };
    let m = b"apiVersion: v1\n";
    for (comment, node, ok) in [
        ("serial=3 node=gw-17", "gw-17", true),
        ("serial=3 node=gw-17", "gw-18", false),
        ("serial=3 node=gw-16,GW-17", "gw-17", true),
        ("node=gw-1 serial=3 node=gw-2", "gw-2", true),
        ("serial=3", "anything", true),
    ] {
        let got = trust.check(m, Some(&test_key::sign(7, m, comment)), "m.minisig", node);
        assert_eq!(got.is_ok(), ok, "{comment} on {node}: {got:?}");
        if !ok {
            let e = got.unwrap_err();
            assert_eq!(e, "m.minisig: signed for node gw-17, not for this node (gw-18)");
        }
    }
    // The binding is inside the trusted comment: changing it breaks the global signature.
    let sig = String::from_utf8(test_key::sign(7, m, "serial=3 node=gw-17")).unwrap();
    let moved = sig.replace("node=gw-17", "node=gw-18");
    assert!(trust.check(m, Some(moved.as_bytes()), "m.minisig", "gw-18").unwrap_err().contains("altered"));
    // Unsigned: refused only when required.
    assert!(trust.check(m, None, "m.minisig", "gw-17").is_err());
    let lax = Trust { require: false, ..trust };
    assert_eq!(lax.check(m, None, "m.minisig", "gw-17"), Ok(None));
}
