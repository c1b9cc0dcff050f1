//! The API source, kubelet's third: the pods the API server binds to this node, taken from the
//! mirror's list and watch of the node's pods (`pods.rs`) and sent to the agent as the
//! snapshots of one source (`api`), as the file and URL sources send theirs; the merge,
//! admission, the engine and the probes take them from there. Which of the node's pods run
//! here is kubelet's rule ([`runs_here`], pure): not a mirror pod, not being deleted (those
//! stop; `pods.rs` then deletes them), not finished as the server shows them. Each is read by
//! the manifests' own pipeline (`pod::load::load_api`), once per resourceVersion.
//!
//! Better than kubelet at the edge: what was sent is kept on disk
//! (`<root-dir>/sources/api/pods.json`: written whole, root's only, only when the pods change,
//! not at each status write) and sent at start before the API server is asked, so after a
//! reboot with no link the pods run again, under their own UIDs (the runtime's sandboxes are
//! adopted, not started twice). The first list from the server replaces the kept copy: pods
//! deleted meanwhile stop, changed ones are updated.

use super::apiserver::Client;
use super::needs::Needs;
use crate::pod::{load::load_api, ManifestError, StaticPod};
use crate::source::{SourceId, Update};
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::SystemTime;

/// How a pod that runs from the kept copy is reported (`atoll pods`, `describe`).
pub const FROM_KEPT: &str = "from the copy kept on disk";

/// Where the API source keeps what it ran, and where it sends its snapshots.
#[derive(Clone, Debug)]
pub struct ApiSource {
    pub updates: smol::channel::Sender<Update>,
    /// `<root-dir>/sources/api`
    pub dir: PathBuf,
}

/// The kept copy (`pods.json`): `{"node": .., "pods": [..], "configMaps": [..], "sealed": ..}`,
/// the node it was for, the pods as the server sent them (no status), their ConfigMaps, and
/// their Secrets and tokens sealed with the node's key (`{"secrets": [..], "tokens": [..]}`).
const KEPT: &str = "pods.json";

/// Whether `pod`, one of the node's pods as the server shows it, runs here: bound to `node`,
/// not a mirror pod, not being deleted, not Succeeded or Failed.
pub fn runs_here(pod: &Value, node: &str) -> bool {
    let meta = &pod["metadata"];
    pod["spec"]["nodeName"].as_str() == Some(node)
        && meta["annotations"][super::objects::ANNOTATION_MIRROR].is_null()
        && meta["deletionTimestamp"].is_null()
        && !matches!(pod["status"]["phase"].as_str(), Some("Succeeded" | "Failed"))
}

/// The API source's state, on the mirror's pods thread.
pub struct Bound {
    to: ApiSource,
    node: String,
    /// Each pod's UID and resourceVersion last read, and what it read as.
    read: Vec<(String, String, Result<StaticPod, ManifestError>)>,
    /// The pods that run (sent last), as read and as the server sent them.
    pods: Vec<StaticPod>,
    raw: Vec<Value>,
    errors: Vec<ManifestError>,
    /// Pods the cluster deletes, with the grace period it gave them (`deletionGracePeriodSeconds`).
    leaving: Vec<StaticPod>,
    /// What they need from the API server.
    needs: Needs,
    /// The pods sent are the kept copy: the server has not listed the node's pods yet.
    from_kept: bool,
    /// The node's key, once read or made.
    key: Option<[u8; 32]>,
}

impl Bound {
    pub fn new(to: ApiSource, node: &str) -> Bound {
        Bound {
            to,
            node: node.to_string(),
            read: Vec::new(),
            pods: Vec::new(),
            raw: Vec::new(),
            errors: Vec::new(),
            leaving: Vec::new(),
            needs: Needs::default(),
            from_kept: true,
            key: None,
        }
    }

    fn kept_path(&self) -> PathBuf {
        self.to.dir.join(KEPT)
    }

    fn key(&mut self) -> Option<[u8; 32]> {
        if self.key.is_none() {
            match super::sealed::node_key(&self.to.dir.join("key")) {
                Ok(k) => self.key = Some(k),
                Err(e) => log::warn!("API source: the node's key in {}: {e}", self.to.dir.display()),
            }
        }
        self.key
    }

