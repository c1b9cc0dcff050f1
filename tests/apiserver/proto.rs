//! The Kubernetes protobuf encoding in the test API server, for the kinds atoll sends and asks
//! for in it: Lease (coordination.k8s.io/v1) both ways, and Status in answers. Written from
//! the `generated.proto` files (meta/v1 ObjectMeta, OwnerReference, Time, MicroTime, Status;
//! coordination/v1 Lease, LeaseSpec; runtime Unknown), apart from atoll's own encoder, so a
//! wrong field number on either side shows as a mismatch. Other kinds are answered in JSON,
//! as kube-apiserver answers kinds it has no protobuf for.

use prost::encoding::{decode_key, decode_varint, encode_key, encode_varint, WireType};
use serde_json::{json, Map, Value};

pub const CONTENT_TYPE: &str = "application/vnd.kubernetes.protobuf";

/// A message's fields: number and value (varints as numbers, length-delimited as bytes).
enum V {
    Int(u64),
    Bytes(Vec<u8>),
}

fn parse(mut b: &[u8]) -> Result<Vec<(u32, V)>, String> {
    let mut out = Vec::new();
    while !b.is_empty() {
        let (n, wire) = decode_key(&mut b).map_err(|e| e.to_string())?;
        match wire {
            WireType::Varint => out.push((n, V::Int(decode_varint(&mut b).map_err(|e| e.to_string())?))),
            WireType::LengthDelimited => {
                let len = decode_varint(&mut b).map_err(|e| e.to_string())? as usize;
                if len > b.len() {
                    return Err("a field past the end".into());
                }
                out.push((n, V::Bytes(b[..len].to_vec())));
                b = &b[len..];
            }
            other => return Err(format!("wire type {other:?} not expected in these kinds")),
        }
    }
    Ok(out)
}

fn put_bytes(buf: &mut Vec<u8>, n: u32, v: &[u8]) {
    encode_key(n, WireType::LengthDelimited, buf);
    encode_varint(v.len() as u64, buf);
    buf.extend_from_slice(v);
}

fn put_int(buf: &mut Vec<u8>, n: u32, v: u64) {
    encode_key(n, WireType::Varint, buf);
    encode_varint(v, buf);
}

fn string(v: &V) -> Value {
    match v {
        V::Bytes(b) => Value::String(String::from_utf8_lossy(b).into_owned()),
        V::Int(i) => json!(i),
    }
}

fn int(v: &V) -> Value {
    match v {
        V::Int(i) => json!(*i as i64),
        V::Bytes(_) => Value::Null,
    }
}

/// Time / MicroTime {seconds = 1, nanos = 2} as RFC 3339 (MicroTime with microseconds).
fn time(v: &V, micro: bool) -> Value {
    let V::Bytes(b) = v else { return Value::Null };
    let (mut secs, mut nanos) = (0u64, 0u64);
    for (n, f) in parse(b).unwrap_or_default() {
        match (n, f) {
            (1, V::Int(s)) => secs = s,
            (2, V::Int(ns)) => nanos = ns,
            _ => {}
        }
    }
    let base = super::rfc3339(std::time::UNIX_EPOCH + std::time::Duration::from_secs(secs));
    if micro {
        Value::String(format!("{}.{:06}Z", base.trim_end_matches('Z'), nanos / 1000))
    } else {
        Value::String(base)
    }
}

fn time_bytes(text: &str) -> Vec<u8> {
    let (secs, nanos) = super::parse_rfc3339(text).unwrap_or((0, 0));
    let mut b = Vec::new();
    put_int(&mut b, 1, secs);
    put_int(&mut b, 2, u64::from(nanos));
    b
}

fn meta_json(b: &[u8]) -> Result<Value, String> {
    let mut m = Map::new();
    let (mut labels, mut annotations, mut owners) = (Map::new(), Map::new(), Vec::new());
    for (n, v) in parse(b)? {
        match n {
            1 => _ = m.insert("name".into(), string(&v)),
            2 => _ = m.insert("generateName".into(), string(&v)),
            3 => _ = m.insert("namespace".into(), string(&v)),
            5 => _ = m.insert("uid".into(), string(&v)),
            6 => _ = m.insert("resourceVersion".into(), string(&v)),
            7 => _ = m.insert("generation".into(), int(&v)),
            8 => _ = m.insert("creationTimestamp".into(), time(&v, false)),
            11 | 12 => {
                let V::Bytes(entry) = v else { continue };
                let (mut k, mut val) = (String::new(), Value::String(String::new()));
                for (en, ev) in parse(&entry)? {
                    match en {
                        1 => k = string(&ev).as_str().unwrap_or_default().to_string(),
                        2 => val = string(&ev),
                        _ => {}
                    }
                }
                if n == 11 {
                    labels.insert(k, val);
                } else {
                    annotations.insert(k, val);
                }
            }
            13 => {
                let V::Bytes(r) = v else { continue };
                let mut o = Map::new();
                for (rn, rv) in parse(&r)? {
                    let key = match rn {
                        1 => "kind",
                        3 => "name",
                        4 => "uid",
                        5 => "apiVersion",
                        6 => "controller",
                        7 => "blockOwnerDeletion",
                        _ => continue,
                    };
                    let value = if rn >= 6 { json!(matches!(rv, V::Int(1))) } else { string(&rv) };
                    o.insert(key.into(), value);
                }
                owners.push(Value::Object(o));
            }
            _ => {}
        }
    }
    if !labels.is_empty() {
        m.insert("labels".into(), Value::Object(labels));
    }
    if !annotations.is_empty() {
        m.insert("annotations".into(), Value::Object(annotations));
    }
    if !owners.is_empty() {
        m.insert("ownerReferences".into(), Value::Array(owners));
    }
    Ok(Value::Object(m))
}

