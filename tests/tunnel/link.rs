//! atoll's konnectivity link against the real server (`proxy-server`, built from Debian's
//! sources), with no cluster around it: the agent runs in this process
//! (`atoll::tunnel::run`), and the "kubelet server" it hands connections to is a small service
//! of the test's whose connections either stream without end, echo, or never read. The API server's
//! side is this test too, sending HTTP CONNECTs to the server's frontend socket.
//!
//! What only a real server shows: the server ending sessions while atoll's data for them waits
//! for flow-control credit, a server that stops reading the link, a server restarted.

use super::apiserver::Pki;
use super::common::{eventually, Scratch};
use super::konnectivity::{AgentAuth, ProxyServer};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::SocketAddr;
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::{Duration, Instant};

/// The test's stand-in for the kubelet server: the address dials name, and where the tunnel
/// hands its connections (one end of a socket pair each).
struct Kubelet {
    addr: SocketAddr,
    handoff: smol::channel::Sender<smol::net::unix::UnixStream>,
}

impl std::fmt::Display for Kubelet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.addr.fmt(f)
    }
}

/// The first line of each connection picks what it does (`stream`: 32 KiB writes until the
/// peer goes; `echo`: lines back; `sink`: reads nothing, ever).
fn kubelet() -> Kubelet {
    let addr = SocketAddr::from(([127, 0, 0, 1], super::common::free_port()));
    let (handoff, handed) = smol::channel::unbounded::<smol::net::unix::UnixStream>();
    std::thread::spawn(move || {
        while let Ok(conn) = smol::block_on(handed.recv()) {
            let conn: std::sync::Arc<smol::Async<UnixStream>> = conn.into();
            let conn = std::sync::Arc::into_inner(conn).unwrap().into_inner().unwrap();
            conn.set_nonblocking(false).unwrap();
            std::thread::spawn(move || {
                let mut reader = BufReader::new(conn.try_clone().unwrap());
                let mut first = String::new();
                if reader.read_line(&mut first).is_err() {
                    return;
                }
                let mut w = conn;
                match first.trim() {
                    "stream" => {
                        let chunk = vec![b's'; 32 << 10];
                        while w.write_all(&chunk).is_ok() {}
                    }
                    "echo" => {
                        let mut line = String::new();
                        while reader.read_line(&mut line).is_ok_and(|n| n > 0) {
                            if w.write_all(line.as_bytes()).is_err() {
                                return;
                            }
                            line.clear();
                        }
                    }
                    _ => std::thread::sleep(Duration::from_secs(3600)),
                }
            });
        }
    });
    Kubelet { addr, handoff }
}

/// atoll's agent, in this process, linked to `server` (one address) as node `tb`.
fn agent(server: SocketAddr, pki: &Pki, token: Option<&Path>, kubelet: &Kubelet) -> smol::Task<()> {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let settings = atoll::tunnel::TunnelSettings {
        host: server.ip().to_string(),
        port: server.port(),
        ca_cert: pki.ca.clone(),
        agent_cert: token.is_none().then(|| (pki.client_cert.clone(), pki.client_key.clone())),
        token_file: token.map(Path::to_path_buf),
        agent_id: None,
        agent_identifiers: None,
        sync_interval: Duration::from_millis(100),
        sync_interval_cap: Duration::from_secs(1),
        keepalive: Duration::from_secs(30),
    };
    let (ips, handoff) = (vec!["127.0.0.1".into()], kubelet.handoff.clone());
    let node = atoll::tunnel::Node { name: "tb".into(), ips, kubelet: kubelet.addr, handoff };
    smol::spawn(atoll::tunnel::run(settings, node))
}

/// An echo session through the server: a line there and back, within `limit`.
fn echo(server: &ProxyServer, kubelet: &Kubelet, limit: Duration) -> Result<UnixStream, String> {
    let mut s = server.connect(&kubelet.to_string())?;
    s.set_read_timeout(Some(limit)).unwrap();
    s.write_all(b"echo\nping\n").map_err(|e| e.to_string())?;
    let mut back = [0u8; 5];
    s.read_exact(&mut back).map_err(|e| format!("no echo within {limit:?}: {e}"))?;
    (&back == b"ping\n").then_some(s).ok_or_else(|| format!("echoed {back:?}"))
}

/// The in-process agents share one metrics registry: tests that count drops take turns.
fn metrics_turn() -> std::sync::MutexGuard<'static, ()> {
    static TURN: std::sync::Mutex<()> = std::sync::Mutex::new(());
    TURN.lock().unwrap_or_else(|e| e.into_inner())
}

