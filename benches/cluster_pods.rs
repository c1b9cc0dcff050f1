//! Pods from the cluster (the API source) on the private containerd test bed, against the test
//! API server (tests/apiserver). Prints figures; asserts nothing about time or bytes.
//!
//! 1. start: a pod bound to the node created in the API server (its watch event goes out as the
//!    object is stored) -> the runtime's reply to atoll's StartContainer, next to the same
//!    spec as a static pod (the manifest's rename -> the same reply), in one agent, the two
//!    alternating which goes first; and the teardown: a DELETE with grace 0 -> the reply to
//!    atoll's RemovePodSandbox, next to the manifest's removal (which includes the file
//!    source's 10 ms wait for a re-create). Ends are read from atoll's trace of its CRI calls
//!    (`shared/calls.rs`), as in the suite.
//! 2. an idle watch's cost on the link: watches of a node's pods, each atoll's own list and
//!    watch (`mirror::watch::watch_loop`: bookmarks asked for, ended by the server after 5 to
//!    10 minutes and begun again from the last resourceVersion) on a connection of its own
//!    (HTTP/2, as atoll speaks to kube-apiserver), against a server that sends bookmarks as
//!    kube-apiserver's watch cache does (about every minute, and 2 s before a watch's end, when
//!    the resourceVersion has moved: the bench writes a ConfigMap every 10 s, as the rest of
//!    a cluster would).
//!    The bytes of those connections on the wire (TLS records both ways) over a window, per
//!    watch, taken to a day. It runs beside part 1 (bytes do not depend on the machine's load).
//!
//!   cargo bench --bench cluster_pods  (ATOLL_BENCH_ROUNDS=20 rounds; ATOLL_BENCH_WATCH_WINDOW
//!                                      =660 s, 0 for part 1 alone; under `cargo test` a short
//!                                      smoke run with a bookmark every second)

#[path = "../tests/apiserver/mod.rs"]
mod apiserver;
#[path = "shared/calls.rs"]
mod calls;
#[path = "../tests/common/mod.rs"]
mod common;

use calls::*;
use serde_json::{json, Value};
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The node's name, as the test PKI's client certificate says.
const NODE: &str = "tb";

