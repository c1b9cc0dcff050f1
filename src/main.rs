//! The `atoll` binary: parses the command line and runs the command.
//! Exit codes: 0 success, 1 failure, 2 usage error.

use atoll::cli::{self, Command, Flags};
use atoll::config::Settings;
use atoll::cri::Cri;
use atoll::pod::{self, Origin, Policy, Shape};
use atoll::runtime::backoff::Backoff;
use atoll::runtime::engine::Engine;
use atoll::runtime::sandbox::NodeContext;
use atoll::runtime::worker::Shared;
use atoll::source::{self, file, http, merge, SourceId};
use std::collections::HashSet;
use std::process::ExitCode;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

/// The `run` flags this version acts on; the others are parsed (so kubelet command lines and
/// unit files keep working) and reported as unused, never silently ignored.
const RUN_FLAGS_IN_USE: &[&str] = &[
    "container-runtime-endpoint",
    "runtime-request-timeout",
    "v",
    "pod-manifest-path",
    "manifest-url",
    "manifest-url-header",
    "manifest-url-ca-file",
    "file-check-frequency",
    "http-check-frequency",
    "hostname-override",
    "root-dir",
    "strict",
    "config",
    "atoll-config",
    "api-socket",
    "drain-on-exit",
    "node-ip",
    "kubeconfig",
    "node-labels",
    "node-status-update-frequency",
    "node-status-report-frequency",
];

fn main() -> ExitCode {
    match cli::parse(std::env::args().skip(1)) {
        Ok(Command::Version) => {
            print!("{}", atoll::version_text());
            ExitCode::SUCCESS
        }
        Ok(Command::Help(_)) => {
            print!("{}", cli::usage());
            ExitCode::SUCCESS
        }
        Ok(Command::Run(flags)) => match run(&flags) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("atoll: {e}");
                ExitCode::FAILURE
            }
        },
        Ok(Command::Client { command, flags, args }) => match atoll::client::run(&command, &flags, &args) {
            Ok(code) => ExitCode::from(code),
            Err(e) => {
                eprintln!("atoll {command}: {e}");
                ExitCode::FAILURE
            }
        },
        Ok(Command::Doctor(flags)) => match Settings::load(&flags) {
            Ok(s) => {
                let checks = atoll::doctor::all(&s);
                print!("{}", atoll::doctor::report(&checks));
                if checks.iter().any(|c| c.level == atoll::doctor::Level::Fail) {
                    ExitCode::FAILURE
                } else {
                    ExitCode::SUCCESS
                }
            }
            Err(e) => {
                eprintln!("atoll doctor: {e}");
                ExitCode::from(2)
            }
        },
        Ok(Command::Validate { flags, targets }) => match validate(&flags, &targets) {
            Ok(true) => ExitCode::SUCCESS,
            Ok(false) => ExitCode::FAILURE,
            Err(e) => {
                eprintln!("atoll validate: {e}");
                ExitCode::from(2)
            }
        },
        Err(e) => {
            eprintln!("atoll: {e}\nRun `atoll help` for usage.");
            ExitCode::from(2)
        }
    }
}

fn init_logging(flags: &Flags) -> Result<(), String> {
    let level = match flags.get("v").unwrap_or("0") {
        "0" | "1" => log::LevelFilter::Info,
        "2" | "3" => log::LevelFilter::Debug,
        v if v.parse::<u8>().is_ok() => log::LevelFilter::Trace,
        v => return Err(format!("flag --v takes a number, got {v:?}")),
    };
    // Verbosity is atoll's own. The HTTP and TLS libraries' debug and trace lines print
    // request headers (the mirror's bearer token, --manifest-url-header values), so they never
    // pass, at any verbosity.
    let mut logger = simple_logger::SimpleLogger::new().with_level(level);
    for module in ["ureq", "ureq_proto", "rustls", "h2", "futures_rustls"] {
        logger = logger.with_module_level(module, log::LevelFilter::Info);
    }
    logger.init().map_err(|e| format!("cannot start logging: {e}"))
}

