//! The API objects atoll writes, built from local facts: the Node and its status, the Lease,
//! mirror pods and the status wanted on them (their patches: `patch.rs`). Pure functions (no
//! I/O), so their shapes are tested on their own.

use crate::pod::status::PodStatus;
use crate::pod::types::Pod;
use serde_json::{json, Map, Value};
use std::collections::BTreeMap;

pub const ANNOTATION_MIRROR: &str = "kubernetes.io/config.mirror";
pub const LEASE_NAMESPACE: &str = "kube-node-lease";
/// Nodes registered by atoll carry this taint, so the scheduler does not bind pods atoll would
/// never run (atoll runs static pods only).
pub const STATIC_ONLY_TAINT: &str = "atoll.io/static-pods-only";

/// nodeInfo.kubeletVersion: the kubelet whose API atoll implements, in kubelet's form (a
/// semantic version, as kubectl, kubeadm's skew checks and the controllers parse it with
/// k8s.io/apimachinery's version rules), atoll's own version as its build metadata. atoll's
/// fields follow k8s.io/api 0.36 (Kubernetes 1.36), which the tests hold its requests to.
/// Build metadata, as k3s's `+k3s1`, does not change how the version sorts: a pre-release
/// (`-atoll...`) would sort below v1.36.0 and fail the "at least 1.36" checks of the
/// control plane.
pub const KUBELET_VERSION: &str = concat!("v1.36.0+atoll.", env!("CARGO_PKG_VERSION"));

/// What the Node object says about this machine.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct NodeFacts {
    pub name: String,
    pub hostname: String,
    /// Default labels, then `--node-labels` (which win).
    pub labels: BTreeMap<String, String>,
    pub taints: Vec<Value>,
    pub internal_ip: String,
    pub cpu_millis: i64,
    pub memory_bytes: i64,
    pub ephemeral_storage_bytes: i64,
    pub max_pods: i64,
    /// Capacity less reservations (`node::machine::allocatable`).
    pub allocatable: crate::node::machine::Resources,
    pub machine_id: String,
    pub system_uuid: String,
    pub boot_id: String,
    pub kernel_version: String,
    pub os_image: String,
    /// `containerd://1.6.20`
    pub container_runtime_version: String,
    /// Go's GOARCH spelling: amd64, arm64, arm.
    pub architecture: String,
    /// The port of atoll's read-only API when it listens, else 0.
    pub endpoint_port: u16,
}

/// The node condition atoll computes: Ready from the runtime's health, the pressures false.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Condition {
    pub type_: &'static str,
    pub status: bool,
    pub reason: &'static str,
    pub message: String,
    /// When `status` last changed (RFC 3339).
    pub since: String,
}

pub use crate::node::machine::goarch;

/// Quantities as the API writes them: bytes in Ki, CPU in cores or millicores.
fn cpu_quantity(millis: i64) -> String {
    if millis % 1000 == 0 {
        (millis / 1000).to_string()
    } else {
        format!("{millis}m")
    }
}

fn bytes_quantity(bytes: i64) -> String {
    if bytes % 1024 == 0 {
        format!("{}Ki", bytes / 1024)
    } else {
        bytes.to_string()
    }
}

/// The node's conditions: Ready as given, no memory, disk or PID pressure (atoll does no
/// eviction, so it never reports any).
pub fn conditions(ready: bool, not_ready_message: &str) -> Vec<(&'static str, bool, &'static str, String)> {
    vec![
        ("MemoryPressure", false, "KubeletHasSufficientMemory", "atoll has sufficient memory available".into()),
        ("DiskPressure", false, "KubeletHasNoDiskPressure", "atoll has no disk pressure".into()),
        ("PIDPressure", false, "KubeletHasSufficientPID", "atoll has sufficient PID available".into()),
        if ready {
            ("Ready", true, "KubeletReady", "atoll is posting ready status".into())
        } else {
            ("Ready", false, "KubeletNotReady", not_ready_message.to_string())
        },
    ]
}

/// By condition type: the condition as last seen (its status and lastTransitionTime).
pub type Transitions = Map<String, Value>;

/// When the node condition `type_`, now `status`, last changed, as kubelet's condition setters
/// decide it: the time `seen` holds while the status is the same, else `now` (held from then).
pub fn transition(seen: &mut Transitions, type_: &str, status: &str, now: &str) -> String {
    let kept = seen.get(type_).filter(|c| c["status"] == status).and_then(|c| c["lastTransitionTime"].as_str());
    if let Some(since) = kept {
        return since.to_string();
    }
    seen.insert(type_.into(), json!({"status": status, "lastTransitionTime": now}));
    now.into()
}

