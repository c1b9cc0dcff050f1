//! Start ordering between pods (atoll's): `atoll.io/depends-on: "db,cache"` names pods as
//! written in their manifests (`name`, or `namespace/name`; the pod's own namespace by
//! default), and the pod's sandbox is created only once each of them is Ready: at first
//! start, after a boot and when a dependency is replaced; never for a container restart. A
//! dependency that is not there, not ready, or in a cycle keeps the pod waiting, and says so.
//! Pure: the runtime's worker asks [`gate`], `atoll validate` asks [`problems`].

use super::types::Pod;
use crate::pod::{Invalid, InvalidKind as Kind};
use std::collections::{BTreeMap, BTreeSet};

pub const DEPENDS_ON: &str = "atoll.io/depends-on";

/// The field path errors name.
pub const FIELD: &str = "metadata.annotations[atoll.io/depends-on]";

/// The pod's name as its manifest wrote it (`<name>-<node>` at run time), with its namespace:
/// `namespace/name`.
pub fn written_key(pod: &Pod) -> String {
    let name = &pod.metadata.name;
    let node = pod.spec.node_name.as_deref().unwrap_or_default();
    let written = name.strip_suffix(&format!("-{node}")).filter(|_| !node.is_empty()).unwrap_or(name);
    format!("{}/{written}", pod.metadata.namespace)
}

/// The pods `pod` waits for, as `namespace/name` keys (written names); an error for a value
/// that does not parse.
pub fn depends_on(pod: &Pod) -> Result<Vec<String>, Invalid> {
    let Some(raw) = pod.metadata.annotations.get(DEPENDS_ON) else { return Ok(Vec::new()) };
    let mut out = Vec::new();
    for item in raw.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        let (ns, name) = item.split_once('/').unwrap_or((pod.metadata.namespace.as_str(), item));
        let bad = |what, value: &str, why| {
            Invalid::from(Kind::DependsOn {
                item: item.to_string(),
                why: Invalid::from(Kind::Part { what, value: value.to_string(), why }),
            })
        };
        super::validate::names::dns1123_label(ns).map_err(|e| bad("namespace", ns, e))?;
        super::validate::names::dns1123_subdomain(name).map_err(|e| bad("name", name, e))?;
        let key = format!("{ns}/{name}");
        if key == written_key(pod) {
            return Err(Invalid::from(Kind::DependsOn { item: item.to_string(), why: Kind::WaitsForItself.into() }));
        }
        if !out.contains(&key) {
            out.push(key);
        }
    }
    Ok(out)
}

/// What a pod about to create its sandbox must do.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Gate {
    Go,
    /// Waiting; the message says for what.
    Wait(String),
}

/// Another desired pod, as the gate sees it.
pub struct Peer {
    /// `namespace/name` as written.
    pub key: String,
    pub ready: bool,
    pub depends_on: Vec<String>,
}

/// Whether the pod `me` (written key) with dependencies `deps` may start, given the node's
/// other desired pods.
pub fn gate(me: &str, deps: &[String], peers: &[Peer]) -> Gate {
    if deps.is_empty() {
        return Gate::Go;
    }
    let graph: BTreeMap<&str, &[String]> =
        peers.iter().map(|p| (p.key.as_str(), p.depends_on.as_slice())).chain([(me, deps)]).collect();
    if let Some(cycle) = cycle_through(me, &graph) {
        return Gate::Wait(format!("the pods' dependencies form a cycle: {}", cycle.join(" -> ")));
    }
    let mut waiting = Vec::new();
    for d in deps {
        match peers.iter().find(|p| p.key == *d) {
            None => waiting.push(format!("{d} (no such pod on this node)")),
            Some(p) if !p.ready => waiting.push(format!("{d} to be Ready")),
            Some(_) => {}
        }
    }
    if waiting.is_empty() {
        Gate::Go
    } else {
        Gate::Wait(format!("waiting for pod {} ({DEPENDS_ON})", waiting.join(", pod ")))
    }
}

