//! What the API source's pods need from the API server, fetched as kubelet fetches it: the
//! Secrets and ConfigMaps they reference (`kube-root-ca.crt` and pull secrets among them),
//! each watched by name in the pod's namespace (a `metadata.name` field selector: all the node
//! authorizer lets a node read), and their projected service account tokens (TokenRequest,
//! bound to the pod by name and UID, asked again once 80 % of the asked lifetime has passed or
//! after 24 hours, as kubelet's token manager does). A token is held as a Secret whose name no
//! API object can have (`pod::references::token_object`), so the volume code reads it as it
//! reads any Secret. Which objects a set of pods needs is a pure function ([`wanted`]);
//! whether a token is due, another ([`due`]).

use super::apiserver::Client;
use super::retry::{jitter, JSON};
use super::watch::{watch_list, Seen};
use crate::objects::LocalObject;
use crate::pod::references::{object_refs, token_object, ObjectKind};
use crate::pod::StaticPod;
use serde_json::{json, Value};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant, SystemTime};

/// An object by kind, namespace and name.
pub type Ref = (ObjectKind, String, String);

/// The most objects watched at once (a watch is a thread blocked on the shared connection).
const MAX_WATCHES: usize = 512;

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

/// The Secrets and ConfigMaps `pods` reference (not their tokens), and the tokens they
/// project, by the name the token is held under.
pub fn wanted(pods: &[StaticPod]) -> (BTreeSet<Ref>, BTreeMap<String, TokenAsk>) {
    let mut refs = BTreeSet::new();
    let mut tokens = BTreeMap::new();
    for sp in pods {
        let (pod, ns) = (&sp.pod, &sp.pod.metadata.namespace);
        for r in object_refs(pod).into_iter().filter(|r| !r.name.contains('/')) {
            refs.insert((r.kind, ns.clone(), r.name));
        }
        for s in &pod.spec.image_pull_secrets {
            if let Some(name) = s["name"].as_str().filter(|n| !n.is_empty()) {
                refs.insert((ObjectKind::Secret, ns.clone(), name.to_string()));
            }
        }
        for v in &pod.spec.volumes {
            let Some(p) = &v.projected else { continue };
            for (j, t) in p.sources.iter().enumerate().filter_map(|(j, s)| Some((j, s.service_account_token.as_ref()?)))
            {
                let ask = TokenAsk {
                    namespace: ns.clone(),
                    service_account: pod
                        .spec
                        .service_account_name
                        .clone()
                        .filter(|s| !s.is_empty())
                        .unwrap_or_else(|| "default".into()),
                    pod: pod.metadata.name.clone(),
                    uid: pod.metadata.uid.clone(),
                    audience: t["audience"].as_str().unwrap_or("").to_string(),
                    seconds: t["expirationSeconds"].as_u64().unwrap_or(3600),
                };
                tokens.insert(token_object(&pod.metadata.uid, &v.name, j), ask);
            }
        }
    }
    (refs, tokens)
}

/// Whether a token that expires at `expires`, asked for `seconds`, is to be asked again at
/// `now`: kubelet's rule, once 80 % of the asked lifetime has passed (less `slack`, kubelet's
/// jitter of up to 10 s) or after 24 hours.
pub fn due(expires: SystemTime, seconds: u64, now: SystemTime, slack: Duration) -> bool {
    let lifetime = Duration::from_secs(seconds);
    let issued = expires.checked_sub(lifetime).unwrap_or(SystemTime::UNIX_EPOCH);
    let day = issued + Duration::from_secs(24 * 3600);
    let fifth = expires.checked_sub(lifetime / 5).unwrap_or(SystemTime::UNIX_EPOCH);
    now + slack > day || now + slack > fifth
}

struct Watched {
    rx: mpsc::Receiver<Seen>,
    current: Option<Value>,
}

struct Token {
    ask: TokenAsk,
    value: String,
    expires: SystemTime,
}

