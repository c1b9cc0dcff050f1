//! A test double of the Kubernetes API server, for the resources atoll's mirror uses (Node,
//! Pod, Lease), written from the API's documentation (API conventions, the pods, nodes and
//! leases references, the watch and patch docs) since no kube-apiserver runs on these
//! machines. It keeps the real server's observable semantics where atoll depends on them:
//!
//! - HTTPS on 127.0.0.1 with client-certificate (a CA it issues from) or bearer-token
//!   authentication; 401 without either. The NodeRestriction admission rules for
//!   `system:node:<name>`: own Node and Lease only, mirror pods only (annotation, nodeName,
//!   one controlling Node owner with the node's UID).
//! - Exact paths; JSON bodies; Status objects with `reason` and `code` for failures: 201 on
//!   create, 200, 404 NotFound, 409 AlreadyExists, 409 Conflict (resourceVersion or UID
//!   precondition), 422 Invalid, 415 for unsupported patch types, 403 Forbidden.
//! - `metadata.uid`, `creationTimestamp` and `resourceVersion` set by the server (one counter
//!   over all writes); updates must carry the current resourceVersion; pod status reset to
//!   Pending on create; status and spec written only through their own endpoints.
//! - Every body held to the upstream definitions before it is taken (`check`: strict JSON
//!   and protobuf decoding into k8s.io/api's types by Kubernetes' own code), and JSON merge
//!   patch and strategic merge patch applied by upstream code (conditions merged by type,
//!   `$setElementOrder`, ...).
//! - DELETE with DeleteOptions: preconditions (uid, resourceVersion), grace period (a bound
//!   pod with grace > 0 gets a deletionTimestamp and stays; grace 0 removes it). Deleting a
//!   Node removes the pods it owns, as the garbage collector would.
//! - List with `fieldSelector` (spec.nodeName, metadata.name), watch from a resourceVersion
//!   with chunked JSON events, ERROR 410 Gone for a compacted resourceVersion, timeoutSeconds.
//!
//! - Discovery (`/api`, `/apis`, the resource lists), for kubectl (`discovery`).
//! - `pods/log`, `pods/exec`, `pods/attach`, `pods/portforward` and `nodes/proxy` sent on to
//!   the node's kubelet endpoint with the API server's kubelet client certificate
//!   (`node_proxy`).
//!
//! Faults: down (connections refused and cut), unavailable (every request answered 503), slow
//! (every answer delayed), queued failures (500, 429 with Retry-After, ...), queued answers of
//! any status and JSON body (a broken or hostile server), watch events held back, and
//! admission rejection of pods by name.
//! Every request is logged (time, method, path, status) and bytes on the wire are counted.

#![allow(dead_code)]

mod check;
mod discovery;
mod h2;
pub mod node_proxy;
mod proto;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use serde_json::{json, Value};
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant, SystemTime};

/// Certificates for one test: a CA, the server's certificate for 127.0.0.1, and a client
/// certificate for `system:node:<node>` (organisation system:nodes). Made with openssl.
pub struct Pki {
    pub dir: PathBuf,
    pub ca: PathBuf,
    pub client_cert: PathBuf,
    pub client_key: PathBuf,
}

fn openssl(dir: &Path, args: &[&str]) {
    let out = std::process::Command::new("openssl").args(args).current_dir(dir).output().expect("openssl runs");
    assert!(out.status.success(), "openssl {args:?}: {}", String::from_utf8_lossy(&out.stderr));
}

impl Pki {
    pub fn new(dir: &Path, node: &str) -> Pki {
        std::fs::create_dir_all(dir).unwrap();
        let ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"];
        openssl(
            dir,
            &[
                &["req", "-x509"][..],
                &ec,
                &["-keyout", "ca.key", "-out", "ca.crt", "-days", "2", "-subj", "/CN=test-apiserver-ca"],
            ]
            .concat(),
        );
        // X.509 v3 (extensions) for both: webpki takes nothing older.
        std::fs::write(
            dir.join("server.ext"),
            "subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\n",
        )
        .unwrap();
        std::fs::write(dir.join("client.ext"), "extendedKeyUsage=clientAuth\nkeyUsage=digitalSignature\n").unwrap();
        for (name, subj, ext) in [
            ("server", "/CN=kube-apiserver".to_string(), "server.ext"),
            ("client", format!("/O=system:nodes/CN=system:node:{node}"), "client.ext"),
            ("kubelet-client", "/O=system:masters/CN=kube-apiserver-kubelet-client".to_string(), "client.ext"),
        ] {
            openssl(
                dir,
                &[
                    &["req"][..],
                    &ec,
                    &["-keyout", &format!("{name}.key"), "-out", &format!("{name}.csr"), "-subj", &subj],
                ]
                .concat(),
            );
            let mut args = vec![
                "x509",
                "-req",
                "-in",
                &format!("{name}.csr"),
                "-CA",
                "ca.crt",
                "-CAkey",
                "ca.key",
                "-CAcreateserial",
                "-out",
                &format!("{name}.crt"),
                "-days",
                "2",
            ]
            .into_iter()
            .map(String::from)
            .collect::<Vec<_>>();
            args.extend(["-extfile".to_string(), ext.to_string()]);
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            openssl(dir, &args);
        }
        Pki {
            dir: dir.to_path_buf(),
            ca: dir.join("ca.crt"),
            client_cert: dir.join("client.crt"),
            client_key: dir.join("client.key"),
        }
    }

    /// A kubeconfig with the client certificate (files), or with `token` instead.
    /// A kubeconfig at `out` for a node with the bearer token in `token` (a fleet's nodes,
    /// one identity each).
    pub fn kubeconfig_for(&self, addr: SocketAddr, token: &Path, out: &Path) {
        std::fs::copy(self.kubeconfig(addr, Some(token)), out).unwrap();
    }

    pub fn kubeconfig(&self, addr: SocketAddr, token: Option<&Path>) -> PathBuf {
        let user = match token {
            Some(t) => format!("    tokenFile: {}\n", t.display()),
            None => format!(
                "    client-certificate: {}\n    client-key: {}\n",
                self.client_cert.display(),
                self.client_key.display()
            ),
        };
        let text = format!(
            "apiVersion: v1\nkind: Config\ncurrent-context: test\nclusters:\n- name: test\n  cluster:\n    server: https://{addr}\n    certificate-authority: {}\nusers:\n- name: node\n  user:\n{user}contexts:\n- name: test\n  context:\n    cluster: test\n    user: node\n",
            self.ca.display()
        );
        let path = self.dir.join(if token.is_some() { "kubeconfig-token" } else { "kubeconfig" });
        std::fs::write(&path, text).unwrap();
        path
    }
}

/// One request as the server saw it.
#[derive(Clone, Debug)]
pub struct Logged {
    /// When the request arrived (before any injected delay).
    pub at: Instant,
    pub method: String,
    pub path: String,
    pub status: u16,
    pub user: String,
    /// `HTTP/1.1` or `HTTP/2`.
    pub proto: &'static str,
    /// The request body's Content-Type (empty without one).
    pub content_type: String,
    /// The request's body, and the answer's (0 for a watch: its events are `watch_bytes`), in
    /// bytes as they went (before TLS and HTTP framing).
    pub body: usize,
    pub answer: usize,
}

impl Logged {
    /// What the request was, in a benchmark's words: `PUT lease`, `watch pods`, `PATCH node
    /// status`, `POST pods` (a lease's creation counts as `POST lease`).
    pub fn kind(&self) -> String {
        let path = self.path.split_once('?').map_or(self.path.as_str(), |(p, _)| p);
        if path.contains("/leases") {
            format!("{} lease", self.method)
        } else if self.path.contains("watch=true") {
            "watch pods".to_string()
        } else if path.starts_with("/api/v1/nodes") {
            format!("{} node{}", self.method, if path.ends_with("/status") { " status" } else { "" })
        } else {
            format!("{} pods", self.method)
        }
    }
}

#[derive(Default)]
struct Faults {
    delay: Duration,
    /// Answers to give the next requests instead of serving them: (status, Retry-After, a
    /// body other than a Status object).
    fail_next: VecDeque<(u16, Option<u64>, Option<Value>)>,
    /// Pod names admission refuses, with the message.
    reject_pods: HashMap<String, String>,
    /// Watches end after at most this long (a proxy that cuts streams).
    watch_limit: Option<Duration>,
    /// Watch events wait (a watch cache or a link that lags): writes are served meanwhile.
    watches_held: bool,
    /// Every request is answered 503 without Retry-After (no healthy backend behind a load
    /// balancer, etcd away): an outage the log sees, each attempt in it.
    unavailable: bool,
}

