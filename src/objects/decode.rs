//! One v1 ConfigMap or Secret (a JSON value, as the manifest parser made it) → a
//! [`LocalObject`], with the API server's checks that matter here: a name, keys of
//! `[-._a-zA-Z0-9]`, no key twice, a Secret's `data` in base64, at most 1 MiB of data.
//! Fields atoll does not read are warnings naming their path. Walks the value by hand (no
//! second serde type tree in the binary).

use super::model::{LocalObject, MAX_OBJECT_BYTES};
use crate::pod::references::ObjectKind;
use crate::pod::schema::{self, Unread};
use crate::pod::validate::objects::config_key;
use crate::pod::validate::{dns1123_label, dns1123_subdomain};
use crate::pod::Finding;
use serde_json::{Map, Value};
use std::collections::BTreeMap;

/// Decodes `value` (apiVersion v1, kind ConfigMap or Secret, already checked by the caller)
/// found at field path `prefix` of a payload from `origin`.
pub fn decode(
    value: Value,
    prefix: &str,
    origin: &str,
    warnings: &mut Vec<Finding>,
) -> Result<LocalObject, Vec<Finding>> {
    let at = |p: &str| if prefix.is_empty() { p.to_string() } else { format!("{prefix}.{p}") };
    let Value::Object(obj) = value else {
        return Err(vec![Finding::new(prefix, "expected an object")]);
    };
    let kind = match obj.get("kind").and_then(Value::as_str) {
        Some("Secret") => ObjectKind::Secret,
        _ => ObjectKind::ConfigMap,
    };
    let mut problems = Vec::new();
    warn_unread(&obj, kind, &at, warnings);
    let empty = Map::new();
    let meta = match obj.get("metadata") {
        Some(Value::Object(m)) => m,
        None => &empty,
        Some(_) => return Err(vec![Finding::new(&at("metadata"), "expected an object")]),
    };
    // Its fields still have to decode into ObjectMeta, as kubelet decodes them.
    if let Some(Err((path, why))) = obj.get("metadata").map(|m| crate::pod::shape::check("@meta", m, &at("metadata"))) {
        problems.push(Finding::new(&path, why));
    }
    let name = meta.get("name").and_then(Value::as_str).unwrap_or("").to_string();
    if let Err(e) = dns1123_subdomain(&name) {
        problems.push(Finding::new(&at("metadata.name"), format!("{name:?} {e}")));
    }
    let namespace = match meta.get("namespace").and_then(Value::as_str) {
        Some(ns) if !ns.is_empty() => ns.to_string(),
        _ => "default".to_string(),
    };
    if let Err(e) = dns1123_label(&namespace) {
        problems.push(Finding::new(&at("metadata.namespace"), format!("{namespace:?} {e}")));
    }
    let immutable = match obj.get("immutable") {
        None | Some(Value::Null) => false,
        Some(Value::Bool(b)) => *b,
        Some(_) => {
            problems.push(Finding::new(&at("immutable"), "expected true or false"));
            false
        }
    };
    let secret_type = match (kind, obj.get("type")) {
        (ObjectKind::Secret, Some(Value::String(t))) if !t.is_empty() => t.clone(),
        (ObjectKind::Secret, _) => "Opaque".to_string(),
        _ => String::new(),
    };
    let data = decode_data(&obj, kind, &at, &mut problems);
    let size: usize = data.values().map(Vec::len).sum();
    if size > MAX_OBJECT_BYTES {
        problems.push(Finding::new(
            &at("data"),
            format!("{size} bytes of data is over the {MAX_OBJECT_BYTES} byte limit for a {}", kind.as_str()),
        ));
    }
    if !problems.is_empty() {
        return Err(problems);
    }
    Ok(LocalObject { kind, namespace, name, data, immutable, secret_type, origin: origin.to_string() })
}

/// Warns of the fields atoll does not read, at the top and in the metadata.
fn warn_unread(obj: &Map<String, Value>, kind: ObjectKind, at: &impl Fn(&str) -> String, warnings: &mut Vec<Finding>) {
    let mut known: Vec<&'static str> = vec!["apiVersion", "kind", "metadata", "data", "immutable"];
    known.extend(match kind {
        ObjectKind::ConfigMap => ["binaryData"].as_slice(),
        ObjectKind::Secret => ["stringData", "type"].as_slice(),
    });
    // Every field of a ConfigMap and a Secret is read: any other key is no field of them.
    for k in obj.keys().filter(|k| !known.contains(&k.as_str())) {
        let near = schema::nearest(k, &known, "");
        warnings.push(Finding::new(&at(k), format!("{}; ignored", schema::unknown_field(near))));
    }
    let Some(Value::Object(meta)) = obj.get("metadata") else { return };
    for k in meta.keys().filter(|k| !matches!(k.as_str(), "name" | "namespace" | "labels" | "annotations")) {
        // The Pod's metadata reads more (uid, creationTimestamp): Kubernetes fields all the same.
        let message = match (schema::OBJECT_META.field_names().contains(&k.as_str()), schema::OBJECT_META.unread(k)) {
            (true, _) | (_, Unread::NotImplemented | Unread::Malformed(_)) => {
                "not implemented by atoll; ignored".to_string()
            }
            (false, Unread::Unknown(near)) => format!("{}; ignored", schema::unknown_field(near)),
        };
        warnings.push(Finding::new(&at(&format!("metadata.{k}")), message));
    }
}

/// The object's keys and values: `data` and `binaryData`, or `data` and `stringData`.
fn decode_data(
    obj: &Map<String, Value>,
    kind: ObjectKind,
    at: &impl Fn(&str) -> String,
    problems: &mut Vec<Finding>,
) -> BTreeMap<String, Vec<u8>> {
    let mut data = BTreeMap::new();
    // (field, whether its values are base64): a later field's keys replace an earlier one's
    // only for a Secret's stringData; anywhere else a key given twice is an error.
    let fields: &[(&str, bool)] = match kind {
        ObjectKind::ConfigMap => &[("data", false), ("binaryData", true)],
        ObjectKind::Secret => &[("data", true), ("stringData", false)],
    };
    for &(field, base64) in fields {
        let map = match obj.get(field) {
            None | Some(Value::Null) => continue,
            Some(Value::Object(m)) => m,
            Some(_) => {
                problems.push(Finding::new(&at(field), "expected a map of keys to values"));
                continue;
            }
        };
        for (key, v) in map {
            let path = at(&format!("{field}[{key}]"));
            if let Err(e) = config_key(key) {
                problems.push(Finding::new(&path, format!("invalid key: {e}")));
                continue;
            }
            let Some(text) = v.as_str() else {
                problems.push(Finding::new(&path, "expected a string"));
                continue;
            };
            let bytes = if base64 {
                match crate::base64::decode(text) {
                    Ok(b) => b,
                    // The value is not quoted back: it may be a secret.
                    Err(_) => {
                        problems.push(Finding::new(&path, "is not valid base64"));
                        continue;
                    }
                }
            } else {
                text.as_bytes().to_vec()
            };
            let replaces = field == "stringData";
            if data.insert(key.clone(), bytes).is_some() && !replaces {
                problems.push(Finding::new(&path, format!("key {key:?} is given twice (data and {field})")));
            }
        }
    }
    data
}
