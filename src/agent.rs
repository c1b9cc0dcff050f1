//! The agent, as `atoll run` wires it, in one function that main and the benchmarks call:
//! [`run`]`(settings, commands)` (like mini-redis's `server::run(listener, shutdown)`).
//!
//! It builds the parts from the settings, bottom up: the node (runtime client, facts, status
//! store, events, heartbeat), the engine with the prober, the manifest sources, the mirror
//! when a kubeconfig is given, the local API and healthz listeners; then it loops: source
//! snapshots' local objects go to the node's store (waking the workers when they changed) and
//! their pods through the merge to the engine, finished workers back to it, orphans are
//! removed once every source has spoken, systemd is told READY (and fed the watchdog while the
//! relist completes), until a [`Command::Stop`] (or the sender going away) ends it, draining
//! the pods first when asked to. [`Command::Reload`] applies what can change under running
//! pods. Signals are the caller's: main turns SIGTERM/SIGINT into Stop and SIGHUP into Reload.

use crate::config::Settings;
use crate::cri::Cri;
use crate::node::{Facts, Node};
use crate::pod::{Change, Policy};
use crate::runtime::{Engine, EngineConfig, Tuning};
use crate::source::{self, file, http, merge, SourceId};
use std::collections::HashSet;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

/// What the agent's owner may tell it.
#[derive(Debug)]
pub enum Command {
    /// Stop (draining the pods first if the settings say so); the text says why.
    Stop(String),
    /// New settings: back-off limits, runtime classes and registry credentials are applied;
    /// the others are named as needing a restart.
    Reload(Box<Settings>),
}

/// The longest `atoll run` waits for its sources before telling systemd it is ready.
const READY_AT_THE_LATEST: Duration = Duration::from_secs(30);