struct Event {
    rv: u64,
    resource: &'static str,
    kind: &'static str,
    object: Value,
}

#[derive(Default)]
struct Store {
    rv: u64,
    /// (resource, namespace, name) → object.
    objects: BTreeMap<(&'static str, String, String), Value>,
    events: VecDeque<Event>,
    /// Events older than this resourceVersion were compacted away.
    compacted: u64,
    /// How many events are kept (`KEEP_EVENTS` unless `keep_events` says otherwise).
    keep: usize,
    uid_seq: u64,
}

const NAMESPACES: &[&str] = &["default", "kube-system", "kube-public", "kube-node-lease"];
const KEEP_EVENTS: usize = 1000;

struct State {
    store: Mutex<Store>,
    /// Signalled when objects of a resource change (pods, nodes, leases, the rest), so a
    /// lease renewal does not wake every pod watch.
    changed: [Condvar; 4],
    /// API Priority and Fairness, as far as a fleet meets it: above a rate, 429.
    limit: Mutex<Option<Limit>>,
    /// HTTP/2 connections that carry nothing more either way, as when a NAT forgets them.
    silent: Mutex<std::collections::HashSet<u64>>,
    faults: Mutex<Faults>,
    /// What `check` refused: each fails the test when the server is dropped.
    refused: Mutex<Vec<String>>,
    log: Mutex<Vec<Logged>>,
    tokens: Mutex<HashMap<String, String>>,
    /// Tokens TokenReview knows: token → (user, groups).
    reviewed: Mutex<HashMap<String, (String, Vec<String>)>>,
    /// What SubjectAccessReview allows: (user or group, verb, subresource) of `nodes`.
    grants: Mutex<Vec<(String, String, String)>>,
    certs: HashMap<Vec<u8>, String>,
    up: AtomicBool,
    bytes_in: AtomicU64,
    bytes_out: AtomicU64,
    /// The bytes of every watch event sent (each event's encoding as it went).
    watch_bytes: AtomicU64,
    /// Open connections by number (so `down` can cut them).
    conns: Mutex<HashMap<u64, TcpStream>>,
    conn_seq: AtomicU64,
    /// The TLS configuration new connections get (`offer_http2` swaps it).
    tls: Mutex<Arc<rustls::ServerConfig>>,
    /// How it reaches kubelets (`--kubelet-client-certificate`, `--kubelet-certificate-authority`).
    kubelet_client: Mutex<Option<Arc<rustls::ClientConfig>>>,
    /// `--egress-selector-config-file`'s cluster egress: nodes are reached through this HTTP
    /// CONNECT proxy (a konnectivity server), not dialled.
    egress: Mutex<Option<node_proxy::Egress>>,
    addr: SocketAddr,
}

pub struct ApiServer {
    pub addr: SocketAddr,
    state: Arc<State>,
    accept: Mutex<Vec<std::thread::JoinHandle<()>>>,
}

impl ApiServer {
    /// Starts serving on a free 127.0.0.1 port with `pki`'s certificates; the client
    /// certificate authenticates as `system:node:<node>`.
    pub fn start(pki: &Pki, node: &str) -> ApiServer {
        check::ready();
        let _ = rustls::crypto::ring::default_provider().install_default();
        let mut roots = rustls::RootCertStore::empty();
        for c in CertificateDer::pem_file_iter(&pki.ca).unwrap() {
            roots.add(c.unwrap()).unwrap();
        }
        let verifier =
            rustls::server::WebPkiClientVerifier::builder(Arc::new(roots)).allow_unauthenticated().build().unwrap();
        let chain: Vec<CertificateDer<'static>> =
            CertificateDer::pem_file_iter(pki.dir.join("server.crt")).unwrap().map(Result::unwrap).collect();
        let key = PrivateKeyDer::from_pem_file(pki.dir.join("server.key")).unwrap();
        let mut tls =
            rustls::ServerConfig::builder().with_client_cert_verifier(verifier).with_single_cert(chain, key).unwrap();
        tls.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
        let client: Vec<u8> =
            CertificateDer::pem_file_iter(&pki.client_cert).unwrap().next().unwrap().unwrap().to_vec();
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let state = Arc::new(State {
            store: Mutex::new(Store::default()),
            changed: Default::default(),
            limit: Mutex::new(None),
            silent: Mutex::new(Default::default()),
            faults: Mutex::new(Faults::default()),
            refused: Mutex::new(Vec::new()),
            log: Mutex::new(Vec::new()),
            tokens: Mutex::new(HashMap::new()),
            reviewed: Mutex::new(HashMap::new()),
            grants: Mutex::new(Vec::new()),
            certs: HashMap::from([(client, format!("system:node:{node}"))]),
            up: AtomicBool::new(true),
            bytes_in: AtomicU64::new(0),
            bytes_out: AtomicU64::new(0),
            watch_bytes: AtomicU64::new(0),
            conns: Mutex::new(HashMap::new()),
            conn_seq: AtomicU64::new(0),
            tls: Mutex::new(Arc::new(tls)),
            kubelet_client: Mutex::new(None),
            egress: Mutex::new(None),
            addr,
        });
        let server = ApiServer { addr, state, accept: Mutex::new(Vec::new()) };
        server.serve(listener);
        server
    }

    fn serve(&self, listener: TcpListener) {
        let state = self.state.clone();
        listener.set_nonblocking(true).unwrap();
        let handle = std::thread::spawn(move || {
            while state.up.load(Ordering::SeqCst) {
                match listener.accept() {
                    Ok((stream, _)) => {
                        stream.set_nonblocking(false).unwrap();
                        let id = state.conn_seq.fetch_add(1, Ordering::SeqCst);
                        state.conns.lock().unwrap().insert(id, stream.try_clone().unwrap());
                        let state = state.clone();
                        std::thread::spawn(move || {
                            connection(&state, stream, id);
                            if let Some(s) = state.conns.lock().unwrap().remove(&id) {
                                let _ = s.shutdown(std::net::Shutdown::Both);
                            }
                        });
                    }
                    Err(_) => std::thread::sleep(Duration::from_millis(20)),
                }
            }
        });
        self.accept.lock().unwrap().push(handle);
    }

    /// Keeps the last `n` events for watches to resume from (1000 by default): a fleet writes
    /// far more, and a real server's watch cache holds minutes of them.
    pub fn keep_events(&self, n: usize) {
        self.state.store.lock().unwrap().keep = n;
    }

    /// Answers requests beyond `rate` a second (`burst` at once) with 429 and `Retry-After:
    /// retry_after`, as API Priority and Fairness does when a priority level is full (None:
    /// no limit). Requests made by `admin` are not limited.
    pub fn limit_rate(&self, rate: Option<(f64, f64)>, retry_after: u64) {
        *self.state.limit.lock().unwrap() =
            rate.map(|(rate, burst)| Limit { rate, burst, tokens: burst, last: Instant::now(), retry_after });
    }

    /// Whether new connections may choose HTTP/2 (ALPN `h2`, offered from the start, as
    /// kube-apiserver does), or get HTTP/1.1 only (a proxy in front that speaks no HTTP/2).
    pub fn offer_http2(&self, on: bool) {
        let mut tls = self.state.tls.lock().unwrap();
        let mut config = (**tls).clone();
        config.alpn_protocols =
            if on { vec![b"h2".to_vec(), b"http/1.1".to_vec()] } else { vec![b"http/1.1".to_vec()] };
        *tls = Arc::new(config);
    }

    /// Every HTTP/2 connection open now goes silent: nothing more passes either way and
    /// nothing tells either end (a NAT that forgot them). New connections work.
    pub fn silence_connections(&self) {
        let open: Vec<u64> = self.state.conns.lock().unwrap().keys().copied().collect();
        self.state.silent.lock().unwrap().extend(open);
    }

    /// How many TCP connections the server has accepted.
    pub fn connections(&self) -> u64 {
        self.state.conn_seq.load(Ordering::SeqCst)
    }

    /// One more listener (127.0.0.1, a free port) made in the calling thread's network
    /// namespace, whose connections, and the node dials they lead to, stay in it.
    pub fn listen_here(&self) -> SocketAddr {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        self.serve(listener);
        addr
    }

    /// Reaches nodes through `proxy` (HTTP CONNECT, as kube-apiserver's egress selector with a
    /// konnectivity server in HTTPConnect mode), or dials them again with `None`.
    pub fn egress(&self, proxy: Option<SocketAddr>) {
        *self.state.egress.lock().unwrap() = proxy.map(node_proxy::Egress::Tcp);
    }

