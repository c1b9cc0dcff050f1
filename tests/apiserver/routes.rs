//! Which resource a request names and who may touch it: the path parsed into a `Target`,
//! TokenReviews and SubjectAccessReviews (`review`), the router of every resource's
//! verbs (pods, nodes, leases, events), field selectors and the NodeRestriction rules.

use super::*;

/// The parts of a request path.
pub(super) struct Target {
    pub(super) resource: &'static str,
    /// Empty for cluster-scoped resources, and for lists across namespaces.
    pub(super) namespace: String,
    pub(super) name: String,
    pub(super) subresource: String,
    pub(super) query: Vec<(String, String)>,
}

pub(super) fn parse_target(path: &str) -> Option<Target> {
    let (p, q) = path.split_once('?').unwrap_or((path, ""));
    let query = q
        .split('&')
        .filter(|s| !s.is_empty())
        .map(|kv| {
            let (k, v) = kv.split_once('=').unwrap_or((kv, ""));
            (k.to_string(), v.replace("%3D", "=").replace("%3d", "=").replace("%2F", "/"))
        })
        .collect();
    let segs: Vec<&str> = p.trim_matches('/').split('/').collect();
    let rest: &[&str] = match segs.as_slice() {
        ["api", "v1", rest @ ..] => rest,
        ["apis", "coordination.k8s.io", "v1", rest @ ..] => rest,
        ["apis", "certificates.k8s.io", "v1", rest @ ..] => rest,
        _ => return None,
    };
    let core = segs[0] == "api";
    let (namespace, rest) = match rest {
        ["namespaces", ns, rest @ ..] if !rest.is_empty() => (ns.to_string(), rest),
        _ => (String::new(), rest),
    };
    let resource = match (core, rest.first()?) {
        (true, &"pods") => "pods",
        (true, &"nodes") => "nodes",
        (true, &"configmaps") => "configmaps",
        (true, &"secrets") => "secrets",
        (true, &"serviceaccounts") => "serviceaccounts",
        (false, &"leases") => "leases",
        (false, &"certificatesigningrequests") if segs[1] == "certificates.k8s.io" => certificates::RESOURCE,
        _ => return None,
    };
    Some(Target {
        resource,
        namespace,
        name: rest.get(1).unwrap_or(&"").to_string(),
        subresource: rest.get(2).unwrap_or(&"").to_string(),
        query,
    })
}

/// TokenReview and SubjectAccessReview, as the real server answers them: 201 with the
/// request echoed and its status filled in; a token it does not know is not authenticated.
/// Any authenticated caller may ask (kubelets may, through `system:node`).
pub(super) fn review(state: &State, req: &Request) -> Option<Reply> {
    let kind = match req.path.as_str() {
        "/apis/authentication.k8s.io/v1/tokenreviews" => "TokenReview",
        "/apis/authorization.k8s.io/v1/subjectaccessreviews" => "SubjectAccessReview",
        _ => return None,
    };
    if req.method != "POST" {
        return Some(fail(405, "MethodNotAllowed", format!("{} is not supported on {}", req.method, req.path)));
    }
    let Ok(mut body) = serde_json::from_slice::<Value>(&req.body) else {
        return Some(fail(400, "BadRequest", "the body is not JSON"));
    };
    let content_type = req.headers.get("content-type").map_or("", String::as_str);
    if let Err(refused) = check::body(&state.refused, kind, content_type, &req.body) {
        return Some(refused);
    }
    if body["kind"] != kind || body["spec"].is_null() {
        return Some(fail(400, "BadRequest", format!("expected a {kind} with a spec")));
    }
    let status = if kind == "TokenReview" {
        let token = body["spec"]["token"].as_str().unwrap_or("");
        match state.reviewed.lock().unwrap().get(token) {
            Some((user, groups)) => {
                json!({"authenticated": true, "user": {"username": user, "uid": format!("uid-{user}"), "groups": groups}})
            }
            None => json!({"authenticated": false, "user": {}, "error": "invalid bearer token"}),
        }
    } else {
        let spec = &body["spec"];
        let ra = &spec["resourceAttributes"];
        let subjects: Vec<&str> = std::iter::once(spec["user"].as_str().unwrap_or(""))
            .chain(spec["groups"].as_array().into_iter().flatten().filter_map(Value::as_str))
            .collect();
        let allowed = ra["resource"] == "nodes"
            && state.grants.lock().unwrap().iter().any(|(who, verb, sub)| {
                subjects.contains(&who.as_str()) && ra["verb"] == *verb && ra["subresource"] == *sub
            });
        if allowed {
            json!({"allowed": true, "reason": "RBAC: allowed"})
        } else {
            json!({"allowed": false})
        }
    };
    body["status"] = status;
    Some(Reply::Json(201, body))
}

