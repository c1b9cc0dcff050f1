//! Fuzzes the whole manifest pipeline (decode, defaults, identity, validation) with arbitrary
//! bytes, as a file and as a URL payload. It must never panic, whatever the input.
#![no_main]

use atoll::pod::{self, Origin, Policy, Shape};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let file = Origin::File("/etc/kubernetes/manifests/fuzz.yaml".into());
    let url = Origin::Url("http://127.0.0.1/pods".into());
    for strict in [false, true] {
        let policy = Policy { strict };
        if let Ok(loaded) = pod::load(data, Shape::SinglePod, &file, "fuzz-node", policy) {
            // A pod that loads must serialise back to JSON.
            for sp in loaded.pods {
                let _ = serde_json::to_vec(&sp.pod).expect("a loaded pod serialises");
            }
        }
        let _ = pod::load(data, Shape::PodOrList, &url, "fuzz-node", policy);
    }
});
