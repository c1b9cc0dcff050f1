//! A node behind NAT: the API server cannot dial it, and kubectl still reaches its pods
//! through the konnectivity tunnel atoll dials out. The cluster side (the API server's
//! listener for kubectl, its dials of nodes, the konnectivity server's HTTP CONNECT port and
//! kubectl itself) lives in a network namespace of its own, where the node's published
//! address (127.0.0.1) is not the node: the one way in is the link atoll holds to the
//! konnectivity server's agent port. The attackers: the server, asking for anything but the
//! kubelet server; whoever answers the server's address without its certificate (no token
//! for them).

mod apiserver;
mod common;
mod konnectivity;
#[path = "tunnel/link.rs"]
mod link;

use apiserver::{ApiServer, Pki};
use common::kubectl::run as kubectl;
use common::pods::FILES;
use common::{eventually, free_port, testbed, unique};
use konnectivity::Konnectivity;
use std::io::{Read, Write};
use std::time::Duration;

const TICKER: &str = "apiVersion: v1\nkind: Pod\nmetadata: {name: ticker}\nspec:\n  hostNetwork: true\n  terminationGracePeriodSeconds: 1\n  containers:\n  - name: c\n    image: docker.io/library/busybox:1.36\n    command: [sh, -c, 'trap \"exit 0\" TERM; i=0; while true; do echo line $i; i=$((i+1)); sleep 0.2; done']\n";
const TOKEN: &str = "konnectivity-agent-token";

/// Moves the calling thread into a new network namespace with its loopback up.
fn own_network_namespace() {
    // SAFETY: only the network namespace is unshared, for this thread alone; no file
    // descriptor table is split.
    unsafe { rustix::thread::unshare_unsafe(rustix::thread::UnshareFlags::NEWNET) }.expect("unshare(CLONE_NEWNET)");
    let up = std::process::Command::new("ip").args(["link", "set", "lo", "up"]).status().expect("ip runs");
    assert!(up.success());
}

/// An HTTP CONNECT to `address` through the konnectivity server: its status line.
fn connect_through(frontend: std::net::SocketAddr, address: &str) -> String {
    let mut s = std::net::TcpStream::connect(frontend).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    write!(s, "CONNECT {address} HTTP/1.1\r\nHost: {address}\r\n\r\n").unwrap();
    let mut text = vec![0u8; 4096];
    let n = s.read(&mut text).unwrap_or(0);
    String::from_utf8_lossy(&text[..n]).into_owned()
}

fn metric(port: u16, name: &str) -> f64 {
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    write!(s, "GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").unwrap();
    let mut text = String::new();
    s.read_to_string(&mut text).unwrap();
    text.lines()
        .find(|l| l.starts_with(name) && l[name.len()..].starts_with([' ', '{']))
        .and_then(|l| l.rsplit(' ').next()?.parse().ok())
        .unwrap_or(0.0)
}

