//! The binary under test end to end, as CI runs it for each cross-built ARM binary under
//! qemu-user (`ATOLL_BIN=target/cross/atoll-aarch64-unknown-linux-musl
//! ATOLL_BIN_RUNNER=qemu-aarch64-static cargo test --test binary_smoke`; without them, this
//! build's binary): against the test bed's containerd a pod starts, a container stopped behind
//! atoll's back is restarted, atoll killed with SIGKILL adopts its pod on restart without
//! restarting anything, and `atoll validate` over the example and bad-example manifests prints
//! exactly what this build prints.

mod common;

use common::{atoll_command, eventually, testbed, Agent, Testbed};
use std::time::Duration;

const POD: &str = "apiVersion: v1
kind: Pod
metadata: {name: smoke}
spec:
  hostNetwork: true
  terminationGracePeriodSeconds: 0
  containers:
  - name: c
    image: docker.io/library/busybox:1.36
    command: [sleep, '3600']
";

fn running(tb: &Testbed) -> Vec<String> {
    tb.running_in("smoke-tb").into_iter().map(|c| c.id).collect()
}

/// The restart count of the pod's container as atoll's API shows it.
fn restarts(agent: &Agent) -> Option<i64> {
    agent.pod("smoke-tb")?["status"]["containerStatuses"][0]["restartCount"].as_i64()
}

#[test]
fn the_binary_runs_restarts_adopts_and_validates_like_this_build() {
    let tb = testbed();
    // The binary under test says which target it is (the cross-built one under qemu, in CI).
    let version = atoll_command().arg("version").output().unwrap();
    let version = String::from_utf8_lossy(&version.stdout).into_owned();
    eprintln!("binary under test: {}", version.replace('\n', "; "));
    if let Ok(bin) = std::env::var("ATOLL_BIN") {
        let target = version.lines().find_map(|l| l.strip_prefix("target: ")).unwrap_or("?");
        assert!(bin.ends_with(target), "{bin} reports target {target}");
    }
    let dir = common::Scratch::new("smoke");
    std::fs::create_dir_all(dir.join("manifests")).unwrap();
    std::fs::write(dir.join("manifests").join("smoke.yaml"), POD).unwrap();
    let mut agent = Agent::start(tb, &dir, "", &[], &[]);
    let first = eventually(Duration::from_secs(120), "the pod running", || running(tb).pop());

    // A container stopped behind atoll's back comes back (restartPolicy Always).
    smol::block_on(tb.cri().stop_container(&first, Duration::ZERO)).unwrap();
    let second = eventually(Duration::from_secs(120), "the container restarted", || {
        running(tb).pop().filter(|id| *id != first && restarts(&agent) == Some(1))
    });

    // SIGKILL, then a new atoll: it adopts the pod, restarting nothing, creating no duplicate.
    agent.child.kill().unwrap();
    agent.child.wait().unwrap();
    drop(agent);
    let agent = Agent::start(tb, &dir, "", &[], &[]);
    eventually(Duration::from_secs(120), "the pod adopted", || (restarts(&agent) == Some(1)).then_some(()));
    std::thread::sleep(Duration::from_secs(3));
    assert_eq!(running(tb), vec![second], "the adopted container was replaced");
    assert_eq!(tb.sandboxes_of("smoke-tb").len(), 1, "a duplicate sandbox");

    // The same verdicts, word for word, as this build's.
    let validate = |mut cmd: std::process::Command| {
        let out = cmd
            .args(["validate", "configs/examples", "configs/bad-examples", "--hostname-override=ci-node"])
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .output()
            .unwrap();
        (out.status.code(), String::from_utf8_lossy(&out.stdout).into_owned())
    };
    let native = validate(std::process::Command::new(env!("CARGO_BIN_EXE_atoll")));
    assert_eq!(validate(atoll_command()), native);
    assert_eq!(native.0, Some(1), "{}", native.1);

    std::fs::remove_file(dir.join("manifests").join("smoke.yaml")).unwrap();
    eventually(Duration::from_secs(120), "the pod gone", || tb.sandboxes_of("smoke-tb").is_empty().then_some(()));
    drop(agent);
    let _ = std::fs::remove_dir_all(&dir);
}
