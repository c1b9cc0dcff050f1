//! The parts the agent starts, each from its own settings: the node's facts, the manifest
//! sources and the intake that opens their payloads, the images directory with the pins and
//! the collector, the mirror, the listeners, the kubelet server and the tunnel. Each returns what the agent keeps (tasks it must hold, handles it talks to).

use crate::config::Settings;
use crate::cri::Cri;
use crate::node::{Facts, Node};
use crate::pod::Policy;
use crate::source::{self, file, http, SourceId};
use std::sync::Arc;
use std::time::Duration;

/// The node's facts from the settings and the machine.
pub fn facts(s: &Settings, runtime_name: String) -> Facts {
    use crate::node::machine;
    let n = &s.node;
    let cpu_millis = std::thread::available_parallelism().map_or(1000, |c| c.get() as i64 * 1000);
    let memory_bytes = memory_total();
    let ephemeral_bytes = rustix::fs::statvfs(&n.root_dir)
        .or_else(|_| rustix::fs::statvfs("/"))
        .map_or(0, |v| (v.f_blocks as i64).saturating_mul(v.f_frsize as i64));
    let capacity = machine::Resources { cpu_millis, memory_bytes, ephemeral_bytes, pods: s.mirror.max_pods };
    Facts {
        labels: machine::labels(&n.name, &s.mirror.node_labels),
        ephemeral_bytes,
        allocatable: machine::allocatable(capacity, &n.reserved),
        apparmor: crate::pod::apparmor::host_enabled(),
        allowed_unsafe_sysctls: n.allowed_unsafe_sysctls.clone(),
        name: n.name.clone(),
        root_dir: n.root_dir.clone(),
        pod_logs_dir: n.pod_logs_dir.clone(),
        host_ip: n.ip.clone().or_else(detect_node_ip).unwrap_or_default(),
        cpu_millis,
        memory_bytes,
        runtime_name,
        cluster_dns: n.cluster_dns.clone(),
        cluster_domain: n.cluster_domain.clone(),
        host_resolv_conf: if n.resolv_conf.is_empty() {
            String::new()
        } else {
            let text =
                crate::bounded::read_following(std::path::Path::new(&n.resolv_conf), 1 << 20).unwrap_or_default();
            String::from_utf8_lossy(&text).into_owned()
        },
    }
}

/// The configured manifest sources, each a task sending snapshots to `tx`.
pub fn sources(s: &Settings, tx: &smol::channel::Sender<source::Update>) -> (Vec<SourceId>, Vec<smol::Task<()>>) {
    let (src, root) = (&s.sources, &s.node.root_dir);
    let mut ids = Vec::new();
    let mut tasks = Vec::new();
    // The manifest directory, and Secrets apart from the pods (never copied to disk, not
    // signed by the fleet but each box's own, read only while root's alone).
    let dirs = [(&src.manifest_path, false), (&src.secrets_dir, true)];
    for (path, secrets) in dirs.into_iter().filter_map(|(p, secrets)| Some((p.as_ref()?, secrets))) {
        let fleet = !secrets; // the manifest directory: fleet-signed, its last valid files kept
        let mut intake = intake(s);
        intake.trust = intake.trust.filter(|_| fleet);
        let cfg = file::FileSourceConfig {
            path: path.clone(),
            check_frequency: src.file_check_frequency,
            intake,
            kept_dir: fleet.then(|| root.join("sources").join("files")),
            versions: fleet.then(|| root.join("trust").join("file-versions.json")),
            secrets,
        };
        ids.push(if secrets { SourceId::Secrets } else { SourceId::File });
        tasks.push(crate::task::spawn(file::run(cfg, tx.clone())));
    }
    if let Some(address) = &src.url.url {
        ids.push(SourceId::Http);
        let cfg = http::HttpSourceConfig {
            url: address.clone(),
            headers: src.url.headers.clone(),
            check_frequency: src.url.check_frequency,
            timeout: http::DEFAULT_TIMEOUT,
            ca_file: src.url.ca_file.clone(),
            cache_dir: Some(root.join("sources")),
            intake: intake(s),
            versions: Some(root.join("trust").join("url-versions.json")),
        };
        tasks.push(crate::task::spawn(http::run(cfg, tx.clone())));
    }
    (ids, tasks)
}

/// How the sources (and the rollback stage) open payloads: the trusted keys, the decryption
/// identity, the node, strictness.
pub fn intake(s: &Settings) -> source::payload::Intake {
    source::payload::Intake {
        trust: s.sources.trust.clone(),
        key: s.sources.decryption.clone(),
        node: s.node.name.clone(),
        policy: Policy { strict: s.sources.strict },
    }
}

