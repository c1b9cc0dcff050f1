//! Probe cost and timing: 100 pods with 3 probes each (httpGet liveness and readiness, a
//! tcpSocket readiness) at a 1-second period, run by atoll's prober on smol's executor (one
//! thread) against a server in a child process on 127.0.0.1. Prints the agent's CPU per probe,
//! the share of one core, how late ticks woke, and whether every probe kept its schedule.
//! Asserts nothing about time.
//!
//!   cargo bench --bench probes            (ATOLL_BENCH_SECONDS=20, ATOLL_BENCH_PODS=100 by default)

use atoll::node::observed::{ContainerObs, Observed, SandboxObs};
use atoll::node::{Facts, Node};
use atoll::probe::{Kind, PodProbes};
use std::io::{Read, Write};
use std::time::{Duration, Instant, SystemTime};

/// The child process: answers every HTTP request with 200 and accepts any TCP connection.
fn serve(listener: std::net::TcpListener) {
    for stream in listener.incoming().flatten() {
        std::thread::spawn(move || {
            let mut s = stream;
            let mut buf = [0u8; 2048];
            let mut got = Vec::new();
            while let Ok(n) = s.read(&mut buf) {
                if n == 0 {
                    return;
                }
                got.extend_from_slice(&buf[..n]);
                if got.windows(4).any(|w| w == b"\r\n\r\n") {
                    let _ = s.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok");
                    return;
                }
            }
        });
    }
}

/// The process's user + system CPU time from /proc/self/stat (USER_HZ is 100 on Linux).
fn cpu_time() -> Duration {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap();
    let after = stat.rsplit_once(')').unwrap().1;
    let fields: Vec<&str> = after.split_whitespace().collect();
    let ticks: u64 = fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap();
    Duration::from_millis(ticks * 10)
}

fn rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines().find(|l| l.starts_with("VmRSS:")).map(|l| l.split_whitespace().nth(1).unwrap_or("0").to_string())
        })
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

