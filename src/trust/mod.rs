//! Signed manifests: minisign's detached signatures, verified offline with ring's Ed25519
//! (already linked for TLS) and an in-tree BLAKE2b-512 for minisign's default prehashed form.
//! Why minisign: keys and signatures are single lines of text, the stock `minisign` CLI signs,
//! nothing needs a clock, a network or a certificate chain, and the verifier is a few hundred
//! lines (cosign needs a transparency log or TUF root for its usual mode; GPG's format is
//! large). See `docs/src/guides/fleet-updates.md`.
//!
//! Formats (minisign's): a public key is `Ed` ‖ key id (8) ‖ Ed25519 key (32), base64, after
//! an untrusted comment line. A signature file is an untrusted comment, base64 of `Ed` or `ED`
//! ‖ key id ‖ signature (64) over the file (`Ed`) or over its BLAKE2b-512 (`ED`), the trusted
//! comment line, and base64 of a global signature over signature ‖ trusted comment. Both
//! signatures must verify. The version that guards against replays is read from the trusted
//! comment: `serial=N` if the signer wrote one, else minisign's own `timestamp:N`; a
//! `node=NAME[,NAME...]` there binds the signature to those nodes (any other refuses it).

mod blake2b;
mod versions;

pub use versions::{Claim, Scheme, Version, Versions};

use ring::signature::{UnparsedPublicKey, ED25519};
use std::path::Path;

/// Why a key or a signature was refused.
#[derive(Debug)]
pub enum Error {
    /// The signature file beside a manifest could not be read.
    Read { path: std::path::PathBuf, source: std::io::Error },
    /// The signature file is over [`MAX_SIGNATURE_BYTES`].
    TooLarge,
    /// A base64 line (`part`: which one) that is not base64.
    Base64 { part: &'static str, error: crate::base64::Error },
    /// Signed by a key that is not trusted (its id).
    Untrusted { key: String },
    /// The signature by this key does not match the content.
    Mismatch { key: String },
    /// The trusted comment signed by this key was altered.
    Altered { key: String },
    /// Not minisign's format: what is wrong.
    Malformed(&'static str),
}

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Error::Read { path, source } => write!(f, "{}: {source}", path.display()),
            Error::TooLarge => write!(f, "the signature file is larger than {MAX_SIGNATURE_BYTES} bytes"),
            Error::Base64 { part, error } => write!(f, "{part}: {error}"),
            Error::Untrusted { key } => write!(f, "signed by key {key}, which is not trusted"),
            Error::Mismatch { key } => write!(f, "the signature by key {key} does not match the content"),
            Error::Altered { key } => write!(f, "the trusted comment signed by key {key} was altered"),
            Error::Malformed(what) => f.write_str(what),
        }
    }
}

impl std::error::Error for Error {}

/// What atoll's config says about signed manifests (`manifestTrust`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Trust {
    pub keys: Vec<PublicKey>,
    /// Every manifest must be signed; otherwise only signatures that are there are checked.
    pub require: bool,
}

/// The signature beside a manifest file: `pod.yaml.minisig` for `pod.yaml`.
pub const SIGNATURE_SUFFIX: &str = ".minisig";

impl Trust {
    /// Checks the manifest `bytes` against `signature` (the signature file's bytes, if there is
    /// one; `shown` names it in errors) for the node `node`. `Ok(None)`: unsigned, and
    /// signatures are not required.
    pub fn check(
        &self,
        bytes: &[u8],
        signature: Option<&[u8]>,
        shown: &str,
        node: &str,
    ) -> Result<Option<Verified>, String> {
        let Some(signature) = signature else {
            return match self.require {
                true => Err(format!("unsigned: no {shown}, and manifestTrust requires a signature")),
                false => Ok(None),
            };
        };
        let v = verify(&self.keys, bytes, signature).map_err(|e| format!("{shown}: {e}"))?;
        if v.version.is_none() {
            return Err(format!(
                "{shown}: the trusted comment {:?} has no serial=N or timestamp:N, so a replayed older version could not be told apart",
                v.trusted_comment
            ));
        }
        if !v.nodes.is_empty() && !v.nodes.iter().any(|n| n == node) {
            return Err(format!("{shown}: signed for node {}, not for this node ({node})", v.nodes.join(", ")));
        }
        Ok(Some(v))
    }
}

/// The signature file beside `manifest`, if there is one (read through the bounded reader).
pub fn signature_beside(manifest: &Path) -> Result<Option<Vec<u8>>, Error> {
    let mut name = manifest.as_os_str().to_owned();
    name.push(SIGNATURE_SUFFIX);
    match crate::bounded::read_file(Path::new(&name), MAX_SIGNATURE_BYTES) {
        Ok(b) => Ok(Some(b)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(source) => Err(Error::Read { path: name.into(), source }),
    }
}

/// The most a signature file may hold (minisign's are under 1 KiB with a long comment).
pub const MAX_SIGNATURE_BYTES: usize = 4096;

/// A trusted public key.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PublicKey {
    id: [u8; 8],
    key: [u8; 32],
}

