//! Mirroring to an API server when one is reachable: the Node, its Lease, a mirror pod per
//! static pod, and their status.
//!
//! The API server is a window, never a dependency. The mirror runs on its own threads with
//! blocking, deadline-bound requests; it reads the desired static pods and their statuses and
//! writes nothing the pod engine reads, so nothing the API server does (or fails to do) can
//! delay, stop or restart a local pod. Every loop is level-triggered: it compares what the
//! server shows (a list + watch of the node's pods, the last Node and Lease answers) with what
//! the agent has, and sends only the difference, so a server that comes back converges with no
//! replay of missed work and nothing queues up while it is away. At steady state the only
//! traffic is the Lease renewal, the watch's periodic re-establishment and the node status
//! report every `nodeStatusReportFrequency`.
//!
//! Failures back off with jitter (1 s doubling to 60 s; `Retry-After` honoured up to 5 min).
//! A mirror the server refuses (admission) is reported locally (`atoll describe`, an event)
//! and retried with its own back-off.

pub mod client;
pub mod kubeconfig;
pub mod objects;

use crate::node::Node;
use crate::pod::StaticPod;
use client::{Client, Reply};
use serde_json::{json, Value};
use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

/// What the mirror needs to know, from the settings.
#[derive(Clone, Debug)]
pub struct Options {
    pub kubeconfig: PathBuf,
    pub node: String,
    pub node_labels: BTreeMap<String, String>,
    pub taints: Vec<Value>,
    pub max_pods: i64,
    /// How often the node status is computed and compared (nodeStatusUpdateFrequency).
    pub status_update_frequency: Duration,
    /// How often it is sent when unchanged (nodeStatusReportFrequency).
    pub status_report_frequency: Duration,
    pub lease_duration_seconds: u32,
    /// `containerd://1.6.20`
    pub runtime_version: String,
    pub endpoint_port: u16,
    /// The filesystem whose size is the node's ephemeral-storage capacity.
    pub root_dir: PathBuf,
}

/// Between the agent and the mirror: the static pods to mirror (set by the agent's main loop),
/// what became of each (read by the local API), and the registered Node's UID.
#[derive(Debug, Default)]
pub struct MirrorState {
    desired: Mutex<(u64, Arc<Vec<StaticPod>>)>,
    /// By static pod UID: where its mirror stands, in words.
    reports: Mutex<BTreeMap<String, String>>,
    node_uid: Mutex<Option<String>>,
}

/// What the mirror's threads share: the node, and the state it shares with the agent.
struct Env {
    node: Arc<Node>,
    state: Arc<MirrorState>,
}

impl MirrorState {
    /// The static pods the agent runs now.
    pub fn set_desired<'a>(&self, pods: impl Iterator<Item = &'a StaticPod>) {
        let mut d = crate::locks::lock(&self.desired);
        d.0 += 1;
        d.1 = Arc::new(pods.cloned().collect());
    }

    /// Where the mirror of the static pod `uid` stands (None when atoll mirrors nothing).
    pub fn report(&self, uid: &str) -> Option<String> {
        crate::locks::lock(&self.reports).get(uid).cloned()
    }

    fn set_report(&self, uid: &str, text: String) {
        crate::locks::lock(&self.reports).insert(uid.to_string(), text);
    }

    fn desired(&self) -> (u64, Arc<Vec<StaticPod>>) {
        crate::locks::lock(&self.desired).clone()
    }

    fn node_uid(&self) -> Option<String> {
        crate::locks::lock(&self.node_uid).clone()
    }
}

/// Failure back-off: 1 s doubling to 60 s, each wait jittered to 50–100 %, a `Retry-After`
/// honoured (up to 5 minutes).
#[derive(Debug, Default)]
struct Retry {
    delay: Duration,
    until: Option<Instant>,
}

impl Retry {
    const FIRST: Duration = Duration::from_secs(1);
    const MAX: Duration = Duration::from_secs(60);
    const MAX_RETRY_AFTER: Duration = Duration::from_secs(300);

    fn fail(&mut self, retry_after: Option<Duration>) -> Duration {
        self.delay = if self.delay.is_zero() { Self::FIRST } else { (self.delay * 2).min(Self::MAX) };
        let mut wait = jitter(self.delay);
        if let Some(ra) = retry_after {
            wait = wait.max(ra.min(Self::MAX_RETRY_AFTER));
        }
        self.until = Some(Instant::now() + wait);
        wait
    }

