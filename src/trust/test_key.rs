//! A signer for unit tests: minisign's legacy (`Ed`) signatures made with ring from a fixed
//! seed, so tests of the sources and the rollback stage need no `minisign` binary (the
//! end-to-end tests use the stock CLI).

use super::PublicKey;
use ring::signature::{Ed25519KeyPair, KeyPair};

fn pair(seed: u8) -> Ed25519KeyPair {
    Ed25519KeyPair::from_seed_unchecked(&[seed; 32]).expect("a seed is a key")
}

/// The public key of the test key `seed` (its id: the seed eight times).
pub fn key(seed: u8) -> PublicKey {
    let mut key = [0u8; 32];
    key.copy_from_slice(pair(seed).public_key().as_ref());
    PublicKey { id: [seed; 8], key }
}

/// A minisign signature file of `message` by the test key `seed`, with `comment` trusted.
pub fn sign(seed: u8, message: &[u8], comment: &str) -> Vec<u8> {
    let pair = pair(seed);
    let sig = pair.sign(message);
    let mut line = b"Ed".to_vec();
    line.extend_from_slice(&[seed; 8]);
    line.extend_from_slice(sig.as_ref());
    let mut covered = sig.as_ref().to_vec();
    covered.extend_from_slice(comment.as_bytes());
    let global = pair.sign(&covered);
    let b64 = crate::base64::encode;
    format!(
        "untrusted comment: test key {seed}\n{}\ntrusted comment: {comment}\n{}\n",
        b64(&line),
        b64(global.as_ref())
    )
    .into_bytes()
}
