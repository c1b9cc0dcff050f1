//! Liveness, readiness and startup probes with kubelet's semantics (pkg/kubelet/prober).
//!
//! A pod worker owns one `PodProbes` (through the narrow `node::probing` traits, started by the
//! [`Manager`] the agent gives the engine, on the engine's own runtime): a task per (container,
//! probe kind) on smol's executor, each a timer and, while it probes, a socket or a CRI call
//! through that runtime; never a thread. After
//! each sync the worker tells the probes what the runtime shows (`update`); the probes publish
//! results, which the worker reads as restart verdicts (`verdicts`) and as readiness and
//! startedness for the pod's status (`view`). A published change wakes the worker. The
//! actions themselves (exec, httpGet, tcpSocket, grpc) are `handlers`'.
//!
//! Each tick, as kubelet's probe worker (the decision is `progress`'s, a pure state machine;
//! the task here keeps the clock, runs the attempts and publishes): nothing before the container has an ID; a new ID
//! resets the result (readiness Failure, liveness Success, startup Unknown) and lifts the hold;
//! a held probe (after a liveness or startup failure, until the container is replaced) does
//! nothing; a container that is not running reads Failure; a deleted pod's liveness and startup
//! read Success and stop; nothing runs before initialDelaySeconds; until the startup probe has
//! succeeded only it runs, after that only liveness and readiness. A result is published after
//! failureThreshold (successThreshold) equal results in a row; an attempt that ends in an
//! error is not counted. While the agent itself is starting, each probe's first tick is
//! delayed by a part of its period spread by pod, container, kind and process (`jitter`), so a box with many pods does not probe them all at
//! once after a reboot.

mod progress;

pub use progress::{ContainerView, Kind, ProbeResult, Timing};

use crate::cri::RuntimeService;
use crate::handlers;
use crate::node::observed::{ContainerState, Observed, ProbeVerdicts, ProbeView};
use crate::node::probing::Prober;
use crate::node::Node;
use crate::pod::types::{Container, Pod};
use progress::{jitter, next_tick, Progress, Then};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

#[derive(Default)]
struct State {
    targets: HashMap<String, ContainerView>,
    pod_ip: String,
    deleting: bool,
    /// Published results by (container, kind): for which container ID, and what.
    results: HashMap<(String, Kind), (crate::cri::ids::ContainerId, ProbeResult)>,
    /// Counters by (container, kind), for metrics and benchmarks.
    stats: HashMap<(String, Kind), Stats>,
}

/// What one probe has done since its pod's worker started.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    pub successes: u64,
    pub failures: u64,
    /// Attempts that ended in an error (not counted towards thresholds).
    pub errors: u64,
    /// Time spent in attempts, all together.
    pub busy: Duration,
    /// The latest a tick has woken after its scheduled time.
    pub max_lateness: Duration,
    /// Ticks in all (attempts, and ticks that had nothing to do).
    pub ticks: u64,
}

/// A pod's probes.
pub struct PodProbes {
    state: Arc<Mutex<State>>,
    wake: smol::channel::Receiver<()>,
    /// (container, kind) pairs that have a probe.
    kinds: Vec<(String, Kind)>,
    _tasks: Vec<smol::Task<()>>,
}

/// Starts each pod's probes on the node.
pub struct Manager<R> {
    node: Arc<Node>,
    /// The runtime the engine runs the pods on: exec probes go through it.
    runtime: R,
}

impl<R: RuntimeService> Manager<R> {
    pub fn new(node: Arc<Node>, runtime: R) -> Arc<Manager<R>> {
        Arc::new(Manager { node, runtime })
    }
}

impl<R: RuntimeService> Prober for Manager<R> {
    fn start(&self, pod: &Pod) -> Box<dyn crate::node::probing::PodProbes> {
        Box::new(PodProbes::start(&self.node, &self.runtime, pod))
    }
}

impl crate::node::probing::PodProbes for PodProbes {
    fn update(&self, pod: &Pod, obs: &Observed, pod_ip: &str, deleting: bool) {
        PodProbes::update(self, pod, obs, pod_ip, deleting)
    }
    fn verdicts(&self) -> ProbeVerdicts {
        PodProbes::verdicts(self)
    }
    fn view(&self) -> ProbeView {
        PodProbes::view(self)
    }
    fn changed(&self) -> std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send + '_>> {
        Box::pin(PodProbes::changed(self))
    }
}