    /// Reaches nodes through the konnectivity server's unix socket (`transport: uds`, as a
    /// konnectivity server beside each kube-apiserver is usually set up).
    pub fn egress_uds(&self, socket: &Path) {
        *self.state.egress.lock().unwrap() = Some(node_proxy::Egress::Unix(socket.to_path_buf()));
    }

    /// The server goes away: the port refuses connections, open ones are cut. State is kept
    /// (as etcd keeps it).
    pub fn down(&self) {
        self.state.up.store(false, Ordering::SeqCst);
        for h in self.accept.lock().unwrap().drain(..) {
            h.join().unwrap();
        }
        for (_, c) in self.state.conns.lock().unwrap().drain() {
            let _ = c.shutdown(std::net::Shutdown::Both);
        }
        for c in &self.state.changed {
            c.notify_all();
        }
    }

    /// Back on the same address.
    pub fn up(&self) {
        let listener = TcpListener::bind(self.addr).expect("the same port again");
        self.state.up.store(true, Ordering::SeqCst);
        self.serve(listener);
    }

    /// Reaches kubelets as `pki`'s kubelet client (`kube-apiserver-kubelet-client`, group
    /// system:masters), trusting the serving certificates `kubelet_ca` (PEM) holds.
    pub fn kubelet_client(&self, pki: &Pki, kubelet_ca: &Path) {
        let mut roots = rustls::RootCertStore::empty();
        for c in CertificateDer::pem_file_iter(kubelet_ca).unwrap() {
            roots.add(c.unwrap()).unwrap();
        }
        let chain =
            CertificateDer::pem_file_iter(pki.dir.join("kubelet-client.crt")).unwrap().map(Result::unwrap).collect();
        let key = PrivateKeyDer::from_pem_file(pki.dir.join("kubelet-client.key")).unwrap();
        let config =
            rustls::ClientConfig::builder().with_root_certificates(roots).with_client_auth_cert(chain, key).unwrap();
        *self.state.kubelet_client.lock().unwrap() = Some(Arc::new(config));
    }

    pub fn add_token(&self, token: &str, user: &str) {
        self.state.tokens.lock().unwrap().insert(token.into(), user.into());
    }

    /// A token TokenReview will say belongs to `user` in `groups` (a service account's, as
    /// metrics-server presents to a kubelet).
    pub fn add_reviewed_token(&self, token: &str, user: &str, groups: &[&str]) {
        let groups = groups.iter().map(|g| g.to_string()).collect();
        self.state.reviewed.lock().unwrap().insert(token.into(), (user.into(), groups));
    }

    /// RBAC on `nodes/<subresource>` for a user or a group, as SubjectAccessReview answers.
    pub fn grant(&self, subject: &str, verb: &str, subresource: &str) {
        self.state.grants.lock().unwrap().push((subject.into(), verb.into(), subresource.into()));
    }

    pub fn set_delay(&self, d: Duration) {
        self.state.faults.lock().unwrap().delay = d;
    }

    /// The next `n` requests get `status` (with `Retry-After` when given).
    pub fn fail_next(&self, n: usize, status: u16, retry_after: Option<u64>) {
        let mut f = self.state.faults.lock().unwrap();
        for _ in 0..n {
            f.fail_next.push_back((status, retry_after, None));
        }
    }

    /// Every request is answered 503 (true) until the server is available again (false).
    pub fn unavailable(&self, on: bool) {
        self.state.faults.lock().unwrap().unavailable = on;
    }

    /// The next `n` requests get `status` with `body`, whatever they asked for.
    pub fn answer_next(&self, n: usize, status: u16, body: Value) {
        let mut f = self.state.faults.lock().unwrap();
        for _ in 0..n {
            f.fail_next.push_back((status, None, Some(body.clone())));
        }
    }

    /// Admission refuses pods named `name` (403, as a validating webhook or policy would).
    pub fn reject_pod(&self, name: &str, message: &str) {
        self.state.faults.lock().unwrap().reject_pods.insert(name.into(), message.into());
    }

    /// Every watch ends after `limit` (None: as the client asked).
    pub fn limit_watches(&self, limit: Option<Duration>) {
        self.state.faults.lock().unwrap().watch_limit = limit;
    }

    /// Holds every watch's events back (true) until released (false), when they go out in order:
    /// the watchers' view lags the writes made meanwhile.
    pub fn hold_watches(&self, held: bool) {
        self.state.faults.lock().unwrap().watches_held = held;
        for c in &self.state.changed {
            c.notify_all();
        }
    }

    pub fn allow_pod(&self, name: &str) {
        self.state.faults.lock().unwrap().reject_pods.remove(name);
    }

    pub fn log(&self) -> Vec<Logged> {
        self.state.log.lock().unwrap().clone()
    }

    /// What upstream definitions refused so far (taken: a test that sends such bodies on
    /// purpose takes them, and the server's drop no longer fails on them).
    pub fn refused(&self) -> Vec<String> {
        std::mem::take(&mut *self.state.refused.lock().unwrap())
    }

    /// The bytes of the watch events sent so far (their encoding, before any framing).
    pub fn watch_bytes(&self) -> u64 {
        self.state.watch_bytes.load(Ordering::Relaxed)
    }

    /// Bytes received and sent on the wire (TLS included).
    pub fn bytes(&self) -> (u64, u64) {
        (self.state.bytes_in.load(Ordering::SeqCst), self.state.bytes_out.load(Ordering::SeqCst))
    }

    pub fn get(&self, resource: &'static str, ns: &str, name: &str) -> Option<Value> {
        self.state.store.lock().unwrap().objects.get(&(resource, ns.to_string(), name.to_string())).cloned()
    }

    pub fn list(&self, resource: &'static str) -> Vec<Value> {
        self.state
            .store
            .lock()
            .unwrap()
            .objects
            .iter()
            .filter(|(k, _)| k.0 == resource)
            .map(|(_, v)| v.clone())
            .collect()
    }

    /// A request as a user would make it (kubectl), served in-process with full rights.
    pub fn admin(&self, method: &str, path: &str, content_type: &str, body: Option<Value>) -> (u16, Value) {
        let bytes = body.map(|b| serde_json::to_vec(&b).unwrap()).unwrap_or_default();
        let req = Request {
            proto: "HTTP/1.1",
            method: method.into(),
            path: path.into(),
            headers: HashMap::from([("content-type".to_string(), content_type.to_string())]),
            lines: vec![("content-type".to_string(), content_type.to_string())],
            body: bytes,
        };
        match route(&self.state, &req, "admin") {
            Reply::Json(s, v) => (s, v),
            Reply::Watch(..) => panic!("no watches here"),
        }
    }
}

impl Drop for ApiServer {
    fn drop(&mut self) {
        self.down();
        check::assert_none(&self.state.refused);
    }
}

impl State {
    fn changed(&self, resource: &str) -> &Condvar {
        &self.changed[match resource {
            "pods" => 0,
            "nodes" => 1,
            "leases" => 2,
            _ => 3,
        }]
    }
}

/// A token bucket: `rate` requests a second, `burst` at once; beyond, 429 with Retry-After.
struct Limit {
    rate: f64,
    burst: f64,
    tokens: f64,
    last: Instant,
    retry_after: u64,
}

/// Counts bytes both ways.
struct Counting {
    inner: TcpStream,
    state: Arc<State>,
}

impl Read for Counting {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.state.bytes_in.fetch_add(n as u64, Ordering::SeqCst);
        Ok(n)
    }
}

impl Write for Counting {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.state.bytes_out.fetch_add(n as u64, Ordering::SeqCst);
        Ok(n)
    }
    fn flush(&mut self) -> std::io::Result<()> {
        self.inner.flush()
    }
}

struct Request {
    /// `HTTP/1.1` or `HTTP/2`.
    proto: &'static str,
    method: String,
    path: String,
    /// Lower-cased names; a repeated header's last value.
    headers: HashMap<String, String>,
    /// Every header line in order (`X-Stream-Protocol-Version` comes once per protocol).
    lines: Vec<(String, String)>,
    body: Vec<u8>,
}

