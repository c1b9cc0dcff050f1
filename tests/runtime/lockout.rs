//! Nobody who can merely reach a listener locks anyone out of it: the attackers of the
//! pre-authentication budgets (`src/gate.rs`) played against the real agent. Hundreds of idle
//! connections from the client's own address to the kubelet port, and an unprivileged local
//! user (uid 65534) flooding it from 240 addresses of 127/8, while a client with a valid
//! certificate gets every request answered; the same user holding and opening idle
//! connections to `/healthz` and the read-only port while root's monitors keep their answers.
//! (Through the tunnel: `tests/runtime/tunnel.rs`; many LAN hosts: the gate's table test.)
use crate::apiserver;
use crate::common;

use apiserver::{ApiServer, Pki};
use common::kubelet_client::{client_config, As};
use common::{eventually, free_port, testbed, Agent};
use rustls::pki_types::ServerName;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::{Command, Stdio};
use std::time::Duration;

/// A TCP connection to 127.0.0.1:`port` from the source address `from`.
fn connect_from(from: [u8; 4], port: u16) -> std::io::Result<TcpStream> {
    use rustix::net::{bind, connect, socket, AddressFamily, SocketType};
    let fd = socket(AddressFamily::INET, SocketType::STREAM, None)?;
    bind(&fd, &SocketAddr::from((from, 0)))?;
    connect(&fd, &SocketAddr::from(([127, 0, 0, 1], port)))?;
    Ok(TcpStream::from(fd))
}

/// One HTTPS request as the cluster's client certificate, from `from`: the status.
fn get_pods(from: [u8; 4], port: u16, ca: &std::path::Path, pki: &Pki) -> Result<u16, String> {
    let tcp = connect_from(from, port).map_err(|e| e.to_string())?;
    tcp.set_read_timeout(Some(Duration::from_secs(15))).unwrap();
    let who = As::Certificate(&pki.client_cert, &pki.client_key);
    let name = ServerName::try_from("127.0.0.1").unwrap();
    let conn = rustls::ClientConnection::new(client_config(ca, &who).unwrap(), name).unwrap();
    let mut tls = rustls::StreamOwned::new(conn, tcp);
    write!(tls, "GET /pods HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n").map_err(|e| e.to_string())?;
    let mut raw = Vec::new();
    let _ = tls.read_to_end(&mut raw);
    let text = String::from_utf8_lossy(&raw);
    text.split(' ').nth(1).and_then(|c| c.parse().ok()).ok_or_else(|| format!("no answer: {text:?}"))
}

/// A plain HTTP GET to a loopback port: the status, or why there was none.
/// The request goes out in one write, as a monitor's (curl, a probe) does.
fn get(port: u16, path: &str) -> Result<u16, String> {
    get_after(port, path, Duration::ZERO)
}

/// [`get`] by a client that sends its request `pause` after it connected (a monitor the
/// scheduler put aside, on a busy box).
fn get_after(port: u16, path: &str, pause: Duration) -> Result<u16, String> {
    let request = format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
    let mut s = TcpStream::connect(("127.0.0.1", port)).map_err(|e| e.to_string())?;
    std::thread::sleep(pause);
    s.set_read_timeout(Some(Duration::from_secs(15))).unwrap();
    s.write_all(request.as_bytes()).map_err(|e| e.to_string())?;
    let mut text = String::new();
    let _ = s.read_to_string(&mut text);
    text.split(' ').nth(1).and_then(|c| c.parse().ok()).ok_or_else(|| format!("no answer: {text:?}"))
}

/// A python script run as uid 65534 (an unprivileged local user), from when it prints
/// `holding` until dropped.
struct Nobody(std::process::Child);

impl Nobody {
    fn start(script: &str) -> Nobody {
        let child = Command::new("setpriv")
            .args(["--reuid=65534", "--regid=65534", "--clear-groups", "/usr/bin/python3", "-c", script])
            .stdout(Stdio::piped())
            .spawn()
            .expect("setpriv python3");
        let mut nobody = Nobody(child);
        let mut said = [0u8; 7];
        nobody.0.stdout.as_mut().unwrap().read_exact(&mut said).expect("the local user holds its connections");
        assert_eq!(&said, b"holding");
        nobody
    }
}

