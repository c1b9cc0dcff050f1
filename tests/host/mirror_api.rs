//! The test API server against the API's rules, through atoll's own API client (HTTPS with a
//! client certificate, or a bearer token from a file that rotates): what the real server
//! accepts and refuses, so the mirror's end-to-end tests (tests/runtime/mirror.rs) stand on a double
//! that behaves like the real thing. Then atoll's mirror itself, in this process and without
//! a runtime, read as a control plane reads it: transition times across a restart, the lease
//! after an outage, and pod status patches that keep other writers' conditions.

use crate::apiserver;
use crate::common;

use apiserver::{ApiServer, Pki};
use atoll::mirror::apiserver::Client;
use atoll::mirror::kubeconfig;
use atoll::pod::status::{PodCondition, PodIp, PodStatus};
use common::eventually;
use serde_json::{json, Value};
use std::sync::Arc;
use std::time::{Duration, Instant};

fn setup(name: &str) -> (common::Scratch, Pki, ApiServer) {
    let dir = crate::common::Scratch::new(&format!("mirror-api-{name}"));
    let pki = Pki::new(&dir, "edge-1");
    let server = ApiServer::start(&pki, "edge-1");
    (dir, pki, server)
}

fn client(path: &std::path::Path) -> Client {
    Client::new(&kubeconfig::load(path, None).unwrap()).unwrap()
}

fn node(name: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": name}, "status": {"conditions": [
        {"type": "Ready", "status": "False", "reason": "Starting"},
        {"type": "example.com/Disk", "status": "False"},
    ]}})
}

/// Registers node edge-1; its UID.
fn register(c: &Client) -> String {
    let n = c.call("POST", "/api/v1/nodes", "application/json", Some(&node("edge-1"))).unwrap();
    assert_eq!(n.status, 201, "{:?}", n.body);
    n.body["metadata"]["uid"].as_str().unwrap().to_string()
}

fn mirror(name: &str, node_uid: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Pod", "metadata": {
        "name": name,
        "annotations": {"kubernetes.io/config.mirror": "h1"},
        "ownerReferences": [{"apiVersion": "v1", "kind": "Node", "name": "edge-1", "uid": node_uid, "controller": true}],
    }, "spec": {"nodeName": "edge-1", "containers": [{"name": "c", "image": "busybox"}]}})
}

#[test]
fn node_credentials_are_held_to_node_rules() {
    let (_dir, pki, server) = setup("node");
    let c = client(&pki.kubeconfig(server.addr, None));
    // Registration of its own node only.
    let r = c.call("POST", "/api/v1/nodes", "application/json", Some(&node("other"))).unwrap();
    assert_eq!((r.status, r.reason()), (403, "Forbidden"), "{:?}", r.body);
    let r = c.call("POST", "/api/v1/nodes", "application/json", Some(&node("edge-1"))).unwrap();
    assert_eq!(r.status, 201);
    let node_uid = r.body["metadata"]["uid"].as_str().unwrap().to_string();
    assert!(r.body["metadata"]["creationTimestamp"].is_string());
    let r = c.call("POST", "/api/v1/nodes", "application/json", Some(&node("edge-1"))).unwrap();
    assert_eq!((r.status, r.reason()), (409, "AlreadyExists"));
    // Pods: mirrors only, bound to itself, owned by its Node.
    let mut plain = mirror("plain", &node_uid);
    plain["metadata"]["annotations"] = json!({});
    let r = c.call("POST", "/api/v1/namespaces/default/pods", "application/json", Some(&plain)).unwrap();
    assert_eq!(r.status, 403, "{:?}", r.body);
    assert!(r.describe().contains("can only create mirror pods"), "{}", r.describe());
    let r =
        c.call("POST", "/api/v1/namespaces/default/pods", "application/json", Some(&mirror("m", "wrong-uid"))).unwrap();
    assert_eq!(r.status, 403);
    let r =
        c.call("POST", "/api/v1/namespaces/nowhere/pods", "application/json", Some(&mirror("m", &node_uid))).unwrap();
    assert_eq!((r.status, r.reason()), (404, "NotFound"));
    let r =
        c.call("POST", "/api/v1/namespaces/default/pods", "application/json", Some(&mirror("m", &node_uid))).unwrap();
    assert_eq!(r.status, 201, "{:?}", r.body);
    assert_eq!(r.body["status"]["phase"], "Pending", "the server owns a new pod's status");
    // A lease of another name is refused.
    let lease =
        json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": {"name": "other"}, "spec": {}});
    let r = c
        .call(
            "POST",
            "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases",
            "application/json",
            Some(&lease),
        )
        .unwrap();
    assert_eq!(r.status, 403);
}