impl PodProbes {
    /// Starts a task per probe of the pod's regular and sidecar containers.
    pub fn start<R: RuntimeService>(node: &Arc<Node>, runtime: &R, pod: &Pod) -> PodProbes {
        let state = Arc::new(Mutex::new(State::default()));
        let (tx, rx) = smol::channel::bounded(1);
        let mut kinds = Vec::new();
        let mut tasks = Vec::new();
        let pod_arc = Arc::new(pod.clone());
        let containers = pod
            .spec
            .containers
            .iter()
            .chain(pod.spec.init_containers.iter().filter(|c| crate::pod::derived::is_sidecar(c)));
        for c in containers {
            // One copy of the container per container, shared by its probes.
            let shared_c = Arc::new(c.clone());
            for kind in [Kind::Startup, Kind::Liveness, Kind::Readiness] {
                let Some(probe) = kind.of(c) else { continue };
                kinds.push((c.name.clone(), kind));
                let task = Task {
                    node: node.clone(),
                    runtime: runtime.clone(),
                    pod: pod_arc.clone(),
                    container: shared_c.clone(),
                    kind,
                    timing: Timing::of(probe),
                    has_startup: c.startup_probe.is_some(),
                    state: state.clone(),
                    wake: tx.clone(),
                };
                tasks.push(crate::task::spawn(task.run()));
            }
        }
        PodProbes { state, wake: rx, kinds, _tasks: tasks }
    }

    /// Whether the pod has any probe at all.
    pub fn is_empty(&self) -> bool {
        self.kinds.is_empty()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        crate::locks::lock(&self.state)
    }

    /// Tells the probes what the runtime shows after a sync.
    pub fn update(&self, pod: &Pod, obs: &Observed, pod_ip: &str, deleting: bool) {
        let never = pod.spec.restart_policy.as_deref() == Some("Never");
        let mut st = self.lock();
        st.pod_ip = pod_ip.to_string();
        st.deleting = deleting;
        for (name, _) in &self.kinds {
            let target = match obs.newest(name) {
                Some(o) => ContainerView {
                    container_id: o.id.clone(),
                    running: o.state == ContainerState::Running,
                    finished_for_good: never && o.state == ContainerState::Exited,
                    started_at: o.started_at,
                },
                None => ContainerView::default(),
            };
            st.targets.insert(name.clone(), target);
        }
    }

    /// Running containers whose liveness or startup probe has failed.
    pub fn verdicts(&self) -> ProbeVerdicts {
        let st = self.lock();
        let mut v = ProbeVerdicts::default();
        for ((name, kind), (id, outcome)) in &st.results {
            let current = st.targets.get(name).is_some_and(|t| t.running && &t.container_id == id);
            if !current || *outcome != ProbeResult::Failure {
                continue;
            }
            match kind {
                Kind::Liveness => v.liveness_failed.push(id.clone()),
                Kind::Startup => v.startup_failed.push(id.clone()),
                Kind::Readiness => {}
            }
        }
        v
    }

    /// Readiness and startedness by container ID, for the pod's status.
    pub fn view(&self) -> ProbeView {
        let st = self.lock();
        let mut view = ProbeView::default();
        for ((name, kind), (id, outcome)) in &st.results {
            if st.targets.get(name).is_none_or(|t| &t.container_id != id) {
                continue;
            }
            match kind {
                Kind::Readiness => view.ready.insert(id.clone(), *outcome == ProbeResult::Success),
                Kind::Startup => view.started.insert(id.clone(), *outcome == ProbeResult::Success),
                Kind::Liveness => None,
            };
        }
        view
    }

    /// Each probe's counters: (container, kind, stats).
    pub fn stats(&self) -> Vec<(String, Kind, Stats)> {
        let st = self.lock();
        let mut all: Vec<_> = st.stats.iter().map(|((c, k), s)| (c.clone(), *k, s.clone())).collect();
        all.sort_by(|a, b| (&a.0, a.1).cmp(&(&b.0, b.1)));
        all
    }

    /// Waits until a probe publishes a change.
    pub async fn changed(&self) {
        if self.kinds.is_empty() {
            std::future::pending::<()>().await;
        }
        let _ = self.wake.recv().await;
    }
}

struct Task<R> {
    node: Arc<Node>,
    runtime: R,
    pod: Arc<Pod>,
    container: Arc<Container>,
    kind: Kind,
    timing: Timing,
    has_startup: bool,
    state: Arc<Mutex<State>>,
    wake: smol::channel::Sender<()>,
}

enum Step {
    Continue,
    Stop,
}

