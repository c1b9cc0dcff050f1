//! The pod sync decision, as a pure function: desired pod + what the runtime shows + back-off
//! state + probe verdicts → what to do (kubelet's computePodActions).
//!
//! No I/O and no clock: the worker observes the runtime (`Observed`), calls [`plan`], and
//! carries the [`Plan`] out. Re-planning after a partial act is always safe, because every
//! decision is made again from what the runtime shows.

use super::backoff::Backoff;
use crate::node::observed::{ContainerObs, ContainerState, Observed, ProbeVerdicts, SandboxObs, Wait, WaitReason};
use crate::pod::derived::is_sidecar;
use crate::pod::types::{Container, Pod};
use std::time::{Duration, SystemTime};

/// A container of the spec: an init container or a regular one, by index.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SpecRef {
    Init(usize),
    Regular(usize),
}

impl SpecRef {
    /// The container in `pod`, the spec this reference was made from.
    pub fn of(self, pod: &Pod) -> &Container {
        match self {
            SpecRef::Init(i) => &pod.spec.init_containers[i],
            SpecRef::Regular(i) => &pod.spec.containers[i],
        }
    }
}

/// Stop one container instance.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Kill {
    pub id: crate::cri::ids::ContainerId,
    pub name: String,
    /// kubelet's reason: `Killing` event text, e.g. "Container c failed liveness probe".
    pub message: String,
    /// The grace period when it is not the pod's: a failed probe's own
    /// `terminationGracePeriodSeconds`.
    pub grace: Option<std::time::Duration>,
}

impl Kill {
    /// Stop instance `o`, with the pod's grace period.
    pub fn new(o: &ContainerObs, message: String) -> Kill {
        Kill { id: o.id.clone(), name: o.name.clone(), message, grace: None }
    }
}

/// Start a new instance of a container.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Start {
    pub which: SpecRef,
    pub name: String,
    /// `metadata.attempt` and the restartCount annotation of the new instance.
    pub restart_count: u32,
    /// Back-off to advance when the start happens: key and the event it counts from.
    pub backoff: Option<(String, SystemTime)>,
}

impl Start {
    /// The container to start, in `pod`, the spec the plan was made from.
    pub fn container<'p>(&self, pod: &'p Pod) -> &'p Container {
        self.which.of(pod)
    }
}

/// A container that should start but must wait.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Waiting {
    pub name: String,
    pub wait: Wait,
    pub retry_in: Duration,
}

/// The actions of one sync, to be carried out in order: kills, sandbox, starts.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Plan {
    /// Stop every container and every sandbox of the pod.
    pub kill_pod: bool,
    /// Create a new sandbox with this attempt number.
    pub create_sandbox: Option<u32>,
    /// The sandbox to create containers in, when none is created.
    pub sandbox_id: Option<String>,
    /// Remove init containers of old sandboxes before initialising anew.
    pub purge_init: bool,
    pub kill: Vec<Kill>,
    pub start: Vec<Start>,
    pub waiting: Vec<Waiting>,
}

/// Garbage to collect (kubelet's container GC with MaxPerPodContainer 1): for each container
/// name, every exited instance except the newest one, and every not-ready sandbox except the
/// newest that no longer holds a container.
pub fn garbage(obs: &Observed) -> (Vec<&ContainerObs>, Vec<&SandboxObs>) {
    let mut seen_exited: Vec<&str> = Vec::new();
    let mut containers = Vec::new();
    for c in &obs.containers {
        if c.state != ContainerState::Exited {
            continue;
        }
        if seen_exited.contains(&c.name.as_str()) {
            containers.push(c);
        } else {
            seen_exited.push(&c.name);
        }
    }
    let sandboxes = obs
        .sandboxes
        .iter()
        .skip(1)
        .filter(|s| !s.ready)
        .filter(|s| obs.containers.iter().all(|c| c.sandbox_id != s.id || containers.iter().any(|g| g.id == c.id)))
        .collect();
    (containers, sandboxes)
}

