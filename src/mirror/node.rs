//! The Node and its Lease: registration (POST, or on AlreadyExists GET, add missing labels,
//! PATCH status), the status compared every nodeStatusUpdateFrequency and sent when it changed
//! or every nodeStatusReportFrequency, and the lease (`lease.rs`) renewed beside it.

use super::apiserver::{set_path, Client};
use super::lease::{self, Lease};
use super::objects;
use super::pods::uid_of;
use super::retry::{fail_of, Failure, Retry, JSON, SMP};
use super::state::{Env, Options};
use serde_json::{json, Value};
use std::collections::HashMap;
use std::time::{Duration, Instant, SystemTime};

fn node_path(node: &str) -> String {
    format!("/api/v1/nodes/{node}")
}

struct NodeState {
    facts: objects::NodeFacts,
    /// By condition type: (status, since).
    transitions: HashMap<&'static str, (bool, String)>,
    /// The last status the server accepted, heartbeats left out, and when.
    reported: Option<(Value, Instant)>,
    /// The node's status as the server's last answer showed it: what a patch is made against.
    server_status: Value,
    lease: Lease,
}

pub(super) fn node_loop(client: &Client, opts: &Options, shared: &Env) {
    let mut st = NodeState {
        facts: node_facts(opts, shared),
        transitions: HashMap::new(),
        reported: None,
        server_status: Value::Null,
        lease: Lease::new(),
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
            if now >= st.lease.due {
                let renewed = lease::renew(client, opts, shared.state.node_uid().as_deref(), &mut st.lease);
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
        let mut wake = next_status.min(st.lease.due);
        if let Some(u) = backoff.until {
            wake = u;
        }
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
    let (ready, why) = match shared.node.heartbeat().ready() {
        Ok(()) => (true, String::new()),
        Err(why) => (false, why),
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
        st.server_status = node["status"].clone();
        return Ok(());
    }
    let due = match &st.reported {
        Some((last, at)) => *last != comparable || at.elapsed() >= opts.status_report_frequency,
        None => true,
    };
    if !due {
        return Ok(());
    }
    // Only what differs from the server's copy; a report with nothing new still renews the
    // heartbeats, so there is always something.
    let patch = objects::node_status_patch(&status, &st.server_status).unwrap_or_else(|| json!({ "status": status }));
    let r =
        client.call("PATCH", &format!("{}/status", node_path(&opts.node)), SMP, Some(&patch)).map_err(|e| (e, None))?;
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
    if !set_path(&mut existing, &["status"], r.body["status"].clone()) {
        return Err(("the API server's node object is malformed".into(), None));
    }
    Ok(existing)
}