enum Reply {
    Json(u16, Value),
    /// A watch: the resource, the field selector, where to start, how long.
    Watch(&'static str, Vec<(String, String)>, Option<u64>, Duration),
}

fn connection(state: &Arc<State>, stream: TcpStream, id: u64) {
    let config = state.tls.lock().unwrap().clone();
    let conn = rustls::ServerConnection::new(config).unwrap();
    let _ = stream.set_read_timeout(Some(Duration::from_secs(120)));
    let mut tls = rustls::StreamOwned::new(conn, Counting { inner: stream, state: state.clone() });
    while tls.conn.is_handshaking() {
        if tls.conn.complete_io(&mut tls.sock).is_err() {
            return;
        }
    }
    let cert_user =
        tls.conn.peer_certificates().and_then(|c| c.first()).and_then(|c| state.certs.get(c.as_ref()).cloned());
    if tls.conn.alpn_protocol() == Some(b"h2".as_slice()) {
        return h2::serve(state, tls, cert_user, id);
    }
    loop {
        let Some(req) = read_request(&mut tls) else { return };
        let arrived = Instant::now();
        let Some((user, outcome)) = decide(state, &req, cert_user.as_deref()) else { return };
        let user = user.unwrap_or_default();
        let ok = match outcome {
            Outcome::Proxy(t) => {
                let status = node_proxy::serve(state, tls, &req, &t);
                record(state, &req, arrived, status, &user, 0);
                return;
            }
            Outcome::Reply(Reply::Json(status, body), retry_after) => {
                let answer = encoded(req.headers.get("accept").map(String::as_str), &body);
                record(state, &req, arrived, status, &user, answer.1.len());
                write_answer(&mut tls, answer, status, retry_after).is_ok()
            }
            Outcome::Reply(Reply::Watch(resource, selector, from, timeout), _) => {
                let timeout = state.faults.lock().unwrap().watch_limit.map_or(timeout, |l| l.min(timeout));
                record(state, &req, arrived, 200, &user, 0);
                // A watch that ran its course leaves the connection open for more.
                match Chunked::start(&mut tls) {
                    Ok(mut out) => stream_watch(state, &mut out, resource, &selector, from, timeout).unwrap_or(false),
                    Err(_) => false,
                }
            }
        };
        if !ok {
            return;
        }
    }
}

/// Whether the rate limit turns this request away: its Retry-After if so.
fn throttled(state: &State) -> Option<u64> {
    let mut limit = state.limit.lock().unwrap();
    let l = limit.as_mut()?;
    let now = Instant::now();
    l.tokens = (l.tokens + now.duration_since(l.last).as_secs_f64() * l.rate).min(l.burst);
    l.last = now;
    if l.tokens >= 1.0 {
        l.tokens -= 1.0;
        None
    } else {
        Some(l.retry_after)
    }
}

/// What the server makes of a request.
enum Outcome {
    /// An answer, and its `Retry-After`.
    Reply(Reply, Option<u64>),
    /// Sent on to the node (`node_proxy`).
    Proxy(Target),
}

/// Who sent `req` (its client certificate's user, else its token's) and what the server
/// makes of it, injected delays and failures first; None when the server is down.
fn decide(state: &Arc<State>, req: &Request, cert_user: Option<&str>) -> Option<(Option<String>, Outcome)> {
    if !state.up.load(Ordering::SeqCst) {
        return None;
    }
    let token_user = req
        .headers
        .get("authorization")
        .and_then(|a| a.strip_prefix("Bearer "))
        .and_then(|t| state.tokens.lock().unwrap().get(t.trim()).cloned());
    let user = cert_user.map(str::to_string).or(token_user);
    let delay = state.faults.lock().unwrap().delay;
    std::thread::sleep(delay);
    let injected = {
        let mut f = state.faults.lock().unwrap();
        if f.unavailable {
            Some((503, None, None))
        } else {
            f.fail_next.pop_front()
        }
    };
    let outcome = match (&user, injected) {
        (_, Some((code, ra, Some(body)))) => Outcome::Reply(Reply::Json(code, body), ra),
        (_, Some((code, ra, None))) => {
            Outcome::Reply(Reply::Json(code, status_obj(code, reason_for(code), "injected failure")), ra)
        }
        (None, None) => Outcome::Reply(Reply::Json(401, status_obj(401, "Unauthorized", "Unauthorized")), None),
        (Some(_), None) if let Some(ra) = throttled(state) => {
            let msg = "Too many requests, please try again later.";
            let mut body = status_obj(429, "TooManyRequests", msg);
            body["details"] = json!({"retryAfterSeconds": ra});
            Outcome::Reply(Reply::Json(429, body), Some(ra))
        }
        (Some(u), None) => match parse_target(&req.path).filter(node_proxy::proxied) {
            Some(t) => Outcome::Proxy(t),
            None => Outcome::Reply(route(state, req, u), None),
        },
    };
    Some((user, outcome))
}

fn record(state: &State, req: &Request, arrived: Instant, status: u16, user: &str, answer: usize) {
    state.log.lock().unwrap().push(Logged {
        at: arrived,
        method: req.method.clone(),
        path: req.path.clone(),
        status,
        user: user.into(),
        proto: req.proto,
        content_type: req.headers.get("content-type").cloned().unwrap_or_default(),
        body: req.body.len(),
        answer,
    });
}

fn read_request(r: &mut impl Read) -> Option<Request> {
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        if r.read(&mut byte).ok()? == 0 || head.len() > 64 << 10 {
            return None;
        }
        head.push(byte[0]);
    }
    let text = String::from_utf8_lossy(&head).into_owned();
    let mut lines = text.split("\r\n");
    let mut first = lines.next()?.split(' ');
    let (method, path) = (first.next()?.to_string(), first.next()?.to_string());
    let mut headers = HashMap::new();
    let mut all = Vec::new();
    for l in lines.filter(|l| !l.is_empty()) {
        let (k, v) = l.split_once(':')?;
        headers.insert(k.trim().to_ascii_lowercase(), v.trim().to_string());
        all.push((k.trim().to_ascii_lowercase(), v.trim().to_string()));
    }
    let len: usize = headers.get("content-length").and_then(|v| v.parse().ok()).unwrap_or(0);
    let mut body = vec![0u8; len];
    r.read_exact(&mut body).ok()?;
    Some(Request { proto: "HTTP/1.1", method, path, headers, lines: all, body })
}

/// An answer's body and content type: protobuf when the client puts it first and the kind has
/// it, JSON otherwise.
fn encoded(accept: Option<&str>, body: &Value) -> (&'static str, Vec<u8>) {
    match proto::wanted(accept).then(|| proto::encode(body)).flatten() {
        Some(bytes) => (proto::CONTENT_TYPE, bytes),
        None => ("application/json", serde_json::to_vec(body).unwrap()),
    }
}

fn write_json(
    w: &mut impl Write,
    accept: Option<&str>,
    status: u16,
    body: &Value,
    retry_after: Option<u64>,
) -> std::io::Result<()> {
    write_answer(w, encoded(accept, body), status, retry_after)
}

