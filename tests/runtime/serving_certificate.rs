//! `serverTLSBootstrap` on a real atoll: the kubelet server's certificate asked for through a
//! `kubernetes.io/kubelet-serving` CSR, which the approver leaves for an operator. Until a real
//! `kubectl certificate approve`, the server presents the certificate it had (self-signed); after
//! it, the signed one, and a client that checks the node's address against the cluster CA
//! connects, without a restart of atoll.

use crate::apiserver::{ApiServer, Pki};
use crate::common::{self, eventually, testbed};
use std::sync::Arc;
use std::time::Duration;

/// Whether a TLS client that trusts only `ca` and dials 127.0.0.1 by that address completes a
/// handshake with the server on `port` (names and chain checked by webpki).
fn trusted_by(ca: &std::path::Path, port: u16) -> Result<(), String> {
    let pem = std::fs::read(ca).map_err(|e| e.to_string())?;
    let mut roots = rustls::RootCertStore::empty();
    for c in atoll::tls::pem_chain(&pem) {
        roots.add(c).map_err(|e| e.to_string())?;
    }
    let config = rustls::ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .with_root_certificates(roots)
        .with_no_client_auth();
    let name = rustls::pki_types::ServerName::try_from("127.0.0.1").unwrap();
    let mut conn = rustls::ClientConnection::new(Arc::new(config), name).map_err(|e| e.to_string())?;
    let mut tcp = std::net::TcpStream::connect(("127.0.0.1", port)).map_err(|e| e.to_string())?;
    tcp.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    while conn.is_handshaking() {
        conn.complete_io(&mut tcp).map_err(|e| e.to_string())?;
    }
    Ok(())
}

#[test]
fn the_serving_certificate_is_the_clusters_once_an_operator_approves_it() {
    let _room = common::room(module_path!());
    let tb = testbed();
    let dir = common::Scratch::new("serving-cert");
    let pki = Pki::new(&dir.join("pki"), "tb");
    let server = ApiServer::start(&pki, "tb");
    server.add_token("tok-kubectl", "admin");
    let kubectl = common::kubectl::config(&dir, server.addr, &pki.ca);
    let port = common::free_port();
    let agent = common::Agent::start(
        tb,
        &dir,
        &format!("address: 127.0.0.1\nport: {port}\nserverTLSBootstrap: true\nnodeStatusUpdateFrequency: 1s\n"),
        &[&format!("--kubeconfig={}", pki.kubeconfig(server.addr, None).display()), "--node-ip=127.0.0.1"],
        &[],
    );
    let csr = eventually(Duration::from_secs(60), "a serving CSR", || {
        server.csrs().into_iter().find(|c| c["spec"]["signerName"] == "kubernetes.io/kubelet-serving")
    });
    let name = csr["metadata"]["name"].as_str().unwrap().to_string();
    assert_eq!(csr["spec"]["username"], "system:node:tb", "asked with the node's own credentials");
    assert_eq!(csr["spec"]["usages"], serde_json::json!(["digital signature", "server auth"]));
    assert!(csr["status"]["conditions"].is_null(), "serving CSRs wait for an operator: {csr:#}");
    // Before approval: the server's own certificate, which the cluster CA does not vouch for.
    let own = dir.join("state/pki/kubelet.crt");
    eventually(Duration::from_secs(30), "the server up with its own certificate", || trusted_by(&own, port).ok());
    assert!(trusted_by(&pki.ca, port).is_err(), "not the cluster's yet");
    let (code, out, err) = common::kubectl::run(&kubectl, &["certificate", "approve", &name], b"");
    assert_eq!(code, 0, "kubectl certificate approve: {err}");
    assert!(String::from_utf8_lossy(&out).contains("approved"), "{}", String::from_utf8_lossy(&out));
    let signed = server.csrs().into_iter().find(|c| c["metadata"]["name"] == name.as_str()).unwrap();
    assert!(
        signed["status"]["certificate"].is_string(),
        "the signer issued it (its shape is kubelet-serving's): {signed:#}"
    );
    eventually(Duration::from_secs(60), "the server presents the signed certificate", || {
        trusted_by(&pki.ca, port).ok()
    });
    let current = dir.join("state/pki/kubelet-server-current.pem");
    assert!(std::fs::read_link(&current).is_ok(), "stored as kubelet stores it");
    drop(agent);
}
