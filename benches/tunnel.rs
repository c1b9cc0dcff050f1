//! The konnectivity tunnel against the same sessions without it, on the private test bed, in
//! one run. The client is the API server's side: TLS to the node's kubelet server, dialled
//! straight, or through the test konnectivity server's HTTP CONNECT port (the way a real API
//! server's egress selector goes), over the link atoll holds:
//! - **exec set-up**: a WebSocket exec of `echo` until its output arrives, alternately, each
//!   on a quiet runtime (300 ms after the last: an exec started while the runtime tears the
//!   previous one down is slower, whichever way it came);
//! - **port-forward**: a pod's 64 MiB file over a forwarded port (SPDY, atoll's own client),
//!   alternately;
//! - **idle links**: the agent's RSS and wake-ups (context switches of all its threads) with
//!   one link and with 21 idle links, per extra link: between keepalives (the links made
//!   afresh, the window closing before their first PING is due), and what one keepalive
//!   costs (a window holding each link's first PING, less the rate between them).
//!
//! Prints figures, asserts nothing about them. Under `cargo test` a smoke run.
//!
//!   cargo bench --bench tunnel

#[path = "../tests/apiserver/mod.rs"]
mod apiserver;
#[path = "../tests/common/mod.rs"]
mod common;
#[path = "../tests/konnectivity/mod.rs"]
mod konnectivity;

use common::median;

use common::forward::forwarded_get;
use common::kubelet_client::{first_output, over, ws_open, As, Tls};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::time::{Duration, Instant};

/// RSS (KiB) and context switches (all threads) of `pid`.
fn rss_and_switches(pid: u32) -> (u64, u64) {
    let rss = common::status_field(&format!("/proc/{pid}/status"), "VmRSS");
    let mut switches = 0;
    for task in std::fs::read_dir(format!("/proc/{pid}/task")).unwrap().flatten() {
        let status = format!("{}/status", task.path().display());
        switches += common::status_field(&status, "voluntary_ctxt_switches")
            + common::status_field(&status, "nonvoluntary_ctxt_switches");
    }
    (rss, switches)
}

/// A TCP connection to the node's kubelet port: dialled, or through the konnectivity server,
/// as the test API server reaches nodes.
fn reach(port: u16, tunnel: Option<SocketAddr>) -> TcpStream {
    apiserver::node_proxy::dial_node(&format!("127.0.0.1:{port}"), tunnel).unwrap()
}

fn exec_set_up(port: u16, ca: &Path, tunnel: Option<SocketAddr>) -> Duration {
    let started = Instant::now();
    let mut tls: Tls = over(reach(port, tunnel), ca, &As::Token("tok")).unwrap();
    assert_eq!(ws_open(&mut tls, port, "tok", "/exec/default/shell-tb/c?command=echo&command=x&output=1"), Some(101));
    assert!(first_output(&mut tls));
    started.elapsed()
}

/// GET /blob over a port-forward on TLS to the node, its halves driven by two threads.
fn port_forward(port: u16, ca: &Path, tunnel: Option<SocketAddr>) -> (u64, Duration) {
    let tcp = reach(port, tunnel);
    let end = tcp.try_clone().unwrap();
    let tcp = smol::Async::new(tcp).unwrap();
    let config = common::kubelet_client::client_config(ca, &As::Token("tok")).unwrap();
    let name = rustls::pki_types::ServerName::try_from("127.0.0.1").unwrap();
    let tls = smol::block_on(futures_rustls::TlsConnector::from(config).connect(name, tcp)).unwrap();
    let (reader, writer) = smol::io::split(tls);
    let (reader, writer) = (smol::io::BlockOn::new(reader), smol::io::BlockOn::new(writer));
    let host = format!("127.0.0.1:{port}");
    forwarded_get(
        reader,
        writer,
        move || drop(end.shutdown(std::net::Shutdown::Both)),
        &host,
        "/portForward/default/blob-tb",
        "Authorization: Bearer tok\r\n",
    )
}

