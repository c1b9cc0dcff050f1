//! What a node may have of Secrets, ConfigMaps and service account tokens, as the node
//! authorizer and NodeRestriction allow it (kubernetes plugin/pkg/auth/authorizer/node and
//! plugin/pkg/admission/noderestriction): a Secret or ConfigMap only when a pod bound to the
//! node references it, read one by name (a GET, or a list or watch with a `metadata.name`
//! field selector); a token only for a pod bound to the node, of that pod's service account,
//! bound to it by name and UID. And the TokenRequest as the real server answers it: 201, the
//! spec echoed, a token and its expiry (`expirationSeconds` at least 600).

use super::*;

/// The names of `kind` ("secrets", "configmaps") a pod references: volumes, projections,
/// env and envFrom, and (Secrets) imagePullSecrets.
pub(super) fn referenced(pod: &Value, resource: &str) -> Vec<String> {
    let secret = resource == "secrets";
    let mut out = Vec::new();
    let mut add = |v: &Value| {
        if let Some(n) = v.as_str() {
            out.push(n.to_string());
        }
    };
    let spec = &pod["spec"];
    for v in spec["volumes"].as_array().into_iter().flatten() {
        match secret {
            true => add(&v["secret"]["secretName"]),
            false => add(&v["configMap"]["name"]),
        }
        for s in v["projected"]["sources"].as_array().into_iter().flatten() {
            add(&s[if secret { "secret" } else { "configMap" }]["name"]);
        }
    }
    let containers =
        ["initContainers", "containers"].into_iter().flat_map(|k| spec[k].as_array().into_iter().flatten());
    for c in containers {
        for e in c["env"].as_array().into_iter().flatten() {
            add(&e["valueFrom"][if secret { "secretKeyRef" } else { "configMapKeyRef" }]["name"]);
        }
        for e in c["envFrom"].as_array().into_iter().flatten() {
            add(&e[if secret { "secretRef" } else { "configMapRef" }]["name"]);
        }
    }
    if secret {
        for s in spec["imagePullSecrets"].as_array().into_iter().flatten() {
            add(&s["name"]);
        }
    }
    out
}

/// The node authorizer for a node's request of a Secret or ConfigMap, or its TokenRequest.
pub(super) fn restrict(state: &State, node: &str, req: &Request, t: &Target, body: Option<&Value>) -> Option<Reply> {
    let forbid = |what: String| {
        Some(fail(403, "Forbidden", format!("User \"system:node:{node}\" cannot {what}: no relationship found between node '{node}' and this object")))
    };
    let store = state.store.lock().unwrap();
    let bound = |ns: &str| -> Vec<Value> {
        store
            .objects
            .iter()
            .filter(|(k, p)| k.0 == "pods" && k.1 == ns && p["spec"]["nodeName"] == node)
            .map(|(_, p)| p.clone())
            .collect()
    };
    match t.resource {
        "secrets" | "configmaps" => {
            let verb = req.method.to_lowercase();
            let name = match (t.name.is_empty(), field_selector(t)) {
                (false, _) => t.name.clone(),
                (true, Ok(sel)) => match sel.iter().find(|(f, _)| f == "metadata.name") {
                    Some((_, n)) if sel.iter().all(|(f, _)| f.starts_with("metadata.")) => n.clone(),
                    _ => return forbid(format!("{verb} resource \"{}\" in namespace \"{}\"", t.resource, t.namespace)),
                },
                (true, Err(r)) => return Some(r),
            };
            let allowed =
                req.method == "GET" && bound(&t.namespace).iter().any(|p| referenced(p, t.resource).contains(&name));
            if !allowed {
                return forbid(format!(
                    "{verb} resource \"{}\" in namespace \"{}\" named \"{name}\"",
                    t.resource, t.namespace
                ));
            }
        }
        "serviceaccounts" if t.subresource == "token" && req.method == "POST" => {
            let r = body.map(|b| b["spec"]["boundObjectRef"].clone()).unwrap_or_default();
            let pod = bound(&t.namespace).into_iter().find(|p| p["metadata"]["name"] == r["name"]);
            let ok = r["kind"] == "Pod"
                && pod.as_ref().is_some_and(|p| {
                    p["metadata"]["uid"] == r["uid"]
                        && p["spec"]["serviceAccountName"].as_str().unwrap_or("default") == t.name
                });
            if !ok {
                return Some(fail(
                    403,
                    "Forbidden",
                    format!("node '{node}' requested a token not bound to a pod scheduled on it, of the pod's service account"),
                ));
            }
        }
        "serviceaccounts" => return forbid(format!("{} serviceaccounts", req.method.to_lowercase())),
        _ => {}
    }
    None
}

/// POST `serviceaccounts/<name>/token`: a token bound to the pod, valid for what was asked
/// (or the test's shorter lifetime), recorded for the test.
pub(super) fn token_request(state: &State, t: &Target, body: Option<Value>) -> Reply {
    let Some(mut tr) = body.filter(|b| b["kind"] == "TokenRequest") else {
        return fail(400, "BadRequest", "expected a TokenRequest");
    };
    let asked = tr["spec"]["expirationSeconds"].as_i64().unwrap_or(3600);
    if asked < 600 {
        return fail(422, "Invalid", "TokenRequest.authentication.k8s.io \"\" is invalid: spec.expirationSeconds: Invalid value: may not specify a duration less than 10 minutes");
    }
    let mut faults = state.faults.lock().unwrap();
    let lifetime = faults.token_seconds.unwrap_or(asked);
    let pod = tr["spec"]["boundObjectRef"]["name"].as_str().unwrap_or_default().to_string();
    let token = format!("eyJ.{}.{}.{}", t.namespace, pod, faults.issued.len());
    faults.issued.push((pod, token.clone()));
    let until = SystemTime::now() + Duration::from_secs(lifetime as u64);
    tr["metadata"] = json!({"name": t.name, "namespace": t.namespace, "creationTimestamp": null});
    // A capped lifetime is answered in the spec, as the real server answers it.
    tr["spec"]["expirationSeconds"] = lifetime.into();
    tr["status"] = json!({"token": token, "expirationTimestamp": rfc3339(until)});
    Reply::Json(201, tr)
}
