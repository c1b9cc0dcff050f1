//! The Node and its Lease: registration (POST, or on AlreadyExists GET, add missing labels,
//! PATCH status), the status compared every nodeStatusUpdateFrequency and sent when it changed
//! or every nodeStatusReportFrequency, and the lease (`lease.rs`) renewed beside it.
//!
//! As kubelet, the conditions' transition times follow the Node the server holds: a condition
//! whose status atoll does not change keeps its lastTransitionTime, across a restart of atoll
//! too. After an outage longer than the lease the Node is read again and reported at once,
//! since the control plane may have written it meanwhile (the node lifecycle controller's
//! Unknown, which only the node's own report undoes).

use super::apiserver::Client;
use super::lease::{self, Lease};
use super::objects;
use super::patch;
use super::pods::uid_of;
use super::retry::{fail_of, Failure, Retry, JSON, SMP};
use super::state::{Env, Options};
use serde_json::{json, Value};
use std::time::{Duration, Instant, SystemTime};

fn node_path(node: &str) -> String {
    format!("/api/v1/nodes/{node}")
}

struct NodeState {
    facts: objects::NodeFacts,
    /// By condition type: (status, since), as the server's Node showed them and as atoll
    /// changed them since.
    transitions: objects::Transitions,
    /// The last status the server accepted, heartbeats left out, and when.
    reported: Option<(Value, Instant)>,
    /// The node's status as the server's last answer showed it: what a patch is made against.
    server_status: Value,
    /// The lease went unrenewed for its whole duration, long enough for the node lifecycle
    /// controller to mark the node's conditions Unknown: the server's Node is read again first.
    stale: bool,
    lease: Lease,
}