/// The agent: manifest sources → desired set → pod engine, against the container runtime.
fn run(flags: &Flags) -> Result<(), String> {
    init_logging(flags)?;
    for name in flags.names() {
        if !RUN_FLAGS_IN_USE.contains(&name) {
            log::warn!("flag --{name} is accepted but not used by this version of atoll yet");
        }
    }
    let s = Settings::load(flags)?;
    for note in &s.config_notes {
        log::warn!("{note}");
    }
    let policy = Policy { strict: s.strict };
    let cri = Cri::new(&s.runtime_endpoint).with_request_timeout(s.runtime_request_timeout);
    smol::block_on(async {
        let (runtime_name, runtime_version) = match cri.version().await {
            Ok(v) => {
                log::info!(
                    "connected to {} {} (CRI {}) at {}",
                    v.runtime_name,
                    v.runtime_version,
                    v.runtime_api_version,
                    s.runtime_endpoint
                );
                let full = format!("{}://{}", v.runtime_name, v.runtime_version);
                (v.runtime_name, full)
            }
            Err(e) => {
                log::warn!("cannot reach the container runtime at {} yet: {e}", s.runtime_endpoint);
                ("containerd".to_string(), "containerd://unknown".to_string())
            }
        };
        let (tx, rx) = smol::channel::bounded::<source::Update>(16);
        let mut sources = Vec::new();
        let mut tasks = Vec::new();
        if let Some(path) = &s.pod_manifest_path {
            sources.push(SourceId::File);
            let cfg = file::FileSourceConfig {
                path: path.clone(),
                check_frequency: s.file_check_frequency,
                node: s.node_name.clone(),
                policy,
                kept_dir: Some(s.root_dir.join("sources").join("files")),
            };
            tasks.push(smol::spawn(file::run(cfg, tx.clone())));
        }
        if let Some(url) = &s.manifest_url {
            sources.push(SourceId::Http);
            let cfg = http::HttpSourceConfig {
                url: url.clone(),
                headers: s.manifest_url_headers.clone(),
                check_frequency: s.http_check_frequency,
                timeout: http::DEFAULT_TIMEOUT,
                ca_file: s.manifest_url_ca_file.clone(),
                cache_dir: Some(s.root_dir.join("sources")),
                node: s.node_name.clone(),
                policy,
            };
            tasks.push(smol::spawn(http::run(cfg, tx.clone())));
        }
        let tx_keep = tx;
        if sources.is_empty() {
            log::warn!("no manifest source given (--pod-manifest-path or --manifest-url): nothing to run");
        }
        let shared = Arc::new(Shared {
            cri,
            node: NodeContext {
                node_name: s.node_name.clone(),
                pod_logs_dir: s.pod_logs_dir.clone(),
                root_dir: s.root_dir.clone(),
                cluster_dns: s.cluster_dns.clone(),
                cluster_domain: s.cluster_domain.clone(),
                host_resolv_conf: if s.resolv_conf.is_empty() {
                    String::new()
                } else {
                    std::fs::read_to_string(&s.resolv_conf).unwrap_or_default()
                },
                runtime_handlers: atoll::runtime::sandbox::Handlers::new(s.runtime_handlers.clone()),
            },
            host_ip: s.node_ip.clone().or_else(detect_node_ip).unwrap_or_default(),
            node_cpu_millis: std::thread::available_parallelism().map_or(1000, |n| n.get() as i64 * 1000),
            node_memory_bytes: memory_total(),
            backoff: Mutex::new(Backoff::new(s.crash_loop_back_off.0, s.crash_loop_back_off.1)),
            image_backoff: Mutex::new(Backoff::new(s.image_pull_back_off.0, s.image_pull_back_off.1)),
            keyring: Mutex::new(s.keyring.clone()),
            // The relist wakes workers on any runtime change; this is their safety net.
            resync: Duration::from_secs(10),
            runtime_name,
            statuses: Default::default(),
            log_rotation: s.log_rotation,
            agent_start: std::time::Instant::now(),
            events: Default::default(),
            heartbeat: Default::default(),
            mirror: Default::default(),
        });
        log::info!("node {}: running pods from {} source(s)", s.node_name, sources.len());
        if let Some(kubeconfig) = &s.kubeconfig {
            let opts = atoll::mirror::Options {
                kubeconfig: kubeconfig.clone(),
                node: s.node_name.clone(),
                node_labels: s.node_labels.clone(),
                taints: s.register_with_taints.clone(),
                max_pods: s.max_pods,
                status_update_frequency: s.node_status_update_frequency,
                status_report_frequency: s.node_status_report_frequency,
                lease_duration_seconds: s.node_lease_duration_seconds,
                runtime_version,
                endpoint_port: s.read_only.as_deref().and_then(|a| a.rsplit(':').next()?.parse().ok()).unwrap_or(0),
                root_dir: s.root_dir.clone(),
            };
            atoll::mirror::start(opts, shared.clone());
        }
        // The mirror learns the desired pods once every source has answered (or atoll went
        // ready without one): before that, a mirror could look orphaned when it is not.
        let mut mirror_stale = true;
        let api = atoll::api::Api::new(shared.clone());
        let mut servers = Vec::new();
        if let Some(path) = &s.api_socket {
            let listener = atoll::api::bind_socket(path)?;
            log::info!("local API on {}", path.display());
            servers.push(smol::spawn(atoll::api::serve_unix(api.clone(), listener)));
        }
        for (addr, scope) in [(&s.healthz, atoll::api::Scope::Healthz), (&s.read_only, atoll::api::Scope::ReadOnly)] {
            let Some(addr) = addr else { continue };
            match smol::net::TcpListener::bind(addr.as_str()).await {
                Ok(l) => {
                    log::info!(
                        "{} on http://{addr}",
                        if scope == atoll::api::Scope::Healthz { "healthz" } else { "read-only API" }
                    );
                    servers.push(smol::spawn(atoll::api::serve_tcp(api.clone(), l, scope)));
                }
                Err(e) => log::warn!("cannot listen on {addr} ({scope:?}): {e}"),
            }
        }
        let notifier = atoll::notify::Notifier::from_env();
        let mut signals = async_signal::Signals::new([
            async_signal::Signal::Term,
            async_signal::Signal::Int,
            async_signal::Signal::Hup,
        ])
        .map_err(|e| format!("cannot handle signals: {e}"))?;
        let mut merger = merge::Merger::new(sources);
        let mut engine = Engine::new(shared.clone());
        // What the runtime already runs: adopted by workers, or stopped before a pod that
        // replaced it while atoll was down may start.
        engine.adopt().await;
        let finished = engine.finished();
        let mut ready = false;
        // systemd gets READY after the first full sync, or after this long if a source (a
        // URL with no cached copy on an offline boot) has not answered yet: the pods that can
        // run are running, and a start timeout must not kill the agent in a restart loop.
        let ready_by = std::time::Instant::now() + READY_AT_THE_LATEST;
        let mut notified_ready = false;
        let tick = notifier.watchdog_interval().unwrap_or(Duration::from_secs(1)).min(Duration::from_secs(1));
        enum Event {
            Source(source::Update),
            Done(String),
            Signal(async_signal::Signal),
            Tick,
        }
        // Sources that end (none configured) leave the agent serving its API.
        let _keep_open = tx_keep;
        loop {
            if !ready && merger.all_sources_seen() {
                ready = true;
                let desired: HashSet<String> = merger.desired().map(|p| p.uid.clone()).collect();
                engine.remove_orphans(&desired).await;
                log::info!("first full sync done: {} pod(s) desired", desired.len());
                if !notified_ready {
                    notified_ready = true;
                    notifier.send(&format!("READY=1\nSTATUS=running {} pod(s)", desired.len()));
                }
            }
            if !notified_ready && std::time::Instant::now() >= ready_by {
                notified_ready = true;
                log::warn!(
                    "not every manifest source has answered after {READY_AT_THE_LATEST:?}; reporting ready anyway"
                );
                notifier.send("READY=1\nSTATUS=waiting for a manifest source");
            }
            let event = smol::future::or(
                smol::future::or(
                    async {
                        match rx.recv().await {
                            Ok(u) => Event::Source(u),
                            Err(_) => std::future::pending().await,
                        }
                    },
                    async {
                        match finished.recv().await {
                            Ok(uid) => Event::Done(uid),
                            Err(_) => std::future::pending().await,
                        }
                    },
                ),
                smol::future::or(
                    async {
                        use smol::stream::StreamExt;
                        match signals.next().await {
                            Some(Ok(sig)) => Event::Signal(sig),
                            _ => std::future::pending().await,
                        }
                    },
                    async {
                        smol::Timer::after(tick).await;
                        Event::Tick
                    },
                ),
            )
            .await;
            match event {
                Event::Source(update) => {
                    for change in merger.apply(update, SystemTime::now()) {
                        engine.apply(change);
                        mirror_stale = true;
                    }
                }
                Event::Done(uid) => engine.worker_done(&uid),
                Event::Tick => {}
                Event::Signal(async_signal::Signal::Hup) => reload(flags, &s, &shared),
                Event::Signal(sig) => {
                    notifier.send("STOPPING=1");
                    if s.drain_on_exit {
                        log::info!("{sig:?}: stopping every pod before exiting (--drain-on-exit)");
                        drain(&mut engine, &merger, &finished).await;
                    } else {
                        log::info!(
                            "{sig:?}: exiting; {} pod(s) keep running and are adopted at the next start",
                            engine.running().len()
                        );
                    }
                    break;
                }
            }
            if mirror_stale && s.kubeconfig.is_some() && (ready || notified_ready) {
                mirror_stale = false;
                shared.mirror.set_desired(merger.desired());
            }
            // The watchdog is fed from this loop, and only while the relist keeps completing.
            if notified_ready && notifier.watchdog_interval().is_some() {
                match api.stalled() {
                    None => notifier.send("WATCHDOG=1"),
                    Some(why) => log::warn!("not feeding the watchdog: {why}"),
                }
            }
        }
        drop(servers);
        if let Some(path) = &s.api_socket {
            let _ = std::fs::remove_file(path);
        }
        drop(tasks);
        Ok(())
    })
}