#[test]
fn writes_follow_resource_versions_preconditions_and_patch_types() {
    let (_dir, pki, server) = setup("writes");
    let c = client(&pki.kubeconfig(server.addr, None));
    let leases = "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases";
    let lease = json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": {"name": "edge-1"}, "spec": {"holderIdentity": "edge-1", "leaseDurationSeconds": 40}});
    let created = c.call("POST", leases, "application/json", Some(&lease)).unwrap();
    assert_eq!(created.status, 201);
    let mut with_rv = lease.clone();
    with_rv["metadata"]["resourceVersion"] = "1".into();
    assert_eq!(
        c.call("POST", leases, "application/json", Some(&with_rv)).unwrap().status,
        500,
        "no resourceVersion on create"
    );
    // PUT needs the current resourceVersion.
    let path = format!("{leases}/edge-1");
    let r = c.call("PUT", &path, "application/json", Some(&lease)).unwrap();
    assert_eq!((r.status, r.reason()), (422, "Invalid"));
    let mut stale = created.body.clone();
    stale["spec"]["leaseDurationSeconds"] = 30.into();
    let r = c.call("PUT", &path, "application/json", Some(&stale)).unwrap();
    assert_eq!(r.status, 200);
    let rv2 = r.body["metadata"]["resourceVersion"].clone();
    assert_ne!(rv2, created.body["metadata"]["resourceVersion"]);
    let r = c.call("PUT", &path, "application/json", Some(&stale)).unwrap();
    assert_eq!((r.status, r.reason()), (409, "Conflict"), "a stale resourceVersion conflicts");
    assert_eq!(c.call("PUT", &format!("{leases}/none"), "application/json", Some(&stale)).unwrap().status, 403);

    // Node status: strategic merge keeps other writers' conditions, merge patch replaces lists.
    let node_uid = register(&c);
    let smp = json!({"status": {"conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady"}]}});
    let r =
        c.call("PATCH", "/api/v1/nodes/edge-1/status", "application/strategic-merge-patch+json", Some(&smp)).unwrap();
    assert_eq!(r.status, 200);
    let conds = r.body["status"]["conditions"].as_array().unwrap();
    assert_eq!(conds.len(), 2, "{conds:?}");
    assert!(conds.iter().any(|c| c["type"] == "Ready" && c["status"] == "True"));
    let r = c.call("PATCH", "/api/v1/nodes/edge-1/status", "application/merge-patch+json", Some(&smp)).unwrap();
    assert_eq!(r.body["status"]["conditions"].as_array().unwrap().len(), 1);
    let r = c.call("PATCH", "/api/v1/nodes/edge-1/status", "application/json-patch+json", Some(&smp)).unwrap();
    assert_eq!(r.status, 415);
    let bad = json!({"status": {"conditions": [{"type": "Ready", "status": "Maybe"}]}});
    assert_eq!(
        c.call("PATCH", "/api/v1/nodes/edge-1/status", "application/merge-patch+json", Some(&bad)).unwrap().status,
        422
    );
    // The status endpoint does not write metadata; the main one does not write status.
    let both = json!({"metadata": {"labels": {"a": "b"}}, "status": {"phase": "x"}});
    let r = c.call("PATCH", "/api/v1/nodes/edge-1", "application/strategic-merge-patch+json", Some(&both)).unwrap();
    assert_eq!(r.body["metadata"]["labels"]["a"], "b");
    assert!(r.body["status"].get("phase").is_none());

    // Pod status with a UID precondition; deletion with preconditions and grace.
    let pods = "/api/v1/namespaces/default/pods";
    let m = c.call("POST", pods, "application/json", Some(&mirror("m", &node_uid))).unwrap();
    let uid = m.body["metadata"]["uid"].as_str().unwrap().to_string();
    let wrong = json!({"metadata": {"uid": "not-it"}, "status": {"phase": "Running"}});
    let r = c.call("PATCH", &format!("{pods}/m/status"), "application/merge-patch+json", Some(&wrong)).unwrap();
    assert_eq!((r.status, r.reason()), (409, "Conflict"));
    let right = json!({"metadata": {"uid": uid}, "status": {"phase": "Running", "containerStatuses": [{"name": "c", "restartCount": 1}]}});
    let r = c.call("PATCH", &format!("{pods}/m/status"), "application/merge-patch+json", Some(&right)).unwrap();
    assert_eq!(r.status, 200);
    assert_eq!(r.body["status"]["phase"], "Running");
    let respec = json!({"spec": {"containers": [{"name": "c", "image": "other"}, {"name": "d", "image": "x"}]}});
    assert_eq!(
        c.call("PATCH", &format!("{pods}/m"), "application/strategic-merge-patch+json", Some(&respec)).unwrap().status,
        422
    );
    let del = |uid: &str, grace: Option<i64>| {
        let mut opts = json!({"apiVersion": "v1", "kind": "DeleteOptions", "preconditions": {"uid": uid}});
        if let Some(g) = grace {
            opts["gracePeriodSeconds"] = g.into();
        }
        c.call("DELETE", &format!("{pods}/m"), "application/json", Some(&opts)).unwrap()
    };
    assert_eq!(del("not-it", Some(0)).status, 409);
    let r = del(&uid, None);
    assert_eq!(r.status, 200);
    assert!(r.body["metadata"]["deletionTimestamp"].is_string(), "a bound pod is deleted gracefully");
    assert!(server.get("pods", "default", "m").is_some());
    assert_eq!(del(&uid, Some(0)).status, 200);
    assert!(server.get("pods", "default", "m").is_none());
    assert_eq!(del(&uid, Some(0)).status, 404);
    // Deleting the node removes what it owned.
    let m = c.call("POST", pods, "application/json", Some(&mirror("m2", &node_uid))).unwrap();
    assert_eq!(m.status, 201);
    assert_eq!(server.admin("DELETE", "/api/v1/nodes/edge-1", "application/json", None).0, 200);
    assert!(server.get("pods", "default", "m2").is_none());
}