    fn ok(&mut self) {
        self.delay = Duration::ZERO;
        self.until = None;
    }

    fn waiting(&self) -> bool {
        self.until.is_some_and(|u| Instant::now() < u)
    }
}

/// `d` scaled to a pseudo-random 50–100 % (spreads a fleet's retries after an outage).
fn jitter(d: Duration) -> Duration {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(SystemTime::now().duration_since(SystemTime::UNIX_EPOCH).unwrap_or_default().as_nanos());
    let frac = 0.5 + (h.finish() % 1000) as f64 / 2000.0;
    d.mul_f64(frac)
}

/// Whether an answer means "try again later" (server trouble) rather than "no".
fn transient(r: &Reply) -> bool {
    r.status == 429 || r.status >= 500
}

/// Starts mirroring on threads of its own. Returns at once.
pub fn start(opts: Options, node: Arc<Node>, state: Arc<MirrorState>) {
    let shared = Arc::new(Env { node, state });
    let spawned = std::thread::Builder::new().name("atoll-mirror".into()).spawn(move || {
        let client = Arc::new(connect(&opts));
        log::info!("mirroring node {} to {} (context {})", opts.node, client.server(), client.context);
        let (tx, rx) = mpsc::sync_channel(256);
        {
            let (client, opts) = (client.clone(), opts.clone());
            let _ = std::thread::Builder::new()
                .name("atoll-mirror-watch".into())
                .spawn(move || watch_loop(&client, &opts.node, &tx));
        }
        {
            let (client, opts, shared) = (client.clone(), opts.clone(), shared.clone());
            let _ =
                std::thread::Builder::new().name("atoll-node".into()).spawn(move || node_loop(&client, &opts, &shared));
        }
        pods_loop(&client, &opts, &shared, &rx);
    });
    if let Err(e) = spawned {
        log::error!("cannot start mirroring: {e}");
    }
}

/// The client from the kubeconfig; a missing or broken file is reported and read again every
/// minute (a fixed file is picked up without a restart; pods run meanwhile).
fn connect(opts: &Options) -> Client {
    let mut last = String::new();
    loop {
        match Client::from_kubeconfig(&opts.kubeconfig) {
            Ok(c) => return c,
            Err(e) => {
                if e != last {
                    log::error!("not mirroring to an API server: {e} (read again every minute)");
                    last = e;
                }
                std::thread::sleep(Duration::from_secs(60));
            }
        }
    }
}

// ---------------------------------------------------------------------------------------
// Node and Lease

fn node_path(node: &str) -> String {
    format!("/api/v1/nodes/{node}")
}

const SMP: &str = "application/strategic-merge-patch+json";
const MERGE: &str = "application/merge-patch+json";
const JSON: &str = "application/json";

struct NodeState {
    facts: objects::NodeFacts,
    /// By condition type: (status, since).
    transitions: HashMap<&'static str, (bool, String)>,
    /// The last status the server accepted, heartbeats left out, and when.
    reported: Option<(Value, Instant)>,
    lease: Option<Value>,
    lease_due: Instant,
}

fn node_loop(client: &Client, opts: &Options, shared: &Env) {
    let mut st = NodeState {
        facts: node_facts(opts, shared),
        transitions: HashMap::new(),
        reported: None,
        lease: None,
        lease_due: Instant::now(),
    };
    let mut backoff = Retry::default();
    let mut next_status = Instant::now();
    loop {
        let now = Instant::now();
        if !backoff.waiting() {
            // The node and its lease are kept apart: a refused registration (RBAC) does not
            // stop the renewals, and the other way round.
            let mut result = Ok(());
            if now >= next_status || shared.state.node_uid().is_none() {
                result = sync_node(client, opts, shared, &mut st);
                if result.is_ok() {
                    next_status = now + opts.status_update_frequency;
                }
            }
            if now >= st.lease_due {
                let renewed = renew_lease(client, opts, shared, &mut st);
                result = result.and(renewed);
            }
            match result {
                Ok(()) => backoff.ok(),
                Err((why, retry_after)) => {
                    let wait = backoff.fail(retry_after);
                    log::warn!("API server: {why}; retrying in {wait:.1?}");
                }
            }
        }
        let mut wake = next_status.min(st.lease_due);
        if let Some(u) = backoff.until {
            wake = u;
        }
        std::thread::sleep(wake.saturating_duration_since(Instant::now()).max(Duration::from_millis(50)));
    }
}

