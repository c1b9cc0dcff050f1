//! The planner's scenarios: a new pod, restarts and back-off, init containers and sidecars,
//! probes, changed specs, dead sandboxes, deletion.
use super::*;
use crate::pod::identity;

fn pod(spec: &str) -> Pod {
    identity::test_pod(r#"{"name":"web"}"#, spec, "n")
}

const TWO: &str = r#"{"containers":[{"name":"a","image":"x:1"},{"name":"b","image":"x:1"}]}"#;
const INIT: &str = r#"{"initContainers":[{"name":"i0","image":"x:1"},{"name":"i1","image":"x:1"}],"containers":[{"name":"a","image":"x:1"}]}"#;

fn t(s: u64) -> SystemTime {
    SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000 + s)
}

fn sandbox(id: &str, attempt: u32, ready: bool) -> SandboxObs {
    SandboxObs {
        id: id.into(),
        attempt,
        ready,
        ip: "10.0.0.2".into(),
        host_network: false,
        created_at: attempt as i64,
        pid: None,
    }
}

fn ctr(pod: &Pod, name: &str, state: ContainerState, exit: i32, restarts: u32, created: i64) -> ContainerObs {
    let spec = pod.spec.init_containers.iter().chain(pod.spec.containers.iter()).find(|c| c.name == name).unwrap();
    ContainerObs {
        id: format!("{name}-{created}").into(),
        name: name.into(),
        sandbox_id: "s1".into(),
        restart_count: restarts,
        hash: container_hash(spec),
        state,
        exit_code: exit,
        reason: String::new(),
        message: String::new(),
        created_at: created,
        started_at: None,
        finished_at: (state == ContainerState::Exited).then(|| t(created as u64)),
        log_path: String::new(),
        image: String::new(),
        image_ref: String::new(),
        pid: None,
    }
}

fn obs(sandboxes: Vec<SandboxObs>, containers: Vec<ContainerObs>) -> Observed {
    let mut o = Observed { sandboxes, containers };
    o.normalise();
    o
}

fn run(pod: &Pod, o: &Observed) -> Plan {
    plan(pod, o, &ProbeVerdicts::default(), &Backoff::default(), t(100), false)
}

fn starts(p: &Plan) -> Vec<(SpecRef, u32)> {
    p.start.iter().map(|s| (s.which, s.restart_count)).collect()
}

#[test]
fn a_new_pod_gets_a_sandbox_and_all_its_containers() {
    let pod = pod(TWO);
    let p = run(&pod, &Observed::default());
    assert_eq!(p.create_sandbox, Some(0));
    assert!(!p.kill_pod && !p.purge_init);
    assert_eq!(starts(&p), vec![(SpecRef::Regular(0), 0), (SpecRef::Regular(1), 0)]);
}

#[test]
fn a_healthy_running_pod_is_left_alone_which_is_how_adoption_works() {
    let pod = pod(TWO);
    let o = obs(
        vec![sandbox("s1", 0, true)],
        vec![ctr(&pod, "a", ContainerState::Running, 0, 3, 5), ctr(&pod, "b", ContainerState::Running, 0, 0, 6)],
    );
    let p = run(&pod, &o);
    assert_eq!(p, Plan { sandbox_id: Some("s1".into()), ..Default::default() });
}

#[test]
fn init_containers_run_one_at_a_time_in_order() {
    let pod = pod(INIT);
    let fresh = run(&pod, &Observed::default());
    assert_eq!(fresh.create_sandbox, Some(0));
    assert_eq!(starts(&fresh), vec![(SpecRef::Init(0), 0)], "only the first init container starts");

    let running = obs(vec![sandbox("s1", 0, true)], vec![ctr(&pod, "i0", ContainerState::Running, 0, 0, 1)]);
    assert!(run(&pod, &running).start.is_empty(), "wait while it runs");

    let done0 = obs(vec![sandbox("s1", 0, true)], vec![ctr(&pod, "i0", ContainerState::Exited, 0, 0, 1)]);
    assert_eq!(starts(&run(&pod, &done0)), vec![(SpecRef::Init(1), 0)]);

    let done1 = obs(
        vec![sandbox("s1", 0, true)],
        vec![ctr(&pod, "i0", ContainerState::Exited, 0, 0, 1), ctr(&pod, "i1", ContainerState::Exited, 0, 0, 2)],
    );
    assert_eq!(starts(&run(&pod, &done1)), vec![(SpecRef::Regular(0), 0)]);
}