/// The back-off key of a container (kubelet's stable key: a new spec starts afresh).
pub fn backoff_key(pod: &Pod, c: &Container) -> String {
    format!("{}_{}_{}_{}_{}", pod.metadata.name, pod.metadata.namespace, pod.metadata.uid, c.name, container_hash(c))
}

/// `io.kubernetes.container.hash`: FNV-32a over the container's name and image (what current
/// kubelet hashes), so only an image change restarts a running container.
pub fn container_hash(c: &Container) -> String {
    let text = format!("{{\"name\":{:?},\"image\":{:?}}}", c.name, c.image);
    let h = text.bytes().fold(0x811c9dc5u32, |h, b| (h ^ u32::from(b)).wrapping_mul(0x01000193));
    format!("{h:x}")
}

fn restart_policy(pod: &Pod) -> &str {
    pod.spec.restart_policy.as_deref().unwrap_or("Always")
}

/// Whether a regular container that is not running should start again (kubelet's
/// ShouldContainerBeRestarted, for a pod that is not being deleted).
fn should_restart(pod: &Pod, newest: Option<&ContainerObs>) -> bool {
    let Some(c) = newest else { return true };
    match c.state {
        ContainerState::Running => false,
        ContainerState::Unknown | ContainerState::Created => true,
        ContainerState::Exited => match restart_policy(pod) {
            "Never" => false,
            "OnFailure" => c.exit_code != 0,
            _ => true,
        },
    }
}

/// Decides one sync.
pub fn plan(
    pod: &Pod,
    obs: &Observed,
    probes: &ProbeVerdicts,
    backoff: &Backoff,
    now: SystemTime,
    deleting: bool,
) -> Plan {
    let pl = Planner { pod, obs, probes, backoff, now };
    if deleting {
        return pl.stop_pod();
    }
    let host_network = pod.spec.host_network;
    let ready = obs.sandboxes.iter().filter(|s| s.ready).count();
    match obs.sandboxes.first() {
        Some(s) if ready <= 1 && s.ready && s.host_network == host_network && (host_network || !s.ip.is_empty()) => {
            pl.in_sandbox(s)
        }
        newest => pl.new_sandbox(newest.is_some()),
    }
}

/// What one decision looks at.
struct Planner<'a> {
    pod: &'a Pod,
    obs: &'a Observed,
    probes: &'a ProbeVerdicts,
    backoff: &'a Backoff,
    now: SystemTime,
}