/// An answer already encoded: its content type and bytes.
fn write_answer(
    w: &mut impl Write,
    (content_type, bytes): (&'static str, Vec<u8>),
    status: u16,
    retry_after: Option<u64>,
) -> std::io::Result<()> {
    let mut head = format!("HTTP/1.1 {status} {}\r\n", reason_for(status));
    for (k, v) in answer_headers(content_type, Some(bytes.len()), retry_after) {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    head.push_str("\r\n");
    w.write_all(head.as_bytes())?;
    w.write_all(&bytes)?;
    w.flush()
}

/// The headers of kube-apiserver's answers: its audit ID and API Priority and Fairness
/// flow schema and priority level (fixed per server for one user: the node's), no caching,
/// the date; `Retry-After` on a 429 or 503.
fn answer_headers(content_type: &str, len: Option<usize>, retry_after: Option<u64>) -> Vec<(&'static str, String)> {
    let mut h = vec![
        ("Audit-Id", uuid()),
        ("Cache-Control", "no-cache, private".to_string()),
        ("Content-Type", content_type.to_string()),
        ("X-Kubernetes-Pf-Flowschema-Uid", "6c4e7f0a-3b1d-4d5e-9a8b-2f1c0e9d8a71".to_string()),
        ("X-Kubernetes-Pf-Prioritylevel-Uid", "0d9a8c7b-6e5f-4a3b-8c2d-1e0f9a8b7c6d".to_string()),
        ("Date", http_date(SystemTime::now())),
    ];
    if let Some(n) = len {
        h.push(("Content-Length", n.to_string()));
    }
    if let Some(ra) = retry_after {
        h.push(("Retry-After", ra.to_string()));
    }
    h
}

/// A random version-4 UUID (an audit ID).
fn uuid() -> String {
    use std::hash::{BuildHasher, Hasher};
    let mut bytes = [0u8; 16];
    for half in bytes.chunks_mut(8) {
        let mut h = std::collections::hash_map::RandomState::new().build_hasher();
        h.write_u128(SystemTime::now().duration_since(SystemTime::UNIX_EPOCH).unwrap().as_nanos());
        half.copy_from_slice(&h.finish().to_le_bytes());
    }
    bytes[6] = (bytes[6] & 0x0f) | 0x40;
    bytes[8] = (bytes[8] & 0x3f) | 0x80;
    let hex = |r: std::ops::Range<usize>| bytes[r].iter().map(|b| format!("{b:02x}")).collect::<String>();
    format!("{}-{}-{}-{}-{}", hex(0..4), hex(4..6), hex(6..8), hex(8..10), hex(10..16))
}

/// An HTTP date (RFC 9110's IMF-fixdate), as Go's server sends.
fn http_date(t: SystemTime) -> String {
    let secs = t.duration_since(SystemTime::UNIX_EPOCH).unwrap().as_secs();
    let day = ["Thu", "Fri", "Sat", "Sun", "Mon", "Tue", "Wed"][(secs / 86_400 % 7) as usize];
    let iso = rfc3339(t); // 2026-11-27T00:30:00Z
    let month = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"]
        [iso.get(5..7).unwrap().parse::<usize>().unwrap() - 1];
    let part = |r: std::ops::Range<usize>| iso.get(r).unwrap();
    format!("{day}, {} {month} {} {} GMT", part(8..10), part(0..4), part(11..19))
}

fn reason_for(code: u16) -> &'static str {
    match code {
        200 => "OK",
        201 => "Created",
        400 => "BadRequest",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "NotFound",
        405 => "MethodNotAllowed",
        409 => "Conflict",
        410 => "Gone",
        415 => "UnsupportedMediaType",
        422 => "Invalid",
        429 => "TooManyRequests",
        503 => "ServiceUnavailable",
        _ => "InternalError",
    }
}

fn status_obj(code: u16, reason: &str, message: &str) -> Value {
    json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure", "message": message, "reason": reason, "code": code})
}

fn fail(code: u16, reason: &str, message: impl Into<String>) -> Reply {
    Reply::Json(code, status_obj(code, reason, &message.into()))
}

fn now_rfc3339() -> String {
    rfc3339(SystemTime::now())
}

/// `YYYY-MM-DDTHH:MM:SS[.fraction]Z` as seconds and nanoseconds since the epoch.
fn parse_rfc3339(t: &str) -> Option<(u64, u32)> {
    let (date, rest) = t.split_once('T')?;
    let mut d = date.split('-').map(|x| x.parse::<i64>().ok());
    let (y, m, day) = (d.next()??, d.next()??, d.next()??);
    let rest = rest.strip_suffix('Z')?;
    let (hms, frac) = rest.split_once('.').unwrap_or((rest, ""));
    let mut h = hms.split(':').map(|x| x.parse::<u64>().ok());
    let (hh, mm, ss) = (h.next()??, h.next()??, h.next()??);
    let nanos = if frac.is_empty() { 0 } else { format!("{frac:0<9}").get(..9)?.parse().ok()? };
    // Civil date to days (Howard Hinnant's algorithm).
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let doy = (153 * ((m + 9) % 12) + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = u64::try_from(era * 146_097 + doe - 719_468).ok()?;
    Some((days * 86_400 + hh * 3600 + mm * 60 + ss, nanos))
}

fn rfc3339(t: SystemTime) -> String {
    let secs = t.duration_since(SystemTime::UNIX_EPOCH).unwrap().as_secs();
    // Days to civil date (Howard Hinnant's algorithm).
    let (days, rem) = ((secs / 86_400) as i64, secs % 86_400);
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!("{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z", rem / 3600, rem % 3600 / 60, rem % 60)
}

/// The parts of a request path.
struct Target {
    resource: &'static str,
    /// Empty for cluster-scoped resources, and for lists across namespaces.
    namespace: String,
    name: String,
    subresource: String,
    query: Vec<(String, String)>,
}

fn parse_target(path: &str) -> Option<Target> {
    let (p, q) = path.split_once('?').unwrap_or((path, ""));
    let query = q
        .split('&')
        .filter(|s| !s.is_empty())
        .map(|kv| {
            let (k, v) = kv.split_once('=').unwrap_or((kv, ""));
            (k.to_string(), v.replace("%3D", "=").replace("%3d", "=").replace("%2F", "/"))
        })
        .collect();
    let segs: Vec<&str> = p.trim_matches('/').split('/').collect();
    let rest: &[&str] = match segs.as_slice() {
        ["api", "v1", rest @ ..] => rest,
        ["apis", "coordination.k8s.io", "v1", rest @ ..] => rest,
        _ => return None,
    };
    let core = segs[0] == "api";
    let (namespace, rest) = match rest {
        ["namespaces", ns, rest @ ..] if !rest.is_empty() => (ns.to_string(), rest),
        _ => (String::new(), rest),
    };
    let resource = match (core, rest.first()?) {
        (true, &"pods") => "pods",
        (true, &"nodes") => "nodes",
        (false, &"leases") => "leases",
        _ => return None,
    };
    Some(Target {
        resource,
        namespace,
        name: rest.get(1).unwrap_or(&"").to_string(),
        subresource: rest.get(2).unwrap_or(&"").to_string(),
        query,
    })
}

/// TokenReview and SubjectAccessReview, as the real server answers them: 201 with the
/// request echoed and its status filled in; a token it does not know is not authenticated.
/// Any authenticated caller may ask (kubelets may, through `system:node`).
fn review(state: &State, req: &Request) -> Option<Reply> {
    let kind = match req.path.as_str() {
        "/apis/authentication.k8s.io/v1/tokenreviews" => "TokenReview",
        "/apis/authorization.k8s.io/v1/subjectaccessreviews" => "SubjectAccessReview",
        _ => return None,
    };
    if req.method != "POST" {
        return Some(fail(405, "MethodNotAllowed", format!("{} is not supported on {}", req.method, req.path)));
    }
    let Ok(mut body) = serde_json::from_slice::<Value>(&req.body) else {
        return Some(fail(400, "BadRequest", "the body is not JSON"));
    };
    let content_type = req.headers.get("content-type").map_or("", String::as_str);
    if let Err(refused) = check::body(&state.refused, kind, content_type, &req.body) {
        return Some(refused);
    }
    if body["kind"] != kind || body["spec"].is_null() {
        return Some(fail(400, "BadRequest", format!("expected a {kind} with a spec")));
    }
    let status = if kind == "TokenReview" {
        let token = body["spec"]["token"].as_str().unwrap_or("");
        match state.reviewed.lock().unwrap().get(token) {
            Some((user, groups)) => {
                json!({"authenticated": true, "user": {"username": user, "uid": format!("uid-{user}"), "groups": groups}})
            }
            None => json!({"authenticated": false, "user": {}, "error": "invalid bearer token"}),
        }
    } else {
        let spec = &body["spec"];
        let ra = &spec["resourceAttributes"];
        let subjects: Vec<&str> = std::iter::once(spec["user"].as_str().unwrap_or(""))
            .chain(spec["groups"].as_array().into_iter().flatten().filter_map(Value::as_str))
            .collect();
        let allowed = ra["resource"] == "nodes"
            && state.grants.lock().unwrap().iter().any(|(who, verb, sub)| {
                subjects.contains(&who.as_str()) && ra["verb"] == *verb && ra["subresource"] == *sub
            });
        if allowed {
            json!({"allowed": true, "reason": "RBAC: allowed"})
        } else {
            json!({"allowed": false})
        }
    };
    body["status"] = status;
    Some(Reply::Json(201, body))
}

fn kind_of(resource: &str) -> (&'static str, &'static str) {
    match resource {
        "pods" => ("Pod", "v1"),
        "nodes" => ("Node", "v1"),
        _ => ("Lease", "coordination.k8s.io/v1"),
    }
}

fn qualified(resource: &str) -> &'static str {
    match resource {
        "pods" => "pods",
        "nodes" => "nodes",
        _ => "leases.coordination.k8s.io",
    }
}

fn dns_subdomain(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 253
        && name.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'.')
        && name.as_bytes()[0].is_ascii_alphanumeric()
        && name.as_bytes()[name.len() - 1].is_ascii_alphanumeric()
}

