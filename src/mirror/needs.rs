//! What the API source's pods need from the API server, fetched as kubelet fetches it: the
//! Secrets and ConfigMaps they reference (`kube-root-ca.crt` and pull secrets among them),
//! each watched by name in the pod's namespace (a `metadata.name` field selector: all the node
//! authorizer lets a node read), and their projected service account tokens (TokenRequest,
//! bound to the pod by name and UID, asked again once 80 % of the lifetime the server gave it
//! has passed or after 24 hours, as kubelet's token manager does). A token is held as a Secret whose name no
//! API object can have (`pod::references::token_object`), so the volume code reads it as it
//! reads any Secret. Which objects a set of pods needs is a pure function ([`wanted`]);
//! whether a token is due, another ([`due`]).

use super::apiserver::Client;
use super::retry::{jitter, JSON};
use super::watch::Seen;
use crate::objects::LocalObject;
use crate::pod::references::{object_refs, token_object, ObjectKind};
use crate::pod::StaticPod;
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

/// An object by kind, namespace and name.
pub type Ref = (ObjectKind, String, String);

/// The most objects watched at once: each watch is a thread and a stream of the one HTTP/2
/// connection, which kube-apiserver lets carry 100 streams, the lease renewal's among them.
const MAX_WATCHES: usize = 64;

/// A token asked for one pod's projection.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TokenAsk {
    pub namespace: String,
    pub service_account: String,
    pub pod: String,
    pub uid: String,
    pub audience: String,
    pub seconds: u64,
}

/// What pods want: the objects they reference, and their tokens by the name each is held under.
pub type Wants = (Vec<Ref>, Vec<(String, TokenAsk)>);

/// The Secrets and ConfigMaps `pods` reference (not their tokens), sorted, each once; and the
/// tokens they project, by the name each is held under.
pub fn wanted(pods: &[StaticPod]) -> Wants {
    let mut refs = Vec::new();
    let mut tokens = Vec::new();
    for sp in pods {
        let (pod, ns) = (&sp.pod, &sp.pod.metadata.namespace);
        for r in object_refs(pod).into_iter().filter(|r| !r.name.contains('/')) {
            refs.push((r.kind, ns.clone(), r.name));
        }
        for name in pod.spec.image_pull_secrets.iter().filter_map(|s| s["name"].as_str()).filter(|n| !n.is_empty()) {
            refs.push((ObjectKind::Secret, ns.clone(), name.to_string()));
        }
        let account = pod.spec.service_account_name.as_deref().filter(|s| !s.is_empty()).unwrap_or("default");
        for v in &pod.spec.volumes {
            let Some(p) = &v.projected else { continue };
            for (j, t) in p.sources.iter().enumerate().filter_map(|(j, s)| Some((j, s.service_account_token.as_ref()?)))
            {
                let ask = TokenAsk {
                    namespace: ns.clone(),
                    service_account: account.to_string(),
                    pod: pod.metadata.name.clone(),
                    uid: pod.metadata.uid.clone(),
                    audience: t["audience"].as_str().unwrap_or("").to_string(),
                    seconds: t["expirationSeconds"].as_u64().unwrap_or(3600),
                };
                tokens.push((token_object(&pod.metadata.uid, &v.name, j), ask));
            }
        }
    }
    refs.sort();
    refs.dedup();
    (refs, tokens)
}

/// Whether a token that expires at `expires`, issued for `seconds` (the server's answer's
/// `spec.expirationSeconds`: it may cap what was asked), is to be asked again at `now`:
/// kubelet's rule, once 80 % of its lifetime has passed (less `slack`, the jitter), after 24
/// hours, or when the clock is before its issue (it went back).
pub fn due(expires: SystemTime, seconds: u64, now: SystemTime, slack: Duration) -> bool {
    let lifetime = Duration::from_secs(seconds);
    let issued = expires.checked_sub(lifetime).unwrap_or(SystemTime::UNIX_EPOCH);
    let fifth = expires.checked_sub(lifetime / 5).unwrap_or(SystemTime::UNIX_EPOCH);
    let late = |at: SystemTime| now.checked_add(slack).is_none_or(|n| n > at);
    now < issued || issued.checked_add(Duration::from_secs(24 * 3600)).is_some_and(late) || late(fifth)
}

struct Watched {
    what: Ref,
    watch: Option<super::watch::Watch>,
    /// The object as the watch (or, before it lists, the kept copy) has it.
    current: Option<Value>,
    /// Why it did not read, when it did not (reported once).
    problem: Option<String>,
}

struct Token {
    name: String,
    ask: TokenAsk,
    /// Empty until one is had.
    value: String,
    expires: SystemTime,
    /// Its lifetime as the server gave it.
    seconds: u64,
    /// When to ask again after a failure.
    retry: Option<Instant>,
}

/// The watches and tokens of the API source's pods (a node's few: lists).
#[derive(Default)]
pub struct Needs {
    watched: Vec<Watched>,
    tokens: Vec<Token>,
    /// What the pods last given want (`wanted`): worked out again only when they change.
    wants: Option<Wants>,
}