#[test]
fn lists_watches_auth_and_faults() {
    let (dir, pki, server) = setup("watch");
    let c = client(&pki.kubeconfig(server.addr, None));
    let node_uid = register(&c);
    let pods = "/api/v1/namespaces/default/pods";
    c.call("POST", pods, "application/json", Some(&mirror("a", &node_uid))).unwrap();
    let list = c.call("GET", "/api/v1/pods?fieldSelector=spec.nodeName%3Dedge-1", "", None).unwrap();
    assert_eq!(list.body["kind"], "PodList");
    assert_eq!(list.body["items"].as_array().unwrap().len(), 1);
    assert_eq!(
        c.call("GET", "/api/v1/pods?fieldSelector=spec.nodeName%3Dother", "", None).unwrap().body["items"],
        json!([])
    );
    assert_eq!(c.call("GET", "/api/v1/pods?fieldSelector=spec.image%3Dx", "", None).unwrap().status, 400);
    let rv = list.body["metadata"]["resourceVersion"].as_str().unwrap().to_string();
    // A watch from the list's resourceVersion sees what happens next, then ends on time.
    std::thread::scope(|s| {
        s.spawn(|| {
            std::thread::sleep(Duration::from_millis(300));
            c.call("POST", pods, "application/json", Some(&mirror("b", &node_uid))).unwrap();
            server.admin(
                "DELETE",
                "/api/v1/namespaces/default/pods/a",
                "application/json",
                Some(json!({"gracePeriodSeconds": 0})),
            );
        });
        let mut events = Vec::new();
        let path = format!(
            "/api/v1/pods?fieldSelector=spec.nodeName%3Dedge-1&watch=true&resourceVersion={rv}&timeoutSeconds=2"
        );
        let end = c.watch(&path, Duration::from_secs(2), &mut |e| {
            events.push((
                e["type"].as_str().unwrap().to_string(),
                e["object"]["metadata"]["name"].as_str().unwrap().to_string(),
            ));
            true
        });
        assert!(matches!(end, Ok(None)), "{end:?}");
        assert_eq!(events, [("ADDED".to_string(), "b".to_string()), ("DELETED".to_string(), "a".to_string())]);
    });
    // A compacted resourceVersion: ERROR 410 in the stream.
    for i in 0..1001 {
        server.admin(
            "PATCH",
            "/api/v1/nodes/edge-1",
            "application/merge-patch+json",
            Some(json!({"metadata": {"labels": {"n": i.to_string()}}})),
        );
    }
    let mut code = Value::Null;
    let path = format!("/api/v1/pods?watch=true&resourceVersion={rv}&timeoutSeconds=2");
    c.watch(&path, Duration::from_secs(2), &mut |e| {
        assert_eq!(e["type"], "ERROR");
        code = e["object"]["code"].clone();
        false
    })
    .unwrap();
    assert_eq!(code, 410);

    // No credentials: 401. A token file that rotates: the new token is used.
    let anonymous = dir.join("anonymous");
    std::fs::write(&anonymous, "").unwrap();
    let anon = client(&pki.kubeconfig(server.addr, Some(&anonymous)));
    assert_eq!(anon.call("GET", "/api/v1/nodes/edge-1", "", None).unwrap().status, 401);
    let token = dir.join("token");
    std::fs::write(&token, "first\n").unwrap();
    server.add_token("first", "system:node:edge-1");
    server.add_token("second", "system:node:edge-1");
    let t = client(&pki.kubeconfig(server.addr, Some(&token)));
    assert_eq!(t.call("GET", "/api/v1/nodes/edge-1", "", None).unwrap().status, 200);
    std::thread::sleep(Duration::from_millis(20));
    std::fs::write(&token, "unknown").unwrap();
    assert_eq!(t.call("GET", "/api/v1/nodes/edge-1", "", None).unwrap().status, 401, "the rotated token is read");

    // Faults: queued 429 with Retry-After, slow answers, down and back with state kept.
    server.fail_next(1, 429, Some(7));
    let r = c.call("GET", "/api/v1/nodes/edge-1", "", None).unwrap();
    assert_eq!((r.status, r.retry_after), (429, Some(Duration::from_secs(7))));
    server.set_delay(Duration::from_secs(11));
    let slow = c.call("GET", "/api/v1/nodes/edge-1", "", None);
    assert!(slow.is_err(), "past the client's deadline: {slow:?}");
    server.set_delay(Duration::ZERO);
    server.down();
    assert!(c.call("GET", "/api/v1/nodes/edge-1", "", None).is_err());
    server.up();
    assert_eq!(c.call("GET", "/api/v1/nodes/edge-1", "", None).unwrap().status, 200);
    server.reject_pod("nope", "policy says no");
    let r = c.call("POST", pods, "application/json", Some(&mirror("nope", &node_uid))).unwrap();
    assert_eq!(r.status, 403);
    assert!(r.describe().contains("policy says no"));
    assert!(server.bytes().0 > 0 && server.bytes().1 > 0);
}

