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
    pub id: String,
    pub name: String,
    /// kubelet's reason: `Killing` event text, e.g. "Container c failed liveness probe".
    pub message: String,
    /// The grace period when it is not the pod's: a failed probe's own
    /// `terminationGracePeriodSeconds`.
    pub grace: Option<std::time::Duration>,
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
    let mut p = Plan::default();
    if deleting {
        p.kill_pod = true;
        p.kill = running_or_unknown(obs, "Stopping container");
        return p;
    }
    let host_network = pod.spec.host_network;
    let newest = obs.sandboxes.first();
    let max_attempt = obs.sandboxes.iter().map(|s| s.attempt).max();
    let ready = obs.sandboxes.iter().filter(|s| s.ready).count();
    let sandbox_changed = match newest {
        None => true,
        Some(s) => ready > 1 || !s.ready || s.host_network != host_network || (!host_network && s.ip.is_empty()),
    };

    if sandbox_changed {
        let attempt = max_attempt.map_or(0, |a| a + 1);
        // A Never pod whose sandbox went away after it ran is finished, not restarted.
        if restart_policy(pod) == "Never" && attempt != 0 && !obs.containers.is_empty() {
            p.kill_pod = true;
            p.kill = running_or_unknown(obs, "Stopping container");
            return p;
        }
        let initialised = initialised(pod, obs);
        // In a new sandbox every container runs again, except OnFailure ones that succeeded.
        let succeeded =
            |c: &Container| obs.newest(&c.name).is_some_and(|o| o.state == ContainerState::Exited && o.exit_code == 0);
        let to_start: Vec<usize> = pod
            .spec
            .containers
            .iter()
            .enumerate()
            .filter(|(_, c)| !(restart_policy(pod) == "OnFailure" && succeeded(c)))
            .map(|(i, _)| i)
            .collect();
        if to_start.is_empty() && initialised && newest.is_some() {
            // Nothing left to run (OnFailure/Never pods that finished): only clean up.
            p.kill_pod = true;
            p.kill = running_or_unknown(obs, "Stopping container");
            return p;
        }
        p.kill_pod = newest.is_some();
        p.kill = running_or_unknown(obs, "Stopping container");
        p.create_sandbox = Some(attempt);
        p.purge_init = newest.is_some();
        if !pod.spec.init_containers.is_empty() {
            push_start(&mut p, pod, obs, backoff, now, SpecRef::Init(0));
        } else {
            for i in to_start {
                push_start(&mut p, pod, obs, backoff, now, SpecRef::Regular(i));
            }
        }
        return p;
    }

    let sandbox = newest.expect("a sandbox exists when it has not changed");
    p.sandbox_id = Some(sandbox.id.clone());

    // Containers whose state is unknown are stopped before anything replaces them.
    for c in pod.spec.init_containers.iter().chain(pod.spec.containers.iter()) {
        if let Some(o) = obs.newest(&c.name) {
            if o.state == ContainerState::Unknown {
                p.kill.push(Kill {
                    id: o.id.clone(),
                    name: c.name.clone(),
                    message: format!("Container {} is in an unknown state", c.name),
                    grace: None,
                });
            }
        }
    }

    // Init containers, strictly in order.
    if !initialised(pod, obs) {
        for (i, c) in pod.spec.init_containers.iter().enumerate() {
            let o = obs.newest(&c.name);
            let sidecar = is_sidecar(c);
            match o.map(|o| o.state) {
                Some(ContainerState::Running) if sidecar => {
                    if let Some(k) = probe_kill(c, o.expect("running"), probes) {
                        p.kill.push(k);
                        push_start(&mut p, pod, obs, backoff, now, SpecRef::Init(i));
                        return p;
                    }
                    continue; // a started sidecar lets the next init container run
                }
                Some(ContainerState::Running) => return p, // wait for it to finish
                Some(ContainerState::Exited) if !sidecar && o.is_some_and(|o| o.exit_code == 0) => continue,
                Some(ContainerState::Exited) if !sidecar && restart_policy(pod) == "Never" => {
                    // A failed init container of a Never pod fails the pod.
                    p.kill_pod = true;
                    p.kill = running_or_unknown(obs, "Stopping container");
                    return p;
                }
                Some(ContainerState::Created) => {
                    p.kill.push(Kill {
                        id: o.expect("created").id.clone(),
                        name: c.name.clone(),
                        message: format!("Container {} was created but never started", c.name),
                        grace: None,
                    });
                    push_start(&mut p, pod, obs, backoff, now, SpecRef::Init(i));
                    return p;
                }
                _ => {
                    push_start(&mut p, pod, obs, backoff, now, SpecRef::Init(i));
                    return p;
                }
            }
        }
    } else {
        // Sidecars keep running alongside the regular containers.
        for (i, c) in pod.spec.init_containers.iter().enumerate().filter(|(_, c)| is_sidecar(c)) {
            match obs.newest(&c.name) {
                Some(o) if o.state == ContainerState::Running => {
                    if let Some(k) = probe_kill(c, o, probes) {
                        p.kill.push(k);
                        push_start(&mut p, pod, obs, backoff, now, SpecRef::Init(i));
                    }
                }
                _ => push_start(&mut p, pod, obs, backoff, now, SpecRef::Init(i)),
            }
        }
    }

    // Regular containers, in spec order.
    let mut keep = 0;
    for (i, c) in pod.spec.containers.iter().enumerate() {
        let o = obs.newest(&c.name);
        match o {
            Some(o) if o.state == ContainerState::Running => {
                let changed = !o.hash.is_empty() && o.hash != container_hash(c);
                if changed {
                    p.kill.push(Kill {
                        id: o.id.clone(),
                        name: c.name.clone(),
                        message: format!("Container {} definition changed, will be restarted", c.name),
                        grace: None,
                    });
                    push_start(&mut p, pod, obs, backoff, now, SpecRef::Regular(i));
                } else if let Some(k) = probe_kill(c, o, probes) {
                    let restart = restart_policy(pod) != "Never";
                    p.kill.push(Kill {
                        message: if restart { format!("{}, will be restarted", k.message) } else { k.message },
                        ..k
                    });
                    if restart {
                        push_start(&mut p, pod, obs, backoff, now, SpecRef::Regular(i));
                    }
                } else {
                    keep += 1;
                }
            }
            Some(o) if o.state == ContainerState::Created => {
                p.kill.push(Kill {
                    id: o.id.clone(),
                    name: c.name.clone(),
                    message: format!("Container {} was created but never started", c.name),
                    grace: None,
                });
                push_start(&mut p, pod, obs, backoff, now, SpecRef::Regular(i));
            }
            _ => {
                if should_restart(pod, o) {
                    push_start(&mut p, pod, obs, backoff, now, SpecRef::Regular(i));
                }
            }
        }
    }
    if initialised(pod, obs) && keep == 0 && p.start.is_empty() && p.waiting.is_empty() {
        // Everything has finished for good: release the sandbox (and stop sidecars).
        p.kill_pod = true;
        p.kill = running_or_unknown(obs, "Stopping container");
        p.start.clear();
    }
    p
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
    if probes.liveness_failed.contains(&o.id) {
        return Some(Kill {
            id: o.id.clone(),
            name: c.name.clone(),
            message: format!("Container {} failed liveness probe", c.name),
            grace: grace(&c.liveness_probe),
        });
    }
    if probes.startup_failed.contains(&o.id) {
        return Some(Kill {
            id: o.id.clone(),
            name: c.name.clone(),
            message: format!("Container {} failed startup probe", c.name),
            grace: grace(&c.startup_probe),
        });
    }
    None
}

fn running_or_unknown(obs: &Observed, message: &str) -> Vec<Kill> {
    obs.containers
        .iter()
        .filter(|c| matches!(c.state, ContainerState::Running | ContainerState::Unknown | ContainerState::Created))
        .map(|c| Kill { id: c.id.clone(), name: c.name.clone(), message: format!("{message} {}", c.name), grace: None })
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