impl Needs {
    /// The objects and tokens of the kept copy: they serve until their watches list and their
    /// tokens are asked again.
    pub fn from_kept(objects: Vec<Value>, tokens: Vec<Value>) -> Needs {
        let mut n = Needs::default();
        for o in objects {
            let kind = if o["kind"] == "Secret" { ObjectKind::Secret } else { ObjectKind::ConfigMap };
            let meta = &o["metadata"];
            let (ns, name) = (meta["namespace"].as_str().unwrap_or(""), meta["name"].as_str().unwrap_or(""));
            let what = (kind, ns.to_string(), name.to_string());
            n.watched.push(Watched { what, watch: None, current: Some(o), problem: None });
        }
        for t in tokens {
            let a = |i: usize| t["ask"][i].as_str().unwrap_or("").to_string();
            let ask = TokenAsk {
                namespace: a(0),
                service_account: a(1),
                pod: a(2),
                uid: a(3),
                audience: a(4),
                seconds: t["ask"][5].as_u64().unwrap_or(3600),
            };
            // Read from disk: a time past what the clock can hold is the epoch (due at once).
            let expires = Duration::from_secs(t["expires"].as_u64().unwrap_or(0));
            let expires = SystemTime::UNIX_EPOCH.checked_add(expires).unwrap_or(SystemTime::UNIX_EPOCH);
            let (Some(name), Some(value)) = (t["object"].as_str(), t["token"].as_str()) else { continue };
            // Kept even past its expiry: offline, the pod starts with it (the server may honour
            // it longer than it said); online it is due, and asked again at once.
            let seconds = t["seconds"].as_u64().unwrap_or(ask.seconds);
            n.tokens.push(Token { name: name.into(), ask, value: value.into(), expires, seconds, retry: None });
        }
        n
    }

    /// Brings the watches and tokens in line with `pods` (with a client: offline, the kept
    /// ones serve); returns whether anything the pods read changed. What the pods want is worked
    /// out again only when they `changed` since the last call (or at the first).
    pub fn sync(&mut self, client: Option<&Arc<Client>>, pods: &[StaticPod], changed: bool, now: SystemTime) -> bool {
        if changed || self.wants.is_none() {
            self.wants = Some(wanted(pods));
        }
        // Borrowed, not copied: this runs every second.
        let Some((refs, asks)) = &self.wants else { return false };
        let mut changed = false;
        // Watches: the unwanted dropped (their threads end: `watch::Watch`), the wanted started.
        self.watched.retain(|w| refs.contains(&w.what));
        for r in refs {
            let i = match self.watched.iter().position(|w| w.what == *r) {
                Some(i) => i,
                None => {
                    self.watched.push(Watched { what: r.clone(), watch: None, current: None, problem: None });
                    self.watched.len() - 1
                }
            };
            let w = &mut self.watched[i];
            if let (None, Some(client)) = (&w.watch, client) {
                let started = self.watched.iter().filter(|w| w.watch.is_some()).count();
                if started < MAX_WATCHES {
                    let w = &mut self.watched[i];
                    let what = format!("{} {}/{}", w.what.0.resource(), w.what.1, w.what.2);
                    w.watch = super::watch::spawn(client, list_path(&w.what), what, 16);
                }
            }
            let w = &mut self.watched[i];
            let Some(watch) = &w.watch else { continue };
            while let Ok(seen) = watch.rx.try_recv() {
                let next = match seen {
                    Seen::Listed(items) => items.into_iter().find(|o| o["metadata"]["name"] == w.what.2.as_str()),
                    Seen::Event(kind, _) if kind == "DELETED" => None,
                    Seen::Event(_, o) => Some(o),
                };
                changed |= next != w.current;
                w.current = next;
            }
        }
        // Tokens: asked when new or due, kept while their pod wants them.
        self.tokens.retain(|t| asks.iter().any(|(name, ask)| *name == t.name && *ask == t.ask));
        for (name, ask) in asks {
            if !self.tokens.iter().any(|t| t.name == *name) {
                let none = SystemTime::UNIX_EPOCH;
                let (name, ask, seconds) = (name.clone(), ask.clone(), ask.seconds);
                self.tokens.push(Token { name, ask, value: String::new(), expires: none, seconds, retry: None });
            }
        }
        for t in &mut self.tokens {
            let fresh = !t.value.is_empty() && !due(t.expires, t.seconds, now, jitter(Duration::from_secs(10)));
            let waiting = t.retry.is_some_and(|at| Instant::now() < at);
            let Some(client) = client.filter(|_| !fresh && !waiting) else { continue };
            match request_token(client, &t.ask) {
                Ok((value, expires, seconds)) => {
                    (t.value, t.expires, t.seconds, t.retry) = (value, expires, seconds, None);
                    changed = true;
                }
                Err(why) => {
                    log::warn!("service account token for pod {}/{}: {why}", t.ask.namespace, t.ask.pod);
                    t.retry = Some(Instant::now() + jitter(Duration::from_secs(10)));
                }
            }
        }
        changed
    }