pub(super) fn node_loop(client: &Client, opts: &Options, shared: &Env) {
    let mut st = NodeState {
        facts: node_facts(opts, shared),
        transitions: objects::Transitions::new(),
        reported: None,
        server_status: Value::Null,
        stale: false,
        lease: Lease::new(),
    };
    // The node and its lease are kept apart, each with its own back-off: a refused
    // registration (RBAC) does not stop the renewals, and a lease that failed through an
    // outage is tried again within kubelet's 7 s while the rest backs off to a minute (the
    // status follows a lease renewed after it expired).
    let mut backoff = Retry::default();
    let mut lease_backoff = Retry::lease();
    let mut next_status = Instant::now();
    let mut renewed_at = Instant::now();
    let lease_duration = Duration::from_secs(u64::from(opts.lease_duration_seconds));
    loop {
        let now = Instant::now();
        if !backoff.waiting() && (now >= next_status || shared.state.node_uid().is_none()) {
            match sync_node(client, opts, shared, &mut st) {
                Ok(()) => {
                    backoff.ok();
                    next_status = now + opts.status_update_frequency;
                }
                Err((why, retry_after)) => {
                    let wait = backoff.fail(retry_after);
                    log::warn!("API server: {why}; retrying in {wait:.1?}");
                }
            }
        }
        if now >= st.lease.due {
            match lease::renew(client, opts, shared.state.node_uid().as_deref(), &mut st.lease) {
                Ok(()) => {
                    if renewed_at.elapsed() >= lease_duration {
                        // Back after the lease expired: the node lifecycle controller may have
                        // marked the node Unknown, which only the node's own report undoes. It
                        // goes next, from the Node read again, not after the outage's back-off.
                        st.stale = true;
                        backoff.ok();
                        next_status = next_status.min(Instant::now());
                    }
                    renewed_at = Instant::now();
                    lease_backoff.ok();
                }
                Err((why, retry_after)) => {
                    let again = lease_backoff.failing();
                    let wait = lease_backoff.fail(retry_after);
                    st.lease.due = Instant::now() + wait;
                    if again {
                        log::debug!("API server: {why}; retrying in {wait:.1?}");
                    } else {
                        log::warn!("API server: {why}; retrying in {wait:.1?} (then up to every 7 s)");
                    }
                }
            }
        }
        let wake = backoff.until.unwrap_or(next_status).min(st.lease.due);
        std::thread::sleep(wake.saturating_duration_since(Instant::now()).max(Duration::from_millis(50)));
    }
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
    let mut taints = opts.taints.clone();
    if opts.api_source.is_none() && !taints.iter().any(|t| t["key"] == objects::STATIC_ONLY_TAINT) {
        taints.push(json!({"key": objects::STATIC_ONLY_TAINT, "value": "true", "effect": "NoSchedule"}));
    }
    let facts = shared.node.facts();
    objects::NodeFacts {
        name: opts.node.clone(),
        // kubelet labels and addresses the node with its (possibly overridden) host name,
        // which is atoll's node name.
        hostname: opts.node.clone(),
        labels: facts.labels.clone(),
        taints,
        internal_ip: shared.node.facts().host_ip.clone(),
        cpu_millis: facts.cpu_millis,
        memory_bytes: facts.memory_bytes,
        ephemeral_storage_bytes: facts.ephemeral_bytes,
        max_pods: facts.allocatable.pods,
        allocatable: facts.allocatable,
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
    let (ready, why) = match shared.node.heartbeat().ready() {
        Ok(()) => (true, String::new()),
        Err(why) => (false, why.to_string()),
    };
    let now = crate::rfc3339::format_seconds(SystemTime::now());
    let conds: Vec<objects::Condition> = objects::conditions(ready, &why)
        .into_iter()
        .map(|(type_, status, reason, message)| {
            let since = objects::transition(&mut st.transitions, type_, if status { "True" } else { "False" }, &now);
            objects::Condition { type_, status, reason, message, since }
        })
        .collect();
    objects::node_status(&st.facts, &conds, &now)
}

/// Whether atoll has just started and its first relist is still under way: a status now would
/// say NotReady for that alone (and move Ready's transition time). kubelet too waits for its
/// runtime before its first status update. A new Node is registered all the same.
fn starting(shared: &Env) -> bool {
    shared.node.heartbeat().last().is_none() && shared.node.stalled().is_none()
}

/// Registers the node if needed, then sends its status when it changed or is due.
fn sync_node(client: &Client, opts: &Options, shared: &Env, st: &mut NodeState) -> Result<(), Failure> {
    let path = node_path(&opts.node);
    if shared.state.node_uid().is_none() {
        let node = register(client, shared, st)?;
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
        st.stale = false;
    } else if st.stale {
        // The server may hold another status by now (the node lifecycle controller marks a
        // node that went silent Unknown): read it, as kubelet reads the Node before each update.
        let r = client.call("GET", &path, JSON, None).map_err(Failure::from)?;
        if r.status == 404 {
            log::warn!("node {} is gone from the API server; registering it again", opts.node);
            *crate::locks::lock(&shared.state.node_uid) = None;
            return Ok(());
        }
        if !r.ok() {
            return Err(fail_of("node", &r));
        }
        server_node(st, &r.body);
        st.stale = false;
    }
    if starting(shared) {
        return Ok(());
    }
    let status = current_status(shared, st);
    let comparable = objects::without_heartbeat(&status);
    let due = match &st.reported {
        Some((last, at)) => *last != comparable || at.elapsed() >= opts.status_report_frequency,
        None => true,
    };
    if !due {
        return Ok(());
    }
    // Only what differs from the server's copy; a report with nothing new still renews the
    // heartbeats, so there is always something.
    let patch = patch::node_status_patch(&status, &st.server_status).unwrap_or_else(|| json!({ "status": status }));
    let r = client.call("PATCH", &format!("{path}/status"), SMP, Some(&patch)).map_err(Failure::from)?;
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
    st.server_status = r.body["status"].clone();
    Ok(())
}

/// The Node as the server holds it: its status is what the next report is made against, and
/// its conditions' transition times are kept while their statuses hold. Reported next.
fn server_node(st: &mut NodeState, node: &Value) {
    objects::seen_on_server(&mut st.transitions, &node["status"]);
    st.server_status = node["status"].clone();
    st.reported = None;
}

/// POST the Node; on AlreadyExists, take the existing one and add the labels it lacks (its
/// status is reported next, from what it holds, as kubelet updates it after registering).
fn register(client: &Client, shared: &Env, st: &mut NodeState) -> Result<Value, Failure> {
    let status = current_status(shared, st);
    let node = objects::node_object(&st.facts, status.clone());
    let r = client.call("POST", "/api/v1/nodes", JSON, Some(&node)).map_err(Failure::from)?;
    if r.status == 201 || r.status == 200 {
        st.reported = Some((objects::without_heartbeat(&status), Instant::now()));
        st.server_status = r.body["status"].clone();
        return Ok(r.body);
    }
    if r.status != 409 {
        return Err(fail_of("node registration", &r));
    }
    let path = node_path(&st.facts.name);
    let r = client.call("GET", &path, JSON, None).map_err(Failure::from)?;
    if !r.ok() {
        return Err(fail_of("existing node", &r));
    }
    let mut existing = r.body;
    if existing["metadata"]["deletionTimestamp"].is_string() {
        return Err((format!("node {} is being deleted; waiting", st.facts.name), None));
    }
    if let Some(patch) = objects::label_patch(&existing, &st.facts.labels) {
        let r = client.call("PATCH", &path, SMP, Some(&patch)).map_err(Failure::from)?;
        if !r.ok() {
            return Err(fail_of("node labels", &r));
        }
        existing = r.body;
    }
    server_node(st, &existing);
    Ok(existing)
}
