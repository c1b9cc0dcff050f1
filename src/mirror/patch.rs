//! Strategic merge patches of what differs, as kubelet sends its node status and pod status
//! (client-go's two-way merge patch from the server's copy to the wanted one): the fields
//! that changed (null for one gone); lists with a merge key (the API types' `patchMergeKey`:
//! conditions and addresses by type, pod and host IPs by ip) as their changed items only,
//! each with its key and what changed in it, with `$setElementOrder/<list>` and gone items as
//! `$patch: delete`; other values whole. The server merges such a list by key, so an item
//! another writer added meanwhile (a pod condition after atoll's last watch event) stays.
//! Pure functions.

use serde_json::{json, Map, Value};

/// A status list the server merges by key: (field, key, whether atoll writes the list whole, so
/// that an item it no longer has is deleted). Conditions are not: other writers add their own.
const MERGED: &[(&str, &str, bool)] =
    &[("conditions", "type", false), ("addresses", "type", true), ("podIPs", "ip", true), ("hostIPs", "ip", true)];

/// The PodStatus fields atoll writes on a mirror: the v1 fields its status has.
const POD_STATUS_FIELDS: &[&str] = &[
    "phase",
    "reason",
    "message",
    "conditions",
    "hostIP",
    "hostIPs",
    "podIP",
    "podIPs",
    "startTime",
    "initContainerStatuses",
    "containerStatuses",
    "qosClass",
];

/// `{key: value}`, and more fields when `more` is given.
fn keyed(key: &str, value: &Value, more: Option<(&str, Value)>) -> Value {
    let mut m = Map::new();
    m.insert(key.to_string(), value.clone());
    if let Some((k, v)) = more {
        m.insert(k.to_string(), v);
    }
    Value::Object(m)
}

/// What `want` changes in the list `have` merged by `key`: the changed and new items, gone
/// items as deletions when `whole`; the wanted order. None when no item changed.
fn list_diff(key: &str, whole: bool, want: &[Value], have: &[Value]) -> Option<(Vec<Value>, Vec<Value>)> {
    let mut items = Vec::new();
    let mut order = Vec::new();
    for w in want {
        let id = &w[key];
        order.push(keyed(key, id, None));
        let (Some(fields), Some(h)) = (w.as_object(), have.iter().find(|h| h[key] == *id)) else {
            items.push(w.clone());
            continue;
        };
        let mut changed = Map::new();
        for (k, v) in fields {
            if h[k.as_str()] != *v {
                changed.insert(k.clone(), v.clone());
            }
        }
        for (k, v) in h.as_object().into_iter().flatten() {
            if !v.is_null() && !fields.contains_key(k) {
                changed.insert(k.clone(), Value::Null);
            }
        }
        if !changed.is_empty() {
            changed.insert(key.to_string(), id.clone());
            items.push(Value::Object(changed));
        }
    }
    for h in have {
        if whole && !want.iter().any(|w| w[key] == h[key]) {
            items.push(keyed(key, &h[key], Some(("$patch", "delete".into()))));
        }
    }
    (!items.is_empty()).then_some((items, order))
}

/// The strategic merge patch of `fields` taking `have` to `want` (empty when none differs).
fn diff(want: &Value, have: &Value, fields: &mut dyn Iterator<Item = &str>) -> Map<String, Value> {
    let mut out = Map::new();
    for field in fields {
        let (w, h) = (&want[field], &have[field]);
        if w == h {
            continue;
        }
        let merged = MERGED.iter().find(|m| m.0 == field);
        match (merged, w.as_array(), h.as_array()) {
            (Some(&(_, key, whole)), Some(w), Some(h)) => {
                if let Some((items, order)) = list_diff(key, whole, w, h) {
                    out.insert(format!("$setElementOrder/{field}"), Value::Array(order));
                    out.insert(field.to_string(), Value::Array(items));
                }
            }
            _ => {
                out.insert(field.to_string(), w.clone());
            }
        }
    }
    out
}

/// The node status patch from what the server holds (`have`) to `want`: at steady state the
/// conditions' heartbeats, by type. Fields others write (images, volumes, their conditions)
/// are left alone. None when nothing differs.
pub fn node_status_patch(want: &Value, have: &Value) -> Option<Value> {
    let status = diff(want, have, &mut want.as_object().into_iter().flatten().map(|(k, _)| k.as_str()));
    (!status.is_empty()).then(|| json!({ "status": status }))
}