#[test]
fn a_failed_init_container_is_retried_or_fails_a_never_pod() {
    let p = pod(INIT);
    let failed = obs(vec![sandbox("s1", 0, true)], vec![ctr(&p, "i0", ContainerState::Exited, 1, 0, 1)]);
    assert_eq!(starts(&run(&p, &failed)), vec![(SpecRef::Init(0), 1)], "the same init container again");

    let never = pod(&INIT.replace(r#""containers""#, r#""restartPolicy":"Never","containers""#));
    let failed = obs(vec![sandbox("s1", 0, true)], vec![ctr(&never, "i0", ContainerState::Exited, 1, 0, 1)]);
    let plan = run(&never, &failed);
    assert!(plan.kill_pod && plan.start.is_empty());
}

#[test]
fn restart_policies_decide_what_happens_after_an_exit() {
    let always = pod(TWO);
    let o = obs(
        vec![sandbox("s1", 0, true)],
        vec![ctr(&always, "a", ContainerState::Exited, 0, 2, 5), ctr(&always, "b", ContainerState::Running, 0, 0, 6)],
    );
    assert_eq!(starts(&run(&always, &o)), vec![(SpecRef::Regular(0), 3)], "restartCount continues from the annotation");

    let on_failure = pod(&TWO.replace(r#"{"containers""#, r#"{"restartPolicy":"OnFailure","containers""#));
    let ok = obs(
        vec![sandbox("s1", 0, true)],
        vec![
            ctr(&on_failure, "a", ContainerState::Exited, 0, 0, 5),
            ctr(&on_failure, "b", ContainerState::Exited, 0, 0, 6),
        ],
    );
    let p = run(&on_failure, &ok);
    assert!(p.start.is_empty() && p.kill_pod, "all succeeded: release the sandbox");
    let failed = obs(
        vec![sandbox("s1", 0, true)],
        vec![
            ctr(&on_failure, "a", ContainerState::Exited, 2, 0, 5),
            ctr(&on_failure, "b", ContainerState::Running, 0, 0, 6),
        ],
    );
    assert_eq!(starts(&run(&on_failure, &failed)), vec![(SpecRef::Regular(0), 1)]);

    let never = pod(&TWO.replace(r#"{"containers""#, r#"{"restartPolicy":"Never","containers""#));
    let o = obs(
        vec![sandbox("s1", 0, true)],
        vec![ctr(&never, "a", ContainerState::Exited, 1, 0, 5), ctr(&never, "b", ContainerState::Exited, 0, 0, 6)],
    );
    let p = run(&never, &o);
    assert!(p.start.is_empty() && p.kill_pod);
    // And once its sandbox is gone, a Never pod stays finished.
    let gone = obs(vec![sandbox("s1", 0, false)], o.containers.clone());
    let p = run(&never, &gone);
    assert_eq!(p.create_sandbox, None);
    assert!(p.kill_pod);
}

#[test]
fn crash_loops_wait_out_their_back_off() {
    let pod = pod(TWO);
    let crashed = ctr(&pod, "a", ContainerState::Exited, 1, 4, 90); // finished at t(90)
    let o = obs(vec![sandbox("s1", 0, true)], vec![crashed, ctr(&pod, "b", ContainerState::Running, 0, 0, 6)]);
    let key = backoff_key(&pod, &pod.spec.containers[0]);
    let mut b = Backoff::default();
    b.advance(&key, t(50), t(50));
    b.advance(&key, t(80), t(80)); // now 20 s
    let p = plan(&pod, &o, &ProbeVerdicts::default(), &b, t(100), false);
    assert!(p.start.is_empty());
    assert_eq!(p.waiting.len(), 1);
    assert_eq!(p.waiting[0].wait.reason, WaitReason::CrashLoopBackOff);
    assert_eq!(p.waiting[0].retry_in, Duration::from_secs(10));
    assert!(!p.kill_pod, "a pod waiting to restart keeps its sandbox");
    // After the window the start happens and carries the back-off to advance.
    let p = plan(&pod, &o, &ProbeVerdicts::default(), &b, t(111), false);
    assert_eq!(p.start[0].backoff, Some((key, t(90))));
}

#[test]
fn a_dead_sandbox_is_replaced_and_initialisation_starts_over() {
    let pod = pod(INIT);
    let o = obs(
        vec![sandbox("s1", 0, false)],
        vec![
            ctr(&pod, "i0", ContainerState::Exited, 0, 0, 1),
            ctr(&pod, "i1", ContainerState::Exited, 0, 0, 2),
            ctr(&pod, "a", ContainerState::Running, 0, 0, 3),
        ],
    );
    let p = run(&pod, &o);
    assert_eq!(p.create_sandbox, Some(1));
    assert!(p.kill_pod && p.purge_init);
    assert_eq!(p.kill.iter().map(|k| k.name.as_str()).collect::<Vec<_>>(), vec!["a"]);
    assert_eq!(starts(&p), vec![(SpecRef::Init(0), 1)]);
}

#[test]
fn sandboxes_are_recreated_when_they_no_longer_fit() {
    let pod = pod(TWO);
    let two_ready = obs(vec![sandbox("s1", 0, true), sandbox("s2", 1, true)], vec![]);
    assert_eq!(run(&pod, &two_ready).create_sandbox, Some(2));
    let mut no_ip = sandbox("s1", 0, true);
    no_ip.ip.clear();
    assert_eq!(run(&pod, &obs(vec![no_ip], vec![])).create_sandbox, Some(1));
    let mut host = sandbox("s1", 0, true);
    host.host_network = true;
    assert_eq!(run(&pod, &obs(vec![host], vec![])).create_sandbox, Some(1), "hostNetwork changed");
    let host_pod = self::pod(&TWO.replace(r#"{"containers""#, r#"{"hostNetwork":true,"containers""#));
    let mut ok = sandbox("s1", 0, true);
    ok.ip.clear();
    ok.host_network = true;
    assert_eq!(run(&host_pod, &obs(vec![ok], vec![])).create_sandbox, None, "host-network sandboxes have no IP");
}

#[test]
fn failed_probes_and_changed_images_restart_running_containers() {
    let pod = pod(TWO);
    let a = ctr(&pod, "a", ContainerState::Running, 0, 0, 5);
    let mut b = ctr(&pod, "b", ContainerState::Running, 0, 0, 6);
    b.hash = "0ld".into();
    let o = obs(vec![sandbox("s1", 0, true)], vec![a.clone(), b]);
    let probes = ProbeVerdicts { liveness_failed: vec![a.id.clone()], startup_failed: vec![] };
    let p = plan(&pod, &o, &probes, &Backoff::default(), t(100), false);
    let kills: Vec<&str> = p.kill.iter().map(|k| k.message.as_str()).collect();
    assert_eq!(
        kills,
        vec![
            "Container a failed liveness probe, will be restarted",
            "Container b definition changed, will be restarted"
        ]
    );
    assert_eq!(starts(&p), vec![(SpecRef::Regular(0), 1), (SpecRef::Regular(1), 1)]);

    let never = self::pod(&TWO.replace(r#"{"containers""#, r#"{"restartPolicy":"Never","containers""#));
    let a = ctr(&never, "a", ContainerState::Running, 0, 0, 5);
    let o = obs(vec![sandbox("s1", 0, true)], vec![a.clone(), ctr(&never, "b", ContainerState::Running, 0, 0, 6)]);
    let probes = ProbeVerdicts { liveness_failed: vec![], startup_failed: vec![a.id.clone()] };
    let p = plan(&never, &o, &probes, &Backoff::default(), t(100), false);
    assert_eq!(p.kill.iter().map(|k| k.message.as_str()).collect::<Vec<_>>(), vec!["Container a failed startup probe"]);
    assert!(p.start.is_empty());
}

#[test]
fn unknown_and_stuck_created_containers_are_stopped_before_a_new_instance() {
    let pod = pod(TWO);
    let o = obs(
        vec![sandbox("s1", 0, true)],
        vec![ctr(&pod, "a", ContainerState::Unknown, 0, 1, 5), ctr(&pod, "b", ContainerState::Created, 0, 0, 6)],
    );
    let p = run(&pod, &o);
    let killed: Vec<&str> = p.kill.iter().map(|k| k.id.as_str()).collect();
    assert_eq!(killed, vec!["a-5", "b-6"]);
    assert_eq!(
        starts(&p),
        vec![(SpecRef::Regular(0), 2), (SpecRef::Regular(1), 1)],
        "a new attempt number: no name clash"
    );
}

#[test]
fn a_pod_being_deleted_is_only_stopped() {
    let pod = pod(TWO);
    let o = obs(
        vec![sandbox("s1", 0, true)],
        vec![ctr(&pod, "a", ContainerState::Running, 0, 0, 5), ctr(&pod, "b", ContainerState::Exited, 0, 0, 6)],
    );
    let p = plan(&pod, &o, &ProbeVerdicts::default(), &Backoff::default(), t(100), true);
    assert!(p.kill_pod && p.start.is_empty() && p.create_sandbox.is_none());
    assert_eq!(p.kill.len(), 1);
}

#[test]
fn garbage_keeps_the_newest_exited_instance_per_container_and_the_newest_sandbox() {
    let pod = pod(TWO);
    let mut old_sb = sandbox("s0", 0, false);
    old_sb.created_at = -1;
    let mut a_in_old = ctr(&pod, "a", ContainerState::Exited, 1, 0, 1);
    a_in_old.sandbox_id = "s0".into();
    let o = obs(
        vec![sandbox("s1", 1, true), old_sb],
        vec![
            a_in_old,
            ctr(&pod, "a", ContainerState::Exited, 1, 1, 2),
            ctr(&pod, "a", ContainerState::Exited, 1, 2, 3),
            ctr(&pod, "a", ContainerState::Running, 0, 3, 4),
            ctr(&pod, "b", ContainerState::Exited, 0, 0, 5),
        ],
    );
    let (containers, sandboxes) = garbage(&o);
    let mut ids: Vec<&str> = containers.iter().map(|c| c.id.as_str()).collect();
    ids.sort();
    assert_eq!(ids, vec!["a-1", "a-2"], "a-3 (newest exited) and b-5 stay");
    assert_eq!(
        sandboxes.iter().map(|s| s.id.as_str()).collect::<Vec<_>>(),
        vec!["s0"],
        "its only container is garbage too"
    );
}

#[test]
fn container_hash_depends_on_name_and_image_only() {
    let a = pod(TWO);
    let h = container_hash(&a.spec.containers[0]);
    assert_eq!(
        h,
        container_hash(
            &self::pod(&TWO.replace(r#""name":"a","image":"x:1""#, r#""name":"a","image":"x:1","args":["z"]"#))
                .spec
                .containers[0]
        )
    );
    assert_ne!(
        h,
        container_hash(
            &self::pod(&TWO.replace(r#""name":"a","image":"x:1""#, r#""name":"a","image":"x:2""#)).spec.containers[0]
        )
    );
}
