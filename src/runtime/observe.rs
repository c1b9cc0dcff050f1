//! Reading what the runtime has for one pod UID (by kubelet's `io.kubernetes.pod.uid` label),
//! newest first, in the engine's words ([`Observed`]): each sandbox's state, IP and network
//! mode; each container instance's state, restart count, hash and (for exited ones) kubelet's
//! termination message. Also the one rule for what atoll may touch: what it created.
//!
//! A ready sandbox's IP, network mode and creation time do not change while it lives, and
//! ListPodSandbox shows whether it is still ready: with [`SandboxFacts`], which the PLEG keeps,
//! the syncs that follow one another within [`TRUSTED`] (a start's follow-up, a batch, a crash
//! loop) ask PodSandboxStatus once per sandbox, not each time. kubelet asks at every
//! GetPodStatus. What the list alone cannot show, a network namespace removed from outside
//! (the status's IP goes empty and the sandbox is made again) or a stop that containerd 2.x's
//! list shows a moment late, is seen by the first sync after that time.

use super::sandbox::{ANNOTATION_MANAGED_BY, LABEL_CONTAINER_NAME, LABEL_POD_UID};
use crate::cri::api::{ContainerFilter, NamespaceMode, PodSandboxFilter, PodSandboxState, PodSandboxStatus};
use crate::cri::{RuntimeService, Status};
use crate::node::observed::{ContainerObs, ContainerState, Observed, SandboxObs};
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant, SystemTime};

/// How long what a ready sandbox's status showed is taken for granted.
pub const TRUSTED: Duration = Duration::from_secs(5);

/// What the status of each ready sandbox showed, and when, by pod UID. A short list: one
/// entry per pod with a ready sandbox.
#[derive(Default)]
pub struct SandboxFacts(Mutex<Vec<(String, Ready)>>);

/// A pod's ready sandboxes as their statuses showed them, each with when that was read.
type Ready = Vec<(SandboxObs, Instant)>;

impl SandboxFacts {
    /// Pod `uid`'s sandbox `id` has this status (kept if it is ready): the sandbox as it shows.
    pub fn learn(&self, uid: &str, id: &str, st: &PodSandboxStatus) -> SandboxObs {
        let attempt = st.metadata.as_ref().map_or(0, |m| m.attempt);
        let sandbox = status(id.to_string(), attempt, st);
        if sandbox.ready {
            let mut all = crate::locks::lock(&self.0);
            let mut ready = take(&mut all, uid);
            ready.retain(|(s, _)| s.id != id);
            ready.push((sandbox.clone(), Instant::now()));
            all.push((uid.to_string(), ready));
        }
        sandbox
    }

    /// What pod `uid`'s sandboxes showed is as old as if read `by` earlier (tests).
    #[cfg(test)]
    fn age(&self, uid: &str, by: Duration) {
        for (_, read) in crate::locks::lock(&self.0).iter_mut().filter(|(u, _)| u == uid).flat_map(|(_, r)| r) {
            *read = read.checked_sub(by).unwrap_or(*read);
        }
    }

    /// Forgets pod `uid` (its worker ended).
    pub fn forget(&self, uid: &str) {
        take(&mut crate::locks::lock(&self.0), uid);
    }
}

/// Takes pod `uid`'s entry out of `all`.
fn take(all: &mut Vec<(String, Ready)>, uid: &str) -> Ready {
    all.iter().position(|(u, _)| u == uid).map(|i| all.swap_remove(i).1).unwrap_or_default()
}

