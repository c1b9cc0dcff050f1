//! Facts that follow from a pod's spec, used across the house: `$(VAR)` expansion, ports by
//! name, the QoS class, sidecar init containers, an image reference's default tag. Pure.

use super::types::{Container, IntOrString, Pod, ResourceRequirements};
use crate::pod::{Invalid, InvalidKind as Kind};

/// `$(VAR)` expansion with kubelet's rules: defined names are replaced, undefined ones kept
/// as written, `$$` is a literal `$`, anything else is copied unchanged.
pub fn expand(input: &str, lookup: &dyn Fn(&str) -> Option<String>) -> String {
    let mut out = String::with_capacity(input.len());
    let mut rest = input;
    while let Some(c) = rest.chars().next() {
        if let Some(after) = rest.strip_prefix("$$") {
            out.push('$');
            rest = after;
            continue;
        }
        if let Some((name, after)) = rest.strip_prefix("$(").and_then(|r| r.split_once(')')) {
            match lookup(name) {
                Some(v) => out.push_str(&v),
                None => {
                    out.push_str("$(");
                    out.push_str(name);
                    out.push(')');
                }
            }
            rest = after;
            continue;
        }
        out.push(c);
        let mut chars = rest.chars();
        chars.next();
        rest = chars.as_str();
    }
    out
}

/// QoS class: Guaranteed (every container has equal cpu and memory requests and limits),
/// BestEffort (no requests or limits at all), else Burstable. Pod-level resources, when set,
/// decide alone (the pod's own cpu and memory requests and limits).
pub fn qos_class(pod: &Pod) -> &'static str {
    let mut any = false;
    let mut guaranteed = true;
    let pod_level = pod
        .spec
        .resources
        .as_ref()
        .filter(|r| ["cpu", "memory"].iter().any(|n| r.limits.contains_key(*n) || r.requests.contains_key(*n)));
    let each: Vec<&ResourceRequirements> = match pod_level {
        Some(r) => vec![r],
        None => pod.all_containers().filter_map(|(_, c)| c.resources.as_ref()).collect(),
    };
    for r in each {
        if !r.limits.is_empty() || !r.requests.is_empty() {
            any = true;
        }
        for name in ["cpu", "memory"] {
            match (r.limits.get(name), r.requests.get(name)) {
                (Some(l), Some(q)) if l == q => {}
                _ => guaranteed = false,
            }
        }
    }
    if pod_level.is_none() && pod.all_containers().any(|(_, c)| c.resources.is_none()) {
        guaranteed = false;
    }
    match (any, guaranteed) {
        (false, _) => "BestEffort",
        (true, true) => "Guaranteed",
        _ => "Burstable",
    }
}

/// A port by number or by the name of one of the container's ports.
pub fn port_number(port: &IntOrString, c: &Container) -> Result<u16, Invalid> {
    match port {
        IntOrString::Int(n) => u16::try_from(*n).map_err(|_| Invalid::from(Kind::PortRange(*n))),
        IntOrString::Str(s) => {
            if let Ok(n) = s.parse::<u16>() {
                return Ok(n);
            }
            c.ports
                .iter()
                .find(|p| p.name.as_deref() == Some(s))
                .and_then(|p| u16::try_from(p.container_port).ok())
                .ok_or_else(|| Invalid::from(Kind::NoPortNamed(s.clone())))
        }
    }
}

/// `busybox` → `busybox:latest`; references with a tag or digest are kept.
pub fn with_default_tag(image: &str) -> String {
    match crate::pod::defaults::split_image(image) {
        (_, None, None) => format!("{image}:latest"),
        _ => image.to_string(),
    }
}

/// An image reference as containerd names it: the registry made explicit (`docker.io`, with
/// `library/` for a single-component name) and `:latest` when there is no tag or digest, so
/// `busybox`, `library/busybox:latest` and `docker.io/library/busybox:latest` are one image.
pub fn normalized_image(image: &str) -> String {
    let image = with_default_tag(image);
    let first = image.split('/').next().unwrap_or("");
    let has_registry = image.contains('/') && (first.contains(['.', ':']) || first == "localhost");
    if has_registry {
        match image.strip_prefix("docker.io/") {
            Some(rest) if !rest.contains('/') => format!("docker.io/library/{rest}"),
            _ => image,
        }
    } else if image.contains('/') {
        format!("docker.io/{image}")
    } else {
        format!("docker.io/library/{image}")
    }
}

/// An init container with `restartPolicy: Always` (a sidecar).
pub fn is_sidecar(c: &Container) -> bool {
    c.restart_policy.as_deref() == Some("Always")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn image_references_are_normalized_as_containerd_names_them() {
        for (given, want) in [
            ("busybox", "docker.io/library/busybox:latest"),
            ("busybox:1.36", "docker.io/library/busybox:1.36"),
            ("library/busybox:1.36", "docker.io/library/busybox:1.36"),
            ("acme/app@sha256:abc", "docker.io/acme/app@sha256:abc"),
            ("docker.io/library/busybox:1.36", "docker.io/library/busybox:1.36"),
            ("registry.k8s.io/pause:3.10", "registry.k8s.io/pause:3.10"),
            ("127.0.0.1:5000/app", "127.0.0.1:5000/app:latest"),
            ("localhost/app:1", "localhost/app:1"),
            ("docker.io/busybox", "docker.io/library/busybox:latest"),
        ] {
            assert_eq!(normalized_image(given), want, "{given}");
        }
    }

    #[test]
    fn ports_by_number_numeric_string_or_name() {
        let c: Container =
            serde_json::from_str(r#"{"name":"c","image":"x","ports":[{"name":"web","containerPort":8080}]}"#).unwrap();
        assert_eq!(port_number(&IntOrString::Int(80), &c), Ok(80));
        assert_eq!(port_number(&IntOrString::Str("81".into()), &c), Ok(81));
        assert_eq!(port_number(&IntOrString::Str("web".into()), &c), Ok(8080));
        assert!(port_number(&IntOrString::Str("nope".into()), &c).is_err());
        assert!(port_number(&IntOrString::Int(70000), &c).is_err());
    }

    #[test]
    fn expansion_follows_kubelets_rules() {
        let lookup = |n: &str| match n {
            "A" => Some("x".to_string()),
            "B" => Some("$(A)".to_string()),
            _ => None,
        };
        assert_eq!(expand("$(A)-$(B)", &lookup), "x-$(A)");
        assert_eq!(expand("$(MISSING)", &lookup), "$(MISSING)");
        assert_eq!(expand("$$(A) $$ $x $(", &lookup), "$(A) $ $x $(");
        assert_eq!(expand("héllo $(A)", &lookup), "héllo x");
    }

    #[test]
    fn images_without_tag_or_digest_get_latest() {
        assert_eq!(with_default_tag("busybox"), "busybox:latest");
        assert_eq!(with_default_tag("busybox:1.36"), "busybox:1.36");
        assert_eq!(with_default_tag("r:5000/a/b"), "r:5000/a/b:latest");
        assert_eq!(with_default_tag("a@sha256:0"), "a@sha256:0");
    }
}
