//! Pod status as kubelet reports it: phase, conditions and container statuses, computed from
//! the pod, what the runtime shows, and why containers wait.
//!
//! Pure functions: [`compute`], and [`stamp_transitions`], which gives each condition its
//! lastTransitionTime from the status before it (the pod workers pass the one the node's status
//! store holds, and store the result there, where the local API and the mirror read it). The
//! types are the v1 API's (`pod::status`).

use crate::node::observed::{ContainerObs, ContainerState, Observed, ProbeView, Waits};
use crate::pod::derived::{is_sidecar, qos_class};
use crate::pod::status::*;
use crate::pod::types::Pod;
use std::collections::HashMap;
use std::time::SystemTime;

/// What the status needs besides the pod and the runtime's view.
#[derive(Clone, Debug, Default)]
pub struct Context {
    /// The runtime's name for container IDs (`containerd` → `containerd://<id>`).
    pub runtime_name: String,
    pub host_ip: String,
    /// Why a container waits (CrashLoopBackOff, ErrImagePull, ...), by container name.
    pub waiting: Waits,
    /// When the pod was first seen by its worker.
    pub start_time: Option<SystemTime>,
    /// Readiness and startup probe results by container ID.
    pub probes: ProbeView,
}

fn ts(t: Option<SystemTime>) -> Option<String> {
    t.map(crate::rfc3339::format_seconds)
}

/// A container's status from its two newest instances.
fn container_status(
    spec: &crate::pod::types::Container,
    instances: &[&ContainerObs],
    ctx: &Context,
    default_reason: &str,
    init: bool,
) -> ContainerStatus {
    let id = |o: &ContainerObs| format!("{}://{}", ctx.runtime_name, o.id);
    let terminated = |o: &ContainerObs| Terminated {
        exit_code: o.exit_code,
        reason: o.reason.clone(),
        message: o.message.clone(),
        started_at: ts(o.started_at),
        finished_at: ts(o.finished_at),
        container_id: id(o),
    };
    let mut st = ContainerStatus { name: spec.name.clone(), image: spec.image.clone(), ..Default::default() };
    let Some(newest) = instances.first() else {
        st.state.waiting = Some(Waiting { reason: default_reason.into(), message: String::new() });
        st.started = Some(false);
        if let Some(w) = ctx.waiting.get(&spec.name) {
            st.state.waiting = Some(Waiting { reason: w.reason.to_string(), message: w.message.clone() });
        }
        return st;
    };
    st.restart_count = newest.restart_count;
    st.container_id = id(newest);
    st.image_id = newest.image_ref.clone();
    if !newest.image.is_empty() {
        st.image = newest.image.clone();
    }
    match newest.state {
        ContainerState::Running => {
            st.state.running = Some(Running { started_at: ts(newest.started_at) });
            // kubelet: started once the startup probe (if any) has succeeded; ready once started
            // and the readiness probe (if any) has succeeded. A probe with no result yet says no.
            let started = spec.startup_probe.is_none() || ctx.probes.started.get(&newest.id).copied().unwrap_or(false);
            st.started = Some(started);
            let probed_ready =
                spec.readiness_probe.is_none() || ctx.probes.ready.get(&newest.id).copied().unwrap_or(false);
            st.ready = started && probed_ready && (!init || is_sidecar(spec));
        }
        ContainerState::Created => st.state.waiting = Some(Waiting::default()),
        ContainerState::Exited | ContainerState::Unknown => {
            let term = terminated(newest);
            st.started = Some(false);
            match ctx.waiting.get(&spec.name) {
                Some(w) if !(init && newest.exit_code == 0 && !is_sidecar(spec)) => {
                    st.state.waiting = Some(Waiting { reason: w.reason.to_string(), message: w.message.clone() });
                    st.last_state.terminated = Some(term);
                }
                _ => {
                    st.ready =
                        init && newest.exit_code == 0 && newest.state == ContainerState::Exited && !is_sidecar(spec);
                    st.state.terminated = Some(term);
                }
            }
        }
    }
    if st.last_state.terminated.is_none() {
        if let Some(prev) = instances.get(1) {
            if prev.state == ContainerState::Exited {
                st.last_state.terminated = Some(terminated(prev));
            }
        }
    }
    st
}

