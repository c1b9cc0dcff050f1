//! The writes of every resource (pods, nodes, leases, events): metadata the server sets,
//! validation, create, update and status updates with resourceVersion checks, patches
//! (merge and strategic, by upstream code), and deletes with their preconditions.

use super::*;

pub(super) fn new_meta(store: &mut Store, obj: &mut Value) {
    store.rv += 1;
    store.uid_seq += 1;
    let meta = obj["metadata"].as_object_mut().unwrap();
    meta.insert("uid".into(), format!("6f1c2d3e-0000-4000-8000-{:012x}", store.uid_seq).into());
    meta.insert("creationTimestamp".into(), now_rfc3339().into());
    meta.insert("resourceVersion".into(), store.rv.to_string().into());
}

pub(super) fn emit(store: &mut Store, resource: &'static str, kind: &'static str, object: Value) {
    let rv = store.rv;
    store.events.push_back(Event { rv, resource, kind, object });
    while store.events.len() > store.keep.max(KEEP_EVENTS) {
        let e = store.events.pop_front().unwrap();
        store.compacted = e.rv;
    }
}

pub(super) fn validate(resource: &str, obj: &Value) -> Result<(), String> {
    let mut problems = Vec::new();
    if resource == "pods" {
        let containers = obj["spec"]["containers"].as_array().cloned().unwrap_or_default();
        if containers.is_empty() {
            problems.push("spec.containers: Required value".to_string());
        }
        for (i, c) in containers.iter().enumerate() {
            if c["name"].as_str().is_none_or(str::is_empty) {
                problems.push(format!("spec.containers[{i}].name: Required value"));
            }
            if c["image"].as_str().is_none_or(str::is_empty) {
                problems.push(format!("spec.containers[{i}].image: Required value"));
            }
        }
        if let Some(phase) = obj["status"]["phase"].as_str() {
            if !["Pending", "Running", "Succeeded", "Failed", "Unknown"].contains(&phase) {
                problems.push(format!("status.phase: Unsupported value: {phase:?}"));
            }
        }
    }
    if resource == "leases" {
        if let Some(d) = obj["spec"]["leaseDurationSeconds"].as_i64() {
            if d <= 0 {
                problems.push("spec.leaseDurationSeconds: Invalid value: must be greater than 0".into());
            }
        }
    }
    for (i, c) in obj["status"]["conditions"].as_array().into_iter().flatten().enumerate() {
        if c["type"].as_str().is_none_or(str::is_empty) {
            problems.push(format!("status.conditions[{i}].type: Required value"));
        }
        if !["True", "False", "Unknown"].contains(&c["status"].as_str().unwrap_or("")) {
            problems.push(format!("status.conditions[{i}].status: Unsupported value"));
        }
    }
    if problems.is_empty() {
        Ok(())
    } else {
        Err(problems.join(", "))
    }
}

pub(super) fn invalid(t: &Target, name: &str, why: String) -> Reply {
    let (kind, _) = kind_of(t.resource);
    fail(422, "Invalid", format!("{kind} \"{name}\" is invalid: {why}"))
}

pub(super) fn create(state: &State, store: &mut Store, t: &Target, body: Option<Value>) -> Reply {
    let Some(mut obj) = body.filter(Value::is_object) else {
        return fail(400, "BadRequest", "a JSON object is required");
    };
    let (kind, api_version) = kind_of(t.resource);
    if obj["kind"] != kind || obj["apiVersion"] != api_version {
        return fail(
            400,
            "BadRequest",
            format!("expected kind {kind} of {api_version}, got {} of {}", obj["kind"], obj["apiVersion"]),
        );
    }
    if !obj["metadata"].is_object() {
        obj["metadata"] = json!({});
    }
    let name = obj["metadata"]["name"].as_str().unwrap_or("").to_string();
    if !dns_subdomain(&name) {
        return invalid(
            t,
            &name,
            format!("metadata.name: Invalid value: {name:?}: a lowercase RFC 1123 subdomain is required"),
        );
    }
    match obj["metadata"]["namespace"].as_str() {
        Some(ns) if ns != t.namespace => {
            return fail(
                400,
                "BadRequest",
                "the namespace of the provided object does not match the namespace sent on the request",
            )
        }
        _ if t.resource != "nodes" => obj["metadata"]["namespace"] = t.namespace.clone().into(),
        _ => {}
    }
    if obj["metadata"]["resourceVersion"].as_str().is_some_and(|v| !v.is_empty()) {
        return fail(500, "InternalError", "resourceVersion should not be set on objects to be created");
    }
    let key = (t.resource, t.namespace.clone(), name.clone());
    if store.objects.contains_key(&key) {
        return fail(409, "AlreadyExists", format!("{} \"{name}\" already exists", qualified(t.resource)));
    }
    if t.resource == "pods" {
        if let Some(msg) = state.faults.lock().unwrap().reject_pods.get(&name) {
            return fail(
                403,
                "Forbidden",
                format!("admission webhook \"policy.example.com\" denied the request: {msg}"),
            );
        }
        // The API server owns a new pod's status.
        obj["status"] = json!({"phase": "Pending", "qosClass": qos_class(&obj)});
    }
    if let Err(why) = validate(t.resource, &obj) {
        return invalid(t, &name, why);
    }
    if t.resource == "secrets" {
        // The server keeps stringData only as data, in base64; it never answers with it.
        if let Some(Value::Object(strings)) = obj.as_object_mut().and_then(|o| o.remove("stringData")) {
            for (k, v) in strings {
                obj["data"][k] = atoll::base64::encode(v.as_str().unwrap_or("").as_bytes()).into();
            }
        }
    }
    new_meta(store, &mut obj);
    store.objects.insert(key, obj.clone());
    emit(store, t.resource, "ADDED", obj.clone());
    Reply::Json(201, obj)
}

