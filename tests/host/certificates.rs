//! A node joins and stays joined through the certificates API, against the test API server's
//! CSR resource, approver and signer (Go's x509 signs; strict decoding judges every CSR atoll
//! sends): TLS bootstrap with a kubeadm bootstrap token, a restart that reuses the issued
//! certificate, an expired certificate bootstrapped again, a denied CSR reported in
//! client-go's words, rotation at 70-90 % of a 60 s lifetime with the mirror going on, and a
//! server that names the CSR with a path of its choosing refused.

use crate::apiserver::{ApiServer, Pki};
use crate::common::{self, eventually};
use atoll::mirror::certs::{bootstrap, store::Store};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

const TOKEN: (&str, &str) = ("abcdef", "0123456789abcdef");

fn setup(name: &str) -> (common::Scratch, Pki, ApiServer, PathBuf) {
    let dir = common::Scratch::new(&format!("certs-{name}"));
    let pki = Pki::new(&dir, "edge-1");
    let server = ApiServer::start(&pki, "edge-1");
    server.add_bootstrap_token(TOKEN.0, TOKEN.1);
    let boot = dir.join("bootstrap-kubelet.conf");
    let text = format!(
        "apiVersion: v1\nkind: Config\ncurrent-context: tls-bootstrap\nclusters:\n- name: c\n  cluster:\n    server: https://{}\n    certificate-authority: {}\nusers:\n- name: kubelet-bootstrap\n  user:\n    token: {}.{}\ncontexts:\n- name: tls-bootstrap\n  context: {{cluster: c, user: kubelet-bootstrap}}\n",
        server.addr,
        pki.ca.display(),
        TOKEN.0,
        TOKEN.1
    );
    std::fs::write(&boot, text).unwrap();
    (dir, pki, server, boot)
}

fn cond<'a>(csr: &'a Value, t: &str) -> Option<&'a Value> {
    csr["status"]["conditions"].as_array()?.iter().find(|c| c["type"] == t)
}

fn mode(p: &Path) -> u32 {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(p).unwrap().permissions().mode() & 0o777
}

#[test]
fn a_node_with_only_a_bootstrap_kubeconfig_joins_and_a_restart_does_not_bootstrap_again() {
    let (dir, _pki, server, boot) = setup("join");
    let kubeconfig = dir.join("kubelet.conf");
    let mut opts = common::edge::mirror_options(kubeconfig.clone(), &dir, Duration::from_secs(1));
    opts.bootstrap_kubeconfig = Some(boot.clone());
    atoll::mirror::start(opts, common::edge::node(), Arc::new(atoll::mirror::MirrorState::default()));
    eventually(Duration::from_secs(60), "the node registered", || server.get("nodes", "", "edge-1"));
    eventually(Duration::from_secs(30), "its lease", || server.get("leases", "kube-node-lease", "edge-1"));
    let log = server.log();
    let registered = log.iter().find(|l| l.method == "POST" && l.path == "/api/v1/nodes").unwrap();
    assert_eq!(registered.user, "system:node:edge-1", "registered with the issued certificate");
    let csrs = server.csrs();
    assert_eq!(csrs.len(), 1, "{csrs:#?}");
    let csr = &csrs[0];
    assert!(csr["metadata"]["name"].as_str().unwrap().starts_with("node-csr-"), "kubelet's digested name");
    assert_eq!(csr["spec"]["username"], "system:bootstrap:abcdef");
    assert_eq!(csr["spec"]["signerName"], "kubernetes.io/kube-apiserver-client-kubelet");
    assert_eq!(csr["spec"]["usages"], serde_json::json!(["digital signature", "key encipherment", "client auth"]));
    assert_eq!(cond(csr, "Approved").unwrap()["reason"], "AutoApproved");
    // kubelet's files: the dated pem behind the current link, the key in it 0600; the kubeconfig.
    let store = Store::new(&dir.join("pki"), "kubelet-client");
    let target = std::fs::read_link(store.current_path()).unwrap();
    assert!(target.file_name().unwrap().to_str().unwrap().starts_with("kubelet-client-20"), "{target:?}");
    assert_eq!(mode(&target), 0o600);
    assert_eq!(mode(&kubeconfig), 0o600);
    assert!(!dir.join("pki/kubelet-client.key.tmp").exists(), "the key kept for a retry is gone");
    let text = std::fs::read_to_string(&kubeconfig).unwrap();
    assert!(!text.contains(TOKEN.1), "the bootstrap token is not written into the node's kubeconfig");
    // A restart: the kubeconfig is valid, nothing is asked.
    bootstrap::ensure(&kubeconfig, &boot, &dir.join("pki"), "edge-1").unwrap();
    assert_eq!(server.csrs().len(), 1, "a restart reuses the issued certificate");
    // The bootstrap token reaches CSRs only, and a removed one nothing.
    let c = atoll::mirror::apiserver::Client::new(&atoll::mirror::kubeconfig::load(&boot, None).unwrap()).unwrap();
    let r = c.call("GET", "/api/v1/nodes", "", None).unwrap();
    assert_eq!(r.status, 403, "{:?}", r.body);
    server.remove_token(&format!("{}.{}", TOKEN.0, TOKEN.1));
    assert_eq!(c.call("GET", "/apis/certificates.k8s.io/v1/certificatesigningrequests", "", None).unwrap().status, 401);
}

