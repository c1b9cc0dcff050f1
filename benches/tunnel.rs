//! The konnectivity tunnel through the real server (`proxy-server`, built by the test bed from
//! Debian's sources), on the private test bed, in one run: atoll's agent (the link the node
//! holds) against the upstream agent (`proxy-agent`, same build) linked to a second instance
//! of the same server (each agent reaching its server through the same kind of TCP load
//! balancer), and against the same sessions dialled. The client is the API server's
//! side: TLS to the node's kubelet server, dialled straight, or through a server's HTTP
//! CONNECT socket (kube-apiserver's egress selector), in turn:
//! - **exec set-up**: a WebSocket exec of `echo` until its output arrives, each on a quiet
//!   runtime (300 ms after the last: an exec started while the runtime tears the previous one
//!   down is slower, whichever way it came);
//! - **port-forward**: a pod's 64 MiB file over a forwarded port (SPDY, atoll's own client);
//! - **memory**: RSS of the atoll process (the whole node agent: kubelet, pods, tunnel) and of
//!   the upstream agent process, after the same sessions;
//! - **idle links**: the agent's RSS and wake-ups (context switches of all its threads) with
//!   one link and with 8 idle links (8 instances behind one address), per extra link: between
//!   keepalives (the links made afresh, the window closing before their first PING is due),
//!   and what one keepalive costs (a window holding each link's first PING, less the rate
//!   between them).
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

use common::forward::forwarded_get;
use common::kubelet_client::{client_config, first_output, ws_upgrade, As};
use common::median;
use konnectivity::{AgentAuth, Balancer, ProxyAgent, ProxyServer};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::os::fd::AsFd;
use std::os::unix::net::UnixStream;
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

/// A connection to the node's kubelet port: dialled, or through a server's socket.
enum Conn {
    Tcp(TcpStream),
    Unix(UnixStream),
}

impl Read for Conn {
    fn read(&mut self, b: &mut [u8]) -> std::io::Result<usize> {
        match self {
            Conn::Tcp(s) => s.read(b),
            Conn::Unix(s) => s.read(b),
        }
    }
}