/// A cycle of dependencies through `start`, as the keys along it (ending with `start` again).
fn cycle_through(start: &str, graph: &BTreeMap<&str, &[String]>) -> Option<Vec<String>> {
    fn walk<'a>(
        at: &'a str,
        start: &str,
        graph: &BTreeMap<&'a str, &'a [String]>,
        path: &mut Vec<&'a str>,
        seen: &mut BTreeSet<&'a str>,
    ) -> bool {
        for next in graph.get(at).copied().unwrap_or_default() {
            if next == start {
                path.push(next);
                return true;
            }
            if let Some((key, _)) = graph.get_key_value(next.as_str()) {
                if seen.insert(key) {
                    path.push(key);
                    if walk(key, start, graph, path, seen) {
                        return true;
                    }
                    path.pop();
                }
            }
        }
        false
    }
    let (key, _) = graph.get_key_value(start)?;
    let mut path = vec![*key];
    let mut seen = BTreeSet::new();
    walk(key, start, graph, &mut path, &mut seen).then(|| path.into_iter().map(String::from).collect())
}

/// Across a set of manifests (`atoll validate`): for each pod key, what is wrong with its
/// dependencies (names no manifest defines, cycles).
pub fn problems(pods: &[(String, Vec<String>)]) -> BTreeMap<String, Vec<String>> {
    let graph: BTreeMap<&str, &[String]> = pods.iter().map(|(k, d)| (k.as_str(), d.as_slice())).collect();
    let mut out: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for (key, deps) in pods {
        for d in deps.iter().filter(|d| !graph.contains_key(d.as_str())) {
            out.entry(key.clone()).or_default().push(format!("pod {d} is not defined in the manifests given"));
        }
        if let Some(cycle) = cycle_through(key, &graph) {
            out.entry(key.clone()).or_default().push(format!("the dependencies form a cycle: {}", cycle.join(" -> ")));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(name: &str, deps: Option<&str>) -> Pod {
        let mut p = Pod::default();
        p.metadata.name = format!("{name}-edge");
        p.metadata.namespace = "default".into();
        p.spec.node_name = Some("edge".into());
        if let Some(d) = deps {
            p.metadata.annotations.insert(DEPENDS_ON.into(), d.into());
        }
        p
    }

    fn peer(key: &str, ready: bool, deps: &[&str]) -> Peer {
        Peer { key: key.into(), ready, depends_on: deps.iter().map(|d| d.to_string()).collect() }
    }

    #[test]
    fn the_annotation_names_pods_as_written() {
        assert_eq!(written_key(&pod("web", None)), "default/web");
        assert_eq!(
            depends_on(&pod("web", Some(" db, kube-system/cache ,db,"))).unwrap(),
            ["default/db", "kube-system/cache"]
        );
        assert!(depends_on(&pod("web", None)).unwrap().is_empty());
        assert!(depends_on(&pod("web", Some("Bad_Name"))).unwrap_err().to_string().contains("\"Bad_Name\""));
        assert!(depends_on(&pod("web", Some("web"))).unwrap_err().to_string().contains("itself"));
    }

    #[test]
    fn a_pod_starts_when_every_dependency_is_ready() {
        let deps = vec!["default/db".to_string(), "default/cache".to_string()];
        let peers = [peer("default/db", true, &[]), peer("default/cache", false, &[])];
        assert_eq!(
            gate("default/web", &deps, &peers),
            Gate::Wait("waiting for pod default/cache to be Ready (atoll.io/depends-on)".into())
        );
        let peers = [peer("default/db", true, &[])];
        let Gate::Wait(m) = gate("default/web", &deps, &peers) else { panic!() };
        assert!(m.contains("default/cache (no such pod on this node)"), "{m}");
        let peers = [peer("default/db", true, &[]), peer("default/cache", true, &["default/db"])];
        assert_eq!(gate("default/web", &deps, &peers), Gate::Go);
        assert_eq!(gate("default/web", &[], &[]), Gate::Go);
    }

    #[test]
    fn cycles_are_reported_not_waited_out_silently() {
        let peers = [peer("default/a", false, &["default/b"]), peer("default/b", false, &["default/c"])];
        let Gate::Wait(m) = gate("default/c", &["default/a".to_string()], &peers) else { panic!() };
        assert!(m.contains("cycle: default/c -> default/a -> default/b -> default/c"), "{m}");
        let set = vec![
            ("default/a".to_string(), vec!["default/b".to_string()]),
            ("default/b".to_string(), vec!["default/a".to_string(), "default/x".to_string()]),
            ("default/c".to_string(), vec!["default/a".to_string()]),
        ];
        let p = problems(&set);
        assert!(p["default/a"][0].contains("cycle: default/a -> default/b -> default/a"), "{p:?}");
        assert!(p["default/b"].iter().any(|m| m.contains("pod default/x is not defined")), "{p:?}");
        assert!(!p.contains_key("default/c"), "c only waits for a pod in a cycle: {p:?}");
    }
}