/// Everything the runtime shows for pod `uid`; with `known`, a sandbox listed ready whose
/// status was read less than [`TRUSTED`] ago is not asked again, and what is read is kept
/// there.
pub async fn observe<R: RuntimeService>(rt: &R, uid: &str, known: Option<&SandboxFacts>) -> Result<Observed, Status> {
    let selector = HashMap::from([(LABEL_POD_UID.to_string(), uid.to_string())]);
    let mut obs = Observed::default();
    // Both lists at once: one round trip, not two.
    let (sandboxes, containers) = smol::future::zip(
        rt.list_pod_sandbox(Some(PodSandboxFilter { label_selector: selector.clone(), ..Default::default() })),
        rt.list_containers(Some(ContainerFilter { label_selector: selector, ..Default::default() })),
    )
    .await;
    let (sandboxes, containers) = (sandboxes?, containers?);
    let mut facts = known.map(|k| take(&mut crate::locks::lock(&k.0), uid)).unwrap_or_default();
    let mut ready = Ready::new();
    for s in sandboxes {
        let listed_ready = s.state == PodSandboxState::SandboxReady as i32;
        let kept = facts.iter().position(|(k, _)| k.id == s.id).map(|i| facts.swap_remove(i));
        let (sandbox, read) = match kept.filter(|(_, read)| listed_ready && read.elapsed() < TRUSTED) {
            Some(kept) => kept,
            None => match rt.pod_sandbox_status(&s.id, false).await {
                Ok(r) => {
                    let attempt = s.metadata.map_or(0, |m| m.attempt);
                    (status(s.id, attempt, &r.status.unwrap_or_default()), Instant::now())
                }
                Err(e) if e.is_not_found() => continue,
                Err(e) => return Err(e),
            },
        };
        if sandbox.ready {
            ready.push((sandbox.clone(), read));
        }
        obs.sandboxes.push(sandbox);
    }
    if let (Some(k), false) = (known, ready.is_empty()) {
        crate::locks::lock(&k.0).push((uid.to_string(), ready));
    }
    for c in containers {
        let st = match rt.container_status(&c.id, false).await {
            Ok(r) => r.status.unwrap_or_default(),
            Err(e) if e.is_not_found() => continue,
            Err(e) => return Err(e),
        };
        let state = state_of(st.state);
        let ann = |k: &str| st.annotations.get(k).cloned().unwrap_or_default();
        let message = if state == ContainerState::Exited {
            super::volumes::termination::message(&st)
        } else {
            st.message.clone()
        };
        obs.containers.push(ContainerObs {
            id: c.id.into(),
            name: c.labels.get(LABEL_CONTAINER_NAME).cloned().unwrap_or_default(),
            sandbox_id: c.pod_sandbox_id,
            restart_count: ann("io.kubernetes.container.restartCount").parse().unwrap_or(0),
            hash: ann("io.kubernetes.container.hash"),
            state,
            exit_code: st.exit_code,
            reason: st.reason,
            message,
            created_at: st.created_at,
            started_at: time_of(st.started_at),
            finished_at: time_of(st.finished_at),
            log_path: st.log_path,
            image: st.image.map(|i| i.image).unwrap_or_default(),
            image_ref: st.image_ref,
        });
    }
    obs.normalise();
    Ok(obs)
}

/// Sandbox `id` (of this `attempt`) as its status shows it.
fn status(id: String, attempt: u32, st: &PodSandboxStatus) -> SandboxObs {
    SandboxObs {
        id,
        attempt,
        ready: st.state == PodSandboxState::SandboxReady as i32,
        host_network: host_network(st),
        ip: st.network.as_ref().map(|n| n.ip.clone()).unwrap_or_default(),
        created_at: st.created_at,
    }
}

/// Whether a sandbox has the host's network.
fn host_network(st: &PodSandboxStatus) -> bool {
    let options = st.linux.as_ref().and_then(|l| l.namespaces.as_ref()).and_then(|n| n.options.as_ref());
    options.is_some_and(|o| o.network == NamespaceMode::Node as i32)
}

/// CRI's container state in the engine's words.
pub fn state_of(cri_state: i32) -> ContainerState {
    use crate::cri::api::ContainerState as Cri;
    match Cri::try_from(cri_state) {
        Ok(Cri::ContainerCreated) => ContainerState::Created,
        Ok(Cri::ContainerRunning) => ContainerState::Running,
        Ok(Cri::ContainerExited) => ContainerState::Exited,
        _ => ContainerState::Unknown,
    }
}

/// Nanoseconds since the epoch from CRI (0 for unset).
fn time_of(nanos: i64) -> Option<SystemTime> {
    u64::try_from(nanos).ok().filter(|n| *n > 0).map(|n| SystemTime::UNIX_EPOCH + Duration::from_nanos(n))
}