#[test]
fn the_pod_watch_lists_resumes_and_does_not_spin_on_cut_streams() {
    let (_dir, pki, server) = setup("watch-loop");
    let c = client(&pki.kubeconfig(server.addr, None));
    let node_uid = register(&c);
    c.call("POST", "/api/v1/namespaces/default/pods", "application/json", Some(&mirror("a", &node_uid))).unwrap();
    // Every watch is cut at once, with nothing in it.
    server.limit_watches(Some(Duration::ZERO));
    let (tx, rx) = std::sync::mpsc::sync_channel(16);
    let watcher = client(&pki.kubeconfig(server.addr, None));
    std::thread::spawn(move || atoll::mirror::watch_loop(&watcher, "edge-1", &tx));
    match rx.recv_timeout(Duration::from_secs(5)).unwrap() {
        atoll::mirror::Seen::Listed(items) => assert_eq!(items.len(), 1),
        atoll::mirror::Seen::Event(..) => panic!("a list comes first"),
    }
    std::thread::sleep(Duration::from_secs(4));
    let watches = server.log().iter().filter(|l| l.path.contains("watch=true")).count();
    assert!((1..=4).contains(&watches), "cut watches are retried with back-off, not at once: {watches}");
    // Streams that last: events flow, resumed from the last resourceVersion.
    server.limit_watches(None);
    std::thread::sleep(Duration::from_secs(3));
    c.call("POST", "/api/v1/namespaces/default/pods", "application/json", Some(&mirror("b", &node_uid))).unwrap();
    let event = loop {
        match rx.recv_timeout(Duration::from_secs(60)).unwrap() {
            atoll::mirror::Seen::Event(kind, pod) => break (kind, pod["metadata"]["name"].clone()),
            atoll::mirror::Seen::Listed(_) => {}
        }
    };
    assert_eq!(event, ("ADDED".to_string(), json!("b")));
    let lists = server.log().iter().filter(|l| l.path.contains("fieldSelector") && !l.path.contains("watch")).count();
    assert_eq!(lists, 1, "resumed, not listed again");
}