/// The watches and tokens of the API source's pods.
#[derive(Default)]
pub struct Needs {
    watches: BTreeMap<Ref, Watched>,
    tokens: BTreeMap<String, Token>,
    /// A token that could not be had: when to ask again.
    retry: BTreeMap<String, Instant>,
    /// Objects from the kept copy, served until their watch has listed.
    kept: BTreeMap<Ref, Value>,
    /// What the last `objects` call returned, by what it is.
    decoded: BTreeMap<Ref, Result<Arc<LocalObject>, String>>,
}

impl Needs {
    /// The objects and tokens of the kept copy (the tokens as long as they are not expired).
    pub fn from_kept(objects: Vec<Value>, tokens: Vec<Value>, now: SystemTime) -> Needs {
        let mut n = Needs::default();
        for o in objects {
            let kind = if o["kind"] == "Secret" { ObjectKind::Secret } else { ObjectKind::ConfigMap };
            let meta = &o["metadata"];
            let key = (
                kind,
                meta["namespace"].as_str().unwrap_or("").to_string(),
                meta["name"].as_str().unwrap_or("").to_string(),
            );
            n.kept.insert(key, o);
        }
        for t in tokens {
            let (Some(name), Some(value), Some(expires)) =
                (t["object"].as_str(), t["token"].as_str(), t["expires"].as_u64())
            else {
                continue;
            };
            let expires = SystemTime::UNIX_EPOCH + Duration::from_secs(expires);
            let Ok(ask) = serde_json::from_value::<(String, String, String, String, String, u64)>(t["ask"].clone())
            else {
                continue;
            };
            let (namespace, service_account, pod, uid, audience, seconds) = ask;
            let ask = TokenAsk { namespace, service_account, pod, uid, audience, seconds };
            if expires > now {
                n.tokens.insert(name.to_string(), Token { ask, value: value.to_string(), expires });
            }
        }
        n
    }

    /// Brings the watches and tokens in line with `pods` (with a client: offline, the kept
    /// ones serve); returns whether anything the pods read changed.
    pub fn sync(&mut self, client: Option<&Arc<Client>>, pods: &[StaticPod], now: SystemTime) -> bool {
        let (refs, tokens) = wanted(pods);
        let mut changed = false;
        // Watches: the wanted ones started, the others dropped (their threads end at their
        // next event or the watch's end, when the send fails).
        self.watches.retain(|r, _| refs.contains(r));
        self.kept.retain(|r, _| refs.contains(r));
        if let Some(client) = client {
            let room = MAX_WATCHES.saturating_sub(self.watches.len());
            let new: Vec<&Ref> = refs.iter().filter(|r| !self.watches.contains_key(*r)).take(room).collect();
            for r in new {
                let (tx, rx) = mpsc::sync_channel(16);
                let (client, path) = (client.clone(), list_path(r));
                let what = format!("{} {}/{}", r.0.resource(), r.1, r.2);
                let spawned = std::thread::Builder::new()
                    .name("atoll-api-object".into())
                    .spawn(move || watch_list(&client, &path, &what, &tx));
                if spawned.is_ok() {
                    self.watches.insert(r.clone(), Watched { rx, current: None });
                }
            }
        }
        for (r, w) in &mut self.watches {
            while let Ok(seen) = w.rx.try_recv() {
                let next = match seen {
                    Seen::Listed(items) => items.into_iter().find(|o| o["metadata"]["name"] == r.2.as_str()),
                    Seen::Event(kind, _) if kind == "DELETED" => None,
                    Seen::Event(_, o) => Some(o),
                };
                changed |= next != w.current || self.kept.remove(r).is_some();
                w.current = next;
            }
        }
        // Tokens: asked when new or due, kept while their pod wants them.
        self.tokens.retain(|name, _| tokens.contains_key(name));
        self.retry.retain(|name, _| tokens.contains_key(name));
        for (name, ask) in &tokens {
            let have = self.tokens.get(name).filter(|t| t.ask == *ask);
            let fresh = have.is_some_and(|t| !due(t.expires, t.ask.seconds, now, jitter(Duration::from_secs(10))));
            let waiting = self.retry.get(name).is_some_and(|at| Instant::now() < *at);
            let Some(client) = client.filter(|_| !fresh && !waiting) else { continue };
            match request_token(client, ask) {
                Ok((value, expires)) => {
                    self.retry.remove(name);
                    self.tokens.insert(name.clone(), Token { ask: ask.clone(), value, expires });
                    changed = true;
                }
                Err(why) => {
                    log::warn!("service account token for pod {}/{}: {why}", ask.namespace, ask.pod);
                    self.retry.insert(name.clone(), Instant::now() + jitter(Duration::from_secs(10)));
                }
            }
        }
        changed
    }

