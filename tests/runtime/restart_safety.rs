//! Restart safety: atoll killed between any two CRI calls of a pod's start, then started
//! again, converges to exactly the desired pod: no duplicate sandboxes or containers.
//! Needs the `fault-injection` feature (the test command turns it on).
#![cfg(feature = "fault-injection")]

use crate::common;

use atoll::cri::api::{ContainerFilter, ContainerState, PodSandboxFilter, PodSandboxState};
use common::{eventually, testbed, unique, Testbed};
use std::collections::HashMap;
use std::path::Path;
use std::process::Child;
use std::time::Duration;

/// An `atoll run` killed when dropped (also when a test fails halfway).
struct Running(Child);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn atoll(tb: &Testbed, dir: &Path, fault: Option<&str>) -> Running {
    let config = common::kubelet_config(tb, dir, "");
    let mut cmd = common::atoll_run(tb, dir, &config, &dir.join("api.sock"), "tb");
    if let Some(f) = fault {
        cmd.env("ATOLL_FAULT_ABORT_AFTER", f);
    }
    let log = std::fs::OpenOptions::new().create(true).append(true).open(dir.join("atoll.log")).expect("atoll.log");
    Running(cmd.stderr(log).spawn().expect("start atoll"))
}

fn pod_yaml(name: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\nspec:\n  hostNetwork: true\n  terminationGracePeriodSeconds: 1\n  containers:\n  - name: one\n    image: docker.io/library/busybox:1.36\n    command: [sleep, \"3600\"]\n  - name: two\n    image: docker.io/library/busybox:1.36\n    command: [sleep, \"3600\"]\n"
    )
}

/// (ready sandboxes, all sandboxes, containers by name: (running, total)) for a pod name.
fn census(tb: &Testbed, pod: &str) -> (usize, usize, HashMap<String, (usize, usize)>) {
    let cri = tb.cri();
    let sel = HashMap::from([("io.kubernetes.pod.name".to_string(), format!("{pod}-tb"))]);
    let sbs = smol::block_on(
        cri.list_pod_sandbox(Some(PodSandboxFilter { label_selector: sel.clone(), ..Default::default() })),
    )
    .unwrap();
    let ready = sbs.iter().filter(|s| s.state == PodSandboxState::SandboxReady as i32).count();
    let cs = smol::block_on(cri.list_containers(Some(ContainerFilter { label_selector: sel, ..Default::default() })))
        .unwrap();
    let mut by_name: HashMap<String, (usize, usize)> = HashMap::new();
    for c in cs {
        let e = by_name.entry(c.labels["io.kubernetes.container.name"].clone()).or_default();
        e.1 += 1;
        if c.state == ContainerState::ContainerRunning as i32 {
            e.0 += 1;
        }
    }
    (ready, sbs.len(), by_name)
}

#[test]
fn a_kill_between_any_two_cri_calls_converges_without_duplicates() {
    let _room = common::room(module_path!());
    let tb = testbed();
    for point in ["RunPodSandbox", "CreateContainer", "StartContainer", "CreateContainer:2", "StartContainer:2"] {
        let name = unique("crash").replace('-', "x");
        let dir = crate::common::Scratch::new(&format!("restart-{name}"));
        std::fs::create_dir_all(dir.join("manifests")).unwrap();
        std::fs::write(dir.join("manifests").join("pod.yaml"), pod_yaml(&name)).unwrap();

        let mut first = atoll(tb, &dir, Some(point));
        let log = || std::fs::read_to_string(dir.join("atoll.log")).unwrap_or_default();
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        let status = loop {
            if let Some(s) = first.0.try_wait().unwrap() {
                break s;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "{point}: atoll did not die at the injected point:\n{}",
                log()
            );
            std::thread::sleep(Duration::from_millis(100));
        };
        assert!(!status.success(), "{point}: atoll should have been aborted");

        let second = atoll(tb, &dir, None);
        eventually(Duration::from_secs(60), "the pod to converge", || {
            let (ready, _, by_name) = census(tb, &name);
            let ok = ready == 1 && ["one", "two"].iter().all(|n| by_name.get(*n).is_some_and(|(r, _)| *r == 1));
            ok.then_some(())
        });
        // Give it a few more syncs: nothing duplicates, nothing restarts.
        std::thread::sleep(Duration::from_secs(2));
        let (ready, total, by_name) = census(tb, &name);
        assert_eq!(ready, 1, "{point}: one ready sandbox");
        assert!(total <= 2, "{point}: at most the old and the new sandbox ({total})");
        for n in ["one", "two"] {
            let (running, all) = by_name[n];
            assert_eq!(running, 1, "{point}: container {n} runs once");
            assert!(all <= 2, "{point}: container {n} has {all} instances");
        }

        // Remove the manifest: the pod goes away, then stop atoll.
        std::fs::remove_file(dir.join("manifests").join("pod.yaml")).unwrap();
        eventually(Duration::from_secs(60), "the pod removed", || (census(tb, &name).1 == 0).then_some(()));
        drop(second);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
