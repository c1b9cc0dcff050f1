//! What a pod requests, as the scheduler's `computePodResourceRequest` adds it up for
//! admission (the containers' part is `pod::defaults::container_requests`): its containers'
//! requests summed, sidecars (init containers that restart
//! `Always`) added to them, and each other init container (with the sidecars started before
//! it) counted when it alone asks for more, plus the pod's `overhead`; pod-level requests,
//! where given, for cpu and memory. Requests of extended resources (any name with a
//! domain outside `kubernetes.io`) are left out: the node has none, and kubelet drops them
//! from static pods before it checks.

use crate::pod::defaults::container_requests;
use crate::pod::quantity::Quantity;
use crate::pod::types::Pod;

/// Requested amounts: CPU in millicores, memory and ephemeral storage in bytes. Other
/// resources (hugepages, a device plugin's) are not counted: the node announces none, and
/// kubelet (1.36, with DRAExtendedResource) leaves the check of a resource of which the node
/// has none to DRA, which a static pod does not use.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Request {
    pub cpu_millis: i64,
    pub memory_bytes: i64,
    pub ephemeral_bytes: i64,
}

impl Request {
    pub fn add(&mut self, r: &Request) {
        self.cpu_millis = self.cpu_millis.saturating_add(r.cpu_millis);
        self.memory_bytes = self.memory_bytes.saturating_add(r.memory_bytes);
        self.ephemeral_bytes = self.ephemeral_bytes.saturating_add(r.ephemeral_bytes);
    }

    pub fn is_zero(&self) -> bool {
        self.cpu_millis == 0 && self.memory_bytes == 0 && self.ephemeral_bytes == 0
    }
}

fn list(resources: &std::collections::BTreeMap<String, Quantity>) -> Request {
    let q = |name: &str, f: fn(&Quantity) -> i64| resources.get(name).map_or(0, f);
    Request {
        cpu_millis: q("cpu", Quantity::milli_value),
        memory_bytes: q("memory", Quantity::value),
        ephemeral_bytes: q("ephemeral-storage", Quantity::value),
    }
}

/// What `pod` requests in all.
pub fn of(pod: &Pod) -> Request {
    let s = &pod.spec;
    let sum = |name: &str, unit: fn(&Quantity) -> i64| container_requests(s, name, unit).unwrap_or(0);
    let mut total = Request {
        cpu_millis: sum("cpu", Quantity::milli_value),
        memory_bytes: sum("memory", Quantity::value),
        ephemeral_bytes: sum("ephemeral-storage", Quantity::value),
    };
    total.add(&list(&s.overhead));
    // Pod-level requests (defaulted from the containers' or the pod's limits) win for cpu and
    // memory, as the scheduler's PodRequests with pod-level resources.
    if let Some(pod_level) = s.resources.as_ref().map(|r| &r.requests) {
        if let Some(q) = pod_level.get("cpu") {
            total.cpu_millis = q.milli_value();
        }
        if let Some(q) = pod_level.get("memory") {
            total.memory_bytes = q.value();
        }
    }
    total
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(spec: serde_json::Value) -> Pod {
        serde_json::from_value(serde_json::json!({"metadata": {"name": "p"}, "spec": spec})).unwrap()
    }

    fn c(name: &str, cpu: &str, mem: &str) -> serde_json::Value {
        serde_json::json!({"name": name, "image": "x", "resources": {"requests": {"cpu": cpu, "memory": mem}}})
    }

    #[test]
    fn containers_add_up_and_init_containers_count_at_their_peak() {
        let p = pod(serde_json::json!({
            "containers": [c("a", "100m", "64Mi"), c("b", "200m", "64Mi")],
            "initContainers": [c("i", "1", "16Mi")],
        }));
        let r = of(&p);
        assert_eq!((r.cpu_millis, r.memory_bytes), (1000, 128 << 20));
    }

    #[test]
    fn sidecars_run_beside_everything_after_them() {
        let mut side = c("s", "100m", "32Mi");
        side["restartPolicy"] = "Always".into();
        let p = pod(serde_json::json!({
            "containers": [c("a", "100m", "64Mi")],
            "initContainers": [side, c("i", "500m", "8Mi")],
        }));
        let r = of(&p);
        // Regular: 100m + sidecar 100m = 200m; the init container with the sidecar: 600m.
        assert_eq!((r.cpu_millis, r.memory_bytes), (600, 96 << 20));
    }

    #[test]
    fn pod_level_requests_win_for_cpu_and_memory() {
        let p = pod(serde_json::json!({
            "resources": {"requests": {"cpu": "2", "memory": "1Gi"}},
            "containers": [c("a", "100m", "64Mi")],
        }));
        let r = of(&p);
        assert_eq!((r.cpu_millis, r.memory_bytes), (2000, 1 << 30));
    }

    #[test]
    fn only_cpu_memory_and_ephemeral_storage_count_and_the_overhead_adds() {
        let p = pod(serde_json::json!({"containers": [{"name": "a", "image": "x", "resources": {"requests": {
            "example.com/dongle": "1", "hugepages-2Mi": "4Mi", "cpu": "250m"}}}]}));
        let r = of(&p);
        assert_eq!(r, Request { cpu_millis: 250, ..Default::default() });
        assert!(of(&pod(serde_json::json!({"containers": [{"name": "a", "image": "x"}]}))).is_zero());
        let p = pod(serde_json::json!({"overhead": {"cpu": "500m"}, "containers": [c("a", "600m", "0")]}));
        assert_eq!(of(&p).cpu_millis, 1100);
    }
}