/// Notes the conditions of a Node's status as the server holds them, for `transition`: kubelet
/// reads the Node back and keeps the time of a condition whose status it does not change.
pub fn seen_on_server(seen: &mut Transitions, status: &Value) {
    for c in status["conditions"].as_array().into_iter().flatten() {
        if let Some(t) = c["type"].as_str() {
            seen.insert(t.to_string(), c.clone());
        }
    }
}

/// The Node's status. `heartbeat` is the time of this report (RFC 3339).
pub fn node_status(f: &NodeFacts, conditions: &[Condition], heartbeat: &str) -> Value {
    let resources = json!({
        "cpu": cpu_quantity(f.cpu_millis),
        "memory": bytes_quantity(f.memory_bytes),
        "ephemeral-storage": bytes_quantity(f.ephemeral_storage_bytes),
        "pods": f.max_pods.to_string(),
    });
    let a = &f.allocatable;
    let allocatable = json!({
        "cpu": cpu_quantity(a.cpu_millis),
        "memory": bytes_quantity(a.memory_bytes),
        "ephemeral-storage": bytes_quantity(a.ephemeral_bytes),
        "pods": a.pods.to_string(),
    });
    let mut addresses = Vec::new();
    if !f.internal_ip.is_empty() {
        addresses.push(json!({"type": "InternalIP", "address": f.internal_ip}));
    }
    addresses.push(json!({"type": "Hostname", "address": f.hostname}));
    json!({
        "capacity": resources,
        "allocatable": allocatable,
        "conditions": conditions.iter().map(|c| json!({
            "type": c.type_,
            "status": if c.status { "True" } else { "False" },
            "reason": c.reason,
            "message": c.message,
            "lastHeartbeatTime": heartbeat,
            "lastTransitionTime": c.since,
        })).collect::<Vec<_>>(),
        "addresses": addresses,
        "daemonEndpoints": {"kubeletEndpoint": {"Port": f.endpoint_port}},
        "nodeInfo": {
            "machineID": f.machine_id,
            "systemUUID": f.system_uuid,
            "bootID": f.boot_id,
            "kernelVersion": f.kernel_version,
            "osImage": f.os_image,
            "containerRuntimeVersion": f.container_runtime_version,
            "kubeletVersion": KUBELET_VERSION,
            // Deprecated (KEP-4004): kubelet 1.33 on (DisableNodeKubeProxyVersion on by
            // default, locked in 1.36) leaves it empty and clears a value an older kubelet
            // left; so does atoll. A real server answers it empty anyway, so saying it keeps
            // the comparison of nodeInfo with the server's still.
            "kubeProxyVersion": "",
            "operatingSystem": "linux",
            "architecture": f.architecture,
        },
    })
}

/// The status without its heartbeat times: what decides whether it changed.
pub fn without_heartbeat(status: &Value) -> Value {
    let mut s = status.clone();
    if let Some(conds) = s.get_mut("conditions").and_then(Value::as_array_mut) {
        for c in conds {
            if let Some(o) = c.as_object_mut() {
                o.remove("lastHeartbeatTime");
            }
        }
    }
    s
}

/// The Node object registered with POST /api/v1/nodes.
pub fn node_object(f: &NodeFacts, status: Value) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": f.name,
            "labels": f.labels,
            "annotations": {"volumes.kubernetes.io/controller-managed-attach-detach": "true"},
        },
        "spec": {"taints": f.taints},
        "status": status,
    })
}

/// The labels of `node` that differ from `want`, as a strategic-merge patch (None when all
/// are there). Labels others added stay.
pub fn label_patch(node: &Value, want: &BTreeMap<String, String>) -> Option<Value> {
    let have = &node["metadata"]["labels"];
    let missing: Map<String, Value> = want
        .iter()
        .filter(|(k, v)| have[k.as_str()].as_str() != Some(v.as_str()))
        .map(|(k, v)| (k.clone(), Value::from(v.as_str())))
        .collect();
    (!missing.is_empty()).then(|| json!({"metadata": {"labels": missing}}))
}

