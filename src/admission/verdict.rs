//! Whether one pod may run beside the pods already admitted: kubelet's admit handlers in
//! their order (the sysctls' allowlist, `pkg/kubelet/lifecycle/predicate.go`, the AppArmor
//! handler), as one pure function.
//!
//! The predicate handler first refuses a pod whose `kubernetes.io/os` label or `spec.os` is
//! not this node's OS, drops the requests of extended resources the node does not have (a
//! static pod's dongle that no device plugin announces), then runs the scheduler's
//! `AdmissionCheck` with every failure kept: resources (the pod count first, then cpu,
//! memory, ephemeral storage; see `requests`) against allocatable less what the
//! admitted pods request, the required node affinity and `nodeSelector`, `spec.nodeName`, and
//! host ports. Taints are not checked for static pods (kubelet's rule).
//!
//! Static pods are critical (`IsCriticalPod`), so a shortage of resources alone goes to
//! kubelet's preemption, which frees room only by evicting pods it may preempt; atoll
//! preempts nothing, and reports what kubelet reports when nothing can be preempted.

use super::requests::{self, Request};
use crate::node::machine::Resources;
use crate::pod::types::Pod;
use std::collections::BTreeMap;

/// What admission knows of the node.
#[derive(Clone, Debug, Default)]
pub struct NodeInfo {
    pub name: String,
    pub labels: BTreeMap<String, String>,
    pub allocatable: Resources,
    /// Whether the host enforces AppArmor.
    pub apparmor: bool,
    /// `allowedUnsafeSysctls`.
    pub allowed_sysctls: Vec<String>,
}

/// Why a pod was not admitted: kubelet's reason (the pod status' `reason`, the event's
/// reason) and message (the status says `Pod was rejected: ` before it).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rejection {
    pub reason: String,
    pub message: String,
}

