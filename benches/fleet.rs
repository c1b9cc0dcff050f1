//! A fleet against one API server: N mirrors (atoll's mirror component, each with its own
//! node state, identity and HTTP/2 connection; no containers: a node whose runtime answers,
//! no static pods) in this process against the test API server (tests/apiserver), at kubelet's
//! default timings (a 40 s lease renewed every 10 s, the status checked every 10 s and
//! reported every 5 minutes). Measures:
//!
//! - the steady state: requests and bytes per node per hour, the server's request rate;
//! - an outage of the API server, then, with the server answering 429 (Retry-After: 1) above
//!   twice the steady rate as API Priority and Fairness would: the request rate second by
//!   second, its peak against the steady rate, the time until it is back within 20 % of the
//!   steady rate, the time until every node has renewed its lease and watches its pods again,
//!   and the 429s: how many, and how often a node came back sooner than it was told;
//! - with each node's API pod source on (kubelet's third source: the pods bound to it, listed
//!   and watched), how many nodes resumed the watch of their pods from the resourceVersion they
//!   had, and how many listed them again, when the server still holds that resourceVersion.
//!
//! `cargo bench --bench fleet`: ATOLL_BENCH_FLEET_NODES=1000, ATOLL_BENCH_FLEET_OUTAGE=300
//! seconds; under `cargo test`, 20 nodes and a 10 s outage.

#[path = "../tests/apiserver/mod.rs"]
mod apiserver;
#[path = "../tests/common/mod.rs"]
mod common;

use atoll::mirror::{MirrorState, Options};
use atoll::node::{Facts, Node};
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