    /// At start, before the API server is asked: the kept pods and what they need as the
    /// source's first snapshot.
    pub fn start(&mut self) {
        let kept: Option<Value> = crate::records::read(&self.kept_path());
        let node = self.node.clone();
        // Nothing usable kept (never listed, another node's, unreadable): no snapshot until
        // the server lists, so the agent's first full sync does not stop the API pods the
        // runtime runs (kubelet waits for its API source the same way).
        let Some(mut kept) = kept.filter(|k| k["node"] == node.as_str()) else { return };
        let list = |v: &mut Value| match v.take() {
            Value::Array(items) => items,
            _ => Vec::new(),
        };
        let raw: Vec<Value> = list(&mut kept["pods"]).into_iter().filter(|p| runs_here(p, &node)).collect();
        (self.pods, self.errors) = self.read(raw.iter());
        self.raw = raw;
        let mut objects = list(&mut kept["configMaps"]);
        let mut tokens = Vec::new();
        if let Some(sealed) = kept["sealed"].as_str() {
            let opened = self.key().and_then(|k| super::sealed::open(&k, sealed));
            match opened.and_then(|b| crate::parse::json_as::<Value>(&b).ok()) {
                Some(v) => {
                    objects.extend(v["secrets"].as_array().cloned().unwrap_or_default());
                    tokens = v["tokens"].as_array().cloned().unwrap_or_default();
                }
                None => log::warn!("API source: the kept Secrets do not open with the node's key; left out"),
            }
        }
        self.needs = Needs::from_kept(objects, tokens);
        if !self.pods.is_empty() {
            log::info!("API source: {} pod(s) from the kept copy, until the API server lists them", self.pods.len());
        }
        self.send();
    }

    /// The pods that do not read (what atoll cannot run): each one's UID and why.
    pub fn refused(&self) -> Vec<(String, String)> {
        self.read.iter().filter_map(|(uid, _, got)| Some((uid.clone(), got.as_ref().err()?.to_string()))).collect()
    }

    /// Whether the pods running from this source are the kept copy.
    pub fn from_kept(&self) -> bool {
        self.from_kept
    }

    /// The node's pods as the server shows them now (`cache`, when it changed; None when
    /// nothing came), and what they need fetched: a new snapshot when what runs here or what
    /// it reads changed, kept on disk first.
    pub fn tick(&mut self, client: Option<&Arc<Client>>, cache: Option<&BTreeMap<String, Value>>) {
        let mut changed = false;
        if let Some(cache) = cache {
            let raw: Vec<Value> = cache.values().filter(|p| runs_here(p, &self.node)).map(without_status).collect();
            let (pods, errors) = self.read(raw.iter());
            self.leaving = leaving(cache, &self.pods);
            if self.from_kept || pods != self.pods || errors != self.errors {
                (self.pods, self.errors, self.raw, self.from_kept) = (pods, errors, raw, false);
                changed = true;
            }
        }
        changed |= self.needs.sync(client, &self.pods, changed, SystemTime::now());
        if changed {
            self.keep();
            self.send();
        }
    }

    /// The pods, their ConfigMaps, and their Secrets and tokens sealed, written whole.
    fn keep(&mut self) {
        let (objects, tokens) = self.needs.to_keep();
        let (secrets, config_maps): (Vec<Value>, Vec<Value>) = objects.into_iter().partition(|o| o["kind"] == "Secret");
        let sealed = match (secrets.is_empty() && tokens.is_empty(), self.key()) {
            (true, _) => None,
            (false, Some(k)) => {
                super::sealed::seal(&k, json!({"secrets": secrets, "tokens": tokens}).to_string().as_bytes())
            }
            (false, None) => None,
        };
        let kept = json!({"node": self.node, "pods": self.raw, "configMaps": config_maps, "sealed": sealed});
        if let Err(e) = crate::records::write(&self.kept_path(), &kept) {
            log::warn!("API source: cannot keep the node's pods in {}: {e}", self.to.dir.display());
        }
    }

