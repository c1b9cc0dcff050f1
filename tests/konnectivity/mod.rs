//! The real konnectivity server (apiserver-network-proxy's `proxy-server`) and agent
//! (`proxy-agent`), built by the test bed from Debian's packaged sources
//! (`tests/testbed/gosrc.sh`), run as a cluster operator runs them:
//! - the server in `http-connect` mode with its frontend on a unix socket (kube-apiserver's
//!   egress selector, `transport: uds`), agents on TLS at a TCP port, `--proxy-strategies
//!   destHost,default`, `--server-count`, and either mTLS agents (`--cluster-ca-cert`) or
//!   service-account tokens checked through TokenReview against the test API server;
//! - several instances behind one agent address through [`Balancer`], a TCP load balancer;
//! - the upstream agent beside atoll's, for comparison.
//!
//! The server refuses ports above 49151 (`low_port`).

#![allow(dead_code)]

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A program the test bed built into its cache (`install` builds them all).
pub fn built(name: &str) -> PathBuf {
    let cache = std::env::var("ATOLL_TESTBED_CACHE").unwrap_or_else(|_| "/var/cache/atoll-testbed".into());
    let path = Path::new(&cache).join("gosrc/bin").join(name);
    assert!(path.exists(), "{} is missing: run `bash tests/testbed/testbed.sh install` first", path.display());
    path
}

/// The versions the test bed built (package, version; sha256 of each binary).
pub fn versions() -> String {
    let cache = std::env::var("ATOLL_TESTBED_CACHE").unwrap_or_else(|_| "/var/cache/atoll-testbed".into());
    std::fs::read_to_string(Path::new(&cache).join("gosrc/VERSIONS")).unwrap_or_default()
}

