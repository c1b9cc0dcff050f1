//! A fleet renews its client certificates: N nodes whose certificates were all issued at the
//! same moment, each running atoll's own rotation loop (`rotate::keep_renewed`, its jittered
//! 70-90 % deadline, `rotate::issue`: a new key, a CSR, the watch, the store) against the test
//! API server, whose approver and signer act as kube-controller-manager's. Measures:
//!
//! - when the renewals start, as a share of the lifetime, and how evenly: the 70-90 % window in
//!   bins of 1/60 of the lifetime (a minute of an hour-long certificate), the fullest bin
//!   against the average one (the target: at most 3x);
//! - the bytes on the link per renewal, both ways, TLS included (each node's first connection
//!   is its renewal's: its handshake counts); the target: under 10 KB;
//! - how long the slowest renewal took, and the failures.
//!
//! `cargo bench --bench renewal`: ATOLL_BENCH_RENEWAL_NODES=1000, ATOLL_BENCH_RENEWAL_LIFETIME=300
//! seconds; under `cargo test`, 20 nodes and 10 s.

#[path = "../tests/apiserver/mod.rs"]
mod apiserver;
#[path = "../tests/common/mod.rs"]
mod common;

use atoll::mirror::apiserver::Client;
use atoll::mirror::certs::{request::CLIENT_SIGNER, rotate, store::Store};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

fn env_or(name: &str, default: u64) -> u64 {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

/// What each node's loop saw: when its renewal began, how long it took, whether it failed.
#[derive(Default)]
struct Seen {
    started: Vec<SystemTime>,
    took: Vec<Duration>,
    failures: usize,
}

fn main() {
    let bench = std::env::args().any(|a| a == "--bench");
    let nodes = env_or("ATOLL_BENCH_RENEWAL_NODES", if bench { 1000 } else { 20 }) as usize;
    let lifetime = Duration::from_secs(env_or("ATOLL_BENCH_RENEWAL_LIFETIME", if bench { 300 } else { 10 }));
    let dir = std::env::temp_dir().join(format!("atoll-bench-renewal-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("nodes")).unwrap();
    let pki = apiserver::Pki::new(&dir.join("pki"), "n-0");
    let server = apiserver::ApiServer::start(&pki, "n-0");
    server.keep_events(200_000);
    server.issue_for(lifetime.as_secs() as i64, 0);

    let clients: Vec<(String, Client)> = (0..nodes)
        .map(|i| {
            let (name, kubeconfig) = server.fleet_node(&pki, &dir.join("nodes"), i);
            (name, Client::from_kubeconfig(&kubeconfig).unwrap())
        })
        .collect();
    let seen = Arc::new(Mutex::new(Seen::default()));
    let (in0, out0) = server.bytes();
    // Every certificate issued now, for `lifetime`.
    let issued = SystemTime::now();
    let validity = (issued, issued + lifetime);
    for (name, client) in clients {
        let (seen, store) = (seen.clone(), Store::new(&dir.join("nodes").join(&name), "kubelet-client"));
        std::thread::Builder::new()
            .spawn(move || {
                rotate::keep_renewed(atoll::metrics::Certificate::Client, Some(validity), |_| {
                    let began = SystemTime::now();
                    let got = rotate::issue(&client, &store, (CLIENT_SIGNER, &rotate::USAGES), &name, &[]);
                    let mut s = seen.lock().unwrap();
                    match &got {
                        Ok(_) => {
                            s.started.push(began);
                            s.took.push(began.elapsed().unwrap_or_default());
                        }
                        Err(_) => s.failures += 1,
                    }
                    got
                });
            })
            .unwrap();
    }
    // The window ends at 90 %; every renewal is done well before the renewed ones are due.
    let give_up = issued + lifetime.mul_f64(1.3);
    while seen.lock().unwrap().started.len() < nodes && SystemTime::now() < give_up {
        std::thread::sleep(Duration::from_millis(200));
    }
    let (in1, out1) = server.bytes();
    let s = seen.lock().unwrap();
    let renewed = s.started.len();
    assert!(renewed > 0, "no node renewed its certificate");

    let share = |t: &SystemTime| t.duration_since(issued).unwrap_or_default().as_secs_f64() / lifetime.as_secs_f64();
    let shares: Vec<f64> = s.started.iter().map(share).collect();
    let (lo, hi) = shares.iter().fold((f64::MAX, 0f64), |(lo, hi), &x| (lo.min(x), hi.max(x)));
    // Bins of 1/60 of the lifetime across 70-90 %: 12 of them.
    let mut bins = [0usize; 12];
    for x in &shares {
        let i = ((x - 0.7) * 60.0).floor();
        if (0.0..12.0).contains(&i) {
            bins[i as usize] += 1;
        }
    }
    let average = renewed as f64 / bins.len() as f64;
    let fullest = bins.iter().copied().max().unwrap_or(0);
    let slowest = s.took.iter().max().copied().unwrap_or_default();
    let (sent, got) = (in1 - in0, out1 - out0);
    println!(
        "renewal: {nodes} nodes whose client certificates were issued at once for {} s, each rotating with atoll's own loop",
        lifetime.as_secs()
    );
    println!(
        "  renewed: {renewed} of {nodes}, {} failed attempt(s); the renewals began between {:.1} % and {:.1} % of the lifetime",
        s.failures,
        lo * 100.0,
        hi * 100.0
    );
    println!(
        "  per 1/60 of the lifetime (a minute of an hour-long certificate) in the 70-90 % window: {}",
        bins.iter().map(|b| b.to_string()).collect::<Vec<_>>().join(" ")
    );
    println!(
        "  the fullest holds {fullest}, the average {average:.1}: {:.2}x the average (the target: at most 3x)",
        fullest as f64 / average
    );
    println!(
        "  on the link per renewal: {} bytes to the API server, {} from it, {} in all (TLS included; the target: under 10 KB)",
        sent / renewed as u64,
        got / renewed as u64,
        (sent + got) / renewed as u64
    );
    println!("  the slowest renewal (key, CSR, approval, signature, store): {} ms", slowest.as_millis());
    println!();
    assert_eq!(renewed, nodes, "every node renewed within 130 % of the lifetime");
    drop(s);
    let _ = std::fs::remove_dir_all(&dir);
}