fn env_or(name: &str, default: u64) -> u64 {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

fn main() {
    let bench = std::env::args().any(|a| a == "--bench");
    let rounds = env_or("ATOLL_BENCH_ROUNDS", if bench { 20 } else { 2 }) as usize;
    let window = Duration::from_secs(env_or("ATOLL_BENCH_WATCH_WINDOW", if bench { 660 } else { 4 }));
    let bookmarks = if bench { None } else { Some(Duration::from_secs(1)) };
    let tb = common::testbed();
    let cri = tb.cri();
    let dir = std::env::temp_dir().join(common::unique("atoll-bench-cluster-pods"));
    std::fs::create_dir_all(&dir).unwrap();
    log::set_logger(&CALLS).expect("the only logger in the bench");
    log::set_max_level(log::LevelFilter::Trace);
    let version =
        smol::block_on(cri.version()).map(|v| format!("{} {}", v.runtime_name, v.runtime_version)).unwrap_or_default();

    let watches = (!window.is_zero()).then(|| {
        let dir = dir.join("idle");
        std::thread::spawn(move || idle_watches(&dir, 10, window, bookmarks))
    });
    let (start, teardown) = start_and_teardown(tb, &dir, rounds);
    log::set_max_level(log::LevelFilter::Off);
    let idle = watches.map(|w| w.join().expect("the idle watches"));

    println!("pods from the cluster next to static pods ({version}, private test bed), {rounds} rounds, median / p90:");
    println!("| measurement | bound pod (the API source) | static pod (same spec) | ratio |");
    println!("|---|---|---|---|");
    for (what, (api, file)) in
        [("start: created -> StartContainer", &start), ("teardown: deleted -> RemovePodSandbox", &teardown)]
    {
        let ratio = pct(api, 50).as_secs_f64() / pct(file, 50).as_secs_f64();
        println!(
            "| {what} | {} / {} | {} / {} | {ratio:.2} |",
            ms(pct(api, 50)),
            ms(pct(api, 90)),
            ms(pct(file, 50)),
            ms(pct(file, 90))
        );
    }
    println!();
    if let Some(idle) = idle {
        print_idle(&idle);
    }
    let _ = std::fs::remove_dir_all(&dir);
}

fn print_idle(idle: &Idle) {
    let per_day = |b: u64| b as f64 / idle.watches as f64 * 86_400.0 / idle.window.as_secs_f64();
    println!(
        "an idle watch of the node's pods: {} watches (atoll's list and watch, each on its own HTTP/2 connection), bookmarks every {:.0} s, over {:.0} s",
        idle.watches,
        idle.every.as_secs_f64(),
        idle.window.as_secs_f64()
    );
    println!(
        "  on the wire (TLS records) per watch: {:.0} bytes to the API server and {:.0} from it a day: {:.3} MB a day (the target: at most 1 MB)",
        per_day(idle.bytes.0),
        per_day(idle.bytes.1),
        (per_day(idle.bytes.0) + per_day(idle.bytes.1)) / 1e6
    );
    println!(
        "  in the window: {} bookmarks, {} watches begun again (the server ends each after the 5 to 10 minutes asked), {} lists",
        idle.bookmarks, idle.rewatches, idle.lists
    );
    println!();
}

/// Rounds of a bound pod and a static pod of the same spec, started then torn down, in one
/// agent: (start, teardown) times, each (bound, static).
type Pairs = (Vec<Duration>, Vec<Duration>);

fn start_and_teardown(tb: &common::Testbed, dir: &Path, rounds: usize) -> (Pairs, Pairs) {
    let cri = tb.cri();
    let pki = apiserver::Pki::new(&dir.join("pki"), NODE);
    let server = apiserver::ApiServer::start(&pki, NODE);
    server.offer_http2(true);
    let config = common::kubelet_config(tb, dir, "");
    let manifests = dir.join("manifests");
    let agent = start_agent(tb, dir, &config, &pki.kubeconfig(server.addr, None));
    common::eventually(Duration::from_secs(60), "the node registered and its pods watched", || {
        let log = server.log();
        let watching = log.iter().any(|l| l.path.starts_with("/api/v1/pods?") && l.path.contains("watch=true"));
        (watching && server.get("nodes", "", NODE).is_some()).then_some(())
    });
    let (mut start, mut teardown): (Pairs, Pairs) = Default::default();
    for i in 0..rounds {
        for bound in [i % 2 == 0, i % 2 == 1] {
            let (name, pod) =
                if bound { (format!("a{i}"), format!("a{i}")) } else { (format!("s{i}"), format!("s{i}-{NODE}")) };
            let manifest = pod_json(&name, bound);
            let (from, t0) = (mark(), Instant::now());
            if bound {
                let (code, answer) =
                    server.admin("POST", "/api/v1/namespaces/default/pods", "application/json", Some(manifest));
                assert_eq!(code, 201, "create {name}: {answer}");
            } else {
                drop_manifest(&manifests, &name, &manifest.to_string());
            }
            let took = nth_call(from, "StartContainer", 1) - t0;
            if bound { &mut start.0 } else { &mut start.1 }.push(took);
            wait("the start", || !running(&cri, &pod).is_empty());

            let (from, t0) = (mark(), Instant::now());
            if bound {
                let path = format!("/api/v1/namespaces/default/pods/{name}");
                let (code, answer) =
                    server.admin("DELETE", &path, "application/json", Some(json!({"gracePeriodSeconds": 0})));
                assert_eq!(code, 200, "delete {name}: {answer}");
            } else {
                std::fs::remove_file(manifests.join(format!("{name}.yaml"))).unwrap();
            }
            let took = nth_call(from, "RemovePodSandbox", 1) - t0;
            if bound { &mut teardown.0 } else { &mut teardown.1 }.push(took);
            wait("the teardown", || sandboxes(&cri, &pod) == 0);
        }
    }
    drop(agent);
    (start, teardown)
}

/// The pod both ways: bound to the node (`spec.nodeName`), or as a static pod's manifest. JSON
/// is YAML, so the manifest is the same text.
fn pod_json(name: &str, bound: bool) -> Value {
    let mut pod = json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "hostNetwork": true,
            "terminationGracePeriodSeconds": 0,
            "containers": [{
                "name": "c",
                "image": "docker.io/library/busybox:1.36",
                "command": ["sh", "-c", "trap \"exit 0\" TERM; sleep 3600 & wait"],
            }],
        },
    });
    if bound {
        pod["spec"]["nodeName"] = json!(NODE);
    }
    pod
}