fn meta_bytes(m: &Value) -> Vec<u8> {
    let mut b = Vec::new();
    for (n, k) in [(1, "name"), (2, "generateName"), (3, "namespace"), (5, "uid"), (6, "resourceVersion")] {
        if let Some(s) = m[k].as_str() {
            put_bytes(&mut b, n, s.as_bytes());
        }
    }
    if let Some(g) = m["generation"].as_i64() {
        put_int(&mut b, 7, g as u64);
    }
    if let Some(t) = m["creationTimestamp"].as_str() {
        put_bytes(&mut b, 8, &time_bytes(t));
    }
    for (n, k) in [(11, "labels"), (12, "annotations")] {
        for (key, val) in m[k].as_object().into_iter().flatten() {
            let mut e = Vec::new();
            put_bytes(&mut e, 1, key.as_bytes());
            put_bytes(&mut e, 2, val.as_str().unwrap_or_default().as_bytes());
            put_bytes(&mut b, n, &e);
        }
    }
    for o in m["ownerReferences"].as_array().into_iter().flatten() {
        let mut r = Vec::new();
        for (n, k) in [(1, "kind"), (3, "name"), (4, "uid"), (5, "apiVersion")] {
            put_bytes(&mut r, n, o[k].as_str().unwrap_or_default().as_bytes());
        }
        for (n, k) in [(6, "controller"), (7, "blockOwnerDeletion")] {
            if let Some(v) = o[k].as_bool() {
                put_int(&mut r, n, u64::from(v));
            }
        }
        put_bytes(&mut b, 13, &r);
    }
    b
}

/// A request body in its envelope, as the JSON the store keeps.
pub fn decode(body: &[u8]) -> Result<Value, String> {
    let unknown = body.strip_prefix(b"k8s\0").ok_or("no k8s\\0 magic")?;
    let (mut api_version, mut kind, mut raw) = (Value::Null, Value::Null, Vec::new());
    for (n, v) in parse(unknown)? {
        match (n, v) {
            (1, V::Bytes(tm)) => {
                for (tn, tv) in parse(&tm)? {
                    match tn {
                        1 => api_version = string(&tv),
                        2 => kind = string(&tv),
                        _ => {}
                    }
                }
            }
            (2, V::Bytes(r)) => raw = r,
            (3 | 4, V::Bytes(b)) if !b.is_empty() => {
                return Err("contentEncoding and contentType are not supported".into())
            }
            _ => {}
        }
    }
    if kind != "Lease" {
        return Err(format!("kind {kind} is not served in protobuf here"));
    }
    let mut obj = json!({"kind": kind, "apiVersion": api_version});
    for (n, v) in parse(&raw)? {
        match (n, v) {
            (1, V::Bytes(m)) => obj["metadata"] = meta_json(&m)?,
            (2, V::Bytes(s)) => {
                let mut spec = Map::new();
                for (sn, sv) in parse(&s)? {
                    let (k, val) = match sn {
                        1 => ("holderIdentity", string(&sv)),
                        2 => ("leaseDurationSeconds", int(&sv)),
                        3 => ("acquireTime", time(&sv, true)),
                        4 => ("renewTime", time(&sv, true)),
                        5 => ("leaseTransitions", int(&sv)),
                        _ => continue,
                    };
                    spec.insert(k.into(), val);
                }
                obj["spec"] = Value::Object(spec);
            }
            _ => {}
        }
    }
    Ok(obj)
}

/// An answer in protobuf, for a kind served so (Lease, Status); None for the others.
pub fn encode(obj: &Value) -> Option<Vec<u8>> {
    let mut raw = Vec::new();
    let (api_version, kind) = match obj["kind"].as_str()? {
        "Lease" => {
            put_bytes(&mut raw, 1, &meta_bytes(&obj["metadata"]));
            let s = &obj["spec"];
            let mut spec = Vec::new();
            if let Some(h) = s["holderIdentity"].as_str() {
                put_bytes(&mut spec, 1, h.as_bytes());
            }
            if let Some(d) = s["leaseDurationSeconds"].as_i64() {
                put_int(&mut spec, 2, d as u64);
            }
            for (n, k) in [(3, "acquireTime"), (4, "renewTime")] {
                if let Some(t) = s[k].as_str() {
                    put_bytes(&mut spec, n, &time_bytes(t));
                }
            }
            if let Some(t) = s["leaseTransitions"].as_i64() {
                put_int(&mut spec, 5, t as u64);
            }
            put_bytes(&mut raw, 2, &spec);
            ("coordination.k8s.io/v1", "Lease")
        }
        "Status" => {
            put_bytes(&mut raw, 1, b"");
            for (n, k) in [(2, "status"), (3, "message"), (4, "reason")] {
                put_bytes(&mut raw, n, obj[k].as_str().unwrap_or_default().as_bytes());
            }
            put_int(&mut raw, 6, obj["code"].as_u64().unwrap_or(0));
            ("v1", "Status")
        }
        _ => return None,
    };
    let mut type_meta = Vec::new();
    put_bytes(&mut type_meta, 1, api_version.as_bytes());
    put_bytes(&mut type_meta, 2, kind.as_bytes());
    let mut out = b"k8s\0".to_vec();
    put_bytes(&mut out, 1, &type_meta);
    put_bytes(&mut out, 2, &raw);
    Some(out)
}

/// Whether an Accept header puts protobuf first (as kubelet's and client-go's do).
pub fn wanted(accept: Option<&str>) -> bool {
    accept.and_then(|a| a.split(',').next()).is_some_and(|first| first.trim().starts_with(CONTENT_TYPE))
}