fn condition(type_: &str, ok: bool, reason: Option<&str>, message: Option<String>) -> PodCondition {
    PodCondition {
        type_: type_.into(),
        status: if ok { "True" } else { "False" }.into(),
        reason: if ok { None } else { reason.map(String::from) },
        message: if ok { None } else { message },
        last_transition_time: None,
    }
}

/// Computes the pod's status (kubelet's getPhase, generate.go and convertToAPIContainerStatuses).
pub fn compute(pod: &Pod, obs: &Observed, ctx: &Context) -> PodStatus {
    let mut by_name: HashMap<&str, Vec<&ContainerObs>> = HashMap::new();
    for c in &obs.containers {
        by_name.entry(c.name.as_str()).or_default().push(c);
    }
    let empty = Vec::new();
    let has_init = !pod.spec.init_containers.is_empty();
    let init_statuses: Vec<ContainerStatus> = pod
        .spec
        .init_containers
        .iter()
        .map(|c| container_status(c, by_name.get(c.name.as_str()).unwrap_or(&empty), ctx, "PodInitializing", true))
        .collect();
    let statuses: Vec<ContainerStatus> = pod
        .spec
        .containers
        .iter()
        .map(|c| {
            let default = if has_init { "PodInitializing" } else { "ContainerCreating" };
            container_status(c, by_name.get(c.name.as_str()).unwrap_or(&empty), ctx, default, false)
        })
        .collect();
    let ever_ran = pod.spec.containers.iter().any(|c| by_name.contains_key(c.name.as_str()));
    let phase = phase(pod, &init_statuses, &statuses, ever_ran, ctx);
    let conditions = conditions(pod, obs, phase, (&init_statuses, &statuses), ever_ran);
    let newest = obs.sandboxes.first();
    let pod_ip = match newest {
        Some(s) if s.ready && !pod.spec.host_network => s.ip.clone(),
        Some(s) if s.ready => ctx.host_ip.clone(),
        _ => String::new(),
    };
    // A version run again by health-gated rollback says so (as its mirror pod does).
    let rolled_back = pod.metadata.annotations.get(crate::pod::rollback_policy::ROLLED_BACK_FROM);
    PodStatus {
        phase: phase.into(),
        reason: None,
        message: rolled_back.map(|from| format!("rolled back from {from}")),
        conditions,
        host_ip: ctx.host_ip.clone(),
        host_ips: if ctx.host_ip.is_empty() { vec![] } else { vec![PodIp { ip: ctx.host_ip.clone() }] },
        pod_ips: if pod_ip.is_empty() { vec![] } else { vec![PodIp { ip: pod_ip.clone() }] },
        pod_ip,
        start_time: ts(ctx.start_time),
        init_container_statuses: init_statuses,
        container_statuses: statuses,
        qos_class: qos_class(pod).into(),
    }
}

/// The pod's phase (kubelet's getPhase), from its containers' statuses.
fn phase(
    pod: &Pod,
    init_statuses: &[ContainerStatus],
    statuses: &[ContainerStatus],
    ever_ran: bool,
    ctx: &Context,
) -> &'static str {
    let policy = pod.spec.restart_policy.as_deref().unwrap_or("Always");

    let (mut pending_init, mut failed_init) = (0, 0);
    for (spec, s) in pod.spec.init_containers.iter().zip(init_statuses) {
        if is_sidecar(spec) {
            if s.started != Some(true) {
                pending_init += 1;
            }
            continue;
        }
        let term = s.state.terminated.as_ref().or(s.last_state.terminated.as_ref());
        match term {
            Some(t) if t.exit_code != 0 => failed_init += 1,
            Some(_) if s.state.terminated.is_some() => {}
            _ => pending_init += 1,
        }
    }
    let (mut running, mut stopped, mut succeeded, mut waiting, mut unknown) = (0, 0, 0, 0, 0);
    for s in statuses {
        if s.state.running.is_some() {
            running += 1;
        } else if let Some(t) = s.state.terminated.as_ref().or(s.last_state.terminated.as_ref()) {
            stopped += 1;
            if t.exit_code == 0 {
                succeeded += 1;
            }
        } else if s.state.waiting.is_some() && s.container_id.is_empty() && !ctx.waiting.is_empty() {
            waiting += 1;
        } else if s.container_id.is_empty() {
            unknown += 1;
        } else {
            waiting += 1;
        }
    }
    let sidecars_running = pod
        .spec
        .init_containers
        .iter()
        .zip(init_statuses)
        .filter(|(c, s)| is_sidecar(c) && s.state.running.is_some())
        .count();
    running += sidecars_running;
    if failed_init > 0 && policy == "Never" {
        "Failed"
    } else if (pending_init > 0 && !ever_ran) || waiting > 0 {
        "Pending"
    } else if running > 0 && unknown == 0 {
        "Running"
    } else if running == 0 && stopped > 0 && unknown == 0 {
        match policy {
            "Always" => "Running",
            _ if stopped == succeeded => "Succeeded",
            "Never" => "Failed",
            _ => "Running",
        }
    } else {
        "Pending"
    }
}

