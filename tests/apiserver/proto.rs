//! The Kubernetes protobuf encoding of the test API server's answers, for the kinds atoll asks
//! for in it: Lease (coordination.k8s.io/v1) and Status. Written from the `generated.proto`
//! files (meta/v1 ObjectMeta, OwnerReference, Time, MicroTime, Status; coordination/v1 Lease,
//! LeaseSpec; runtime Unknown), apart from atoll's own decoder. Protobuf request bodies are
//! decoded by upstream code, k8s.io/api's generated code (`check`), not here. Other kinds are
//! answered in JSON, as kube-apiserver answers kinds it has no protobuf for.

use prost::encoding::{encode_key, encode_varint, WireType};
use serde_json::Value;

pub const CONTENT_TYPE: &str = "application/vnd.kubernetes.protobuf";

fn put_bytes(buf: &mut Vec<u8>, n: u32, v: &[u8]) {
    encode_key(n, WireType::LengthDelimited, buf);
    encode_varint(v.len() as u64, buf);
    buf.extend_from_slice(v);
}

fn put_int(buf: &mut Vec<u8>, n: u32, v: u64) {
    encode_key(n, WireType::Varint, buf);
    encode_varint(v, buf);
}

fn time_bytes(text: &str) -> Vec<u8> {
    let (secs, nanos) = super::parse_rfc3339(text).unwrap_or((0, 0));
    let mut b = Vec::new();
    put_int(&mut b, 1, secs);
    put_int(&mut b, 2, u64::from(nanos));
    b
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