type Failure = (String, Option<Duration>);

fn fail_of(what: &str, r: &Reply) -> Failure {
    (format!("{what}: {}", r.describe()), r.retry_after)
}

/// The machine's facts (read once; the node's IP and runtime version do not change under a
/// running agent).
fn node_facts(opts: &Options, shared: &Env) -> objects::NodeFacts {
    let read = |p: &str| std::fs::read_to_string(p).map(|s| s.trim().to_string()).unwrap_or_default();
    let os_image = read("/etc/os-release")
        .lines()
        .find_map(|l| l.strip_prefix("PRETTY_NAME="))
        .map(|v| v.trim_matches('"').to_string())
        .unwrap_or_else(|| "Linux".into());
    let ephemeral = rustix::fs::statvfs(&opts.root_dir)
        .or_else(|_| rustix::fs::statvfs("/"))
        .map_or(0, |s| (s.f_blocks as i64).saturating_mul(s.f_frsize as i64));
    let mut taints = opts.taints.clone();
    if !taints.iter().any(|t| t["key"] == objects::STATIC_ONLY_TAINT) {
        taints.push(json!({"key": objects::STATIC_ONLY_TAINT, "value": "true", "effect": "NoSchedule"}));
    }
    objects::NodeFacts {
        name: opts.node.clone(),
        // kubelet labels and addresses the node with its (possibly overridden) host name,
        // which is atoll's node name.
        hostname: opts.node.clone(),
        labels: objects::node_labels(&opts.node, &opts.node_labels),
        taints,
        internal_ip: shared.node.facts().host_ip.clone(),
        cpu_millis: shared.node.facts().cpu_millis,
        memory_bytes: shared.node.facts().memory_bytes,
        ephemeral_storage_bytes: ephemeral,
        max_pods: opts.max_pods,
        machine_id: read("/etc/machine-id"),
        system_uuid: read("/sys/class/dmi/id/product_uuid"),
        boot_id: read("/proc/sys/kernel/random/boot_id"),
        kernel_version: rustix::system::uname().release().to_string_lossy().into_owned(),
        os_image,
        container_runtime_version: opts.runtime_version.clone(),
        architecture: objects::goarch().into(),
        endpoint_port: opts.endpoint_port,
    }
}

/// The node status now: Ready while the runtime answers the relist.
fn current_status(shared: &Env, st: &mut NodeState) -> Value {
    // Ready by the same measure as /healthz, and only once the runtime has answered.
    let (ready, why) = match shared.node.heartbeat().last() {
        Some((at, true)) if at.elapsed() <= crate::node::heartbeat::STALL_AFTER => (true, String::new()),
        Some((_, false)) => (false, "container runtime is down".to_string()),
        Some((at, true)) => (false, format!("the pod sync loop has not completed for {:?}", at.elapsed())),
        None => (false, "the pod sync loop has not completed yet".to_string()),
    };
    let now = crate::rfc3339::format_seconds(SystemTime::now());
    let conds: Vec<objects::Condition> = objects::conditions(ready, &why)
        .into_iter()
        .map(|(type_, status, reason, message)| {
            let entry = st.transitions.entry(type_).or_insert_with(|| (status, now.clone()));
            if entry.0 != status {
                *entry = (status, now.clone());
            }
            objects::Condition { type_, status, reason, message, since: entry.1.clone() }
        })
        .collect();
    objects::node_status(&st.facts, &conds, &now)
}

