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
//!   with chunked JSON events, ERROR 410 Gone for a compacted resourceVersion, timeoutSeconds,
//!   bookmarks when asked for (as the watch cache sends them: `watch`).
//!
//! - Discovery (`/api`, `/apis`, the resource lists), for kubectl (`discovery`).
//! - certificates.k8s.io/v1 CSRs with kube-controller-manager's kubelet approver and signer,
//!   and kubeadm's bootstrap tokens (`certificates`).
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

mod certificates;
mod check;
mod discovery;
mod h2;
mod node_objects;
pub mod node_proxy;
mod pki;
mod proto;
mod routes;
mod table;
mod watch;
mod wire;
mod writes;

pub use pki::Pki;
use routes::*;
use watch::*;
use wire::*;
use writes::*;

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
    /// Service account tokens live this long whatever was asked (`token_lifetime`).
    token_seconds: Option<i64>,
    /// Tokens issued: (pod name, token).
    issued: Vec<(String, String)>,
    /// How often a watch that asked for bookmarks gets one (None: every minute, as the
    /// watch cache's `bookmarkFrequency`).
    bookmark_every: Option<Duration>,
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
    /// Client certificates and their users: the node's, and those the signer issued.
    certs: Mutex<Vec<(Vec<u8>, String)>>,
    signing: Mutex<certificates::Signing>,
    up: AtomicBool,
    bytes_in: AtomicU64,
    bytes_out: AtomicU64,
    /// The bytes of every watch event sent (each event's encoding as it went).
    watch_bytes: AtomicU64,
    /// The bookmarks sent.
    bookmarks: AtomicU64,
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
            // A real server's resourceVersion is never 0: its own start writes the namespaces,
            // the default Service and the RBAC bootstrap first.
            store: Mutex::new(Store { rv: 100, ..Store::default() }),
            changed: Default::default(),
            limit: Mutex::new(None),
            silent: Mutex::new(Default::default()),
            faults: Mutex::new(Faults::default()),
            refused: Mutex::new(Vec::new()),
            log: Mutex::new(Vec::new()),
            tokens: Mutex::new(HashMap::new()),
            reviewed: Mutex::new(HashMap::new()),
            grants: Mutex::new(Vec::new()),
            certs: Mutex::new(vec![(client, format!("system:node:{node}"))]),
            signing: Mutex::new(certificates::Signing {
                ca_cert: pki.ca.clone(),
                ca_key: pki.dir.join("ca.key"),
                seconds: 365 * 86400,
                backdate: 300,
                deny: None,
                no_approver: false,
            }),
            up: AtomicBool::new(true),
            bytes_in: AtomicU64::new(0),
            bytes_out: AtomicU64::new(0),
            watch_bytes: AtomicU64::new(0),
            bookmarks: AtomicU64::new(0),
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

    /// Node `n-<i>` of a fleet: its bearer token (`tok-<i>`, user `system:node:n-<i>`) in a
    /// file of `dir` and a kubeconfig there that presents it. The node's name and kubeconfig.
    pub fn fleet_node(&self, pki: &Pki, dir: &Path, i: usize) -> (String, PathBuf) {
        let name = format!("n-{i}");
        let token = dir.join(format!("{name}.token"));
        std::fs::write(&token, format!("tok-{i}")).unwrap();
        self.add_token(&format!("tok-{i}"), &format!("system:node:{name}"));
        let kubeconfig = dir.join(format!("{name}.kubeconfig"));
        pki.kubeconfig_for(self.addr, &token, &kubeconfig);
        (name, kubeconfig)
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

    /// Service account tokens live `seconds` whatever is asked (None: what is asked).
    pub fn token_lifetime(&self, seconds: Option<i64>) {
        self.state.faults.lock().unwrap().token_seconds = seconds;
    }

    /// The service account tokens issued so far: (pod name, token).
    pub fn issued_tokens(&self) -> Vec<(String, String)> {
        self.state.faults.lock().unwrap().issued.clone()
    }

    pub fn allow_pod(&self, name: &str) {
        self.state.faults.lock().unwrap().reject_pods.remove(name);
    }

    /// A kubeadm bootstrap token (`<id>.<secret>`): user `system:bootstrap:<id>`, kubeadm's
    /// bootstrap groups.
    pub fn add_bootstrap_token(&self, id: &str, secret: &str) {
        self.state.tokens.lock().unwrap().insert(format!("{id}.{secret}"), format!("system:bootstrap:{id}"));
    }

    /// The token `<id>.<secret>` no longer authenticates (it expired or was deleted).
    pub fn remove_token(&self, token: &str) {
        self.state.tokens.lock().unwrap().remove(token);
    }

    /// Certificates are issued for `seconds` (the signer's duration), their notBefore
    /// backdated `backdate` seconds (the signer's 5 minutes unless a test makes lifetimes exact).
    pub fn issue_for(&self, seconds: i64, backdate: i64) {
        let mut s = self.state.signing.lock().unwrap();
        (s.seconds, s.backdate) = (seconds, backdate);
    }

    /// The next kubelet client CSRs are denied with `reason` and `message` (None: approved).
    pub fn deny_csrs(&self, denial: Option<(&str, &str)>) {
        self.state.signing.lock().unwrap().deny = denial.map(|(r, m)| (r.to_string(), m.to_string()));
    }

    /// Whether client CSRs are approved automatically (kube-controller-manager's csrapproving).
    pub fn approver(&self, on: bool) {
        self.state.signing.lock().unwrap().no_approver = !on;
    }

    /// The CSRs, oldest first.
    pub fn csrs(&self) -> Vec<Value> {
        let mut all = self.list(certificates::RESOURCE);
        all.sort_by_key(|c| c["metadata"]["uid"].as_str().unwrap_or("").to_string());
        all
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

    /// The bookmarks sent so far.
    pub fn bookmarks(&self) -> u64 {
        self.state.bookmarks.load(Ordering::Relaxed)
    }

    /// Watches that ask for bookmarks get one every `every` (a minute unless told).
    pub fn bookmark_every(&self, every: Duration) {
        self.state.faults.lock().unwrap().bookmark_every = Some(every);
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
