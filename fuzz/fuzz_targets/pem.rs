//! Fuzzes PEM bundles (`tls`), read from CA files, kubeconfigs and client certificates:
//! the three readers agree on how many certificates a bundle holds, and nothing panics; a
//! certificate's notAfter (`/metrics`' TTLs) reads from any bytes, the input itself taken as
//! DER too, without a panic, and is RFC 3339 text when it reads; `x509`'s validity agrees
//! with it and its subjectAltName reader does not panic.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let certs = atoll::tls::pem_certs(data);
    let chain = atoll::tls::pem_chain(data);
    assert_eq!(certs.len(), chain.len());
    if let Some(roots) = atoll::tls::pem_roots(data) {
        assert!(roots.len() <= chain.len());
    }
    for der in chain.iter().map(|c| c.as_ref()).chain([data]) {
        let end = atoll::tls::not_after(der);
        if let Some(t) = &end {
            assert!(t.len() == 20 && t.ends_with('Z'), "{t}");
        }
        // The certificate manager's reader (validity, subjectAltNames) agrees on the end.
        if let Some((_, until)) = atoll::x509::validity(der) {
            assert_eq!(end.as_deref().and_then(atoll::rfc3339::parse_seconds), Some(until));
        }
        let _ = atoll::x509::alt_names(der);
    }
});
