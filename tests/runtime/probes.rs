//! Probes against the real private containerd, with busybox's sh, httpd and nc as targets and
//! short periods: liveness restarts, readiness flips Ready without restarts, startup holds
//! liveness back and kills a container that never starts, exec timeouts count as failures.
//! HTTP probes go to pod IPs on the test bed's bridge; hostNetwork pods use 127.0.0.1.

use crate::common;

use atoll::cri::Cri;
use atoll::pod::status::{ContainerStatus, PodStatus};
use atoll::pod::Change;
use atoll::pod::{self, Origin, Policy, Shape, StaticPod};
use atoll::runtime::Engine;
use common::{eventually, testbed, unique, Testbed};
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// Workers resync only every 30 s: reactions to probe results must come from the probes.
fn shared(tb: &Testbed, root: &str) -> common::EngineEnv {
    common::engine_env(tb, root, Duration::from_secs(30), Default::default())
}

fn static_pod(yaml: &str, name: &str) -> StaticPod {
    let yaml = yaml.replace("NAME", name);
    let origin = Origin::File(PathBuf::from(format!("/manifests/{name}.yaml")));
    let mut loaded = pod::load(yaml.as_bytes(), Shape::SinglePod, &origin, "tb", Policy { strict: true })
        .unwrap_or_else(|e| panic!("{e}"));
    loaded.pods.remove(0)
}

fn container<'a>(s: &'a PodStatus, name: &str) -> &'a ContainerStatus {
    s.container_statuses.iter().find(|c| c.name == name).unwrap_or_else(|| panic!("no status for {name}: {s:?}"))
}

fn condition(s: &PodStatus, type_: &str) -> String {
    s.conditions.iter().find(|c| c.type_ == type_).map(|c| c.status.clone()).unwrap_or_default()
}

/// Waits for a status that passes `check`.
fn status_where(
    sh: &common::EngineEnv,
    uid: &str,
    limit: Duration,
    what: &str,
    check: impl Fn(&PodStatus) -> bool,
) -> PodStatus {
    eventually(limit, what, || sh.statuses().get(uid).filter(|s| check(s)))
}

/// An engine on the test bed running the pod `yaml` under a unique name.
fn run_pod(tb: &Testbed, root: &str, yaml: &str) -> (common::EngineEnv, Engine<Cri>, StaticPod) {
    let sh = shared(tb, root);
    let mut engine = sh.engine();
    let sp = static_pod(yaml, &unique(root));
    engine.apply(Change::Add(sp.clone()));
    (sh, engine, sp)
}

fn remove(engine: &mut Engine<Cri>, sh: &common::EngineEnv, sp: StaticPod) {
    let uid = sp.uid.clone();
    engine.apply(Change::Remove(sp));
    eventually(Duration::from_secs(30), "the pod removed", || sh.statuses().get(&uid).is_none().then_some(()));
}

fn exec(tb: &Testbed, status: &ContainerStatus, cmd: &str) {
    let id = status.container_id.trim_start_matches("containerd://");
    let out =
        smol::block_on(tb.cri().exec_sync(id, vec!["sh".into(), "-c".into(), cmd.into()], Duration::from_secs(5)))
            .unwrap();
    assert_eq!(out.exit_code, 0, "{cmd}: {}", String::from_utf8_lossy(&out.stderr));
}

const LIVENESS: &str = "apiVersion: v1
kind: Pod
metadata: {name: NAME}
spec:
  hostNetwork: true
  terminationGracePeriodSeconds: 120
  containers:
  - name: app
    image: docker.io/library/busybox:1.36
    # The first instance falls sick after 3 s and, as sh with PID 1, ignores SIGTERM: only the
    # probe's short grace lets the restart come quickly. The next one (the emptyDir remembers)
    # stays healthy and stops on SIGTERM.
    command: [sh, -c, 'if [ -f /data/ran ]; then trap \"exit 0\" TERM; sleep 3600 & wait; fi; touch /data/ran; sleep 3; touch /tmp/sick; sleep 3600']
    volumeMounts: [{name: data, mountPath: /data}]
    livenessProbe:
      exec: {command: [test, '!', -f, /tmp/sick]}
      periodSeconds: 1
      failureThreshold: 2
      terminationGracePeriodSeconds: 2
  volumes: [{name: data, emptyDir: {}}]
";