/// As kubelet's client: HTTP/2 to the API server, every request and the watch on one TLS
/// connection; through something that offers only HTTP/1.1 (a proxy), the same calls work
/// over that; a connection cut is dialled again, over HTTP/2 once it is offered again.
#[test]
fn http2_on_one_connection_and_http1_where_that_is_all_there_is() {
    let (_dir, pki, server) = setup("h2");
    let c = client(&pki.kubeconfig(server.addr, None));
    let node_uid = register(&c);
    let pods = "/api/v1/namespaces/default/pods";
    let watch = "/api/v1/pods?fieldSelector=spec.nodeName%3Dedge-1&watch=true&timeoutSeconds=2";
    std::thread::scope(|s| {
        let watcher = s.spawn(|| {
            let mut added = 0;
            let end = c.watch(watch, Duration::from_secs(2), &mut |e| {
                added += usize::from(e["type"] == "ADDED");
                true
            });
            (end.map(|e| e.is_none()).map_err(|e| e.to_string()), added)
        });
        std::thread::sleep(Duration::from_millis(300));
        for i in 0..5 {
            let r = c.call("POST", pods, "application/json", Some(&mirror(&format!("p{i}"), &node_uid))).unwrap();
            assert_eq!(r.status, 201, "{:?}", r.body);
        }
        let (ended, added) = watcher.join().unwrap();
        assert_eq!((ended, added), (Ok(true), 5), "the watch saw the pods created beside it");
    });
    let log = server.log();
    assert_eq!(log.len(), 7, "{:?}", log.iter().map(|l| (&l.method, &l.path)).collect::<Vec<_>>());
    assert!(log.iter().all(|l| l.proto == "HTTP/2"), "{:?}", log.iter().map(|l| l.proto).collect::<Vec<_>>());
    assert_eq!(server.connections(), 1, "one connection for every request and the watch");

    // Cut: the next request dials again.
    server.down();
    assert!(c.call("GET", "/api/v1/nodes/edge-1", "", None).is_err());
    server.up();
    assert_eq!(c.call("GET", "/api/v1/nodes/edge-1", "", None).unwrap().status, 200);
    assert_eq!(server.log().last().unwrap().proto, "HTTP/2");

    // Only HTTP/1.1 offered: a new client notices at its first request and goes on over it.
    server.offer_http2(false);
    let c1 = client(&pki.kubeconfig(server.addr, None));
    let before = server.log().len();
    assert_eq!(c1.call("GET", "/api/v1/nodes/edge-1", "", None).unwrap().status, 200);
    let mut added = 0;
    c1.watch(&watch.replace("timeoutSeconds=2", "timeoutSeconds=1"), Duration::from_secs(1), &mut |_| {
        added += 1;
        true
    })
    .unwrap();
    assert_eq!(added, 5);
    let after: Vec<&str> = server.log()[before..].iter().map(|l| l.proto).collect();
    assert_eq!(after, ["HTTP/1.1", "HTTP/1.1"]);
}