pub(super) fn qos_class(pod: &Value) -> &'static str {
    let containers = pod["spec"]["containers"].as_array().cloned().unwrap_or_default();
    let res: Vec<&Value> = containers.iter().map(|c| &c["resources"]).collect();
    if res.iter().all(|r| r["requests"].is_null() && r["limits"].is_null()) {
        return "BestEffort";
    }
    let guaranteed = res.iter().all(|r| {
        ["cpu", "memory"]
            .iter()
            .all(|k| !r["limits"][k].is_null() && (r["requests"][k].is_null() || r["requests"][k] == r["limits"][k]))
    });
    if guaranteed {
        "Guaranteed"
    } else {
        "Burstable"
    }
}

/// A write over an existing object: resourceVersion and uid checks, system fields kept, the
/// parts the endpoint may not change restored, validation, a new resourceVersion.
pub(super) fn replace(store: &mut Store, t: &Target, mut new: Value, status_only: bool, require_rv: bool) -> Reply {
    let key = (t.resource, t.namespace.clone(), t.name.clone());
    let Some(old) = store.objects.get(&key).cloned() else { return not_found(t) };
    if new["metadata"]["name"].as_str().is_some_and(|n| n != t.name) {
        return fail(400, "BadRequest", "the name of the object does not match the name on the URL");
    }
    let rv = new["metadata"]["resourceVersion"].as_str().unwrap_or("").to_string();
    if require_rv && rv.is_empty() {
        return invalid(
            t,
            &t.name,
            "metadata.resourceVersion: Invalid value: 0x0: must be specified for an update".into(),
        );
    }
    let conflict = || {
        fail(409, "Conflict", format!("Operation cannot be fulfilled on {} \"{}\": the object has been modified; please apply your changes to the latest version and try again", qualified(t.resource), t.name))
    };
    if !rv.is_empty() && old["metadata"]["resourceVersion"] != rv.as_str() {
        return conflict();
    }
    if let Some(refused) = uid_precondition(&old, &new["metadata"]["uid"]) {
        return refused;
    }
    for field in ["uid", "creationTimestamp", "namespace", "name", "deletionTimestamp", "deletionGracePeriodSeconds"] {
        match old["metadata"].get(field) {
            Some(v) => new["metadata"][field] = v.clone(),
            None => {
                if let Some(m) = new["metadata"].as_object_mut() {
                    m.remove(field);
                }
            }
        }
    }
    new["kind"] = old["kind"].clone();
    new["apiVersion"] = old["apiVersion"].clone();
    if status_only {
        // The status endpoint writes status only.
        let status = new["status"].clone();
        new = old.clone();
        new["status"] = status;
    } else if t.resource != "leases" {
        // The main endpoint does not write status; a pod's spec is immutable (bar what
        // atoll never changes) and its mirror annotation may not change.
        new["status"] = old["status"].clone();
        if t.resource == "pods" {
            if new["spec"] != old["spec"] {
                return invalid(t, &t.name, "spec: Forbidden: pod updates may not change fields other than `spec.containers[*].image`, `spec.activeDeadlineSeconds` or `spec.tolerations` (only additions to existing tolerations)".into());
            }
            let m = "kubernetes.io/config.mirror";
            if new["metadata"]["annotations"][m] != old["metadata"]["annotations"][m] {
                return invalid(
                    t,
                    &t.name,
                    format!(
                        "metadata.annotations[{m}]: Forbidden: may not add, change or remove the mirror annotation"
                    ),
                );
            }
        }
    }
    if let Err(why) = validate(t.resource, &new) {
        return invalid(t, &t.name, why);
    }
    if without_rv(&new) == without_rv(&old) {
        // No change: no new resourceVersion, no event.
        return Reply::Json(200, old);
    }
    store.rv += 1;
    new["metadata"]["resourceVersion"] = store.rv.to_string().into();
    store.objects.insert(key, new.clone());
    emit(store, t.resource, "MODIFIED", new.clone());
    Reply::Json(200, new)
}

pub(super) fn without_rv(v: &Value) -> Value {
    let mut v = v.clone();
    if let Some(m) = v["metadata"].as_object_mut() {
        m.remove("resourceVersion");
    }
    v
}

