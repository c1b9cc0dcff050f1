//! downwardAPI volumes end to end, against the real private containerd: a pod with its own
//! `metadata.uid` reads its name, namespace, UID, labels, annotations and a container's memory
//! limit from files (a plain volume and a projected source); an edit of its annotations (the
//! UID kept, so the same pod) reaches the running container's files without a restart.

use crate::common;

use common::{eventually, testbed, Agent, Testbed};
use std::path::Path;
use std::time::Duration;

fn pod(note: &str) -> String {
    format!(
        "apiVersion: v1
kind: Pod
metadata:
  name: info
  uid: 5d1c0a7e-downward-test
  labels: {{app: info, tier: edge}}
  annotations: {{note: '{note}'}}
spec:
  hostNetwork: true
  terminationGracePeriodSeconds: 0
  containers:
  - name: c
    image: docker.io/library/busybox:1.36
    command: [sleep, '3600']
    resources: {{limits: {{memory: 64Mi}}}}
    volumeMounts:
    - {{name: podinfo, mountPath: /etc/podinfo}}
    - {{name: both, mountPath: /etc/both}}
  volumes:
  - name: podinfo
    downwardAPI:
      defaultMode: 0440
      items:
      - {{path: name, fieldRef: {{fieldPath: metadata.name}}}}
      - {{path: namespace, fieldRef: {{fieldPath: metadata.namespace}}}}
      - {{path: uid, fieldRef: {{fieldPath: metadata.uid}}}}
      - {{path: labels, fieldRef: {{fieldPath: metadata.labels}}}}
      - {{path: annotations, fieldRef: {{fieldPath: metadata.annotations}}}}
      - {{path: meta/note, fieldRef: {{fieldPath: \"metadata.annotations['note']\"}}}}
      - {{path: mem, resourceFieldRef: {{containerName: c, resource: limits.memory, divisor: 1Mi}}}}
  - name: both
    projected:
      sources:
      - downwardAPI:
          items: [{{path: tier, fieldRef: {{fieldPath: \"metadata.labels['tier']\"}}}}]
"
    )
}

fn put(manifests: &Path, text: &str) {
    let staged = manifests.join(".info.yaml.tmp");
    std::fs::write(&staged, text).unwrap();
    std::fs::rename(&staged, manifests.join("info.yaml")).unwrap();
}

fn exec(tb: &Testbed, id: &str, script: &str) -> String {
    let cmd = vec!["sh".to_string(), "-c".to_string(), script.to_string()];
    let r = smol::block_on(tb.cri().exec_sync(id, cmd, Duration::from_secs(10))).expect("ExecSync");
    String::from_utf8_lossy(&r.stdout).into_owned()
}

fn restarts(agent: &Agent) -> Option<u64> {
    agent.pod("info-tb")?["status"]["containerStatuses"][0]["restartCount"].as_u64()
}

#[test]
fn a_pod_reads_its_own_fields_from_files_and_sees_its_annotations_change_without_a_restart() {
    let _room = common::room(module_path!());
    let tb = testbed();
    let dir = crate::common::Scratch::new("downward");
    let manifests = dir.join("manifests");
    std::fs::create_dir_all(&manifests).unwrap();
    put(&manifests, &pod("first note"));
    let agent = Agent::start(tb, &dir, "", &[], &[]);
    let id = eventually(Duration::from_secs(60), "the pod running", || tb.running_in("info-tb").pop().map(|c| c.id));

    let read = |file: &str| exec(tb, &id, &format!("cat /etc/podinfo/{file}"));
    assert_eq!(read("name"), "info-tb");
    assert_eq!(read("namespace"), "default");
    assert_eq!(read("uid"), "5d1c0a7e-downward-test");
    assert_eq!(read("labels"), "app=\"info\"\ntier=\"edge\"");
    assert_eq!(read("meta/note"), "first note");
    assert_eq!(read("mem"), "64");
    assert!(read("annotations").lines().any(|l| l == "note=\"first note\""), "{}", read("annotations"));
    assert_eq!(exec(tb, &id, "stat -L -c %a /etc/podinfo/uid"), "440\n");
    assert_eq!(exec(tb, &id, "cat /etc/both/tier"), "edge");
    // Read-only in the container, a tmpfs on the host (as kubelet's).
    let mounts = exec(tb, &id, "cat /proc/mounts");
    assert!(mounts.lines().any(|l| l.split(' ').nth(1) == Some("/etc/podinfo") && l.contains(" ro")), "{mounts}");
    let host = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    assert!(host.lines().any(|l| l.contains(" tmpfs ") && l.contains("kubernetes.io~downward-api/podinfo")));

    // The annotation is edited; the UID is the manifest's, so it is the same pod, updated.
    put(&manifests, &pod("second \"note\""));
    eventually(Duration::from_secs(30), "the new annotation in the files", || {
        (read("meta/note") == "second \"note\"").then_some(())
    });
    assert!(read("annotations").lines().any(|l| l == "note=\"second \\\"note\\\"\""), "{}", read("annotations"));
    assert_eq!(tb.running_in("info-tb").into_iter().map(|c| c.id).collect::<Vec<_>>(), vec![id.clone()]);
    assert_eq!(restarts(&agent), Some(0));

    std::fs::remove_file(manifests.join("info.yaml")).unwrap();
    eventually(Duration::from_secs(60), "the pod gone", || tb.sandboxes_of("info-tb").is_empty().then_some(()));
    drop(agent);
    let _ = std::fs::remove_dir_all(&dir);
}