/// The pod's conditions (kubelet's generate.go): sandbox, init containers, readiness.
fn conditions(
    pod: &Pod,
    obs: &Observed,
    phase: &str,
    (init_statuses, statuses): (&[ContainerStatus], &[ContainerStatus]),
    ever_ran: bool,
) -> Vec<PodCondition> {
    let newest = obs.sandboxes.first();
    let sandbox_ok = newest.is_some_and(|s| s.ready && (pod.spec.host_network || !s.ip.is_empty()));
    let not_done: Vec<&str> = pod
        .spec
        .init_containers
        .iter()
        .zip(init_statuses)
        .filter(|(c, s)| if is_sidecar(c) { s.started != Some(true) } else { !s.ready })
        .map(|(c, _)| c.name.as_str())
        .collect();
    let initialised = not_done.is_empty() || ever_ran || phase == "Succeeded";
    let unready: Vec<&str> = statuses.iter().filter(|s| !s.ready).map(|s| s.name.as_str()).collect();
    let containers_ready = match phase {
        "Succeeded" => condition("ContainersReady", false, Some("PodCompleted"), None),
        "Failed" => condition("ContainersReady", false, Some("PodFailed"), None),
        _ => condition(
            "ContainersReady",
            unready.is_empty(),
            Some("ContainersNotReady"),
            Some(format!("containers with unready status: [{}]", unready.join(" "))),
        ),
    };
    let ready = PodCondition { type_: "Ready".into(), ..containers_ready.clone() };
    vec![
        condition("PodReadyToStartContainers", sandbox_ok, None, None),
        condition(
            "Initialized",
            initialised,
            Some("ContainersNotInitialized"),
            Some(format!("containers with incomplete status: [{}]", not_done.join(" "))),
        ),
        ready,
        containers_ready,
        condition("PodScheduled", true, None, None),
    ]
}

