//! The API source's Secrets and tokens at rest: sealed with the node's key before they are
//! kept on disk. ChaCha20-Poly1305 (the AEAD age already brings into the binary) under a
//! 256-bit key made once at random (`<root-dir>/sources/api/key`, 0600 in a 0700 directory,
//! never logged), a fresh random nonce per write; a copy that was changed, or sealed under
//! another key, does not open. What this keeps from whom is in the guide
//! (docs/src/guides/cluster-pods.md): the key is on the same disk.

use ring::aead::{Aad, LessSafeKey, Nonce, UnboundKey, CHACHA20_POLY1305, NONCE_LEN};
use ring::rand::{SecureRandom, SystemRandom};
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

/// The node's key: read from `path`, or made and written there (readable by root only) the
/// first time.
pub fn node_key(path: &Path) -> std::io::Result<[u8; 32]> {
    match crate::bounded::read_file(path, 64) {
        Ok(bytes) => match <[u8; 32]>::try_from(bytes.as_slice()) {
            Ok(key) => return Ok(key),
            Err(_) => log::warn!("{} is not a 32-byte key; making a new one (what was sealed is lost)", path.display()),
        },
        // Only a key that is not there is made; any other failure keeps the one there.
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(e),
    }
    let mut key = [0u8; 32];
    SystemRandom::new().fill(&mut key).map_err(|_| std::io::Error::other("no randomness"))?;
    if let Some(dir) = path.parent() {
        crate::records::private_dir(dir)?;
    }
    let tmp = path.with_extension("tmp");
    let mut f = std::fs::OpenOptions::new().write(true).create(true).truncate(true).mode(0o600).open(&tmp)?;
    f.write_all(&key)?;
    f.sync_all()?;
    std::fs::rename(&tmp, path)?;
    if let Some(dir) = path.parent() {
        std::fs::File::open(dir)?.sync_all()?;
    }
    Ok(key)
}

/// `plain` sealed under `key`: base64 of the nonce, then the ciphertext and its tag.
pub fn seal(key: &[u8; 32], plain: &[u8]) -> Option<String> {
    let sealing = LessSafeKey::new(UnboundKey::new(&CHACHA20_POLY1305, key).ok()?);
    let mut nonce = [0u8; NONCE_LEN];
    SystemRandom::new().fill(&mut nonce).ok()?;
    let mut out = plain.to_vec();
    sealing.seal_in_place_append_tag(Nonce::assume_unique_for_key(nonce), Aad::empty(), &mut out).ok()?;
    let mut all = nonce.to_vec();
    all.extend_from_slice(&out);
    Some(crate::base64::encode(&all))
}

/// What `seal` sealed under `key`; None when it was changed or sealed under another key.
pub fn open(key: &[u8; 32], sealed: &str) -> Option<Vec<u8>> {
    let opening = LessSafeKey::new(UnboundKey::new(&CHACHA20_POLY1305, key).ok()?);
    let all = crate::base64::decode(sealed).ok()?;
    let (nonce, rest) = all.split_at_checked(NONCE_LEN)?;
    let nonce = Nonce::try_assume_unique_for_key(nonce).ok()?;
    let mut rest = rest.to_vec();
    let plain = opening.open_in_place(nonce, Aad::empty(), &mut rest).ok()?;
    Some(plain.to_vec())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sealed_opens_only_whole_and_under_its_own_key() {
        let dir = crate::testdir::TestDir::new("sealed");
        let key = node_key(&dir.join("api").join("key")).unwrap();
        assert_eq!(node_key(&dir.join("api").join("key")).unwrap(), key, "made once, then read");
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(std::fs::metadata(dir.join("api").join("key")).unwrap().permissions().mode() & 0o777, 0o600);
        let sealed = seal(&key, b"password=hunter2").unwrap();
        assert!(!sealed.contains("hunter2"));
        assert_ne!(seal(&key, b"password=hunter2").unwrap(), sealed, "a fresh nonce each time");
        assert_eq!(open(&key, &sealed).unwrap(), b"password=hunter2");
        let mut other = key;
        other[0] ^= 1;
        assert!(open(&other, &sealed).is_none(), "another key");
        let mut bytes = crate::base64::decode(&sealed).unwrap();
        let last = bytes.len() - 1;
        bytes[last] ^= 1;
        assert!(open(&key, &crate::base64::encode(&bytes)).is_none(), "changed");
        assert!(open(&key, "").is_none() && open(&key, "!!").is_none());
    }
}
