//! Server-side printing of pods, as kube-apiserver answers `kubectl get` (Accept
//! `application/json;as=Table;v=v1;g=meta.k8s.io`): a meta.k8s.io/v1 Table with kubectl's pod
//! columns, the wide ones at priority 1, each cell worked out as upstream's `printPod`
//! (pkg/printers/internalversion) does for the cases the tests meet: READY counts ready
//! running containers, STATUS is the phase or the pod's reason or a container's waiting or
//! terminated reason (`Completed` back to `Running` while one still runs), RESTARTS their
//! sum, IP the first pod IP, `<none>` for what is unset. Init containers are not shown.

use serde_json::{json, Value};

/// Whether an Accept header asks for a Table.
pub(super) fn wanted(accept: Option<&String>) -> bool {
    accept.is_some_and(|a| a.split(',').next().is_some_and(|first| first.contains("as=Table")))
}

/// A pod or a pod list as a Table.
pub(super) fn pods(answer: &Value) -> Value {
    let rows: Vec<Value> = match answer["items"].as_array() {
        Some(items) => items.iter().map(row).collect(),
        None => vec![row(answer)],
    };
    let column = |name: &str, priority: u8| json!({"name": name, "type": "string", "format": if name == "Name" { "name" } else { "" }, "description": "", "priority": priority});
    json!({
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": {"resourceVersion": answer["metadata"]["resourceVersion"]},
        "columnDefinitions": [
            column("Name", 0), column("Ready", 0), column("Status", 0), column("Restarts", 0), column("Age", 0),
            column("IP", 1), column("Node", 1), column("Nominated Node", 1), column("Readiness Gates", 1),
        ],
        "rows": rows,
    })
}

fn row(pod: &Value) -> Value {
    let status = &pod["status"];
    let text = |v: &Value| v.as_str().filter(|s| !s.is_empty()).map(String::from);
    let mut reason = text(&status["reason"]).or_else(|| text(&status["phase"])).unwrap_or_default();
    let (mut ready, mut restarts, mut running) = (0, 0, false);
    let statuses = status["containerStatuses"].as_array().cloned().unwrap_or_default();
    for c in statuses.iter().rev() {
        restarts += c["restartCount"].as_i64().unwrap_or(0);
        let state = &c["state"];
        if let Some(r) = text(&state["waiting"]["reason"]) {
            reason = r;
        } else if let Some(r) = text(&state["terminated"]["reason"]) {
            reason = r;
        } else if state["terminated"].is_object() {
            reason = format!("ExitCode:{}", state["terminated"]["exitCode"].as_i64().unwrap_or(0));
        } else if c["ready"] == true && state["running"].is_object() {
            running = true;
            ready += 1;
        }
    }
    if reason == "Completed" && running {
        let ready_condition = status["conditions"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|c| c["type"] == "Ready" && c["status"] == "True");
        reason = if ready_condition { "Running".into() } else { "NotReady".into() };
    }
    let total = pod["spec"]["containers"].as_array().map_or(0, Vec::len);
    let none = |v: Option<String>| v.unwrap_or_else(|| "<none>".into());
    let gates = pod["spec"]["readinessGates"].as_array().filter(|g| !g.is_empty()).map(|g| {
        let conditions = status["conditions"].as_array().cloned().unwrap_or_default();
        let true_ones = g
            .iter()
            .filter(|gate| conditions.iter().any(|c| c["type"] == gate["conditionType"] && c["status"] == "True"))
            .count();
        format!("{true_ones}/{}", g.len())
    });
    json!({
        "cells": [
            pod["metadata"]["name"], format!("{ready}/{total}"), reason, restarts.to_string(), age(&pod["metadata"]["creationTimestamp"]),
            none(text(&status["podIPs"][0]["ip"])), none(text(&pod["spec"]["nodeName"])), none(text(&status["nominatedNodeName"])), none(gates),
        ],
        "object": {"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1", "metadata": pod["metadata"]},
    })
}

/// How long ago `created` (RFC 3339) was, roughly as apimachinery's HumanDuration shows it.
fn age(created: &Value) -> String {
    let Some(at) = created.as_str().and_then(atoll::rfc3339::parse_seconds) else { return "<unknown>".into() };
    let secs = std::time::SystemTime::now().duration_since(at).map_or(0, |d| d.as_secs());
    match secs {
        s if s < 120 => format!("{s}s"),
        s if s < 600 => format!("{}m{}s", s / 60, s % 60),
        s if s < 3 * 3600 => format!("{}m", s / 60),
        s => format!("{}h", s / 3600),
    }
}
