use super::*;

/// Made with the stock age 1.1.1: `age-keygen`, then `age -r <its recipient>` (and `-a`) over
/// a Secret manifest. Test data only.
const IDENTITY: &str = "AGE-SECRET-KEY-1L2ZQ9KSAW3E3JXREPM6TZPHCJ9ACFVEK2EWF3APNCNQU5D7AG0WSYVWMQN";
const RECIPIENT: &str = "age1ufjmdj4eq2ptpgz6yscj8gpaqhjxaf5tm0w6h4j0c347s2r4c5aqnhlu27";
const BINARY_B64: &str = "YWdlLWVuY3J5cHRpb24ub3JnL3YxCi0+IFgyNTUxOSBtUXB3NXlKaG5NNXBveS85OVQ4V2hEbUpteVRRejdhZmhjRUJhb2p4R2dVCmZmTkJlZmpCT1dWQjNEeVMzbEpxUXFNQkRPYllJdmt3UVlaRHFRQU5mRlEKLS0tIFIzQStEdVhFZklRMlkrQUlybnd2ZFg5MnBZMExyZ0h3QVY2NHJpMkI4MjgKqa2nU1II0PZwUbaTPedL42E64Se/jbO2b/mZtFIMdIUO5gRgedTHLE+gcAGjDChDvQK9o8YjEPZitJ0lAGTFGUuYUqF2zReC8yF+ejHwpwdjiq8LmS7JUdKlScyMvVSn1HMZV+YacIojPXEF+LY4BtU=";
const ARMORED: &str = "-----BEGIN AGE ENCRYPTED FILE-----
YWdlLWVuY3J5cHRpb24ub3JnL3YxCi0+IFgyNTUxOSBMbTlaWitnbXJUYnpDS0JX
RzRRTTRxQzFMeWlkOElkR1RuejlQaFJ3L3prCjI0SjZienBYajduWUdHek03eE5R
NkFIQkJwcDdXTXdmY21uUk9GZmRsVmsKLS0tIHQyayt0TjV3bCtaZEtPV0ZxQ01I
K3V2MVlsMlc1MFR5S2VGcmEwcVdsUVUKqn9kB+WNvs2Akreqq4FZbVILZcP+huvb
teIozoIZCRX3XvP/N3T3lL8LAEKv5zqI1AUY8fLnENcnn191bF+37n1J2krvSIxn
NnQy5qJeuecsA0FRRy9eum0TktPEgf9vUmDQUu4r9N/cEDqlQgvRgyI=
-----END AGE ENCRYPTED FILE-----
";
const PLAIN: &str = "apiVersion: v1\nkind: Secret\nmetadata: {name: db}\nstringData: {password: hunter2}\n";

fn binary() -> Vec<u8> {
    crate::base64::decode(BINARY_B64).unwrap()
}

#[test]
fn the_identity_gives_age_keygens_recipient_and_hides_its_key() {
    let id = Identity::parse(IDENTITY).unwrap();
    assert_eq!(id.recipient(), RECIPIENT);
    assert_eq!(format!("{id:?}"), format!("Identity({RECIPIENT})"));
    let mut broken = IDENTITY.to_string();
    broken.replace_range(20..21, "Q");
    let e = Identity::parse(&broken).unwrap_err().to_string();
    assert!(e.contains("checksum") && !e.contains(IDENTITY.get(16..).unwrap()), "{e}");
    assert!(Identity::parse(RECIPIENT).unwrap_err().to_string().contains("not an age identity"));
}

#[test]
fn files_made_by_the_stock_cli_decrypt_binary_and_armored() {
    let id = Identity::parse(IDENTITY).unwrap();
    assert_eq!(id.decrypt(&binary()).unwrap(), PLAIN.as_bytes());
    assert_eq!(id.decrypt(ARMORED.as_bytes()).unwrap(), PLAIN.as_bytes());
}

#[test]
fn anything_altered_or_for_another_key_is_refused_whole() {
    let id = Identity::parse(IDENTITY).unwrap();
    let good = binary();
    // Every single flipped byte: the header's stanza or MAC, the nonce, the payload or its tag.
    for at in (0..good.len()).step_by(7) {
        let mut bad = good.clone();
        bad[at] ^= 0x01;
        assert!(id.decrypt(&bad).is_err(), "a flip at byte {at} went unnoticed");
    }
    assert!(id.decrypt(&good[..good.len() - 1]).is_err());
    assert!(id.decrypt(b"not age at all").unwrap_err().to_string().contains("not an age file"));
    let other = Identity { secret: [7; 32], public: x25519::public(&[7; 32]) };
    assert!(other.decrypt(&good).unwrap_err().to_string().contains("not encrypted to this box's key"));
}

#[test]
fn key_files_must_be_roots_alone() {
    use std::os::unix::fs::PermissionsExt;
    let path = std::env::temp_dir().join(format!("atoll-age-key-{}", std::process::id()));
    std::fs::write(&path, format!("# created: now\n# public key: {RECIPIENT}\n{IDENTITY}\n")).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
    let e = Identity::from_file(&path).unwrap_err().to_string();
    assert!(e.contains("mode 0644: a key file must be owned by root with mode 0600"), "{e}");
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
    assert_eq!(Identity::from_file(&path).unwrap().recipient(), RECIPIENT);
    let _ = std::fs::remove_file(&path);
}

#[test]
fn a_key_file_is_checked_on_the_descriptor_it_is_read_from() {
    use std::os::unix::fs::PermissionsExt;
    let d = std::env::temp_dir().join(format!("atoll-age-key-dir-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    let key = d.join("age.key");
    std::fs::write(&key, format!("# created: test\n{IDENTITY}\n")).unwrap();
    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o600)).unwrap();
    assert_eq!(Identity::from_file(&key).unwrap().recipient(), RECIPIENT);
    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o640)).unwrap();
    let e = Identity::from_file(&key).unwrap_err().to_string();
    assert!(e.contains("mode 0640: a key file must be owned by root with mode 0600"), "{e}");
    // A link (whoever changes it chooses the key) and a FIFO (it would block) are refused.
    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o600)).unwrap();
    std::os::unix::fs::symlink(&key, d.join("link")).unwrap();
    assert!(Identity::from_file(&d.join("link")).is_err());
    rustix::fs::mkfifoat(rustix::fs::CWD, d.join("fifo"), rustix::fs::Mode::from_raw_mode(0o600)).unwrap();
    assert!(Identity::from_file(&d.join("fifo")).unwrap_err().to_string().contains("not a regular file"));
    let _ = std::fs::remove_dir_all(&d);
}
