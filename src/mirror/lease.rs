//! The node's Lease (coordination.k8s.io/v1 in kube-node-lease), renewed every quarter of its
//! duration as kubelet renews it: a PUT of the server's last Lease with a new spec (the
//! resourceVersion it carries turns a concurrent write into a conflict), in protobuf as
//! kubelet's client sends it (`proto.rs`); on a conflict or an unknown lease, GET (or create)
//! it first. A server that answers the lease in JSON gets JSON back.

use super::apiserver::{set_path, Answer, Client};
use super::objects;
use super::proto::{self, LeaseSpec};
use super::retry::{fail_of, jitter, Failure, JSON};
use super::state::Options;
use serde_json::Value;
use std::time::{Duration, Instant, SystemTime};

/// What the mirror asks for: protobuf, JSON where the server has no protobuf.
const ACCEPT: &str = "application/vnd.kubernetes.protobuf, application/json";
const API_VERSION: &str = "coordination.k8s.io/v1";

/// The server's last Lease, as it sent it.
enum Held {
    Proto(Vec<u8>),
    Json(Value),
}

pub(super) struct Lease {
    held: Option<Held>,
    pub(super) due: Instant,
}

impl Lease {
    pub(super) fn new() -> Lease {
        Lease { held: None, due: Instant::now() }
    }
}

/// The lease in a successful answer; an answer that holds none is a failure.
fn held(what: &str, a: &Answer) -> Result<Held, Failure> {
    let bad = || (format!("{what}: the API server's answer is not a Lease"), None);
    if a.content_type == proto::CONTENT_TYPE {
        match proto::open(&a.body) {
            Ok((kind, raw)) if kind == "Lease" => Ok(Held::Proto(raw.to_vec())),
            _ => Err(bad()),
        }
    } else {
        match crate::parse::json(&a.body) {
            Ok(v) if v.is_object() => Ok(Held::Json(v)),
            _ => Err(bad()),
        }
    }
}

/// Keeps the lease the server answered, and when the next renewal is due.
fn renewed(opts: &Options, lease: &mut Lease, answer: &Answer) -> Result<(), Failure> {
    lease.held = Some(held("lease renewal", answer)?);
    let every = Duration::from_secs(u64::from(opts.lease_duration_seconds)) / 4;
    // kubelet's jitter: up to 4 % either way.
    lease.due = Instant::now() + every + jitter(every.mul_f64(0.08)) - every.mul_f64(0.04);
    Ok(())
}

/// Renews the lease (or makes it), owned by the Node `node_uid` once it is known.
pub(super) fn renew(client: &Client, opts: &Options, node_uid: Option<&str>, lease: &mut Lease) -> Result<(), Failure> {
    let path = format!("/apis/{API_VERSION}/namespaces/{}/leases/{}", objects::LEASE_NAMESPACE, opts.node);
    let now = SystemTime::now();
    let spec = LeaseSpec {
        holder: &opts.node,
        duration_seconds: opts.lease_duration_seconds,
        renew: now,
        owner: node_uid.map(|uid| (opts.node.as_str(), uid)),
    };
    let call = |method: &str, path: &str, content_type: &str, body: &[u8]| {
        client.call_bytes(method, path, content_type, ACCEPT, body).map_err(Failure::from)
    };
    for _ in 0..3 {
        let Some(last) = lease.held.take() else {
            let a = call("GET", &path, "", &[])?;
            let answer = match a.status {
                200 => {
                    lease.held = Some(held("lease", &a)?);
                    continue;
                }
                404 => {
                    let collection = path.rsplit_once('/').map_or("", |p| p.0);
                    let fresh = spec.new_lease(&opts.node, objects::LEASE_NAMESPACE);
                    call("POST", collection, proto::CONTENT_TYPE, &proto::envelope(API_VERSION, "Lease", &fresh))?
                }
                _ => return Err(fail_of("lease", &a.reply())),
            };
            match answer.status {
                201 | 200 => return renewed(opts, lease, &answer),
                409 => continue,
                _ => return Err(fail_of("lease", &answer.reply())),
            }
        };
        let sent = match &last {
            Held::Proto(raw) => match spec.renewed(raw) {
                Ok(renewed) => {
                    call("PUT", &path, proto::CONTENT_TYPE, &proto::envelope(API_VERSION, "Lease", &renewed))
                }
                Err(_) => continue, // a malformed lease: read it again
            },
            Held::Json(v) => {
                let renew = crate::rfc3339::format_micros(now);
                let fresh = objects::lease_object(&opts.node, node_uid, opts.lease_duration_seconds, &renew);
                // The last answer is the server's: set fields only where its shape allows.
                // Never sent back in a shape no server would take: a Lease's fields only, and
                // a `metadata` that is an object, else it is read again.
                let mut v = v.clone();
                if let Some(fields) = v.as_object_mut() {
                    fields.retain(|k, _| matches!(k.as_str(), "apiVersion" | "kind" | "metadata"));
                }
                let mut ok = v.get("metadata").is_some_and(serde_json::Value::is_object);
                ok &= set_path(&mut v, &["spec"], fresh["spec"].clone());
                if node_uid.is_some() {
                    let owners = fresh["metadata"]["ownerReferences"].clone();
                    ok &= set_path(&mut v, &["metadata", "ownerReferences"], owners);
                }
                if !ok {
                    continue;
                }
                call("PUT", &path, JSON, &serde_json::to_vec(&v).unwrap_or_default())
            }
        };
        match sent.as_ref().map(|a| a.status) {
            Ok(200 | 201) => return renewed(opts, lease, &sent?),
            // Someone else wrote it (or it is gone): read it again.
            Ok(409 | 404) => continue,
            // Not taken (an outage, a 429, a 5xx): the next renewal starts from the same lease,
            // one PUT rather than a GET and a PUT.
            _ => {
                lease.held = Some(last);
                return Err(match sent {
                    Ok(a) => fail_of("lease renewal", &a.reply()),
                    Err(e) => e,
                });
            }
        }
    }
    Err(("lease: still conflicting after 3 tries".into(), None))
}