/// Registers the node if needed, then sends its status when it changed or is due.
fn sync_node(client: &Client, opts: &Options, shared: &Env, st: &mut NodeState) -> Result<(), Failure> {
    let status = current_status(shared, st);
    let comparable = objects::without_heartbeat(&status);
    if shared.state.node_uid().is_none() {
        let node = register(client, st, status)?;
        let uid = uid_of(&node);
        // The Node's UID owns the lease and every mirror: a reply without one is no Node.
        if uid.is_empty() || node["metadata"]["name"] != opts.node.as_str() {
            return Err((
                format!("the API server answered node {} with an object that is not that Node", opts.node),
                None,
            ));
        }
        log::info!("node {} registered (uid {uid})", opts.node);
        *crate::locks::lock(&shared.state.node_uid) = Some(uid);
        st.reported = Some((comparable, Instant::now()));
        return Ok(());
    }
    let due = match &st.reported {
        Some((last, at)) => *last != comparable || at.elapsed() >= opts.status_report_frequency,
        None => true,
    };
    if !due {
        return Ok(());
    }
    let r = client
        .call("PATCH", &format!("{}/status", node_path(&opts.node)), SMP, Some(&json!({ "status": status })))
        .map_err(|e| (e, None))?;
    if r.status == 404 {
        // Deleted by someone: register again (mirrors follow the new node UID).
        log::warn!("node {} is gone from the API server; registering it again", opts.node);
        *crate::locks::lock(&shared.state.node_uid) = None;
        return Ok(());
    }
    if !r.ok() {
        return Err(fail_of("node status", &r));
    }
    st.reported = Some((comparable, Instant::now()));
    Ok(())
}

/// POST the Node; on AlreadyExists, take the existing one and add the labels it lacks.
fn register(client: &Client, st: &NodeState, status: Value) -> Result<Value, Failure> {
    let node = objects::node_object(&st.facts, status.clone());
    let r = client.call("POST", "/api/v1/nodes", JSON, Some(&node)).map_err(|e| (e, None))?;
    if r.status == 201 || r.status == 200 {
        return Ok(r.body);
    }
    if r.status != 409 {
        return Err(fail_of("node registration", &r));
    }
    let path = node_path(&st.facts.name);
    let r = client.call("GET", &path, JSON, None).map_err(|e| (e, None))?;
    if !r.ok() {
        return Err(fail_of("existing node", &r));
    }
    let mut existing = r.body;
    if existing["metadata"]["deletionTimestamp"].is_string() {
        return Err((format!("node {} is being deleted; waiting", st.facts.name), None));
    }
    if let Some(patch) = objects::label_patch(&existing, &st.facts.labels) {
        let r = client.call("PATCH", &path, SMP, Some(&patch)).map_err(|e| (e, None))?;
        if !r.ok() {
            return Err(fail_of("node labels", &r));
        }
        existing = r.body;
    }
    let r = client
        .call("PATCH", &format!("{path}/status"), SMP, Some(&json!({ "status": status })))
        .map_err(|e| (e, None))?;
    if !r.ok() {
        return Err(fail_of("node status", &r));
    }
    if !client::set_path(&mut existing, &["status"], r.body["status"].clone()) {
        return Err(("the API server's node object is malformed".into(), None));
    }
    Ok(existing)
}

/// Renews the Lease: PUT the last answer with a new renewTime; on a conflict or an unknown
/// lease, GET (or create) it first.
fn renew_lease(client: &Client, opts: &Options, shared: &Env, st: &mut NodeState) -> Result<(), Failure> {
    let path = format!("/apis/coordination.k8s.io/v1/namespaces/{}/leases/{}", objects::LEASE_NAMESPACE, opts.node);
    let node_uid = shared.state.node_uid();
    let renew = crate::rfc3339::format_micros(SystemTime::now());
    let fresh = objects::lease_object(&opts.node, node_uid.as_deref(), opts.lease_duration_seconds, &renew);
    for _ in 0..3 {
        let r = match st.lease.take() {
            Some(mut lease) => {
                // The last answer is the server's: set fields only where its shape allows.
                let mut ok = client::set_path(&mut lease, &["spec"], fresh["spec"].clone());
                if node_uid.is_some() {
                    let owners = fresh["metadata"]["ownerReferences"].clone();
                    ok &= client::set_path(&mut lease, &["metadata", "ownerReferences"], owners);
                }
                if !ok {
                    continue; // a malformed lease: read it again
                }
                client.call("PUT", &path, JSON, Some(&lease)).map_err(|e| (e, None))?
            }
            None => {
                let r = client.call("GET", &path, JSON, None).map_err(|e| (e, None))?;
                match r.status {
                    200 => {
                        st.lease = Some(r.body);
                        continue;
                    }
                    404 => {
                        let collection = path.rsplit_once('/').map_or("", |p| p.0);
                        client.call("POST", collection, JSON, Some(&fresh)).map_err(|e| (e, None))?
                    }
                    _ => return Err(fail_of("lease", &r)),
                }
            }
        };
        match r.status {
            200 | 201 => {
                st.lease = Some(r.body);
                let every = Duration::from_secs(u64::from(opts.lease_duration_seconds)) / 4;
                // kubelet's jitter: up to 4 % later.
                st.lease_due = Instant::now() + every + jitter(every.mul_f64(0.08)) - every.mul_f64(0.04);
                return Ok(());
            }
            // Someone else wrote it (or it is gone): read it again.
            409 | 404 => continue,
            _ => return Err(fail_of("lease renewal", &r)),
        }
    }
    Err(("lease: still conflicting after 3 tries".into(), None))
}

