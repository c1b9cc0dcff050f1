//! The agent, as `atoll run` wires it, in one function that main and the benchmarks call:
//! [`run`]`(settings, commands)` (like mini-redis's `server::run(listener, shutdown)`).
//!
//! [`Agent::start`] builds the parts from their settings, bottom up (`parts`): the node
//! (runtime client, facts, status store, events, heartbeat), the engine with the prober, the
//! images directory and collector, the mirror when a kubeconfig is given, the local API and
//! healthz listeners, the manifest sources. Then [`Agent::serve`] waits for the next event and
//! hands it to a short handler: a source's snapshot (`on_source`: its local objects to
//! the node's store, its pods through the rollback stage, the merge and admission to the
//! engine), a finished worker, a tick (rollback trials, the watchdog, the ready deadline), a
//! command ([`Command::Reload`] applies what can change under running pods; [`Command::Stop`] ends
//! it, draining the pods first when asked to). Where it stands on the way to systemd's READY=1
//! is a pure value (`readiness`). Signals are the caller's: main turns SIGTERM/SIGINT into
//! Stop and SIGHUP into Reload.

mod parts;
pub mod readiness;

use crate::config::Settings;
use crate::cri::Cri;
use crate::node::Node;
use crate::pod::{Change, PodUid};
use crate::runtime::{Engine, Tuning};
use crate::source::{self, merge};
use readiness::{Milestone, Readiness};
use std::collections::{BTreeSet, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

/// The node's facts as the agent reads them at start (`atoll doctor` and `atoll validate`
/// admit against them).
pub fn node_facts(s: &Settings) -> crate::node::Facts {
    parts::facts(s, "containerd".into())
}

/// What the agent's owner may tell it.
#[derive(Debug)]
pub enum Command {
    /// Stop (draining the pods first if the settings say so); the text says why.
    Stop(String),
    /// New settings: back-off limits, runtime classes and registry credentials are applied;
    /// the others are named as needing a restart.
    Reload(Box<Settings>),
}

/// Runs the agent until told to stop (or until `commands` closes).
pub async fn run(s: Settings, commands: smol::channel::Receiver<Command>) -> Result<(), String> {
    Agent::start(s).await?.serve(commands).await;
    Ok(())
}

/// What wakes the agent's loop.
enum Event {
    Source(source::Update),
    Done(PodUid),
    Command(Command),
    Tick,
}

/// Whether the loop goes on after a command.
enum Flow {
    Continue,
    Stop,
}

/// The running agent: the parts it talks to, and the tasks it holds.
pub struct Agent {
    settings: Settings,
    node: Arc<Node>,
    engine: Engine<Cri>,
    merger: merge::Merger,
    /// kubelet's admission of new pods, between the merge and the engine.
    admission: crate::admission::Admission,
    rollback: crate::rollback::Rollback,
    mirror: Option<Arc<crate::mirror::MirrorState>>,
    notifier: crate::notify::Notifier,
    updates: smol::channel::Receiver<source::Update>,
    finished: smol::channel::Receiver<PodUid>,
    readiness: Readiness,
    /// The mirror has not yet been told of the latest desired pods.
    mirror_stale: bool,
    /// The local objects' current problems, each logged once.
    object_problems: BTreeSet<String>,
    /// Sources, images, collector, listeners: dropping them stops them.
    _tasks: Vec<smol::Task<()>>,
    /// Sources that end (none configured) leave the agent serving its API.
    _updates_open: smol::channel::Sender<source::Update>,
}

impl Agent {
    /// Builds every part and adopts what the runtime already runs.
    pub async fn start(s: Settings) -> Result<Agent, String> {
        // Private before anything is written below it (pods' Secret volumes among them).
        crate::root_dir::prepare(&s.node.root_dir).map_err(|e| e.to_string())?;
        let cri = Cri::new(&s.runtime.endpoint).with_request_timeout(s.runtime.request_timeout);
        let (runtime_name, runtime_version) = match cri.version().await {
            Ok(v) => {
                let (name, version, api) = (&v.runtime_name, &v.runtime_version, &v.runtime_api_version);
                log::info!("connected to {name} {version} (CRI {api}) at {}", s.runtime.endpoint);
                (v.runtime_name.clone(), format!("{name}://{version}"))
            }
            Err(e) => {
                log::warn!("cannot reach the container runtime at {} yet: {e}", s.runtime.endpoint);
                ("containerd".to_string(), "containerd://unknown".to_string())
            }
        };
        let node = Node::new(parts::facts(&s, runtime_name));
        let (tx, updates) = smol::channel::bounded::<source::Update>(16);
        let (mut sources, mut tasks) = parts::sources(&s, &tx);
        if s.mirror.api_pod_source {
            sources.push(source::SourceId::Api);
        }
        if sources.is_empty() {
            log::warn!("no manifest source given (--pod-manifest-path or --manifest-url): nothing to run");
        }
        log::info!("node {}: running pods from {} source(s)", s.node.name, sources.len());
        let tuning = Arc::new(Tuning::new(&s.runtime.tuning));
        // The PLEG wakes workers on any runtime change; the relist is its safety net.
        let prober = crate::probe::Manager::new(node.clone(), cri.clone());
        let mut engine = Engine::new(node.clone(), cri.clone(), tuning, s.runtime.engine, prober);
        let control = engine.control();
        let (collector, image_tasks) = parts::images(&s, &node, &cri, Arc::new(move || control.wake_all())).await;
        tasks.extend(image_tasks);
        // The kubelet server's certificate: its own at start, an issued one when the mirror
        // gets one (serverTLSBootstrap).
        let serving = Arc::new(crate::tls::Serving::default());
        let mirror = parts::mirror(&s, &node, runtime_version, &serving, &tx);
        let api = crate::api::Api::new(node.clone(), cri.clone(), Some(engine.control()), mirror.clone());
        api.set_images(collector);
        tasks.extend(parts::listeners(&s, &api).await?);
        // The tunnel hands its connections to the kubelet server in-process (as many as the
        // tunnel's limits let through).
        let (handoff, handed) = smol::channel::unbounded();
        let kubelet_server = parts::kubelet_server(&s, &node, &api, handed, &serving).await;
        tasks.extend(parts::tunnel(&s, &node, kubelet_server.is_some(), handoff));
        tasks.extend(kubelet_server.into_iter().flatten());
        let rollback_dir = Some(s.node.root_dir.join("rollback"));
        let url = s.sources.url.url.clone();
        let rollback = crate::rollback::Rollback::new(rollback_dir, s.rollback, parts::intake(&s), url);
        // What the runtime already runs: adopted by workers, or stopped before a pod that
        // replaced it while atoll was down may start.
        engine.adopt().await;
        Ok(Agent {
            finished: engine.finished(),
            node,
            engine,
            merger: merge::Merger::new(sources),
            admission: Default::default(),
            rollback,
            mirror,
            notifier: crate::notify::Notifier::from_env(),
            updates,
            readiness: Readiness::new(Instant::now()),
            mirror_stale: true,
            object_problems: BTreeSet::new(),
            _tasks: tasks,
            _updates_open: tx,
            settings: s,
        })
    }

    /// The loop: each event to its handler, until a stop.
    pub async fn serve(mut self, commands: smol::channel::Receiver<Command>) {
        loop {
            self.advance_readiness().await;
            // The mirror learns of every change of the desired pods once atoll is ready
            // (checked before waiting: nothing else may wake this loop for a long time).
            if let (true, Some(state), true) = (self.mirror_stale, &self.mirror, self.readiness.notified()) {
                self.mirror_stale = false;
                state.set_desired(self.merger.desired());
            }
            match self.next_event(&commands).await {
                Event::Source(update) => self.on_source(update),
                Event::Done(uid) => self.engine.worker_done(&uid),
                Event::Tick => self.on_tick(),
                Event::Command(command) => {
                    if let Flow::Stop = self.on_command(command).await {
                        break;
                    }
                }
            }
            self.feed_watchdog();
        }
        if let Some(path) = &self.settings.listeners.api_socket {
            let _ = std::fs::remove_file(path);
        }
    }

    /// The first full sync (orphans go then) and READY=1, each once.
    async fn advance_readiness(&mut self) {
        for milestone in self.readiness.advance(self.merger.all_sources_seen(), Instant::now()) {
            match milestone {
                Milestone::FirstSync { notify } => {
                    // A rejected pod the runtime still runs (admitted before a restart) goes.
                    let admission = &self.admission;
                    let desired: HashSet<PodUid> = self
                        .merger
                        .desired()
                        .filter(|p| admission.rejection(&p.uid).is_none())
                        .map(|p| p.uid.clone())
                        .collect();
                    self.engine.remove_orphans(&desired).await;
                    log::info!("first full sync done: {} pod(s) desired", desired.len());
                    if notify {
                        self.notifier.send(&format!("READY=1\nSTATUS=running {} pod(s)", desired.len()));
                    }
                }
                Milestone::ReadyLate => {
                    log::warn!(
                        "not every manifest source has answered after {:?}; reporting ready anyway",
                        readiness::READY_AT_THE_LATEST
                    );
                    self.notifier.send("READY=1\nSTATUS=waiting for a manifest source");
                }
            }
        }
    }

    /// Waits for the next event. The loop wakes on its own only to feed systemd's watchdog (at
    /// most every second), to look at rollback trials (every second while one runs) and to
    /// report ready at the latest; otherwise an idle agent's loop sleeps.
    async fn next_event(&self, commands: &smol::channel::Receiver<Command>) -> Event {
        let watchdog = self.notifier.watchdog_interval().map(|w| w.min(Duration::from_secs(1)));
        let trials = self.rollback.needs_check().then_some(crate::rollback::CHECK);
        let tick = watchdog.into_iter().chain(trials).min().map(|t| Instant::now() + t);
        let wake_at = tick.into_iter().chain(self.readiness.deadline()).min();
        smol::future::or(
            smol::future::or(
                async {
                    match self.updates.recv().await {
                        Ok(update) => Event::Source(update),
                        Err(_) => std::future::pending().await,
                    }
                },
                async {
                    match self.finished.recv().await {
                        Ok(uid) => Event::Done(uid),
                        Err(_) => std::future::pending().await,
                    }
                },
            ),
            smol::future::or(
                async { Event::Command(commands.recv().await.unwrap_or(Command::Stop("the owner went away".into()))) },
                async {
                    match wake_at {
                        Some(at) => smol::Timer::at(at).await,
                        None => std::future::pending().await,
                    };
                    Event::Tick
                },
            ),
        )
        .await
    }

    /// A source's snapshot. Objects first: a pod that starts now finds the ConfigMaps and
    /// Secrets that came with it; pods already running refresh theirs.
    fn on_source(&mut self, update: source::Update) {
        let applied = self.node.objects().set(&update.source.to_string(), update.objects.clone());
        let problems: BTreeSet<String> = applied.problems.into_iter().collect();
        for p in problems.difference(&self.object_problems) {
            log::warn!("local objects: {p}");
        }
        self.object_problems = problems;
        if applied.changed {
            self.engine.control().wake_all();
        }
        let update = self.rollback.filter(update, &self.node);
        self.apply(update);
    }

    /// The watchdog's ticks come too: trials are looked at only while there are some.
    fn on_tick(&mut self) {
        if self.rollback.needs_check() {
            for update in self.rollback.check(&self.node, SystemTime::now()) {
                self.apply(update);
            }
        }
    }

    async fn on_command(&mut self, command: Command) -> Flow {
        match command {
            Command::Reload(new) => {
                reload(&self.settings, &new, self.engine.tuning());
                self.settings = *new;
                Flow::Continue
            }
            Command::Stop(why) => {
                self.notifier.send("STOPPING=1");
                if self.settings.drain_on_exit {
                    log::info!("{why}: stopping every pod before exiting (--drain-on-exit)");
                    drain(&mut self.engine, &self.merger, &self.admission, &self.finished).await;
                } else {
                    let running = self.engine.running().len();
                    log::info!("{why}: exiting; {running} pod(s) keep running and are adopted at the next start");
                }
                Flow::Stop
            }
        }
    }

    /// One source's pods through the merge and admission to the engine.
    fn apply(&mut self, update: source::Update) {
        let changes = self.merger.apply(update, SystemTime::now());
        self.mirror_stale |= !changes.is_empty();
        let admitted = self.admission.apply(changes, &self.node);
        self.engine.apply_all(admitted);
    }

    /// The watchdog is fed from this loop, and only while the relist keeps completing.
    fn feed_watchdog(&self) {
        if self.readiness.notified() && self.notifier.watchdog_interval().is_some() {
            match self.node.stalled() {
                None => self.notifier.send("WATCHDOG=1"),
                Some(why) => log::warn!("not feeding the watchdog: {why}"),
            }
        }
    }
}

/// Stops every pod and waits (up to the longest grace period plus a minute) for their workers.
async fn drain<R: crate::cri::RuntimeService>(
    engine: &mut Engine<R>,
    merger: &merge::Merger,
    admission: &crate::admission::Admission,
    finished: &smol::channel::Receiver<PodUid>,
) {
    let pods: Vec<_> = merger.desired().filter(|p| admission.rejection(&p.uid).is_none()).cloned().collect();
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
    tuning.reload(&new.runtime.tuning);
    log::info!("SIGHUP: reloaded back-off limits, runtime classes and registry credentials; running pods untouched");
    let later = crate::config::needs_restart(old, new);
    if !later.is_empty() {
        log::warn!("SIGHUP: changes to {} take effect after a restart of atoll", later.join(", "));
    }
}