#[test]
fn an_expired_certificate_bootstraps_again_and_a_denied_csr_says_why() {
    let (dir, _pki, server, boot) = setup("expired");
    let (kubeconfig, certs) = (dir.join("kubelet.conf"), dir.join("pki"));
    server.issue_for(3, 0);
    bootstrap::ensure(&kubeconfig, &boot, &certs, "edge-1").unwrap();
    assert!(bootstrap::still_valid(&kubeconfig, SystemTime::now()));
    std::thread::sleep(Duration::from_secs(4));
    assert!(!bootstrap::still_valid(&kubeconfig, SystemTime::now()), "expired");
    server.deny_csrs(Some(("NotToday", "the operator said no")));
    let e = bootstrap::ensure(&kubeconfig, &boot, &certs, "edge-1").unwrap_err().to_string();
    assert_eq!(e, "certificate signing request is denied, reason: NotToday, message: the operator said no");
    server.deny_csrs(None);
    server.issue_for(3600, 300);
    bootstrap::ensure(&kubeconfig, &boot, &certs, "edge-1").unwrap();
    assert!(bootstrap::still_valid(&kubeconfig, SystemTime::now()), "bootstrapped again");
    let csrs = server.csrs();
    assert_eq!(csrs.len(), 3, "{csrs:#?}");
    assert!(cond(&csrs[1], "Denied").is_some() && cond(&csrs[2], "Approved").is_some());
    let c = atoll::mirror::apiserver::Client::from_kubeconfig(&kubeconfig).unwrap();
    assert_eq!(c.call("GET", "/api/v1/nodes/edge-1", "", None).unwrap().status, 404, "authenticated as the node");
}

#[test]
fn certificates_issued_for_60s_rotate_at_70_to_90_percent_and_the_mirror_goes_on() {
    let (dir, _pki, server, boot) = setup("rotate");
    server.issue_for(60, 0);
    let mut opts = common::edge::mirror_options(dir.join("kubelet.conf"), &dir, Duration::from_secs(1));
    opts.bootstrap_kubeconfig = Some(boot);
    opts.rotate_certificates = true;
    atoll::mirror::start(opts, common::edge::node(), Arc::new(atoll::mirror::MirrorState::default()));
    let store = Store::new(&dir.join("pki"), "kubelet-client");
    let first = eventually(Duration::from_secs(60), "the bootstrapped certificate", || store.current().ok().flatten());
    let renewal = eventually(Duration::from_secs(80), "a renewal CSR", || server.csrs().get(1).cloned());
    assert_eq!(renewal["spec"]["username"], "system:node:edge-1", "renewed with the current certificate");
    assert_eq!(renewal["spec"]["usages"], serde_json::json!(["digital signature", "client auth"]));
    assert!(renewal["metadata"]["name"].as_str().unwrap().starts_with("csr-"));
    let asked = atoll::rfc3339::parse_seconds(renewal["metadata"]["creationTimestamp"].as_str().unwrap()).unwrap();
    let life = first.not_after.duration_since(first.not_before).unwrap().as_secs_f64();
    let point = asked.duration_since(first.not_before).unwrap().as_secs_f64() / life;
    eprintln!("renewed at {:.1} % of the lifetime", point * 100.0);
    // Seconds are the timestamps' resolution: 1 s of 60 is 1.7 %.
    assert!((0.68..=0.92).contains(&point), "renewed at {:.1} % of the lifetime", point * 100.0);
    let second = eventually(Duration::from_secs(20), "the renewed certificate stored", || {
        store.current().ok().flatten().filter(|p| p.not_after > first.not_after)
    });
    // Past the first certificate's end, every connection is cut: only the renewed certificate
    // gets the node in again, and its lease goes on being renewed.
    while SystemTime::now() <= first.not_after + Duration::from_secs(1) {
        std::thread::sleep(Duration::from_millis(200));
    }
    server.down();
    server.up();
    let cut = std::time::Instant::now();
    eventually(Duration::from_secs(30), "a lease renewal after the cut", || {
        server.log().into_iter().find(|l| {
            l.at > cut && l.path.contains("/leases/edge-1") && l.status == 200 && l.user == "system:node:edge-1"
        })
    });
    assert!(SystemTime::now() < second.not_after, "the renewed certificate is the one in use");
}

/// Whoever answers the API server's URL names the CSR, and the name goes into the paths of
/// the watch and the GET that follow: a name that would leave them is refused, not followed.
#[test]
fn a_csr_name_from_the_server_that_would_leave_its_path_is_refused() {
    use atoll::mirror::certs::request::{self, Ask, Failure, CLIENT_SIGNER};
    let (dir, pki, server, _) = setup("hostile-name");
    let client = atoll::mirror::apiserver::Client::from_kubeconfig(&pki.kubeconfig(server.addr, None)).unwrap();
    let usages = atoll::mirror::certs::rotate::USAGES;
    let ask = Ask { name: None, signer: CLIENT_SIGNER, usages: &usages, request_pem: "", expiration_seconds: None };
    let long = "a".repeat(254);
    for name in ["../../../api/v1/nodes/edge-1", "a/b", "", "csr-1?watch=true", "csr 1", long.as_str()] {
        server.answer_next(1, 201, serde_json::json!({"metadata": {"name": name, "uid": "u"}}));
        match request::create(&client, &ask, &[]) {
            Err(Failure::NotCreated { status: 201, message }) => assert!(message.contains("named it"), "{message}"),
            other => panic!("a CSR named {name:?} was taken: {other:?}"),
        }
    }
    server.answer_next(1, 201, serde_json::json!({"metadata": {"name": "csr-x.1", "uid": "u"}}));
    assert_eq!(request::create(&client, &ask, &[]).ok(), Some(("csr-x.1".to_string(), "u".to_string())));
    drop(dir);
}
