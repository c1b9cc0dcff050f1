//! Reading what the runtime has for one pod UID (by kubelet's `io.kubernetes.pod.uid` label),
//! newest first, in the engine's words ([`Observed`]): each sandbox's state, IP and network
//! mode; each container instance's state, restart count, hash and (for exited ones) kubelet's
//! termination message. Also the one rule for what atoll may touch: what it created.
//!
//! A ready sandbox's IP, network mode and creation time do not change while it lives, and
//! ListPodSandbox shows whether it is still ready: with [`SandboxFacts`], which the PLEG keeps,
//! the syncs that list within [`TRUSTED`] of one another (a batch, a crash loop) ask
//! PodSandboxStatus once per sandbox, not each time. kubelet asks at every GetPodStatus.
//! What the list alone cannot show, a network namespace removed from outside (the status's
//! IP goes empty and the sandbox is made again) or a stop that containerd 2.x's list shows a
//! moment late, is seen by the first sync after that time.
//!
//! Only a pod's worker makes its sandboxes and containers. So after a sync that made all it
//! meant to, the runtime holds nothing for the pod that sync did not see or make ([`Left`]),
//! and the follow-up reads those statuses afresh without the lists: a started container costs
//! its status and its sandbox's, not two lists and every status (kubelet's pod cache, which
//! its PLEG fills, spares its syncs the lists altogether). A start that did not all go
//! through may have left a container made but not started, so the sync after it lists.

use super::sandbox::{ANNOTATION_MANAGED_BY, LABEL_CONTAINER_NAME, LABEL_POD_UID};
use crate::cri::api::{
    ContainerFilter, ContainerStatusResponse, NamespaceMode, PodSandboxFilter, PodSandboxState, PodSandboxStatus,
    PodSandboxStatusResponse,
};
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
    pub fn learn(&self, uid: &str, id: &str, r: &PodSandboxStatusResponse) -> SandboxObs {
        let plain = PodSandboxStatus::default();
        let st = r.status.as_ref().unwrap_or(&plain);
        let attempt = st.metadata.as_ref().map_or(0, |m| m.attempt);
        let sandbox = status(id.to_string(), attempt, st, &r.info);
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

/// Which running processes' pids a look asks for (their statuses asked verbose): those whose
/// exits are to be watched and are not yet.
pub type PidWanted<'a> = Option<&'a (dyn Fn(&str) -> bool + Sync)>;

/// How a sync looks at its pod: what it keeps of the ready sandboxes' statuses, which pids it
/// wants, and what the last sync left, if it is the follow-up of one that made something.
#[derive(Default)]
pub struct Look<'a> {
    pub facts: Option<&'a SandboxFacts>,
    pub pids: PidWanted<'a>,
    pub left: Option<Left>,
}

/// Everything a pod can have in the runtime after a sync that made sandboxes or containers,
/// all of which it made without a failure: what it saw, and what it made (only a pod's worker
/// makes them). The sync that follows reads all their statuses afresh (so it sees whatever
/// changed before it began, as a list would) and need not list: a started container's
/// follow-up asks its ContainerStatus and its sandbox's status, not two lists and the statuses.
#[derive(Debug)]
pub struct Left {
    /// The sandboxes it saw, and the one it made.
    sandboxes: Vec<SandboxToRead>,
    /// The containers it saw, and those it started.
    containers: Vec<ContainerToRead>,
}

/// A sandbox a sync made: its attempt, and whether its status showed it ready.
pub type Made = (u32, bool);

impl Left {
    /// What a sync that saw `seen` leaves after making sandbox `sandbox_id` (if `made`) and
    /// starting the containers `started` (IDs) in it.
    pub fn after(seen: &Observed, made: Option<Made>, started: &[String], sandbox_id: &str) -> Left {
        let mut left = Left { sandboxes: Vec::new(), containers: Vec::new() };
        let made = made.map(|(attempt, ready)| (sandbox_id, attempt, ready));
        for (id, attempt, ready) in seen.sandboxes.iter().map(|s| (s.id.as_str(), s.attempt, s.ready)).chain(made) {
            left.sandboxes.push(SandboxToRead { id: id.into(), attempt, ready, listed: false });
        }
        let seen =
            seen.containers.iter().map(|c| (c.id.as_str(), c.sandbox_id.as_str(), c.state == ContainerState::Running));
        for (id, sandbox_id, running) in seen.chain(started.iter().map(|id| (id.as_str(), sandbox_id, true))) {
            left.containers.push((id.into(), sandbox_id.into(), running));
        }
        left
    }
}

/// A sandbox to read: its ID and attempt; whether it was last shown ready, and by a list
/// (then what its status showed a moment ago may be trusted).
#[derive(Debug)]
struct SandboxToRead {
    id: String,
    attempt: u32,
    ready: bool,
    listed: bool,
}

