//! Fuzzes the API server's protobuf replies that atoll decodes by hand (`mirror::proto`): the
//! `k8s\0` envelope, a Status, a Lease's resourceVersion and its renewal. Beyond not
//! panicking: a renewed Lease is itself a Lease atoll can renew again, to the same bytes.
#![no_main]

use atoll::mirror::proto::{envelope, open, resource_version, status, LeaseSpec};
use std::time::{Duration, UNIX_EPOCH};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = status(data);
    let _ = resource_version(data);
    if let Ok((kind, raw)) = open(data) {
        let again = envelope("v1", &kind, raw);
        assert_eq!(open(&again).map(|(k, r)| (k, r.to_vec())), Ok((kind, raw.to_vec())));
    }
    let spec = LeaseSpec {
        holder: "fuzz-node",
        duration_seconds: 40,
        renew: UNIX_EPOCH + Duration::new(1_795_373_717, 599_741_000),
        owner: Some(("fuzz-node", "0b5c3e8e-8f0e-4c4e-9d7a-2f1f6e0e7d11")),
    };
    if let Ok(once) = spec.renewed(data) {
        assert_eq!(resource_version(&once).ok(), resource_version(data).ok());
        let twice = spec.renewed(&once).expect("a renewed lease renews");
        assert_eq!(twice, once);
    }
});