/// A connection that goes silent (a NAT that forgot it, a peer gone without a word): the
/// request past its deadline, then a PING nobody answers, and the next request dials again.
/// Without that check every request would wait on the dead connection for ever.
#[test]
fn a_silent_connection_is_dropped_once_a_ping_goes_unanswered() {
    let (_dir, pki, server) = setup("silent");
    let c = client(&pki.kubeconfig(server.addr, None));
    register(&c);
    assert_eq!(server.connections(), 1);
    server.silence_connections();
    let started = std::time::Instant::now();
    let lost = c.call("GET", "/api/v1/nodes/edge-1", "", None);
    assert!(lost.is_err(), "{lost:?}");
    let r = c.call("GET", "/api/v1/nodes/edge-1", "", None).expect("a new connection");
    assert_eq!(r.status, 200);
    assert_eq!(server.connections(), 2);
    assert!(started.elapsed() < Duration::from_secs(20), "{:?}", started.elapsed());
}

/// atoll's mirror for node edge-1 in this process, the runtime shown up (its threads run on
/// until the test binary ends); status compared every `update`, reported every 5 minutes, a
/// 40 s lease (renewed every 10 s).
fn mirror_here(
    dir: &std::path::Path,
    pki: &Pki,
    server: &ApiServer,
    update: Duration,
) -> (Arc<atoll::node::Node>, Arc<atoll::mirror::MirrorState>) {
    let node = common::edge::node();
    let opts = common::edge::mirror_options(pki.kubeconfig(server.addr, None), dir, update);
    let state = Arc::new(atoll::mirror::MirrorState::default());
    atoll::mirror::start(opts, node.clone(), state.clone());
    (node, state)
}

fn condition<'a>(obj: &'a Value, type_: &str) -> &'a Value {
    obj["status"]["conditions"].as_array().and_then(|cs| cs.iter().find(|c| c["type"] == type_)).unwrap_or(&Value::Null)
}

/// A restarted atoll finds its Node there (AlreadyExists): as kubelet, which reads the Node back,
/// a condition whose status it does not change keeps its lastTransitionTime; one it changes gets
/// a new one; another writer's condition is left alone.
#[test]
fn a_restart_keeps_the_transition_times_of_conditions_that_held() {
    let (dir, pki, server) = setup("restart-times");
    let since = "2026-01-02T03:04:05Z";
    let cond = |t: &str, status: &str, reason: &str| {
        json!({"type": t, "status": status, "reason": reason, "message": "as an earlier run left it",
               "lastHeartbeatTime": since, "lastTransitionTime": since})
    };
    let before = json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "edge-1"}, "status": {"conditions": [
        cond("Ready", "True", "KubeletReady"),
        cond("MemoryPressure", "True", "KubeletHasInsufficientMemory"),
        cond("example.com/Disk", "True", "Checked"),
    ]}});
    assert_eq!(server.admin("POST", "/api/v1/nodes", "application/json", Some(before)).0, 201);
    mirror_here(&dir, &pki, &server, Duration::from_secs(1));
    let node = eventually(Duration::from_secs(30), "the restarted atoll's report", || {
        server.get("nodes", "", "edge-1").filter(|n| condition(n, "Ready")["lastHeartbeatTime"] != since)
    });
    assert_eq!(condition(&node, "Ready")["status"], "True");
    assert_eq!(condition(&node, "Ready")["lastTransitionTime"], since, "Ready held: its time is kept");
    let memory = condition(&node, "MemoryPressure");
    assert_eq!(memory["status"], "False");
    assert_ne!(memory["lastTransitionTime"], since, "MemoryPressure changed: a new time");
    assert_eq!(condition(&node, "example.com/Disk"), &cond("example.com/Disk", "True", "Checked"));
    assert_eq!(node["metadata"]["labels"]["kubernetes.io/hostname"], "edge-1");
    assert_eq!(node["status"]["nodeInfo"]["kubeletVersion"], atoll::mirror::objects::KUBELET_VERSION);
}

