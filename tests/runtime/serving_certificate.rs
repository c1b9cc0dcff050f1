//! `serverTLSBootstrap` on a real atoll: the kubelet server's certificate asked for through a
//! `kubernetes.io/kubelet-serving` CSR, which the approver leaves for an operator. Until a real
//! `kubectl certificate approve`, the server presents the certificate it had (self-signed); after
//! it, the signed one, and a client that checks the node's address against the cluster CA
//! connects, without a restart of atoll; a `kubectl logs -f` through the API server that began
//! on the old certificate goes on across the switch.

use crate::apiserver::{ApiServer, Pki};
use crate::common::{self, eventually, testbed};
use std::io::BufRead;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// A pod that logs `line N` five times a second.
const TICKER: &str = "apiVersion: v1\nkind: Pod\nmetadata: {name: ticker}\nspec:\n  terminationGracePeriodSeconds: 1\n  containers:\n  - name: c\n    image: docker.io/library/busybox:1.36\n    command: [sh, -c, 'trap \"exit 0\" TERM; i=0; while true; do echo line $i; i=$((i+1)); sleep 0.2; done']\n";

/// `kubectl logs -f ticker-tb`, running: the numbers of the lines it has printed so far.
struct Follow {
    child: std::process::Child,
    seen: Arc<Mutex<Vec<u64>>>,
}

impl Follow {
    fn start(kubectl: &std::path::Path) -> Follow {
        let bin = testbed().var("ATOLL_TB_KUBECTL");
        let mut child = std::process::Command::new(bin)
            .arg(format!("--kubeconfig={}", kubectl.display()))
            .args(["logs", "-f", "ticker-tb"])
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("kubectl");
        let (out, seen) = (child.stdout.take().unwrap(), Arc::new(Mutex::new(Vec::new())));
        let into = seen.clone();
        std::thread::spawn(move || {
            for line in std::io::BufReader::new(out).lines().map_while(Result::ok) {
                if let Some(n) = line.strip_prefix("line ").and_then(|n| n.parse().ok()) {
                    into.lock().unwrap().push(n);
                }
            }
        });
        Follow { child, seen }
    }

    fn lines(&self) -> Vec<u64> {
        self.seen.lock().unwrap().clone()
    }
}

impl Drop for Follow {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

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
    std::fs::create_dir_all(dir.join("manifests")).unwrap();
    std::fs::write(dir.join("manifests/ticker.yaml"), TICKER).unwrap();
    let agent = common::Agent::start(
        tb,
        &dir,
        &format!(
            "address: 127.0.0.1\nport: {port}\nserverTLSBootstrap: true\nnodeStatusUpdateFrequency: 1s\nauthentication:\n  x509: {{clientCAFile: {}}}\n",
            pki.ca.display()
        ),
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
    // The API server reaches the node trusting either certificate; a log follow begins.
    let both = dir.join("kubelet-cas.pem");
    std::fs::write(&both, [std::fs::read(&own).unwrap(), std::fs::read(&pki.ca).unwrap()].concat()).unwrap();
    server.kubelet_client(&pki, &both);
    server.grant("kube-apiserver-kubelet-client", "get", "proxy");
    eventually(Duration::from_secs(90), "the ticker running in the API server", || {
        (server.get("pods", "default", "ticker-tb")?["status"]["phase"] == "Running").then_some(())
    });
    let follow = Follow::start(&kubectl);
    eventually(Duration::from_secs(30), "kubectl logs -f prints lines", || (follow.lines().len() >= 3).then_some(()));
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
    // The follow that began on the old certificate goes on: new lines, none missing.
    let at_switch = follow.lines().len();
    eventually(Duration::from_secs(30), "lines after the switch on the same follow", || {
        (follow.lines().len() >= at_switch + 10).then_some(())
    });
    let lines = follow.lines();
    assert!(lines.windows(2).all(|w| w[1] == w[0] + 1), "one unbroken follow: {lines:?}");
    drop(follow);
    // A new request reaches the node through its new certificate.
    let (code, out, err) = common::kubectl::run(&kubectl, &["logs", "ticker-tb", "--tail=1"], b"");
    assert_eq!(code, 0, "{err}");
    assert!(String::from_utf8_lossy(&out).starts_with("line "), "{}", String::from_utf8_lossy(&out));
    let current = dir.join("state/pki/kubelet-server-current.pem");
    assert!(std::fs::read_link(&current).is_ok(), "stored as kubelet stores it");
    drop(agent);
}