/// The node's Lease in kube-node-lease, renewed at `renew_time` (MicroTime).
pub fn lease_object(node: &str, node_uid: Option<&str>, duration_seconds: u32, renew_time: &str) -> Value {
    let mut lease = json!({
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {"name": node, "namespace": LEASE_NAMESPACE},
        "spec": {
            "holderIdentity": node,
            "leaseDurationSeconds": duration_seconds,
            "renewTime": renew_time,
        },
    });
    if let Some(uid) = node_uid {
        lease["metadata"]["ownerReferences"] = json!([{"apiVersion": "v1", "kind": "Node", "name": node, "uid": uid}]);
    }
    lease
}

/// The mirror of a static pod: its object (annotations included), plus the mirror annotation
/// holding the static pod's hash and the Node as controlling owner. No UID, no status: the API
/// server gives the mirror its own UID, and status is written separately.
pub fn mirror_pod(pod: &Pod, hash: &str, node: &str, node_uid: &str) -> Value {
    let mut v = serde_json::to_value(pod).unwrap_or_default();
    v["apiVersion"] = "v1".into();
    v["kind"] = "Pod".into();
    if let Some(meta) = v["metadata"].as_object_mut() {
        meta.remove("uid");
        meta.remove("resourceVersion");
        meta.remove("creationTimestamp");
        meta.insert(
            "ownerReferences".into(),
            json!([{"apiVersion": "v1", "kind": "Node", "name": node, "uid": node_uid, "controller": true}]),
        );
    }
    v["metadata"]["annotations"][ANNOTATION_MIRROR] = hash.into();
    if let Some(o) = v.as_object_mut() {
        o.remove("status");
    }
    v
}

/// The static pod hash a mirror was made from, if it is a mirror.
pub fn mirror_hash(pod: &Value) -> Option<&str> {
    pod["metadata"]["annotations"][ANNOTATION_MIRROR].as_str()
}

