//! Where a pod may run: `nodeSelector`, `affinity` and `os`, their types (validated in
//! `validate/affinity.rs`) and whether they match a node,
//! as k8s.io/component-helpers' `nodeaffinity.GetRequiredNodeAffinity(pod).Match(node)` decides
//! it for kubelet's admission. Only the required node affinity matters on one node; the
//! preferred terms, pod affinity and anti-affinity are the scheduler's (decoded, not used).

use serde::Serialize;
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
}