/// A failure of the scheduler's checks.
enum Failure {
    /// A resource short: name, requested, used, capacity (allocatable).
    Short(&'static str, i64, i64, i64),
    /// A predicate: its name and reason.
    Predicate(&'static str, &'static str),
}

/// Whether `pod` may run beside `others` (the admitted pods still running) on `node`.
/// `critical`: the pod is critical to kubelet (every static pod is).
pub fn admit(pod: &Pod, critical: bool, others: &[&Pod], node: &NodeInfo) -> Result<(), Rejection> {
    let reject = |reason: &str, message: String| Err(Rejection { reason: reason.into(), message });
    if let Some(message) = super::sysctls::refusal(pod, &node.allowed_sysctls) {
        return reject(super::sysctls::REASON, message);
    }
    if pod.metadata.labels.get("kubernetes.io/os").is_some_and(|os| os != "linux") {
        let m = "Failed to admit pod as the `kubernetes.io/os` label doesn't match node label";
        return reject("PodOSSelectorNodeLabelDoesNotMatch", m.into());
    }
    if pod.spec.os.as_ref().is_some_and(|os| os.name != "linux") {
        return reject("PodOSNotSupported", "Failed to admit pod as the OS field doesn't match node OS".into());
    }
    let failures = check(pod, others, node);
    // A critical pod is refused for its other failures first; resources go to preemption.
    let reported = match critical {
        true => failures.iter().find(|f| matches!(f, Failure::Predicate(..))),
        false => failures.first(),
    };
    if let Some(first) = reported {
        return match first {
            Failure::Predicate(name, why) => reject(name, format!("Predicate {name} failed: {why}")),
            Failure::Short(res, req, used, cap) => reject(
                &format!("OutOf{res}"),
                format!("Node didn't have enough resource: {res}, requested: {req}, used: {used}, capacity: {cap}"),
            ),
        };
    }
    if !failures.is_empty() {
        // Only resources are short, and nothing is preempted: kubelet's preemption error.
        let mut list = String::from("[");
        for f in &failures {
            if let Failure::Short(res, req, used, cap) = f {
                let short = req.saturating_sub(cap.saturating_sub(*used));
                list.push_str(&format!("(res: {res}, q: {short}), "));
            }
        }
        list.push(']');
        return reject(
            "UnexpectedAdmissionError",
            format!(
                "Unexpected error while attempting to recover from admission failure: preemption: error finding a set of pods to preempt: no set of running pods found to reclaim resources: {list}"
            ),
        );
    }
    if let Some(message) = crate::pod::apparmor::refusal(pod, node.apparmor) {
        return reject(crate::pod::apparmor::REASON, message);
    }
    Ok(())
}

/// The scheduler's `AdmissionCheck` with every failure kept, in its order.
fn check(pod: &Pod, others: &[&Pod], node: &NodeInfo) -> Vec<Failure> {
    let mut out = Vec::new();
    let a = &node.allocatable;
    let used_pods = others.len() as i64;
    if used_pods.saturating_add(1) > a.pods {
        out.push(Failure::Short("pods", 1, used_pods, a.pods));
    }
    let want = requests::of(pod);
    let mut used = Request::default();
    for o in others {
        used.add(&requests::of(o));
    }
    if !want.is_zero() {
        for (name, req, used, cap) in [
            ("cpu", want.cpu_millis, used.cpu_millis, a.cpu_millis),
            ("memory", want.memory_bytes, used.memory_bytes, a.memory_bytes),
            ("ephemeral-storage", want.ephemeral_bytes, used.ephemeral_bytes, a.ephemeral_bytes),
        ] {
            if req > 0 && req > cap.saturating_sub(used) {
                out.push(Failure::Short(name, req, used, cap));
            }
        }
    }
    if !crate::pod::affinity::matches(&pod.spec.node_selector, pod.spec.affinity.as_ref(), &node.labels, &node.name) {
        out.push(Failure::Predicate("NodeAffinity", "node(s) didn't match Pod's node affinity/selector"));
    }
    if pod.spec.node_name.as_deref().is_some_and(|n| !n.is_empty() && n != node.name) {
        out.push(Failure::Predicate("NodeName", "node(s) didn't match the requested node name"));
    }
    let taken: Vec<HostPort> = others.iter().flat_map(|o| host_ports(o)).collect();
    if host_ports(pod).iter().any(|p| taken.iter().any(|t| t.conflicts(p))) {
        out.push(Failure::Predicate("NodePorts", "node(s) didn't have free ports for the requested pod ports"));
    }
    out
}

/// A host port a pod's container takes: IP (`0.0.0.0` for any), protocol, port.
#[derive(Debug, PartialEq, Eq)]
struct HostPort(String, String, i64);

impl HostPort {
    /// The scheduler's `HostPortInfo.CheckConflict`: same protocol and port, and either
    /// address is any or both are the same.
    fn conflicts(&self, other: &HostPort) -> bool {
        const ANY: &str = "0.0.0.0";
        self.1 == other.1 && self.2 == other.2 && (self.0 == ANY || other.0 == ANY || self.0 == other.0)
    }
}

/// The host ports of a pod's containers and sidecars, as the scheduler's `GetHostPorts`.
fn host_ports(pod: &Pod) -> Vec<HostPort> {
    let mut out = Vec::new();
    // Regular containers and sidecars (init containers that restart `Always`).
    let sidecars = pod.spec.init_containers.iter().filter(|c| c.restart_policy.as_deref() == Some("Always"));
    for p in pod.spec.containers.iter().chain(sidecars).flat_map(|c| &c.ports) {
        let Some(port) = p.host_port.filter(|h| *h > 0) else { continue };
        let ip = p.host_ip.as_deref().filter(|i| !i.is_empty()).unwrap_or("0.0.0.0");
        let proto = p.protocol.as_deref().filter(|i| !i.is_empty()).unwrap_or("TCP");
        out.push(HostPort(ip.into(), proto.into(), port));
    }
    out
}

#[cfg(test)]
#[path = "verdict_tests.rs"]
mod tests;
