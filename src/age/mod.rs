//! Decryption of age files (age-encryption.org/v1, X25519 recipients), so Secret manifests
//! can be stored encrypted: `age -r age1… -o db.yaml.age db.yaml` on the operator's machine,
//! the identity (`age-keygen`) on the box in a file only root can read. Files are decrypted
//! into memory only. A leaf: the file source and `atoll validate` call it.
//!
//! The format, as the spec and the stock CLI make it: a text header (`-> X25519 <share>`
//! stanzas, each wrapping the 16-byte file key with ChaCha20-Poly1305 under an HKDF of the
//! X25519 shared secret; `--- <HMAC>` over the header), a 16-byte nonce, then the payload in
//! 64 KiB ChaCha20-Poly1305 chunks (the STREAM construction, the last chunk flagged). The
//! ASCII-armored form (`age -a`) is read too. ring does the symmetric parts; X25519 with a
//! static key is `x25519.rs`. Anything that does not check out is an error; no partial
//! plaintext is ever returned.

mod bech32;
mod error;
#[doc(hidden)] // for fuzz/fuzz_targets/age.rs
pub use bech32::{decode as bech32_decode, encode as bech32_encode};
pub use error::Error;
mod x25519;

use ring::aead::{Aad, LessSafeKey, Nonce, UnboundKey, CHACHA20_POLY1305};
use ring::hkdf::{Salt, HKDF_SHA256};
use std::fmt;
use std::path::Path;

/// Encrypted manifests end in this.
pub const SUFFIX: &str = ".age";

const INTRO: &[u8] = b"age-encryption.org/v1\n";
const CHUNK: usize = 64 << 10;
const TAG: usize = 16;
/// The most header atoll reads (a real one is a few hundred bytes per recipient).
const MAX_HEADER: usize = 64 << 10;

/// An X25519 identity (`AGE-SECRET-KEY-1…`). `Debug` shows the public key only.
#[derive(Clone)]
pub struct Identity {
    secret: [u8; 32],
    public: [u8; 32],
}

impl fmt::Debug for Identity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Identity({})", self.recipient())
    }
}

impl Identity {
    /// Reads an identity file as `age-keygen` writes it (comments, then the key); it must be
    /// a regular file only root can read or write (0600 or tighter, owned by root), checked on
    /// the descriptor that is then read (a file swapped in after a check by path is not).
    pub fn from_file(path: &Path) -> Result<Identity, Error> {
        use std::os::unix::fs::MetadataExt;
        let read = |source| Error::Read { path: path.into(), source };
        let file = crate::bounded::open_regular(path).map_err(read)?;
        let meta = file.metadata().map_err(read)?;
        if meta.uid() != 0 || meta.mode() & 0o077 != 0 {
            return Err(Error::NotRoots { path: path.into(), uid: meta.uid(), mode: meta.mode() & 0o7777 });
        }
        let text = crate::bounded::read_at_most(file, 64 << 10).map_err(read)?;
        let text = String::from_utf8_lossy(&text);
        let mut keys = text.lines().map(str::trim).filter(|l| !l.is_empty() && !l.starts_with('#'));
        let key = keys.next().ok_or_else(|| Error::NoKey { path: path.into() })?;
        Identity::parse(key).map_err(|e| Error::BadKey { path: path.into(), error: Box::new(e) })
    }

    /// `AGE-SECRET-KEY-1…` (bech32; the key itself is never in an error).
    pub fn parse(text: &str) -> Result<Identity, Error> {
        let (hrp, data) = bech32::decode(text).map_err(Error::NotIdentity)?;
        if hrp != "age-secret-key-" {
            return Err(Error::NotSecretKey);
        }
        let secret: [u8; 32] = data.try_into().map_err(|_| Error::KeyLength)?;
        Ok(Identity { public: x25519::public(&secret), secret })
    }

    /// The recipient (`age1…`) files for this identity are encrypted to.
    pub fn recipient(&self) -> String {
        bech32::encode("age", &self.public)
    }

    /// The plaintext of an age file (binary or armored) encrypted to this identity.
    pub fn decrypt(&self, file: &[u8]) -> Result<Vec<u8>, Error> {
        let binary;
        let file = if file.starts_with(b"-----BEGIN AGE ENCRYPTED FILE-----") {
            binary = dearmor(file)?;
            &binary[..]
        } else {
            file
        };
        let (header, mac_at, rest) = split_header(file)?;
        let mut key = None;
        for stanza in stanzas(header)? {
            if let Some(k) = self.unwrap(&stanza)? {
                key = Some(k);
                break;
            }
        }
        let file_key = key.ok_or_else(|| Error::NotForThisKey { recipient: self.recipient() })?;
        let mac = header.get(mac_at + 4..).ok_or("no header MAC")?;
        let mac = crate::base64::decode(std::str::from_utf8(mac).map_err(|_| "a header that is not text")?)?;
        let mac_key = ring::hmac::Key::new(ring::hmac::HMAC_SHA256, &hkdf(&file_key, b"", b"header")?);
        ring::hmac::verify(&mac_key, &header[..mac_at + 3], &mac).map_err(|_| "the header's MAC does not match")?;
        payload(&file_key, rest)
    }