impl Write for Conn {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        match self {
            Conn::Tcp(s) => s.write(b),
            Conn::Unix(s) => s.write(b),
        }
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// The node's kubelet port: dialled, or through `via`.
fn reach(port: u16, via: Option<&ProxyServer>) -> Conn {
    let addr = format!("127.0.0.1:{port}");
    match via {
        None => {
            let s = TcpStream::connect(&addr).unwrap();
            s.set_nodelay(true).unwrap();
            Conn::Tcp(s)
        }
        Some(server) => Conn::Unix(server.connect(&addr).unwrap()),
    }
}

fn exec_set_up(port: u16, ca: &Path, via: Option<&ProxyServer>) -> Duration {
    let started = Instant::now();
    let conn = rustls::ClientConnection::new(
        client_config(ca, &As::Token("tok")).unwrap(),
        rustls::pki_types::ServerName::try_from("127.0.0.1").unwrap(),
    )
    .unwrap();
    let mut tls = rustls::StreamOwned::new(conn, reach(port, via));
    let path = "/exec/default/shell-tb/c?command=echo&command=x&output=1";
    let host = format!("127.0.0.1:{port}");
    assert_eq!(ws_upgrade(&mut tls, &host, "Authorization: Bearer tok\r\n", path), Some(101));
    assert!(first_output(&mut tls));
    started.elapsed()
}

/// GET /blob over a port-forward on TLS to the node, its halves driven by two threads.
fn port_forward(port: u16, ca: &Path, via: Option<&ProxyServer>) -> (u64, Duration) {
    match reach(port, via) {
        Conn::Tcp(s) => {
            let end = s.try_clone().unwrap();
            forward_over(s, move || drop(end.shutdown(std::net::Shutdown::Both)), port, ca)
        }
        Conn::Unix(s) => {
            let end = s.try_clone().unwrap();
            forward_over(s, move || drop(end.shutdown(std::net::Shutdown::Both)), port, ca)
        }
    }
}

fn forward_over<T>(s: T, end: impl FnOnce() + Send + 'static, port: u16, ca: &Path) -> (u64, Duration)
where
    T: AsFd + Send + 'static,
    smol::Async<T>: smol::io::AsyncRead + smol::io::AsyncWrite + Unpin + Send,
{
    let conn = smol::Async::new(s).unwrap();
    let config = client_config(ca, &As::Token("tok")).unwrap();
    let name = rustls::pki_types::ServerName::try_from("127.0.0.1").unwrap();
    let tls = smol::block_on(futures_rustls::TlsConnector::from(config).connect(name, conn)).unwrap();
    let (reader, writer) = smol::io::split(tls);
    let (reader, writer) = (smol::io::BlockOn::new(reader), smol::io::BlockOn::new(writer));
    let host = format!("127.0.0.1:{port}");
    forwarded_get(reader, writer, end, &host, "/portForward/default/blob-tb", "Authorization: Bearer tok\r\n")
}

/// Medians of `rounds` of `f` for each way in, taken in turn (one round of each, then the
/// next), so that each way sees the same machine.
fn in_turn<T>(
    rounds: usize,
    ways: &[Option<&ProxyServer>],
    mut f: impl FnMut(Option<&ProxyServer>) -> T,
) -> Vec<Vec<T>> {
    let mut all: Vec<Vec<T>> = ways.iter().map(|_| Vec::new()).collect();
    for _ in 0..rounds {
        for (i, way) in ways.iter().enumerate() {
            all[i].push(f(*way));
        }
    }
    all
}

fn main() {
    let bench = std::env::args().any(|a| a == "--bench");
    let (rounds, blob_mib, many) = if bench { (20, 64u64, 8) } else { (3, 8, 3) };
    // Each link PINGs this long after it is made, and as often after (the server allows one
    // per 30 s at most).
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
    // One instance for atoll's link, one for the upstream agent's: the same build, agents
    // with the node's client certificate.
    let (cert, key) = (pki.dir.join("server.crt"), pki.dir.join("server.key"));
    let auth = AgentAuth::Mtls(pki.ca.clone());
    let mut ours = ProxyServer::start(&dir, "konn-0", 1, &cert, &key, &auth);
    let theirs = ProxyServer::start(&dir, "konn-upstream", 1, &cert, &key, &auth);
    let balancer = Balancer::start(vec![ours.agent_addr]);
    let atoll_config = dir.join("atoll.yaml");
    std::fs::write(
        &atoll_config,
        format!(
            "apiVersion: atoll.io/v1alpha1\nkind: AtollConfiguration\nkonnectivity:\n  proxyServerHost: 127.0.0.1\n  proxyServerPort: {}\n  caCert: {}\n  agentCert: {}\n  agentKey: {}\n  syncInterval: 100ms\n  syncIntervalCap: 500ms\n  keepaliveTime: {}s\n",
            balancer.addr.port(),
            pki.ca.display(),
            pki.client_cert.display(),
            pki.client_key.display(),
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
    let their_balancer = Balancer::start(vec![theirs.agent_addr]);
    let upstream = ProxyAgent::start(
        &dir,
        their_balancer.addr,
        &pki.ca,
        ("tb-upstream", "host=tb&ipv4=127.0.0.1"),
        Some((&pki.client_cert, &pki.client_key)),
        None,
    );
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
    for via in [&ours, &theirs] {
        common::eventually(Duration::from_secs(300), &format!("the blob served through {}", via.id), || {
            (ca.exists() && port_forward(port, &ca, Some(via)).0 > blob_mib << 20).then_some(())
        });
    }

    let ways = [Some(&ours), Some(&theirs), None];
    // Each exec starts on a quiet runtime: the one before has finished its teardown.
    let execs = in_turn(rounds, &ways, |via| {
        std::thread::sleep(Duration::from_millis(300));
        exec_set_up(port, &ca, via)
    });
    let forwards = in_turn(rounds.min(7), &ways, |via| {
        let (bytes, took) = port_forward(port, &ca, via);
        assert!(bytes > blob_mib << 20, "the whole blob: {bytes}");
        took
    });
    let exec: Vec<Duration> = execs.into_iter().map(median).collect();
    let forward: Vec<Duration> = forwards.into_iter().map(median).collect();
    let (rss_atoll, rss_upstream) = (rss_and_switches(pid).0, rss_and_switches(upstream.pid()).0);

    // Idle links: one, then `many` (that many instances behind the one address), each set made
    // afresh so that every link's first keepalive PING is due `keepalive` after it.
    let mut more: Vec<ProxyServer> = Vec::new();
    let switches = || rss_and_switches(pid).1 as f64;
    let links_to = |s: &ProxyServer| s.log().matches("\"Agent connected\" agentID=\"tb\"").count();
    let mut idle_links = |links: usize| {
        more.clear();
        for i in 1..links {
            let at = dir.join(format!("idle-{links}"));
            more.push(ProxyServer::start(&at, &format!("konn-{i}"), links, &cert, &key, &auth));
        }
        let before = links_to(&ours);
        ours.restart_counting(links);
        balancer.set_backends(std::iter::once(&ours).chain(more.iter()).map(|s| s.agent_addr).collect());
        common::eventually(Duration::from_secs(60), "the links", || {
            (links_to(&ours) > before && more.iter().all(|s| links_to(s) > 0)).then_some(())
        });
        let made = Instant::now();
        let (first_ping, last_ping) = (made + keepalive - Duration::from_secs(2), made + keepalive);
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
        std::thread::sleep((last_ping + Duration::from_secs(4)).saturating_duration_since(from));
        let pings = switches() - before - rate * from.elapsed().as_secs_f64();
        (rss, rate, Some(pings / links as f64))
    };
    let (rss_one, rate_one, _) = idle_links(1);
    let (rss_many, rate_many, per_ping) = idle_links(many);
    let _ = child.kill();
    let _ = child.wait();
    drop(upstream);
    let _ = std::fs::remove_dir_all(&dir);

    let ms = |t: Duration| t.as_secs_f64() * 1e3;
    let mibs = |t: Duration| (blob_mib as f64) / t.as_secs_f64();
    println!(
        "the konnectivity tunnel through the real server: atoll's agent, the upstream agent, dialled (containerd {}; {})",
        tb.var("ATOLL_TB_CONTAINERD_VERSION"),
        konnectivity::versions().lines().find(|l| l.starts_with("golang-k8s-sigs-apiserver")).unwrap_or("")
    );
    println!("| measurement | atoll's agent | upstream proxy-agent | dialled | atoll / upstream |");
    println!("|---|---:|---:|---:|---:|");
    println!(
        "| exec set-up to the first output, median of {rounds} | {:.1} ms | {:.1} ms | {:.1} ms | {:.2}x the time |",
        ms(exec[0]),
        ms(exec[1]),
        ms(exec[2]),
        exec[0].as_secs_f64() / exec[1].as_secs_f64()
    );
    println!(
        "| port-forward of a {blob_mib} MiB file, median of {} | {:.0} MiB/s | {:.0} MiB/s | {:.0} MiB/s | {:.2}x the speed |",
        rounds.min(7),
        mibs(forward[0]),
        mibs(forward[1]),
        mibs(forward[2]),
        forward[1].as_secs_f64() / forward[0].as_secs_f64()
    );
    println!(
        "| RSS after those sessions (atoll: the whole node agent, its pods' runtime aside) | {rss_atoll} KiB | {rss_upstream} KiB | | {:.2}x |",
        rss_atoll as f64 / rss_upstream as f64
    );
    println!(
        "| atoll's RSS per idle link (1 link: {rss_one} KiB, {many} links: {rss_many} KiB) | {} KiB | | | |",
        rss_many.saturating_sub(rss_one) / (many as u64 - 1)
    );
    println!(
        "| atoll's wake-ups per minute between keepalives: 1 link / {many} links | {:.0} / {:.0} | | | {:.2} per extra link |",
        rate_one * 60.0,
        rate_many * 60.0,
        (rate_many - rate_one) * 60.0 / (many as f64 - 1.0)
    );
    if let Some(per_ping) = per_ping {
        println!(
            "| atoll's wake-ups per keepalive PING and its PONG (one per link every keepaliveTime: 60 s by default, {}s here) | {per_ping:.1} | | | |",
            keepalive.as_secs()
        );
    }
    println!();
}