/// A container to read: ID, sandbox ID, whether last shown running (its name is in the
/// labels its status shows, as in the list's).
type ContainerToRead = (String, String, bool);

/// What the runtime's lists show of pod `uid`.
async fn listed<R: RuntimeService>(rt: &R, uid: &str) -> Result<(Vec<SandboxToRead>, Vec<ContainerToRead>), Status> {
    let selector = HashMap::from([(LABEL_POD_UID.to_string(), uid.to_string())]);
    // Both lists at once: one round trip, not two.
    let (sandboxes, containers) = smol::future::zip(
        rt.list_pod_sandbox(Some(PodSandboxFilter { label_selector: selector.clone(), ..Default::default() })),
        rt.list_containers(Some(ContainerFilter { label_selector: selector, ..Default::default() })),
    )
    .await;
    let sandboxes = sandboxes?.into_iter().map(|s| SandboxToRead {
        ready: s.state == PodSandboxState::SandboxReady as i32,
        listed: true,
        attempt: s.metadata.map_or(0, |m| m.attempt),
        id: s.id,
    });
    let containers = containers?.into_iter().map(|c| {
        let running = c.state == crate::cri::api::ContainerState::ContainerRunning as i32;
        (c.id, c.pod_sandbox_id, running)
    });
    Ok((sandboxes.collect(), containers.collect()))
}