    /// The objects the pods read now: each watched (or kept) Secret and ConfigMap, and the
    /// tokens. One the API server sends that does not read is reported once and left out.
    pub fn objects(&mut self) -> Vec<Arc<LocalObject>> {
        let mut out = Vec::new();
        let current: Vec<(Ref, &Value)> = self
            .watches
            .iter()
            .filter_map(|(r, w)| Some((r.clone(), w.current.as_ref()?)))
            .chain(self.kept.iter().map(|(r, v)| (r.clone(), v)))
            .collect();
        let mut decoded = BTreeMap::new();
        for (r, v) in current {
            let got = decode(&r, v.clone());
            if let (Err(e), false) =
                (&got, self.decoded.get(&r).is_some_and(|d| d.as_ref().err() == got.as_ref().err()))
            {
                log::warn!("API source: {} {}/{}: {e}", r.0.as_str(), r.1, r.2);
            }
            if let Ok(o) = &got {
                out.push(o.clone());
            }
            decoded.insert(r, got);
        }
        self.decoded = decoded;
        for (name, t) in &self.tokens {
            out.push(Arc::new(LocalObject {
                kind: ObjectKind::Secret,
                namespace: t.ask.namespace.clone(),
                name: name.clone(),
                data: BTreeMap::from([("token".to_string(), t.value.clone().into_bytes())]),
                immutable: false,
                secret_type: "atoll.io/service-account-token".into(),
                origin: "the API server".into(),
            }));
        }
        out
    }

    /// What is kept on disk of them: the objects as the server sent them (no managed
    /// fields), and the tokens with what they were asked for.
    pub fn to_keep(&self) -> (Vec<Value>, Vec<Value>) {
        let objects = self
            .watches
            .iter()
            .filter_map(|(r, w)| Some((r, w.current.clone()?)))
            .chain(self.kept.iter().map(|(r, v)| (r, v.clone())))
            .map(|(r, mut v)| {
                v["kind"] = r.0.as_str().into();
                v["apiVersion"] = "v1".into();
                if let Some(m) = v["metadata"].as_object_mut() {
                    m.remove("managedFields");
                }
                v
            })
            .collect();
        let tokens = self
            .tokens
            .iter()
            .map(|(name, t)| {
                let a = &t.ask;
                let secs = t.expires.duration_since(SystemTime::UNIX_EPOCH).unwrap_or_default().as_secs();
                json!({"object": name, "token": t.value, "expires": secs,
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
    let o = crate::objects::decode::decode(v, "", "the API server", &mut warnings)
        .map_err(|p| p.iter().map(ToString::to_string).collect::<Vec<_>>().join("; "))?;
    if (o.kind, &o.namespace, &o.name) != (r.0, &r.1, &r.2) {
        return Err("the server answered with another object".into());
    }
    Ok(Arc::new(o))
}

/// TokenRequest for one projection, bound to its pod: the token and when it expires.
fn request_token(client: &Client, ask: &TokenAsk) -> Result<(String, SystemTime), String> {
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
        (Some(t), Some(e)) => Ok((t.to_string(), e)),
        _ => Err("the answer has no token or no expiry".into()),
    }
}

#[cfg(test)]
#[path = "needs_tests.rs"]
mod tests;
