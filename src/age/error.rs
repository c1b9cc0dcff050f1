//! Why an identity or an age file was refused. No variant holds key material: an identity's
//! text is never in an error.

use std::fmt;
use std::path::PathBuf;

#[derive(Debug)]
pub enum Error {
    /// The identity file could not be opened or read.
    Read { path: PathBuf, source: std::io::Error },
    /// The identity file is not root's alone.
    NotRoots { path: PathBuf, uid: u32, mode: u32 },
    /// The identity file holds no key line.
    NoKey { path: PathBuf },
    /// The identity file's key is not one.
    BadKey { path: PathBuf, error: Box<Error> },
    /// Not bech32 (why, in bech32's terms).
    NotIdentity(&'static str),
    /// bech32, but not `AGE-SECRET-KEY-1…`.
    NotSecretKey,
    /// An identity of the wrong length.
    KeyLength,
    /// None of the file's stanzas is for this identity (its recipient).
    NotForThisKey { recipient: String },
    /// A chunk of the payload does not decrypt.
    Chunk(usize),
    /// A base64 part of the header or the armor.
    Base64(crate::base64::Error),
    /// The file's structure: what is wrong with it.
    Malformed(&'static str),
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Read { path, source } => write!(f, "{}: {source}", path.display()),
            Error::NotRoots { path, uid, mode } => write!(
                f,
                "{} is owned by uid {uid} with mode {mode:04o}: a key file must be owned by root with mode 0600",
                path.display()
            ),
            Error::NoKey { path } => write!(f, "{}: no AGE-SECRET-KEY-1… line", path.display()),
            Error::BadKey { path, error } => write!(f, "{}: {error}", path.display()),
            Error::NotIdentity(why) => write!(f, "not an age identity: {why}"),
            Error::NotSecretKey => f.write_str("not an age identity (expected AGE-SECRET-KEY-1…)"),
            Error::KeyLength => f.write_str("an age identity holds 32 bytes"),
            Error::NotForThisKey { recipient } => write!(f, "not encrypted to this box's key ({recipient})"),
            Error::Chunk(i) => write!(f, "chunk {i} of the age payload does not check out"),
            Error::Base64(e) => e.fmt(f),
            Error::Malformed(what) => f.write_str(what),
        }
    }
}

impl std::error::Error for Error {}

impl From<&'static str> for Error {
    fn from(what: &'static str) -> Error {
        Error::Malformed(what)
    }
}

impl From<crate::base64::Error> for Error {
    fn from(e: crate::base64::Error) -> Error {
        Error::Base64(e)
    }
}
