//! Mirroring end to end: `atoll run --kubeconfig` against the real private containerd and the
//! test API server (tests/apiserver): an API server unreachable at start, node registration
//! and labels, lease renewals, mirrors with the right annotation and owner, a restarting
//! container's status, a refused mirror reported locally and created once allowed, user
//! deletes, a manifest edit, static pod removal, a slow server, an outage with changes made
//! meanwhile, the steady state's traffic (lease renewals only), Retry-After, and an atoll
//! restart that adopts the mirrors and keeps its Node's transition times. Every request is
//! held to the upstream definitions by the test server (k8scheck).
//! (Its own test binary: atoll removes every atoll-made sandbox it was not told to run.)

use crate::apiserver;
use crate::common;

use apiserver::{ApiServer, Pki};
use atoll::cri::api::{ContainerFilter, ContainerState};
use common::{eventually, testbed, Testbed};
use serde_json::{json, Value};
use std::collections::HashMap;
use std::path::Path;
use std::time::{Duration, Instant};

/// atoll with a kubeconfig, short lease and status periods, fast crash back-off.
fn start_agent(tb: &Testbed, dir: &Path, kubeconfig: &Path) -> common::Agent {
    let own = dir.join("atoll.yaml");
    std::fs::create_dir_all(dir).unwrap();
    std::fs::write(
        &own,
        "apiVersion: atoll.io/v1alpha1\nkind: AtollConfiguration\ncrashLoopBackOff: {initialDelay: 1s, maxDelay: 2s}\n",
    )
    .unwrap();
    common::Agent::start(
        tb,
        dir,
        "fileCheckFrequency: 1s\nnodeLeaseDurationSeconds: 8\nmaxPods: 30\nnodeStatusUpdateFrequency: 1s\n",
        &[
            &format!("--atoll-config={}", own.display()),
            &format!("--kubeconfig={}", kubeconfig.display()),
            "--node-labels=site=test-bed",
            "--v=2",
        ],
        &[],
    )
}

/// The pod as the local API shows it.
fn local(agent: &common::Agent, name: &str) -> Option<Value> {
    let list: Value = serde_json::from_str(&agent.cli(&["pods", "-o", "json"]).1).ok()?;
    list["items"].as_array()?.iter().find(|p| p["metadata"]["name"] == format!("{name}-tb")).cloned()
}

fn manifest(name: &str, command: &str, extra_meta: &str, restart: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\n{extra_meta}spec:\n  hostNetwork: true\n  restartPolicy: {restart}\n  terminationGracePeriodSeconds: 1\n  containers:\n  - name: c\n    image: docker.io/library/busybox:1.36\n    command: [sh, -c, '{command}']\n"
    )
}

const SLEEPER: &str = "trap \"exit 0\" TERM; while true; do sleep 1; done";

/// The pod's running container `c`: (container ID, attempt).
fn running_container(tb: &Testbed, pod: &str) -> Option<(String, u32)> {
    let selector = HashMap::from([("io.kubernetes.pod.name".to_string(), format!("{pod}-tb"))]);
    let cs = smol::block_on(
        tb.cri().list_containers(Some(ContainerFilter { label_selector: selector, ..Default::default() })),
    )
    .ok()?;
    cs.iter()
        .find(|c| c.state == ContainerState::ContainerRunning as i32)
        .map(|c| (c.id.clone(), c.metadata.as_ref().map_or(0, |m| m.attempt)))
}

fn mirror(server: &ApiServer, pod: &str) -> Option<Value> {
    server.get("pods", "default", &format!("{pod}-tb"))
}

fn uid(v: &Value) -> String {
    v["metadata"]["uid"].as_str().unwrap_or_default().to_string()
}