impl<R: RuntimeService> Task<R> {
    async fn run(self) {
        let period = self.timing.period;
        if self.node.started().elapsed() < period {
            smol::Timer::after(jitter(
                &self.pod.metadata.uid,
                &self.container.name,
                self.kind,
                period,
                std::process::id(),
            ))
            .await;
        }
        let mut progress = Progress::new(self.kind, self.timing);
        let mut next = Instant::now();
        loop {
            let late = Instant::now().saturating_duration_since(next);
            {
                let mut st = self.lock();
                let s = st.stats.entry((self.container.name.clone(), self.kind)).or_default();
                s.ticks += 1;
                s.max_lateness = s.max_lateness.max(late);
            }
            if let Step::Stop = self.tick(&mut progress).await {
                log::debug!("pod {}: {} probe of {} stopped", self.pod.key(), self.kind.name(), self.container.name);
                return;
            }
            // A fixed schedule; ticks missed while an attempt ran long are skipped, not piled up.
            let Some(due) = next_tick(next, Instant::now(), period) else {
                return; // a period past the clock's range: this probe never runs again
            };
            next = due;
            smol::Timer::at(next).await;
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        crate::locks::lock(&self.state)
    }

    fn publish(&self, id: &crate::cri::ids::ContainerId, outcome: ProbeResult) {
        let key = (self.container.name.clone(), self.kind);
        let changed = {
            let mut st = self.lock();
            let new = (id.clone(), outcome);
            let changed = st.results.get(&key) != Some(&new);
            st.results.insert(key, new);
            changed
        };
        if changed {
            let _ = self.wake.try_send(());
        }
    }

    /// One tick: what the pod's worker last saw, the decision ([`Progress`]), and the attempt.
    async fn tick(&self, p: &mut Progress) -> Step {
        let (target, pod_ip, deleting, started) = {
            let st = self.lock();
            let Some(t) = st.targets.get(&self.container.name).cloned() else { return Step::Continue };
            let started = !self.has_startup
                || st.results.get(&(self.container.name.clone(), Kind::Startup))
                    == Some(&(t.container_id.clone(), ProbeResult::Success));
            (t, st.pod_ip.clone(), st.deleting, started)
        };
        let (publish, then) = p.before(&target, deleting, started, SystemTime::now());
        for result in publish {
            self.publish(p.container_id(), result);
        }
        match then {
            Then::Wait => return Step::Continue,
            Then::Stop => return Step::Stop,
            Then::Attempt => {}
        }
        let Some(outcome) = self.attempt(&target.container_id, &pod_ip).await else { return Step::Continue };
        if let Some(result) = p.after(outcome) {
            self.publish(p.container_id(), result);
        }
        Step::Continue
    }

    /// Runs the probe once, counts it, and says what it found (`None`: an error, which is not
    /// counted towards the thresholds).
    async fn attempt(&self, container_id: &str, pod_ip: &str) -> Option<ProbeResult> {
        let at = handlers::Target { container_id, pod_ip };
        let began = Instant::now();
        let probe = self.kind.of(&self.container)?;
        // Boxed: an attempt's state (sockets, TLS, buffers) exists only while it runs, so an
        // idle probe task stays small.
        let attempt = Box::pin(handlers::attempt(&self.runtime, &self.container, probe, &at)).await;
        self.count(&attempt, began.elapsed());
        let (kind, name) = (self.kind.name(), &self.container.name);
        match &attempt {
            handlers::Attempt::Success => Some(ProbeResult::Success),
            handlers::Attempt::Warning(w) => {
                let message = format!("{kind} probe warning: container {name}: {w}");
                self.node.events().record(&self.pod, true, "ProbeWarning", &message);
                Some(ProbeResult::Success)
            }
            handlers::Attempt::Failure(why) => {
                let message = format!("{kind} probe failed: container {name}: {why}");
                self.node.events().record(&self.pod, true, "Unhealthy", &message);
                Some(ProbeResult::Failure)
            }
            handlers::Attempt::Error(e) => {
                log::debug!("pod {}: {kind} probe of {name} errored: {e}", self.pod.key());
                None
            }
        }
    }

    /// An attempt in the metrics and the probe's counters.
    fn count(&self, attempt: &handlers::Attempt, took: Duration) {
        let result = match attempt {
            handlers::Attempt::Success | handlers::Attempt::Warning(_) => "successful",
            handlers::Attempt::Failure(_) => "failed",
            handlers::Attempt::Error(_) => "unknown",
        };
        let probe_type = self.kind.name();
        crate::metrics::add(&crate::metrics::PROBES, &[("probe_type", probe_type), ("result", result)], 1.0);
        crate::metrics::add(&crate::metrics::PROBE_SECONDS, &[("probe_type", probe_type)], took.as_secs_f64());
        let m = &self.pod.metadata;
        let labels = [
            ("probe_type", probe_type),
            ("result", result),
            ("container", self.container.name.as_str()),
            ("pod", m.name.as_str()),
            ("namespace", m.namespace.as_str()),
            ("pod_uid", m.uid.as_str()),
        ];
        // kubelet's series: an attempt that errored is dropped, as kubelet's worker drops it;
        // successes are timed, failures are not.
        if result != "unknown" {
            crate::metrics::add(&crate::metrics::PROBE_RESULTS, &labels, 1.0);
        }
        if result == "successful" {
            let timed = labels.get(..1).into_iter().flatten().chain(labels.get(2..5).into_iter().flatten());
            let timed: Vec<(&'static str, &str)> = timed.copied().collect();
            crate::metrics::observe(&crate::metrics::PROBE_SECONDS_KUBELET, &timed, took.as_secs_f64());
        }
        let mut st = self.lock();
        let s = st.stats.entry((self.container.name.clone(), self.kind)).or_default();
        s.busy += took;
        match attempt {
            handlers::Attempt::Success | handlers::Attempt::Warning(_) => s.successes += 1,
            handlers::Attempt::Failure(_) => s.failures += 1,
            handlers::Attempt::Error(_) => s.errors += 1,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn running(name: &str, id: &str, started_at: SystemTime) -> Observed {
        Observed {
            sandboxes: vec![],
            containers: vec![crate::node::observed::ContainerObs::running(id, name, "s", Some(started_at))],
        }
    }

    /// Thresholds, initial delay and the liveness hold, with a tcpSocket probe against a
    /// listener on 127.0.0.1 that the test opens and closes.
    #[test]
    fn thresholds_initial_delay_and_hold_are_honoured() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let pod: Pod = serde_json::from_str(&format!(
            r#"{{"metadata":{{"name":"p","uid":"u"}},"spec":{{"containers":[{{"name":"c","image":"x",
            "readinessProbe":{{"tcpSocket":{{"host":"127.0.0.1","port":{port}}},"periodSeconds":1,"initialDelaySeconds":2,"successThreshold":2,"failureThreshold":2}},
            "livenessProbe":{{"tcpSocket":{{"host":"127.0.0.1","port":{port}}},"periodSeconds":1,"failureThreshold":2}}}}]}}}}"#
        ))
        .unwrap();
        let node = Node::sample();
        let probes = smol::block_on(async { PodProbes::start(&node, &crate::cri::fake::FakeRuntime::default(), &pod) });
        let started = SystemTime::now();
        let t0 = Instant::now();
        probes.update(&pod, &running("c", "id1", started), "127.0.0.1", false);
        let stat =
            |kind: Kind| probes.stats().into_iter().find(|(_, k, _)| *k == kind).map(|(_, _, s)| s).unwrap_or_default();
        let wait = |what: &str, limit: Duration, check: &dyn Fn() -> bool| {
            let deadline = Instant::now() + limit;
            while !check() {
                assert!(Instant::now() < deadline, "timed out waiting for {what}");
                std::thread::sleep(Duration::from_millis(20));
            }
        };
        // Not ready before two successes, and no attempt before the initial delay.
        wait("readiness", Duration::from_secs(8), &|| probes.view().ready.get("id1") == Some(&true));
        let r = stat(Kind::Readiness);
        assert!(r.successes >= 2, "ready after {} successes", r.successes);
        assert!(
            t0.elapsed() >= Duration::from_secs(3),
            "the first attempt waits for initialDelaySeconds: {:?}",
            t0.elapsed()
        );
        assert!(probes.verdicts().liveness_failed.is_empty());

        // Close the port: readiness drops after two failures; liveness fails after two and holds.
        drop(listener);
        wait("unready", Duration::from_secs(8), &|| probes.view().ready.get("id1") == Some(&false));
        assert!(stat(Kind::Readiness).failures >= 2);
        wait("the liveness verdict", Duration::from_secs(8), &|| {
            probes.verdicts().liveness_failed == vec!["id1".to_string()]
        });
        let held = stat(Kind::Liveness).failures;
        std::thread::sleep(Duration::from_millis(2500));
        assert_eq!(stat(Kind::Liveness).failures, held, "no liveness attempt while held");
        assert!(stat(Kind::Readiness).failures > 2, "readiness keeps probing");

        // A new instance lifts the hold and starts from the initial results.
        probes.update(&pod, &running("c", "id2", SystemTime::now()), "127.0.0.1", false);
        wait("liveness probing again", Duration::from_secs(6), &|| stat(Kind::Liveness).failures > held);
        assert_eq!(probes.view().ready.get("id2"), Some(&false), "readiness starts at Failure");
        // The deleted pod's liveness reads Success and stops.
        probes.update(&pod, &running("c", "id2", SystemTime::now()), "127.0.0.1", true);
        wait("liveness success on deletion", Duration::from_secs(4), &|| probes.verdicts().liveness_failed.is_empty());
    }
}
