//! kubelet's `fieldpath` and downward-API resource helpers, pure: what a `fieldRef` or a
//! `resourceFieldRef` (in env, or in a `downwardAPI` volume) resolves to. A whole label or
//! annotation map is `key="value"` lines sorted by key, each value quoted as Go's `%q`; a
//! resource is rounded up in units of its divisor, and a limit nobody set is the pod's
//! (pod-level resources) or else the node's allocatable.

use super::quantity::Quantity;
use super::types::{Container, Pod, ResourceFieldSelector};
use std::collections::BTreeMap;
use std::fmt::Write;

/// The node's allocatable CPU (millicores) and memory (bytes): the limit of a container that
/// sets none, in a pod without pod-level limits.
#[derive(Clone, Copy, Debug, Default)]
pub struct Allocatable {
    pub cpu_millis: i64,
    pub memory_bytes: i64,
}

/// The value of field `path` of `pod` (`None`: a path atoll does not know); the IPs are the
/// pod's and the node's, for env.
pub fn field(pod: &Pod, path: &str, pod_ip: &str, host_ip: &str) -> Option<String> {
    let m = &pod.metadata;
    let quoted = |prefix: &str| path.strip_prefix(prefix).and_then(|r| r.strip_suffix("']"));
    Some(match path {
        "metadata.name" => m.name.clone(),
        "metadata.namespace" => m.namespace.clone(),
        "metadata.uid" => m.uid.clone(),
        "metadata.labels" => format_map(&m.labels),
        "metadata.annotations" => format_map(&m.annotations),
        "spec.nodeName" => pod.spec.node_name.clone().unwrap_or_default(),
        "spec.serviceAccountName" => String::new(),
        "status.podIP" | "status.podIPs" => pod_ip.to_string(),
        "status.hostIP" | "status.hostIPs" => host_ip.to_string(),
        _ => {
            if let Some(k) = quoted("metadata.labels['") {
                return Some(m.labels.get(k).cloned().unwrap_or_default());
            }
            let k = quoted("metadata.annotations['")?;
            return Some(m.annotations.get(k).cloned().unwrap_or_default());
        }
    })
}

/// kubelet's `FormatMap`: `key="value"` lines in key order, no newline after the last.
pub fn format_map(m: &BTreeMap<String, String>) -> String {
    let mut out = String::new();
    for (k, v) in m {
        if !out.is_empty() {
            out.push('\n');
        }
        out.push_str(k);
        out.push('=');
        quote(v, &mut out);
    }
    out
}

