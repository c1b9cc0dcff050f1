//! kubelet's admission end to end, against the real private containerd: pods that do not fit
//! the node (its labels, its allocatable memory, `maxPods`, a host port in use, another OS, a
//! sysctl not allowed, AppArmor where the host has none) never start and show `Failed` with
//! kubelet's reason and message in `atoll pods`, `atoll describe` and the events; the pods that
//! fit run, a dongle's extended resource dropped.

use crate::common;

use common::{eventually, testbed, Agent};
use std::time::Duration;

fn pod(name: &str, spec: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata: {{name: {name}}}\nspec:\n  terminationGracePeriodSeconds: 0\n  hostNetwork: true\n{spec}  containers:\n  - name: c\n    image: docker.io/library/busybox:1.36\n    command: [sleep, '3600']\n"
    )
}

#[test]
fn pods_that_do_not_fit_the_node_never_start_and_say_why() {
    let _room = common::room(module_path!());
    let tb = testbed();
    let dir = crate::common::Scratch::new("admission");
    let manifests = dir.join("manifests");
    std::fs::create_dir_all(&manifests).unwrap();
    let write = |name: &str, text: String| std::fs::write(manifests.join(format!("{name}.yaml")), text).unwrap();
    // Two fit (a higher priority admits them first); `extra` would be the third: maxPods is 2.
    let fits = pod("fits", "  priority: 10\n  nodeSelector: {site: north, kubernetes.io/os: linux}\n");
    write("fits", fits.replace("    command:", "    ports: [{containerPort: 8781}]\n    command:"));
    write(
        "dongle",
        pod("dongle", "  priority: 10\n").replace(
            "    command:",
            "    resources: {requests: {example.com/dongle: '1'}, limits: {example.com/dongle: '1'}}\n    command:",
        ),
    );
    write("extra", pod("extra", ""));
    write("south", pod("south", "  nodeSelector: {site: south}\n"));
    let arch = "  affinity:\n    nodeAffinity:\n      requiredDuringSchedulingIgnoredDuringExecution:\n        nodeSelectorTerms:\n        - matchExpressions:\n          - {key: site, operator: NotIn, values: [north]}\n";
    write("affine", pod("affine", &format!("  priority: 20\n{arch}")));
    write(
        "greedy",
        pod("greedy", "  priority: 20\n")
            .replace("    command:", "    resources: {requests: {memory: 1000Gi}}\n    command:"),
    );
    // `fits` takes host port 8781 (hostNetwork: its container port); `clash` wants it too.
    write(
        "clash",
        pod("clash", "  priority: 5\n").replace("    command:", "    ports: [{containerPort: 8781}]\n    command:"),
    );
    write("windows", pod("windows", "  os: {name: windows}\n"));
    write("tuned", pod("tuned", "  securityContext: {sysctls: [{name: net.core.somaxconn, value: '1024'}]}\n"));
    let armored = pod("armored", "  priority: 20\n")
        .replace("metadata: {name: armored}", "metadata:\n  name: armored\n  annotations: {container.apparmor.security.beta.kubernetes.io/c: runtime/default}");
    write("armored", armored);
    // Where the host enforces AppArmor, `armored` runs and takes a place of its own.
    let armor = atoll::pod::apparmor::host_enabled();
    let max_pods = if armor { "maxPods: 3\n" } else { "maxPods: 2\n" };
    let agent = Agent::start(tb, &dir, max_pods, &["--node-labels=site=north"], &[]);

    for name in ["fits-tb", "dongle-tb"] {
        eventually(Duration::from_secs(60), &format!("{name} running"), || tb.running_in(name).pop());
    }
    let mut rejected = vec![
        (
            "south-tb",
            "NodeAffinity",
            "Pod was rejected: Predicate NodeAffinity failed: node(s) didn't match Pod's node affinity/selector",
        ),
        ("affine-tb", "NodeAffinity", "Pod was rejected: Predicate NodeAffinity failed"),
        (
            "greedy-tb",
            "UnexpectedAdmissionError",
            "no set of running pods found to reclaim resources: [(res: memory, q: ",
        ),
        (
            "extra-tb",
            "UnexpectedAdmissionError",
            "no set of running pods found to reclaim resources: [(res: pods, q: 1), ]",
        ),
    ];
    rejected.push((
        "clash-tb",
        "NodePorts",
        "Pod was rejected: Predicate NodePorts failed: node(s) didn't have free ports for the requested pod ports",
    ));
    rejected.push((
        "tuned-tb",
        "SysctlForbidden",
        "Pod was rejected: forbidden sysctl: \"net.core.somaxconn\" not allowlisted",
    ));
    rejected.push((
        "windows-tb",
        "PodOSNotSupported",
        "Pod was rejected: Failed to admit pod as the OS field doesn't match node OS",
    ));
    // A profile asked for on a host without AppArmor (this test bed's kernel has none).
    if armor {
        eprintln!("this host enforces AppArmor: the AppArmor rejection is not played here");
        eventually(Duration::from_secs(60), "armored running", || tb.running_in("armored-tb").pop());
    } else {
        rejected.push(("armored-tb", "AppArmor", "Pod was rejected: Cannot enforce AppArmor"));
    }
    for &(name, reason, message) in &rejected {
        let p = eventually(Duration::from_secs(30), &format!("{name} shown"), || agent.pod(name));
        assert_eq!(p["status"]["phase"], "Failed", "{name}: {p}");
        assert_eq!(p["status"]["reason"], reason, "{name}");
        let m = p["status"]["message"].as_str().unwrap_or("");
        assert!(m.contains(message), "{name}: {m}");
        assert!(m.starts_with("Pod was rejected: "), "{name}: {m}");
        let (_, describe, _) = agent.cli(&["describe", name]);
        assert!(describe.contains("Reason:") && describe.contains(reason), "{describe}");
        assert!(describe.contains("Warning"), "the event is shown: {describe}");
    }
    let (_, table, _) = agent.cli(&["pods"]);
    assert!(table.lines().any(|l| l.starts_with("south-tb") && l.contains("NodeAffinity")), "{table}");
    // Never started: no sandbox, no container, and none later either.
    std::thread::sleep(Duration::from_secs(2));
    for &(name, _, _) in &rejected {
        assert!(tb.sandboxes_of(name).is_empty(), "{name} got a sandbox");
    }
    // A rejected pod's manifest removed: it is gone from the API.
    std::fs::remove_file(manifests.join("south.yaml")).unwrap();
    eventually(Duration::from_secs(30), "south gone", || agent.pod("south-tb").is_none().then_some(()));
    drop(agent);
    for name in ["fits-tb", "dongle-tb", "armored-tb"] {
        for s in tb.sandboxes_of(name) {
            let _ = smol::block_on(tb.cri().stop_pod_sandbox(&s.id));
            let _ = smol::block_on(tb.cri().remove_pod_sandbox(&s.id));
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}