/// The status atoll wants on a mirror: its own, with the conditions of other writers (types
/// atoll does not set) kept, as kubelet's status manager keeps them.
pub fn desired_status(ours: &PodStatus, mirror: &Value) -> Value {
    let mut want = serde_json::to_value(ours).unwrap_or_default();
    let own_types: Vec<&str> = ours.conditions.iter().map(|c| c.type_.as_str()).collect();
    let foreign: Vec<Value> = mirror["status"]["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|c| c["type"].as_str().is_some_and(|t| !own_types.contains(&t)))
        .cloned()
        .collect();
    if !foreign.is_empty() {
        let mut all = foreign;
        all.extend(want["conditions"].as_array().cloned().unwrap_or_default());
        want["conditions"] = Value::Array(all);
    }
    want
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pod::status::{ContainerStatus, PodCondition};

    fn facts() -> NodeFacts {
        NodeFacts {
            name: "edge-1".into(),
            hostname: "edge-1".into(),
            labels: crate::node::machine::labels(
                "edge-1",
                &BTreeMap::from([("site".to_string(), "north".to_string())]),
            ),
            internal_ip: "10.0.0.5".into(),
            cpu_millis: 2000,
            memory_bytes: 4 << 30,
            ephemeral_storage_bytes: 10 << 30,
            max_pods: 110,
            allocatable: crate::node::machine::Resources {
                cpu_millis: 1500,
                memory_bytes: (4 << 30) - (100 << 20),
                ephemeral_bytes: 9 << 30,
                pods: 110,
            },
            container_runtime_version: "containerd://1.6.20".into(),
            architecture: goarch().into(),
            ..Default::default()
        }
    }

    #[test]
    fn the_node_carries_labels_capacity_and_conditions() {
        let f = facts();
        let conds: Vec<Condition> = conditions(true, "")
            .into_iter()
            .map(|(t, s, r, m)| Condition { type_: t, status: s, reason: r, message: m, since: "T0".into() })
            .collect();
        let node = node_object(&f, node_status(&f, &conds, "T1"));
        assert_eq!(node["metadata"]["labels"]["kubernetes.io/hostname"], "edge-1");
        assert_eq!(node["metadata"]["labels"]["kubernetes.io/os"], "linux");
        assert_eq!(node["metadata"]["labels"]["site"], "north");
        assert_eq!(node["status"]["capacity"]["cpu"], "2");
        assert_eq!(node["status"]["capacity"]["memory"], "4194304Ki");
        assert_eq!(node["status"]["allocatable"]["pods"], "110");
        assert_eq!(node["status"]["allocatable"]["cpu"], "1500m");
        assert_eq!(node["status"]["allocatable"]["memory"], "4091904Ki");
        assert_eq!(node["status"]["addresses"][0], json!({"type": "InternalIP", "address": "10.0.0.5"}));
        assert_eq!(node["status"]["addresses"][1], json!({"type": "Hostname", "address": "edge-1"}));
        assert_eq!(node["status"]["nodeInfo"]["containerRuntimeVersion"], "containerd://1.6.20");
        assert_eq!(node["status"]["nodeInfo"]["kubeletVersion"], KUBELET_VERSION);
        assert_eq!(node["status"]["nodeInfo"]["kubeProxyVersion"], "");
        let ready = node["status"]["conditions"].as_array().unwrap().iter().find(|c| c["type"] == "Ready").unwrap();
        assert_eq!(ready["status"], "True");
        assert_eq!(ready["reason"], "KubeletReady");
        assert_eq!(ready["lastHeartbeatTime"], "T1");
        assert_eq!(cpu_quantity(1500), "1500m");
        // Only the heartbeat differs: no change.
        let later = node_status(&f, &conds, "T2");
        assert_eq!(without_heartbeat(&later), without_heartbeat(&node["status"]));
        assert_ne!(later, node["status"]);
    }

    /// k8s.io/apimachinery's ParseSemantic, as written in its version.go: `v` optional, three
    /// numeric components without leading zeros, then `-pre.release` (numeric identifiers
    /// without leading zeros) and `+build.metadata`, identifiers of `[0-9A-Za-z-]`.
    fn kubernetes_semver(v: &str) -> bool {
        let v = v.strip_prefix('v').unwrap_or(v);
        let numeric =
            |c: &str| !c.is_empty() && c.bytes().all(|b| b.is_ascii_digit()) && (c == "0" || !c.starts_with('0'));
        let idents =
            |s: &str| s.split('.').all(|i| !i.is_empty() && i.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-'));
        let (rest, build) = v.split_once('+').map_or((v, None), |(r, b)| (r, Some(b)));
        let (core, pre) = rest.split_once('-').map_or((rest, None), |(c, p)| (c, Some(p)));
        let parts: Vec<&str> = core.split('.').collect();
        parts.len() == 3
            && parts.iter().all(|c| numeric(c))
            && pre
                .is_none_or(|p| idents(p) && p.split('.').all(|i| !i.bytes().all(|b| b.is_ascii_digit()) || numeric(i)))
            && build.is_none_or(idents)
    }

    #[test]
    fn the_kubelet_version_is_a_kubernetes_semantic_version() {
        for (v, ok) in [
            (KUBELET_VERSION, true),
            ("v1.36.0", true),
            ("v1.36.0-rc.1", true),
            ("v1.30.4+k3s1", true),
            ("v1.36.0-atoll.0.1.0", true),
            ("atoll/0.1.0", false),
            ("v1.36", false),
            ("v01.36.0", false),
            ("v1.36.0-01", false),
            ("v1.36.0+", false),
        ] {
            assert_eq!(kubernetes_semver(v), ok, "{v}");
        }
        assert!(KUBELET_VERSION.starts_with("v1.36.0+atoll."), "{KUBELET_VERSION}");
        // The probes say the same Kubernetes release (kube-probe/<major>.<minor>).
        let probes = crate::handlers::http::USER_AGENT.trim_start_matches("kube-probe/");
        assert!(KUBELET_VERSION.starts_with(&format!("v{probes}.0+")), "{probes} against {KUBELET_VERSION}");
        assert!(KUBELET_VERSION.ends_with(env!("CARGO_PKG_VERSION")));
    }

    #[test]
    fn a_condition_keeps_its_transition_time_while_its_status_holds() {
        // The Node as a restarted atoll reads it back.
        let server = json!({"conditions": [
            {"type": "Ready", "status": "True", "lastTransitionTime": "T0"},
            {"type": "MemoryPressure", "status": "Unknown", "lastTransitionTime": "T1"},
            {"type": "DiskPressure", "status": "False"},
        ]});
        let mut seen = Transitions::new();
        seen_on_server(&mut seen, &server);
        for (type_, status, now, since) in [
            ("Ready", "True", "T5", "T0"),           // restarted, still Ready: its time kept
            ("MemoryPressure", "False", "T5", "T5"), // the controller's Unknown: a change
            ("DiskPressure", "False", "T5", "T5"),
            ("PIDPressure", "False", "T5", "T5"), // new
            ("Ready", "False", "T6", "T6"),
            ("Ready", "False", "T7", "T6"),
            ("Ready", "True", "T8", "T8"),
            ("DiskPressure", "False", "T9", "T5"),
        ] {
            assert_eq!(transition(&mut seen, type_, status, now), since, "{type_} {status} at {now}");
        }
    }

    #[test]
    fn node_labels_given_win_and_missing_ones_are_patched() {
        let labels = crate::node::machine::labels(
            "h",
            &BTreeMap::from([("kubernetes.io/hostname".to_string(), "x".to_string())]),
        );
        assert_eq!(labels["kubernetes.io/hostname"], "x");
        let node = json!({"metadata": {"labels": {"kubernetes.io/hostname": "x", "other": "kept"}}});
        let patch = label_patch(&node, &labels).unwrap();
        assert_eq!(patch["metadata"]["labels"]["kubernetes.io/os"], "linux");
        assert!(patch["metadata"]["labels"].get("kubernetes.io/hostname").is_none());
        assert!(patch["metadata"]["labels"].get("other").is_none());
        let all = json!({"metadata": {"labels": labels}});
        assert_eq!(label_patch(&all, &labels), None);
    }

    #[test]
    fn the_mirror_is_the_static_pod_with_annotation_and_owner() {
        let mut pod = Pod::default();
        pod.metadata.name = "web-edge-1".into();
        pod.metadata.namespace = "default".into();
        pod.metadata.uid = "abc".into();
        pod.metadata.annotations.insert("kubernetes.io/config.hash".into(), "abc".into());
        let m = mirror_pod(&pod, "abc", "edge-1", "node-uid");
        assert_eq!(m["kind"], "Pod");
        assert!(m["metadata"].get("uid").is_none());
        assert!(m.get("status").is_none());
        assert_eq!(m["metadata"]["annotations"][ANNOTATION_MIRROR], "abc");
        assert_eq!(m["metadata"]["annotations"]["kubernetes.io/config.hash"], "abc");
        assert_eq!(
            m["metadata"]["ownerReferences"],
            json!([{"apiVersion": "v1", "kind": "Node", "name": "edge-1", "uid": "node-uid", "controller": true}])
        );
        assert_eq!(mirror_hash(&m), Some("abc"));
        assert_eq!(mirror_hash(&json!({"metadata": {}})), None);
    }

    #[test]
    fn the_wanted_status_is_ours_with_the_conditions_of_other_writers() {
        let ours = PodStatus {
            phase: "Running".into(),
            conditions: vec![PodCondition { type_: "Ready".into(), status: "True".into(), ..Default::default() }],
            container_statuses: vec![ContainerStatus { name: "c".into(), restart_count: 2, ..Default::default() }],
            qos_class: "BestEffort".into(),
            ..Default::default()
        };
        let mirror = json!({
            "metadata": {"uid": "m-1"},
            "status": {
                "phase": "Pending",
                "podIP": "10.77.7.9",
                "qosClass": "BestEffort",
                "conditions": [
                    {"type": "Ready", "status": "False"},
                    {"type": "example.com/gate", "status": "True"},
                ],
            },
        });
        let want = desired_status(&ours, &mirror);
        assert_eq!(
            want["conditions"],
            json!([{"type": "example.com/gate", "status": "True"}, {"type": "Ready", "status": "True"}]),
            "other writers' first, as kubelet's mergePodStatus orders them"
        );
        assert_eq!(want["phase"], "Running");
        assert!(want.get("podIP").is_none());
        assert_eq!(want["containerStatuses"][0]["restartCount"], 2);
    }

    #[test]
    fn the_lease_names_its_holder_and_owner() {
        let l = lease_object("edge-1", Some("u"), 40, "2026-11-23T01:02:03.000004Z");
        assert_eq!(l["metadata"]["namespace"], LEASE_NAMESPACE);
        assert_eq!(l["spec"]["holderIdentity"], "edge-1");
        assert_eq!(l["spec"]["leaseDurationSeconds"], 40);
        assert_eq!(l["metadata"]["ownerReferences"][0]["uid"], "u");
        assert!(lease_object("edge-1", None, 40, "t")["metadata"].get("ownerReferences").is_none());
    }
}
