//! Mirror pods: the node's pods listed and watched from the API server; for each static pod
//! its mirror created (or replaced when outdated or being deleted), its status patched when it
//! changed, refusals reported locally and retried, mirrors of vanished static pods deleted.
//! The same list feeds the API source (`bound`); a bound pod's status is patched as a mirror's
//! is, and one the cluster deletes is deleted for good (grace 0, its UID as precondition) once
//! it no longer runs here, as kubelet's status manager does.

use super::apiserver::Client;
use super::bound::Bound;
use super::objects;
use super::patch;
use super::retry::{fail_of, jitter, transient, Failure, Retry, JSON, SMP};
use super::state::{Env, Options};
use super::watch::Seen;
use crate::pod::StaticPod;
use serde_json::{json, Value};
use std::collections::{BTreeMap, HashMap};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// A mirror the server refused: when to try again.
struct Refused {
    delay: Duration,
    until: Instant,
    why: String,
}

struct Pods<'a> {
    client: &'a Client,
    opts: &'a Options,
    shared: &'a Env,
    /// The node's pods as the server shows them, by namespace/name (None before the first list).
    cache: Option<BTreeMap<String, Value>>,
    /// By mirror UID: the status last written.
    sent: HashMap<String, Value>,
    /// By static pod UID.
    refused: HashMap<crate::pod::PodUid, Refused>,
    backoff: Retry,
    /// The API source, when it is on.
    bound: Option<Bound>,
}

pub(super) fn uid_of(pod: &Value) -> String {
    pod["metadata"]["uid"].as_str().unwrap_or_default().to_string()
}

fn key_of(pod: &Value) -> String {
    format!(
        "{}/{}",
        pod["metadata"]["namespace"].as_str().unwrap_or_default(),
        pod["metadata"]["name"].as_str().unwrap_or_default()
    )
}

pub(super) fn pods_loop(
    client: &std::sync::Arc<Client>,
    opts: &Options,
    shared: &Env,
    rx: &mpsc::Receiver<Seen>,
    bound: Option<Bound>,
) {
    let mut p = Pods {
        client,
        opts,
        shared,
        cache: None,
        sent: HashMap::new(),
        refused: HashMap::new(),
        backoff: Retry::default(),
        bound,
    };
    loop {
        // Changes from the server, then at most a second for the agent's side to change.
        let came = match rx.recv_timeout(Duration::from_secs(1)) {
            Ok(seen) => {
                p.apply(seen);
                while let Ok(seen) = rx.try_recv() {
                    p.apply(seen);
                }
                true
            }
            Err(mpsc::RecvTimeoutError::Timeout) => false,
            Err(mpsc::RecvTimeoutError::Disconnected) => return,
        };
        // The API source: its pods when they came, what they need every time.
        if let Some(bound) = &mut p.bound {
            bound.tick(Some(client), p.cache.as_ref().filter(|_| came));
        }
        if p.backoff.waiting() {
            continue;
        }
        match p.reconcile() {
            Ok(()) => p.backoff.ok(),
            Err((why, retry_after)) => {
                let wait = p.backoff.fail(retry_after);
                log::warn!("API server: {why}; retrying in {wait:.1?}");
            }
        }
    }
}