#[test]
fn kubectl_reaches_pods_on_a_node_the_api_server_cannot_dial() {
    let tb = testbed();
    let dir = std::env::temp_dir().join(unique("atoll-tunnel"));
    let manifests = dir.join("manifests");
    std::fs::create_dir_all(&manifests).unwrap();
    for (name, manifest) in [("ticker.yaml", TICKER), ("files.yaml", FILES)] {
        std::fs::write(manifests.join(name), manifest).unwrap();
    }
    let pki = Pki::new(&dir.join("pki"), "tb");
    let server = ApiServer::start(&pki, "tb");
    // Two instances behind one agent port; agents must bring the token.
    let konn = Konnectivity::start(2, &pki.dir.join("server.crt"), &pki.dir.join("server.key"), Some(TOKEN));
    let token = dir.join("konnectivity.token");
    std::fs::write(&token, format!("{TOKEN}\n")).unwrap();
    let atoll_config = dir.join("atoll.yaml");
    std::fs::write(
        &atoll_config,
        format!(
            "apiVersion: atoll.io/v1alpha1\nkind: AtollConfiguration\nkonnectivity:\n  proxyServerHost: 127.0.0.1\n  proxyServerPort: {}\n  caCert: {}\n  serviceAccountTokenPath: {}\n  syncInterval: 200ms\n  syncIntervalCap: 1s\n  keepaliveTime: 30s\n",
            konn.agent_addr.port(),
            pki.ca.display(),
            token.display()
        ),
    )
    .unwrap();
    let (port, read_only) = (free_port(), free_port());
    let kubeconfig = pki.kubeconfig(server.addr, None);
    let agent = common::Agent::start(
        tb,
        &dir,
        &format!(
            "address: 127.0.0.1\nport: {port}\nreadOnlyPort: {read_only}\nfileCheckFrequency: 1s\nnodeStatusUpdateFrequency: 1s\nauthentication:\n  x509: {{clientCAFile: {}}}\n",
            pki.ca.display()
        ),
        &[
            &format!("--kubeconfig={}", kubeconfig.display()),
            &format!("--atoll-config={}", atoll_config.display()),
            "--node-ip=127.0.0.1",
        ],
        &[],
    );
    // The node links to both instances, as itself.
    let links = eventually(Duration::from_secs(60), "links to both server instances", || {
        let links = konn.links();
        (links.len() == 2).then_some(links)
    });
    let mut ids: Vec<&str> = links.iter().map(|l| l.0.as_str()).collect();
    ids.sort();
    assert_eq!(ids, ["test-konnectivity-0", "test-konnectivity-1"]);
    for (_, agent_id, hosts) in &links {
        assert_eq!(agent_id, "tb");
        assert!(hosts.contains(&"tb".to_string()) && hosts.contains(&"127.0.0.1".to_string()), "{hosts:?}");
    }
    eventually(Duration::from_secs(10), "the metric counts both links", || {
        (metric(read_only, "atoll_tunnel_servers") == 2.0).then_some(())
    });
    for pod in ["ticker-tb", "files-tb"] {
        eventually(Duration::from_secs(90), &format!("{pod} running in the API server"), || {
            (server.get("pods", "default", pod)?["status"]["phase"] == "Running").then_some(())
        });
    }

    // The API server trusts the node's self-signed serving certificate (made by now).
    server.kubelet_client(&pki, &dir.join("state/pki/kubelet.crt"));
    server.grant("kube-apiserver-kubelet-client", "get", "proxy");
    server.grant("kube-apiserver-kubelet-client", "create", "proxy");

    // A service on the node's loopback that the tunnel must never lead to.
    let bystander = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let bystander_port = bystander.local_addr().unwrap().port();
    let refusals_before = metric(read_only, "atoll_tunnel_dial_refusals_total");

    std::thread::scope(|scope| {
        scope
            .spawn(|| {
                own_network_namespace();
                let api = server.listen_here();
                server.add_token("tok-kubectl", "admin");
                let config = common::kubectl::config(&dir, api, &pki.ca);
                let frontend = konn.frontend_here();

                // Dialled, the node is out of reach from here.
                let (code, _, err) = kubectl(&config, &["logs", "ticker-tb", "--tail=1"], b"");
                assert_ne!(code, 0);
                assert!(err.contains("error dialing backend") && err.contains("refused"), "{err}");

                // Through the tunnel: logs, exec with every byte and the exit status, stdin.
                server.egress(Some(frontend));
                let (code, out, err) = kubectl(&config, &["logs", "ticker-tb", "--tail=2"], b"");
                assert_eq!(code, 0, "{err}");
                let out = String::from_utf8_lossy(&out).into_owned();
                assert!(out.lines().count() == 2 && out.starts_with("line "), "{out}");
                let (code, out, err) = kubectl(
                    &config,
                    &["exec", "ticker-tb", "--", "sh", "-c", "head -c 10485760 /dev/zero; exit 7"],
                    b"",
                );
                assert_eq!(code, 7, "{err}");
                assert!(err.contains("command terminated with exit code 7"), "{err}");
                assert!(out.len() == 10 << 20 && out.iter().all(|b| *b == 0), "exactly 10 MiB of zeros");
                let (code, out, err) = kubectl(&config, &["exec", "-i", "ticker-tb", "--", "cat"], b"round trip\n");
                assert_eq!((code, out.as_slice()), (0, &b"round trip\n"[..]), "{err}");

                // port-forward: 100 MiB from the pod's own network, every byte.
                common::kubectl::port_forward_blob(&config);

                // The links drop in the middle of a `logs -f` (the server goes down for 2 s):
                // the follow ends with them, the node links again within its back-off (1 s at
                // most, plus half), and new sessions work.
                let mut follow = std::process::Command::new(testbed().var("ATOLL_TB_KUBECTL"))
                    .arg(format!("--kubeconfig={}", config.display()))
                    .args(["logs", "-f", "ticker-tb", "--tail=1"])
                    .stdout(std::process::Stdio::piped())
                    .stderr(std::process::Stdio::null())
                    .spawn()
                    .unwrap();
                let mut lines = std::io::BufRead::lines(std::io::BufReader::new(follow.stdout.take().unwrap()));
                for _ in 0..3 {
                    assert!(lines.next().unwrap().unwrap().starts_with("line "));
                }
                konn.cut(true);
                eventually(Duration::from_secs(30), "the follow ends with the link", || {
                    follow.try_wait().unwrap().map(|_| ())
                });
                std::thread::sleep(Duration::from_secs(2));
                konn.resume();
                let back = std::time::Instant::now();
                eventually(Duration::from_secs(30), "both links again", || (konn.links().len() == 2).then_some(()));
                assert!(back.elapsed() < Duration::from_secs(5), "linked again in {:?}", back.elapsed());
                let echo = |i: usize| {
                    let (code, out, err) =
                        kubectl(&config, &["exec", "ticker-tb", "--", "echo", &format!("back {i}")], b"");
                    assert_eq!(
                        (code, String::from_utf8_lossy(&out).trim()),
                        (0, format!("back {i}").as_str()),
                        "{err}"
                    );
                };
                echo(0);
                // Ten more drops: the agent's memory stays where it was.
                let before = agent.memory_kib("VmRSS");
                for i in 1..=10 {
                    konn.cut(false);
                    eventually(Duration::from_secs(30), "both links again", || (konn.links().len() == 2).then_some(()));
                    echo(i);
                }
                let after = agent.memory_kib("VmRSS");
                assert!(after < before + 1024, "RSS {before} KiB before ten drops, {after} KiB after");

                // The server asks for anything else: refused.
                for address in [format!("127.0.0.1:{bystander_port}"), format!("10.9.8.7:{port}")] {
                    let answer = connect_through(frontend, &address);
                    assert!(answer.starts_with("HTTP/1.1 503"), "{address}: {answer}");
                    assert!(answer.contains("reaches only the node's kubelet server"), "{answer}");
                }
            })
            .join()
            .unwrap();
    });

    // The token went only to the server, never to the log.
    assert!(!agent.log().contains(TOKEN));
    // Counted, and nothing dialled.
    assert_eq!(metric(read_only, "atoll_tunnel_dial_refusals_total") - refusals_before, 2.0);
    bystander.set_nonblocking(true).unwrap();
    assert!(bystander.accept().is_err(), "nothing was dialled");
    // The `logs -f` cut with its link ended with it: not a connection closed for falling behind.
    assert_eq!(metric(read_only, "atoll_tunnel_dropped_connections_total"), 0.0);
    assert!(!agent.log().contains("bytes behind"), "no connection was closed for falling behind");

    drop(agent);
    let _ = std::fs::remove_dir_all(&dir);
}

