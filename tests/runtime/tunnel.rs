//! A node behind NAT: the API server cannot dial it, and kubectl still reaches its pods
//! through the konnectivity tunnel atoll dials out to the real konnectivity server
//! (`proxy-server`, built by the test bed from Debian's sources; `konnectivity/real.rs`). The
//! API server's listener for kubectl and kubectl itself live in a network namespace of their
//! own, where the node's published address (127.0.0.1) is not the node: the one way in is the
//! server's HTTP CONNECT socket (kube-apiserver's egress selector, `transport: uds`) and the
//! link atoll holds to its agent port. The attackers: the server, asking for anything but the
//! kubelet server; whoever answers the server's address without its certificate (no token for
//! them); an agent without the token or the certificate the server checks (`tunnel/link.rs`).

use crate::apiserver;
use crate::common;
use crate::konnectivity;
#[path = "../tunnel/link.rs"]
mod link;

use apiserver::{ApiServer, Pki};
use common::kubectl::run as kubectl;
use common::pods::FILES;
use common::{eventually, free_port, testbed};
use konnectivity::{connect_over, AgentAuth, Balancer, ProxyServer};
use std::io::Write as _;
use std::path::Path;
use std::time::Duration;

const TICKER: &str = "apiVersion: v1\nkind: Pod\nmetadata: {name: ticker}\nspec:\n  hostNetwork: true\n  terminationGracePeriodSeconds: 1\n  containers:\n  - name: c\n    image: docker.io/library/busybox:1.36\n    command: [sh, -c, 'trap \"exit 0\" TERM; i=0; while true; do echo line $i; i=$((i+1)); sleep 0.2; done']\n";
const TOKEN: &str = "konnectivity-agent-token";
/// Who the server's TokenReview must say the token belongs to.
const AGENT_SA: (&str, &str) = ("kube-system", "konnectivity-agent");
const AUDIENCE: &str = "system:konnectivity-server";

/// The agents of these tests share one test bed as node `tb`, with the same pods (the same
/// UIDs): one at a time, or one adopts or stops the other's sandboxes.
fn one_agent_at_a_time() -> std::sync::MutexGuard<'static, ()> {
    static TURN: std::sync::Mutex<()> = std::sync::Mutex::new(());
    TURN.lock().unwrap_or_else(|e| e.into_inner())
}

/// Moves the calling thread into a new network namespace with its loopback up.
fn own_network_namespace() {
    // SAFETY: only the network namespace is unshared, for this thread alone; no file
    // descriptor table is split.
    #[allow(unsafe_code)] // unshare(2) through rustix is unsafe; only this test's thread moves.
    unsafe { rustix::thread::unshare_unsafe(rustix::thread::UnshareFlags::NEWNET) }.expect("unshare(CLONE_NEWNET)");
    let up = std::process::Command::new("ip").args(["link", "set", "lo", "up"]).status().expect("ip runs");
    assert!(up.success());
}

fn metric(port: u16, name: &str) -> f64 {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    write!(s, "GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").unwrap();
    let mut text = String::new();
    s.read_to_string(&mut text).unwrap();
    text.lines()
        .find(|l| l.strip_prefix(name).is_some_and(|rest| rest.starts_with([' ', '{'])))
        .and_then(|l| l.rsplit(' ').next()?.parse().ok())
        .unwrap_or(0.0)
}

/// One series of the agent's `/metrics`, read on its local socket (which no network namespace
/// hides).
fn socket_metric(agent: &common::Agent, series: &str) -> f64 {
    use std::io::Read;
    let mut s = std::os::unix::net::UnixStream::connect(&agent.socket).unwrap();
    s.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").unwrap();
    let mut text = String::new();
    s.read_to_string(&mut text).unwrap();
    text.lines().find_map(|l| l.strip_prefix(series)?.trim().parse().ok()).unwrap_or(0.0)
}

/// The agent's settings file: the server's agent port, its CA, and either the token file or
/// the node's client certificate.
fn atoll_config(dir: &Path, port: u16, pki: &Pki, token: Option<&Path>) -> std::path::PathBuf {
    let auth = match token {
        Some(t) => format!("  serviceAccountTokenPath: {}\n", t.display()),
        None => format!("  agentCert: {}\n  agentKey: {}\n", pki.client_cert.display(), pki.client_key.display()),
    };
    let path = dir.join("atoll.yaml");
    std::fs::write(
        &path,
        format!(
            "apiVersion: atoll.io/v1alpha1\nkind: AtollConfiguration\nkonnectivity:\n  proxyServerHost: 127.0.0.1\n  proxyServerPort: {port}\n  caCert: {}\n{auth}  syncInterval: 200ms\n  syncIntervalCap: 1s\n  keepaliveTime: 30s\n",
            pki.ca.display()
        ),
    )
    .unwrap();
    path
}

