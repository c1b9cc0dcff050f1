//! The kubelet server's certificate through the certificates API (`serverTLSBootstrap`), as
//! kubelet's serving certificate manager: a CSR to `kubernetes.io/kubelet-serving` for
//! `system:node:<name>` with the node's names and addresses as SANs (at least one IP address,
//! as kubelet requires), usages `digital signature` and `server auth`, sent with the node's own
//! credentials. Serving CSRs are not approved automatically: until an operator approves one
//! (`kubectl certificate approve`), the server keeps the certificate it has (the configured
//! files or the self-signed one). Once signed it is stored (`kubelet-server-current.pem`) and
//! presented from the next handshake on; then it is renewed as the client certificate is.

use super::request::SERVING_SIGNER;
use super::rotate::{issue, keep_renewed};
use super::store::{Pair, Store};
use crate::mirror::apiserver::Client;
use crate::node::Node;
use std::sync::Arc;
use std::time::SystemTime;

/// The usages of a serving CSR for a P-256 key (client-go's `DefaultKubeletServingGetUsages`).
pub const USAGES: [&str; 2] = ["digital signature", "server auth"];

/// The SANs kubelet asks for: the node's host name (a DNS name unless it is an address) and
/// its IP address, sorted and without repeats; none when there is no IP address to ask for.
pub fn names(hostname: &str, ips: &[&str]) -> Option<Vec<String>> {
    let is_ip = |s: &str| s.parse::<std::net::IpAddr>().is_ok();
    let mut ip_names: Vec<String> = ips.iter().filter(|i| is_ip(i)).map(|i| i.to_string()).collect();
    let mut dns: Vec<String> = Vec::new();
    match (hostname.is_empty(), is_ip(hostname)) {
        (true, _) => {}
        (false, true) => ip_names.push(hostname.to_string()),
        (false, false) => dns.push(hostname.to_string()),
    }
    if ip_names.is_empty() {
        return None;
    }
    ip_names.sort();
    ip_names.dedup();
    Some(dns.into_iter().chain(ip_names).collect())
}

/// Keeps `slot` holding an issued serving certificate for as long as the process runs (the
/// body of its thread): the stored one when it is valid and names what the node is now, else a
/// new one asked for at once.
pub fn run(client: Arc<Client>, cert_dir: &std::path::Path, node: Arc<Node>, slot: Arc<crate::tls::Serving>) {
    let store = Store::new(cert_dir, "kubelet-server");
    let facts = node.facts();
    let name = facts.name.clone();
    let Some(sans) = names(&name, &[facts.host_ip.as_str()]) else {
        log::warn!(
            "serverTLSBootstrap: the node has no IP address to ask a serving certificate for; keeping the one it has"
        );
        return;
    };
    let validity = match store.current() {
        Ok(Some(pair)) if SystemTime::now() <= pair.not_after && names_match(&pair, &sans) => {
            take(&slot, &pair).ok().map(|()| (pair.not_before, pair.not_after))
        }
        Ok(_) => None,
        Err(e) => {
            log::warn!("serverTLSBootstrap: {e}");
            None
        }
    };
    keep_renewed(crate::metrics::Certificate::Server, validity, |_| {
        log::info!("serverTLSBootstrap: the server keeps its certificate until the CSR is approved and signed");
        let pair = issue(&client, &store, (SERVING_SIGNER, &USAGES), &name, &sans)?;
        take(&slot, &pair)?;
        Ok(pair)
    });
}

/// Whether the stored certificate was issued for exactly these SANs (a node whose address
/// changed asks again).
fn names_match(pair: &Pair, sans: &[String]) -> bool {
    pair.chain.first().and_then(|c| crate::x509::alt_names(c)).is_some_and(|mut got| {
        got.sort();
        let mut want = sans.to_vec();
        want.sort();
        got == want
    })
}

/// Presents `pair` from the next handshake on.
fn take(slot: &crate::tls::Serving, pair: &Pair) -> Result<(), String> {
    let key = rustls::pki_types::PrivateKeyDer::Pkcs8(pair.key_pkcs8.clone().into());
    slot.set(pair.chain.clone(), key).map_err(|e| format!("the issued serving certificate cannot be used: {e}"))?;
    crate::metrics::certificate(crate::metrics::Certificate::Server, Some(pair.not_after));
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_sans_are_kubelets_and_an_ip_is_required() {
        let s = |v: &[&str]| Some(v.iter().map(|x| x.to_string()).collect::<Vec<_>>());
        assert_eq!(names("edge-1", &["10.0.0.5"]), s(&["edge-1", "10.0.0.5"]));
        assert_eq!(names("edge-1", &["10.0.0.5", "10.0.0.5", ""]), s(&["edge-1", "10.0.0.5"]));
        assert_eq!(names("10.0.0.5", &["10.0.0.5"]), s(&["10.0.0.5"]), "a host name that is an address is one");
        assert_eq!(names("edge-1", &[""]), None, "no IP: no CSR (kubelet's AllowDNSOnlyNodeCSR is off by default)");
        assert_eq!(names("", &["fd00::1", "10.0.0.5"]), s(&["10.0.0.5", "fd00::1"]));
    }
}