fn route(state: &Arc<State>, req: &Request, user: &str) -> Reply {
    if let Some(reply) = review(state, req) {
        return reply;
    }
    if req.method == "GET" {
        let path = req.path.split_once('?').map_or(req.path.as_str(), |(p, _)| p);
        if let Some(doc) = discovery::document(path, state.addr) {
            return Reply::Json(200, doc);
        }
    }
    let Some(t) = parse_target(&req.path) else {
        return fail(404, "NotFound", "the server could not find the requested resource");
    };
    let namespaced = t.resource != "nodes";
    if namespaced && !t.namespace.is_empty() && !NAMESPACES.contains(&t.namespace.as_str()) {
        return fail(404, "NotFound", format!("namespaces \"{}\" not found", t.namespace));
    }
    let content_type = req.headers.get("content-type").map_or("", String::as_str);
    // What the body is, by upstream code (`check`): an object to create or replace with, or
    // DeleteOptions; a patch is judged where it is applied.
    let judged = match req.method.as_str() {
        "POST" | "PUT" => Some(kind_of(t.resource).0),
        "DELETE" => Some("DeleteOptions"),
        _ => None,
    };
    let body: Option<Value> = if req.body.is_empty() {
        None
    } else if content_type.starts_with(proto::CONTENT_TYPE) {
        let Some(kind) = judged else { return fail(415, "UnsupportedMediaType", "protobuf is for objects") };
        match check::body(&state.refused, kind, content_type, &req.body) {
            Ok(decoded) => decoded,
            Err(refused) => return refused,
        }
    } else {
        match serde_json::from_slice(&req.body) {
            Ok(v) => Some(v),
            Err(e) => return fail(400, "BadRequest", format!("the body is not JSON: {e}")),
        }
    };
    if let (Some(kind), Some(_), false) = (judged, &body, content_type.starts_with(proto::CONTENT_TYPE)) {
        if let Err(refused) = check::body(&state.refused, kind, content_type, &req.body) {
            return refused;
        }
    }
    if let Some(denied) = node_restriction(state, user, req, &t, body.as_ref()) {
        return denied;
    }
    let mut store = state.store.lock().unwrap();
    let reply = match (req.method.as_str(), t.name.is_empty(), t.subresource.as_str()) {
        ("GET", true, "") => {
            let watch = t.query.iter().any(|(k, v)| k == "watch" && (v == "true" || v == "1"));
            let selector = match field_selector(&t) {
                Ok(s) => s,
                Err(r) => return r,
            };
            if watch {
                let from = t
                    .query
                    .iter()
                    .find(|(k, _)| k == "resourceVersion")
                    .and_then(|(_, v)| v.parse::<u64>().ok())
                    .filter(|v| *v > 0);
                let timeout = t
                    .query
                    .iter()
                    .find(|(k, _)| k == "timeoutSeconds")
                    .and_then(|(_, v)| v.parse().ok())
                    .unwrap_or(1800);
                return Reply::Watch(t.resource, selector, from, Duration::from_secs(timeout));
            }
            let (kind, api_version) = kind_of(t.resource);
            let items: Vec<Value> = store
                .objects
                .iter()
                .filter(|(k, v)| {
                    k.0 == t.resource && (t.namespace.is_empty() || k.1 == t.namespace) && matches(v, &selector)
                })
                .map(|(_, v)| {
                    let mut v = v.clone();
                    let o = v.as_object_mut().unwrap();
                    o.remove("kind");
                    o.remove("apiVersion");
                    v
                })
                .collect();
            Reply::Json(
                200,
                json!({"kind": format!("{kind}List"), "apiVersion": api_version, "metadata": {"resourceVersion": store.rv.to_string()}, "items": items}),
            )
        }
        ("POST", true, "") => create(state, &mut store, &t, body),
        ("GET", false, "") => match store.objects.get(&(t.resource, t.namespace.clone(), t.name.clone())) {
            Some(v) => Reply::Json(200, v.clone()),
            None => not_found(&t),
        },
        ("PUT", false, "") => update(&mut store, &t, body),
        ("PATCH", false, sub @ ("" | "status")) => patch(state, &mut store, &t, sub == "status", req, body),
        ("DELETE", false, "") => delete(&mut store, &t, body),
        _ => fail(405, "MethodNotAllowed", format!("{} is not supported on {}", req.method, req.path)),
    };
    drop(store);
    state.changed(t.resource).notify_all();
    reply
}

fn not_found(t: &Target) -> Reply {
    fail(404, "NotFound", format!("{} \"{}\" not found", qualified(t.resource), t.name))
}

fn field_selector(t: &Target) -> Result<Vec<(String, String)>, Reply> {
    let mut out = Vec::new();
    if let Some((_, sel)) = t.query.iter().find(|(k, _)| k == "fieldSelector") {
        for term in sel.split(',').filter(|s| !s.is_empty()) {
            let (field, value) = term
                .split_once('=')
                .ok_or_else(|| fail(400, "BadRequest", format!("invalid field selector {term:?}")))?;
            let allowed = match t.resource {
                "pods" => ["metadata.name", "metadata.namespace", "spec.nodeName", "status.phase"].contains(&field),
                _ => ["metadata.name", "metadata.namespace"].contains(&field),
            };
            if !allowed {
                return Err(fail(400, "BadRequest", format!("field label not supported: {field}")));
            }
            out.push((field.to_string(), value.to_string()));
        }
    }
    Ok(out)
}

fn matches(obj: &Value, selector: &[(String, String)]) -> bool {
    selector.iter().all(|(field, value)| {
        let mut v = obj;
        for part in field.split('.') {
            v = &v[part];
        }
        v.as_str().unwrap_or("") == value
    })
}

/// NodeRestriction for `system:node:<name>` users (other users pass).
fn node_restriction(state: &State, user: &str, req: &Request, t: &Target, body: Option<&Value>) -> Option<Reply> {
    let node = user.strip_prefix("system:node:")?;
    let forbid = |msg: String| Some(fail(403, "Forbidden", msg));
    match t.resource {
        "nodes" if req.method != "GET" => {
            let name = if t.name.is_empty() {
                body.and_then(|b| b["metadata"]["name"].as_str()).unwrap_or("")
            } else {
                &t.name
            };
            if name != node {
                return forbid(format!("node \"{node}\" is not allowed to modify node \"{name}\""));
            }
        }
        "leases" if req.method != "GET" || !t.name.is_empty() => {
            let name = if t.name.is_empty() {
                body.and_then(|b| b["metadata"]["name"].as_str()).unwrap_or("")
            } else {
                &t.name
            };
            if t.namespace != "kube-node-lease" || name != node {
                return forbid("can only access node lease with the same name as the requesting node".to_string());
            }
        }
        "pods" if req.method == "POST" => {
            let pod = body?;
            if pod["metadata"]["annotations"]["kubernetes.io/config.mirror"].as_str().is_none() {
                return forbid(format!("pod does not have \"kubernetes.io/config.mirror\" annotation, node \"{node}\" can only create mirror pods"));
            }
            if pod["spec"]["nodeName"].as_str() != Some(node) {
                return forbid(format!("node \"{node}\" can only create pods with spec.nodeName set to itself"));
            }
            let owners = pod["metadata"]["ownerReferences"].as_array().cloned().unwrap_or_default();
            let node_uid = state
                .store
                .lock()
                .unwrap()
                .objects
                .get(&("nodes", String::new(), node.to_string()))
                .and_then(|n| n["metadata"]["uid"].as_str().map(String::from));
            let ok = owners.len() == 1
                && owners[0]["kind"] == "Node"
                && owners[0]["apiVersion"] == "v1"
                && owners[0]["name"] == node
                && owners[0]["controller"] == true
                && owners[0]["blockOwnerDeletion"] != true
                && node_uid.is_some_and(|u| owners[0]["uid"] == u.as_str());
            if !ok {
                return forbid(format!(
                    "node \"{node}\" can only create pods with a single controlling owner reference set to itself"
                ));
            }
        }
        _ => {}
    }
    None
}

fn new_meta(store: &mut Store, obj: &mut Value) {
    store.rv += 1;
    store.uid_seq += 1;
    let meta = obj["metadata"].as_object_mut().unwrap();
    meta.insert("uid".into(), format!("6f1c2d3e-0000-4000-8000-{:012x}", store.uid_seq).into());
    meta.insert("creationTimestamp".into(), now_rfc3339().into());
    meta.insert("resourceVersion".into(), store.rv.to_string().into());
}

fn emit(store: &mut Store, resource: &'static str, kind: &'static str, object: Value) {
    let rv = store.rv;
    store.events.push_back(Event { rv, resource, kind, object });
    while store.events.len() > store.keep.max(KEEP_EVENTS) {
        let e = store.events.pop_front().unwrap();
        store.compacted = e.rv;
    }
}

