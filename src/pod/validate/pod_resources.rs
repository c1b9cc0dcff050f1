//! Validation of pod-level resources (`spec.resources`, the API server's validatePodResources):
//! only cpu, memory and hugepages at pod level, no claims, nothing negative, each request
//! within its limit, each pod-level request at least what the containers request together
//! (kubelet's aggregate, sidecars and init containers counted), and no regular container's
//! limit above the pod's.

use super::validator::Validator;
use crate::pod::defaults::container_requests;
use crate::pod::quantity::Quantity;
use crate::pod::types::PodSpec;

impl Validator {
    pub(super) fn pod_resources(&mut self, s: &PodSpec) {
        let Some(r) = &s.resources else { return };
        for (which, map) in [("limits", &r.limits), ("requests", &r.requests)] {
            for (name, q) in map {
                let rp = format!("spec.resources.{which}.{name}");
                if !matches!(name.as_str(), "cpu" | "memory") && !name.starts_with("hugepages-") {
                    self.err(
                        &rp,
                        format!("resource {name:?} is not supported at pod level: must be cpu, memory or hugepages-*"),
                    );
                }
                if q.is_negative() {
                    self.err(&rp, "must not be negative");
                }
            }
        }
        for (name, req) in &r.requests {
            if let Some(lim) = r.limits.get(name).filter(|l| req.milli_value() > l.milli_value()) {
                self.err(
                    format!("spec.resources.requests.{name}"),
                    format!("{req} must not be more than the limit {lim}"),
                );
            }
        }
        for (name, req) in &r.requests {
            if let Some(sum) = container_requests(s, name, Quantity::milli_value).filter(|sum| *sum > req.milli_value())
            {
                self.err(
                    format!("spec.resources.requests.{name}"),
                    format!("{req} must be at least the containers' aggregate request of {}", Quantity::new(sum, -3)),
                );
            }
        }
        for (i, c) in s.containers.iter().enumerate() {
            for (name, lim) in c.resources.iter().flat_map(|cr| &cr.limits) {
                if let Some(pod_lim) = r.limits.get(name).filter(|p| lim.milli_value() > p.milli_value()) {
                    self.err(
                        format!("spec.containers[{i}].resources.limits.{name}"),
                        format!("{lim} must not be more than the pod's limit {pod_lim}"),
                    );
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::pod::types::Pod;

    fn problems(resources: &str, containers: &str) -> Vec<String> {
        let json = format!(
            r#"{{"metadata":{{"name":"p","namespace":"default","uid":"u1"}},"spec":{{"resources":{resources},"containers":{containers}}}}}"#
        );
        let mut pod: Pod = serde_json::from_str(&json).unwrap();
        crate::pod::defaults::apply(&mut pod);
        super::super::validate(&pod).into_iter().map(|f| f.to_string()).collect()
    }

    const ONE: &str = r#"[{"name":"c","image":"x:1"}]"#;

    #[test]
    fn pod_level_cpu_and_memory_within_their_limits_are_accepted_and_requests_defaulted() {
        assert_eq!(
            problems(r#"{"limits":{"cpu":"1","memory":"128Mi"},"requests":{"cpu":"500m"}}"#, ONE),
            Vec::<String>::new()
        );
        let two = r#"[{"name":"a","image":"x","resources":{"requests":{"cpu":"100m"},"limits":{"memory":"64Mi"}}},
            {"name":"b","image":"x","resources":{"requests":{"cpu":"150m"}}}]"#;
        assert_eq!(problems(r#"{"limits":{"cpu":"1","memory":"128Mi"}}"#, two), Vec::<String>::new());
        // The defaults: the containers' aggregate request, else the limit.
        let json =
            format!(r#"{{"spec":{{"resources":{{"limits":{{"cpu":"1","memory":"128Mi"}}}},"containers":{two}}}}}"#);
        let mut pod: Pod = serde_json::from_str(&json).unwrap();
        crate::pod::defaults::apply(&mut pod);
        let r = pod.spec.resources.unwrap();
        assert_eq!(
            (r.requests["cpu"].to_string(), r.requests["memory"].to_string()),
            ("250m".into(), "67108864".into())
        );
    }

    #[test]
    fn what_the_api_server_refuses_at_pod_level_is_named() {
        for (resources, containers, want) in [
            (r#"{"limits":{"ephemeral-storage":"1Gi"}}"#, ONE, "spec.resources.limits.ephemeral-storage"),
            (r#"{"limits":{"memory":"-1"}}"#, ONE, "must not be negative"),
            (
                r#"{"limits":{"cpu":"1"},"requests":{"cpu":"2"}}"#,
                ONE,
                "spec.resources.requests.cpu: 2 must not be more than the limit 1",
            ),
            (
                r#"{"requests":{"memory":"64Mi"}}"#,
                r#"[{"name":"a","image":"x","resources":{"requests":{"memory":"100Mi"}}}]"#,
                "aggregate request of 104857600",
            ),
            (
                r#"{"limits":{"memory":"64Mi"}}"#,
                r#"[{"name":"a","image":"x","resources":{"limits":{"memory":"100Mi"}}}]"#,
                "spec.containers[0].resources.limits.memory: 100Mi must not be more than the pod's limit 64Mi",
            ),
        ] {
            let got = problems(resources, containers);
            assert!(got.iter().any(|p| p.contains(want)), "{resources}: {got:?}");
        }
    }
}