/// Everything the runtime shows for pod `uid`: from its lists, or, after a sync that left
/// what the pod can have (`look.left`), from those statuses alone. With `look.facts`, a
/// sandbox listed ready whose status was read less than [`TRUSTED`] ago is not asked again,
/// and what is read is kept there. The status of a process `look.pids` wants is asked
/// verbose, which shows its pid: the watch on its exit needs no call of its own.
pub async fn observe<R: RuntimeService>(rt: &R, uid: &str, look: Look<'_>) -> Result<Observed, Status> {
    let Look { facts: known, pids, left } = look;
    let wanted = |id: &str| pids.is_some_and(|w| w(id));
    let mut obs = Observed::default();
    let (sandboxes, containers) = match left {
        Some(left) => (left.sandboxes, left.containers),
        None => listed(rt, uid).await?,
    };
    let mut facts = known.map(|k| take(&mut crate::locks::lock(&k.0), uid)).unwrap_or_default();
    let mut ready = Ready::new();
    for s in sandboxes {
        let kept = facts.iter().position(|(k, _)| k.id == s.id).map(|i| facts.swap_remove(i));
        let trusted = kept.filter(|(_, read)| s.listed && s.ready && read.elapsed() < TRUSTED);
        let (sandbox, read) = match trusted {
            Some(kept) => kept,
            None => match sandbox_status(rt, &s.id, s.ready && wanted(&s.id)).await {
                Ok(r) => (status(s.id, s.attempt, &r.status.unwrap_or_default(), &r.info), Instant::now()),
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
    for (id, sandbox_id, running) in containers {
        let (st, info) = match container_status(rt, &id, running && wanted(&id)).await {
            Ok(r) => (r.status.unwrap_or_default(), r.info),
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
            id: id.into(),
            name: st.labels.get(LABEL_CONTAINER_NAME).cloned().unwrap_or_default(),
            sandbox_id,
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
            pid: if state == ContainerState::Running { pid_of(&info) } else { None },
        });
    }
    obs.normalise();
    Ok(obs)
}

/// Sandbox `id`'s status, asked `verbose` to show its pid. If the runtime cannot make the
/// verbose part (containerd fails the whole call then), the plain status: the watch on the
/// process asks for the pid itself, and leaves what it cannot watch to the relist.
async fn sandbox_status<R: RuntimeService>(
    rt: &R,
    id: &str,
    verbose: bool,
) -> Result<PodSandboxStatusResponse, Status> {
    match rt.pod_sandbox_status(id, verbose).await {
        Err(e) if verbose && !e.is_not_found() => rt.pod_sandbox_status(id, false).await,
        shown => shown,
    }
}

/// Container `id`'s status, as [`sandbox_status`] asks a sandbox's.
async fn container_status<R: RuntimeService>(
    rt: &R,
    id: &str,
    verbose: bool,
) -> Result<ContainerStatusResponse, Status> {
    match rt.container_status(id, verbose).await {
        Err(e) if verbose && !e.is_not_found() => rt.container_status(id, false).await,
        shown => shown,
    }
}

/// Sandbox `id` (of this `attempt`) as its status (and the `info` of a verbose one) shows it.
fn status(id: String, attempt: u32, st: &PodSandboxStatus, info: &HashMap<String, String>) -> SandboxObs {
    let ready = st.state == PodSandboxState::SandboxReady as i32;
    SandboxObs {
        id,
        attempt,
        ready,
        host_network: host_network(st),
        ip: st.network.as_ref().map(|n| n.ip.clone()).unwrap_or_default(),
        created_at: st.created_at,
        pid: if ready { pid_of(info) } else { None },
    }
}

/// The pid in a verbose status's `info` (JSON with a `pid`, as containerd and CRI-O report
/// it); none in a plain status's.
pub fn pid_of(info: &HashMap<String, String>) -> Option<i32> {
    let parsed = crate::parse::json(info.get("info")?.as_bytes()).ok()?;
    let pid = parsed.get("pid").and_then(serde_json::Value::as_i64);
    pid.and_then(|p| i32::try_from(p).ok()).filter(|p| *p > 0)
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

    /// A look with these facts and wanting these pids.
    fn with<'a>(facts: Option<&'a SandboxFacts>, pids: PidWanted<'a>) -> Look<'a> {
        Look { facts, pids, left: None }
    }

    /// A running container of pod `uid` in sandbox `sb`.
    fn container(rt: &FakeRuntime, uid: &str, sb: &str) -> String {
        let mut config = crate::cri::api::ContainerConfig::default();
        config.labels.insert(LABEL_POD_UID.into(), uid.into());
        config.labels.insert(LABEL_CONTAINER_NAME.into(), "c".into());
        let id = smol::block_on(rt.create_container(sb, config, PodSandboxConfig::default())).unwrap();
        smol::block_on(rt.start_container(&id)).unwrap();
        id
    }

    #[test]
    fn a_ready_sandboxs_status_is_asked_once_and_again_once_it_is_not_ready() {
        let rt = FakeRuntime::default();
        let (pod_net, host_net) = (sandbox(&rt, "u1", false), sandbox(&rt, "u1", true));
        let known = SandboxFacts::default();
        let look = |known: Option<&SandboxFacts>| smol::block_on(observe(&rt, "u1", with(known, None))).unwrap();
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
        let st = smol::block_on(rt.pod_sandbox_status(&third, false)).unwrap();
        known.learn("u1", &third, &st);
        let st = st.status.unwrap();
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

    #[test]
    fn a_pid_wanted_is_asked_with_the_status_the_look_asks_anyway() {
        let rt = FakeRuntime::default();
        let sb = sandbox(&rt, "u1", false);
        let (running, exited) = (container(&rt, "u1", &sb), container(&rt, "u1", &sb));
        rt.exit(&exited, 1);
        let verbose = |method: &str| rt.calls().iter().filter(|c| *c == &format!("{method} verbose")).count();
        let known = SandboxFacts::default();
        let me = Some(std::process::id() as i32);
        // Nothing wanted: no status is verbose, no pid is shown.
        let none = smol::block_on(observe(&rt, "u1", with(Some(&known), Some(&|_: &str| false)))).unwrap();
        assert_eq!((verbose("PodSandboxStatus"), verbose("ContainerStatus")), (0, 0));
        assert!(none.sandboxes.iter().all(|s| s.pid.is_none()) && none.containers.iter().all(|c| c.pid.is_none()));
        // Every pid wanted: the running container's status is asked verbose, the exited one's
        // not, and the trusted sandbox's not at all (its pid comes with the next status read).
        let all = smol::block_on(observe(&rt, "u1", with(Some(&known), Some(&|_: &str| true)))).unwrap();
        assert_eq!((verbose("PodSandboxStatus"), verbose("ContainerStatus")), (0, 1));
        let pid = |id: &str| all.containers.iter().find(|c| c.id.as_str() == id).unwrap().pid;
        assert_eq!((pid(&running), pid(&exited)), (me, None));
        assert_eq!(rt.count("ContainerStatus"), 4, "one status per container each time, no more");
        // A sandbox not trusted any more is asked verbose when its pid is wanted.
        known.forget("u1");
        let again = smol::block_on(observe(&rt, "u1", with(Some(&known), Some(&|id: &str| id == sb)))).unwrap();
        assert_eq!((verbose("PodSandboxStatus"), verbose("ContainerStatus")), (1, 1));
        assert_eq!(again.sandboxes[0].pid, me);
        assert!(again.containers.iter().all(|c| c.pid.is_none()), "not wanted");
        // What is learnt from a verbose status keeps its pid while it is trusted.
        known.forget("u1");
        let r = smol::block_on(rt.pod_sandbox_status(&sb, true)).unwrap();
        assert_eq!(known.learn("u1", &sb, &r).pid, me);
        let kept = smol::block_on(observe(&rt, "u1", with(Some(&known), None))).unwrap();
        assert_eq!((kept.sandboxes[0].pid, rt.count("PodSandboxStatus")), (me, 3));
    }

    #[test]
    fn a_verbose_status_the_runtime_cannot_make_leaves_the_plain_one() {
        let rt = FakeRuntime::default();
        let sb = sandbox(&rt, "u1", false);
        container(&rt, "u1", &sb);
        rt.forget_calls();
        // containerd fails the whole call when it cannot make the verbose part: the look
        // goes on with the plain status, and the watch is left to ask for the pid itself.
        rt.fail_next("PodSandboxStatus", crate::cri::Code::Unknown);
        rt.fail_next("ContainerStatus", crate::cri::Code::Unknown);
        let obs = smol::block_on(observe(&rt, "u1", with(None, Some(&|_: &str| true)))).unwrap();
        let statuses: Vec<String> = rt.calls().into_iter().filter(|c| c.contains("Status")).collect();
        assert_eq!(
            statuses,
            ["PodSandboxStatus verbose", "PodSandboxStatus", "ContainerStatus verbose", "ContainerStatus"]
        );
        assert!(obs.sandboxes[0].ready && obs.sandboxes[0].pid.is_none());
        assert!(obs.containers[0].state == ContainerState::Running && obs.containers[0].pid.is_none());
        // A plain status that fails still fails the look, as before.
        rt.fail_next("ContainerStatus", crate::cri::Code::Unavailable);
        assert!(smol::block_on(observe(&rt, "u1", with(None, None))).is_err());
        let r = smol::block_on(sandbox_status(&rt, "gone", true));
        assert!(r.is_err_and(|e| e.is_not_found()), "what is gone is not asked twice");
        assert_eq!(rt.count("PodSandboxStatus"), 4);
    }

    #[test]
    fn after_a_sync_that_made_everything_only_what_it_left_is_read() {
        let rt = FakeRuntime::default();
        let (old, made) = (sandbox(&rt, "u1", false), sandbox(&rt, "u1", false));
        let (gone, started) = (container(&rt, "u1", &old), container(&rt, "u1", &made));
        smol::block_on(rt.stop_pod_sandbox(&old)).unwrap();
        let known = SandboxFacts::default();
        // What the sync saw: the old sandbox stopped, its container exited, the new one ready.
        let seen = smol::block_on(observe(&rt, "u1", with(Some(&known), None))).unwrap();
        let mut before = seen.clone();
        before.containers.retain(|c| c.id.as_str() == gone);
        // Meanwhile the old instance is removed, and the sandbox the sync made dies.
        smol::block_on(rt.remove_container(&gone)).unwrap();
        smol::block_on(rt.stop_pod_sandbox(&made)).unwrap();
        rt.forget_calls();
        let left = Left::after(&before, None, std::slice::from_ref(&started), &made);
        let look = Look { facts: Some(&known), pids: Some(&|_: &str| true), left: Some(left) };
        let obs = smol::block_on(observe(&rt, "u1", look)).unwrap();
        // No list; every status read afresh though the made sandbox's facts were fresh, and
        // verbose only for what was last shown ready or running: the death is seen, the
        // removed container dropped.
        let statuses = ["PodSandboxStatus verbose", "PodSandboxStatus", "ContainerStatus", "ContainerStatus verbose"];
        assert_eq!(rt.calls(), statuses);
        assert!(obs.sandboxes.len() == 2 && obs.sandboxes.iter().all(|s| !s.ready), "{:?}", obs.sandboxes);
        assert_eq!(
            obs.containers.iter().map(|c| (c.id.as_str(), c.name.as_str())).collect::<Vec<_>>(),
            [(started.as_str(), "c")]
        );
        assert_eq!(obs.containers[0].state, ContainerState::Exited);
        assert_eq!(obs.containers[0].sandbox_id, made);
    }

    #[test]
    fn the_pid_comes_from_the_verbose_info() {
        let info = |s: &str| HashMap::from([("info".to_string(), s.to_string())]);
        assert_eq!(pid_of(&info(r#"{"pid": 4242, "runtimeSpec": {"process": {"args": ["sh"]}}}"#)), Some(4242));
        assert_eq!(None, pid_of(&info(r#"{"pid": 0}"#)));
        assert_eq!(None, pid_of(&info(r#"{"pid": -1}"#)));
        assert_eq!(None, pid_of(&info(r#"{"pid": 99999999999}"#)));
        assert_eq!(None, pid_of(&info("not json")));
        assert_eq!(None, pid_of(&HashMap::new()));
        let deep = format!("{}{}", "[".repeat(10_000), "]".repeat(10_000));
        assert_eq!(None, pid_of(&info(&format!(r#"{{"pid": 7, "x": {deep}}}"#))));
    }
}