pub(super) fn kind_of(resource: &str) -> (&'static str, &'static str) {
    match resource {
        "pods" => ("Pod", "v1"),
        "nodes" => ("Node", "v1"),
        "configmaps" => ("ConfigMap", "v1"),
        "secrets" => ("Secret", "v1"),
        "serviceaccounts" => ("ServiceAccount", "v1"),
        certificates::RESOURCE => ("CertificateSigningRequest", "certificates.k8s.io/v1"),
        _ => ("Lease", "coordination.k8s.io/v1"),
    }
}

pub(super) fn qualified(resource: &str) -> &'static str {
    match resource {
        "pods" => "pods",
        "nodes" => "nodes",
        "configmaps" => "configmaps",
        "secrets" => "secrets",
        "serviceaccounts" => "serviceaccounts",
        certificates::RESOURCE => "certificatesigningrequests.certificates.k8s.io",
        _ => "leases.coordination.k8s.io",
    }
}

pub(super) fn dns_subdomain(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 253
        && name.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'.')
        && name.as_bytes()[0].is_ascii_alphanumeric()
        && name.as_bytes()[name.len() - 1].is_ascii_alphanumeric()
}

pub(super) fn route(state: &Arc<State>, req: &Request, user: &str) -> Reply {
    if let Some(reply) = review(state, req) {
        return reply;
    }
    if req.method == "GET" {
        let path = req.path.split_once('?').map_or(req.path.as_str(), |(p, _)| p);
        if path == "/healthz" {
            return Reply::Json(200, json!("ok")); // kube-apiserver's is text/plain `ok`
        }
        if let Some(doc) = discovery::document(path, state.addr) {
            return Reply::Json(200, doc);
        }
    }
    let target = parse_target(&req.path);
    if let Some(denied) = certificates::bootstrap_rbac(user, req, target.as_ref()) {
        return denied;
    }
    let Some(t) = target else {
        return fail(404, "NotFound", "the server could not find the requested resource");
    };
    let namespaced = !["nodes", certificates::RESOURCE].contains(&t.resource);
    if namespaced && !t.namespace.is_empty() && !NAMESPACES.contains(&t.namespace.as_str()) {
        return fail(404, "NotFound", format!("namespaces \"{}\" not found", t.namespace));
    }
    let content_type = req.headers.get("content-type").map_or("", String::as_str);
    // What the body is, by upstream code (`check`): an object to create or replace with, or
    // DeleteOptions; a patch is judged where it is applied.
    let judged = match req.method.as_str() {
        "POST" if t.subresource == "token" => Some("TokenRequest"),
        "POST" | "PUT" => Some(kind_of(t.resource).0),
        "DELETE" => Some("DeleteOptions"),
        _ => None,
    };
    let body: Option<Value> = if req.body.is_empty() {
        None
    } else if content_type.starts_with(proto::CONTENT_TYPE) {
        let Some(kind) = judged else { return fail(415, "UnsupportedMediaType", "protobuf is for objects") };
        match check::body(&state.refused, kind, content_type, &req.body) {
            Ok(decoded) => decoded,
            Err(refused) => return refused,
        }
    } else {
        match serde_json::from_slice(&req.body) {
            Ok(v) => Some(v),
            Err(e) => return fail(400, "BadRequest", format!("the body is not JSON: {e}")),
        }
    };
    if let (Some(kind), Some(_), false) = (judged, &body, content_type.starts_with(proto::CONTENT_TYPE)) {
        if let Err(refused) = check::body(&state.refused, kind, content_type, &req.body) {
            return refused;
        }
    }
    if let Some(denied) = node_restriction(state, user, req, &t, body.as_ref()) {
        return denied;
    }
    let mut store = state.store.lock().unwrap();
    let reply = match (req.method.as_str(), t.name.is_empty(), t.subresource.as_str()) {
        ("GET", true, "") => {
            let watch = t.query.iter().any(|(k, v)| k == "watch" && (v == "true" || v == "1"));
            let selector = match field_selector(&t) {
                Ok(s) => s,
                Err(r) => return r,
            };
            if watch {
                return Reply::Watch(watch_asked(&t, selector));
            }
            let (kind, api_version) = kind_of(t.resource);
            let items: Vec<Value> = store
                .objects
                .iter()
                .filter(|(k, v)| {
                    k.0 == t.resource && (t.namespace.is_empty() || k.1 == t.namespace) && matches(v, &selector)
                })
                .map(|(_, v)| {
                    let mut v = v.clone();
                    let o = v.as_object_mut().unwrap();
                    o.remove("kind");
                    o.remove("apiVersion");
                    v
                })
                .collect();
            Reply::Json(
                200,
                json!({"kind": format!("{kind}List"), "apiVersion": api_version, "metadata": {"resourceVersion": store.rv.to_string()}, "items": items}),
            )
        }
        ("POST", true, "") if t.resource == certificates::RESOURCE => {
            certificates::create(state, &mut store, user, body)
        }
        ("PUT", false, "approval") if t.resource == certificates::RESOURCE => {
            certificates::approval(state, &mut store, user, &t.name, body)
        }
        ("POST", true, "") => create(state, &mut store, &t, body),
        ("POST", false, "token") if t.resource == "serviceaccounts" => node_objects::token_request(state, &t, body),
        ("GET", false, "") => match store.objects.get(&(t.resource, t.namespace.clone(), t.name.clone())) {
            Some(v) => Reply::Json(200, v.clone()),
            None => not_found(&t),
        },
        ("PUT", false, "") => update(&mut store, &t, body),
        ("PATCH", false, sub @ ("" | "status")) => patch(state, &mut store, &t, sub == "status", req, body),
        ("DELETE", false, "") => delete(&mut store, &t, body),
        _ => fail(405, "MethodNotAllowed", format!("{} is not supported on {}", req.method, req.path)),
    };
    drop(store);
    state.changed(t.resource).notify_all();
    match reply {
        // kubectl get: the pods printed by the server.
        Reply::Json(200, v)
            if req.method == "GET" && t.resource == "pods" && table::wanted(req.headers.get("accept")) =>
        {
            Reply::Json(200, table::pods(&v))
        }
        reply => reply,
    }
}

