//! Fuzzes PEM bundles (`tls`), read from CA files, kubeconfigs and client certificates:
//! the three readers agree on how many certificates a bundle holds, and nothing panics.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let certs = atoll::tls::pem_certs(data);
    let chain = atoll::tls::pem_chain(data);
    assert_eq!(certs.len(), chain.len());
    if let Some(roots) = atoll::tls::pem_roots(data) {
        assert!(roots.len() <= chain.len());
    }
});
