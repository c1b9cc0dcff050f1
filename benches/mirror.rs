//! Mirror traffic: `atoll run --kubeconfig` with 10 static pods against the test API server
//! (tests/apiserver) on the private containerd test bed, with kubelet's default timings
//! (lease 40 s renewed every 10 s, node status checked every 10 s and sent every 5 min).
//! Prints the bytes on the wire (TLS included) to converge, then per minute at steady state,
//! the requests made in the window and the agent's RSS. Asserts nothing about amounts.
//!
//!   cargo bench --bench mirror       (ATOLL_BENCH_MIRROR_WINDOW=330 s by default, so the
//!                                     window holds a node status report; under `cargo test`
//!                                     a short smoke run with 2 pods)

#[path = "../tests/apiserver/mod.rs"]
mod apiserver;
#[path = "../tests/common/mod.rs"]
mod common;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

/// What one run measured.
struct Measured {
    converged: Duration,
    /// Bytes to and from the API server, start to every mirror Running and ready.
    startup: (u64, u64),
    /// The requests made meanwhile, by kind.
    converge_requests: BTreeMap<String, usize>,
    /// Their bodies by kind: (requests, bytes sent, bytes answered), and the watch events'.
    converge_bodies: BTreeMap<String, (usize, usize, usize)>,
    converge_events: u64,
    /// Per minute at steady state, to and from.
    steady: (f64, f64),
    window: Duration,
    /// One lease renewal on the wire, both ways: the median over the minutes of the window
    /// that held nothing else.
    renewal: Option<u64>,
    requests: BTreeMap<String, usize>,
    rss_kib: u64,
}

fn main() {
    let bench = std::env::args().any(|a| a == "--bench");
    let window = Duration::from_secs(
        std::env::var("ATOLL_BENCH_MIRROR_WINDOW").ok().and_then(|v| v.parse().ok()).unwrap_or(if bench {
            330
        } else {
            5
        }),
    );
    let pods = if bench { 10 } else { 2 };
    let tb = common::testbed();
    println!("mirror traffic ({pods} pods, kubelet's default timings, TLS bytes on the wire)");
    let runs: Vec<(&str, Measured)> = [("HTTP/2", true), ("HTTP/1.1", false)]
        .into_iter()
        .filter(|(_, h2)| bench || *h2)
        .map(|(name, h2)| (name, run(tb, pods, window, h2)))
        .collect();
    for (name, m) in &runs {
        let day = (m.steady.0 + m.steady.1) * 60.0 * 24.0;
        println!("  over {name}:");
        println!(
            "    to converge (start -> every mirror Running and ready): {:.1} s, {} bytes to the API server, {} from it",
            m.converged.as_secs_f64(),
            m.startup.0,
            m.startup.1
        );
        let listed: Vec<String> = m.converge_requests.iter().map(|(k, v)| format!("{v} {k}")).collect();
        println!("    requests to converge: {}", listed.join(", "));
        // Where those bytes go: the objects themselves, before HTTP and TLS.
        let listed: Vec<String> = m
            .converge_bodies
            .iter()
            .map(|(k, (n, out, back))| format!("{k}: {} out, {} back", out / n, back / n))
            .collect();
        println!("    bodies to converge, bytes per request: {}", listed.join("; "));
        let (out, back) = m.converge_bodies.values().fold((0, 0), |(o, b), (_, out, back)| (o + out, b + back));
        println!(
            "    bodies to converge in all: {out} bytes out, {back} back in answers and {} in watch events",
            m.converge_events
        );
        println!(
            "    steady state over {:.0} s: {:.0} bytes/min to the API server, {:.0} bytes/min from it: {:.2} MB a day",
            m.window.as_secs_f64(),
            m.steady.0,
            m.steady.1,
            day / 1e6
        );
        match m.renewal {
            Some(r) => println!(
                "    one lease renewal on the wire (both ways): {r} bytes; x 8,640 renewals a day = {:.2} MB a day (the floor)",
                r as f64 * 8640.0 / 1e6
            ),
            None => println!("    one lease renewal on the wire: no minute of the window held only renewals"),
        }
        println!("    atoll's RSS at the end of the window: {:.1} MiB", m.rss_kib as f64 / 1024.0);
        let listed: Vec<String> = m.requests.iter().map(|(k, v)| format!("{v} {k}")).collect();
        println!("    requests in the window: {}", listed.join(", "));
    }
    println!();
}