#[test]
fn a_failing_liveness_probe_restarts_the_container_with_the_probes_grace() {
    let _room = common::room(module_path!());
    let tb = testbed();
    let (sh, mut engine, sp) = run_pod(tb, "liveness", LIVENESS);
    let uid = sp.uid.clone();
    let first = status_where(&sh, &uid, Duration::from_secs(30), "the container running", |s| {
        container(s, "app").state.running.is_some()
    });
    let first_id = container(&first, "app").container_id.clone();
    let started = Instant::now();
    // Healthy 3 s, then two failed probes, then a stop with 2 s of grace (not the pod's 120).
    let restarted = status_where(&sh, &uid, Duration::from_secs(30), "a restart after the liveness failure", |s| {
        let c = container(s, "app");
        c.restart_count == 1 && c.state.running.is_some()
    });
    assert!(started.elapsed() < Duration::from_secs(20), "the restart took {:?}", started.elapsed());
    let c = container(&restarted, "app");
    assert_ne!(c.container_id, first_id, "a new instance");
    let last = c.last_state.terminated.as_ref().expect("lastState.terminated");
    assert_eq!(last.container_id, first_id);
    assert_eq!(last.exit_code, 137, "killed after the probe's grace");
    remove(&mut engine, &sh, sp);
}

const READINESS: &str = "apiVersion: v1
kind: Pod
metadata: {name: NAME}
spec:
  terminationGracePeriodSeconds: 1
  containers:
  - name: web
    image: docker.io/library/busybox:1.36
    command: [sh, -c, 'mkdir -p /www && exec httpd -f -p 8080 -h /www']
    ports: [{name: http, containerPort: 8080}]
    readinessProbe:
      httpGet: {path: /ready.html, port: http}
      periodSeconds: 1
      failureThreshold: 1
  - name: tcp-open
    image: docker.io/library/busybox:1.36
    command: [sleep, '3600']
    readinessProbe:
      tcpSocket: {port: 8080}
      periodSeconds: 1
  - name: tcp-closed
    image: docker.io/library/busybox:1.36
    command: [sleep, '3600']
    readinessProbe:
      tcpSocket: {port: 8081}
      periodSeconds: 1
";

#[test]
fn readiness_flips_ready_without_restarts() {
    let _room = common::room(module_path!());
    let tb = testbed();
    let (sh, mut engine, sp) = run_pod(tb, "readiness", READINESS);
    let uid = sp.uid.clone();
    // httpd answers 404 for the missing file: not ready. The shared network namespace makes
    // port 8080 open for the tcp-open container's probe, and 8081 closed.
    let s = status_where(&sh, &uid, Duration::from_secs(30), "all running, tcp-open ready", |s| {
        ["web", "tcp-open", "tcp-closed"].iter().all(|n| container(s, n).state.running.is_some())
            && container(s, "tcp-open").ready
    });
    assert!(s.pod_ip.starts_with("10.77.7."), "a bridge pod: {}", s.pod_ip);
    std::thread::sleep(Duration::from_secs(2));
    let s = sh.statuses().get(&uid).unwrap();
    assert!(!container(&s, "web").ready, "404 is not ready: {s:?}");
    assert!(!container(&s, "tcp-closed").ready, "a closed port is not ready");
    assert_eq!(condition(&s, "Ready"), "False");

    exec(tb, container(&s, "web"), "echo ok > /www/ready.html");
    status_where(&sh, &uid, Duration::from_secs(10), "web ready", |s| container(s, "web").ready);
    exec(tb, container(&s, "web"), "rm /www/ready.html");
    let s = status_where(&sh, &uid, Duration::from_secs(10), "web unready again", |s| !container(s, "web").ready);
    for n in ["web", "tcp-open", "tcp-closed"] {
        assert_eq!(container(&s, n).restart_count, 0, "readiness never restarts {n}");
    }
    remove(&mut engine, &sh, sp);
}

const STARTUP: &str = "apiVersion: v1
kind: Pod
metadata: {name: NAME}
spec:
  hostNetwork: true
  terminationGracePeriodSeconds: 1
  containers:
  - name: slow
    image: docker.io/library/busybox:1.36
    command: [sh, -c, 'sleep 3; [ -f /tmp/liveness-ran ] && touch /tmp/early; touch /tmp/started; sleep 3600']
    startupProbe:
      exec: {command: [test, -f, /tmp/started]}
      periodSeconds: 1
      failureThreshold: 10
    livenessProbe:
      exec: {command: [touch, /tmp/liveness-ran]}
      periodSeconds: 1
  - name: never
    image: docker.io/library/busybox:1.36
    command: [sh, -c, 'trap \"exit 0\" TERM; sleep 3600 & wait']
    startupProbe:
      exec: {command: ['false']}
      periodSeconds: 1
      failureThreshold: 2
";