/// Runs the agent until told to stop (or until `commands` closes).
pub async fn run(s: Settings, commands: smol::channel::Receiver<Command>) -> Result<(), String> {
    let policy = Policy { strict: s.strict };
    // Private before anything is written below it (pods' Secret volumes among them).
    crate::root_dir::prepare(&s.root_dir)?;
    let cri = Cri::new(&s.runtime_endpoint).with_request_timeout(s.runtime_request_timeout);
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
    let node = Node::new(cri.clone(), facts(&s, runtime_name));
    let (tx, rx) = smol::channel::bounded::<source::Update>(16);
    let (sources, _source_tasks) = start_sources(&s, policy, &tx);
    // Sources that end (none configured) leave the agent serving its API.
    let _keep_open = tx;
    if sources.is_empty() {
        log::warn!("no manifest source given (--pod-manifest-path or --manifest-url): nothing to run");
    }
    log::info!("node {}: running pods from {} source(s)", s.node_name, sources.len());
    let tuning = Arc::new(Tuning::new(
        s.crash_loop_back_off,
        s.image_pull_back_off,
        s.keyring.clone(),
        s.runtime_handlers.clone(),
    ));
    // The PLEG wakes workers on any runtime change; the relist is its safety net.
    let config = EngineConfig {
        resync: s.sync_frequency,
        relist: s.relist_period,
        log_rotation: s.log_rotation,
        strict_image_pull_policy: s.strict_image_pull_policy,
    };
    let prober = crate::probe::Manager::new(node.clone());
    let mut engine = Engine::new(node.clone(), cri.clone(), tuning, config, prober);
    // Image tarballs: marked pending before any pod starts, imported in the background.
    let control = engine.control();
    let images = crate::images::dir::DirConfig {
        dir: s.images_dir.clone(),
        record: s.root_dir.join("image-imports.json"),
        ctr: s.ctr_path.clone(),
        address: s.runtime_endpoint.path().to_path_buf(),
        high_percent: s.image_gc.high_percent,
    };
    let wake = Arc::new(move || control.wake_all());
    let _images = crate::images::dir::start(images, node.clone(), cri.clone(), wake).await;
    // The runtime's pin on the images the pods need, for the box's other collectors.
    let _pins = smol::spawn(crate::images::pins::run(
        node.clone(),
        cri.clone(),
        s.ctr_path.clone(),
        s.runtime_endpoint.path().to_path_buf(),
        s.image_gc_period.min(Duration::from_secs(60)),
    ));
    // kubelet's image garbage collection, which never takes a pinned image.
    let collector = Arc::new(crate::images::gc::Collector::new(s.image_gc, s.image_gc_period));
    let _collection = {
        let (collector, node) = (collector.clone(), node.clone());
        smol::spawn(async move { collector.run(&node, &cri).await })
    };
    let mirror = s.kubeconfig.as_ref().map(|kubeconfig| {
        let state = Arc::new(crate::mirror::MirrorState::default());
        let opts = crate::mirror::Options {
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
        crate::mirror::start(opts, node.clone(), state.clone());
        state
    });
    let api = crate::api::Api::new(node.clone(), Some(engine.control()), mirror.clone());
    api.set_images(collector);
    let _servers = start_listeners(&s, &api).await?;
    let notifier = crate::notify::Notifier::from_env();
    let mut merger = merge::Merger::new(sources);
    let rollback_dir = Some(s.root_dir.join("rollback"));
    let mut rollback =
        crate::rollback::Rollback::new(rollback_dir, s.rollback, intake(&s, policy), s.manifest_url.clone());
    // What the runtime already runs: adopted by workers, or stopped before a pod that
    // replaced it while atoll was down may start.
    engine.adopt().await;
    let finished = engine.finished();
    // The mirror learns the desired pods once every source has answered (or atoll went
    // ready without one): before that, a mirror could look orphaned when it is not.
    let mut mirror_stale = true;
    let mut ready = false;
    // systemd gets READY after the first full sync, or after this long if a source (a URL
    // with no cached copy on an offline boot) has not answered yet: the pods that can run are
    // running, and a start timeout must not kill the agent in a restart loop.
    let ready_by = Instant::now() + READY_AT_THE_LATEST;
    let mut notified_ready = false;
    // The local objects' current problems, each logged once.
    let mut object_problems = std::collections::BTreeSet::new();
    // The loop wakes on its own only to feed systemd's watchdog (at most every second) and to
    // report ready at the latest; otherwise an idle agent's main loop sleeps.
    let watchdog_tick = notifier.watchdog_interval().map(|w| w.min(Duration::from_secs(1)));
    let mut current = s;
    enum Event {
        Source(source::Update),
        Done(String),
        Command(Command),
        Tick,
    }
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
        if !notified_ready && Instant::now() >= ready_by {
            notified_ready = true;
            log::warn!("not every manifest source has answered after {READY_AT_THE_LATEST:?}; reporting ready anyway");
            notifier.send("READY=1\nSTATUS=waiting for a manifest source");
        }
        // The mirror learns of every change of the desired pods once atoll is ready (checked
        // before waiting: nothing else may wake this loop for a long time).
        if let (true, Some(state), true) = (mirror_stale, &mirror, ready || notified_ready) {
            mirror_stale = false;
            state.set_desired(merger.desired());
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
                async { Event::Command(commands.recv().await.unwrap_or(Command::Stop("the owner went away".into()))) },
                async {
                    // Trials of changed pods are looked at every second while one runs.
                    let trials = rollback.needs_check().then_some(crate::rollback::CHECK);
                    match (watchdog_tick.into_iter().chain(trials).min(), notified_ready) {
                        (Some(tick), _) => smol::Timer::after(tick).await,
                        (None, false) => smol::Timer::at(ready_by).await,
                        (None, true) => std::future::pending().await,
                    };
                    Event::Tick
                },
            ),
        )
        .await;
        match event {
            Event::Source(update) => {
                // Objects first: a pod that starts now finds the ConfigMaps and Secrets
                // that came with it; pods already running refresh theirs.
                let applied = node.objects().set(&update.source.to_string(), update.objects.clone());
                let problems: std::collections::BTreeSet<String> = applied.problems.into_iter().collect();
                for p in problems.difference(&object_problems) {
                    log::warn!("local objects: {p}");
                }
                object_problems = problems;
                if applied.changed {
                    engine.control().wake_all();
                }
                let update = rollback.filter(update, &node);
                let changes = merger.apply(update, SystemTime::now());
                mirror_stale |= !changes.is_empty();
                engine.apply_all(changes);
            }
            Event::Done(uid) => engine.worker_done(&uid),
            // The watchdog's ticks come too: trials are looked at only while there are some.
            Event::Tick if rollback.needs_check() => {
                for update in rollback.check(&node, SystemTime::now()) {
                    let changes = merger.apply(update, SystemTime::now());
                    mirror_stale |= !changes.is_empty();
                    engine.apply_all(changes);
                }
            }
            Event::Tick => {}
            Event::Command(Command::Reload(new)) => {
                reload(&current, &new, engine.tuning());
                current = *new;
            }
            Event::Command(Command::Stop(why)) => {
                notifier.send("STOPPING=1");
                if current.drain_on_exit {
                    log::info!("{why}: stopping every pod before exiting (--drain-on-exit)");
                    drain(&mut engine, &merger, &finished).await;
                } else {
                    log::info!(
                        "{why}: exiting; {} pod(s) keep running and are adopted at the next start",
                        engine.running().len()
                    );
                }
                break;
            }
        }
        // The watchdog is fed from this loop, and only while the relist keeps completing.
        if notified_ready && notifier.watchdog_interval().is_some() {
            match node.stalled() {
                None => notifier.send("WATCHDOG=1"),
                Some(why) => log::warn!("not feeding the watchdog: {why}"),
            }
        }
    }
    if let Some(path) = &current.api_socket {
        let _ = std::fs::remove_file(path);
    }
    Ok(())
}