pub(super) fn update(store: &mut Store, t: &Target, body: Option<Value>) -> Reply {
    let Some(new) = body.filter(Value::is_object) else { return fail(400, "BadRequest", "a JSON object is required") };
    replace(store, t, new, false, true)
}

pub(super) fn patch(
    state: &State,
    store: &mut Store,
    t: &Target,
    status: bool,
    req: &Request,
    body: Option<Value>,
) -> Reply {
    let Some(p) = body.filter(Value::is_object) else { return fail(400, "BadRequest", "a JSON object is required") };
    let Some(old) = store.objects.get(&(t.resource, t.namespace.clone(), t.name.clone())).cloned() else {
        return not_found(t);
    };
    let ct = req.headers.get("content-type").map(|c| c.split(';').next().unwrap_or("").trim()).unwrap_or("");
    // Applied by upstream code (`check`): merge patch as RFC 7386, strategic merge patch by the
    // API types' patch tags (conditions by type, ...), the result held to the type.
    let new = match ct {
        "application/merge-patch+json" | "application/strategic-merge-patch+json" => {
            match check::patch(&state.refused, kind_of(t.resource).0, ct, &old, &req.body) {
                Ok(v) => v,
                Err(refused) => return refused,
            }
        }
        other => return fail(415, "UnsupportedMediaType", format!("the body of the request was in an unknown format - accepted media types include: application/merge-patch+json, application/strategic-merge-patch+json (got {other:?})")),
    };
    // A patch's resourceVersion is a precondition; absent, the current one applies.
    let mut new = new;
    if p["metadata"]["resourceVersion"].is_null() {
        new["metadata"]["resourceVersion"] = old["metadata"]["resourceVersion"].clone();
    }
    replace(store, t, new, status, false)
}

/// A UID precondition (a patch's or update's `metadata.uid`, DeleteOptions' `preconditions`)
/// that `obj` does not meet: 409 Conflict.
pub(super) fn uid_precondition(obj: &Value, uid: &Value) -> Option<Reply> {
    let uid = uid.as_str()?;
    (obj["metadata"]["uid"] != uid).then(|| {
        fail(
            409,
            "Conflict",
            format!(
                "Precondition failed: UID in precondition: {uid}, UID in object meta: {}",
                obj["metadata"]["uid"].as_str().unwrap_or("")
            ),
        )
    })
}

pub(super) fn delete(store: &mut Store, t: &Target, body: Option<Value>) -> Reply {
    let key = (t.resource, t.namespace.clone(), t.name.clone());
    let Some(mut obj) = store.objects.get(&key).cloned() else { return not_found(t) };
    let opts = body.unwrap_or(Value::Null);
    if let Some(refused) = uid_precondition(&obj, &opts["preconditions"]["uid"]) {
        return refused;
    }
    if let Some(rv) = opts["preconditions"]["resourceVersion"].as_str() {
        if obj["metadata"]["resourceVersion"] != rv {
            return fail(
                409,
                "Conflict",
                format!(
                    "Precondition failed: ResourceVersion in precondition: {rv}, ResourceVersion in object meta: {}",
                    obj["metadata"]["resourceVersion"].as_str().unwrap_or("")
                ),
            );
        }
    }
    if t.resource == "pods" {
        let grace = opts["gracePeriodSeconds"]
            .as_i64()
            .unwrap_or_else(|| obj["spec"]["terminationGracePeriodSeconds"].as_i64().unwrap_or(30));
        let bound = obj["spec"]["nodeName"].as_str().is_some_and(|n| !n.is_empty());
        if grace > 0 && bound {
            // Graceful: the kubelet finishes it. A second graceful delete changes nothing.
            if obj["metadata"]["deletionTimestamp"].is_null() {
                store.rv += 1;
                let when = SystemTime::now() + Duration::from_secs(grace as u64);
                obj["metadata"]["deletionTimestamp"] = rfc3339(when).into();
                obj["metadata"]["deletionGracePeriodSeconds"] = grace.into();
                obj["metadata"]["resourceVersion"] = store.rv.to_string().into();
                store.objects.insert(key, obj.clone());
                emit(store, t.resource, "MODIFIED", obj.clone());
            }
            return Reply::Json(200, obj);
        }
    }
    store.objects.remove(&key);
    store.rv += 1;
    obj["metadata"]["resourceVersion"] = store.rv.to_string().into();
    emit(store, t.resource, "DELETED", obj.clone());
    if t.resource == "nodes" {
        // The garbage collector removes what the node owned.
        let uid = obj["metadata"]["uid"].clone();
        let owned: Vec<_> = store
            .objects
            .iter()
            .filter(|(_, v)| {
                v["metadata"]["ownerReferences"].as_array().is_some_and(|o| o.iter().any(|r| r["uid"] == uid))
            })
            .map(|(k, _)| k.clone())
            .collect();
        for k in owned {
            let mut gone = store.objects.remove(&k).unwrap();
            store.rv += 1;
            gone["metadata"]["resourceVersion"] = store.rv.to_string().into();
            emit(store, k.0, "DELETED", gone);
        }
    }
    Reply::Json(200, obj)
}