/// The mirror's status patch from what the server shows (`mirror`) to `want` (the fields atoll
/// writes; null for one it no longer has), with the mirror's UID as precondition, as
/// kubelet's status manager sends it. None when the mirror already shows `want`.
pub fn status_patch(want: &Value, mirror: &Value) -> Option<Value> {
    let status = diff(want, &mirror["status"], &mut POD_STATUS_FIELDS.iter().copied());
    (!status.is_empty()).then(|| json!({"metadata": {"uid": mirror["metadata"]["uid"]}, "status": status}))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cond(t: &str, status: &str, beat: &str) -> Value {
        json!({"type": t, "status": status, "reason": "R", "message": "m", "lastHeartbeatTime": beat, "lastTransitionTime": "t0"})
    }

    #[test]
    fn a_node_status_patch_carries_only_what_changed_by_type() {
        let have = json!({
            "conditions": [cond("Ready", "True", "h1"), cond("MemoryPressure", "False", "h1"), cond("example.com/Disk", "True", "x")],
            "capacity": {"cpu": "2"},
            "addresses": [{"type": "InternalIP", "address": "10.0.0.5"}, {"type": "Hostname", "address": "n"}],
            "images": [{"names": ["set-by-others"]}],
        });
        let mut want = json!({
            "conditions": [cond("Ready", "True", "h2"), cond("MemoryPressure", "False", "h2")],
            "capacity": {"cpu": "2"},
            "addresses": [{"type": "InternalIP", "address": "10.0.0.5"}, {"type": "Hostname", "address": "n"}],
        });
        let order = json!([{"type": "Ready"}, {"type": "MemoryPressure"}]);
        assert_eq!(
            node_status_patch(&want, &have),
            Some(json!({"status": {"$setElementOrder/conditions": order, "conditions": [
                {"type": "Ready", "lastHeartbeatTime": "h2"},
                {"type": "MemoryPressure", "lastHeartbeatTime": "h2"},
            ]}})),
            "heartbeats only; another writer's condition is neither sent nor deleted"
        );
        want["conditions"][0]["status"] = json!("False");
        want["capacity"]["cpu"] = json!("4");
        want["addresses"] = json!([{"type": "Hostname", "address": "n"}]);
        let p = node_status_patch(&want, &have).unwrap();
        assert_eq!(
            p["status"]["conditions"][0],
            json!({"type": "Ready", "status": "False", "lastHeartbeatTime": "h2"})
        );
        assert_eq!(p["status"]["capacity"], json!({"cpu": "4"}));
        assert_eq!(
            p["status"]["addresses"],
            json!([{"type": "InternalIP", "$patch": "delete"}]),
            "addresses are atoll's"
        );
        assert_eq!(p["status"]["$setElementOrder/addresses"], json!([{"type": "Hostname"}]));
        assert!(p["status"].get("images").is_none(), "what others write is left alone");
        // A condition the server lacks goes whole; an unchanged status sends nothing.
        want["conditions"].as_array_mut().unwrap().push(cond("PIDPressure", "False", "h2"));
        assert_eq!(
            node_status_patch(&want, &have).unwrap()["status"]["conditions"][2],
            cond("PIDPressure", "False", "h2")
        );
        assert_eq!(node_status_patch(&have, &have), None);
    }

    #[test]
    fn a_pod_status_patch_merges_conditions_by_type_and_ips_by_ip() {
        let mirror = json!({
            "metadata": {"uid": "m-1"},
            "status": {
                "phase": "Pending",
                "podIP": "10.77.7.9",
                "podIPs": [{"ip": "10.77.7.9"}],
                "qosClass": "BestEffort",
                "conditions": [
                    {"type": "example.com/gate", "status": "True"},
                    {"type": "Ready", "status": "False", "reason": "ContainersNotReady", "message": "m", "lastTransitionTime": "t0", "lastProbeTime": null},
                    {"type": "PodScheduled", "status": "True", "lastTransitionTime": "t0"},
                ],
                "containerStatuses": [{"name": "c", "restartCount": 1}],
            },
        });
        let want = json!({
            "phase": "Running",
            "podIP": "10.77.7.10",
            "podIPs": [{"ip": "10.77.7.10"}],
            "hostIP": "192.0.2.1",
            "hostIPs": [{"ip": "192.0.2.1"}],
            "qosClass": "BestEffort",
            "conditions": [
                {"type": "example.com/gate", "status": "True"},
                {"type": "Ready", "status": "True", "lastTransitionTime": "t1"},
                {"type": "PodScheduled", "status": "True", "lastTransitionTime": "t0"},
            ],
            "containerStatuses": [{"name": "c", "restartCount": 2}],
        });
        let p = status_patch(&want, &mirror).unwrap();
        assert_eq!(
            p,
            json!({"metadata": {"uid": "m-1"}, "status": {
                "phase": "Running",
                "podIP": "10.77.7.10",
                "$setElementOrder/podIPs": [{"ip": "10.77.7.10"}],
                "podIPs": [{"ip": "10.77.7.10"}, {"ip": "10.77.7.9", "$patch": "delete"}],
                "hostIP": "192.0.2.1",
                "hostIPs": [{"ip": "192.0.2.1"}],
                "$setElementOrder/conditions": [{"type": "example.com/gate"}, {"type": "Ready"}, {"type": "PodScheduled"}],
                "conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": "t1", "reason": null, "message": null}],
                "containerStatuses": [{"name": "c", "restartCount": 2}],
            }})
        );
        // A field atoll no longer has is deleted; the mirror showing `want` needs nothing.
        let mut stopped = want.clone();
        stopped.as_object_mut().unwrap().remove("podIP");
        stopped.as_object_mut().unwrap().remove("podIPs");
        let applied = json!({"metadata": {"uid": "m-1"}, "status": want.clone()});
        assert_eq!(
            status_patch(&stopped, &applied),
            Some(json!({"metadata": {"uid": "m-1"}, "status": {"podIP": null, "podIPs": null}}))
        );
        assert_eq!(status_patch(&want, &applied), None);
    }
}