fn main() {
    let bench = std::env::args().any(|a| a == "--bench");
    let (rounds, blob_mib) = if bench { (20, 64u64) } else { (3, 8) };
    // Each link PINGs this long after it is made, and as often after.
    let keepalive = Duration::from_secs(30);
    let tb = common::testbed();
    let dir = std::env::temp_dir().join(common::unique("atoll-bench-tunnel"));
    let manifests = dir.join("manifests");
    std::fs::create_dir_all(&manifests).unwrap();
    let pki = apiserver::Pki::new(&dir.join("pki"), "tb");
    let server = apiserver::ApiServer::start(&pki, "tb");
    server.add_reviewed_token("tok", "admin", &[]);
    std::fs::write(
        manifests.join("shell.yaml"),
        "apiVersion: v1\nkind: Pod\nmetadata: {name: shell}\nspec:\n  hostNetwork: true\n  terminationGracePeriodSeconds: 1\n  containers:\n  - name: c\n    image: docker.io/library/busybox:1.36\n    command: [sh, -c, 'trap \"exit 0\" TERM; while true; do sleep 1; done']\n",
    )
    .unwrap();
    std::fs::write(
        manifests.join("blob.yaml"),
        format!("apiVersion: v1\nkind: Pod\nmetadata: {{name: blob}}\nspec:\n  terminationGracePeriodSeconds: 1\n  containers:\n  - name: httpd\n    image: docker.io/library/busybox:1.36\n    command: [sh, -c, 'mkdir -p /www && head -c {} /dev/zero > /www/part && mv /www/part /www/blob && exec httpd -f -p 8080 -h /www']\n", blob_mib << 20),
    )
    .unwrap();
    let konn = konnectivity::Konnectivity::start(1, &pki.dir.join("server.crt"), &pki.dir.join("server.key"), None);
    let frontend = konn.frontend_here();
    let atoll_config = dir.join("atoll.yaml");
    std::fs::write(
        &atoll_config,
        format!(
            "apiVersion: atoll.io/v1alpha1\nkind: AtollConfiguration\nkonnectivity:\n  proxyServerHost: 127.0.0.1\n  proxyServerPort: {}\n  caCert: {}\n  syncInterval: 100ms\n  syncIntervalCap: 500ms\n  keepaliveTime: {}s\n",
            konn.agent_addr.port(),
            pki.ca.display(),
            keepalive.as_secs()
        ),
    )
    .unwrap();
    let port = common::free_port();
    let kubelet = common::kubelet_config(
        tb,
        &dir,
        &format!("address: 127.0.0.1\nport: {port}\nfileCheckFrequency: 1s\nauthorization: {{mode: AlwaysAllow}}\n"),
    );
    let mut child = common::atoll_run(tb, &dir, &kubelet, &dir.join("api.sock"), "tb")
        .arg(format!("--kubeconfig={}", pki.kubeconfig(server.addr, None).display()))
        .arg(format!("--atoll-config={}", atoll_config.display()))
        .arg("--node-ip=127.0.0.1")
        .spawn()
        .expect("start atoll");
    let pid = child.id();
    let ca = dir.join("state/pki/kubelet.crt");
    // The pods running first: a port-forward to a pod not yet started is refused (404), and
    // the client below takes anything but 101 for a failure.
    common::eventually(Duration::from_secs(300), "the shell and the blob running", || {
        let out = common::atoll_command()
            .args(["pods", "-o", "json", &format!("--api-socket={}", dir.join("api.sock").display())])
            .output()
            .ok()?;
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).ok()?;
        let running = v["items"].as_array()?.iter().filter(|p| p["status"]["phase"] == "Running").count();
        (running == 2).then_some(())
    });
    common::eventually(Duration::from_secs(300), "the shell and the blob served, through the tunnel", || {
        (konn.links().len() == 1 && ca.exists() && port_forward(port, &ca, Some(frontend)).0 > blob_mib << 20)
            .then_some(())
    });
    let tunnel = Some(frontend);

    let (mut through, mut direct) = (Vec::new(), Vec::new());
    // Each exec starts on a quiet runtime: the one before has finished its teardown.
    for _ in 0..rounds {
        std::thread::sleep(Duration::from_millis(300));
        through.push(exec_set_up(port, &ca, tunnel));
        std::thread::sleep(Duration::from_millis(300));
        direct.push(exec_set_up(port, &ca, None));
    }
    let (through, direct) = (median(through), median(direct));
    let (mut pf_through, mut pf_direct) = (Vec::new(), Vec::new());
    for _ in 0..rounds.min(7) {
        let (bytes, took) = port_forward(port, &ca, tunnel);
        assert!(bytes > blob_mib << 20, "the whole blob through the tunnel: {bytes}");
        pf_through.push(took);
        let (bytes, took) = port_forward(port, &ca, None);
        assert!(bytes > blob_mib << 20, "the whole blob dialled: {bytes}");
        pf_direct.push(took);
    }
    let (pf_through, pf_direct) = (median(pf_through), median(pf_direct));

    // Idle links: one, then 21 (the server says there are 21 instances), each set made afresh
    // so that every link's first keepalive PING is due `keepalive` after the cut.
    let switches = || rss_and_switches(pid).1 as f64;
    let idle_links = |links: usize| {
        konn.set_instances(links);
        konn.cut(false);
        let cut = Instant::now();
        common::eventually(Duration::from_secs(20), "the links", || (konn.links().len() == links).then_some(()));
        let (first_ping, last_ping) = (cut + keepalive, Instant::now() + keepalive);
        // Between keepalives: from a moment after the last link until before the first PING.
        std::thread::sleep(Duration::from_millis(500));
        let (from, before) = (Instant::now(), switches());
        let until = if bench { first_ping - Duration::from_secs(1) } else { from + Duration::from_secs(3) };
        std::thread::sleep(until.saturating_duration_since(Instant::now()));
        let (rss, after) = rss_and_switches(pid);
        let rate = (after as f64 - before) / from.elapsed().as_secs_f64();
        if !bench {
            return (rss, rate, None);
        }
        // Every link's first PING and its PONG, less what the same time costs without them.
        let (from, before) = (Instant::now(), switches());
        std::thread::sleep((last_ping + Duration::from_secs(2)).saturating_duration_since(from));
        let pings = switches() - before - rate * from.elapsed().as_secs_f64();
        (rss, rate, Some(pings / links as f64))
    };
    let (rss_one, rate_one, _) = idle_links(1);
    let (rss_many, rate_many, per_ping) = idle_links(21);
    let _ = child.kill();
    let _ = child.wait();
    let _ = std::fs::remove_dir_all(&dir);

    let mibs = |t: Duration| (blob_mib as f64) / t.as_secs_f64();
    println!(
        "the konnectivity tunnel against the same sessions dialled (containerd {})",
        tb.var("ATOLL_TB_CONTAINERD_VERSION")
    );
    println!("| measurement | through the tunnel | dialled | ratio |");
    println!("|---|---:|---:|---:|");
    println!(
        "| exec set-up to the first output, median of {rounds} | {:.1} ms | {:.1} ms | {:.2}x |",
        through.as_secs_f64() * 1e3,
        direct.as_secs_f64() * 1e3,
        through.as_secs_f64() / direct.as_secs_f64()
    );
    println!(
        "| port-forward of a {blob_mib} MiB file, median of {} | {:.0} MiB/s | {:.0} MiB/s | {:.2}x the speed |",
        rounds.min(7),
        mibs(pf_through),
        mibs(pf_direct),
        pf_direct.as_secs_f64() / pf_through.as_secs_f64()
    );
    println!(
        "| agent RSS per idle link (1 link: {rss_one} KiB, 21 links: {rss_many} KiB) | {} KiB | | |",
        rss_many.saturating_sub(rss_one) / 20
    );
    println!(
        "| agent wake-ups per minute between keepalives: 1 link / 21 links | {:.0} / {:.0} | | {:.2} per extra link |",
        rate_one * 60.0,
        rate_many * 60.0,
        (rate_many - rate_one) * 60.0 / 20.0
    );
    if let Some(per_ping) = per_ping {
        println!(
            "| agent wake-ups per keepalive PING and its PONG (one per link every keepaliveTime: 60 s by default, {}s here) | {per_ping:.1} | | |",
            keepalive.as_secs()
        );
    }
    println!();
}