/// A watch's query: where from (none for 0: the current state first), how long (30 minutes
/// unless asked), whether bookmarks are wanted.
fn watch_asked(t: &Target, selector: Vec<(String, String)>) -> WatchAsked {
    let query = |key: &str| t.query.iter().find(|(k, _)| k == key).map(|(_, v)| v.as_str());
    let from = query("resourceVersion").and_then(|v| v.parse::<u64>().ok()).filter(|v| *v > 0);
    let timeout = Duration::from_secs(query("timeoutSeconds").and_then(|v| v.parse().ok()).unwrap_or(1800));
    let bookmarks = matches!(query("allowWatchBookmarks"), Some("true" | "1"));
    WatchAsked { resource: t.resource, selector, from, timeout, bookmarks }
}

pub(super) fn not_found(t: &Target) -> Reply {
    fail(404, "NotFound", format!("{} \"{}\" not found", qualified(t.resource), t.name))
}

pub(super) fn field_selector(t: &Target) -> Result<Vec<(String, String)>, Reply> {
    let mut out = Vec::new();
    if let Some((_, sel)) = t.query.iter().find(|(k, _)| k == "fieldSelector") {
        for term in sel.split(',').filter(|s| !s.is_empty()) {
            let (field, value) = term
                .split_once('=')
                .ok_or_else(|| fail(400, "BadRequest", format!("invalid field selector {term:?}")))?;
            let allowed = match t.resource {
                "pods" => ["metadata.name", "metadata.namespace", "spec.nodeName", "status.phase"].contains(&field),
                _ => ["metadata.name", "metadata.namespace"].contains(&field),
            };
            if !allowed {
                return Err(fail(400, "BadRequest", format!("field label not supported: {field}")));
            }
            out.push((field.to_string(), value.to_string()));
        }
    }
    // A namespace's collection holds that namespace's objects only (the list and the watch).
    if !t.namespace.is_empty() {
        out.push(("metadata.namespace".into(), t.namespace.clone()));
    }
    Ok(out)
}