fn run(tb: &common::Testbed, pods: usize, window: Duration, http2: bool) -> Measured {
    let dir = std::env::temp_dir().join(common::unique("atoll-bench-mirror"));
    let manifests = dir.join("manifests");
    std::fs::create_dir_all(&manifests).unwrap();
    let pki = apiserver::Pki::new(&dir.join("pki"), "tb");
    let server = apiserver::ApiServer::start(&pki, "tb");
    server.offer_http2(http2);
    for i in 0..pods {
        std::fs::write(
            manifests.join(format!("m{i}.yaml")),
            format!(
                "apiVersion: v1\nkind: Pod\nmetadata: {{name: m{i}, labels: {{app: bench}}}}\nspec:\n  hostNetwork: true\n  terminationGracePeriodSeconds: 1\n  containers:\n  - name: c\n    image: docker.io/library/busybox:1.36\n    command: [sh, -c, 'trap \"exit 0\" TERM; while true; do sleep 1; done']\n"
            ),
        )
        .unwrap();
    }
    let kubelet = common::kubelet_config(tb, &dir, "fileCheckFrequency: 20s\n");
    let started = Instant::now();
    let mut child = common::atoll_run(tb, &dir, &kubelet, &dir.join("api.sock"), "tb")
        .arg(format!("--kubeconfig={}", pki.kubeconfig(server.addr, None).display()))
        .spawn()
        .expect("start atoll");
    common::eventually(Duration::from_secs(180), "every mirror Running", || {
        let running = server
            .list("pods")
            .iter()
            .filter(|p| p["status"]["phase"] == "Running" && p["status"]["containerStatuses"][0]["ready"] == true)
            .count();
        (running == pods).then_some(())
    });
    let converged = started.elapsed();
    let startup = server.bytes();
    let converge_log = server.log();
    let converge_events = server.watch_bytes();
    // Let the first lease renewals and status writes settle.
    std::thread::sleep(Duration::from_secs(15));
    let (in0, out0) = server.bytes();
    let from = server.log().len();
    let t0 = Instant::now();
    // Minute by minute: the bytes, and what was asked in each.
    let mut minutes = Vec::new();
    let mut last = (in0, out0, from);
    while t0.elapsed() < window {
        let step = Duration::from_secs(60).min(window.saturating_sub(t0.elapsed()));
        std::thread::sleep(step);
        let (i, o) = server.bytes();
        let n = server.log().len();
        let log = server.log();
        let only_renewals = log[last.2..n].iter().all(|l| l.method == "PUT" && l.path.contains("/leases/"));
        if only_renewals && n > last.2 && step == Duration::from_secs(60) {
            minutes.push((i + o - last.0 - last.1) / (n - last.2) as u64);
        }
        last = (i, o, n);
    }
    let took = t0.elapsed();
    let (in1, out1) = server.bytes();
    let log = server.log();
    let rss_kib: u64 = std::fs::read_to_string(format!("/proc/{}/status", child.id()))
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:")?.split_whitespace().next()?.parse().ok())
        .unwrap_or(0);
    let _ = child.kill();
    let _ = child.wait();

    let requests = kinds(&log[from..]);
    let converge_requests = kinds(&converge_log);
    let mut converge_bodies: BTreeMap<String, (usize, usize, usize)> = BTreeMap::new();
    for l in &converge_log {
        let e = converge_bodies.entry(l.kind()).or_default();
        *e = (e.0 + 1, e.1 + l.body, e.2 + l.answer);
    }
    minutes.sort_unstable();
    let per_min = |b: u64| b as f64 * 60.0 / took.as_secs_f64();
    Measured {
        converged,
        startup,
        converge_requests,
        converge_bodies,
        converge_events,
        steady: (per_min(in1 - in0), per_min(out1 - out0)),
        window: took,
        renewal: minutes.get(minutes.len() / 2).copied(),
        requests,
        rss_kib,
    }
}

/// The requests of a window by kind.
fn kinds(log: &[apiserver::Logged]) -> BTreeMap<String, usize> {
    let mut requests: BTreeMap<String, usize> = BTreeMap::new();
    for l in log {
        let what = l.kind();
        *requests.entry(format!("{what} ({})", l.proto)).or_default() += 1;
    }
    requests
}