/// A minute's outage (connections refused): the lease is renewed within one renew interval
/// (10 s for a 40 s lease) of the server answering again, as kubelet's lease controller
/// retries (200 ms doubling to 7 s), not after the minute-long back-off of everything else;
/// and the Ready the node lifecycle controller marked Unknown meanwhile (which only the node's
/// own report undoes) is True again as soon, not at the next 5-minute report. Then 40 s of
/// 503s, where each attempt shows: the lease is tried at least every 7 s, while the status
/// report the runtime's fall makes due still backs off beyond that, as everything else.
#[test]
fn after_an_outage_the_lease_and_ready_return_within_a_renew_interval() {
    let (dir, pki, server) = setup("outage");
    let (node, _) = mirror_here(&dir, &pki, &server, Duration::from_secs(2));
    let leases = |l: &apiserver::Logged| l.method == "PUT" && l.path.contains("/leases/");
    let renewed =
        |after: Instant| server.log().iter().find(|l| l.at >= after && leases(l) && l.status == 200).map(|l| l.at);
    let start = Instant::now();
    eventually(Duration::from_secs(30), "a first renewal", || renewed(start));
    let ready = || server.get("nodes", "", "edge-1").filter(|n| condition(n, "Ready")["status"] == "True");
    eventually(Duration::from_secs(30), "Ready", ready);
    server.down();
    let down = Instant::now();
    std::thread::sleep(Duration::from_secs(5));
    // What kube-controller-manager's node lifecycle controller writes of a silent node.
    let unknown = json!({"status": {"conditions": [{"type": "Ready", "status": "Unknown", "reason": "NodeStatusUnknown",
        "message": "Kubelet stopped posting node status.", "lastTransitionTime": "2026-11-27T00:00:00Z"}]}});
    let (code, _) =
        server.admin("PATCH", "/api/v1/nodes/edge-1/status", "application/strategic-merge-patch+json", Some(unknown));
    assert_eq!(code, 200);
    std::thread::sleep(Duration::from_secs(60).saturating_sub(down.elapsed()));
    let back = Instant::now();
    server.up();
    let at = eventually(Duration::from_secs(70), "a renewal after the outage", || renewed(back));
    let ready_again = eventually(Duration::from_secs(70), "Ready again", || ready().map(|_| back.elapsed()));
    eprintln!(
        "after a 60 s outage: the lease renewed {:?}, Ready again {ready_again:?} after the server came back",
        at - back
    );
    assert!(at - back <= Duration::from_secs(10), "the lease was renewed {:?} after the server came back", at - back);
    assert!(ready_again <= Duration::from_secs(10), "Ready again {ready_again:?} after the server came back");

    // 503s for 40 s: every attempt is in the log. The runtime falls meanwhile (a status to send).
    let from = server.log().len();
    server.unavailable(true);
    node.heartbeat().beat(Instant::now(), false, Duration::from_secs(3600));
    let began = Instant::now();
    std::thread::sleep(Duration::from_secs(40));
    server.unavailable(false);
    let (ended, log) = (Instant::now(), server.log());
    let gaps = |of: &dyn Fn(&apiserver::Logged) -> bool| {
        let at: Vec<Instant> = log[from..].iter().filter(|l| l.at < ended && of(l)).map(|l| l.at).collect();
        let mut gaps: Vec<Duration> = at.windows(2).map(|w| w[1] - w[0]).collect();
        gaps.extend(at.last().map(|last| ended - *last)); // and from the last one to the end
        (at.len(), gaps.into_iter().max().unwrap_or(ended - began))
    };
    let (tries, widest) = gaps(&leases);
    eprintln!("40 s of 503s: {tries} lease renewals tried, at most {widest:?} apart");
    assert!(tries >= 5 && widest <= Duration::from_millis(7500), "{tries} tries, {widest:?} apart");
    let (reports, widest) = gaps(&|l| l.path == "/api/v1/nodes/edge-1/status");
    assert!(reports >= 2 && widest > Duration::from_secs(8), "the status backs off: {reports} tries, {widest:?} apart");
    let at = eventually(Duration::from_secs(70), "a renewal after the 503s", || renewed(ended));
    assert!(at - ended <= Duration::from_millis(7500), "renewed {:?} after the 503s", at - ended);
}