fn env_or(name: &str, default: u64) -> u64 {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

fn main() {
    let bench = std::env::args().any(|a| a == "--bench");
    let nodes = env_or("ATOLL_BENCH_FLEET_NODES", if bench { 1000 } else { 20 }) as usize;
    let outage = Duration::from_secs(env_or("ATOLL_BENCH_FLEET_OUTAGE", if bench { 300 } else { 10 }));
    let steady_window = Duration::from_secs(if bench { 330 } else { 20 });
    let dir = std::env::temp_dir().join(format!("atoll-bench-fleet-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("nodes")).unwrap();
    let pki = apiserver::Pki::new(&dir.join("pki"), "n-0");
    let server = apiserver::ApiServer::start(&pki, "n-0");
    // A real server's watch cache holds minutes of events; the fleet writes ~100 a second.
    server.keep_events(200_000);

    // The API source's snapshots: none is expected (no pod is bound to the fleet), but a node's
    // source may send one, and it must not block.
    let (updates, snapshots) = smol::channel::unbounded();
    let started = Instant::now();
    for i in 0..nodes {
        let (name, kubeconfig) = server.fleet_node(&pki, &dir.join("nodes"), i);
        let node = Node::new(Facts {
            name: name.clone(),
            root_dir: dir.clone(),
            host_ip: format!("10.{}.{}.{}", i >> 16 & 255, i >> 8 & 255, i & 255),
            cpu_millis: 2000,
            memory_bytes: 4 << 30,
            runtime_name: "containerd".into(),
            labels: atoll::node::machine::labels(&name, &BTreeMap::new()),
            allocatable: atoll::node::machine::Resources {
                cpu_millis: 2000,
                memory_bytes: (4 << 30) - (100 << 20),
                ephemeral_bytes: 0,
                pods: 110,
            },
            ..Default::default()
        });
        // The runtime answered, and keeps answering for the length of the run.
        node.heartbeat().beat(Instant::now(), true, Duration::from_secs(86_400));
        let state = Arc::new(MirrorState::default());
        state.set_desired(std::iter::empty::<&atoll::pod::StaticPod>());
        let opts = Options {
            kubeconfig,
            node: name,
            taints: Vec::new(),
            status_update_frequency: Duration::from_secs(10),
            status_report_frequency: Duration::from_secs(300),
            lease_duration_seconds: 40,
            runtime_version: "containerd://2.1.0".into(),
            endpoint_port: 10250,
            encrypted_pod_specs: false,
            bootstrap_kubeconfig: None,
            cert_dir: std::path::PathBuf::from("/nonexistent"),
            rotate_certificates: false,
            server_tls_bootstrap: false,
            serving: None,
            api_source: Some(atoll::mirror::bound::ApiSource {
                updates: updates.clone(),
                dir: dir.join("nodes").join(format!("n-{i}")).join("api"),
            }),
        };
        atoll::mirror::start(opts, node, state);
    }
    let users: Vec<String> = (0..nodes).map(|i| format!("system:node:n-{i}")).collect();
    common::eventually(Duration::from_secs(600), "every node registered, leased and watching", || {
        all_settled(&server.log(), &users, started).then_some(())
    });
    println!("fleet: {nodes} mirrors in one process against the test API server (kubelet's default timings)");
    println!("  every node registered, leased and watching after {:.1} s", started.elapsed().as_secs_f64());

    // Steady state.
    std::thread::sleep(Duration::from_secs(if bench { 30 } else { 3 }));
    let (from, (in0, out0), t0) = (server.log().len(), server.bytes(), Instant::now());
    std::thread::sleep(steady_window);
    let (log, (in1, out1), took) = (server.log(), server.bytes(), t0.elapsed());
    let steady: Vec<_> = log[from..].to_vec();
    let rate = steady.len() as f64 / took.as_secs_f64();
    let per_hour = 3600.0 / took.as_secs_f64() / nodes as f64;
    println!(
        "  steady state over {:.0} s: {:.1} requests/s at the server; per node per hour: {:.0} requests, {:.0} bytes to the server, {:.0} from it",
        took.as_secs_f64(),
        rate,
        steady.len() as f64 * per_hour,
        (in1 - in0) as f64 * per_hour,
        (out1 - out0) as f64 * per_hour,
    );
    println!("    requests in the window: {}", kinds(&steady));

    // The outage, then the return under a rate limit of twice the steady rate.
    server.limit_rate(Some((2.0 * rate, rate.max(1.0))), 1);
    server.down();
    std::thread::sleep(outage);
    let from = server.log().len();
    server.up();
    let back = Instant::now();
    let recovered = common::eventually(Duration::from_secs(if bench { 600 } else { 300 }), "every node back", || {
        all_settled(&server.log()[from..], &users, back).then(|| back.elapsed())
    });
    // Watch the rate until it has been quiet for a while.
    std::thread::sleep(Duration::from_secs(if bench { 180 } else { 10 }).saturating_sub(back.elapsed()));
    let after: Vec<_> = server.log()[from..].to_vec();
    let mut per_second: BTreeMap<u64, usize> = BTreeMap::new();
    for l in &after {
        *per_second.entry(l.at.saturating_duration_since(back).as_secs()).or_default() += 1;
    }
    let peak = per_second.values().copied().max().unwrap_or(0);
    let quiet = per_second.iter().rev().find(|(_, n)| **n as f64 > 1.2 * rate).map_or(0, |(s, _)| s + 1);
    println!(
        "  after a {:.0} s outage: peak {peak} requests/s ({:.2}x the steady rate), within 20 % of steady after {quiet} s, every node's lease renewed and its pods watched after {:.1} s",
        outage.as_secs_f64(),
        peak as f64 / rate,
        recovered.as_secs_f64()
    );
    let curve: Vec<String> = per_second.iter().take(60).map(|(s, n)| format!("{s}:{n}")).collect();
    println!("    requests per second after the return (second:count): {}", curve.join(" "));
    // 429s: how many, and whether a node came back before its Retry-After (1 s).
    let mut by_node: HashMap<&str, Vec<&apiserver::Logged>> = HashMap::new();
    for l in &after {
        by_node.entry(l.user.as_str()).or_default().push(l);
    }
    // A node's loops run side by side: a request of another loop that arrives just after a
    // 429 was on its way before the node could hear it (in flight), so it counts only from
    // IN_FLIGHT on; the same loop's next request is sent after the answer, so it always counts.
    const IN_FLIGHT: Duration = Duration::from_millis(100);
    let throttled = after.iter().filter(|l| l.status == 429).count();
    let mut too_soon = Vec::new();
    let mut most = 0;
    for reqs in by_node.values_mut() {
        reqs.sort_by_key(|l| l.at);
        most = most.max(reqs.iter().filter(|l| l.status == 429).count());
        for (i, told) in reqs.iter().enumerate().filter(|(_, l)| l.status == 429) {
            let own = told.kind();
            let mut own_next_seen = false;
            for l in &reqs[i + 1..] {
                let gap = l.at.duration_since(told.at);
                let same = l.kind() == own;
                if gap < Duration::from_secs(1) && (same && !own_next_seen || !same && gap >= IN_FLIGHT) {
                    too_soon.push(format!("{} {gap:?} after a 429 to {own}", l.kind()));
                }
                own_next_seen |= same;
            }
        }
    }
    println!(
        "    429s: {throttled} in all, at most {most} for one node; requests sooner than the Retry-After after a 429: {}",
        too_soon.len()
    );
    println!("    requests after the return: {}", kinds(&after));
    let (resumed, relisted) = resumed_and_relisted(&after, &users);
    println!(
        "    the pods (the API source's and the mirror's one list and watch): {resumed} of {nodes} nodes resumed their watch from the resourceVersion they had, {relisted} listed again (the server kept every resourceVersion of the outage)"
    );
    drop(snapshots);
    println!();
    assert!(too_soon.is_empty(), "a node came back before the server's Retry-After: {too_soon:?}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// Whether every node has, since `since`, renewed its lease and watched its pods.
fn all_settled(log: &[apiserver::Logged], users: &[String], since: Instant) -> bool {
    let mut leased = std::collections::HashSet::new();
    let mut watching = std::collections::HashSet::new();
    for l in log.iter().filter(|l| l.at >= since && (200..300).contains(&l.status)) {
        if l.path.contains("/leases/") && l.method != "GET" {
            leased.insert(l.user.as_str());
        } else if l.path.contains("watch=true") {
            watching.insert(l.user.as_str());
        }
    }
    users.iter().all(|u| leased.contains(u.as_str()) && watching.contains(u.as_str()))
}

/// How many of `users` watched their pods again from a resourceVersion, and how many listed
/// them again, in `log`.
fn resumed_and_relisted(log: &[apiserver::Logged], users: &[String]) -> (usize, usize) {
    let pods = |l: &&apiserver::Logged| l.method == "GET" && l.path.starts_with("/api/v1/pods?");
    let count = |f: &dyn Fn(&apiserver::Logged) -> bool| {
        let did: std::collections::HashSet<&str> =
            log.iter().filter(pods).filter(|l| f(l)).map(|l| l.user.as_str()).collect();
        users.iter().filter(|u| did.contains(u.as_str())).count()
    };
    let resumed = count(&|l| {
        let rv = l.path.split('&').find_map(|kv| kv.strip_prefix("resourceVersion=")).unwrap_or("");
        l.path.contains("watch=true") && !matches!(rv, "" | "0") && (200..300).contains(&l.status)
    });
    (resumed, count(&|l| !l.path.contains("watch=true")))
}

/// The requests of a window by kind, as "32 PUT lease, 1 watch pods".
fn kinds(log: &[apiserver::Logged]) -> String {
    let mut n: BTreeMap<String, usize> = BTreeMap::new();
    for l in log {
        let what = l.kind();
        let what = if l.status == 429 { format!("{what} (429)") } else { what };
        *n.entry(what).or_default() += 1;
    }
    n.iter().map(|(k, v)| format!("{v} {k}")).collect::<Vec<_>>().join(", ")
}
