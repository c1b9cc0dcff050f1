//! Where a pod may run: `nodeSelector`, `affinity` and `os`, their types, their validation as
//! the API server's (`validateAffinity`, `ValidateNodeSelector`) and whether they match a node,
//! as k8s.io/component-helpers' `nodeaffinity.GetRequiredNodeAffinity(pod).Match(node)` decides
//! it for kubelet's admission. Only the required node affinity matters on one node; the
//! preferred terms, pod affinity and anti-affinity are the scheduler's (decoded, not used).

use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::BTreeMap;

api_struct! {
    pub struct Affinity {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub node_affinity: Option<NodeAffinity>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub pod_affinity: Option<Value>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub pod_anti_affinity: Option<Value>,
    }
}

api_struct! {
    pub struct NodeAffinity {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub required_during_scheduling_ignored_during_execution: Option<NodeSelector>,
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        pub preferred_during_scheduling_ignored_during_execution: Vec<PreferredSchedulingTerm>,
    }
}

api_struct! {
    pub struct NodeSelector {
        #[serde(default)]
        pub node_selector_terms: Vec<NodeSelectorTerm>,
    }
}

api_struct! {
    pub struct PreferredSchedulingTerm {
        #[serde(default)]
        pub weight: i32,
        #[serde(default)]
        pub preference: NodeSelectorTerm,
    }
}

api_struct! {
    pub struct NodeSelectorTerm {
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        pub match_expressions: Vec<Requirement>,
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        pub match_fields: Vec<Requirement>,
    }
}

api_struct! {
    /// A NodeSelectorRequirement.
    pub struct Requirement {
        #[serde(default)]
        pub key: String,
        #[serde(default)]
        pub operator: String,
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        pub values: Vec<String>,
    }
}

api_struct! {
    /// `spec.os`.
    pub struct PodOs {
        #[serde(default)]
        pub name: String,
    }
}

/// Whether a node with `labels` and `name` satisfies `selector` (`spec.nodeSelector`, every
/// label equal) and `affinity`'s required node affinity (any term; a term: all of its
/// expressions and fields; an empty term or one that cannot be read matches nothing).
pub fn matches(
    selector: &BTreeMap<String, String>,
    affinity: Option<&Affinity>,
    labels: &BTreeMap<String, String>,
    name: &str,
) -> bool {
    if !selector.iter().all(|(k, v)| labels.get(k) == Some(v)) {
        return false;
    }
    let required = affinity
        .and_then(|a| a.node_affinity.as_ref())
        .and_then(|n| n.required_during_scheduling_ignored_during_execution.as_ref());
    let Some(required) = required else { return true };
    required.node_selector_terms.iter().any(|t| term_matches(t, labels, name))
}

fn term_matches(term: &NodeSelectorTerm, labels: &BTreeMap<String, String>, name: &str) -> bool {
    if term.match_expressions.is_empty() && term.match_fields.is_empty() {
        return false;
    }
    let fields = BTreeMap::from([("metadata.name".to_string(), name.to_string())]);
    term.match_expressions.iter().all(|r| requirement_matches(r, labels))
        && term.match_fields.iter().all(|r| r.key == "metadata.name" && requirement_matches(r, &fields))
}

fn requirement_matches(r: &Requirement, labels: &BTreeMap<String, String>) -> bool {
    let value = labels.get(&r.key);
    let number = |s: &str| s.parse::<i64>().ok();
    match (r.operator.as_str(), value) {
        ("In", Some(v)) => r.values.contains(v),
        ("NotIn", Some(v)) => !r.values.contains(v),
        ("NotIn", None) | ("DoesNotExist", None) | ("Exists", Some(_)) => true,
        ("Gt" | "Lt", Some(v)) => match (number(v), r.values.first().and_then(|s| number(s)), r.values.len()) {
            (Some(have), Some(bound), 1) => {
                (r.operator == "Gt" && have > bound) || (r.operator == "Lt" && have < bound)
            }
            _ => false,
        },
        _ => false,
    }
}