// ---------------------------------------------------------------------------------------
// Pods: list + watch of the node's pods, and the reconciling loop.

/// What the watch thread passes on.
pub enum Seen {
    /// A full list (at start and after a 410).
    Listed(Vec<Value>),
    /// A watch event: ADDED, MODIFIED or DELETED, and the pod.
    Event(String, Value),
}

fn pods_query(node: &str) -> String {
    format!("/api/v1/pods?fieldSelector=spec.nodeName%3D{node}")
}

/// Lists and watches the node's pods into `tx`, forever (returns when `tx` is closed).
pub fn watch_loop(client: &Client, node: &str, tx: &mpsc::SyncSender<Seen>) {
    let mut backoff = Retry::default();
    let mut rv: Option<String> = None;
    loop {
        if let Some(u) = backoff.until {
            std::thread::sleep(u.saturating_duration_since(Instant::now()));
        }
        let Some(from) = rv.clone() else {
            match client.call("GET", &pods_query(node), JSON, None) {
                Ok(r) if r.status == 200 => {
                    rv = r.body["metadata"]["resourceVersion"].as_str().map(String::from);
                    let items = r.body["items"].as_array().cloned().unwrap_or_default();
                    if tx.send(Seen::Listed(items)).is_err() {
                        return;
                    }
                    backoff.ok();
                }
                Ok(r) => {
                    let wait = backoff.fail(r.retry_after);
                    log::warn!("API server: listing the node's pods: {}; retrying in {wait:.1?}", r.describe());
                }
                Err(e) => {
                    let wait = backoff.fail(None);
                    log::debug!("API server: {e}; retrying in {wait:.1?}");
                }
            }
            continue;
        };
        // The server ends each watch after 5 to 10 minutes, as client-go's reflector asks.
        let timeout = Duration::from_secs(300) + jitter(Duration::from_secs(600)) - Duration::from_secs(300);
        let path = format!(
            "{}&watch=true&allowWatchBookmarks=true&resourceVersion={from}&timeoutSeconds={}",
            pods_query(node),
            timeout.as_secs()
        );
        let mut gone = false;
        let mut closed = false;
        let mut events = 0usize;
        let began = Instant::now();
        let result = client.watch(&path, timeout, |event| {
            events += 1;
            let kind = event["type"].as_str().unwrap_or_default().to_string();
            let obj = event["object"].clone();
            if kind == "ERROR" {
                gone = obj["code"] == 410;
                return false;
            }
            if let Some(v) = obj["metadata"]["resourceVersion"].as_str() {
                rv = Some(v.to_string());
            }
            if kind == "BOOKMARK" {
                return true;
            }
            if tx.send(Seen::Event(kind, obj)).is_err() {
                closed = true;
                return false;
            }
            true
        });
        if closed {
            return;
        }
        match result {
            // A watch ended at once with nothing in it (a proxy cutting streams): not a
            // reason to ask again at once.
            Ok(None) if !gone && events == 0 && began.elapsed() < Duration::from_secs(1) => {
                let wait = backoff.fail(None);
                log::warn!("API server: the pod watch ended at once; watching again in {wait:.1?}");
            }
            Ok(None) if !gone => backoff.ok(),
            Ok(None) => rv = None,
            Ok(Some(r)) if r.status == 410 => rv = None,
            Ok(Some(r)) => {
                let wait = backoff.fail(r.retry_after);
                log::warn!("API server: watching the node's pods: {}; retrying in {wait:.1?}", r.describe());
            }
            Err(e) => {
                let wait = backoff.fail(None);
                log::debug!("API server: {e}; retrying in {wait:.1?}");
            }
        }
    }
}

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
    refused: HashMap<String, Refused>,
    backoff: Retry,
}

