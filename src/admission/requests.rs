//! What a pod requests, as the scheduler's `computePodResourceRequest` adds it up for
//! admission: its containers' requests summed, sidecars (init containers that restart
//! `Always`) added to them, and each other init container (with the sidecars started before
//! it) counted when it alone asks for more; pod-level requests, where given, for cpu and
//! memory. Requests of extended resources (any name with a
//! domain outside `kubernetes.io`) are left out: the node has none, and kubelet drops them
//! from static pods before it checks.

use crate::pod::types::{Container, Pod};

/// Requested amounts: CPU in millicores, memory and ephemeral storage in bytes, other native
/// resources (hugepages) by name.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Request {
    pub cpu_millis: i64,
    pub memory_bytes: i64,
    pub ephemeral_bytes: i64,
    pub other: Vec<(String, i64)>,
}

impl Request {
    pub fn add(&mut self, r: &Request) {
        self.cpu_millis = self.cpu_millis.saturating_add(r.cpu_millis);
        self.memory_bytes = self.memory_bytes.saturating_add(r.memory_bytes);
        self.ephemeral_bytes = self.ephemeral_bytes.saturating_add(r.ephemeral_bytes);
        for (k, v) in &r.other {
            match self.other.iter_mut().find(|(n, _)| n == k) {
                Some((_, e)) => *e = e.saturating_add(*v),
                None => self.other.push((k.clone(), *v)),
            }
        }
    }

    fn max(&mut self, r: &Request) {
        self.cpu_millis = self.cpu_millis.max(r.cpu_millis);
        self.memory_bytes = self.memory_bytes.max(r.memory_bytes);
        self.ephemeral_bytes = self.ephemeral_bytes.max(r.ephemeral_bytes);
        for (k, v) in &r.other {
            match self.other.iter_mut().find(|(n, _)| n == k) {
                Some((_, e)) => *e = (*e).max(*v),
                None => self.other.push((k.clone(), *v)),
            }
        }
    }

    pub fn is_zero(&self) -> bool {
        self.cpu_millis == 0 && self.memory_bytes == 0 && self.ephemeral_bytes == 0 && self.other.is_empty()
    }
}

/// Whether `name` is an extended resource: a domain-qualified name outside `kubernetes.io`
/// (and not a quota's `requests.` name).
pub fn extended(name: &str) -> bool {
    match name.split_once('/') {
        Some((domain, _)) => {
            domain != "kubernetes.io" && !domain.ends_with(".kubernetes.io") && !name.starts_with("requests.")
        }
        None => false,
    }
}

fn container(c: &Container) -> Request {
    let mut r = Request::default();
    for (name, q) in c.resources.iter().flat_map(|r| &r.requests) {
        match name.as_str() {
            "cpu" => r.cpu_millis = q.milli_value(),
            "memory" => r.memory_bytes = q.value(),
            "ephemeral-storage" => r.ephemeral_bytes = q.value(),
            n if extended(n) || n.contains('/') => {}
            n => r.other.push((n.to_string(), q.value())),
        }
    }
    r
}

/// What `pod` requests in all.
pub fn of(pod: &Pod) -> Request {
    let mut total = Request::default();
    for c in &pod.spec.containers {
        total.add(&container(c));
    }
    let (mut sidecars, mut init) = (Request::default(), Request::default());
    for c in &pod.spec.init_containers {
        let mut r = container(c);
        if c.restart_policy.as_deref() == Some("Always") {
            total.add(&r);
            sidecars.add(&r);
            r = sidecars.clone();
        } else {
            r.add(&sidecars);
        }
        init.max(&r);
    }
    total.max(&init);
    // Pod-level requests (defaulted from the containers' or the pod's limits) win for cpu and
    // memory, as the scheduler's PodRequests with pod-level resources.
    if let Some(pod_level) = pod.spec.resources.as_ref().map(|r| &r.requests) {
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
    fn extended_resources_are_left_out_and_hugepages_are_not() {
        let p = pod(serde_json::json!({"containers": [{"name": "a", "image": "x", "resources": {"requests": {
            "example.com/dongle": "1", "hugepages-2Mi": "4Mi", "cpu": "250m"}}}]}));
        let r = of(&p);
        assert_eq!(r.cpu_millis, 250);
        assert_eq!(r.other, vec![("hugepages-2Mi".to_string(), 4 << 20)]);
        assert!(extended("example.com/dongle") && extended("nvidia.com/gpu"));
        assert!(!extended("cpu") && !extended("hugepages-1Gi") && !extended("kubernetes.io/x"));
        assert!(of(&pod(serde_json::json!({"containers": [{"name": "a", "image": "x"}]}))).is_zero());
    }
}
