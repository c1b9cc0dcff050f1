//! Fuzzes PEM bundles (`tls`), read from CA files, kubeconfigs and client certificates:
//! the chain and the trust roots agree on how many certificates a bundle holds, and nothing panics; a
//! certificate's validity (`/metrics`' TTLs, the renewal schedule) and subjectAltNames read
//! from any bytes, the input itself taken as DER too, without a panic; and the input as a SEC1
//! key (kubelet's `EC PRIVATE KEY`) gives a PKCS#8 key ring reads, or nothing.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let chain = atoll::tls::pem_chain(data);
    if let Some(roots) = atoll::tls::pem_roots(data) {
        assert!(roots.len() <= chain.len());
    }
    for der in chain.iter().map(|c| c.as_ref()).chain([data]) {
        if let Some((_, until)) = atoll::x509::validity(der) {
            let t = atoll::rfc3339::format_seconds(until);
            assert!(t.len() == 20 && t.ends_with('Z'), "{t}");
        }
        let _ = atoll::x509::alt_names(der);
    }
    if let Some(pkcs8) = atoll::x509::pkcs8_from_sec1(data) {
        assert!(atoll::x509::spki(&pkcs8).is_ok(), "a key ring reads");
    }
});
