//! A Pod from an age-encrypted manifest (made by the stock `age`) stays private: a local user
//! (uid 65534) reading the read-only port's `/pods`, and whoever reads pods on the API server
//! through the mirror, see its env values and commands redacted; root's socket shows them, and
//! so does the mirror when `mirrorEncryptedPodSpecs` opts in.
//! (Its own test binary: atoll removes every atoll-made sandbox it was not told to run.)

use crate::apiserver;
use crate::common;

use apiserver::{ApiServer, Pki};
use atoll::source::payload::{Intake, Payload};
use common::{eventually, free_port, testbed};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

const MARKER: &str = "(redacted: encrypted manifest)";

/// Runs a stock CLI (age, age-keygen, setpriv, curl): its standard output.
fn stock(cmd: &str, args: &[&str]) -> String {
    let out = Command::new(cmd).args(args).output().unwrap_or_else(|e| panic!("{cmd}: {e}"));
    assert!(out.status.success(), "{cmd} {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A pod whose env value and command hold `secret`.
fn pod(name: &str, secret: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata: {{name: {name}}}\nspec:\n  hostNetwork: true\n  terminationGracePeriodSeconds: 0\n  containers:\n  - name: c\n    image: docker.io/library/busybox:1.36\n    command: [sh, -c, 'test \"$PW\" = {secret} && exec sleep 3600']\n    env: [{{name: PW, value: {secret}}}]\n"
    )
}

/// A fresh directory with an age key (root's, 0600); its recipient.
fn age_key(dir: &Path) -> (PathBuf, String) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::create_dir_all(dir).unwrap();
    let key = dir.join("age.key");
    stock("age-keygen", &["-o", key.to_str().unwrap()]);
    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o600)).unwrap();
    let recipient = stock("age-keygen", &["-y", key.to_str().unwrap()]).trim().to_string();
    (key, recipient)
}

/// `text` encrypted to `recipient` as `to` (by way of a plain file removed at once).
fn seal(dir: &Path, recipient: &str, text: &str, to: &Path) {
    let plain = dir.join("plain.yaml");
    std::fs::write(&plain, text).unwrap();
    stock("age", &["-r", recipient, "-o", to.to_str().unwrap(), plain.to_str().unwrap()]);
    std::fs::remove_file(&plain).unwrap();
}

#[test]
fn the_read_only_port_shows_a_local_user_no_value_of_an_encrypted_pod() {
    let _room = common::room(module_path!());
    let tb = testbed();
    let dir = crate::common::Scratch::new("encrypted-pods");
    let (key, recipient) = age_key(&dir);
    let secret = format!("hunter2x{}", std::process::id());
    std::fs::create_dir_all(dir.join("manifests")).unwrap();
    seal(&dir, &recipient, &pod("vault", &secret), &dir.join("manifests/vault.yaml.age"));
    let own = dir.join("atoll.yaml");
    std::fs::write(
        &own,
        format!("apiVersion: atoll.io/v1alpha1\nkind: AtollConfiguration\ndecryptionKeyFile: {}\n", key.display()),
    )
    .unwrap();
    let port = free_port();
    let agent = common::Agent::start(
        tb,
        &dir,
        &format!("fileCheckFrequency: 1s\nreadOnlyPort: {port}\n"),
        &[&format!("--atoll-config={}", own.display())],
        &[],
    );
    // Running: the container saw the value (its command checks it).
    eventually(Duration::from_secs(60), "the encrypted pod running", || tb.running_in("vault-tb").pop());

    // Root's socket shows the pod as it is (once its status has caught up: the phase is
    // compared below).
    let running = |p: &Value| p["status"]["phase"] == "Running";
    let root =
        eventually(Duration::from_secs(30), "the pod Running on the socket", || agent.pod("vault-tb").filter(running));
    assert_eq!(root["spec"]["containers"][0]["env"][0]["value"], secret.as_str());

    // Any local user, on the read-only port: the list and the pod, redacted, still v1 JSON.
    let nobody = |path: &str| {
        let url = format!("http://127.0.0.1:{port}{path}");
        stock("setpriv", &["--reuid=65534", "--regid=65534", "--clear-groups", "curl", "-sf", &url])
    };
    assert_eq!(stock("setpriv", &["--reuid=65534", "--regid=65534", "--clear-groups", "id", "-u"]).trim(), "65534");
    for path in ["/pods", "/pods/default/vault-tb"] {
        let body = nobody(path);
        assert!(!body.contains(&secret), "{path} shows uid 65534 the encrypted pod's value: {body}");
        assert!(body.contains(MARKER), "{path}: {body}");
    }
    let list: Value = serde_json::from_str(&nobody("/pods")).unwrap();
    assert_eq!(list["kind"], "PodList");
    let shown = list["items"].as_array().unwrap().iter().find(|p| p["metadata"]["name"] == "vault-tb").unwrap();
    let c = &shown["spec"]["containers"][0];
    assert_eq!((&c["env"][0]["name"], &c["env"][0]["value"]), (&Value::from("PW"), &Value::from(MARKER)));
    assert_eq!(c["command"], serde_json::json!([MARKER]));
    assert_eq!(c["image"], "docker.io/library/busybox:1.36");
    assert_eq!(shown["metadata"]["uid"], root["metadata"]["uid"]);
    assert_eq!(shown["status"]["phase"], root["status"]["phase"]);
    assert!(!agent.log().contains(&secret));

    std::fs::remove_file(dir.join("manifests/vault.yaml.age")).unwrap();
    eventually(Duration::from_secs(60), "the pod gone", || tb.sandboxes_of("vault-tb").is_empty().then_some(()));
    drop(agent);
    let _ = std::fs::remove_dir_all(&dir);
}