#[test]
fn mirrors_follow_static_pods_and_the_api_server_never_touches_them() {
    let _room = common::room(module_path!());
    let tb = testbed();
    let dir = crate::common::Scratch::new("mirror");
    let manifests = dir.join("manifests");
    std::fs::create_dir_all(&manifests).unwrap();
    let pki = Pki::new(&dir.join("pki"), "tb");
    let server = ApiServer::start(&pki, "tb");
    let kubeconfig = pki.kubeconfig(server.addr, None);
    server.reject_pod("denied-tb", "privileged pods are not allowed here");
    std::fs::write(manifests.join("web.yaml"), manifest("web", SLEEPER, "", "Always")).unwrap();
    std::fs::write(manifests.join("crash.yaml"), manifest("crash", "sleep 1; exit 1", "", "Always")).unwrap();
    std::fs::write(manifests.join("denied.yaml"), manifest("denied", SLEEPER, "", "Always")).unwrap();
    let elsewhere =
        manifest("elsewhere", SLEEPER, "", "Always").replace("spec:\n", "spec:\n  nodeSelector: {site: elsewhere}\n");
    std::fs::write(manifests.join("elsewhere.yaml"), elsewhere).unwrap();

    // The API server is down when atoll starts: the pods run regardless.
    server.down();
    let agent = start_agent(tb, &dir, &kubeconfig);
    let (web_id, _) =
        eventually(Duration::from_secs(60), "web running with no API server", || running_container(tb, "web"));
    assert!(server.log().is_empty());
    server.up();

    // Registration: labels, taint, capacity, node info, Ready.
    let node = eventually(Duration::from_secs(60), "the node registered and Ready", || {
        let n = server.get("nodes", "", "tb")?;
        let ready = n["status"]["conditions"].as_array()?.iter().any(|c| c["type"] == "Ready" && c["status"] == "True");
        ready.then_some(n)
    });
    let labels = &node["metadata"]["labels"];
    assert_eq!(labels["kubernetes.io/hostname"], "tb");
    assert_eq!(labels["kubernetes.io/os"], "linux");
    assert_eq!(labels["kubernetes.io/arch"], atoll::mirror::objects::goarch());
    assert_eq!(labels["site"], "test-bed");
    // The API source is on (the default with a kubeconfig): no static-only taint.
    let taints = node["spec"]["taints"].as_array().cloned().unwrap_or_default();
    assert!(!taints.iter().any(|t| t["key"] == "atoll.io/static-pods-only"), "{taints:?}");
    assert_eq!(node["status"]["capacity"]["pods"], "30");
    // Allocatable: the capacity less kubelet's default hard eviction threshold for memory.
    let mem = |k: &str| atoll::pod::quantity::Quantity::parse(node["status"][k]["memory"].as_str().unwrap()).unwrap();
    assert_eq!(mem("capacity").value() - mem("allocatable").value(), 100 << 20, "{}", node["status"]);
    // kubelet's form, as kubectl and kubeadm parse it (k8scheck parses every Node's with
    // apimachinery's version.ParseSemantic); atoll's own version as build metadata.
    assert_eq!(node["status"]["nodeInfo"]["kubeletVersion"], atoll::mirror::objects::KUBELET_VERSION);
    assert_eq!(node["status"]["nodeInfo"]["kubeProxyVersion"], "", "deprecated: left empty, as kubelet 1.33 on");
    assert!(node["status"]["nodeInfo"]["containerRuntimeVersion"].as_str().unwrap().starts_with("containerd://"));
    let conds: Vec<&str> =
        node["status"]["conditions"].as_array().unwrap().iter().filter_map(|c| c["type"].as_str()).collect();
    for t in ["MemoryPressure", "DiskPressure", "PIDPressure", "Ready"] {
        assert!(conds.contains(&t), "{conds:?}");
    }
    assert!(node["status"]["addresses"].as_array().unwrap().iter().any(|a| a["type"] == "Hostname"));
    let node_uid = uid(&node);

    // The lease renews (every 2 s for an 8 s lease) and is owned by the node.
    let lease = |s: &ApiServer| s.get("leases", "kube-node-lease", "tb");
    let first = eventually(Duration::from_secs(30), "the lease", || lease(&server));
    assert_eq!(first["spec"]["holderIdentity"], "tb");
    assert_eq!(first["spec"]["leaseDurationSeconds"], 8);
    eventually(Duration::from_secs(20), "a renewal with the node as owner", || {
        let l = lease(&server)?;
        (l["spec"]["renewTime"] != first["spec"]["renewTime"]
            && l["metadata"]["ownerReferences"][0]["uid"] == node_uid.as_str())
        .then_some(())
    });
    // As kubelet's client: protobuf over HTTP/2. A label someone else puts on the lease stays
    // through later renewals (atoll edits the server's bytes, never drops what it does not know).
    let renewals: Vec<_> =
        server.log().into_iter().filter(|l| l.method == "PUT" && l.path.contains("/leases/")).collect();
    assert!(
        renewals.iter().all(|l| l.proto == "HTTP/2" && l.content_type == "application/vnd.kubernetes.protobuf"),
        "{:?}",
        renewals.iter().map(|l| (l.proto, &l.content_type)).collect::<Vec<_>>()
    );
    let labelled_at = Instant::now();
    let (code, labelled) = server.admin(
        "PATCH",
        "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/tb",
        "application/merge-patch+json",
        Some(json!({"metadata": {"labels": {"team": "edge"}}})),
    );
    assert_eq!(code, 200, "{labelled}");
    eventually(Duration::from_secs(20), "two renewals after the label", || {
        let l = lease(&server)?;
        let later = server
            .log()
            .iter()
            .filter(|r| r.method == "PUT" && r.path.contains("/leases/") && r.status == 200 && r.at > labelled_at)
            .count();
        (later >= 2 && l["spec"]["renewTime"] != labelled["spec"]["renewTime"]).then_some(())
    });
    assert_eq!(lease(&server).unwrap()["metadata"]["labels"]["team"], "edge", "the label kept");

    // A pod admission rejected is mirrored Failed, with kubelet's reason and message.
    let rejected = eventually(Duration::from_secs(30), "elsewhere's mirror Failed", || {
        mirror(&server, "elsewhere").filter(|m| m["status"]["phase"] == "Failed")
    });
    assert_eq!(rejected["status"]["reason"], "NodeAffinity");
    assert!(rejected["status"]["message"].as_str().unwrap().starts_with("Pod was rejected: Predicate NodeAffinity"));
    assert!(running_container(tb, "elsewhere").is_none());

    // The mirror: annotation = the static pod's hash, the node as controlling owner, status.
    let web = eventually(Duration::from_secs(30), "web's mirror Running", || {
        mirror(&server, "web").filter(|m| m["status"]["phase"] == "Running")
    });
    let hash = web["metadata"]["annotations"]["kubernetes.io/config.hash"].as_str().unwrap().to_string();
    assert_eq!(web["metadata"]["annotations"]["kubernetes.io/config.mirror"], hash.as_str());
    assert_eq!(
        web["metadata"]["ownerReferences"],
        json!([{"apiVersion": "v1", "kind": "Node", "name": "tb", "uid": node_uid, "controller": true}])
    );
    assert_ne!(uid(&web), hash, "the mirror has its own UID");
    assert_eq!(web["status"]["containerStatuses"][0]["ready"], true);
    assert_eq!(web["status"]["containerStatuses"][0]["containerID"], format!("containerd://{web_id}"));
    // Each condition has the time its status last changed (kubelet's status manager sets
    // it); hostIPs beside hostIP; the status went out as strategic merge patches.
    let since = |m: &Value, t: &str| {
        let c = m["status"]["conditions"].as_array().and_then(|cs| cs.iter().find(|c| c["type"] == t).cloned());
        c.and_then(|c| c["lastTransitionTime"].as_str().map(String::from))
    };
    for c in web["status"]["conditions"].as_array().unwrap() {
        assert!(c["lastTransitionTime"].as_str().is_some_and(|t| t.ends_with('Z')), "{c}");
    }
    let scheduled = since(&web, "PodScheduled").unwrap();
    if let Some(host_ip) = web["status"]["hostIP"].as_str() {
        assert_eq!(web["status"]["hostIPs"], json!([{ "ip": host_ip }]));
    }
    let status_patches: Vec<String> = server
        .log()
        .iter()
        .filter(|l| l.method == "PATCH" && l.path.contains("/pods/") && l.path.ends_with("/status"))
        .map(|l| l.content_type.clone())
        .collect();
    assert!(!status_patches.is_empty(), "no pod status patch yet");
    assert!(status_patches.iter().all(|c| c == "application/strategic-merge-patch+json"), "{status_patches:?}");

    // A restarting container's status reaches the mirror.
    eventually(Duration::from_secs(60), "crash's restarts in its mirror", || {
        let m = mirror(&server, "crash")?;
        (m["status"]["containerStatuses"][0]["restartCount"].as_i64()? >= 2).then_some(())
    });

    // A refused mirror: reported locally, the pod runs, and it is created once allowed.
    let denied = eventually(Duration::from_secs(30), "the refusal reported locally", || {
        let p = local(&agent, "denied")?;
        p["metadata"]["annotations"]["atoll.io/mirror"].as_str()?.contains("refused").then_some(p)
    });
    assert!(denied["metadata"]["annotations"]["atoll.io/mirror"].as_str().unwrap().contains("privileged pods"));
    let described = agent.cli(&["describe", "denied"]).1;
    assert!(described.contains("Mirror:") && described.contains("privileged pods are not allowed"), "{described}");
    assert!(described.contains("MirrorPodRejected"), "{described}");
    assert!(running_container(tb, "denied").is_some(), "a refused mirror does not touch the pod");
    assert!(mirror(&server, "denied").is_none());
    server.allow_pod("denied-tb");
    eventually(Duration::from_secs(40), "denied's mirror once allowed", || mirror(&server, "denied"));

    // A user deletes the mirror (kubectl's default: graceful): it is replaced, web runs on.
    let before = uid(&web);
    let (code, _) = server.admin("DELETE", "/api/v1/namespaces/default/pods/web-tb", "application/json", None);
    assert_eq!(code, 200);
    let again = eventually(Duration::from_secs(30), "web's mirror back", || {
        mirror(&server, "web").filter(|m| uid(m) != before && m["metadata"]["deletionTimestamp"].is_null())
    });
    let (code, _) = server.admin(
        "DELETE",
        "/api/v1/namespaces/default/pods/web-tb",
        "application/json",
        Some(json!({"gracePeriodSeconds": 0})),
    );
    assert_eq!(code, 200);
    let replaced = eventually(Duration::from_secs(30), "web's mirror back after a forced delete", || {
        mirror(&server, "web").filter(|m| uid(m) != uid(&again) && m["status"]["phase"] == "Running")
    });
    assert_eq!(since(&replaced, "PodScheduled"), Some(scheduled), "the pod's condition times, not the mirror's");
    assert_eq!(running_container(tb, "web"), Some((web_id.clone(), 0)), "web was not restarted");

    // A manifest edit replaces the mirror (new hash); removing a manifest deletes its mirror.
    std::fs::write(manifests.join("web.yaml"), manifest("web", SLEEPER, "  labels: {edition: two}\n", "Always"))
        .unwrap();
    let edited = eventually(Duration::from_secs(40), "the edited mirror", || {
        mirror(&server, "web").filter(|m| m["metadata"]["labels"]["edition"] == "two")
    });
    assert_ne!(edited["metadata"]["annotations"]["kubernetes.io/config.mirror"], hash.as_str());
    std::fs::remove_file(manifests.join("crash.yaml")).unwrap();
    eventually(Duration::from_secs(30), "crash's mirror deleted", || mirror(&server, "crash").is_none().then_some(()));
    let (web_id, _) = eventually(Duration::from_secs(30), "the edited web running", || running_container(tb, "web"));
    eventually(Duration::from_secs(30), "the edited web's mirror Running", || {
        mirror(&server, "web").filter(|m| m["status"]["phase"] == "Running")
    });

    // A slow server (answers after the client's 10 s deadline): timeouts only; the pods and
    // the local API are untouched.
    server.set_delay(Duration::from_secs(12));
    std::thread::sleep(Duration::from_secs(25));
    assert_eq!(local(&agent, "web").expect("the local API answers")["status"]["phase"], "Running");
    assert_eq!(running_container(tb, "web"), Some((web_id.clone(), 0)));
    server.set_delay(Duration::ZERO);
    let healed = Instant::now();
    eventually(Duration::from_secs(90), "renewals after the slow spell", || {
        server.log().iter().any(|l| l.at > healed && l.path.contains("/leases/tb") && l.status == 200).then_some(())
    });

    // An outage, with changes made meanwhile: no container restarts, then convergence.
    server.down();
    std::fs::write(manifests.join("late.yaml"), manifest("late", SLEEPER, "", "Always")).unwrap();
    std::fs::remove_file(manifests.join("denied.yaml")).unwrap();
    eventually(Duration::from_secs(30), "late running during the outage", || running_container(tb, "late"));
    std::thread::sleep(Duration::from_secs(10));
    assert_eq!(running_container(tb, "web"), Some((web_id.clone(), 0)));
    let back = Instant::now();
    server.up();
    eventually(Duration::from_secs(90), "convergence after the outage", || {
        let late = mirror(&server, "late")?;
        (late["status"]["phase"] == "Running" && mirror(&server, "denied").is_none()).then_some(())
    });
    eventually(Duration::from_secs(90), "lease renewals and the pod watch again", || {
        let log = server.log();
        let renewed = log.iter().any(|l| l.at > back && l.path.contains("/leases/tb") && l.status == 200);
        let watching = log.iter().any(|l| l.at > back && l.path.contains("watch=true") && l.status == 200);
        (renewed && watching).then_some(())
    });
    assert_eq!(running_container(tb, "web"), Some((web_id.clone(), 0)), "no restarts across the outage");

    // Steady state: lease renewals only.
    std::thread::sleep(Duration::from_secs(5));
    let (from, bytes_before) = (server.log().len(), server.bytes());
    let window = Instant::now();
    std::thread::sleep(Duration::from_secs(12));
    let log = server.log();
    let (bytes_after, took) = (server.bytes(), window.elapsed());
    let steady: Vec<_> = log[from..].iter().map(|l| format!("{} {}", l.method, l.path)).collect();
    assert!(steady.len() >= 4, "renewals every 2 s: {steady:?}");
    assert!(
        steady.iter().all(|l| l.starts_with("PUT /apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/tb")),
        "{steady:?}"
    );
    let per_min = |b: u64| b as f64 * 60.0 / took.as_secs_f64();
    eprintln!(
        "steady state, 3 pods, lease every 2 s: {:.0} bytes/min to the server, {:.0} from it",
        per_min(bytes_after.0 - bytes_before.0),
        per_min(bytes_after.1 - bytes_before.1)
    );

    // 429 with Retry-After: the next renewal waits at least that long.
    let from = server.log().len();
    server.fail_next(2, 429, Some(4));
    eventually(Duration::from_secs(30), "renewals after the 429s", || {
        let log = server.log();
        let mine: Vec<_> = log[from..].iter().filter(|l| l.path.contains("/leases/")).cloned().collect();
        let ok = mine
            .iter()
            .position(|l| l.status == 429)
            .and_then(|i| mine[i..].iter().position(|l| l.status == 200).map(|j| i + j))?;
        for pair in mine[..=ok].windows(2) {
            if pair[0].status == 429 {
                let gap = pair[1].at - pair[0].at;
                assert!(gap >= Duration::from_millis(3900), "Retry-After: 4 honoured, got {gap:?}");
            }
        }
        // A renewal the server did not take is sent again as it was: no read first.
        let methods: Vec<&str> = mine[..=ok].iter().map(|l| l.method.as_str()).collect();
        assert!(methods.iter().all(|m| *m == "PUT"), "{methods:?}");
        Some(())
    });
    assert_eq!(running_container(tb, "web"), Some((web_id.clone(), 0)));
    assert!(!agent.log().contains("panicked"));

    // atoll restarts: it adopts its pods and their mirrors, replacing nothing, and its Node's
    // Ready keeps its transition time (kubelet reads the Node back).
    let mirrors: Vec<String> = ["web", "late"].iter().map(|p| uid(&mirror(&server, p).unwrap())).collect();
    drop(agent);
    let ready = |n: &Value| {
        n["status"]["conditions"].as_array().and_then(|cs| cs.iter().find(|c| c["type"] == "Ready").cloned())
    };
    let ready_before = ready(&server.get("nodes", "", "tb").unwrap()).unwrap();
    assert_eq!(ready_before["status"], "True");
    let restart = Instant::now();
    let from = server.log().len();
    let _agent = start_agent(tb, &dir, &kubeconfig);
    eventually(Duration::from_secs(60), "the restarted atoll watching and renewing", || {
        let log = server.log();
        let new = &log[from..];
        (new.iter().any(|l| l.path.contains("watch=true"))
            && new.iter().filter(|l| l.path.contains("/leases/")).count() >= 2)
            .then_some(())
    });
    // (Its heartbeat may fall in the second of the last one before the restart: the report is
    // known by its request.)
    let ready_after = eventually(Duration::from_secs(30), "the restarted atoll's node report", || {
        let reported = server.log()[from..]
            .iter()
            .any(|l| l.method == "PATCH" && l.path.starts_with("/api/v1/nodes/tb/status") && l.status == 200);
        reported.then(|| ready(&server.get("nodes", "", "tb")?)).flatten()
    });
    assert_eq!(ready_after["status"], "True");
    assert_eq!(ready_after["lastTransitionTime"], ready_before["lastTransitionTime"], "Ready held through the restart");
    std::thread::sleep(Duration::from_secs(3));
    let after: Vec<String> = ["web", "late"].iter().map(|p| uid(&mirror(&server, p).unwrap())).collect();
    assert_eq!(after, mirrors, "the mirrors were kept");
    let writes: Vec<String> = server.log()[from..]
        .iter()
        .filter(|l| l.at > restart && (l.method == "POST" || l.method == "DELETE") && l.path.contains("/pods"))
        .map(|l| format!("{} {}", l.method, l.path))
        .collect();
    assert!(writes.is_empty(), "no pod created or deleted after the restart: {writes:?}");
    assert_eq!(running_container(tb, "web"), Some((web_id, 0)));
}