/// The images directory (marked pending before any pod starts, imported in the background),
/// the runtime's pins on the pods' images, and kubelet's image collection. `wake` wakes every
/// worker when an import brings images.
pub async fn images(
    s: &Settings,
    node: &Arc<Node>,
    cri: &Cri,
    wake: Arc<dyn Fn() + Send + Sync>,
) -> (Arc<crate::images::gc::Collector>, Vec<smol::Task<()>>) {
    let dir = crate::images::dir::DirConfig {
        dir: s.images.dir.clone(),
        record: s.node.root_dir.join("image-imports.json"),
        ctr: s.images.ctr_path.clone(),
        address: s.runtime.endpoint.path().to_path_buf(),
        high_percent: s.images.gc.high_percent,
    };
    let mut tasks = vec![crate::images::dir::start(dir, node.clone(), cri.clone(), wake).await];
    // The runtime's pin on the images the pods need, for the box's other collectors.
    tasks.push(crate::task::spawn(crate::images::pins::run(
        node.clone(),
        cri.clone(),
        s.images.ctr_path.clone(),
        s.runtime.endpoint.path().to_path_buf(),
        s.images.gc_period.min(Duration::from_secs(60)),
    )));
    // kubelet's image garbage collection, which never takes a pinned image.
    let collector = Arc::new(crate::images::gc::Collector::new(s.images.gc, s.images.gc_period));
    let (c, node, cri) = (collector.clone(), node.clone(), cri.clone());
    tasks.push(crate::task::spawn(async move { c.run(&node, &cri).await }));
    (collector, tasks)
}

/// The mirror, when a kubeconfig is given.
pub fn mirror(
    s: &Settings,
    node: &Arc<Node>,
    runtime_version: String,
    serving: &Arc<crate::tls::Serving>,
    updates: &smol::channel::Sender<source::Update>,
) -> Option<Arc<crate::mirror::MirrorState>> {
    let m = &s.mirror;
    let kubeconfig = m.kubeconfig.clone()?;
    let state = Arc::new(crate::mirror::MirrorState::default());
    let opts = crate::mirror::Options {
        kubeconfig,
        node: s.node.name.clone(),
        taints: m.taints.clone(),
        status_update_frequency: m.status_update_frequency,
        status_report_frequency: m.status_report_frequency,
        lease_duration_seconds: m.lease_duration_seconds,
        runtime_version,
        // Where the API server reaches this node's kubelet server (none: 0, and it dials
        // --kubelet-port); never the plain-HTTP read-only port, which it would speak TLS to.
        endpoint_port: s.listeners.kubelet.as_ref().map_or(0, |k| k.address.port()),
        encrypted_pod_specs: m.encrypted_pod_specs,
        bootstrap_kubeconfig: m.bootstrap_kubeconfig.clone(),
        cert_dir: m.cert_dir.clone(),
        rotate_certificates: m.rotate_certificates,
        server_tls_bootstrap: m.server_tls_bootstrap,
        serving: s.listeners.kubelet.is_some().then(|| serving.clone()),
        api_source: m.api_pod_source.then(|| crate::mirror::bound::ApiSource {
            updates: updates.clone(),
            dir: s.node.root_dir.join("sources").join("api"),
        }),
    };
    crate::mirror::start(opts, node.clone(), state.clone());
    Some(state)
}

/// The local API's socket, healthz and the read-only port, each a task.
pub async fn listeners(s: &Settings, api: &Arc<crate::api::Api>) -> Result<Vec<smol::Task<()>>, String> {
    use crate::api::Scope;
    let l = &s.listeners;
    let mut servers = Vec::new();
    if let Some(path) = &l.api_socket {
        let listener = crate::api::bind_socket(path)?;
        log::info!("local API on {}", path.display());
        servers.push(crate::task::spawn(crate::api::serve_unix(api.clone(), listener)));
    }
    for (addr, scope) in [(&l.healthz, Scope::Healthz), (&l.read_only, Scope::ReadOnly)] {
        let Some(addr) = addr else { continue };
        match smol::net::TcpListener::bind(addr.as_str()).await {
            Ok(listener) => {
                let what = if scope == Scope::Healthz { "healthz" } else { "read-only API" };
                log::info!("{what} on http://{addr}");
                servers.push(crate::task::spawn(crate::api::serve_tcp(api.clone(), listener, scope)));
            }
            Err(e) => log::warn!("cannot listen on {addr} ({scope:?}): {e}"),
        }
    }
    Ok(servers)
}