/// `s` as Go's `%q` writes it: in double quotes, `"` and `\` escaped, control characters as
/// `\n`-style or `\xNN` escapes, and the C1 controls and U+FFFE/U+FFFF as `\uNNNN`.
fn quote(s: &str, out: &mut String) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\x07' => out.push_str("\\a"),
            '\x08' => out.push_str("\\b"),
            '\x0c' => out.push_str("\\f"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\x0b' => out.push_str("\\v"),
            c if c < ' ' || c == '\x7f' => {
                let _ = write!(out, "\\x{:02x}", u32::from(c));
            }
            c if ('\u{80}'..='\u{9f}').contains(&c) || c == '\u{ad}' || c == '\u{fffe}' || c == '\u{ffff}' => {
                let _ = write!(out, "\\u{:04x}", u32::from(c));
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

/// The value of a `resourceFieldRef`: of the container it names, else of `default` (the
/// container whose env asks), in units of its divisor rounded up. A limit the container does
/// not set is the pod's (pod-level resources), else the node's allocatable; a request it does
/// not set is 0.
pub fn resource(
    pod: &Pod,
    default: Option<&Container>,
    r: &ResourceFieldSelector,
    node: Allocatable,
) -> Result<String, String> {
    let target = match r.container_name.as_deref().filter(|n| !n.is_empty()) {
        Some(n) => pod.all_containers().map(|(_, c)| c).find(|c| c.name == n),
        None => default,
    };
    let target =
        target.ok_or_else(|| format!("container {:?} not found", r.container_name.as_deref().unwrap_or("")))?;
    let (kind, name) = r.resource.split_once('.').ok_or_else(|| format!("bad resource {:?}", r.resource))?;
    let empty = BTreeMap::new();
    let res = target.resources.as_ref();
    let map = res.map_or(&empty, |res| if kind == "limits" { &res.limits } else { &res.requests });
    let divisor = r.divisor.unwrap_or(Quantity::new(1, 0));
    let node_default = match name {
        "cpu" => Some(Quantity::new(node.cpu_millis, -3)),
        "memory" => Some(Quantity::new(node.memory_bytes, 0)),
        _ => None,
    };
    let value = match map.get(name) {
        Some(q) => Some(*q),
        None if kind == "limits" => pod_limit(pod, name).or(node_default),
        None => Some(Quantity::new(0, 0)),
    };
    value
        .unwrap_or(Quantity::new(0, 0))
        .divided_ceil(&divisor)
        .map(|v| v.to_string())
        .ok_or_else(|| "divisor must not be zero".into())
}

/// The pod-level limit of `name` (cpu or memory), when set and not zero.
fn pod_limit(pod: &Pod, name: &str) -> Option<Quantity> {
    pod.spec.resources.as_ref()?.limits.get(name).filter(|q| !q.is_zero()).copied()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(json: &str) -> Pod {
        serde_json::from_str(json).unwrap()
    }

    #[test]
    fn maps_are_sorted_quoted_lines() {
        let m: BTreeMap<String, String> =
            [("b", "two words"), ("a", "say \"hi\"\\now\n\ttab"), ("c", "\u{1}\u{7f}\u{85}é✓")]
                .into_iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect();
        assert_eq!(format_map(&m), "a=\"say \\\"hi\\\"\\\\now\\n\\ttab\"\nb=\"two words\"\nc=\"\\x01\\x7f\\u0085é✓\"");
        assert_eq!(format_map(&BTreeMap::new()), "");
    }

    #[test]
    fn fields_resolve_by_path() {
        let p = pod(r#"{"metadata":{"name":"w","namespace":"ns","uid":"u1","labels":{"app":"x","tier":"db"},
            "annotations":{"note":"a\"b"}},"spec":{"containers":[{"name":"c","image":"i"}]}}"#);
        let f = |path| field(&p, path, "10.0.0.2", "192.168.1.1");
        assert_eq!(f("metadata.name").as_deref(), Some("w"));
        assert_eq!(f("metadata.namespace").as_deref(), Some("ns"));
        assert_eq!(f("metadata.uid").as_deref(), Some("u1"));
        assert_eq!(f("metadata.labels").as_deref(), Some("app=\"x\"\ntier=\"db\""));
        assert_eq!(f("metadata.annotations").as_deref(), Some("note=\"a\\\"b\""));
        assert_eq!(f("metadata.labels['tier']").as_deref(), Some("db"));
        assert_eq!(f("metadata.annotations['none']").as_deref(), Some(""));
        assert_eq!(f("status.podIP").as_deref(), Some("10.0.0.2"));
        assert_eq!(f("spec.containers"), None);
        assert_eq!(f("metadata.labels['x'"), None);
    }

    #[test]
    fn resources_round_up_and_default_to_the_node() {
        let p = pod(r#"{"spec":{"containers":[
            {"name":"a","image":"i","resources":{"limits":{"memory":"64Mi","cpu":"250m"},"requests":{"cpu":"100m"}}},
            {"name":"b","image":"i"}]}}"#);
        let node = Allocatable { cpu_millis: 4000, memory_bytes: 8 << 30 };
        let sel = |c: &str, r: &str, d: Option<&str>| ResourceFieldSelector {
            container_name: Some(c.to_string()),
            resource: r.to_string(),
            divisor: d.map(|d| Quantity::parse(d).unwrap()),
        };
        let v = |s: ResourceFieldSelector| resource(&p, None, &s, node);
        for (c, r, d, want) in [
            ("a", "limits.memory", Some("1Mi"), "64"),
            ("a", "limits.memory", None, "67108864"),
            ("a", "limits.cpu", None, "1"),
            ("a", "limits.cpu", Some("1m"), "250"),
            ("a", "requests.cpu", Some("1m"), "100"),
            ("a", "requests.memory", None, "0"),
            ("b", "limits.memory", Some("1Gi"), "8"),
            ("b", "limits.cpu", Some("1m"), "4000"),
            ("b", "limits.ephemeral-storage", None, "0"),
        ] {
            assert_eq!(v(sel(c, r, d)).as_deref(), Ok(want), "{c} {r} {d:?}");
        }
        assert!(v(sel("nope", "limits.cpu", None)).is_err());
        // Pod-level limits stand in for the node's.
        let mut p2 = p.clone();
        p2.spec.resources = serde_json::from_str(r#"{"limits":{"memory":"256Mi","cpu":"0"}}"#).unwrap();
        assert_eq!(resource(&p2, None, &sel("b", "limits.memory", Some("1Mi")), node).as_deref(), Ok("256"));
        assert_eq!(resource(&p2, None, &sel("a", "limits.memory", Some("1Mi")), node).as_deref(), Ok("64"));
        assert_eq!(resource(&p2, None, &sel("b", "limits.cpu", Some("1m")), node).as_deref(), Ok("4000"));
        assert!(v(sel("a", "limits.cpu", Some("0"))).is_err());
        // Without a container name: the asking container's.
        let own = ResourceFieldSelector { resource: "limits.cpu".into(), divisor: None, container_name: None };
        assert_eq!(resource(&p, Some(&p.spec.containers[1]), &own, node).as_deref(), Ok("4"));
    }
}