/// Runs `f` on the cluster's side: a thread in a network namespace of its own, where the node's
/// address is not the node, with a listener of the API server there and kubectl's config for
/// it (`f`'s argument).
fn from_the_cluster(server: &ApiServer, dir: &Path, pki: &Pki, f: impl FnOnce(&Path) + Send) {
    std::thread::scope(|scope| {
        scope
            .spawn(|| {
                own_network_namespace();
                let api = server.listen_here();
                server.add_token("tok-kubectl", "admin");
                f(&common::kubectl::config(dir, api, &pki.ca));
            })
            .join()
            .unwrap();
    });
}

/// Whether `server`'s log says node `tb` linked (`n` times).
fn linked(server: &ProxyServer, n: usize) -> bool {
    server.log().matches("\"Agent connected\" agentID=\"tb\"").count() >= n
}

/// A node running `TICKER` and `FILES` behind NAT, mirrored to a test API server, its kubelet
/// server trusted by it; `atoll.yaml` is the caller's.
/// The agent, its kubelet port and its read-only port.
fn node(dir: &Path, pki: &Pki, server: &ApiServer, atoll_config: &Path) -> (common::Agent, u16, u16) {
    let manifests = dir.join("manifests");
    std::fs::create_dir_all(&manifests).unwrap();
    for (name, manifest) in [("ticker.yaml", TICKER), ("files.yaml", FILES)] {
        std::fs::write(manifests.join(name), manifest).unwrap();
    }
    let (port, read_only) = (free_port(), free_port());
    let kubeconfig = pki.kubeconfig(server.addr, None);
    let agent = common::Agent::start(
        testbed(),
        dir,
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
    for pod in ["ticker-tb", "files-tb"] {
        eventually(Duration::from_secs(90), &format!("{pod} running in the API server"), || {
            (server.get("pods", "default", pod)?["status"]["phase"] == "Running").then_some(())
        });
    }
    // The API server trusts the node's self-signed serving certificate (made by now).
    server.kubelet_client(pki, &dir.join("state/pki/kubelet.crt"));
    server.grant("kube-apiserver-kubelet-client", "get", "proxy");
    server.grant("kube-apiserver-kubelet-client", "create", "proxy");
    (agent, port, read_only)
}

/// kubectl exec of `echo back <i>` through whatever egress the API server has.
fn echo(config: &Path, i: usize) {
    let (code, out, err) = kubectl(config, &["exec", "ticker-tb", "--", "echo", &format!("back {i}")], b"");
    assert_eq!((code, String::from_utf8_lossy(&out).trim()), (0, format!("back {i}").as_str()), "{err}");
}

/// Two instances of the real server (`--server-count=2`) behind one agent address, agents
/// authenticated by service-account token through TokenReview; kube-apiserver reaches the node
/// through either instance's socket. Logs, exec with every byte and the exit status, stdin, a
/// 100 MiB port-forward, a `logs -f` cut by a server restart, ten restarts, refusals.
#[test]
fn kubectl_reaches_pods_on_a_node_the_api_server_cannot_dial() {
    let _room = common::room(module_path!());
    let _turn = one_agent_at_a_time();
    let dir = crate::common::Scratch::new("tunnel");
    let pki = Pki::new(&dir.join("pki"), "tb");
    let server = ApiServer::start(&pki, "tb");
    let user = format!("system:serviceaccount:{}:{}", AGENT_SA.0, AGENT_SA.1);
    server.add_reviewed_token(TOKEN, &user, &["system:serviceaccounts", "system:serviceaccounts:kube-system"]);
    let auth = AgentAuth::Token {
        kubeconfig: pki.kubeconfig(server.addr, None),
        namespace: AGENT_SA.0.into(),
        service_account: AGENT_SA.1.into(),
        audience: AUDIENCE.into(),
    };
    let (cert, key) = (pki.dir.join("server.crt"), pki.dir.join("server.key"));
    let mut a = ProxyServer::start(&dir, "konn-a", 2, &cert, &key, &auth);
    let b = ProxyServer::start(&dir, "konn-b", 2, &cert, &key, &auth);
    let balancer = Balancer::start(vec![a.agent_addr, b.agent_addr]);
    let token = dir.join("konnectivity.token");
    std::fs::write(&token, format!("{TOKEN}\n")).unwrap();
    let config = atoll_config(&dir, balancer.addr.port(), &pki, Some(&token));
    let (agent, port, read_only) = node(&dir, &pki, &server, &config);
    // The node links to both instances through the one address, as itself.
    eventually(Duration::from_secs(60), "links to both server instances", || {
        (linked(&a, 1) && linked(&b, 1)).then_some(())
    });
    assert!(server.log().iter().any(|l| l.path.ends_with("/tokenreviews")), "the server asked TokenReview");
    eventually(Duration::from_secs(10), "the metric counts both links", || {
        (metric(read_only, "atoll_tunnel_servers") == 2.0).then_some(())
    });

    // A service on the node's loopback that the tunnel must never lead to.
    let bystander = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let bystander_port = bystander.local_addr().unwrap().port();
    let refusals_before = metric(read_only, r#"atoll_tunnel_dial_refusals_total{reason="destination"}"#);

    from_the_cluster(&server, &dir, &pki, |config| {
        // Dialled, the node is out of reach from here.
        let (code, _, err) = kubectl(config, &["logs", "ticker-tb", "--tail=1"], b"");
        assert_ne!(code, 0);
        assert!(err.contains("error dialing backend") && err.contains("refused"), "{err}");

        // Through the tunnel: logs, exec with every byte and the exit status, stdin.
        server.egress_uds(&a.uds);
        let (code, out, err) = kubectl(config, &["logs", "ticker-tb", "--tail=2"], b"");
        assert_eq!(code, 0, "{err}");
        let out = String::from_utf8_lossy(&out).into_owned();
        // Two lines, or three when the ticker wrote one between finding the tail and reading
        // it (kubelet reads to the end as well).
        assert!((2..=3).contains(&out.lines().count()) && out.starts_with("line "), "{out}");
        let (code, out, err) =
            kubectl(config, &["exec", "ticker-tb", "--", "sh", "-c", "head -c 10485760 /dev/zero; exit 7"], b"");
        assert_eq!(code, 7, "{err}");
        assert!(err.contains("command terminated with exit code 7"), "{err}");
        assert!(out.len() == 10 << 20 && out.iter().all(|b| *b == 0), "exactly 10 MiB of zeros");
        let (code, out, err) = kubectl(config, &["exec", "-i", "ticker-tb", "--", "cat"], b"round trip\n");
        assert_eq!((code, out.as_slice()), (0, &b"round trip\n"[..]), "{err}");

        // port-forward: 100 MiB from the pod's own network, every byte.
        common::kubectl::port_forward_blob(config);

        // The other instance reaches the node as well (a second kube-apiserver's).
        server.egress_uds(&b.uds);
        echo(config, 0);
        server.egress_uds(&a.uds);

        // Instance a restarts in the middle of a `logs -f`: the follow ends with it,
        // the node links to it again within its back-off (1 s at most, plus half), and
        // new sessions work.
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
        a.restart();
        eventually(Duration::from_secs(30), "the follow ends with the link", || follow.try_wait().unwrap().map(|_| ()));
        let back = std::time::Instant::now();
        eventually(Duration::from_secs(30), "linked to a again", || linked(&a, 2).then_some(()));
        assert!(back.elapsed() < Duration::from_secs(5), "linked again in {:?}", back.elapsed());
        echo(config, 1);
        // Ten more restarts: the agent's memory stays where it was.
        let before = agent.memory_kib("VmRSS");
        for i in 2..=11 {
            a.restart();
            eventually(Duration::from_secs(30), "linked to a again", || linked(&a, i + 1).then_some(()));
            echo(config, i);
        }
        let after = agent.memory_kib("VmRSS");
        assert!(after < before + 1024, "RSS {before} KiB before ten restarts, {after} KiB after");

        // The server asks for anything else: refused, and the server says why (502).
        for address in [format!("127.0.0.1:{bystander_port}"), format!("10.9.8.7:{port}")] {
            let s = std::os::unix::net::UnixStream::connect(&a.uds).unwrap();
            let answer = connect_over(s, &address).map(|_| ()).unwrap_err();
            assert!(answer.starts_with("HTTP/1.1 502"), "{address}: {answer}");
            assert!(answer.contains("reaches only the node's kubelet server"), "{answer}");
        }
    });

    // The token went only to the server, never to the log.
    assert!(!agent.log().contains(TOKEN));
    // Counted, and nothing dialled.
    assert_eq!(metric(read_only, r#"atoll_tunnel_dial_refusals_total{reason="destination"}"#) - refusals_before, 2.0);
    bystander.set_nonblocking(true).unwrap();
    assert!(bystander.accept().is_err(), "nothing was dialled");
    // The `logs -f` cut with its link ended with it: not a connection closed for falling behind.
    assert_eq!(metric(read_only, "atoll_tunnel_dropped_connections_total"), 0.0);
    assert!(!agent.log().contains("bytes behind"), "no connection was closed for falling behind");

    drop(agent);
    let _ = std::fs::remove_dir_all(&dir);
}

/// The server checks agents' client certificates (`--cluster-ca-cert`, the other way the
/// upstream agent authenticates): the node's own client certificate links, and kubectl works.
/// Then whoever reaches the server's frontend holds 200 idle connections to the node and asks
/// for a thousand more, each sent 1 MiB of junk: kubectl still gets its answers through the
/// same link (tunnelled connections have their own budget in the kubelet server, the oldest
/// idle one closed for a newer one), and the agent's memory stays far inside its unit's
/// `MemoryMax=128M`.
#[test]
fn a_server_that_checks_client_certificates_links_the_node() {
    let _room = common::room(module_path!());
    let _turn = one_agent_at_a_time();
    let dir = crate::common::Scratch::new("tunnel-mtls");
    let pki = Pki::new(&dir.join("pki"), "tb");
    let server = ApiServer::start(&pki, "tb");
    let (cert, key) = (pki.dir.join("server.crt"), pki.dir.join("server.key"));
    let konn = ProxyServer::start(&dir, "konn-m", 1, &cert, &key, &AgentAuth::Mtls(pki.ca.clone()));
    let config = atoll_config(&dir, konn.agent_addr.port(), &pki, None);
    let (agent, port, _) = node(&dir, &pki, &server, &config);
    eventually(Duration::from_secs(60), "the link", || linked(&konn, 1).then_some(()));
    from_the_cluster(&server, &dir, &pki, |config| {
        server.egress_uds(&konn.uds);
        // (The ticker may not have written its first line yet.)
        eventually(Duration::from_secs(30), "a log line through the tunnel", || {
            let (code, out, err) = kubectl(config, &["logs", "ticker-tb", "--tail=1"], b"");
            assert_eq!(code, 0, "{err}");
            String::from_utf8_lossy(&out).starts_with("line ").then_some(())
        });
        echo(config, 0);
        let node = format!("127.0.0.1:{port}");
        let idle: Vec<_> = (0..200).filter_map(|_| konn.connect(&node).ok()).collect();
        assert!(idle.len() >= 100, "{} idle connections held", idle.len());
        let evicted = r#"atoll_listener_closed_connections_total{listener="kubelet-tunnel",reason="evicted"}"#;
        assert!(socket_metric(&agent, evicted) >= 100.0, "the idle ones made room, oldest first");
        for i in 1..=3 {
            echo(config, i);
        }
        let junk = vec![0x16u8; 1 << 20];
        let more: Vec<_> = (0..1000)
            .filter_map(|_| {
                let mut s = konn.connect(&node).ok()?;
                s.set_write_timeout(Some(Duration::from_secs(5))).unwrap();
                let _ = s.write_all(&junk);
                Some(s)
            })
            .collect();
        echo(config, 4);
        drop((idle, more));
    });
    let peak = agent.memory_kib("VmHWM");
    assert!(peak < 64 << 10, "the agent's peak RSS {peak} KiB");
    drop(agent);
    let _ = std::fs::remove_dir_all(&dir);
}

/// Whoever answers the server's address without a certificate from its CA gets no call, so
/// never the token, and no way to ask for dials.
#[test]
fn an_impostor_at_the_servers_address_gets_no_token() {
    let _room = common::room(module_path!());
    let _turn = one_agent_at_a_time();
    let tb = testbed();
    let dir = crate::common::Scratch::new("tunnel-impostor");
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
    // The real server, with a certificate of its own making; it would take any token.
    let reviewer = pki.kubeconfig(server.addr, None);
    let auth = AgentAuth::Token {
        kubeconfig: reviewer,
        namespace: AGENT_SA.0.into(),
        service_account: AGENT_SA.1.into(),
        audience: AUDIENCE.into(),
    };
    let impostor = ProxyServer::start(&dir, "impostor", 1, &dir.join("impostor.crt"), &dir.join("impostor.key"), &auth);
    let token = dir.join("konnectivity.token");
    std::fs::write(&token, TOKEN).unwrap();
    let atoll_config = atoll_config(&dir, impostor.agent_addr.port(), &pki, Some(&token));
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
    let seen = impostor.log();
    assert!(!seen.contains("Connect request from agent"), "no call, so no token, reached the impostor");
    assert!(!server.log().iter().any(|l| l.path.ends_with("/tokenreviews")), "no token to review");
    assert!(!log.contains(TOKEN));
    drop(agent);
    let _ = std::fs::remove_dir_all(&dir);
}