/// The node's facts from the settings and the machine.
fn facts(s: &Settings, runtime_name: String) -> Facts {
    Facts {
        name: s.node_name.clone(),
        root_dir: s.root_dir.clone(),
        pod_logs_dir: s.pod_logs_dir.clone(),
        host_ip: s.node_ip.clone().or_else(detect_node_ip).unwrap_or_default(),
        cpu_millis: std::thread::available_parallelism().map_or(1000, |n| n.get() as i64 * 1000),
        memory_bytes: memory_total(),
        runtime_name,
        cluster_dns: s.cluster_dns.clone(),
        cluster_domain: s.cluster_domain.clone(),
        host_resolv_conf: if s.resolv_conf.is_empty() {
            String::new()
        } else {
            let text = crate::bounded::read_file(std::path::Path::new(&s.resolv_conf), 1 << 20).unwrap_or_default();
            String::from_utf8_lossy(&text).into_owned()
        },
    }
}

/// The configured manifest sources, each a task sending snapshots to `tx`.
fn start_sources(
    s: &Settings,
    policy: Policy,
    tx: &smol::channel::Sender<source::Update>,
) -> (Vec<SourceId>, Vec<smol::Task<()>>) {
    let mut sources = Vec::new();
    let mut tasks = Vec::new();
    // The manifest directory, and Secrets apart from the pods (never copied to disk, not
    // signed by the fleet but each box's own, read only while root's alone).
    let dirs = [(&s.pod_manifest_path, false), (&s.secrets_dir, true)];
    for (path, secrets) in dirs.into_iter().filter_map(|(p, secrets)| Some((p.as_ref()?, secrets))) {
        let fleet = !secrets; // the manifest directory: fleet-signed, its last valid files kept
        let mut intake = intake(s, policy);
        intake.trust = intake.trust.filter(|_| fleet);
        let cfg = file::FileSourceConfig {
            path: path.clone(),
            check_frequency: s.file_check_frequency,
            intake,
            kept_dir: fleet.then(|| s.root_dir.join("sources").join("files")),
            versions: fleet.then(|| s.root_dir.join("trust").join("file-versions.json")),
            secrets,
        };
        sources.push(if secrets { SourceId::Secrets } else { SourceId::File });
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
            intake: intake(s, policy),
            versions: Some(s.root_dir.join("trust").join("url-versions.json")),
        };
        tasks.push(smol::spawn(http::run(cfg, tx.clone())));
    }
    (sources, tasks)
}

/// How the sources (and the rollback stage) open payloads: the trusted keys, the decryption
/// identity, the node, strictness.
fn intake(s: &Settings, policy: Policy) -> source::payload::Intake {
    source::payload::Intake {
        trust: s.manifest_trust.clone(),
        key: s.decryption.clone(),
        node: s.node_name.clone(),
        policy,
    }
}

/// The local API's socket, healthz and the read-only port, each a task.
async fn start_listeners(s: &Settings, api: &Arc<crate::api::Api>) -> Result<Vec<smol::Task<()>>, String> {
    use crate::api::Scope;
    let mut servers = Vec::new();
    if let Some(path) = &s.api_socket {
        let listener = crate::api::bind_socket(path)?;
        log::info!("local API on {}", path.display());
        servers.push(smol::spawn(crate::api::serve_unix(api.clone(), listener)));
    }
    for (addr, scope) in [(&s.healthz, Scope::Healthz), (&s.read_only, Scope::ReadOnly)] {
        let Some(addr) = addr else { continue };
        match smol::net::TcpListener::bind(addr.as_str()).await {
            Ok(l) => {
                let what = if scope == Scope::Healthz { "healthz" } else { "read-only API" };
                log::info!("{what} on http://{addr}");
                servers.push(smol::spawn(crate::api::serve_tcp(api.clone(), l, scope)));
            }
            Err(e) => log::warn!("cannot listen on {addr} ({scope:?}): {e}"),
        }
    }
    Ok(servers)
}