impl Pods<'_> {
    fn apply(&mut self, seen: Seen) {
        match seen {
            Seen::Listed(items) => {
                self.cache = Some(items.into_iter().map(|p| (key_of(&p), p)).collect());
            }
            Seen::Event(kind, pod) => {
                let Some(cache) = &mut self.cache else { return };
                let key = key_of(&pod);
                if kind == "DELETED" {
                    if cache.get(&key).is_some_and(|c| c["metadata"]["uid"] == pod["metadata"]["uid"]) {
                        cache.remove(&key);
                    }
                } else {
                    cache.insert(key, pod);
                }
            }
        }
    }

    fn report(&self, uid: &str, text: String) {
        self.shared.state.set_report(uid, text);
    }

    /// One pass: every static pod's mirror made to match, orphans deleted, statuses written.
    fn reconcile(&mut self) -> Result<(), Failure> {
        let (generation, all) = self.shared.state.desired();
        if generation == 0 {
            // The agent has not said what it runs yet.
            return Ok(());
        }
        let (bound, desired): (Vec<&StaticPod>, Vec<&StaticPod>) =
            all.iter().partition(|sp| sp.origin == crate::pod::Origin::Api);
        self.bound_pods(&bound)?;
        let Some(node_uid) = self.shared.state.node_uid() else {
            for sp in desired.iter() {
                if self.shared.state.report(&sp.uid).is_none() {
                    self.report(&sp.uid, "waiting for the node to be registered".into());
                }
            }
            return Ok(());
        };
        if self.cache.is_none() {
            return Ok(());
        }
        for sp in desired.iter() {
            self.one(sp, &node_uid)?;
        }
        // Orphans: mirrors of static pods that are gone and no longer stopping.
        let running = self.shared.node.statuses().uids();
        let orphans: Vec<Value> = self
            .cache
            .iter()
            .flatten()
            .filter(|(key, pod)| {
                objects::mirror_hash(pod).is_some_and(|h| !running.iter().any(|u| u == h))
                    && !desired.iter().any(|sp| sp.pod.key() == **key)
            })
            .map(|(_, pod)| pod.clone())
            .collect();
        for pod in orphans {
            log::info!("mirror pod {}: its static pod is gone; deleting it", key_of(&pod));
            self.delete(&pod)?;
        }
        // Nothing outlives what it is about.
        let mirrors: Vec<String> = self.cache.iter().flatten().map(|(_, p)| uid_of(p)).collect();
        self.sent.retain(|uid, _| mirrors.contains(uid));
        self.refused.retain(|uid, _| desired.iter().any(|sp| sp.uid == *uid));
        crate::locks::lock(&self.shared.state.reports)
            .retain(|uid, _| all.iter().any(|sp| sp.uid == *uid) || running.iter().any(|r| r == uid));
        Ok(())
    }

    /// The API source's pods: each one's status written to it and where it runs from reported;
    /// those the cluster deletes, deleted for good once they no longer run here.
    fn bound_pods(&mut self, bound: &[&StaticPod]) -> Result<(), Failure> {
        let Some(from_kept) = self.bound.as_ref().map(Bound::from_kept) else { return Ok(()) };
        for sp in bound {
            let on_server = self.cache.as_ref().and_then(|c| c.get(&sp.pod.key())).filter(|p| uid_of(p) == *sp.uid);
            match on_server.cloned() {
                Some(pod) => {
                    self.report(&sp.uid, "bound to the node by the API server".into());
                    self.sync_status(sp, &pod)?;
                }
                None if from_kept => self.report(
                    &sp.uid,
                    format!("{}: the API server has not listed the node's pods yet", super::bound::FROM_KEPT),
                ),
                None => {}
            }
        }
        // A pod atoll cannot run is reported Failed, as kubelet reports a pod it rejects.
        for (uid, why) in self.bound.as_ref().map(Bound::refused).unwrap_or_default() {
            let Some(pod) = self.cache.iter().flatten().map(|(_, p)| p).find(|p| uid_of(p) == uid).cloned() else {
                continue;
            };
            let mut want = pod["status"].clone();
            want["phase"] = "Failed".into();
            want["reason"] = "UnsupportedPodSpec".into();
            want["message"] = format!("Pod was rejected: {why}").into();
            let Some(patch) = patch::status_patch(&want, &pod).filter(|_| self.sent.get(&uid) != Some(&want)) else {
                continue;
            };
            let path = format!("/api/v1/namespaces/{}/status", key_of(&pod).replacen('/', "/pods/", 1));
            let r = self.client.call("PATCH", &path, SMP, Some(&patch)).map_err(Failure::from)?;
            if transient(&r) {
                return Err(fail_of(&format!("status of pod {}", key_of(&pod)), &r));
            }
            self.sent.insert(uid, want);
        }
        let running = self.shared.node.statuses().uids();
        let gone: Vec<Value> = self
            .cache
            .iter()
            .flatten()
            .map(|(_, p)| p)
            .filter(|p| {
                objects::mirror_hash(p).is_none()
                    && p["metadata"]["deletionTimestamp"].is_string()
                    && !running.iter().any(|u| *u == uid_of(p))
            })
            .cloned()
            .collect();
        for pod in gone {
            log::info!("pod {}: deleted in the cluster and stopped here; removing it", key_of(&pod));
            self.delete(&pod)?;
        }
        Ok(())
    }

    fn one(&mut self, sp: &StaticPod, node_uid: &str) -> Result<(), Failure> {
        let key = sp.pod.key();
        let existing = self.cache.as_ref().and_then(|c| c.get(&key)).cloned();
        if let Some(m) = &existing {
            match objects::mirror_hash(m) {
                None => {
                    self.report(
                        &sp.uid,
                        "not mirrored: the API server has a pod of this name that is not a mirror".into(),
                    );
                    return Ok(());
                }
                Some(h) if sp.uid == *h && !m["metadata"]["deletionTimestamp"].is_string() => {
                    return self.sync_status(sp, m);
                }
                Some(_) => {
                    // Outdated, or deleted by a user: replace it (the static pod runs on).
                    log::info!("mirror pod {key}: outdated or being deleted; replacing it");
                    self.delete(m)?;
                }
            }
        }
        if self.refused.get(&sp.uid).is_some_and(|r| Instant::now() < r.until) {
            return Ok(());
        }
        // The hash stays the static pod's UID whatever is shown: a redacted mirror is current.
        let shown = match self.opts.encrypted_pod_specs {
            true => std::borrow::Cow::Borrowed(&*sp.pod),
            false => crate::pod::redact::for_unprivileged(&sp.pod),
        };
        let body = objects::mirror_pod(&shown, &sp.uid, &self.opts.node, node_uid);
        let path = format!("/api/v1/namespaces/{}/pods", sp.pod.metadata.namespace);
        let r = self.client.call("POST", &path, JSON, Some(&body)).map_err(Failure::from)?;
        match r.status {
            200 | 201 => {
                let uid = uid_of(&r.body);
                log::info!("mirror pod {key} created (uid {uid})");
                self.report(&sp.uid, format!("mirrored (uid {uid})"));
                self.refused.remove(&sp.uid);
                if let Some(c) = &mut self.cache {
                    c.insert(key, r.body.clone());
                }
                self.sync_status(sp, &r.body)
            }
            409 if r.reason() == "AlreadyExists" => {
                // Created by an earlier attempt whose answer was lost, or not a mirror: look.
                let r = self.client.call("GET", &format!("{path}/{}", sp.pod.metadata.name), JSON, None);
                match r.map_err(Failure::from)? {
                    got if got.ok() => {
                        if let Some(c) = &mut self.cache {
                            c.insert(key, got.body);
                        }
                        Ok(())
                    }
                    got => Err(fail_of("existing mirror pod", &got)),
                }
            }
            _ if transient(&r) => Err(fail_of(&format!("creating mirror pod {key}"), &r)),
            _ => {
                self.refuse(sp, r.describe());
                Ok(())
            }
        }
    }

    /// The server said no (admission, validation): report it locally, retry later (10 s
    /// doubling to 5 min). The static pod is not touched.
    fn refuse(&mut self, sp: &StaticPod, why: String) {
        let key = sp.pod.key();
        let entry = self.refused.entry(sp.uid.clone()).or_insert(Refused {
            delay: Duration::ZERO,
            until: Instant::now(),
            why: String::new(),
        });
        entry.delay = if entry.delay.is_zero() {
            Duration::from_secs(10)
        } else {
            (entry.delay * 2).min(Duration::from_secs(300))
        };
        entry.until = Instant::now() + jitter(entry.delay);
        if entry.why != why {
            log::warn!("mirror pod {key}: refused by the API server: {why}; the static pod runs on");
            self.shared.node.events().record(
                &sp.pod,
                true,
                "MirrorPodRejected",
                &format!("mirror pod refused by the API server: {why}"),
            );
            entry.why = why.clone();
        }
        let retry = entry.delay;
        self.report(&sp.uid, format!("refused by the API server ({why}); retrying every {retry:?} at most"));
    }

    /// DELETE with grace 0 and the pod's UID as precondition; gone or replaced is fine.
    fn delete(&mut self, pod: &Value) -> Result<(), Failure> {
        let key = key_of(pod);
        let uid = pod["metadata"]["uid"].clone();
        let options = json!({
            "apiVersion": "v1",
            "kind": "DeleteOptions",
            "gracePeriodSeconds": 0,
            "preconditions": {"uid": uid},
        });
        let (ns, name) = key.split_once('/').unwrap_or_default();
        let path = format!("/api/v1/namespaces/{ns}/pods/{name}");
        let r = self.client.call("DELETE", &path, JSON, Some(&options)).map_err(Failure::from)?;
        if !(r.ok() || r.status == 404 || r.status == 409) {
            return Err(fail_of(&format!("deleting pod {key}"), &r));
        }
        if let Some(c) = &mut self.cache {
            if c.get(&key).is_some_and(|p| p["metadata"]["uid"] == uid) {
                c.remove(&key);
            }
        }
        if let Some(u) = uid.as_str() {
            self.sent.remove(u);
        }
        Ok(())
    }

    /// Writes the static pod's status to its mirror when it differs from the last one written.
    fn sync_status(&mut self, sp: &StaticPod, mirror: &Value) -> Result<(), Failure> {
        let Some(ours) = self.shared.node.statuses().get(&sp.uid) else { return Ok(()) };
        let muid = uid_of(mirror);
        let want = objects::desired_status(&ours, mirror);
        if self.sent.get(&muid) == Some(&want) {
            return Ok(());
        }
        let Some(patch) = patch::status_patch(&want, mirror) else {
            self.sent.insert(muid, want);
            return Ok(());
        };
        let path = format!("/api/v1/namespaces/{}/pods/{}/status", sp.pod.metadata.namespace, sp.pod.metadata.name);
        // A strategic merge patch, as kubelet's status manager sends: conditions merge by type,
        // so one another writer added since the last watch event stays.
        let r = self.client.call("PATCH", &path, SMP, Some(&patch)).map_err(Failure::from)?;
        match r.status {
            200 => {
                if let Some(c) = &mut self.cache {
                    c.insert(sp.pod.key(), r.body);
                }
                if sp.origin != crate::pod::Origin::Api {
                    self.report(&sp.uid, format!("mirrored (uid {muid})"));
                }
                self.sent.insert(muid, want);
                Ok(())
            }
            // Deleted or replaced meanwhile: the watch will tell.
            404 | 409 => Ok(()),
            _ if transient(&r) => Err(fail_of(&format!("status of mirror pod {}", sp.pod.key()), &r)),
            _ => {
                log::warn!("mirror pod {}: status refused: {}", sp.pod.key(), r.describe());
                self.sent.insert(muid, want);
                Ok(())
            }
        }
    }
}