pub(super) fn matches(obj: &Value, selector: &[(String, String)]) -> bool {
    selector.iter().all(|(field, value)| {
        let mut v = obj;
        for part in field.split('.') {
            v = &v[part];
        }
        v.as_str().unwrap_or("") == value
    })
}

/// NodeRestriction for `system:node:<name>` users (other users pass).
pub(super) fn node_restriction(
    state: &State,
    user: &str,
    req: &Request,
    t: &Target,
    body: Option<&Value>,
) -> Option<Reply> {
    let node = user.strip_prefix("system:node:")?;
    if let Some(denied) = node_objects::restrict(state, node, req, t, body) {
        return Some(denied);
    }
    let forbid = |msg: String| Some(fail(403, "Forbidden", msg));
    match t.resource {
        "nodes" if req.method != "GET" => {
            let name = if t.name.is_empty() {
                body.and_then(|b| b["metadata"]["name"].as_str()).unwrap_or("")
            } else {
                &t.name
            };
            if name != node {
                return forbid(format!("node \"{node}\" is not allowed to modify node \"{name}\""));
            }
        }
        "leases" if req.method != "GET" || !t.name.is_empty() => {
            let name = if t.name.is_empty() {
                body.and_then(|b| b["metadata"]["name"].as_str()).unwrap_or("")
            } else {
                &t.name
            };
            if t.namespace != "kube-node-lease" || name != node {
                return forbid("can only access node lease with the same name as the requesting node".to_string());
            }
        }
        "pods" if req.method == "POST" => {
            let pod = body?;
            if pod["metadata"]["annotations"]["kubernetes.io/config.mirror"].as_str().is_none() {
                return forbid(format!("pod does not have \"kubernetes.io/config.mirror\" annotation, node \"{node}\" can only create mirror pods"));
            }
            if pod["spec"]["nodeName"].as_str() != Some(node) {
                return forbid(format!("node \"{node}\" can only create pods with spec.nodeName set to itself"));
            }
            let owners = pod["metadata"]["ownerReferences"].as_array().cloned().unwrap_or_default();
            let node_uid = state
                .store
                .lock()
                .unwrap()
                .objects
                .get(&("nodes", String::new(), node.to_string()))
                .and_then(|n| n["metadata"]["uid"].as_str().map(String::from));
            let ok = owners.len() == 1
                && owners[0]["kind"] == "Node"
                && owners[0]["apiVersion"] == "v1"
                && owners[0]["name"] == node
                && owners[0]["controller"] == true
                && owners[0]["blockOwnerDeletion"] != true
                && node_uid.is_some_and(|u| owners[0]["uid"] == u.as_str());
            if !ok {
                return forbid(format!(
                    "node \"{node}\" can only create pods with a single controlling owner reference set to itself"
                ));
            }
        }
        _ => {}
    }
    None
}