/// Pod status goes out as a strategic merge patch, as kubelet's status manager sends it
/// (applied here by upstream code, k8scheck): a condition another writer added after atoll's
/// last watch event stays. A JSON merge patch would replace the list whole and drop it.
#[test]
fn a_condition_another_writer_added_survives_the_mirrors_status_patch() {
    let (dir, pki, server) = setup("conditions");
    let (node, state) = mirror_here(&dir, &pki, &server, Duration::from_secs(1));
    let pod: atoll::pod::Pod = serde_json::from_value(json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "web"}, "spec": {"containers": [{"name": "c", "image": "busybox"}]}}))
    .unwrap();
    let origin = atoll::pod::Origin::File("/etc/atoll/manifests/web.yaml".into());
    let sp = atoll::pod::identity::make_static(pod, &origin, "edge-1");
    let status = |ready: bool, before: Option<&PodStatus>, now: &str| {
        let cond = |t: &str, ok: bool| PodCondition {
            type_: t.into(),
            status: if ok { "True" } else { "False" }.into(),
            ..Default::default()
        };
        let mut s = PodStatus {
            phase: "Running".into(),
            conditions: vec![cond("PodScheduled", true), cond("Ready", ready)],
            host_ip: "192.0.2.7".into(),
            host_ips: vec![PodIp { ip: "192.0.2.7".into() }],
            qos_class: "BestEffort".into(),
            ..Default::default()
        };
        atoll::status::stamp_transitions(&mut s, before, now);
        s
    };
    let first = status(false, None, "2026-11-27T10:00:00Z");
    node.statuses().set(&sp.uid, first.clone());
    state.set_desired([&sp].into_iter());
    let mirror = eventually(Duration::from_secs(30), "the mirror's status", || {
        server.get("pods", "default", "web-edge-1").filter(|m| m["status"]["phase"] == "Running")
    });
    assert_eq!(condition(&mirror, "Ready")["lastTransitionTime"], "2026-11-27T10:00:00Z");
    assert_eq!(mirror["status"]["hostIPs"], json!([{"ip": "192.0.2.7"}]));
    // Another writer's condition, which atoll's watch does not show it yet.
    server.hold_watches(true);
    let gate = json!({"type": "example.com/gate", "status": "True", "lastTransitionTime": "2026-11-27T10:00:01Z"});
    let (code, _) = server.admin(
        "PATCH",
        "/api/v1/namespaces/default/pods/web-edge-1/status",
        "application/strategic-merge-patch+json",
        Some(json!({"status": {"conditions": [gate.clone()]}})),
    );
    assert_eq!(code, 200);
    node.statuses().set(&sp.uid, status(true, Some(&first), "2026-11-27T10:00:02Z"));
    let mirror = eventually(Duration::from_secs(30), "Ready on the mirror", || {
        server.get("pods", "default", "web-edge-1").filter(|m| condition(m, "Ready")["status"] == "True")
    });
    server.hold_watches(false);
    assert_eq!(condition(&mirror, "example.com/gate"), &gate, "the other writer's condition stays");
    assert_eq!(condition(&mirror, "Ready")["lastTransitionTime"], "2026-11-27T10:00:02Z");
    assert_eq!(condition(&mirror, "PodScheduled")["lastTransitionTime"], "2026-11-27T10:00:00Z");
    let patches: Vec<String> = server
        .log()
        .iter()
        .filter(|l| l.method == "PATCH" && l.path.ends_with("/pods/web-edge-1/status"))
        .map(|l| l.content_type.clone())
        .collect();
    assert!(
        !patches.is_empty() && patches.iter().all(|c| c == "application/strategic-merge-patch+json"),
        "{patches:?}"
    );
}