/// The problems of `nodeSelector`, `affinity` and `os` as the API server names them, each as
/// (path under `spec`, message).
pub fn problems(
    selector: &BTreeMap<String, String>,
    affinity: Option<&Affinity>,
    os: Option<&PodOs>,
) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for (k, v) in selector {
        let check = super::validate::qualified_name(k).and_then(|()| super::validate::label_value(v));
        if let Err(e) = check {
            out.push((format!("nodeSelector.{k}"), e));
        }
    }
    if let Some(os) = os {
        if os.name != "linux" && os.name != "windows" {
            out.push(("os.name".into(), format!("{:?} must be linux or windows", os.name)));
        }
    }
    let Some(node) = affinity.and_then(|a| a.node_affinity.as_ref()) else { return out };
    let at = "affinity.nodeAffinity";
    if let Some(req) = &node.required_during_scheduling_ignored_during_execution {
        let path = format!("{at}.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms");
        if req.node_selector_terms.is_empty() {
            out.push((path.clone(), "must have at least one node selector term".into()));
        }
        for (i, t) in req.node_selector_terms.iter().enumerate() {
            term_problems(t, &format!("{path}[{i}]"), &mut out);
        }
    }
    for (i, p) in node.preferred_during_scheduling_ignored_during_execution.iter().enumerate() {
        let path = format!("{at}.preferredDuringSchedulingIgnoredDuringExecution[{i}]");
        if !(1..=100).contains(&p.weight) {
            out.push((format!("{path}.weight"), "must be in the range 1-100".into()));
        }
        term_problems(&p.preference, &format!("{path}.preference"), &mut out);
    }
    out
}