impl PublicKey {
    /// A key from a minisign public key file's text (or its base64 line alone).
    pub fn parse(text: &str) -> Result<PublicKey, Error> {
        let line = text
            .lines()
            .map(|l| l.trim())
            .find(|l| !l.is_empty() && !l.starts_with("untrusted comment:"))
            .ok_or(Error::Malformed("no key in it"))?;
        let raw = crate::base64::decode(line).map_err(|error| Error::Base64 { part: "the key line", error })?;
        if raw.len() != 42 || &raw[..2] != b"Ed" {
            return Err(Error::Malformed("not a minisign Ed25519 public key"));
        }
        let (mut id, mut key) = ([0u8; 8], [0u8; 32]);
        id.copy_from_slice(&raw[2..10]);
        key.copy_from_slice(&raw[10..]);
        Ok(PublicKey { id, key })
    }

    /// The key id as minisign prints it.
    pub fn id(&self) -> String {
        key_id(&self.id)
    }
}

fn key_id(id: &[u8; 8]) -> String {
    format!("{:016X}", u64::from_le_bytes(*id))
}

/// What a good signature says.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Verified {
    /// The id of the key that signed.
    pub key: String,
    pub trusted_comment: String,
    /// From the trusted comment (`serial=N`, else `timestamp:N`); `None` when it has neither.
    pub version: Option<Version>,
    /// The nodes the trusted comment binds it to (`node=a,b`); empty: any node.
    pub nodes: Vec<String>,
}

/// Checks `signature` (a minisign signature file's text) over `message` against `keys`.
/// The error says what is wrong, naming the key id where there is one.
pub fn verify(keys: &[PublicKey], message: &[u8], signature: &[u8]) -> Result<Verified, Error> {
    if signature.len() > MAX_SIGNATURE_BYTES {
        return Err(Error::TooLarge);
    }
    let text = std::str::from_utf8(signature).map_err(|_| Error::Malformed("the signature file is not text"))?;
    let mut lines = text.lines().map(|l| l.strip_suffix('\r').unwrap_or(l));
    let (Some(untrusted), Some(sig_line), Some(trusted), Some(global_line)) =
        (lines.next(), lines.next(), lines.next(), lines.next())
    else {
        return Err(Error::Malformed("not a minisign signature (four lines expected)"));
    };
    if !untrusted.starts_with("untrusted comment:") {
        return Err(Error::Malformed("not a minisign signature (no untrusted comment line)"));
    }
    let comment = trusted
        .strip_prefix("trusted comment: ")
        .ok_or(Error::Malformed("not a minisign signature (no trusted comment)"))?;
    let sig =
        crate::base64::decode(sig_line.trim()).map_err(|error| Error::Base64 { part: "the signature line", error })?;
    if sig.len() != 74 {
        return Err(Error::Malformed("not a minisign signature (the signature line has the wrong length)"));
    }
    let mut id = [0u8; 8];
    id.copy_from_slice(&sig[2..10]);
    let shown = key_id(&id);
    let Some(key) = keys.iter().find(|k| k.id == id) else { return Err(Error::Untrusted { key: shown }) };
    let pk = UnparsedPublicKey::new(&ED25519, &key.key);
    let signed = match &sig[..2] {
        b"ED" => pk.verify(&blake2b::blake2b_512(message), &sig[10..]),
        b"Ed" => pk.verify(message, &sig[10..]),
        _ => return Err(Error::Malformed("unknown minisign signature algorithm")),
    };
    if signed.is_err() {
        return Err(Error::Mismatch { key: shown });
    }
    let global = crate::base64::decode(global_line.trim())
        .map_err(|error| Error::Base64 { part: "the global signature", error })?;
    let mut covered = sig[10..].to_vec();
    covered.extend_from_slice(comment.as_bytes());
    if pk.verify(&covered, &global).is_err() {
        return Err(Error::Altered { key: shown });
    }
    let nodes = words(comment, "node=").flat_map(|w| w.split(',')).filter(|n| !n.is_empty());
    let nodes = nodes.map(|n| n.to_ascii_lowercase()).collect();
    Ok(Verified { key: shown, trusted_comment: comment.to_string(), version: version_of(comment), nodes })
}

/// The words of `comment` after `prefix`.
fn words<'a>(comment: &'a str, prefix: &'a str) -> impl Iterator<Item = &'a str> {
    comment.split(|c: char| c.is_whitespace()).filter_map(move |w| w.strip_prefix(prefix))
}

/// `serial=N` anywhere in the comment, else `timestamp:N`.
fn version_of(comment: &str) -> Option<Version> {
    let number = |prefix| words(comment, prefix).find_map(|w| w.parse::<u64>().ok());
    number("serial=").map(Version::serial).or_else(|| number("timestamp:").map(Version::timestamp))
}

#[doc(hidden)] // unit tests' and fuzz/fuzz_targets/minisign.rs's signer; unused code the release build drops
pub mod test_key;

#[cfg(test)]
#[path = "tests.rs"]
mod tests;