fn main() {
    if let Ok(fd) = std::env::var("ATOLL_BENCH_PROBE_SERVER") {
        let port: u16 = fd.parse().unwrap();
        serve(std::net::TcpListener::bind(("127.0.0.1", port)).unwrap());
        return;
    }
    // `cargo bench` passes --bench; under `cargo test --all-targets` this is a short smoke run.
    let default_seconds = if std::env::args().any(|a| a == "--bench") { 20 } else { 3 };
    let seconds: u64 =
        std::env::var("ATOLL_BENCH_SECONDS").ok().and_then(|s| s.parse().ok()).unwrap_or(default_seconds);
    #[allow(non_snake_case)]
    let PODS: usize = std::env::var("ATOLL_BENCH_PODS").ok().and_then(|s| s.parse().ok()).unwrap_or(100);
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let mut server = std::process::Command::new(std::env::current_exe().unwrap())
        .env("ATOLL_BENCH_PROBE_SERVER", port.to_string())
        .spawn()
        .expect("start the probe server");
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        std::thread::sleep(Duration::from_millis(20));
    }

    // Just started, as after a reboot: each probe's first tick is spread over its period.
    let endpoint = atoll::cri::Endpoint::parse("unix:///nonexistent/atoll.sock").expect("an endpoint");
    let runtime = atoll::cri::Cri::new(&endpoint);
    let node = Node::new(Facts { host_ip: "127.0.0.1".into(), ..Default::default() });
    let yaml = |i: usize| {
        format!(
            "apiVersion: v1
kind: Pod
metadata: {{name: p{i}}}
spec:
  hostNetwork: true
  containers:
  - name: a
    image: x:1
    livenessProbe: {{httpGet: {{host: 127.0.0.1, port: {port}, path: /live/{i}}}, periodSeconds: 1}}
    readinessProbe: {{httpGet: {{host: 127.0.0.1, port: {port}, path: /ready/{i}}}, periodSeconds: 1}}
  - name: b
    image: x:1
    readinessProbe: {{tcpSocket: {{host: 127.0.0.1, port: {port}}}, periodSeconds: 1}}
"
        )
    };
    let started_at = Some(SystemTime::now() - Duration::from_secs(3600));
    let obs = |i: usize| Observed {
        sandboxes: vec![SandboxObs {
            id: format!("s{i}"),
            attempt: 0,
            ready: true,
            ip: String::new(),
            host_network: true,
            created_at: 1,
            pid: None,
        }],
        containers: ["a", "b"]
            .iter()
            .map(|n| ContainerObs::running(&format!("{n}{i}"), n, &format!("s{i}"), started_at))
            .collect(),
    };
    let rss0 = rss_kib();
    let pods: Vec<(atoll::pod::types::Pod, PodProbes)> = (0..PODS)
        .map(|i| {
            let loaded = atoll::pod::load(
                yaml(i).as_bytes(),
                atoll::pod::Shape::SinglePod,
                &atoll::pod::Origin::File(format!("/bench/p{i}.yaml").into()),
                "bench",
                Default::default(),
            )
            .unwrap();
            let pod = (*loaded.pods[0].pod).clone();
            let probes = PodProbes::start(&node, &runtime, &pod);
            (pod, probes)
        })
        .collect();
    // Idle first (no containers yet): what the tasks themselves cost.
    std::thread::sleep(Duration::from_millis(1500));
    let rss_idle = rss_kib();
    let cpu0 = cpu_time();
    let t0 = Instant::now();
    for (i, (pod, probes)) in pods.iter().enumerate() {
        probes.update(pod, &obs(i), "127.0.0.1", false);
    }
    let pods: Vec<PodProbes> = pods.into_iter().map(|(_, p)| p).collect();
    std::thread::sleep(Duration::from_secs(seconds));
    let elapsed = t0.elapsed();
    let cpu = cpu_time() - cpu0;
    let rss = rss_kib();
    let all: Vec<(String, Kind, atoll::probe::Stats)> = pods.iter().flat_map(|p| p.stats()).collect();
    drop(pods);
    let _ = server.kill();
    let _ = server.wait();

    let attempts: u64 = all.iter().map(|(_, _, s)| s.successes + s.failures + s.errors).sum();
    let failures: u64 = all.iter().map(|(_, _, s)| s.failures + s.errors).sum();
    let mut late: Vec<Duration> = all.iter().map(|(_, _, s)| s.max_lateness).collect();
    late.sort();
    let per_probe_expected = elapsed.as_secs_f64().floor() as u64;
    let behind = all.iter().filter(|(_, _, s)| s.ticks + 1 < per_probe_expected).count();
    let busy: Duration = all.iter().map(|(_, _, s)| s.busy).sum();
    println!("probes: {} probes ({PODS} pods x 3) at a 1 s period for {:.1} s", all.len(), elapsed.as_secs_f64());
    println!(
        "  attempts                 {attempts} ({failures} failed or errored), expected about {}",
        all.len() as u64 * per_probe_expected
    );
    println!(
        "  agent CPU                {:.3} s = {:.1}% of one core",
        cpu.as_secs_f64(),
        100.0 * cpu.as_secs_f64() / elapsed.as_secs_f64()
    );
    println!("  CPU per probe attempt    {:.1} us", cpu.as_secs_f64() * 1e6 / attempts.max(1) as f64);
    println!(
        "  mean attempt duration    {:.2} ms (wall, mostly waiting on the server)",
        busy.as_secs_f64() * 1e3 / attempts.max(1) as f64
    );
    println!(
        "  tick lateness (max per probe): median {:?}, p99 {:?}, worst {:?}",
        late[late.len() / 2],
        late[(late.len() * 99 / 100).min(late.len() - 1)],
        late[late.len() - 1]
    );
    println!("  probes behind schedule   {behind} of {}", all.len());
    let cpu_pct = 100.0 * cpu.as_secs_f64() / elapsed.as_secs_f64();
    if cpu_pct > 0.0 {
        println!(
            "  throughput               {:.0} probe attempts/s per 1% of a core",
            attempts as f64 / elapsed.as_secs_f64() / cpu_pct
        );
    }
    println!(
        "  RSS                      {rss0} KiB before, {rss_idle} KiB with {} idle probe tasks, {rss} KiB after probing",
        all.len()
    );
}