fn term_problems(t: &NodeSelectorTerm, path: &str, out: &mut Vec<(String, String)>) {
    for (i, r) in t.match_expressions.iter().enumerate() {
        let at = format!("{path}.matchExpressions[{i}]");
        if let Err(e) = super::validate::qualified_name(&r.key) {
            out.push((format!("{at}.key"), e));
        }
        let n = r.values.len();
        let why = match r.operator.as_str() {
            "In" | "NotIn" if n == 0 => "must be specified when `operator` is 'In' or 'NotIn'",
            "Exists" | "DoesNotExist" if n > 0 => "may not be specified when `operator` is 'Exists' or 'DoesNotExist'",
            "Gt" | "Lt" if n != 1 => "must be specified single value when `operator` is 'Lt' or 'Gt'",
            "Gt" | "Lt" if r.values.iter().any(|v| v.parse::<i64>().is_err()) => "must be an integer",
            "In" | "NotIn" | "Exists" | "DoesNotExist" | "Gt" | "Lt" => {
                for (j, v) in r.values.iter().enumerate() {
                    if let Err(e) = super::validate::label_value(v) {
                        out.push((format!("{at}.values[{j}]"), e));
                    }
                }
                continue;
            }
            other => {
                out.push((format!("{at}.operator"), format!("{other:?}: not a valid selector operator")));
                continue;
            }
        };
        out.push((format!("{at}.values"), why.into()));
    }
    for (i, r) in t.match_fields.iter().enumerate() {
        let at = format!("{path}.matchFields[{i}]");
        if r.key != "metadata.name" {
            out.push((format!("{at}.key"), format!("{:?}: not a supported field selector (metadata.name is)", r.key)));
        }
        if !matches!(r.operator.as_str(), "In" | "NotIn") {
            out.push((format!("{at}.operator"), format!("{:?}: not a valid selector operator", r.operator)));
        } else if r.values.len() != 1 {
            out.push((format!("{at}.values"), "must have one element".into()));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels() -> BTreeMap<String, String> {
        BTreeMap::from([
            ("kubernetes.io/hostname".into(), "gw1".into()),
            ("kubernetes.io/arch".into(), "arm64".into()),
            ("site".into(), "north".into()),
            ("cores".into(), "4".into()),
        ])
    }

    fn affinity(json: &str) -> Affinity {
        serde_json::from_str(json).unwrap()
    }

    fn req(op: &str, key: &str, values: &[&str]) -> String {
        let values: Vec<String> = values.iter().map(|v| format!("{v:?}")).collect();
        format!(
            r#"{{"nodeAffinity":{{"requiredDuringSchedulingIgnoredDuringExecution":{{"nodeSelectorTerms":[{{"matchExpressions":[{{"key":"{key}","operator":"{op}","values":[{}]}}]}}]}}}}}}"#,
            values.join(",")
        )
    }

    #[test]
    fn every_operator_matches_as_kubernetes_does() {
        let l = labels();
        for (op, key, values, want) in [
            ("In", "site", &["north", "south"][..], true),
            ("In", "site", &["south"][..], false),
            ("In", "missing", &["x"][..], false),
            ("NotIn", "site", &["south"][..], true),
            ("NotIn", "site", &["north"][..], false),
            ("NotIn", "missing", &["x"][..], true),
            ("Exists", "site", &[][..], true),
            ("Exists", "missing", &[][..], false),
            ("DoesNotExist", "missing", &[][..], true),
            ("DoesNotExist", "site", &[][..], false),
            ("Gt", "cores", &["3"][..], true),
            ("Gt", "cores", &["4"][..], false),
            ("Lt", "cores", &["5"][..], true),
            ("Lt", "cores", &["x"][..], false),
            ("Gt", "site", &["1"][..], false),
            ("Gt", "missing", &["1"][..], false),
            ("Bogus", "site", &["north"][..], false),
        ] {
            let a = affinity(&req(op, key, values));
            assert_eq!(matches(&BTreeMap::new(), Some(&a), &l, "gw1"), want, "{op} {key} {values:?}");
        }
    }

    #[test]
    fn selector_terms_and_fields() {
        let l = labels();
        let sel = |k: &str, v: &str| BTreeMap::from([(k.to_string(), v.to_string())]);
        assert!(matches(&sel("site", "north"), None, &l, "gw1"));
        assert!(!matches(&sel("site", "south"), None, &l, "gw1"));
        assert!(!matches(&sel("gpu", ""), None, &l, "gw1"), "a missing label is not an empty one");
        // Terms are ORed; an empty term matches nothing; fields name the node.
        let any = affinity(
            r#"{"nodeAffinity":{"requiredDuringSchedulingIgnoredDuringExecution":{"nodeSelectorTerms":[
                {"matchExpressions":[{"key":"site","operator":"In","values":["south"]}]},
                {"matchFields":[{"key":"metadata.name","operator":"In","values":["gw1"]}]}]}}}"#,
        );
        assert!(matches(&BTreeMap::new(), Some(&any), &l, "gw1"));
        assert!(!matches(&BTreeMap::new(), Some(&any), &l, "gw2"));
        let empty = affinity(
            r#"{"nodeAffinity":{"requiredDuringSchedulingIgnoredDuringExecution":{"nodeSelectorTerms":[{}]}}}"#,
        );
        assert!(!matches(&BTreeMap::new(), Some(&empty), &l, "gw1"));
        let preferred_only = affinity(
            r#"{"nodeAffinity":{"preferredDuringSchedulingIgnoredDuringExecution":[{"weight":1,"preference":{"matchExpressions":[{"key":"site","operator":"In","values":["south"]}]}}]}}"#,
        );
        assert!(matches(&BTreeMap::new(), Some(&preferred_only), &l, "gw1"), "preference is the scheduler's");
        // Both the selector and the affinity must hold.
        let a = affinity(&req("Exists", "site", &[]));
        assert!(!matches(&sel("site", "south"), Some(&a), &l, "gw1"));
    }

    #[test]
    fn problems_are_named_by_path() {
        let bad = affinity(
            r#"{"nodeAffinity":{"requiredDuringSchedulingIgnoredDuringExecution":{"nodeSelectorTerms":[
                {"matchExpressions":[{"key":"a","operator":"In"},{"key":"b","operator":"Exists","values":["x"]},
                 {"key":"c","operator":"Gt","values":["x"]},{"key":"d","operator":"Near","values":["x"]}],
                 "matchFields":[{"key":"metadata.labels","operator":"In","values":["x"]}]}]},
              "preferredDuringSchedulingIgnoredDuringExecution":[{"weight":0,"preference":{}}]}}"#,
        );
        let p: Vec<String> = problems(&BTreeMap::new(), Some(&bad), Some(&PodOs { name: "plan9".into() }))
            .into_iter()
            .map(|(path, _)| path)
            .collect();
        let t = "affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[0]";
        for want in [
            "os.name".to_string(),
            format!("{t}.matchExpressions[0].values"),
            format!("{t}.matchExpressions[1].values"),
            format!("{t}.matchExpressions[2].values"),
            format!("{t}.matchExpressions[3].operator"),
            format!("{t}.matchFields[0].key"),
            "affinity.nodeAffinity.preferredDuringSchedulingIgnoredDuringExecution[0].weight".to_string(),
        ] {
            assert!(p.contains(&want), "{want} in {p:?}");
        }
        let none =
            affinity(r#"{"nodeAffinity":{"requiredDuringSchedulingIgnoredDuringExecution":{"nodeSelectorTerms":[]}}}"#);
        assert_eq!(problems(&BTreeMap::new(), Some(&none), None).len(), 1);
        assert!(problems(&BTreeMap::new(), Some(&affinity(&req("In", "site", &["north"]))), None).is_empty());
    }
}
