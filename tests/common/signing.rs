//! Signed manifests made with the stock `minisign` CLI (the test bed installs it): key pairs
//! and signatures with a `serial=N` trusted comment.

#![allow(dead_code)]

use atoll::trust::PublicKey;
use std::path::Path;

/// `minisign ARGS...` in `dir`.
pub fn minisign(dir: &Path, args: &[&str]) {
    let out = std::process::Command::new("minisign")
        .args(args)
        .current_dir(dir)
        .output()
        .expect("minisign (the test bed installs it)");
    assert!(out.status.success(), "minisign {args:?}: {}", String::from_utf8_lossy(&out.stderr));
}

/// A new key pair in `dir` (`NAME.pub`, `NAME.key`, no password).
pub fn key(dir: &Path, name: &str) -> PublicKey {
    minisign(dir, &["-G", "-W", "-f", "-p", &format!("{name}.pub"), "-s", &format!("{name}.key")]);
    PublicKey::parse(&std::fs::read_to_string(dir.join(format!("{name}.pub"))).unwrap()).unwrap()
}

/// The signature of `text` by key `name` of `dir`, trusted comment `serial=N`.
pub fn sign(dir: &Path, text: &str, name: &str, serial: u32) -> Vec<u8> {
    sign_with(dir, text, name, Some(&format!("serial={serial}")))
}

/// The signature of `text` by key `name` of `dir` with the trusted comment `comment`, or
/// minisign's own (`timestamp:N file:... hashed`) when `None`.
pub fn sign_with(dir: &Path, text: &str, name: &str, comment: Option<&str>) -> Vec<u8> {
    use std::sync::atomic::{AtomicU32, Ordering};
    static N: AtomicU32 = AtomicU32::new(0);
    let file = dir.join(format!("to-sign-{}-{}", std::process::id(), N.fetch_add(1, Ordering::Relaxed)));
    std::fs::write(&file, text).unwrap();
    let mut args = vec!["-S", "-W", "-s"];
    let key = format!("{name}.key");
    args.extend([key.as_str(), "-m", file.to_str().unwrap()]);
    if let Some(c) = comment {
        args.extend(["-t", c]);
    }
    minisign(dir, &args);
    let sig = std::path::PathBuf::from(format!("{}.minisig", file.display()));
    let out = std::fs::read(&sig).unwrap();
    let _ = std::fs::remove_file(file);
    let _ = std::fs::remove_file(sig);
    out
}