fn validate(resource: &str, obj: &Value) -> Result<(), String> {
    let mut problems = Vec::new();
    if resource == "pods" {
        let containers = obj["spec"]["containers"].as_array().cloned().unwrap_or_default();
        if containers.is_empty() {
            problems.push("spec.containers: Required value".to_string());
        }
        for (i, c) in containers.iter().enumerate() {
            if c["name"].as_str().is_none_or(str::is_empty) {
                problems.push(format!("spec.containers[{i}].name: Required value"));
            }
            if c["image"].as_str().is_none_or(str::is_empty) {
                problems.push(format!("spec.containers[{i}].image: Required value"));
            }
        }
        if let Some(phase) = obj["status"]["phase"].as_str() {
            if !["Pending", "Running", "Succeeded", "Failed", "Unknown"].contains(&phase) {
                problems.push(format!("status.phase: Unsupported value: {phase:?}"));
            }
        }
    }
    if resource == "leases" {
        if let Some(d) = obj["spec"]["leaseDurationSeconds"].as_i64() {
            if d <= 0 {
                problems.push("spec.leaseDurationSeconds: Invalid value: must be greater than 0".into());
            }
        }
    }
    for (i, c) in obj["status"]["conditions"].as_array().into_iter().flatten().enumerate() {
        if c["type"].as_str().is_none_or(str::is_empty) {
            problems.push(format!("status.conditions[{i}].type: Required value"));
        }
        if !["True", "False", "Unknown"].contains(&c["status"].as_str().unwrap_or("")) {
            problems.push(format!("status.conditions[{i}].status: Unsupported value"));
        }
    }
    if problems.is_empty() {
        Ok(())
    } else {
        Err(problems.join(", "))
    }
}

fn invalid(t: &Target, name: &str, why: String) -> Reply {
    let (kind, _) = kind_of(t.resource);
    fail(422, "Invalid", format!("{kind} \"{name}\" is invalid: {why}"))
}

fn create(state: &State, store: &mut Store, t: &Target, body: Option<Value>) -> Reply {
    let Some(mut obj) = body.filter(Value::is_object) else {
        return fail(400, "BadRequest", "a JSON object is required");
    };
    let (kind, api_version) = kind_of(t.resource);
    if obj["kind"] != kind || obj["apiVersion"] != api_version {
        return fail(
            400,
            "BadRequest",
            format!("expected kind {kind} of {api_version}, got {} of {}", obj["kind"], obj["apiVersion"]),
        );
    }
    if !obj["metadata"].is_object() {
        obj["metadata"] = json!({});
    }
    let name = obj["metadata"]["name"].as_str().unwrap_or("").to_string();
    if !dns_subdomain(&name) {
        return invalid(
            t,
            &name,
            format!("metadata.name: Invalid value: {name:?}: a lowercase RFC 1123 subdomain is required"),
        );
    }
    match obj["metadata"]["namespace"].as_str() {
        Some(ns) if ns != t.namespace => {
            return fail(
                400,
                "BadRequest",
                "the namespace of the provided object does not match the namespace sent on the request",
            )
        }
        _ if t.resource != "nodes" => obj["metadata"]["namespace"] = t.namespace.clone().into(),
        _ => {}
    }
    if obj["metadata"]["resourceVersion"].as_str().is_some_and(|v| !v.is_empty()) {
        return fail(500, "InternalError", "resourceVersion should not be set on objects to be created");
    }
    let key = (t.resource, t.namespace.clone(), name.clone());
    if store.objects.contains_key(&key) {
        return fail(409, "AlreadyExists", format!("{} \"{name}\" already exists", qualified(t.resource)));
    }
    if t.resource == "pods" {
        if let Some(msg) = state.faults.lock().unwrap().reject_pods.get(&name) {
            return fail(
                403,
                "Forbidden",
                format!("admission webhook \"policy.example.com\" denied the request: {msg}"),
            );
        }
        // The API server owns a new pod's status.
        obj["status"] = json!({"phase": "Pending", "qosClass": qos_class(&obj)});
    }
    if let Err(why) = validate(t.resource, &obj) {
        return invalid(t, &name, why);
    }
    new_meta(store, &mut obj);
    store.objects.insert(key, obj.clone());
    emit(store, t.resource, "ADDED", obj.clone());
    Reply::Json(201, obj)
}

fn qos_class(pod: &Value) -> &'static str {
    let containers = pod["spec"]["containers"].as_array().cloned().unwrap_or_default();
    let res: Vec<&Value> = containers.iter().map(|c| &c["resources"]).collect();
    if res.iter().all(|r| r["requests"].is_null() && r["limits"].is_null()) {
        return "BestEffort";
    }
    let guaranteed = res.iter().all(|r| {
        ["cpu", "memory"]
            .iter()
            .all(|k| !r["limits"][k].is_null() && (r["requests"][k].is_null() || r["requests"][k] == r["limits"][k]))
    });
    if guaranteed {
        "Guaranteed"
    } else {
        "Burstable"
    }
}

/// A write over an existing object: resourceVersion and uid checks, system fields kept, the
/// parts the endpoint may not change restored, validation, a new resourceVersion.
fn replace(store: &mut Store, t: &Target, mut new: Value, status_only: bool, require_rv: bool) -> Reply {
    let key = (t.resource, t.namespace.clone(), t.name.clone());
    let Some(old) = store.objects.get(&key).cloned() else { return not_found(t) };
    if new["metadata"]["name"].as_str().is_some_and(|n| n != t.name) {
        return fail(400, "BadRequest", "the name of the object does not match the name on the URL");
    }
    let rv = new["metadata"]["resourceVersion"].as_str().unwrap_or("").to_string();
    if require_rv && rv.is_empty() {
        return invalid(
            t,
            &t.name,
            "metadata.resourceVersion: Invalid value: 0x0: must be specified for an update".into(),
        );
    }
    let conflict = || {
        fail(409, "Conflict", format!("Operation cannot be fulfilled on {} \"{}\": the object has been modified; please apply your changes to the latest version and try again", qualified(t.resource), t.name))
    };
    if !rv.is_empty() && old["metadata"]["resourceVersion"] != rv.as_str() {
        return conflict();
    }
    if let Some(refused) = uid_precondition(&old, &new["metadata"]["uid"]) {
        return refused;
    }
    for field in ["uid", "creationTimestamp", "namespace", "name", "deletionTimestamp", "deletionGracePeriodSeconds"] {
        match old["metadata"].get(field) {
            Some(v) => new["metadata"][field] = v.clone(),
            None => {
                if let Some(m) = new["metadata"].as_object_mut() {
                    m.remove(field);
                }
            }
        }
    }
    new["kind"] = old["kind"].clone();
    new["apiVersion"] = old["apiVersion"].clone();
    if status_only {
        // The status endpoint writes status only.
        let status = new["status"].clone();
        new = old.clone();
        new["status"] = status;
    } else if t.resource != "leases" {
        // The main endpoint does not write status; a pod's spec is immutable (bar what
        // atoll never changes) and its mirror annotation may not change.
        new["status"] = old["status"].clone();
        if t.resource == "pods" {
            if new["spec"] != old["spec"] {
                return invalid(t, &t.name, "spec: Forbidden: pod updates may not change fields other than `spec.containers[*].image`, `spec.activeDeadlineSeconds` or `spec.tolerations` (only additions to existing tolerations)".into());
            }
            let m = "kubernetes.io/config.mirror";
            if new["metadata"]["annotations"][m] != old["metadata"]["annotations"][m] {
                return invalid(
                    t,
                    &t.name,
                    format!(
                        "metadata.annotations[{m}]: Forbidden: may not add, change or remove the mirror annotation"
                    ),
                );
            }
        }
    }
    if let Err(why) = validate(t.resource, &new) {
        return invalid(t, &t.name, why);
    }
    if without_rv(&new) == without_rv(&old) {
        // No change: no new resourceVersion, no event.
        return Reply::Json(200, old);
    }
    store.rv += 1;
    new["metadata"]["resourceVersion"] = store.rv.to_string().into();
    store.objects.insert(key, new.clone());
    emit(store, t.resource, "MODIFIED", new.clone());
    Reply::Json(200, new)
}

fn without_rv(v: &Value) -> Value {
    let mut v = v.clone();
    if let Some(m) = v["metadata"].as_object_mut() {
        m.remove("resourceVersion");
    }
    v
}

fn update(store: &mut Store, t: &Target, body: Option<Value>) -> Reply {
    let Some(new) = body.filter(Value::is_object) else { return fail(400, "BadRequest", "a JSON object is required") };
    replace(store, t, new, false, true)
}