/// atoll's mirror in this process, mirroring to `server` (`opt_in`: mirrorEncryptedPodSpecs),
/// with the pod of `payload` opened as the file source opens it.
fn mirror(dir: &Path, pki: &Pki, server: &ApiServer, opt_in: bool, intake: &Intake, payload: &Payload) {
    let node = common::edge::node();
    let mut opts = common::edge::mirror_options(pki.kubeconfig(server.addr, None), dir, Duration::from_secs(1));
    opts.encrypted_pod_specs = opt_in;
    let state = Arc::new(atoll::mirror::MirrorState::default());
    atoll::mirror::start(opts, node, state.clone());
    let opened = intake.open(payload).expect("the encrypted manifest opens");
    state.set_desired(opened.manifests.pods.iter());
}

#[test]
fn the_mirror_of_an_encrypted_pod_lacks_its_values_unless_the_operator_opts_in() {
    let _room = common::room(module_path!());
    let dir = crate::common::Scratch::new("encrypted-mirror");
    let (key, recipient) = age_key(&dir);
    let secret = format!("hunter2y{}", std::process::id());
    let sealed = dir.join("vault.yaml.age");
    seal(&dir, &recipient, &pod("vault", &secret), &sealed);
    let intake = Intake {
        key: Some(Arc::new(atoll::age::Identity::from_file(&key).unwrap())),
        node: "edge-1".into(),
        ..Default::default()
    };
    let payload = Payload {
        origin: atoll::pod::Origin::File(sealed.clone()),
        bytes: std::fs::read(&sealed).unwrap(),
        signature: None,
    };
    for opt_in in [false, true] {
        let pki = Pki::new(&dir.join(format!("pki-{opt_in}")), "edge-1");
        let server = ApiServer::start(&pki, "edge-1");
        mirror(&dir.join(format!("state-{opt_in}")), &pki, &server, opt_in, &intake, &payload);
        let m = eventually(Duration::from_secs(30), "the mirror pod", || server.get("pods", "default", "vault-edge-1"));
        let body = m.to_string();
        let c = &m["spec"]["containers"][0];
        if opt_in {
            assert_eq!(c["env"][0]["value"], secret.as_str(), "{body}");
        } else {
            assert!(!body.contains(&secret), "the mirror pod holds the encrypted pod's value: {body}");
            assert_eq!(c["env"][0]["value"], MARKER, "{body}");
            assert_eq!(c["command"], serde_json::json!([MARKER]), "{body}");
        }
        // The API server's checker took it as a valid Pod; it stays (atoll does not replace a
        // redacted mirror as outdated).
        assert!(server.refused().is_empty(), "{:?}", server.refused());
        std::thread::sleep(Duration::from_secs(3));
        let again = server.get("pods", "default", "vault-edge-1").unwrap();
        assert_eq!(again["metadata"]["uid"], m["metadata"]["uid"], "the mirror was replaced");
    }
    let _ = std::fs::remove_dir_all(&dir);
}
