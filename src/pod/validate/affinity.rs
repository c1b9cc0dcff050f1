//! `nodeSelector`, `affinity` and `os` as the API server validates them
//! (`ValidateNodeSelector`, `validateAffinity`, `validateOS`).

use crate::pod::affinity::{Affinity, NodeSelectorTerm, PodOs};
use std::collections::BTreeMap;

/// The problems of `nodeSelector`, `affinity` and `os` as the API server names them, each as
/// (path under `spec`, message).
pub(super) fn problems(
    selector: &BTreeMap<String, String>,
    affinity: Option<&Affinity>,
    os: Option<&PodOs>,
) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for (k, v) in selector {
        let check = super::names::qualified_name(k).and_then(|()| super::names::label_value(v));
        if let Err(e) = check {
            out.push((format!("nodeSelector.{k}"), e.into()));
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
            term_problems(t, &format!("{path}[{i}]"), true, &mut out);
        }
    }
    for (i, p) in node.preferred_during_scheduling_ignored_during_execution.iter().enumerate() {
        let path = format!("{at}.preferredDuringSchedulingIgnoredDuringExecution[{i}]");
        if !(1..=100).contains(&p.weight) {
            out.push((format!("{path}.weight"), "must be in the range 1-100".into()));
        }
        term_problems(&p.preference, &format!("{path}.preference"), false, &mut out);
    }
    out
}

/// A term's problems; the values of a required term are label values (a preferred term's are
/// not checked, as upstream), the fields' values node names.
fn term_problems(t: &NodeSelectorTerm, path: &str, required: bool, out: &mut Vec<(String, String)>) {
    for (i, r) in t.match_expressions.iter().enumerate() {
        let at = format!("{path}.matchExpressions[{i}]");
        if let Err(e) = super::names::qualified_name(&r.key) {
            out.push((format!("{at}.key"), e.into()));
        }
        let n = r.values.len();
        let why = match r.operator.as_str() {
            "In" | "NotIn" if n == 0 => Some("must be specified when `operator` is 'In' or 'NotIn'"),
            "Exists" | "DoesNotExist" if n > 0 => {
                Some("may not be specified when `operator` is 'Exists' or 'DoesNotExist'")
            }
            "Gt" | "Lt" if n != 1 => Some("must be specified single value when `operator` is 'Lt' or 'Gt'"),
            "In" | "NotIn" | "Exists" | "DoesNotExist" | "Gt" | "Lt" => None,
            other => {
                out.push((format!("{at}.operator"), format!("{other:?}: not a valid selector operator")));
                None
            }
        };
        if let Some(why) = why {
            out.push((format!("{at}.values"), why.into()));
        }
        for (j, v) in r.values.iter().enumerate().filter(|_| required) {
            if let Err(e) = super::names::label_value(v) {
                out.push((format!("{at}.values[{j}]"), e.into()));
            }
        }
    }
    for (i, r) in t.match_fields.iter().enumerate() {
        let at = format!("{path}.matchFields[{i}]");
        if r.key != "metadata.name" {
            out.push((format!("{at}.key"), format!("{:?}: not a valid field selector key", r.key)));
        }
        if !matches!(r.operator.as_str(), "In" | "NotIn") {
            out.push((format!("{at}.operator"), format!("{:?}: not a valid selector operator", r.operator)));
        } else if r.values.len() != 1 {
            let why = "must be only one value when `operator` is 'In' or 'NotIn' for node field selector";
            out.push((format!("{at}.values"), why.into()));
        }
        for (j, v) in r.values.iter().enumerate() {
            if let Err(e) = super::names::dns1123_subdomain(v) {
                out.push((format!("{at}.values[{j}]"), format!("{v:?} {e}")));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
    fn problems_are_named_by_path() {
        let bad = affinity(
            r#"{"nodeAffinity":{"requiredDuringSchedulingIgnoredDuringExecution":{"nodeSelectorTerms":[
                {"matchExpressions":[{"key":"a","operator":"In"},{"key":"b","operator":"Exists","values":["x"]},
                 {"key":"c","operator":"Gt","values":["1","2"]},{"key":"d","operator":"Near","values":["x"]}],
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
