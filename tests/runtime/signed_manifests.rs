//! Signed manifests end to end, against the real private containerd: with `manifestTrust`
//! requiring signatures, a pod signed by the fleet key runs; an edit made after signing, a pod
//! nobody signed and an older signed version replayed over a newer one are refused while the
//! pod that runs keeps running, untouched; `atoll validate` says who signed.

use crate::common;
use crate::common::signing;

use common::{eventually, testbed, Testbed};
use std::path::Path;
use std::time::Duration;

/// The running containers of pod `name` (with its node suffix): their IDs.
fn running(tb: &Testbed, name: &str) -> Vec<String> {
    tb.running_in(name).into_iter().map(|c| c.id).collect()
}

fn sandboxes(tb: &Testbed, name: &str) -> usize {
    tb.sandboxes_of(name).len()
}

fn pod(name: &str, message: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata: {{name: {name}}}\nspec:\n  hostNetwork: true\n  terminationGracePeriodSeconds: 0\n  containers:\n  - name: c\n    image: docker.io/library/busybox:1.36\n    command: [sh, -c, 'echo {message}; exec sleep 3600']\n"
    )
}

/// The signature first, then the manifest, each renamed into place.
fn put_signed(keys: &Path, manifests: &Path, name: &str, text: &str, signature: &[u8]) {
    std::fs::write(keys.join("staged.minisig"), signature).unwrap();
    std::fs::rename(keys.join("staged.minisig"), manifests.join(format!("{name}.yaml.minisig"))).unwrap();
    std::fs::write(keys.join("staged.yaml"), text).unwrap();
    std::fs::rename(keys.join("staged.yaml"), manifests.join(format!("{name}.yaml"))).unwrap();
}

#[test]
fn only_what_the_fleet_key_signed_runs_and_a_refused_update_leaves_the_running_pod_alone() {
    let _room = common::room(module_path!());
    let tb = testbed();
    let dir = crate::common::Scratch::new("signed");
    let (keys, manifests) = (dir.join("keys"), dir.join("manifests"));
    std::fs::create_dir_all(&keys).unwrap();
    std::fs::create_dir_all(&manifests).unwrap();
    let fleet = signing::key(&keys, "fleet");
    let stranger = signing::key(&keys, "stranger");
    let own = dir.join("atoll.yaml");
    std::fs::write(
        &own,
        format!(
            "apiVersion: atoll.io/v1alpha1\nkind: AtollConfiguration\nmanifestTrust:\n  publicKeys: [{}]\n  require: true\n",
            keys.join("fleet.pub").display()
        ),
    )
    .unwrap();
    let v1 = pod("signed", "v1");
    put_signed(&keys, &manifests, "signed", &v1, &signing::sign(&keys, &v1, "fleet", 1));
    let agent = common::Agent::start(tb, &dir, "", &[&format!("--atoll-config={}", own.display())], &[]);
    let first = eventually(Duration::from_secs(60), "the signed pod running", || running(tb, "signed-tb").pop());

    // Changed after signing; a pod signed by a key nobody trusts; a pod nobody signed.
    std::fs::write(manifests.join("signed.yaml"), pod("signed", "tampered")).unwrap();
    let other = pod("other", "x");
    put_signed(&keys, &manifests, "other", &other, &signing::sign(&keys, &other, "stranger", 1));
    std::fs::write(manifests.join("plain.yaml"), pod("plain", "x")).unwrap();
    eventually(Duration::from_secs(30), "the three refusals logged", || {
        let log = agent.log();
        (log.contains("signed.yaml: signature: signed.yaml.minisig: the signature by key")
            && log.contains("does not match the content (keeping the last valid version of its pod running)")
            && log.contains(&format!(
                "other.yaml: signature: other.yaml.minisig: signed by key {}, which is not trusted",
                stranger.id()
            ))
            && log.contains("plain.yaml: signature: unsigned: no plain.yaml.minisig"))
        .then_some(())
    });
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(running(tb, "signed-tb"), vec![first.clone()], "the running pod was touched");
    assert_eq!(sandboxes(tb, "other-tb") + sandboxes(tb, "plain-tb"), 0, "a refused pod was started");

    // Version 2, signed: it replaces version 1. Version 1 put back with its own good signature
    // (a replay) is refused and version 2 keeps running.
    let v2 = pod("signed", "v2");
    put_signed(&keys, &manifests, "signed", &v2, &signing::sign(&keys, &v2, "fleet", 2));
    let second = eventually(Duration::from_secs(60), "version 2 running", || {
        running(tb, "signed-tb").pop().filter(|c| *c != first)
    });
    put_signed(&keys, &manifests, "signed", &v1, &signing::sign(&keys, &v1, "fleet", 1));
    eventually(Duration::from_secs(30), "the replay refused", || {
        agent.log().contains("version serial=1 of pod default/signed-tb is older than serial=2").then_some(())
    });
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(running(tb, "signed-tb"), vec![second], "the replayed version replaced the newer one");

    // `atoll validate` with the same config checks the signatures too.
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_atoll"))
        .args(["validate", &format!("--atoll-config={}", own.display()), "--hostname-override=tb"])
        .arg(manifests.join("signed.yaml"))
        .arg(manifests.join("plain.yaml"))
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("signed.yaml: ok: pod default/signed-tb uid")
            && text.contains(&format!("signed by key {}", fleet.id())),
        "{text}"
    );
    assert!(text.contains("plain.yaml: error: signature: unsigned"), "{text}");
    assert_eq!(out.status.code(), Some(1), "{text}");
    for name in ["signed", "other"] {
        let _ = std::fs::remove_file(manifests.join(format!("{name}.yaml")));
    }
    let _ = std::fs::remove_file(manifests.join("plain.yaml"));
    eventually(Duration::from_secs(60), "the pods gone", || (sandboxes(tb, "signed-tb") == 0).then_some(()));
    drop(agent);
    let _ = std::fs::remove_dir_all(&dir);
}
