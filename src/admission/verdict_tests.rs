//! Table tests of admission's verdicts, with kubelet's reasons and messages.

use super::*;
use serde_json::json;

fn pod(spec: serde_json::Value) -> Pod {
    let mut spec = spec;
    if spec.get("containers").is_none() {
        spec["containers"] = json!([{"name": "c", "image": "x"}]);
    }
    serde_json::from_value(json!({"metadata": {"name": "p"}, "spec": spec})).unwrap()
}

fn requesting(cpu: &str, mem: &str) -> Pod {
    pod(json!({"containers": [{"name": "c", "image": "x", "resources": {"requests": {"cpu": cpu, "memory": mem}}}]}))
}

fn node() -> NodeInfo {
    NodeInfo {
        name: "gw1".into(),
        labels: crate::node::machine::labels("gw1", &BTreeMap::from([("site".into(), "north".into())])),
        allocatable: Resources { cpu_millis: 2000, memory_bytes: 2 << 30, ephemeral_bytes: 10 << 30, pods: 3 },
        apparmor: false,
        allowed_sysctls: Vec::new(),
    }
}

fn reason(r: Result<(), Rejection>) -> String {
    r.err().map(|r| r.reason).unwrap_or_default()
}

#[test]
fn a_pod_that_fits_is_admitted() {
    let other = requesting("1", "1Gi");
    assert_eq!(admit(&requesting("1", "1Gi"), true, &[&other], &node()), Ok(()));
    let sel = pod(json!({"nodeSelector": {"site": "north", "kubernetes.io/os": "linux"}}));
    assert_eq!(admit(&sel, true, &[], &node()), Ok(()));
    let dongle = pod(json!({"containers": [{"name": "c", "image": "x", "resources": {
        "requests": {"example.com/dongle": "1"}, "limits": {"example.com/dongle": "1"}}}]}));
    assert_eq!(admit(&dongle, true, &[], &node()), Ok(()), "missing extended resources are dropped");
}

