//! Signed manifests made with the stock `minisign` CLI (the test bed installs it): key pairs
//! and signatures with a `serial=N` trusted comment.

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
    let file = dir.join(format!("to-sign-{serial}"));
    std::fs::write(&file, text).unwrap();
    let comment = format!("serial={serial}");
    minisign(dir, &["-S", "-W", "-s", &format!("{name}.key"), "-m", file.to_str().unwrap(), "-t", &comment]);
    let sig = dir.join(format!("to-sign-{serial}.minisig"));
    let out = std::fs::read(&sig).unwrap();
    let _ = std::fs::remove_file(file);
    let _ = std::fs::remove_file(sig);
    out
}