/// The agent in this process (`atoll run`'s own runner) with the static pods of `config` and
/// the kubeconfig: the mirror and the API source on. Dropping the sender stops it.
fn start_agent(tb: &common::Testbed, dir: &Path, config: &Path, kubeconfig: &Path) -> InProcess {
    let extra = [format!("--kubeconfig={}", kubeconfig.display()), "--node-ip=127.0.0.1".to_string()];
    agent_in_process(config, &tb.endpoint.to_string(), &dir.join("state"), NODE, &extra)
}

/// What part 2 measured.
struct Idle {
    watches: usize,
    every: Duration,
    window: Duration,
    /// Bytes on the wire in the window: to the server, from it.
    bytes: (u64, u64),
    bookmarks: u64,
    rewatches: usize,
    lists: usize,
}

/// `n` idle watches of a node's pods (no pod is bound to it), each atoll's list and watch on a
/// client of its own, against a server of their own; measured over `window` from when all
/// are watching.
fn idle_watches(dir: &Path, n: usize, window: Duration, every: Option<Duration>) -> Idle {
    let node = "idle";
    let pki = apiserver::Pki::new(&dir.join("pki"), node);
    let server = apiserver::ApiServer::start(&pki, node);
    server.offer_http2(true);
    if let Some(every) = every {
        server.bookmark_every(every);
    }
    let kubeconfig = pki.kubeconfig(server.addr, None);
    let mut seen = Vec::new();
    for _ in 0..n {
        let client =
            Arc::new(atoll::mirror::apiserver::Client::from_kubeconfig(&kubeconfig).expect("a client").holding());
        let (tx, rx) = std::sync::mpsc::sync_channel(16);
        std::thread::spawn(move || atoll::mirror::watch::watch_loop(&client, node, &tx));
        seen.push(rx);
    }
    let watches = |log: &[apiserver::Logged]| log.iter().filter(|l| l.path.contains("watch=true")).count();
    common::eventually(Duration::from_secs(30), "every idle watch begun", || {
        (watches(&server.log()) >= n).then_some(())
    });
    let (from, (in0, out0), marks0, t0) = (server.log().len(), server.bytes(), server.bookmarks(), Instant::now());
    // The rest of a cluster writes meanwhile (here a ConfigMap every 10 s, as a node's lease):
    // the server's resourceVersion moves, so each watch gets its bookmark a minute (a watch
    // cache sends none that would not move a watch on).
    let done = std::sync::atomic::AtomicBool::new(false);
    std::thread::scope(|s| {
        s.spawn(|| {
            let mut n = 0;
            while !done.load(std::sync::atomic::Ordering::Relaxed) {
                let cm = serde_json::json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": format!("tick-{n}")}});
                server.admin("POST", "/api/v1/namespaces/default/configmaps", "application/json", Some(cm));
                n += 1;
                let step = Instant::now() + Duration::from_secs(10).min(window);
                while Instant::now() < step && !done.load(std::sync::atomic::Ordering::Relaxed) {
                    std::thread::sleep(Duration::from_millis(50));
                }
            }
        });
        std::thread::sleep(window);
        done.store(true, std::sync::atomic::Ordering::Relaxed);
    });
    let ((in1, out1), marks1, took, log) = (server.bytes(), server.bookmarks(), t0.elapsed(), server.log());
    let after = &log[from..];
    let lists = after.iter().filter(|l| l.method == "GET" && !l.path.contains("watch=true")).count();
    drop(seen);
    Idle {
        watches: n,
        every: every.unwrap_or(Duration::from_secs(60)),
        window: took,
        bytes: (in1 - in0, out1 - out0),
        bookmarks: marks1 - marks0,
        rewatches: watches(after),
        lists,
    }
}