    /// The file key from one `X25519` stanza, if it was made for this identity.
    fn unwrap(&self, stanza: &Stanza) -> Result<Option<[u8; 16]>, Error> {
        if stanza.kind != "X25519" {
            return Ok(None);
        }
        let share: [u8; 32] = match stanza.args.as_slice() {
            [share] => crate::base64::decode(share)?.try_into().map_err(|_| "an X25519 share holds 32 bytes")?,
            _ => return Err(Error::Malformed("an X25519 stanza has one argument")),
        };
        if stanza.body.len() != 32 {
            return Err(Error::Malformed("an X25519 stanza wraps 32 bytes"));
        }
        let shared = x25519::x25519(&self.secret, &share);
        if shared == [0u8; 32] {
            return Err(Error::Malformed("an X25519 share of low order"));
        }
        let mut salt = share.to_vec();
        salt.extend_from_slice(&self.public);
        let wrap = hkdf(&shared, &salt, b"age-encryption.org/v1/X25519")?;
        let mut body = stanza.body.clone();
        match open(&wrap, [0u8; 12], &mut body) {
            Ok(key) => Ok(key.try_into().ok()),
            Err(_) => Ok(None), // for another recipient
        }
    }
}

struct Stanza {
    kind: String,
    args: Vec<String>,
    body: Vec<u8>,
}

/// (header through the MAC line without its newline, where `---` starts, the rest).
fn split_header(file: &[u8]) -> Result<(&[u8], usize, &[u8]), Error> {
    if !file.starts_with(INTRO) {
        return Err(Error::Malformed("not an age file (no age-encryption.org/v1 header)"));
    }
    let limit = file.len().min(MAX_HEADER);
    let mut at = 0;
    while at < limit {
        let end =
            file[at..limit].iter().position(|b| *b == b'\n').map(|p| at + p).ok_or("the age header does not end")?;
        if file[at..end].starts_with(b"--- ") {
            return Ok((&file[..end], at, &file[end + 1..]));
        }
        at = end + 1;
    }
    Err(Error::Malformed("the age header does not end"))
}

fn stanzas(header: &[u8]) -> Result<Vec<Stanza>, Error> {
    let text = std::str::from_utf8(header).map_err(|_| "an age header that is not text")?;
    let mut out: Vec<Stanza> = Vec::new();
    let mut open_body = false;
    for line in text.lines().skip(1) {
        if line.starts_with("---") {
            break;
        }
        if let Some(rest) = line.strip_prefix("-> ") {
            let mut words = rest.split(' ');
            let kind = words.next().unwrap_or("").to_string();
            out.push(Stanza { kind, args: words.map(str::to_string).collect(), body: Vec::new() });
            open_body = true;
            continue;
        }
        let (Some(stanza), true) = (out.last_mut(), open_body) else {
            return Err(Error::Malformed("a malformed age header"));
        };
        stanza.body.extend(crate::base64::decode(line)?);
        // A body line shorter than 64 columns is its last.
        open_body = line.len() == 64;
        if out.len() > 64 {
            return Err(Error::Malformed("too many recipients in the age header"));
        }
    }
    Ok(out)
}

fn hkdf(ikm: &[u8], salt: &[u8], info: &[u8]) -> Result<[u8; 32], Error> {
    let mut out = [0u8; 32];
    let info = [info];
    let prk = Salt::new(HKDF_SHA256, salt).extract(ikm);
    let okm = prk.expand(&info, HKDF_SHA256).map_err(|_| "HKDF")?;
    okm.fill(&mut out).map_err(|_| "HKDF")?;
    Ok(out)
}

/// ChaCha20-Poly1305 opened in place: the plaintext.
fn open(key: &[u8; 32], nonce: [u8; 12], buf: &mut [u8]) -> Result<Vec<u8>, ()> {
    let key = LessSafeKey::new(UnboundKey::new(&CHACHA20_POLY1305, key).map_err(|_| ())?);
    key.open_in_place(Nonce::assume_unique_for_key(nonce), Aad::empty(), buf).map(|p| p.to_vec()).map_err(|_| ())
}

/// The STREAM payload: a 16-byte nonce, then 64 KiB chunks, the last one flagged.
fn payload(file_key: &[u8; 16], rest: &[u8]) -> Result<Vec<u8>, Error> {
    let (nonce, body) = rest.split_at_checked(16).ok_or("the age payload is cut short")?;
    let key = hkdf(file_key, nonce, b"payload")?;
    if body.is_empty() {
        return Err(Error::Malformed("the age payload has no chunk"));
    }
    let chunks: Vec<&[u8]> = body.chunks(CHUNK + TAG).collect();
    let mut out = Vec::with_capacity(body.len());
    for (i, chunk) in chunks.iter().enumerate() {
        let last = i + 1 == chunks.len();
        let mut n = [0u8; 12];
        n[3..11].copy_from_slice(&(i as u64).to_be_bytes());
        n[11] = u8::from(last);
        let mut buf = chunk.to_vec();
        let plain = open(&key, n, &mut buf).map_err(|_| Error::Chunk(i))?;
        if plain.is_empty() && (i > 0 || !last) {
            return Err(Error::Malformed("an empty age chunk"));
        }
        out.extend_from_slice(&plain);
    }
    Ok(out)
}

fn dearmor(file: &[u8]) -> Result<Vec<u8>, Error> {
    let text = std::str::from_utf8(file).map_err(|_| "an armored age file that is not text")?;
    let inner = text
        .trim()
        .strip_prefix("-----BEGIN AGE ENCRYPTED FILE-----")
        .and_then(|t| t.strip_suffix("-----END AGE ENCRYPTED FILE-----"))
        .ok_or("an armored age file without its END line")?;
    Ok(crate::base64::decode(inner)?)
}

#[cfg(test)]
mod tests;