#[test]
fn node_affinity_selector_and_name_are_predicates() {
    let n = node();
    for (spec, want) in [
        (json!({"nodeSelector": {"site": "south"}}), "NodeAffinity"),
        (
            json!({"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [{"matchExpressions": [{"key": "gpu", "operator": "Exists"}]}]}}}}),
            "NodeAffinity",
        ),
        (json!({"nodeName": "gw2"}), "NodeName"),
    ] {
        let r = admit(&pod(spec.clone()), true, &[], &n).unwrap_err();
        assert_eq!(r.reason, want, "{spec}");
        assert!(r.message.starts_with(&format!("Predicate {want} failed: node(s) didn't match")), "{}", r.message);
    }
}

#[test]
fn the_os_label_and_field_come_first() {
    let mut p = pod(json!({"os": {"name": "windows"}, "nodeSelector": {"site": "south"}}));
    assert_eq!(reason(admit(&p, true, &[], &node())), "PodOSNotSupported");
    p.metadata.labels.insert("kubernetes.io/os".into(), "windows".into());
    let r = admit(&p, true, &[], &node()).unwrap_err();
    assert_eq!(r.reason, "PodOSSelectorNodeLabelDoesNotMatch");
    assert_eq!(r.message, "Failed to admit pod as the `kubernetes.io/os` label doesn't match node label");
}

#[test]
fn host_ports_conflict_as_the_scheduler_says() {
    let port = |ip: &str, proto: &str, n: i64| {
        pod(json!({"containers": [{"name": "c", "image": "x", "ports": [
            {"containerPort": n, "hostPort": n, "hostIP": ip, "protocol": proto}]}]}))
    };
    let n = node();
    for (taken, asked, conflict) in [
        (port("", "TCP", 80), port("", "TCP", 80), true),
        (port("", "TCP", 80), port("", "UDP", 80), false),
        (port("", "TCP", 80), port("", "TCP", 81), false),
        (port("10.0.0.1", "TCP", 80), port("10.0.0.2", "TCP", 80), false),
        (port("10.0.0.1", "TCP", 80), port("10.0.0.1", "TCP", 80), true),
        (port("10.0.0.1", "TCP", 80), port("0.0.0.0", "TCP", 80), true),
        (port("", "TCP", 80), port("10.0.0.2", "TCP", 80), true),
    ] {
        let r = admit(&asked, true, &[&taken], &n);
        assert_eq!(reason(r), if conflict { "NodePorts" } else { "" }, "{:?} vs {:?}", taken.spec, asked.spec);
    }
}

#[test]
fn resources_short_for_a_static_pod_end_in_kubelets_preemption_error() {
    let n = node();
    let big = requesting("3", "1000Gi");
    let r = admit(&big, true, &[], &n).unwrap_err();
    assert_eq!(r.reason, "UnexpectedAdmissionError");
    assert_eq!(
        r.message,
        format!(
            "Unexpected error while attempting to recover from admission failure: preemption: error finding a set of pods to preempt: no set of running pods found to reclaim resources: [(res: cpu, q: 1000), (res: memory, q: {}), ]",
            (1000i64 << 30) - (2 << 30)
        )
    );
    // The pod count first; what the others request is used.
    let (a, b, c) = (requesting("1", "1Gi"), requesting("500m", "0"), requesting("0", "0"));
    let r = admit(&requesting("1", "0"), true, &[&a, &b, &c], &n).unwrap_err();
    assert!(r.message.ends_with("[(res: pods, q: 1), (res: cpu, q: 500), ]"), "{}", r.message);
    // Another failure wins over resources for a critical pod.
    let both = pod(json!({"nodeName": "gw2", "containers": [{"name": "c", "image": "x",
        "resources": {"requests": {"memory": "1000Gi"}}}]}));
    assert_eq!(reason(admit(&both, true, &[], &n)), "NodeName");
}

#[test]
fn a_pod_that_is_not_critical_gets_out_of_reasons() {
    let n = node();
    for (p, want, msg) in [
        (
            requesting("3", "0"),
            "OutOfcpu",
            "Node didn't have enough resource: cpu, requested: 3000, used: 0, capacity: 2000",
        ),
        (
            requesting("0", "3Gi"),
            "OutOfmemory",
            "Node didn't have enough resource: memory, requested: 3221225472, used: 0, capacity: 2147483648",
        ),
    ] {
        let r = admit(&p, false, &[], &n).unwrap_err();
        assert_eq!((r.reason.as_str(), r.message.as_str()), (want, msg));
    }
    let huge =
        pod(json!({"containers": [{"name": "c", "image": "x", "resources": {"requests": {"hugepages-2Mi": "2Mi"}}}]}));
    // A resource the node has none of is left to DRA (kubelet 1.36): hugepages pass.
    assert_eq!(admit(&huge, false, &[], &n), Ok(()));
    let three: Vec<Pod> = (0..3).map(|_| pod(json!({}))).collect();
    let refs: Vec<&Pod> = three.iter().collect();
    let r = admit(&pod(json!({})), false, &refs, &n).unwrap_err();
    assert_eq!(r.reason, "OutOfpods");
    assert_eq!(r.message, "Node didn't have enough resource: pods, requested: 1, used: 3, capacity: 3");
}

#[test]
fn apparmor_needs_a_host_that_enforces_it() {
    let mut p = pod(json!({}));
    p.metadata.annotations.insert("container.apparmor.security.beta.kubernetes.io/c".into(), "runtime/default".into());
    let r = admit(&p, true, &[], &node()).unwrap_err();
    assert_eq!(r.reason, "AppArmor");
    assert_eq!(admit(&p, true, &[], &NodeInfo { apparmor: true, ..node() }), Ok(()));
    p.metadata.annotations.insert("container.apparmor.security.beta.kubernetes.io/c".into(), "unconfined".into());
    assert_eq!(admit(&p, true, &[], &node()), Ok(()), "unconfined needs nothing");
}

#[test]
fn sysctls_come_first_and_sidecars_hold_host_ports() {
    let p =
        pod(json!({"nodeName": "gw2", "securityContext": {"sysctls": [{"name": "net.core.somaxconn", "value": "1"}]}}));
    let r = admit(&p, true, &[], &node()).unwrap_err();
    assert_eq!(
        (r.reason.as_str(), r.message.as_str()),
        ("SysctlForbidden", "forbidden sysctl: \"net.core.somaxconn\" not allowlisted")
    );
    let allowed = NodeInfo { allowed_sysctls: vec!["net.core.somaxconn".into()], ..node() };
    assert_eq!(reason(admit(&p, true, &[], &allowed)), "NodeName");
    let sidecar = pod(json!({"initContainers": [{"name": "s", "image": "x", "restartPolicy": "Always",
        "ports": [{"containerPort": 8080, "hostPort": 8080}]}]}));
    let web =
        pod(json!({"containers": [{"name": "c", "image": "x", "ports": [{"containerPort": 8080, "hostPort": 8080}]}]}));
    assert_eq!(reason(admit(&web, true, &[&sidecar], &node())), "NodePorts");
    assert_eq!(reason(admit(&sidecar, true, &[&web], &node())), "NodePorts");
}