/// The longest `atoll run` waits for its sources before telling systemd it is ready.
const READY_AT_THE_LATEST: Duration = Duration::from_secs(30);

/// Stops every pod and waits (up to the longest grace period plus a minute) for their workers.
async fn drain(engine: &mut Engine, merger: &merge::Merger, finished: &smol::channel::Receiver<String>) {
    let pods: Vec<_> = merger.desired().cloned().collect();
    let longest = pods.iter().map(|p| atoll::runtime::worker::grace_of(&p.pod)).max().unwrap_or_default();
    for sp in pods {
        engine.apply(merge::Change::Remove(sp));
    }
    // Grace periods come from manifests: a huge one must not overflow the clock.
    let limit = longest.saturating_add(Duration::from_secs(60));
    let started = std::time::Instant::now();
    while !engine.running().is_empty() {
        let left = limit.saturating_sub(started.elapsed());
        match atoll::deadline::with_deadline(left, finished.recv()).await {
            Some(Ok(uid)) => engine.worker_done(&uid),
            _ => {
                log::warn!("drain: {} pod(s) still stopping; exiting anyway", engine.running().len());
                return;
            }
        }
    }
}

/// SIGHUP: reads the config files again and applies what can change under running pods
/// (back-off limits, runtime classes, registry credentials); other changes are named as
/// needing a restart. Running pods are not touched. A bad file keeps the old settings.
fn reload(flags: &Flags, old: &Settings, shared: &Shared) {
    let new = match Settings::load(flags) {
        Ok(s) => s,
        Err(e) => {
            log::error!("SIGHUP: config not reloaded, keeping the current settings: {e}");
            return;
        }
    };
    atoll::locks::lock(&shared.backoff).set_limits(new.crash_loop_back_off.0, new.crash_loop_back_off.1);
    atoll::locks::lock(&shared.image_backoff).set_limits(new.image_pull_back_off.0, new.image_pull_back_off.1);
    shared.node.runtime_handlers.replace(new.runtime_handlers.clone());
    *atoll::locks::lock(&shared.keyring) = new.keyring.clone();
    let mut later = Vec::new();
    if new.pod_manifest_path != old.pod_manifest_path || new.file_check_frequency != old.file_check_frequency {
        later.push("the manifest directory");
    }
    if new.manifest_url != old.manifest_url
        || new.manifest_url_headers != old.manifest_url_headers
        || new.http_check_frequency != old.http_check_frequency
    {
        later.push("the manifest URL");
    }
    if new.runtime_endpoint.to_string() != old.runtime_endpoint.to_string() {
        later.push("the runtime endpoint");
    }
    if new.api_socket != old.api_socket || new.healthz != old.healthz || new.read_only != old.read_only {
        later.push("the API listeners");
    }
    if new.kubeconfig != old.kubeconfig
        || new.node_labels != old.node_labels
        || new.register_with_taints != old.register_with_taints
        || new.max_pods != old.max_pods
    {
        later.push("the mirror (kubeconfig, node labels, taints, maxPods)");
    }
    if new.strict != old.strict || new.log_rotation != old.log_rotation || new.pod_logs_dir != old.pod_logs_dir {
        later.push("strictness, pod logs");
    }
    log::info!("SIGHUP: reloaded back-off limits, runtime classes and registry credentials; running pods untouched");
    if !later.is_empty() {
        log::warn!("SIGHUP: changes to {} take effect after a restart of atoll", later.join(", "));
    }
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
    std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|t| {
            t.lines()
                .find(|l| l.starts_with("MemTotal:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|kb| kb.parse::<i64>().ok())
        })
        .map_or(0, |kb| kb * 1024)
}

/// `atoll validate`: the same pipeline as `run`, once, with a line per manifest.
/// Returns whether everything was valid.
fn validate(flags: &Flags, targets: &[String]) -> Result<bool, String> {
    let s = Settings::load(flags)?;
    let policy = Policy { strict: s.strict };
    let mut all_ok = true;
    for target in targets {
        let lower = target.to_ascii_lowercase();
        if lower.starts_with("http://") || lower.starts_with("https://") {
            all_ok &= validate_url(&s, target, policy);
            continue;
        }
        let scan = file::scan(std::path::Path::new(target), &s.node_name, policy);
        if let Some(p) = &scan.path_problem {
            println!("{target}: error: {p}");
            all_ok = false;
        }
        for (p, why) in &scan.skipped {
            println!("{}: skipped: {why}", p.display());
        }
        let mut files: Vec<&std::path::PathBuf> = scan.by_file.keys().chain(scan.errors.keys()).collect();
        files.sort();
        for f in files {
            if let Some(pods) = scan.by_file.get(f) {
                for sp in pods {
                    println!("{}: ok: pod {} uid {}", f.display(), sp.pod.key(), sp.uid);
                }
                for (_, w) in scan.warnings.iter().filter(|(p, _)| p == f) {
                    println!("{}: warning: {w}", f.display());
                }
            }
            if let Some(e) = scan.errors.get(f) {
                all_ok = false;
                for p in &e.problems {
                    println!("{}: error: {p}", f.display());
                }
            }
        }
    }
    Ok(all_ok)
}

fn validate_url(s: &Settings, url: &str, policy: Policy) -> bool {
    let shown = http::redact_url(url);
    let client = match http::Client::new(
        url,
        s.manifest_url_headers.clone(),
        http::DEFAULT_TIMEOUT,
        s.manifest_url_ca_file.as_deref(),
    ) {
        Ok(c) => c,
        Err(e) => {
            println!("{shown}: error: {e}");
            return false;
        }
    };
    match client.fetch(&Default::default()) {
        Ok(http::Fetched::Body { bytes, .. }) if bytes.iter().all(u8::is_ascii_whitespace) => {
            println!("{shown}: ok: empty body (no pods)");
            true
        }
        Ok(http::Fetched::Body { bytes, .. }) => {
            match pod::load(&bytes, Shape::PodOrList, &Origin::Url(url.to_string()), &s.node_name, policy) {
                Ok(loaded) => {
                    for sp in &loaded.pods {
                        println!("{shown}: ok: pod {} uid {}", sp.pod.key(), sp.uid);
                    }
                    for w in &loaded.warnings {
                        println!("{shown}: warning: {w}");
                    }
                    true
                }
                Err(e) => {
                    for p in &e.problems {
                        println!("{shown}: error: {p}");
                    }
                    false
                }
            }
        }
        Ok(http::Fetched::NotModified) => {
            println!("{shown}: error: answered 304 Not Modified to an unconditional request");
            false
        }
        Err(e) => {
            let prefix = format!("{shown}: ");
            println!("{shown}: error: {}", e.strip_prefix(&prefix).unwrap_or(&e));
            false
        }
    }
}