impl Planner<'_> {
    /// Stop every container and sandbox of the pod, and start nothing.
    fn stop_pod(&self) -> Plan {
        Plan { kill_pod: true, kill: running_or_unknown(self.obs, "Stopping container"), ..Plan::default() }
    }

    /// The sandbox is gone, not ready, or not what the pod needs: a new one, and every
    /// container runs again in it (except OnFailure ones that succeeded). `had_one`: an old
    /// sandbox is there to stop.
    fn new_sandbox(&self, had_one: bool) -> Plan {
        let (pod, obs) = (self.pod, self.obs);
        let attempt = obs.sandboxes.iter().map(|s| s.attempt).max().map_or(0, |a| a + 1);
        // A Never pod whose sandbox went away after it ran is finished, not restarted.
        if restart_policy(pod) == "Never" && attempt != 0 && !obs.containers.is_empty() {
            return self.stop_pod();
        }
        let succeeded =
            |c: &Container| obs.newest(&c.name).is_some_and(|o| o.state == ContainerState::Exited && o.exit_code == 0);
        let to_start: Vec<usize> = (0..pod.spec.containers.len())
            .filter(|i| !(restart_policy(pod) == "OnFailure" && succeeded(&pod.spec.containers[*i])))
            .collect();
        if to_start.is_empty() && initialised(pod, obs) && had_one {
            // Nothing left to run (OnFailure/Never pods that finished): only clean up.
            return self.stop_pod();
        }
        let mut p = Plan {
            kill_pod: had_one,
            kill: running_or_unknown(obs, "Stopping container"),
            create_sandbox: Some(attempt),
            purge_init: had_one,
            ..Plan::default()
        };
        if !pod.spec.init_containers.is_empty() {
            self.start(&mut p, SpecRef::Init(0));
        } else {
            for i in to_start {
                self.start(&mut p, SpecRef::Regular(i));
            }
        }
        p
    }

    /// The sandbox stays: containers in an unknown state are stopped, then the init
    /// containers in order (or the sidecars alongside), then the regular containers.
    fn in_sandbox(&self, sandbox: &SandboxObs) -> Plan {
        let (pod, obs) = (self.pod, self.obs);
        let mut p = Plan { sandbox_id: Some(sandbox.id.clone()), ..Plan::default() };
        // Containers whose state is unknown are stopped before anything replaces them.
        for c in pod.spec.init_containers.iter().chain(pod.spec.containers.iter()) {
            if let Some(o) = obs.newest(&c.name).filter(|o| o.state == ContainerState::Unknown) {
                p.kill.push(Kill::new(o, format!("Container {} is in an unknown state", c.name)));
            }
        }
        if !initialised(pod, obs) {
            if self.init_containers(&mut p) {
                return p;
            }
        } else {
            self.sidecars(&mut p);
        }
        let keep = self.regular(&mut p);
        if initialised(pod, obs) && keep == 0 && p.start.is_empty() && p.waiting.is_empty() {
            // Everything has finished for good: release the sandbox (and stop sidecars).
            self.stop_all(&mut p);
        }
        p
    }

    /// Stop every container and the sandbox instead of what `p` planned.
    fn stop_all(&self, p: &mut Plan) {
        p.kill_pod = true;
        p.kill = running_or_unknown(self.obs, "Stopping container");
        p.start.clear();
    }

    /// Init containers, strictly in order; true when the plan is complete (the next one starts
    /// or runs, or the pod failed).
    fn init_containers(&self, p: &mut Plan) -> bool {
        let (pod, obs) = (self.pod, self.obs);
        for (i, c) in pod.spec.init_containers.iter().enumerate() {
            let o = obs.newest(&c.name);
            let sidecar = is_sidecar(c);
            match o {
                Some(o) if o.state == ContainerState::Running && sidecar => {
                    if let Some(k) = probe_kill(c, o, self.probes) {
                        p.kill.push(k);
                        self.start(p, SpecRef::Init(i));
                        return true;
                    }
                    // A started sidecar lets the next init container run.
                }
                Some(o) if o.state == ContainerState::Running => return true, // wait for it to finish
                Some(o) if o.state == ContainerState::Exited && !sidecar && o.exit_code == 0 => {}
                Some(o) if o.state == ContainerState::Exited && !sidecar && restart_policy(pod) == "Never" => {
                    // A failed init container of a Never pod fails the pod.
                    self.stop_all(p);
                    return true;
                }
                Some(o) if o.state == ContainerState::Created => {
                    p.kill.push(Kill::new(o, format!("Container {} was created but never started", c.name)));
                    self.start(p, SpecRef::Init(i));
                    return true;
                }
                _ => {
                    self.start(p, SpecRef::Init(i));
                    return true;
                }
            }
        }
        false
    }

    /// Sidecars keep running alongside the regular containers.
    fn sidecars(&self, p: &mut Plan) {
        for (i, c) in self.pod.spec.init_containers.iter().enumerate().filter(|(_, c)| is_sidecar(c)) {
            match self.obs.newest(&c.name) {
                Some(o) if o.state == ContainerState::Running => {
                    if let Some(k) = probe_kill(c, o, self.probes) {
                        p.kill.push(k);
                        self.start(p, SpecRef::Init(i));
                    }
                }
                _ => self.start(p, SpecRef::Init(i)),
            }
        }
    }

    /// Regular containers, in spec order; returns how many keep running as they are.
    fn regular(&self, p: &mut Plan) -> usize {
        let mut keep = 0;
        for (i, c) in self.pod.spec.containers.iter().enumerate() {
            let o = self.obs.newest(&c.name);
            match o {
                Some(o) if o.state == ContainerState::Running => {
                    if !o.hash.is_empty() && o.hash != container_hash(c) {
                        p.kill
                            .push(Kill::new(o, format!("Container {} definition changed, will be restarted", c.name)));
                        self.start(p, SpecRef::Regular(i));
                    } else if let Some(k) = probe_kill(c, o, self.probes) {
                        let restart = restart_policy(self.pod) != "Never";
                        let message = if restart { format!("{}, will be restarted", k.message) } else { k.message };
                        p.kill.push(Kill { message, ..k });
                        if restart {
                            self.start(p, SpecRef::Regular(i));
                        }
                    } else {
                        keep += 1;
                    }
                }
                Some(o) if o.state == ContainerState::Created => {
                    p.kill.push(Kill::new(o, format!("Container {} was created but never started", c.name)));
                    self.start(p, SpecRef::Regular(i));
                }
                _ if should_restart(self.pod, o) => self.start(p, SpecRef::Regular(i)),
                _ => {}
            }
        }
        keep
    }

    /// Adds a start for `which`, or a CrashLoopBackOff wait if its back-off has not run out.
    fn start(&self, p: &mut Plan, which: SpecRef) {
        push_start(p, self.pod, self.obs, self.backoff, self.now, which);
    }
}