/// kubelet's HTTPS server, when atoll mirrors to an API server or is configured as a standalone
/// kubelet's (`kubelet_server::standalone`): its certificate (the configured one, else a
/// self-signed one for the node's names under the root dir), its listener. A problem is logged
/// and the agent goes on without it: pods never wait on it.
pub async fn kubelet_server(
    s: &Settings,
    node: &Node,
    api: &Arc<crate::api::Api>,
    handoff: crate::kubelet_server::serve::Handoff,
    serving: &Arc<crate::tls::Serving>,
) -> Option<Vec<smol::Task<()>>> {
    use crate::kubelet_server::{auth::Auth, cert, serve, ApiServer};
    let kubeconfig = s.mirror.kubeconfig.as_deref();
    let ks = match (s.listeners.kubelet.as_ref()?, kubeconfig) {
        (ks, Some(_)) => ks.clone(),
        (ks, None) => match crate::kubelet_server::standalone(ks) {
            Ok(ks) => ks?,
            Err(why) => {
                log::error!("kubelet server: {why}; not serving");
                return None;
            }
        },
    };
    let ks = &ks;
    let made = match ks.tls {
        Some(_) => None,
        None => {
            let mut names = vec![s.node.name.clone()];
            names.extend(Some(node.facts().host_ip.clone()).filter(|ip| !ip.is_empty()));
            names.extend(Some(ks.address.ip()).filter(|ip| !ip.is_unspecified()).map(|ip| ip.to_string()));
            names.dedup();
            let dir = s.node.root_dir.join("pki");
            match cert::load_or_make(&dir, &names, std::time::SystemTime::now()) {
                Ok(m) => Some(m),
                Err(e) => {
                    log::error!("kubelet server: its certificate in {}: {e}; not serving", dir.display());
                    return None;
                }
            }
        }
    };
    let tls = match serve::tls_config(ks, made, serving) {
        Ok(t) => t,
        Err(e) => {
            log::error!("kubelet server: {e}; not serving");
            return None;
        }
    };
    let listener = match smol::net::TcpListener::bind(ks.address).await {
        Ok(l) => l,
        Err(e) => {
            log::error!("kubelet server: cannot listen on {}: {e}", ks.address);
            return None;
        }
    };
    log::info!("kubelet server on https://{} (authorization {:?})", ks.address, ks.auth.mode);
    let published = node.facts().host_ip.clone();
    if kubeconfig.is_some() && !ks.address.ip().is_unspecified() && ks.address.ip().to_string() != published {
        log::warn!(
            "kubelet server: it listens on {} but the node publishes {published:?}, where the API server will dial it",
            ks.address.ip()
        );
    }
    let auth = Auth::new(ks.auth.clone(), ApiServer::new(kubeconfig));
    let server = serve::Server::new(tls, auth, api.clone(), ks);
    Some(vec![crate::task::spawn(server.clone().serve_tunnelled(handoff)), crate::task::spawn(server.serve(listener))])
}

/// The konnectivity tunnel, when one is configured and the kubelet server it leads to runs.
pub fn tunnel(
    s: &Settings,
    node: &Node,
    serving: bool,
    handoff: smol::channel::Sender<smol::net::unix::UnixStream>,
) -> Option<smol::Task<()>> {
    let settings = s.mirror.tunnel.clone()?;
    let kubelet = s.listeners.kubelet.as_ref().filter(|_| serving);
    let Some(ks) = kubelet else {
        log::warn!("tunnel: konnectivity is configured but the kubelet server does not run (it needs a kubeconfig and a port); no tunnel");
        return None;
    };
    let ip = node.facts().host_ip.clone();
    let who = crate::tunnel::Node {
        name: s.node.name.clone(),
        ips: vec![ip].into_iter().filter(|i| !i.is_empty()).collect(),
        kubelet: ks.address,
        handoff,
    };
    Some(crate::task::spawn(crate::tunnel::run(settings, who)))
}

/// The node's primary IPv4 address when --node-ip is not given (kubelet uses the address of
/// its default route too): the source address the kernel picks for a route lookup. Connecting
/// a UDP socket sends nothing. None on a box with no route, where hostNetwork pods' status
/// shows no IP and their probes go to 127.0.0.1.
fn detect_node_ip() -> Option<String> {
    let s = std::net::UdpSocket::bind("0.0.0.0:0").ok()?;
    s.connect("192.0.2.1:9").ok()?; // TEST-NET-1: a route lookup only
    let ip = s.local_addr().ok()?.ip();
    (!ip.is_unspecified() && !ip.is_loopback()).then(|| ip.to_string())
}

/// MemTotal from /proc/meminfo, in bytes (0 if unknown).
fn memory_total() -> i64 {
    let text = crate::bounded::read_file(std::path::Path::new("/proc/meminfo"), 1 << 20).unwrap_or_default();
    String::from_utf8_lossy(&text)
        .lines()
        .find(|l| l.starts_with("MemTotal:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|kb| kb.parse::<i64>().ok())
        .map_or(0, |kb| kb.saturating_mul(1024))
}