    /// The objects the pods read now: each watched (or kept) Secret and ConfigMap, and the
    /// tokens. One the API server sends that does not read is reported once and left out.
    pub fn objects(&mut self) -> Vec<Arc<LocalObject>> {
        let mut out = Vec::new();
        for w in &mut self.watched {
            let Some(v) = &w.current else { continue };
            match decode(&w.what, v.clone()) {
                Ok(o) => {
                    w.problem = None;
                    out.push(o);
                }
                Err(e) => {
                    if w.problem.as_ref() != Some(&e) {
                        log::warn!("API source: {} {}/{}: {e}", w.what.0.as_str(), w.what.1, w.what.2);
                    }
                    w.problem = Some(e);
                }
            }
        }
        for t in self.tokens.iter().filter(|t| !t.value.is_empty()) {
            out.push(Arc::new(LocalObject {
                kind: ObjectKind::Secret,
                namespace: t.ask.namespace.clone(),
                name: t.name.clone(),
                data: BTreeMap::from([("token".to_string(), t.value.clone().into_bytes())]),
                immutable: false,
                secret_type: "atoll.io/service-account-token".into(),
                origin: crate::objects::model::FROM_API.into(),
            }));
        }
        out
    }

    /// What is kept on disk of them: the objects as the server sent them (no managed
    /// fields), and the tokens with what they were asked for.
    pub fn to_keep(&self) -> (Vec<Value>, Vec<Value>) {
        let objects = self
            .watched
            .iter()
            .filter_map(|w| {
                let mut v = w.current.clone()?;
                v["kind"] = w.what.0.as_str().into();
                v["apiVersion"] = "v1".into();
                if let Some(m) = v["metadata"].as_object_mut() {
                    m.remove("managedFields");
                }
                Some(v)
            })
            .collect();
        let tokens = self
            .tokens
            .iter()
            .filter(|t| !t.value.is_empty())
            .map(|t| {
                let a = &t.ask;
                let secs = t.expires.duration_since(SystemTime::UNIX_EPOCH).unwrap_or_default().as_secs();
                json!({"object": t.name, "token": t.value, "expires": secs, "seconds": t.seconds,
                       "ask": [a.namespace, a.service_account, a.pod, a.uid, a.audience, a.seconds]})
            })
            .collect();
        (objects, tokens)
    }
}

/// The list of one object by name, as the node authorizer allows it.
fn list_path((kind, ns, name): &Ref) -> String {
    let resource = match kind {
        ObjectKind::ConfigMap => "configmaps",
        ObjectKind::Secret => "secrets",
    };
    format!("/api/v1/namespaces/{ns}/{resource}?fieldSelector=metadata.name%3D{name}")
}

/// A watched object (list items come without their kind) as the node's local objects hold it.
fn decode(r: &Ref, mut v: Value) -> Result<Arc<LocalObject>, String> {
    v["kind"] = r.0.as_str().into();
    v["apiVersion"] = "v1".into();
    let mut warnings = Vec::new();
    let o = crate::objects::decode::decode(v, "", crate::objects::model::FROM_API, &mut warnings)
        .map_err(|p| p.iter().map(ToString::to_string).collect::<Vec<_>>().join("; "))?;
    if (o.kind, &o.namespace, &o.name) != (r.0, &r.1, &r.2) {
        return Err("the server answered with another object".into());
    }
    Ok(Arc::new(o))
}

/// TokenRequest for one projection, bound to its pod: the token, when it expires, and the
/// lifetime the server gave it (its answer's `spec.expirationSeconds`, else what was asked).
fn request_token(client: &Client, ask: &TokenAsk) -> Result<(String, SystemTime, u64), String> {
    let mut spec = json!({
        "expirationSeconds": ask.seconds,
        "boundObjectRef": {"apiVersion": "v1", "kind": "Pod", "name": ask.pod, "uid": ask.uid},
    });
    if !ask.audience.is_empty() {
        spec["audiences"] = json!([ask.audience]);
    }
    let body = json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": spec});
    let path = format!("/api/v1/namespaces/{}/serviceaccounts/{}/token", ask.namespace, ask.service_account);
    let r = client.call("POST", &path, JSON, Some(&body)).map_err(|e| e.to_string())?;
    if !r.ok() {
        return Err(r.describe());
    }
    let token = r.body["status"]["token"].as_str().filter(|t| !t.is_empty() && t.len() <= 64 << 10);
    let expires = r.body["status"]["expirationTimestamp"].as_str().and_then(crate::rfc3339::parse_seconds);
    match (token, expires) {
        (Some(t), Some(e)) => {
            Ok((t.to_string(), e, r.body["spec"]["expirationSeconds"].as_u64().unwrap_or(ask.seconds)))
        }
        _ => Err("the answer has no token or no expiry".into()),
    }
}

#[cfg(test)]
#[path = "needs_tests.rs"]
mod tests;
