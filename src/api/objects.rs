//! The local objects as the local API shows them (socket only): `GET /objects` lists every
//! ConfigMap and Secret on the box, and `GET /pods/{ns}/{name}/objects` says which of them a
//! pod uses and whether each resolved. Keys and sizes only: a value (a Secret's above all)
//! never leaves the agent through here.

use super::view::Api;
use crate::cri::RuntimeService;
use crate::objects::LocalObject;
use crate::pod::types::Pod;
use serde_json::{json, Value};

/// Keys and their sizes.
fn keys(o: &LocalObject) -> Value {
    o.data.iter().map(|(k, v)| json!({"key": k, "bytes": v.len()})).collect()
}

/// `GET /objects`.
pub fn list<RT: RuntimeService>(api: &Api<RT>) -> Value {
    let items: Vec<Value> = api
        .node
        .objects()
        .all()
        .iter()
        .map(|o| {
            json!({"kind": o.kind.as_str(), "namespace": o.namespace, "name": o.name, "origin": o.origin,
                   "immutable": o.immutable, "keys": keys(o)})
        })
        .collect();
    json!({ "items": items })
}

/// `GET /pods/{ns}/{name}/objects`: each object `pod` references, once, with the field paths
/// that name it and the keys it needs that are missing.
pub fn of_pod<RT: RuntimeService>(api: &Api<RT>, pod: &Pod) -> Value {
    let mut items: Vec<Value> = Vec::new();
    for r in crate::pod::references::object_refs(pod) {
        let found = api.node.objects().get(r.kind, &pod.metadata.namespace, &r.name);
        let at = items.iter().position(|i| i["kind"] == r.kind.as_str() && i["name"] == r.name.as_str());
        let i = match at {
            Some(i) => i,
            None => {
                items.push(json!({
                    "kind": r.kind.as_str(), "name": r.name, "found": found.is_some(), "optional": true,
                    "keys": found.as_deref().map_or(Value::Null, keys), "missingKeys": [], "usedBy": [],
                }));
                items.len() - 1
            }
        };
        let item = &mut items[i];
        if !r.optional {
            item["optional"] = false.into();
        }
        if let Some(list) = item["usedBy"].as_array_mut() {
            list.push(r.path.into());
        }
        if let (Some(key), Some(o)) = (&r.key, &found) {
            if !o.data.contains_key(key) {
                if let Some(list) = item["missingKeys"].as_array_mut() {
                    list.push(key.as_str().into());
                }
            }
        }
    }
    json!({ "items": items })
}