/// Stops every pod and waits (up to the longest grace period plus a minute) for their workers.
async fn drain<R: crate::cri::RuntimeService>(
    engine: &mut Engine<R>,
    merger: &merge::Merger,
    finished: &smol::channel::Receiver<String>,
) {
    let pods: Vec<_> = merger.desired().cloned().collect();
    let longest = pods.iter().map(|p| crate::runtime::stop::grace_of(&p.pod)).max().unwrap_or_default();
    for sp in pods {
        engine.apply(Change::Remove(sp));
    }
    // Grace periods come from manifests: a huge one must not overflow the clock.
    let limit = longest.saturating_add(Duration::from_secs(60));
    let started = Instant::now();
    while !engine.running().is_empty() {
        let left = limit.saturating_sub(started.elapsed());
        match crate::deadline::with_deadline(left, finished.recv()).await {
            Some(Ok(uid)) => engine.worker_done(&uid),
            _ => {
                log::warn!("drain: {} pod(s) still stopping; exiting anyway", engine.running().len());
                return;
            }
        }
    }
}

/// Applies what can change under running pods (back-off limits, runtime classes, registry
/// credentials); names the other changes as needing a restart. Running pods are not touched.
fn reload(old: &Settings, new: &Settings, tuning: &Tuning) {
    tuning.reload(new.crash_loop_back_off, new.image_pull_back_off, new.keyring.clone(), new.runtime_handlers.clone());
    log::info!("SIGHUP: reloaded back-off limits, runtime classes and registry credentials; running pods untouched");
    let later = needs_restart(old, new);
    if !later.is_empty() {
        log::warn!("SIGHUP: changes to {} take effect after a restart of atoll", later.join(", "));
    }
}

/// What changed from `old` to `new` that only a restart of atoll applies.
fn needs_restart(old: &Settings, new: &Settings) -> Vec<&'static str> {
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
    // Keys and `require` are read by the sources when they start: until the restart, what
    // runs was checked under the old settings (the log line says so).
    if new.manifest_trust != old.manifest_trust {
        later.push("manifestTrust");
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
    let recipient = |s: &Settings| s.decryption.as_ref().map(|k| k.recipient());
    if new.secrets_dir != old.secrets_dir || recipient(new) != recipient(old) {
        later.push("secretsDir, decryptionKeyFile");
    }
    if new.strict != old.strict || new.log_rotation != old.log_rotation || new.pod_logs_dir != old.pod_logs_dir {
        later.push("strictness, pod logs");
    }
    if new.rollback != old.rollback {
        later.push("rollbackAfter, rollbackMaxRestarts");
    }
    later
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

#[cfg(test)]
mod tests {
    use super::*;

    fn settings(atoll_yaml: &str) -> Settings {
        let dir = std::env::temp_dir().join(format!("atoll-agent-reload-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join(format!("{:x}.yaml", crate::fnv::fnv1a_64(atoll_yaml.as_bytes())));
        std::fs::write(&file, format!("apiVersion: atoll.io/v1alpha1\nkind: AtollConfiguration\n{atoll_yaml}"))
            .unwrap();
        let args = ["run".to_string(), format!("--atoll-config={}", file.display()), "--hostname-override=n".into()];
        match crate::cli::parse(args.to_vec()).unwrap() {
            crate::cli::Command::Run(f) => Settings::load(&f).unwrap(),
            _ => unreachable!(),
        }
    }

    #[test]
    fn a_reload_names_a_change_of_manifest_trust_as_needing_a_restart() {
        let dir = std::env::temp_dir().join(format!("atoll-agent-reload-keys-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let key = dir.join("fleet.pub");
        std::fs::write(&key, "untrusted comment: k\nRWSZQ6c1ilZml5y6wD4PC2h11yUzhxyBXiiDjnUr2taaDCOxlw8edujl\n")
            .unwrap();
        let trust = |require| format!("manifestTrust: {{publicKeys: [{}], require: {require}}}\n", key.display());
        let (none, lax, strict) = (settings(""), settings(&trust(false)), settings(&trust(true)));
        assert!(needs_restart(&none, &none).is_empty());
        assert_eq!(needs_restart(&none, &lax), ["manifestTrust"]);
        assert_eq!(needs_restart(&lax, &strict), ["manifestTrust"], "turning require on");
        assert_eq!(needs_restart(&strict, &none), ["manifestTrust"]);
        let back_off = settings("crashLoopBackOff: {maxDelay: 1m}\n");
        assert!(needs_restart(&none, &back_off).is_empty(), "applied at once");
    }
}