    /// Each pod read once per resourceVersion; one that does not read is reported once.
    fn read<'a>(&mut self, pods: impl Iterator<Item = &'a Value>) -> (Vec<StaticPod>, Vec<ManifestError>) {
        let mut seen = Vec::new();
        for p in pods {
            let uid = p["metadata"]["uid"].as_str().unwrap_or_default().to_string();
            let rv = p["metadata"]["resourceVersion"].as_str().unwrap_or_default().to_string();
            let before = self.read.iter().position(|(u, was, _)| *u == uid && *was == rv && !rv.is_empty());
            let got = match before {
                Some(i) => self.read.swap_remove(i).2,
                None => {
                    let got = load_api(p.clone());
                    if let Err(e) = &got {
                        log::warn!("API source: {e}");
                    }
                    got
                }
            };
            seen.push((uid, rv, got));
        }
        self.read = seen;
        let mut ok: Vec<StaticPod> = Vec::new();
        let mut errors = Vec::new();
        for (_, _, got) in &self.read {
            match got {
                Ok(sp) => ok.push(sp.clone()),
                Err(e) => errors.push(e.clone()),
            }
        }
        ok.sort_by(|a, b| a.uid.cmp(&b.uid));
        errors.sort_by(|a, b| a.origin.cmp(&b.origin));
        (ok, errors)
    }

    fn send(&mut self) {
        let update = Update {
            source: SourceId::Api,
            pods: self.pods.clone(),
            objects: self.needs.objects(),
            errors: self.errors.clone(),
            payloads: Vec::new(),
            leaving: self.leaving.clone(),
        };
        // The agent takes snapshots as fast as it handles them; gone, it is stopping.
        let _ = self.to.updates.send_blocking(update);
    }
}

/// The pods of `running` that the server shows being deleted, each with the grace period the
/// deletion gave it (kubelet kills with the deletion's, at least a second).
pub fn leaving(cache: &BTreeMap<String, Value>, running: &[StaticPod]) -> Vec<StaticPod> {
    let mut out = Vec::new();
    for p in cache.values().filter(|p| p["metadata"]["deletionTimestamp"].is_string()) {
        let Some(sp) = running.iter().find(|sp| p["metadata"]["uid"] == sp.uid.as_str()) else { continue };
        let mut sp = sp.clone();
        if let Some(g) = p["metadata"]["deletionGracePeriodSeconds"].as_i64() {
            Arc::make_mut(&mut sp.pod).spec.termination_grace_period_seconds = Some(g.max(1));
        }
        out.push(sp);
    }
    out
}