fn setup(name: &str) -> (Scratch, Pki) {
    let dir = Scratch::new(name);
    let pki = Pki::new(&dir.join("pki"), "tb");
    (dir, pki)
}

fn mtls_server(dir: &Path, pki: &Pki) -> ProxyServer {
    let (cert, key) = (pki.dir.join("server.crt"), pki.dir.join("server.key"));
    ProxyServer::start(dir, "konn-a", 1, &cert, &key, &AgentAuth::Mtls(pki.ca.clone()))
}

/// The API server's side ends 50 streaming sessions (exec output, logs -f) while atoll's data
/// for them waits for the link's flow-control credit: half stop reading for a while first
/// (the server's frontend write blocks, so the server stops reading the link), half just
/// close. Meanwhile an echo session goes on, and afterwards new sessions open at once on the
/// same link: nothing atoll sends is left half-written.
#[test]
fn the_link_outlives_fifty_streams_the_server_side_ends() {
    let (dir, pki) = setup("link-streams");
    let server = mtls_server(&dir, &pki);
    let kubelet = kubelet();
    let _agent = agent(server.agent_addr, &pki, None, &kubelet);
    eventually(Duration::from_secs(30), "a session through atoll's link", || {
        echo(&server, &kubelet, Duration::from_secs(5)).ok()
    });

    let stop = std::sync::atomic::AtomicBool::new(false);
    let kubelet = &kubelet;
    std::thread::scope(|scope| {
        let steady = scope.spawn(|| {
            let mut s = echo(&server, kubelet, Duration::from_secs(30)).expect("the steady session opens");
            let mut rounds = 0;
            while !stop.load(std::sync::atomic::Ordering::SeqCst) {
                s.write_all(b"again\n").unwrap();
                let mut back = [0u8; 6];
                s.read_exact(&mut back).expect("the steady session answers while others end");
                assert_eq!(&back, b"again\n");
                rounds += 1;
                std::thread::sleep(Duration::from_millis(50));
            }
            rounds
        });
        for batch in 0..5 {
            let sessions: Vec<_> = (0..10)
                .map(|i| {
                    let server = &server;
                    scope.spawn(move || {
                        let mut s = server.connect(&kubelet.to_string()).expect("a streaming session opens");
                        s.write_all(b"stream\n").unwrap();
                        let mut got = vec![0u8; 256 << 10];
                        s.read_exact(&mut got).expect("the stream flows");
                        if (batch + i) % 2 == 0 {
                            // The client stops reading; the stream fills every window between.
                            std::thread::sleep(Duration::from_millis(1500));
                        }
                    })
                })
                .collect();
            for s in sessions {
                s.join().unwrap();
            }
        }
        let ended = Instant::now();
        for i in 0..5 {
            echo(&server, kubelet, Duration::from_secs(5))
                .unwrap_or_else(|e| panic!("session {i} after the streams ended ({:?} later): {e}", ended.elapsed()));
        }
        stop.store(true, std::sync::atomic::Ordering::SeqCst);
        assert!(steady.join().unwrap() > 0);
    });
    // The same link all along: none was replaced.
    assert_eq!(server.log().matches("\"Agent connected\"").count(), 1, "{}", server.log());
    let _ = std::fs::remove_dir_all(&dir);
}

