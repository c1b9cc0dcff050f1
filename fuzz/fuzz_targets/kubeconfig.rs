//! Fuzzes the files atoll reads its settings from: a kubeconfig (`mirror::kubeconfig::load`,
//! with inline base64 certificates), the KubeletConfiguration and AtollConfiguration files
//! (`config::kubelet`, `config::atoll`, with the konnectivity section), each written to a
//! scratch file and loaded as atoll loads it. Nothing may panic; a kubeconfig that loads names
//! an http(s) server and has a client certificate exactly when it has a key.
#![no_main]

use atoll::config::atoll::AtollConfiguration;
use atoll::config::kubelet::KubeletConfiguration;
use atoll::mirror::kubeconfig;
use libfuzzer_sys::fuzz_target;
use std::path::PathBuf;
use std::sync::OnceLock;

fn scratch() -> &'static PathBuf {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let dir = std::env::temp_dir().join(format!("atoll-fuzz-config-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("a scratch directory");
        dir
    })
}

fuzz_target!(|data: &[u8]| {
    let Some((&pick, body)) = data.split_first() else { return };
    let path = scratch().join("file.yaml");
    std::fs::write(&path, body).expect("the scratch file is written");
    match pick % 3 {
        0 => {
            if let Ok(c) = kubeconfig::load(&path, None) {
                assert!(c.server.starts_with("https://") || c.server.starts_with("http://"));
                assert_eq!(c.client_certificate.is_some(), c.client_key.is_some());
                // Inline data only: a file source could name any file of the fuzzing machine.
                for source in [&c.ca, &c.client_certificate, &c.client_key, &c.token].into_iter().flatten() {
                    if matches!(source, kubeconfig::Source::Data(_)) {
                        let _ = source.read();
                    }
                }
            }
        }
        1 => {
            if let Ok((k, _)) = KubeletConfiguration::load(&path) {
                let _ = k.image_gc();
            }
        }
        _ => {
            let _ = AtollConfiguration::load(&path);
        }
    }
});