/// Each condition's lastTransitionTime, as kubelet's status manager sets it: the time of the
/// condition of the same type in `before` (the pod's previous status) while its status is the
/// same, else `now` (RFC 3339), when it changed or first appeared.
pub fn stamp_transitions(status: &mut PodStatus, before: Option<&PodStatus>, now: &str) {
    for c in &mut status.conditions {
        let was = before.and_then(|b| b.conditions.iter().find(|o| o.type_ == c.type_));
        c.last_transition_time = match was {
            Some(o) if o.status == c.status && o.last_transition_time.is_some() => o.last_transition_time.clone(),
            _ => Some(now.to_string()),
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::node::observed::{SandboxObs, Wait, WaitReason};
    use crate::pod::identity;
    use std::time::Duration;

    fn pod(spec: &str) -> Pod {
        identity::test_pod(r#"{"name":"web"}"#, spec, "n")
    }

    fn t(s: u64) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000 + s)
    }

    fn ctr(name: &str, state: ContainerState, exit: i32, restarts: u32, created: i64) -> ContainerObs {
        ContainerObs {
            restart_count: restarts,
            state,
            exit_code: exit,
            reason: match (state, exit) {
                (ContainerState::Exited, 0) => "Completed".into(),
                (ContainerState::Exited, _) => "Error".into(),
                _ => String::new(),
            },
            created_at: created,
            finished_at: (state == ContainerState::Exited).then(|| t(created as u64 + 1)),
            image: "docker.io/library/x:1".into(),
            image_ref: "sha256:abc".into(),
            ..ContainerObs::running(&format!("{name}{created}"), name, "s1", Some(t(created as u64)))
        }
    }

    fn obs(containers: Vec<ContainerObs>) -> Observed {
        let mut o = Observed {
            sandboxes: vec![SandboxObs {
                id: "s1".into(),
                attempt: 0,
                ready: true,
                ip: "10.0.0.9".into(),
                host_network: false,
                created_at: 0,
                pid: None,
            }],
            containers,
        };
        o.normalise();
        o
    }

    fn ctx() -> Context {
        Context { runtime_name: "containerd".into(), host_ip: "192.0.2.1".into(), ..Default::default() }
    }

    fn cond<'a>(s: &'a PodStatus, t: &str) -> &'a PodCondition {
        s.conditions.iter().find(|c| c.type_ == t).unwrap()
    }

    const ONE: &str = r#"{"containers":[{"name":"a","image":"x:1"}]}"#;

    #[test]
    fn a_new_pod_is_pending_with_container_creating() {
        let p = pod(ONE);
        let s = compute(&p, &Observed::default(), &ctx());
        assert_eq!(s.phase, "Pending");
        assert_eq!(s.container_statuses[0].state.waiting.as_ref().unwrap().reason, "ContainerCreating");
        assert_eq!(cond(&s, "PodReadyToStartContainers").status, "False");
        assert_eq!(cond(&s, "PodScheduled").status, "True");
        assert_eq!(s.qos_class, "BestEffort");
    }

    #[test]
    fn a_running_pod_is_running_and_ready_with_ids_and_ip() {
        let p = pod(ONE);
        let s = compute(&p, &obs(vec![ctr("a", ContainerState::Running, 0, 2, 5)]), &ctx());
        assert_eq!(s.phase, "Running");
        let c = &s.container_statuses[0];
        assert!(c.ready && c.started == Some(true));
        assert_eq!(c.container_id, "containerd://a5");
        assert_eq!(c.restart_count, 2);
        assert_eq!(c.image_id, "sha256:abc");
        assert!(c.state.running.as_ref().unwrap().started_at.is_some());
        assert_eq!(s.pod_ip, "10.0.0.9");
        for t in ["Ready", "ContainersReady", "Initialized", "PodReadyToStartContainers"] {
            assert_eq!(cond(&s, t).status, "True", "{t}");
        }
    }

    #[test]
    fn a_crash_loop_shows_waiting_with_the_last_termination() {
        let p = pod(ONE);
        let mut c = ctx();
        let message = "back-off 20s restarting failed container=a pod=web-n".into();
        c.waiting.insert("a".into(), Wait { reason: WaitReason::CrashLoopBackOff, message });
        let s = compute(
            &p,
            &obs(vec![ctr("a", ContainerState::Exited, 3, 4, 5), ctr("a", ContainerState::Exited, 3, 3, 2)]),
            &c,
        );
        let st = &s.container_statuses[0];
        assert_eq!(st.state.waiting.as_ref().unwrap().reason, "CrashLoopBackOff");
        assert_eq!(st.last_state.terminated.as_ref().unwrap().exit_code, 3);
        assert_eq!(st.last_state.terminated.as_ref().unwrap().reason, "Error");
        assert_eq!(st.restart_count, 4);
        assert!(!st.ready);
        assert_eq!(s.phase, "Running", "restartPolicy Always: it is restarting");
        assert_eq!(cond(&s, "Ready").status, "False");
        assert_eq!(cond(&s, "Ready").reason.as_deref(), Some("ContainersNotReady"));
    }

    #[test]
    fn finished_pods_succeed_or_fail_by_policy() {
        let on_failure = pod(r#"{"restartPolicy":"OnFailure","containers":[{"name":"a","image":"x:1"}]}"#);
        let s = compute(&on_failure, &obs(vec![ctr("a", ContainerState::Exited, 0, 0, 5)]), &ctx());
        assert_eq!(s.phase, "Succeeded");
        assert_eq!(cond(&s, "ContainersReady").reason.as_deref(), Some("PodCompleted"));
        assert_eq!(s.container_statuses[0].state.terminated.as_ref().unwrap().reason, "Completed");
        let never = pod(r#"{"restartPolicy":"Never","containers":[{"name":"a","image":"x:1"}]}"#);
        assert_eq!(compute(&never, &obs(vec![ctr("a", ContainerState::Exited, 1, 0, 5)]), &ctx()).phase, "Failed");
    }

    #[test]
    fn init_containers_gate_the_pod() {
        let p = pod(r#"{"initContainers":[{"name":"i","image":"x:1"}],"containers":[{"name":"a","image":"x:1"}]}"#);
        let s = compute(&p, &obs(vec![ctr("i", ContainerState::Running, 0, 0, 1)]), &ctx());
        assert_eq!(s.phase, "Pending");
        assert_eq!(s.container_statuses[0].state.waiting.as_ref().unwrap().reason, "PodInitializing");
        assert_eq!(cond(&s, "Initialized").status, "False");
        assert_eq!(cond(&s, "Initialized").message.as_deref(), Some("containers with incomplete status: [i]"));
        let s = compute(
            &p,
            &obs(vec![ctr("i", ContainerState::Exited, 0, 0, 1), ctr("a", ContainerState::Running, 0, 0, 2)]),
            &ctx(),
        );
        assert_eq!(s.phase, "Running");
        assert!(s.init_container_statuses[0].ready);
        assert_eq!(cond(&s, "Initialized").status, "True");
        let never = pod(
            r#"{"restartPolicy":"Never","initContainers":[{"name":"i","image":"x:1"}],"containers":[{"name":"a","image":"x:1"}]}"#,
        );
        assert_eq!(compute(&never, &obs(vec![ctr("i", ContainerState::Exited, 1, 0, 1)]), &ctx()).phase, "Failed");
    }

    #[test]
    fn an_image_pull_failure_is_pending_with_its_reason() {
        let p = pod(ONE);
        let mut c = ctx();
        c.waiting.insert("a".into(), Wait { reason: WaitReason::ErrImagePull, message: "not found".into() });
        let s = compute(&p, &obs(vec![]), &c);
        assert_eq!(s.phase, "Pending");
        assert_eq!(s.container_statuses[0].state.waiting.as_ref().unwrap().reason, "ErrImagePull");
    }

    #[test]
    fn a_condition_keeps_its_transition_time_until_its_status_changes() {
        let p = pod(ONE);
        let starting = compute(&p, &obs(vec![]), &ctx());
        let running = compute(&p, &obs(vec![ctr("a", ContainerState::Running, 0, 0, 5)]), &ctx());
        assert!(running.conditions.iter().all(|c| c.last_transition_time.is_none()), "compute sets none itself");
        let time = |s: &PodStatus, t: &str| cond(s, t).last_transition_time.clone();
        let mut first = starting.clone();
        stamp_transitions(&mut first, None, "T0");
        assert!(first.conditions.iter().all(|c| c.last_transition_time.as_deref() == Some("T0")), "all new");
        let mut later = starting.clone();
        stamp_transitions(&mut later, Some(&first), "T1");
        assert_eq!(later, first, "nothing changed, nothing moved");
        let mut up = running.clone();
        stamp_transitions(&mut up, Some(&later), "T2");
        for (t, since) in [
            ("PodScheduled", "T0"),
            ("Initialized", "T0"),
            ("PodReadyToStartContainers", "T0"),
            ("Ready", "T2"),
            ("ContainersReady", "T2"),
        ] {
            assert_eq!(time(&up, t).as_deref(), Some(since), "{t}");
        }
        let mut still = running;
        stamp_transitions(&mut still, Some(&up), "T3");
        assert_eq!(time(&still, "Ready").as_deref(), Some("T2"));
        let mut down = starting;
        stamp_transitions(&mut down, Some(&still), "T4");
        assert_eq!(time(&down, "Ready").as_deref(), Some("T4"));
        assert_eq!(time(&down, "PodScheduled").as_deref(), Some("T0"));
    }

    #[test]
    fn status_serialises_with_api_field_names() {
        let p = pod(ONE);
        let s = compute(&p, &obs(vec![ctr("a", ContainerState::Running, 0, 0, 5)]), &ctx());
        let json = serde_json::to_string(&s).unwrap();
        for key in [
            "\"phase\":\"Running\"",
            "\"podIP\":\"10.0.0.9\"",
            "\"hostIP\"",
            "\"hostIPs\":[{\"ip\":\"192.0.2.1\"}]",
            "\"containerID\"",
            "\"imageID\"",
            "\"restartCount\"",
            "\"qosClass\"",
        ] {
            assert!(json.contains(key), "{key} missing in {json}");
        }
    }
}