fn patch(state: &State, store: &mut Store, t: &Target, status: bool, req: &Request, body: Option<Value>) -> Reply {
    let Some(p) = body.filter(Value::is_object) else { return fail(400, "BadRequest", "a JSON object is required") };
    let Some(old) = store.objects.get(&(t.resource, t.namespace.clone(), t.name.clone())).cloned() else {
        return not_found(t);
    };
    let ct = req.headers.get("content-type").map(|c| c.split(';').next().unwrap_or("").trim()).unwrap_or("");
    // Applied by upstream code (`check`): merge patch as RFC 7386, strategic merge patch by the
    // API types' patch tags (conditions by type, ...), the result held to the type.
    let new = match ct {
        "application/merge-patch+json" | "application/strategic-merge-patch+json" => {
            match check::patch(&state.refused, kind_of(t.resource).0, ct, &old, &req.body) {
                Ok(v) => v,
                Err(refused) => return refused,
            }
        }
        other => return fail(415, "UnsupportedMediaType", format!("the body of the request was in an unknown format - accepted media types include: application/merge-patch+json, application/strategic-merge-patch+json (got {other:?})")),
    };
    // A patch's resourceVersion is a precondition; absent, the current one applies.
    let mut new = new;
    if p["metadata"]["resourceVersion"].is_null() {
        new["metadata"]["resourceVersion"] = old["metadata"]["resourceVersion"].clone();
    }
    replace(store, t, new, status, false)
}

/// A UID precondition (a patch's or update's `metadata.uid`, DeleteOptions' `preconditions`)
/// that `obj` does not meet: 409 Conflict.
fn uid_precondition(obj: &Value, uid: &Value) -> Option<Reply> {
    let uid = uid.as_str()?;
    (obj["metadata"]["uid"] != uid).then(|| {
        fail(
            409,
            "Conflict",
            format!(
                "Precondition failed: UID in precondition: {uid}, UID in object meta: {}",
                obj["metadata"]["uid"].as_str().unwrap_or("")
            ),
        )
    })
}

fn delete(store: &mut Store, t: &Target, body: Option<Value>) -> Reply {
    let key = (t.resource, t.namespace.clone(), t.name.clone());
    let Some(mut obj) = store.objects.get(&key).cloned() else { return not_found(t) };
    let opts = body.unwrap_or(Value::Null);
    if let Some(refused) = uid_precondition(&obj, &opts["preconditions"]["uid"]) {
        return refused;
    }
    if let Some(rv) = opts["preconditions"]["resourceVersion"].as_str() {
        if obj["metadata"]["resourceVersion"] != rv {
            return fail(
                409,
                "Conflict",
                format!(
                    "Precondition failed: ResourceVersion in precondition: {rv}, ResourceVersion in object meta: {}",
                    obj["metadata"]["resourceVersion"].as_str().unwrap_or("")
                ),
            );
        }
    }
    if t.resource == "pods" {
        let grace = opts["gracePeriodSeconds"]
            .as_i64()
            .unwrap_or_else(|| obj["spec"]["terminationGracePeriodSeconds"].as_i64().unwrap_or(30));
        let bound = obj["spec"]["nodeName"].as_str().is_some_and(|n| !n.is_empty());
        if grace > 0 && bound {
            // Graceful: the kubelet finishes it. A second graceful delete changes nothing.
            if obj["metadata"]["deletionTimestamp"].is_null() {
                store.rv += 1;
                let when = SystemTime::now() + Duration::from_secs(grace as u64);
                obj["metadata"]["deletionTimestamp"] = rfc3339(when).into();
                obj["metadata"]["deletionGracePeriodSeconds"] = grace.into();
                obj["metadata"]["resourceVersion"] = store.rv.to_string().into();
                store.objects.insert(key, obj.clone());
                emit(store, t.resource, "MODIFIED", obj.clone());
            }
            return Reply::Json(200, obj);
        }
    }
    store.objects.remove(&key);
    store.rv += 1;
    obj["metadata"]["resourceVersion"] = store.rv.to_string().into();
    emit(store, t.resource, "DELETED", obj.clone());
    if t.resource == "nodes" {
        // The garbage collector removes what the node owned.
        let uid = obj["metadata"]["uid"].clone();
        let owned: Vec<_> = store
            .objects
            .iter()
            .filter(|(_, v)| {
                v["metadata"]["ownerReferences"].as_array().is_some_and(|o| o.iter().any(|r| r["uid"] == uid))
            })
            .map(|(k, _)| k.clone())
            .collect();
        for k in owned {
            let mut gone = store.objects.remove(&k).unwrap();
            store.rv += 1;
            gone["metadata"]["resourceVersion"] = store.rv.to_string().into();
            emit(store, k.0, "DELETED", gone);
        }
    }
    Reply::Json(200, obj)
}

/// Where a watch's events go: HTTP/1.1 chunks, or HTTP/2 DATA (`h2`).
trait Events {
    /// Sends one event; the bytes its encoding took.
    fn event(&mut self, event: Value) -> std::io::Result<usize>;
    /// The end of the answer (the watch ran its course, or ended in an ERROR event).
    fn end(&mut self) -> std::io::Result<()>;
}

/// A watch's answer over HTTP/1.1: one chunk per event.
struct Chunked<'a, W: Write>(&'a mut W);

impl<'a, W: Write> Chunked<'a, W> {
    fn start(w: &'a mut W) -> std::io::Result<Self> {
        let mut head = "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n".to_string();
        for (k, v) in answer_headers("application/json", None, None) {
            head.push_str(&format!("{k}: {v}\r\n"));
        }
        head.push_str("\r\n");
        w.write_all(head.as_bytes())?;
        Ok(Chunked(w))
    }
}

impl<W: Write> Events for Chunked<'_, W> {
    fn event(&mut self, event: Value) -> std::io::Result<usize> {
        let mut line = serde_json::to_vec(&event).unwrap();
        line.push(b'\n');
        write!(self.0, "{:x}\r\n", line.len())?;
        self.0.write_all(&line)?;
        self.0.write_all(b"\r\n")?;
        self.0.flush().map(|_| line.len())
    }

    fn end(&mut self) -> std::io::Result<()> {
        self.0.write_all(b"0\r\n\r\n")?;
        self.0.flush()
    }
}

/// Streams a watch into `w` until it times out; false when the server went down.
fn stream_watch(
    state: &State,
    w: &mut dyn Events,
    resource: &'static str,
    selector: &[(String, String)],
    from: Option<u64>,
    timeout: Duration,
) -> std::io::Result<bool> {
    let mut store = state.store.lock().unwrap();
    let mut seen = match from {
        Some(rv) if rv < store.compacted => {
            let gone = status_obj(410, "Expired", &format!("too old resource version: {rv} ({})", store.compacted));
            drop(store);
            w.event(json!({"type": "ERROR", "object": gone}))?;
            return w.end().map(|_| true);
        }
        Some(rv) => rv,
        None => {
            // No resourceVersion: the current state as ADDED events first.
            let current: Vec<Value> = store
                .objects
                .iter()
                .filter(|(k, v)| k.0 == resource && matches(v, selector))
                .map(|(_, v)| v.clone())
                .collect();
            let rv = store.rv;
            drop(store);
            for obj in current {
                let n = w.event(json!({"type": "ADDED", "object": obj}))?;
                state.watch_bytes.fetch_add(n as u64, Ordering::Relaxed);
            }
            store = state.store.lock().unwrap();
            rv
        }
    };
    let end = Instant::now() + timeout;
    loop {
        if !state.up.load(Ordering::SeqCst) {
            return Ok(false);
        }
        if Instant::now() >= end {
            drop(store);
            return w.end().map(|_| true);
        }
        if state.faults.lock().unwrap().watches_held {
            store = state.changed(resource).wait_timeout(store, Duration::from_millis(200)).unwrap().0;
            continue;
        }
        // From the newest back to the last seen: a wake costs what is new, not the history.
        let mut batch: Vec<Value> = store
            .events
            .iter()
            .rev()
            .take_while(|e| e.rv > seen)
            .filter(|e| e.resource == resource && matches(&e.object, selector))
            .map(|e| json!({"type": e.kind, "object": e.object}))
            .collect();
        batch.reverse();
        seen = store.rv;
        if batch.is_empty() {
            store = state.changed(resource).wait_timeout(store, Duration::from_millis(200)).unwrap().0;
            continue;
        }
        drop(store);
        for e in batch {
            let n = w.event(e)?;
            state.watch_bytes.fetch_add(n as u64, Ordering::Relaxed);
        }
        store = state.store.lock().unwrap();
    }
}