fn uid_of(pod: &Value) -> String {
    pod["metadata"]["uid"].as_str().unwrap_or_default().to_string()
}

fn key_of(pod: &Value) -> String {
    format!(
        "{}/{}",
        pod["metadata"]["namespace"].as_str().unwrap_or_default(),
        pod["metadata"]["name"].as_str().unwrap_or_default()
    )
}

fn pods_loop(client: &Client, opts: &Options, shared: &Env, rx: &mpsc::Receiver<Seen>) {
    let mut p = Pods {
        client,
        opts,
        shared,
        cache: None,
        sent: HashMap::new(),
        refused: HashMap::new(),
        backoff: Retry::default(),
    };
    loop {
        // Changes from the server, then at most a second for the agent's side to change.
        match rx.recv_timeout(Duration::from_secs(1)) {
            Ok(seen) => {
                p.apply(seen);
                while let Ok(seen) = rx.try_recv() {
                    p.apply(seen);
                }
            }
            Err(mpsc::RecvTimeoutError::Timeout) => {}
            Err(mpsc::RecvTimeoutError::Disconnected) => return,
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
        let (generation, desired) = self.shared.state.desired();
        if generation == 0 {
            // The agent has not said what it runs yet.
            return Ok(());
        }
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
            .retain(|uid, _| desired.iter().any(|sp| sp.uid == *uid) || running.contains(uid));
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
                Some(h) if h == sp.uid && !m["metadata"]["deletionTimestamp"].is_string() => {
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
        let body = objects::mirror_pod(&sp.pod, &sp.uid, &self.opts.node, node_uid);
        let path = format!("/api/v1/namespaces/{}/pods", sp.pod.metadata.namespace);
        let r = self.client.call("POST", &path, JSON, Some(&body)).map_err(|e| (e, None))?;
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
                match r.map_err(|e| (e, None))? {
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

    /// DELETE with grace 0 and the mirror's UID as precondition; gone or replaced is fine.
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
        let r = self.client.call("DELETE", &path, JSON, Some(&options)).map_err(|e| (e, None))?;
        if !(r.ok() || r.status == 404 || r.status == 409) {
            return Err(fail_of(&format!("deleting mirror pod {key}"), &r));
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
        let Some(patch) = objects::status_patch(&want, mirror) else {
            self.sent.insert(muid, want);
            return Ok(());
        };
        let path = format!("/api/v1/namespaces/{}/pods/{}/status", sp.pod.metadata.namespace, sp.pod.metadata.name);
        let r = self.client.call("PATCH", &path, MERGE, Some(&patch)).map_err(|e| (e, None))?;
        match r.status {
            200 => {
                if let Some(c) = &mut self.cache {
                    c.insert(sp.pod.key(), r.body);
                }
                self.report(&sp.uid, format!("mirrored (uid {muid})"));
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn back_off_doubles_jitters_caps_honours_retry_after_and_resets() {
        let mut b = Retry::default();
        assert!(!b.waiting());
        let mut last = Duration::ZERO;
        for n in 0..10 {
            let wait = b.fail(None);
            let delay = Retry::FIRST * 2u32.pow(n).min(60);
            let delay = delay.min(Retry::MAX);
            assert!(wait >= delay / 2 && wait <= delay, "try {n}: {wait:?} for {delay:?}");
            last = wait;
        }
        assert!(last <= Retry::MAX && b.waiting());
        b.ok();
        assert!(!b.waiting());
        // Retry-After wins over a shorter back-off, up to its own cap.
        assert!(b.fail(Some(Duration::from_secs(30))) >= Duration::from_secs(30));
        assert_eq!(b.fail(Some(Duration::from_secs(3600))), Retry::MAX_RETRY_AFTER);
    }

    #[test]
    fn transient_answers_are_5xx_and_429() {
        let r = |status| Reply { status, body: Value::Null, retry_after: None };
        assert!(transient(&r(429)) && transient(&r(500)) && transient(&r(503)));
        assert!(!transient(&r(403)) && !transient(&r(422)) && !transient(&r(409)));
    }
}