/// Service-account tokens, as the server checks them (TokenReview against the API server,
/// then the namespace and service account): the right token links, again after each server
/// restart within the back-off; a token the API server does not know, or one of another
/// service account, never links, and the node keeps trying at its capped pace.
#[test]
fn tokens_are_reviewed_and_only_the_agents_links() {
    let (dir, pki) = setup("link-tokens");
    let api = super::apiserver::ApiServer::start(&pki, "tb");
    let good = "the-agents-token";
    api.add_reviewed_token(good, "system:serviceaccount:kube-system:konnectivity-agent", &["system:serviceaccounts"]);
    api.add_reviewed_token("another-sa", "system:serviceaccount:kube-system:default", &["system:serviceaccounts"]);
    let auth = AgentAuth::Token {
        kubeconfig: pki.kubeconfig(api.addr, None),
        namespace: "kube-system".into(),
        service_account: "konnectivity-agent".into(),
        audience: "system:konnectivity-server".into(),
    };
    let (cert, key) = (pki.dir.join("server.crt"), pki.dir.join("server.key"));
    let mut server = ProxyServer::start(&dir, "konn-t", 1, &cert, &key, &auth);
    let kubelet = kubelet();
    for (n, bad) in ["unknown-token", "another-sa"].into_iter().enumerate() {
        let file = dir.join(format!("bad-{n}"));
        std::fs::write(&file, bad).unwrap();
        let _intruder = agent(server.agent_addr, &pki, Some(&file), &kubelet);
        std::thread::sleep(Duration::from_secs(2));
        assert!(server.connect(&kubelet.to_string()).is_err(), "{bad}: no link, so no way to the node");
        assert!(!server.log().contains("\"Agent connected\""), "{bad}: {}", server.log());
    }
    assert!(server.log().contains("Failed to validate authentication token"), "{}", server.log());
    let file = dir.join("good");
    std::fs::write(&file, format!("{good}\n")).unwrap();
    let _agent = agent(server.agent_addr, &pki, Some(&file), &kubelet);
    for round in 1..=3 {
        let since = Instant::now();
        eventually(Duration::from_secs(30), "a session through the link", || {
            echo(&server, &kubelet, Duration::from_secs(5)).ok()
        });
        assert!(since.elapsed() < Duration::from_secs(5), "round {round}: linked in {:?}", since.elapsed());
        server.restart();
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// Two instances (`--server-count=2`) behind one address: the node links to each (a second
/// link to the same instance is dropped), reaches the kubelet server through either, and links
/// to an instance again when it restarts, while the other link carries on.
#[test]
fn both_instances_behind_one_address_are_linked_and_relinked() {
    let (dir, pki) = setup("link-two");
    let (cert, key) = (pki.dir.join("server.crt"), pki.dir.join("server.key"));
    let auth = AgentAuth::Mtls(pki.ca.clone());
    let mut a = ProxyServer::start(&dir, "konn-a", 2, &cert, &key, &auth);
    let b = ProxyServer::start(&dir, "konn-b", 2, &cert, &key, &auth);
    let balancer = super::konnectivity::Balancer::start(vec![a.agent_addr, b.agent_addr]);
    let kubelet = kubelet();
    let _agent = agent(balancer.addr, &pki, None, &kubelet);
    for server in [&a, &b] {
        eventually(Duration::from_secs(30), &format!("a session through {}", server.id), || {
            echo(server, &kubelet, Duration::from_secs(5)).ok()
        });
    }
    let mut steady = echo(&b, &kubelet, Duration::from_secs(5)).unwrap();
    for round in 1..=3 {
        a.restart();
        let since = Instant::now();
        eventually(Duration::from_secs(30), "a session through a again", || {
            echo(&a, &kubelet, Duration::from_secs(5)).ok()
        });
        assert!(since.elapsed() < Duration::from_secs(5), "round {round}: linked again in {:?}", since.elapsed());
        steady.write_all(b"still\n").unwrap();
        let mut back = [0u8; 6];
        steady.read_exact(&mut back).expect("the link to b carries on");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// A session whose API-server side never reads: the server's frontend write blocks and the
/// server stops reading the link altogether (its design: one receive loop per agent, and a
/// blocking write to each frontend). atoll cannot send for its keepalive timeout (20 s) and
/// replaces the link. The server keeps dialling on the old one (the first link of an agent
/// wins) until that client goes; then the new link carries every session.
#[test]
fn a_link_the_server_stops_reading_is_replaced() {
    let (dir, pki) = setup("link-stall");
    let server = mtls_server(&dir, &pki);
    let kubelet = kubelet();
    let _agent = agent(server.agent_addr, &pki, None, &kubelet);
    eventually(Duration::from_secs(30), "a session through the link", || {
        echo(&server, &kubelet, Duration::from_secs(5)).ok()
    });
    let mut stuck = server.connect(&kubelet.to_string()).unwrap();
    stuck.write_all(b"stream\n").unwrap();
    let since = Instant::now();
    eventually(Duration::from_secs(15), "every window between filled", || {
        echo(&server, &kubelet, Duration::from_secs(1)).is_err().then_some(())
    });
    eventually(Duration::from_secs(40), "a second link", || {
        (server.log().matches("\"Agent connected\"").count() == 2).then_some(())
    });
    let replaced = since.elapsed();
    assert!(replaced > Duration::from_secs(15), "not before the stall limit: {replaced:?}");
    drop(stuck);
    let since = Instant::now();
    eventually(Duration::from_secs(10), "a session through the new link", || {
        echo(&server, &kubelet, Duration::from_secs(2)).ok()
    });
    assert!(since.elapsed() < Duration::from_secs(5), "sessions again {:?} after the client went", since.elapsed());
    assert!(server.log().contains("\"Remove connection for agent\" agentID=\"tb\""), "the old link is gone");
    let _ = std::fs::remove_dir_all(&dir);
}

/// An upload to a kubelet-server connection that takes nothing: atoll queues 4 MiB of it,
/// then closes that connection alone; the session beside it never waits.
#[test]
fn a_connection_that_takes_nothing_is_closed_alone() {
    let _turn = metrics_turn();
    let (dir, pki) = setup("link-sink");
    let server = mtls_server(&dir, &pki);
    let kubelet = kubelet();
    let _agent = agent(server.agent_addr, &pki, None, &kubelet);
    let mut steady = eventually(Duration::from_secs(30), "a session through the link", || {
        echo(&server, &kubelet, Duration::from_secs(5)).ok()
    });
    let dropped = || atoll::metrics::value(&atoll::metrics::TUNNEL_DROPPED, &[]);
    let before = dropped();
    let mut sink = server.connect(&kubelet.to_string()).unwrap();
    sink.write_all(b"sink\n").unwrap();
    let mut writer = sink.try_clone().unwrap();
    let upload = std::thread::spawn(move || {
        let chunk = vec![0u8; 64 << 10];
        let mut sent = 0usize;
        while sent < 64 << 20 && writer.write_all(&chunk).is_ok() {
            sent += chunk.len();
        }
        sent
    });
    for _ in 0..20 {
        steady.write_all(b"beside\n").unwrap();
        let mut back = [0u8; 7];
        steady.read_exact(&mut back).expect("the session beside goes on");
        std::thread::sleep(Duration::from_millis(100));
    }
    // The server closed the sink's session when atoll closed its connection.
    sink.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let mut rest = Vec::new();
    let _ = sink.read_to_end(&mut rest);
    let sent = upload.join().unwrap();
    assert!(sent < 64 << 20, "the upload was cut short ({sent} bytes)");
    assert!(sent >= 4 << 20, "at least 4 MiB was taken first ({sent} bytes)");
    echo(&server, &kubelet, Duration::from_secs(5)).expect("new sessions open");
    // Counted, as soon as the connection was closed (its socket shut down: the kubelet side
    // reading nothing does not hold it open).
    eventually(Duration::from_secs(5), "the drop counted", || (dropped() == before + 1.0).then_some(()));
    let _ = std::fs::remove_dir_all(&dir);
}

/// A server that asks for a thousand connections the kubelet side never closes: atoll keeps
/// at most 128 on the link and refuses the rest (counted). Then 1 MiB sent on each that the
/// kubelet side never takes: the link's queues stay within 16 MiB, the connections furthest
/// behind closed (counted), and the link still carries new sessions afterwards.
#[test]
fn a_thousand_dials_get_the_links_budget_and_no_more() {
    let _turn = metrics_turn();
    let (dir, pki) = setup("link-thousand");
    let server = mtls_server(&dir, &pki);
    let kubelet = kubelet();
    let _agent = agent(server.agent_addr, &pki, None, &kubelet);
    eventually(Duration::from_secs(30), "a session through the link", || {
        echo(&server, &kubelet, Duration::from_secs(5)).ok()
    });
    let count = |family| atoll::metrics::value(family, &[]);
    let limited = || atoll::metrics::value(&atoll::metrics::TUNNEL_REFUSALS, &[("reason", "limit")]);
    let (refusals, drops) = (limited(), count(&atoll::metrics::TUNNEL_DROPPED));
    let mut held = Vec::new();
    for _ in 0..1000 {
        if let Ok(mut s) = server.connect(&kubelet.to_string()) {
            s.write_all(b"sink\n").unwrap();
            held.push(s);
        }
    }
    let refused = 1000 - held.len();
    assert!(held.len() <= 128 && refused >= 872, "{} connections taken of 1000", held.len());
    assert!(limited() - refusals >= refused as f64, "each refusal counted");
    let megabyte = vec![0u8; 1 << 20];
    for s in &mut held {
        s.set_write_timeout(Some(Duration::from_secs(10))).unwrap();
        let _ = s.write_all(&megabyte);
    }
    // Each connection's socket pair takes a few hundred KiB; at most 16 MiB more wait in atoll.
    let must_drop = (held.len() as f64 - 64.0).max(1.0);
    eventually(Duration::from_secs(30), "the connections furthest behind closed", || {
        (count(&atoll::metrics::TUNNEL_DROPPED) - drops >= must_drop).then_some(())
    });
    drop(held);
    eventually(Duration::from_secs(30), "sessions again", || echo(&server, &kubelet, Duration::from_secs(5)).ok());
    let _ = std::fs::remove_dir_all(&dir);
}