/// Whoever answers the server's address without a certificate from its CA gets no call, so
/// never the token, and no way to ask for dials.
#[test]
fn an_impostor_at_the_servers_address_gets_no_token() {
    let tb = testbed();
    let dir = std::env::temp_dir().join(unique("atoll-tunnel-impostor"));
    std::fs::create_dir_all(&dir).unwrap();
    let pki = Pki::new(&dir.join("pki"), "tb");
    let server = ApiServer::start(&pki, "tb");
    let made = std::process::Command::new("openssl")
        .args(["req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"])
        .args(["-keyout", "impostor.key", "-out", "impostor.crt", "-days", "2", "-subj", "/CN=impostor"])
        .args(["-addext", "subjectAltName=IP:127.0.0.1", "-addext", "extendedKeyUsage=serverAuth"])
        .current_dir(&dir)
        .status()
        .unwrap();
    assert!(made.success());
    let impostor = Konnectivity::start(1, &dir.join("impostor.crt"), &dir.join("impostor.key"), None);
    let token = dir.join("konnectivity.token");
    std::fs::write(&token, TOKEN).unwrap();
    let atoll_config = dir.join("atoll.yaml");
    std::fs::write(
        &atoll_config,
        format!(
            "apiVersion: atoll.io/v1alpha1\nkind: AtollConfiguration\nkonnectivity:\n  proxyServerHost: 127.0.0.1\n  proxyServerPort: {}\n  caCert: {}\n  serviceAccountTokenPath: {}\n  syncInterval: 200ms\n  syncIntervalCap: 400ms\n",
            impostor.agent_addr.port(),
            pki.ca.display(),
            token.display()
        ),
    )
    .unwrap();
    let kubeconfig = pki.kubeconfig(server.addr, None);
    let agent = common::Agent::start(
        tb,
        &dir,
        &format!("address: 127.0.0.1\nport: {}\n", free_port()),
        &[&format!("--kubeconfig={}", kubeconfig.display()), &format!("--atoll-config={}", atoll_config.display())],
        &[],
    );
    // It tries (the log says why it fails, once) and keeps trying, with nothing sent.
    eventually(Duration::from_secs(30), "the refusal in the log", || {
        agent.log().contains("cannot reach the konnectivity server").then_some(())
    });
    std::thread::sleep(Duration::from_secs(3));
    let log = agent.log();
    assert!(log.contains("UnknownIssuer") || log.contains("certificate"), "{log}");
    assert_eq!(log.matches("cannot reach the konnectivity server").count(), 1, "said once: {log}");
    assert_eq!(impostor.calls(), 0, "no call, so no token, reached the impostor");
    assert!(impostor.links().is_empty());
    assert!(!log.contains(TOKEN));
    drop(agent);
    let _ = std::fs::remove_dir_all(&dir);
}