/// A pod as kept: what the server sent but its status and its managed fields.
fn without_status(pod: &Value) -> Value {
    let mut p = pod.clone();
    if let Some(o) = p.as_object_mut() {
        o.remove("status");
    }
    if let Some(m) = p["metadata"].as_object_mut() {
        m.remove("managedFields");
    }
    p
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(name: &str, uid: &str, rv: &str) -> Value {
        json!({
            "metadata": {"name": name, "namespace": "default", "uid": uid, "resourceVersion": rv,
                         "managedFields": [{"manager": "kubectl"}]},
            "spec": {"nodeName": "edge-1", "containers": [{"name": "c", "image": "busybox:1.36"}]},
            "status": {"phase": "Running"}
        })
    }

    #[test]
    fn what_runs_here_is_bound_not_a_mirror_not_deleted_not_finished() {
        let base = pod("a", "u1", "1");
        assert!(runs_here(&base, "edge-1"));
        assert!(!runs_here(&base, "edge-2"), "bound to another node");
        let mut mirror = base.clone();
        mirror["metadata"]["annotations"] = json!({"kubernetes.io/config.mirror": "h"});
        assert!(!runs_here(&mirror, "edge-1"), "a mirror pod");
        let mut deleted = base.clone();
        deleted["metadata"]["deletionTimestamp"] = json!("2026-11-28T00:00:00Z");
        assert!(!runs_here(&deleted, "edge-1"), "being deleted");
        for phase in ["Succeeded", "Failed"] {
            let mut done = base.clone();
            done["status"]["phase"] = json!(phase);
            assert!(!runs_here(&done, "edge-1"), "{phase}");
        }
        let mut pending = base.clone();
        pending["status"]["phase"] = json!("Pending");
        assert!(runs_here(&pending, "edge-1"));
    }

    fn bound(dir: &std::path::Path) -> (Bound, smol::channel::Receiver<Update>) {
        let (tx, rx) = smol::channel::unbounded();
        (Bound::new(ApiSource { updates: tx, dir: dir.to_path_buf() }, "edge-1"), rx)
    }

    fn names(u: &Update) -> Vec<String> {
        u.pods.iter().map(|p| p.pod.metadata.name.clone()).collect()
    }

    #[test]
    fn snapshots_go_out_when_the_pods_change_and_the_kept_copy_serves_the_next_start() {
        let dir = crate::testdir::TestDir::new("bound");
        let (mut b, rx) = bound(&dir);
        b.start();
        assert!(rx.try_recv().is_err(), "nothing kept yet: no snapshot until the server lists");
        assert!(b.from_kept());

        let mut cache = BTreeMap::from([("default/a".to_string(), pod("a", "u1", "1"))]);
        b.tick(None, Some(&cache));
        let u = rx.try_recv().unwrap();
        assert_eq!(names(&u), ["a"]);
        assert_eq!(u.pods[0].uid, "u1", "the server's UID, not a hash");
        assert_eq!(u.pods[0].pod.metadata.annotations["kubernetes.io/config.source"], "api");
        assert!(!b.from_kept());

        // A status write (a new resourceVersion, the same pod): nothing to send or keep.
        cache.get_mut("default/a").unwrap()["metadata"]["resourceVersion"] = json!("2");
        cache.get_mut("default/a").unwrap()["status"]["phase"] = json!("Pending");
        b.tick(None, Some(&cache));
        assert!(rx.try_recv().is_err());

        // A second pod, and a broken one (reported, the others run).
        cache.insert("default/b".into(), pod("b", "u2", "3"));
        let mut broken = pod("bad", "u3", "4");
        broken["spec"]["restartPolicy"] = json!("Sometimes");
        cache.insert("default/bad".into(), broken);
        b.tick(None, Some(&cache));
        let u = rx.try_recv().unwrap();
        assert_eq!(names(&u), ["a", "b"]);
        assert_eq!(u.errors.len(), 1, "{:?}", u.errors);
        assert!(u.errors[0].to_string().contains("spec.restartPolicy"), "{}", u.errors[0]);

        // The kept copy: root's only, no status, no managed fields.
        let text = std::fs::read_to_string(dir.join("pods.json")).unwrap();
        assert!(!text.contains("managedFields") && !text.contains("\"phase\""), "{text}");
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(dir.join("pods.json")).unwrap().permissions().mode();
        assert_eq!(mode & 0o077, 0);

        // The next start (no server yet) runs them from the kept copy, then the server's list
        // replaces it even when it says the same.
        let (mut again, rx) = bound(&dir);
        again.start();
        assert_eq!(names(&rx.try_recv().unwrap()), ["a", "b"]);
        assert!(again.from_kept());
        cache.remove("default/b");
        again.tick(None, Some(&cache));
        assert_eq!(names(&rx.try_recv().unwrap()), ["a"]);

        // Kept for another node name: not run.
        let (tx, rx) = smol::channel::unbounded();
        let mut other = Bound::new(ApiSource { updates: tx, dir: dir.to_path_buf() }, "edge-2");
        other.start();
        assert!(rx.try_recv().is_err(), "another node's copy is not run");
    }

    #[test]
    fn a_pod_the_cluster_deletes_leaves_with_the_deletions_grace_and_the_merge_stops_it_so() {
        let dir = crate::testdir::TestDir::new("bound-leaving");
        let (mut b, rx) = bound(&dir);
        b.start();
        let mut merger = crate::source::merge::Merger::new([SourceId::Api]);
        let mut cache = BTreeMap::from([("default/a".to_string(), pod("a", "u1", "1"))]);
        cache.get_mut("default/a").unwrap()["spec"]["terminationGracePeriodSeconds"] = json!(30);
        b.tick(None, Some(&cache));
        let added = merger.apply(rx.try_recv().unwrap(), SystemTime::UNIX_EPOCH);
        assert_eq!(crate::runtime::stop::grace_of(&added[0].pod().pod).as_secs(), 30);
        // kubectl delete --grace-period=2.
        let a = cache.get_mut("default/a").unwrap();
        a["metadata"]["deletionTimestamp"] = json!("2026-11-28T10:00:00Z");
        a["metadata"]["deletionGracePeriodSeconds"] = json!(2);
        a["metadata"]["resourceVersion"] = json!("2");
        b.tick(None, Some(&cache));
        let removed = merger.apply(rx.try_recv().unwrap(), SystemTime::UNIX_EPOCH);
        assert!(matches!(removed.as_slice(), [crate::pod::Change::Remove(_)]), "{removed:?}");
        assert_eq!(crate::runtime::stop::grace_of(&removed[0].pod().pod).as_secs(), 2);
        // The deletion's grace is the truth, longer too (kubelet's), and at least a second.
        let running = [load_api(pod("a", "u1", "1")).unwrap()];
        for (given, used) in [(600, 600), (0, 1)] {
            let mut c = cache.clone();
            c.get_mut("default/a").unwrap()["metadata"]["deletionGracePeriodSeconds"] = json!(given);
            assert_eq!(crate::runtime::stop::grace_of(&leaving(&c, &running)[0].pod).as_secs(), used);
        }
    }
}