/// Whether a sandbox or container was made by atoll (nothing else is ever touched).
pub fn managed(annotations: &HashMap<String, String>) -> bool {
    annotations.get(ANNOTATION_MANAGED_BY).is_some_and(|v| v == "atoll")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cri::api::{NamespaceOption, PodSandboxConfig};
    use crate::cri::fake::FakeRuntime;

    /// A sandbox of pod `uid` in `rt`, on the host's network or not.
    fn sandbox(rt: &FakeRuntime, uid: &str, host: bool) -> String {
        let mut config = PodSandboxConfig::default();
        config.labels.insert(LABEL_POD_UID.into(), uid.into());
        let network = if host { NamespaceMode::Node } else { NamespaceMode::Pod } as i32;
        let options = Some(NamespaceOption { network, ..Default::default() });
        config.linux = Some(crate::cri::api::LinuxPodSandboxConfig {
            security_context: Some(crate::cri::api::LinuxSandboxSecurityContext {
                namespace_options: options,
                ..Default::default()
            }),
            ..Default::default()
        });
        smol::block_on(rt.run_pod_sandbox(config, "")).unwrap()
    }

    #[test]
    fn a_ready_sandboxs_status_is_asked_once_and_again_once_it_is_not_ready() {
        let rt = FakeRuntime::default();
        let (pod_net, host_net) = (sandbox(&rt, "u1", false), sandbox(&rt, "u1", true));
        let known = SandboxFacts::default();
        let look = |known: Option<&SandboxFacts>| smol::block_on(observe(&rt, "u1", known)).unwrap();
        let first = look(Some(&known));
        assert_eq!(rt.count("PodSandboxStatus"), 2);
        assert_eq!(first.sandboxes.len(), 2);
        let ip = first.sandboxes.iter().find(|s| s.id == pod_net).map(|s| s.ip.clone()).unwrap();
        assert!(ip.starts_with("10.0.0."), "{ip}");
        // Again: the same view, with no status asked.
        assert_eq!(look(Some(&known)).sandboxes, first.sandboxes);
        assert_eq!(rt.count("PodSandboxStatus"), 2);
        // Without the facts, as before: every status.
        assert_eq!(look(None).sandboxes, first.sandboxes);
        assert_eq!(rt.count("PodSandboxStatus"), 4);
        // A stopped sandbox is asked (its status says what is left of it), the ready one not.
        smol::block_on(rt.stop_pod_sandbox(&pod_net)).unwrap();
        let after = look(Some(&known));
        assert_eq!(rt.count("PodSandboxStatus"), 5);
        let shown = |id: &str| after.sandboxes.iter().find(|s| s.id == id).map(|s| (s.ready, s.host_network)).unwrap();
        assert_eq!((shown(&pod_net), shown(&host_net)), ((false, false), (true, true)));
        // A sandbox learnt from RunPodSandbox's status is not asked at the next look.
        let third = sandbox(&rt, "u1", false);
        let st = smol::block_on(rt.pod_sandbox_status(&third, false)).unwrap().status.unwrap();
        known.learn("u1", &third, &st);
        let before = rt.count("PodSandboxStatus");
        let seen = look(Some(&known));
        assert_eq!(rt.count("PodSandboxStatus"), before + 1, "only the stopped one");
        assert!(seen.sandboxes.iter().any(|s| s.id == third && s.ready && s.ip == st.network.as_ref().unwrap().ip));
        // Read longer ago than it is trusted: asked again (the stopped one as ever).
        known.age("u1", TRUSTED);
        look(Some(&known));
        assert_eq!(rt.count("PodSandboxStatus"), before + 4, "the two ready ones again, and the stopped one");
        look(Some(&known));
        assert_eq!(rt.count("PodSandboxStatus"), before + 5, "then trusted again");
        let before = before + 5;
        // Forgotten with its worker: asked again.
        known.forget("u1");
        look(Some(&known));
        assert_eq!(rt.count("PodSandboxStatus"), before + 3);
    }
}