impl Drop for Nobody {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The value of one series (`name{labels}` as rendered) in the read-only port's `/metrics`.
fn series(port: u16, name_and_labels: &str) -> f64 {
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    write!(s, "GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").unwrap();
    let mut text = String::new();
    s.read_to_string(&mut text).unwrap();
    text.lines().find_map(|l| l.strip_prefix(name_and_labels)?.trim().parse().ok()).unwrap_or(0.0)
}

#[test]
fn idle_connections_and_a_flood_lock_nobody_out_of_the_kubelet_port() {
    let _room = common::room(module_path!());
    let dir = crate::common::Scratch::new("lockout-kubelet");
    let pki = Pki::new(&dir.join("pki"), "tb");
    let server = ApiServer::start(&pki, "tb");
    let (port, read_only) = (free_port(), free_port());
    let agent = Agent::start(
        testbed(),
        &dir,
        &format!(
            "address: 127.0.0.1\nport: {port}\nreadOnlyPort: {read_only}\nauthentication:\n  x509: {{clientCAFile: {}}}\n",
            pki.ca.display()
        ),
        &[&format!("--kubeconfig={}", pki.kubeconfig(server.addr, None).display()), "--node-ip=127.0.0.1"],
        &[],
    );
    server.grant("system:nodes", "get", "proxy"); // the client certificate's group
    let ca = dir.join("state/pki/kubelet.crt");
    eventually(Duration::from_secs(60), "the kubelet server answers", || {
        (get_pods([127, 0, 0, 1], port, &ca, &pki) == Ok(200)).then_some(())
    });

    // 200 idle connections from the client's own address: no TLS byte, ever.
    let idle: Vec<TcpStream> = (0..200).map(|_| TcpStream::connect(("127.0.0.1", port)).unwrap()).collect();
    for i in 0..20 {
        assert_eq!(get_pods([127, 0, 0, 1], port, &ca, &pki), Ok(200), "request {i} with 200 idle connections held");
    }
    let evicted = r#"atoll_listener_closed_connections_total{listener="kubelet",reason="evicted"}"#;
    assert!(series(read_only, evicted) >= 100.0, "the idle ones made room, oldest first");
    drop(idle);

    // A flood: a local user (uid 65534) opens new idle connections from 240 addresses (it has
    // all of 127/8), each held, while the client asks. They are that user's: its share of the
    // pending budget makes room among its own, never by closing the client's. (Many hosts of a
    // LAN, each an address of its own, are the gate's table test: idle ones go first.)
    let flood = format!(
        "import socket, time\nheld = []\nfor n in range(100000):\n    s = socket.socket()\n    try:\n        s.bind(('127.0.%d.%d' % (1 + n % 2, 10 + n % 120), 0))\n        s.connect(('127.0.0.1', {port}))\n        held.append(s)\n    except OSError:\n        s.close()\n    held = held[-300:]\n    if n == 400: print('holding', flush=True)\n    time.sleep(0.0005)\n"
    );
    let flooding = Nobody::start(&flood);
    for i in 0..20 {
        assert_eq!(get_pods([127, 0, 0, 2], port, &ca, &pki), Ok(200), "request {i} during the flood");
    }
    drop(flooding);
    assert!(series(read_only, evicted) >= 300.0, "the flood's idle connections made room");
    drop(agent);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_local_user_cannot_lock_monitors_out_of_healthz_or_the_read_only_port() {
    let _room = common::room(module_path!());
    let dir = crate::common::Scratch::new("lockout-local");
    let (healthz, read_only) = (free_port(), free_port());
    let agent =
        Agent::start(testbed(), &dir, &format!("healthzPort: {healthz}\nreadOnlyPort: {read_only}\n"), &[], &[]);
    eventually(Duration::from_secs(30), "healthz answers", || (get(healthz, "/healthz") == Ok(200)).then_some(()));
    // uid 65534 holds 200 idle connections to each port, and keeps opening more (about a
    // thousand a second to each) until it is stopped.
    let hold = format!(
        "import socket, time\nheld = []\nfor i in range(10**6):\n    for p in ({healthz}, {read_only}):\n        held.append(socket.create_connection(('127.0.0.1', p)))\n        held = held[-400:]\n    if i == 200: print('holding', flush=True)\n    time.sleep(0.0005)\n"
    );
    let holding = Nobody::start(&hold);
    for i in 0..20 {
        assert_eq!(get(healthz, "/healthz"), Ok(200), "healthz, request {i}");
        assert_eq!(get(read_only, "/pods"), Ok(200), "the read-only port, request {i}");
    }
    // Root's monitor that is slow to send (hundreds of the user's connections arrive before
    // its request does) is not closed for them: they make room among their own.
    for i in 0..3 {
        let pause = Duration::from_millis(300);
        assert_eq!(get_after(healthz, "/healthz", pause), Ok(200), "healthz, a slow request {i}");
        assert_eq!(get_after(read_only, "/pods", pause), Ok(200), "the read-only port, a slow request {i}");
    }
    let evicted = r#"atoll_listener_closed_connections_total{listener="healthz",reason="evicted"}"#;
    assert!(series(read_only, evicted) >= 100.0, "the held connections made room");
    drop(holding);
    drop(agent);
    let _ = std::fs::remove_dir_all(&dir);
}