#[test]
fn a_startup_probe_holds_liveness_back_and_kills_a_container_that_never_starts() {
    let _room = common::room(module_path!());
    let tb = testbed();
    let (sh, mut engine, sp) = run_pod(tb, "startup", STARTUP);
    let uid = sp.uid.clone();
    let s = status_where(&sh, &uid, Duration::from_secs(30), "slow running, not started", |s| {
        container(s, "slow").state.running.is_some()
    });
    let slow = container(&s, "slow");
    assert_eq!((slow.started, slow.ready), (Some(false), false), "not started until the startup probe passes");
    let s = status_where(&sh, &uid, Duration::from_secs(20), "slow started and ready", |s| {
        let c = container(s, "slow");
        c.started == Some(true) && c.ready
    });
    // The container looked for liveness's mark before it let the startup probe pass.
    let slow = container(&s, "slow");
    let id = slow.container_id.trim_start_matches("containerd://");
    let early = smol::block_on(tb.cri().exec_sync(
        id,
        vec!["test".into(), "-f".into(), "/tmp/early".into()],
        Duration::from_secs(5),
    ))
    .unwrap();
    assert_ne!(early.exit_code, 0, "liveness ran before the startup probe succeeded");
    eventually(Duration::from_secs(10), "liveness running after startup", || {
        let out = smol::block_on(tb.cri().exec_sync(
            id,
            vec!["test".into(), "-f".into(), "/tmp/liveness-ran".into()],
            Duration::from_secs(5),
        ))
        .unwrap();
        (out.exit_code == 0).then_some(())
    });
    assert_eq!(slow.restart_count, 0);

    // "never" fails its startup probe twice and is killed, again and again.
    let s = status_where(&sh, &uid, Duration::from_secs(30), "never restarted", |s| {
        container(s, "never").restart_count >= 1
    });
    let never = container(&s, "never");
    if never.state.running.is_some() {
        assert_eq!(never.started, Some(false), "never started: {never:?}");
    }
    assert!(!never.ready);
    assert_eq!(condition(&s, "ContainersReady"), "False");
    remove(&mut engine, &sh, sp);
}

const EXEC_TIMEOUT: &str = "apiVersion: v1
kind: Pod
metadata: {name: NAME}
spec:
  hostNetwork: true
  terminationGracePeriodSeconds: 1
  containers:
  - name: app
    image: docker.io/library/busybox:1.36
    command: [sh, -c, 'trap \"exit 0\" TERM; sleep 3600 & wait']
    livenessProbe:
      exec: {command: [sleep, '5']}
      timeoutSeconds: 1
      periodSeconds: 1
      failureThreshold: 2
  - name: steady
    image: docker.io/library/busybox:1.36
    command: [sh, -c, 'trap \"exit 0\" TERM; sleep 3600 & wait']
    livenessProbe:
      exec: {command: [sleep, '0']}
      timeoutSeconds: 1
      periodSeconds: 1
      failureThreshold: 1
";

#[test]
fn an_exec_probe_that_times_out_is_a_failure() {
    let _room = common::room(module_path!());
    let tb = testbed();
    let (sh, mut engine, sp) = run_pod(tb, "exectimeout", EXEC_TIMEOUT);
    let uid = sp.uid.clone();
    let s = status_where(&sh, &uid, Duration::from_secs(40), "app restarted after timeouts", |s| {
        container(s, "app").restart_count >= 1
    });
    assert_eq!(container(&s, "steady").restart_count, 0, "a probe within its timeout passes");
    remove(&mut engine, &sh, sp);
}

/// A pod with its own metadata.uid keeps it across an edit; the probes must follow the new
/// spec (a readiness probe that failed and now succeeds makes the pod Ready).
#[test]
fn an_edit_that_keeps_the_uid_restarts_the_probes_with_the_new_spec() {
    let _room = common::room(module_path!());
    let tb = testbed();
    let name = unique("sameuid");
    let yaml = |check: &str| {
        format!(
            "apiVersion: v1\nkind: Pod\nmetadata: {{name: {name}, uid: {name}-uid}}\nspec:\n  hostNetwork: true\n  terminationGracePeriodSeconds: 1\n  containers:\n  - name: app\n    image: docker.io/library/busybox:1.36\n    command: [sh, -c, 'trap \"exit 0\" TERM; sleep 3600 & wait']\n    readinessProbe: {{exec: {{command: [{check}]}}, periodSeconds: 1}}\n"
        )
    };
    let origin = Origin::File(PathBuf::from(format!("/manifests/{name}.yaml")));
    let load =
        |y: &str| pod::load(y.as_bytes(), Shape::SinglePod, &origin, "tb", Policy::default()).unwrap().pods.remove(0);
    let (v1, v2) = (load(&yaml("\"false\"")), load(&yaml("\"true\"")));
    assert_eq!(v1.uid, v2.uid);
    let sh = shared(tb, "sameuid");
    let mut engine = sh.engine();
    engine.apply(Change::Add(v1));
    status_where(&sh, &v2.uid, Duration::from_secs(30), "v1 running, not ready", |s| {
        s.container_statuses.first().is_some_and(|c| c.state.running.is_some() && !c.ready)
    });
    engine.apply(Change::Update(v2.clone()));
    status_where(&sh, &v2.uid, Duration::from_secs(30), "Ready with the new probe", |s| {
        condition(s, "Ready") == "True"
    });
    remove(&mut engine, &sh, v2);
}