/// Whether the pod's init containers are done: all non-sidecar ones exited 0 and every
/// sidecar has started, or a regular container has already run (then they never re-run).
fn initialised(pod: &Pod, obs: &Observed) -> bool {
    if pod.spec.containers.iter().any(|c| obs.newest(&c.name).is_some()) {
        return true;
    }
    pod.spec.init_containers.iter().all(|c| match obs.newest(&c.name) {
        Some(o) if is_sidecar(c) => o.state == ContainerState::Running,
        Some(o) => o.state == ContainerState::Exited && o.exit_code == 0,
        None => false,
    })
}

fn probe_kill(c: &Container, o: &ContainerObs, probes: &ProbeVerdicts) -> Option<Kill> {
    // A probe's own terminationGracePeriodSeconds wins over the pod's (kubelet).
    let grace = |probe: &Option<Box<crate::pod::types::Probe>>| {
        probe.as_ref().and_then(|p| p.termination_grace_period_seconds).map(crate::deadline::secs)
    };
    let (what, probe) = if probes.liveness_failed.contains(&o.id) {
        ("liveness", &c.liveness_probe)
    } else if probes.startup_failed.contains(&o.id) {
        ("startup", &c.startup_probe)
    } else {
        return None;
    };
    Some(Kill { grace: grace(probe), ..Kill::new(o, format!("Container {} failed {what} probe", c.name)) })
}

fn running_or_unknown(obs: &Observed, message: &str) -> Vec<Kill> {
    obs.containers
        .iter()
        .filter(|c| matches!(c.state, ContainerState::Running | ContainerState::Unknown | ContainerState::Created))
        .map(|c| Kill::new(c, format!("{message} {}", c.name)))
        .collect()
}

/// Adds a start for `which`, or a CrashLoopBackOff wait if its back-off has not run out.
fn push_start(p: &mut Plan, pod: &Pod, obs: &Observed, backoff: &Backoff, now: SystemTime, which: SpecRef) {
    let c = which.of(pod);
    let newest = obs.newest(&c.name);
    let restart_count = newest.map_or(0, |o| o.restart_count + 1);
    let key = backoff_key(pod, c);
    let last_exit = obs
        .containers
        .iter()
        .find(|o| o.name == c.name && o.state == ContainerState::Exited)
        .and_then(|o| o.finished_at);
    let advance = match last_exit {
        Some(finished) => {
            if let Some(wait) = backoff.remaining(&key, finished, now) {
                let message = format!(
                    "back-off {:?} restarting failed container={} pod={}",
                    backoff.delay(&key).unwrap_or_default(),
                    c.name,
                    pod.metadata.name
                );
                p.waiting.push(Waiting {
                    name: c.name.clone(),
                    wait: Wait { reason: WaitReason::CrashLoopBackOff, message },
                    retry_in: wait,
                });
                return;
            }
            Some((key, finished))
        }
        None => None,
    };
    p.start.push(Start { which, name: c.name.clone(), restart_count, backoff: advance });
}

#[cfg(test)]
mod tests;
