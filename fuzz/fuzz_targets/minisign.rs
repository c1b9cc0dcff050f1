//! Fuzzes minisign public keys and signature files (`trust`), read from the trusted-keys
//! file and from `<manifest>.minisig` beside a manifest or URL: arbitrary signatures are
//! refused without a panic, and a signature made by the test key over the input with the
//! input's first line as its trusted comment verifies, with the comment read back unchanged
//! (unless that makes the file larger than the 4 KiB a signature file may be: then refused).
#![no_main]

use atoll::trust::{test_key, verify, PublicKey};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let keys = [test_key::key(7)];
    let _ = verify(&keys, b"message", data);
    if let Ok(text) = std::str::from_utf8(data) {
        if let Ok(k) = PublicKey::parse(text) {
            let _ = k.id();
        }
        let comment = text.lines().next().unwrap_or_default();
        if !comment.contains('\r') {
            let sig = test_key::sign(7, data, comment);
            if sig.len() > 4096 {
                // Past the signature file's size limit: refused, however good.
                assert!(verify(&keys, data, &sig).is_err());
                return;
            }
            let v = verify(&keys, data, &sig).expect("a good signature verifies");
            assert_eq!(v.trusted_comment, comment);
            assert!(verify(&keys, b"other", &sig).is_err() || data == b"other");
        }
    }
});