/// A free port on 127.0.0.1 below the ephemeral range the server refuses (1024..49151), not
/// one another test of this run took.
pub fn low_port() -> u16 {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    let base = 20000 + (std::process::id() as usize % 97) * 100;
    loop {
        let port = (base + NEXT.fetch_add(1, Ordering::SeqCst) % 9000) as u16;
        if TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
}

/// How agents prove who they are.
#[derive(Clone)]
pub enum AgentAuth {
    /// A client certificate from this CA (PEM file).
    Mtls(PathBuf),
    /// A service account's token, reviewed by the API server this kubeconfig names.
    Token { kubeconfig: PathBuf, namespace: String, service_account: String, audience: String },
}

/// One `proxy-server` process.
pub struct ProxyServer {
    pub id: String,
    pub agent_addr: SocketAddr,
    /// The frontend: HTTP CONNECT on this unix socket.
    pub uds: PathBuf,
    pub health_port: u16,
    pub log: PathBuf,
    args: Vec<String>,
    child: Option<Child>,
    /// The network namespace it was made in: a restart from a test thread that has moved to
    /// a namespace of its own (the API server's side) still starts it there.
    netns: std::fs::File,
    starts: usize,
}

impl ProxyServer {
    /// An instance serving agents at a port of its own with `cert`/`key` (PEM), one of `count`.
    pub fn start(dir: &Path, id: &str, count: usize, cert: &Path, key: &Path, auth: &AgentAuth) -> ProxyServer {
        std::fs::create_dir_all(dir).unwrap();
        let agent_port = low_port();
        Self::start_at(dir, id, count, cert, key, auth, agent_port)
    }

    fn start_at(
        dir: &Path,
        id: &str,
        count: usize,
        cert: &Path,
        key: &Path,
        auth: &AgentAuth,
        agent_port: u16,
    ) -> ProxyServer {
        let uds = dir.join(format!("{id}.sock"));
        let (health_port, admin_port) = (low_port(), low_port());
        let mut args: Vec<String> = vec![
            "--mode=http-connect".into(),
            format!("--uds-name={}", uds.display()),
            "--server-port=0".into(),
            "--agent-bind-address=127.0.0.1".into(),
            format!("--agent-port={agent_port}"),
            "--health-bind-address=127.0.0.1".into(),
            format!("--health-port={health_port}"),
            "--admin-bind-address=127.0.0.1".into(),
            format!("--admin-port={admin_port}"),
            format!("--cluster-cert={}", cert.display()),
            format!("--cluster-key={}", key.display()),
            format!("--server-id={id}"),
            format!("--server-count={count}"),
            "--proxy-strategies=destHost,default".into(),
            "-v=3".into(),
        ];
        match auth {
            AgentAuth::Mtls(ca) => args.push(format!("--cluster-ca-cert={}", ca.display())),
            AgentAuth::Token { kubeconfig, namespace, service_account, audience } => args.extend([
                format!("--kubeconfig={}", kubeconfig.display()),
                "--kube-api-content-type=application/json".into(),
                format!("--agent-namespace={namespace}"),
                format!("--agent-service-account={service_account}"),
                format!("--authentication-audience={audience}"),
            ]),
        }
        let mut server = ProxyServer {
            id: id.into(),
            agent_addr: SocketAddr::from(([127, 0, 0, 1], agent_port)),
            uds,
            health_port,
            log: dir.join(format!("{id}.log")),
            args,
            child: None,
            netns: std::fs::File::open("/proc/thread-self/ns/net").unwrap(),
            starts: 0,
        };
        server.run();
        server
    }

    fn run(&mut self) {
        use std::os::fd::AsRawFd;
        use std::os::unix::process::CommandExt;
        let log = std::fs::OpenOptions::new().create(true).append(true).open(&self.log).unwrap();
        let netns = self.netns.as_raw_fd();
        let mut cmd = Command::new(built("proxy-server"));
        // SAFETY: between fork and exec the child only calls setns(2), which is
        // async-signal-safe, on a descriptor it inherited.
        #[allow(unsafe_code)] // pre_exec is unsafe; the test bed's proxy must start in its netns.
        unsafe {
            cmd.pre_exec(move || {
                let fd = std::os::fd::BorrowedFd::borrow_raw(netns);
                rustix::thread::move_into_link_name_space(fd, Some(rustix::thread::LinkNameSpaceType::Network))
                    .map_err(std::io::Error::from)
            });
        }
        let child = cmd
            .args(&self.args)
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .expect("proxy-server starts");
        self.child = Some(child);
        self.starts += 1;
        // Listening on both sides once it says it starts the admin server (the agent port is
        // bound before that) and its socket answers; judged without TCP, which the calling
        // thread may see in another namespace.
        let deadline = Instant::now() + Duration::from_secs(30);
        while self.log().matches("Starting admin server").count() < self.starts
            || UnixStream::connect(&self.uds).is_err()
        {
            if let Some(status) = self.child.as_mut().unwrap().try_wait().unwrap() {
                panic!("proxy-server {} exited ({status}): {}", self.id, self.log());
            }
            assert!(Instant::now() < deadline, "proxy-server {} did not listen: {}", self.id, self.log());
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Stops the process (SIGKILL: its agents see their connections reset).
    pub fn stop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Stops it and starts it again on the same ports.
    pub fn restart(&mut self) {
        self.stop();
        self.run();
    }

    /// Restarts it saying there are `count` instances.
    pub fn restart_counting(&mut self, count: usize) {
        for a in self.args.iter_mut().filter(|a| a.starts_with("--server-count=")) {
            *a = format!("--server-count={count}");
        }
        self.restart();
    }

    pub fn pid(&self) -> u32 {
        self.child.as_ref().map_or(0, Child::id)
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// The server's `/readyz`: ready once at least one agent is linked.
    pub fn ready(&self) -> bool {
        let Ok(mut s) = TcpStream::connect(("127.0.0.1", self.health_port)) else { return false };
        let _ = write!(s, "GET /readyz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
        let mut text = String::new();
        let _ = s.read_to_string(&mut text);
        text.starts_with("HTTP/1.1 200")
    }

    /// A metric from the server's health port (`/metrics`), summed over its series.
    pub fn metric(&self, name: &str) -> f64 {
        let Ok(mut s) = TcpStream::connect(("127.0.0.1", self.health_port)) else { return 0.0 };
        let _ = write!(s, "GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
        let mut text = String::new();
        let _ = s.read_to_string(&mut text);
        text.lines()
            .filter(|l| l.strip_prefix(name).is_some_and(|rest| rest.starts_with([' ', '{'])))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum()
    }

    /// An HTTP CONNECT to `address` through the frontend, as kube-apiserver's egress selector
    /// sends it: the stream once the server said 200, or the whole answer it gave instead.
    /// The answer is awaited for 10 s at most.
    pub fn connect(&self, address: &str) -> Result<UnixStream, String> {
        let s = UnixStream::connect(&self.uds).map_err(|e| e.to_string())?;
        s.set_read_timeout(Some(Duration::from_secs(10))).map_err(|e| e.to_string())?;
        let s = connect_over(s, address)?;
        s.set_read_timeout(None).map_err(|e| e.to_string())?;
        Ok(s)
    }
}

impl Drop for ProxyServer {
    fn drop(&mut self) {
        self.stop();
    }
}

/// CONNECT on `s`: `s` itself once answered 200, the answer otherwise.
pub fn connect_over<S: Read + Write>(mut s: S, address: &str) -> Result<S, String> {
    write!(s, "CONNECT {address} HTTP/1.1\r\nHost: {address}\r\n\r\n").map_err(|e| e.to_string())?;
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        match s.read(&mut byte) {
            Ok(1) => head.push(byte[0]),
            _ => break,
        }
    }
    if head.starts_with(b"HTTP/1.1 200") {
        return Ok(s);
    }
    let mut rest = Vec::new();
    let _ = s.read_to_end(&mut rest);
    head.extend(rest);
    Err(String::from_utf8_lossy(&head).into_owned())
}

/// The upstream agent, linked to `server` (one address) as `agent_id` with `identifiers`,
/// authenticated by `cert`/`key` or by the token in `token`.
pub struct ProxyAgent {
    child: Child,
    pub log: PathBuf,
}

impl ProxyAgent {
    pub fn start(
        dir: &Path,
        server: SocketAddr,
        ca: &Path,
        identity: (&str, &str),
        cert_key: Option<(&Path, &Path)>,
        token: Option<&Path>,
    ) -> ProxyAgent {
        let log = dir.join(format!("proxy-agent-{}.log", identity.0));
        let out = std::fs::File::create(&log).unwrap();
        let mut cmd = Command::new(built("proxy-agent"));
        cmd.args([
            format!("--proxy-server-host={}", server.ip()),
            format!("--proxy-server-port={}", server.port()),
            format!("--ca-cert={}", ca.display()),
            format!("--agent-id={}", identity.0),
            format!("--agent-identifiers={}", identity.1),
            format!("--health-server-port={}", low_port()),
            "--health-server-host=127.0.0.1".into(),
            format!("--admin-server-port={}", low_port()),
            "--sync-interval=100ms".into(),
            "--sync-interval-cap=1s".into(),
            "-v=1".into(),
        ]);
        if let Some((cert, key)) = cert_key {
            cmd.arg(format!("--agent-cert={}", cert.display())).arg(format!("--agent-key={}", key.display()));
        }
        if let Some(t) = token {
            cmd.arg(format!("--service-account-token-path={}", t.display()));
        }
        let child =
            cmd.stdin(Stdio::null()).stdout(out.try_clone().unwrap()).stderr(out).spawn().expect("proxy-agent starts");
        ProxyAgent { child, log }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }
}

impl Drop for ProxyAgent {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A TCP load balancer on 127.0.0.1 in front of several server instances: each connection
/// goes to the next backend in turn (as a cloud load balancer or HAProxy in round-robin
/// mode), so an agent finds every instance only by connecting again.
pub struct Balancer {
    pub addr: SocketAddr,
    backends: Arc<std::sync::Mutex<Vec<SocketAddr>>>,
}

impl Balancer {
    pub fn start(backends: Vec<SocketAddr>) -> Balancer {
        let listener = TcpListener::bind(("127.0.0.1", low_port())).unwrap();
        let addr = listener.local_addr().unwrap();
        let next = Arc::new(AtomicUsize::new(0));
        let backends = Arc::new(std::sync::Mutex::new(backends));
        let list = backends.clone();
        std::thread::spawn(move || {
            for client in listener.incoming() {
                let Ok(client) = client else { return };
                let to = {
                    let list = list.lock().unwrap();
                    list[next.fetch_add(1, Ordering::SeqCst) % list.len()]
                };
                let Ok(backend) = TcpStream::connect(to) else { continue };
                // As HAProxy and cloud load balancers: no Nagle wait on either leg.
                let _ = (client.set_nodelay(true), backend.set_nodelay(true));
                for (mut from, mut to) in
                    [(client.try_clone().unwrap(), backend.try_clone().unwrap()), (backend, client)]
                {
                    std::thread::spawn(move || {
                        let mut buf = vec![0u8; 64 << 10];
                        while let Ok(n @ 1..) = from.read(&mut buf) {
                            if to.write_all(&buf[..n]).is_err() {
                                break;
                            }
                        }
                        let _ = to.shutdown(std::net::Shutdown::Write);
                    });
                }
            }
        });
        Balancer { addr, backends }
    }

    /// New connections go to these from now on.
    pub fn set_backends(&self, backends: Vec<SocketAddr>) {
        *self.backends.lock().unwrap() = backends;
    }
}
