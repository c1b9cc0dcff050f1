//! The pod engine against the real private containerd: pods from manifests become sandboxes
//! and containers, and stay so (the containers' own settings: `engine_containers`).

use crate::common;

use atoll::cri::api::{ContainerFilter, ContainerState, PodSandboxFilter};
use atoll::cri::Cri;
use atoll::pod::Change;
use atoll::pod::{self, Origin, Policy, Shape, StaticPod};
use atoll::runtime::Engine;
use common::{eventually, testbed, unique, Testbed};
use std::collections::HashMap;
use std::path::PathBuf;
use std::time::Duration;

pub(super) fn shared(tb: &Testbed, root: &str) -> common::EngineEnv {
    shared_with(tb, root, Default::default())
}

/// Workers resync only every 30 s here: timely reactions must come from the relist waking them.
pub(super) fn shared_with(tb: &Testbed, root: &str, log_rotation: atoll::runtime::logs::Rotation) -> common::EngineEnv {
    common::engine_env(tb, root, Duration::from_secs(30), log_rotation)
}

/// Removes a pod and waits until the runtime has nothing left of it.
pub(super) fn remove(engine: &mut Engine<Cri>, tb: &Testbed, sp: StaticPod) {
    let uid = sp.uid.clone();
    engine.apply(Change::Remove(sp));
    eventually(Duration::from_secs(30), "the pod removed", || sandboxes(tb, &uid).is_empty().then_some(()));
}

/// A pod from YAML, named uniquely, as the file source would deliver it.
pub(super) fn static_pod(yaml: &str, name: &str) -> StaticPod {
    let yaml = yaml.replace("NAME", name);
    let origin = Origin::File(PathBuf::from(format!("/manifests/{name}.yaml")));
    let mut loaded = pod::load(yaml.as_bytes(), Shape::SinglePod, &origin, "tb", Policy::default())
        .unwrap_or_else(|e| panic!("{e}"));
    loaded.pods.remove(0)
}

fn by_uid(uid: &str) -> HashMap<String, String> {
    HashMap::from([("io.kubernetes.pod.uid".to_string(), uid.to_string())])
}

/// The pod's containers as (name, state, restartCount annotation, id).
pub(super) fn containers(tb: &Testbed, uid: &str) -> Vec<(String, i32, String, String)> {
    let cri = tb.cri();
    let list = smol::block_on(
        cri.list_containers(Some(ContainerFilter { label_selector: by_uid(uid), ..Default::default() })),
    )
    .unwrap();
    list.into_iter()
        .map(|c| {
            let rc = c.annotations.get("io.kubernetes.container.restartCount").cloned().unwrap_or_default();
            (c.labels["io.kubernetes.container.name"].clone(), c.state, rc, c.id)
        })
        .collect()
}

pub(super) fn running(tb: &Testbed, uid: &str, name: &str) -> Option<String> {
    containers(tb, uid)
        .into_iter()
        .find(|(n, s, _, _)| n == name && *s == ContainerState::ContainerRunning as i32)
        .map(|(_, _, _, id)| id)
}

fn sandboxes(tb: &Testbed, uid: &str) -> Vec<atoll::cri::api::PodSandbox> {
    smol::block_on(
        tb.cri().list_pod_sandbox(Some(PodSandboxFilter { label_selector: by_uid(uid), ..Default::default() })),
    )
    .unwrap()
}

pub(super) const SLEEPER: &str = "apiVersion: v1
kind: Pod
metadata:
  name: NAME
  labels:
    app: sleeper
spec:
  hostNetwork: true
  terminationGracePeriodSeconds: 1
  containers:
  - name: main
    image: docker.io/library/busybox:1.36
    command: [\"sleep\", \"3600\"]
";

#[test]
fn a_host_network_pod_runs_with_kubelets_labels() {
    let _room = common::room(module_path!());
    let tb = testbed();
    let mut engine = shared(tb, "hostnet").engine();
    let sp = static_pod(SLEEPER, &unique("sleeper"));
    let uid = sp.uid.clone();
    let name = sp.pod.metadata.name.clone();
    engine.apply(Change::Add(sp.clone()));
    eventually(Duration::from_secs(30), "the container running", || running(tb, &uid, "main"));
    let sb = &sandboxes(tb, &uid)[0];
    let mut keys: Vec<&str> = sb.labels.keys().map(String::as_str).collect();
    keys.sort();
    assert_eq!(
        keys,
        vec!["app", "io.kubernetes.pod.name", "io.kubernetes.pod.namespace", "io.kubernetes.pod.uid"],
        "kubelet's label set"
    );
    assert_eq!(sb.labels["io.kubernetes.pod.name"], name);
    let log = tb.logs.join(format!("default_{name}_{uid}")).join("main/0.log");
    assert!(
        log.exists() || log.parent().unwrap().exists(),
        "log directory {} made before the container",
        log.display()
    );

    remove(&mut engine, tb, sp);
    assert!(containers(tb, &uid).is_empty());
    assert!(!tb.logs.join(format!("default_{name}_{uid}")).exists(), "the pod's logs are removed with it");
}

#[test]
fn a_bridge_pod_with_two_containers_gets_an_ip() {
    let _room = common::room(module_path!());
    let tb = testbed();
    let mut engine = shared(tb, "bridge").engine();
    let yaml = "apiVersion: v1
kind: Pod
metadata:
  name: NAME
spec:
  terminationGracePeriodSeconds: 1
  containers:
  - name: web
    image: docker.io/library/busybox:1.36
    command: [\"httpd\", \"-f\", \"-p\", \"8080\", \"-h\", \"/var/www\"]
  - name: side
    image: docker.io/library/busybox:1.36
    command: [\"sleep\", \"3600\"]
";
    let sp = static_pod(yaml, &unique("bridge"));
    let uid = sp.uid.clone();
    engine.apply(Change::Add(sp.clone()));
    eventually(Duration::from_secs(30), "both containers running", || {
        (running(tb, &uid, "web").is_some() && running(tb, &uid, "side").is_some()).then_some(())
    });
    let sb = sandboxes(tb, &uid).remove(0);
    let st = smol::block_on(tb.cri().pod_sandbox_status(&sb.id, false)).unwrap().status.unwrap();
    let ip = st.network.unwrap().ip;
    assert!(ip.starts_with(&tb.subnet_prefix), "{ip}");
    remove(&mut engine, tb, sp);
}

#[test]
fn init_containers_run_in_order_and_env_expands() {
    let _room = common::room(module_path!());
    let tb = testbed();
    let mut engine = shared(tb, "init").engine();
    let yaml = "apiVersion: v1
kind: Pod
metadata:
  name: NAME
spec:
  hostNetwork: true
  terminationGracePeriodSeconds: 1
  initContainers:
  - name: first
    image: docker.io/library/busybox:1.36
    command: [\"sh\", \"-c\", \"echo -n a >> /work/order\"]
    volumeMounts: [{name: work, mountPath: /work}]
  - name: second
    image: docker.io/library/busybox:1.36
    command: [\"sh\", \"-c\", \"echo -n b >> /work/order\"]
    volumeMounts: [{name: work, mountPath: /work}]
  containers:
  - name: main
    image: docker.io/library/busybox:1.36
    command: [\"sh\", \"-c\", \"echo order=$(cat /work/order) greeting=$(GREETING) pod=$(POD); sleep 3600\"]
    env:
    - {name: WHO, value: world}
    - {name: GREETING, value: \"hello-$(WHO)\"}
    - name: POD
      valueFrom: {fieldRef: {fieldPath: metadata.name}}
    volumeMounts: [{name: work, mountPath: /work}]
  volumes:
  - name: work
    emptyDir: {}
";
    let sp = static_pod(yaml, &unique("init"));
    let (uid, name) = (sp.uid.clone(), sp.pod.metadata.name.clone());
    engine.apply(Change::Add(sp.clone()));
    eventually(Duration::from_secs(40), "main running", || running(tb, &uid, "main"));
    let log = tb.logs.join(format!("default_{name}_{uid}")).join("main/0.log");
    let text = eventually(Duration::from_secs(10), "main's output", || {
        std::fs::read_to_string(&log).ok().filter(|t| t.contains("order="))
    });
    assert!(text.contains(&format!("order=ab greeting=hello-world pod={name}")), "{text}");
    remove(&mut engine, tb, sp);
}

#[test]
fn a_crashing_container_is_restarted_with_its_restart_count() {
    let _room = common::room(module_path!());
    let tb = testbed();
    let mut engine = shared(tb, "crash").engine();
    let yaml = SLEEPER.replace("command: [\"sleep\", \"3600\"]", "command: [\"sh\", \"-c\", \"sleep 0.2; exit 3\"]");
    let sp = static_pod(&yaml, &unique("crash"));
    let uid = sp.uid.clone();
    engine.apply(Change::Add(sp.clone()));
    let counts = eventually(Duration::from_secs(40), "a restart", || {
        let c = containers(tb, &uid);
        (c.len() >= 2).then_some(c)
    });
    let _ = counts;
    // Each instance counts one more restart; old exited instances are collected, so at most
    // the newest and the last exited one remain.
    let seen = eventually(Duration::from_secs(60), "restart count 4", || {
        let c = containers(tb, &uid);
        let max = c.iter().map(|(_, _, rc, _)| rc.parse::<u32>().unwrap()).max().unwrap_or(0);
        (max >= 4).then_some(c)
    });
    std::thread::sleep(Duration::from_millis(800));
    let now = containers(tb, &uid);
    assert!(now.len() <= 2, "old instances are garbage collected: {now:?} (earlier {seen:?})");
    assert_eq!(sandboxes(tb, &uid).len(), 1, "restarts reuse the sandbox");
    remove(&mut engine, tb, sp);
}

#[test]
fn a_restarted_engine_adopts_running_pods_without_restarting_them() {
    let _room = common::room(module_path!());
    let tb = testbed();
    let sh = shared(tb, "adopt");
    let sp = static_pod(SLEEPER, &unique("adopt"));
    let uid = sp.uid.clone();
    let first_id = {
        let mut engine = sh.engine();
        engine.apply(Change::Add(sp.clone()));
        eventually(Duration::from_secs(30), "the container running", || running(tb, &uid, "main"))
        // The engine (and its workers) are dropped here, as when atoll is stopped.
    };
    let mut engine = sh.engine();
    engine.apply(Change::Add(sp.clone()));
    std::thread::sleep(Duration::from_secs(2));
    let now = containers(tb, &uid);
    assert_eq!(now.len(), 1, "no new container: {now:?}");
    assert_eq!(now[0].3, first_id);
    assert_eq!(now[0].1, ContainerState::ContainerRunning as i32);
    assert_eq!(sandboxes(tb, &uid).len(), 1);
    remove(&mut engine, tb, sp);
}

#[test]
fn a_missing_image_fails_its_pod_only() {
    let _room = common::room(module_path!());
    let tb = testbed();
    let sh = shared(tb, "badimage");
    let mut engine = sh.engine();
    let bad = static_pod(
        &SLEEPER.replace("docker.io/library/busybox:1.36", &format!("{}/atoll/absent:1", tb.var("ATOLL_TB_REGISTRY"))),
        &unique("bad"),
    );
    let good = static_pod(SLEEPER, &unique("good"));
    engine.apply(Change::Add(bad.clone()));
    engine.apply(Change::Add(good.clone()));
    eventually(Duration::from_secs(30), "the good pod running", || running(tb, &good.uid, "main"));
    std::thread::sleep(Duration::from_secs(1));
    assert!(containers(tb, &bad.uid).is_empty(), "no container without its image");
    assert_eq!(sandboxes(tb, &bad.uid).len(), 1, "its sandbox waits for the image");
    let status = eventually(Duration::from_secs(10), "a status for the bad pod", || sh.statuses().get(&bad.uid));
    assert_eq!(status.phase, "Pending");
    let reason = status.container_statuses[0].state.waiting.as_ref().map(|w| w.reason.clone()).unwrap_or_default();
    assert!(reason == "ErrImagePull" || reason == "ImagePullBackOff", "{status:?}");
    let good_status = eventually(Duration::from_secs(10), "the good pod Running", || {
        sh.statuses().get(&good.uid).filter(|s| s.phase == "Running")
    });
    assert!(good_status.container_statuses[0].container_id.starts_with("containerd://"));
    assert!(good_status.conditions.iter().any(|c| c.type_ == "Ready" && c.status == "True"), "{good_status:?}");
    remove(&mut engine, tb, bad);
    remove(&mut engine, tb, good);
}

#[test]
fn a_dead_sandbox_is_replaced_with_the_next_attempt() {
    let _room = common::room(module_path!());
    let tb = testbed();
    let mut engine = shared(tb, "sbdeath").engine();
    let sp = static_pod(SLEEPER, &unique("sbdeath"));
    let uid = sp.uid.clone();
    engine.apply(Change::Add(sp.clone()));
    let first = eventually(Duration::from_secs(30), "the container running", || running(tb, &uid, "main"));
    let sandbox = sandboxes(tb, &uid).remove(0);
    // Kill the sandbox's pause process behind atoll's back.
    let status = std::process::Command::new(tb.var("ATOLL_TB_CTR"))
        .args([
            "--address",
            tb.var("ATOLL_TB_SOCKET"),
            "--namespace",
            "k8s.io",
            "tasks",
            "kill",
            "--signal",
            "SIGKILL",
            &sandbox.id,
        ])
        .status()
        .unwrap();
    assert!(status.success());
    let replacement = eventually(Duration::from_secs(40), "a new sandbox with its container", || {
        let sbs = sandboxes(tb, &uid);
        let ready = sbs.iter().find(|s| s.state == atoll::cri::api::PodSandboxState::SandboxReady as i32)?;
        let attempt = ready.metadata.as_ref().map_or(0, |m| m.attempt);
        let c = running(tb, &uid, "main")?;
        (attempt == 1 && c != first).then(|| (ready.id.clone(), c))
    });
    assert_ne!(replacement.0, sandbox.id);
    remove(&mut engine, tb, sp);
}

#[test]
fn post_start_and_pre_stop_hooks_run() {
    let _room = common::room(module_path!());
    let tb = testbed();
    let mut engine = shared(tb, "hooks").engine();
    let marks = crate::common::Scratch::new("hooks");
    std::fs::create_dir_all(&marks).unwrap();
    let yaml = format!(
        "apiVersion: v1
kind: Pod
metadata:
  name: NAME
spec:
  hostNetwork: true
  terminationGracePeriodSeconds: 5
  containers:
  - name: main
    image: docker.io/library/busybox:1.36
    command: [\"sh\", \"-c\", \"trap 'exit 0' TERM; while :; do sleep 1; done\"]
    volumeMounts: [{{name: marks, mountPath: /marks}}]
    lifecycle:
      postStart:
        exec: {{command: [\"sh\", \"-c\", \"echo started > /marks/post-start\"]}}
      preStop:
        exec: {{command: [\"sh\", \"-c\", \"echo stopping > /marks/pre-stop\"]}}
  volumes:
  - name: marks
    hostPath: {{path: {}, type: Directory}}
",
        marks.display()
    );
    let sp = static_pod(&yaml, &unique("hooks"));
    let uid = sp.uid.clone();
    engine.apply(Change::Add(sp.clone()));
    eventually(Duration::from_secs(30), "postStart's mark", || std::fs::read_to_string(marks.join("post-start")).ok());
    assert!(running(tb, &uid, "main").is_some());
    assert!(!marks.join("pre-stop").exists());
    remove(&mut engine, tb, sp);
    assert_eq!(
        std::fs::read_to_string(marks.join("pre-stop")).unwrap().trim(),
        "stopping",
        "preStop ran before the stop"
    );
    std::fs::remove_dir_all(&marks).unwrap();
}

#[test]
fn a_failing_post_start_hook_kills_and_restarts_the_container() {
    let _room = common::room(module_path!());
    let tb = testbed();
    let sh = shared(tb, "hookfail");
    let mut engine = sh.engine();
    let yaml = SLEEPER.replace(
        "    command: [\"sleep\", \"3600\"]\n",
        "    command: [\"sleep\", \"3600\"]\n    lifecycle:\n      postStart:\n        exec: {command: [\"false\"]}\n",
    );
    let sp = static_pod(&yaml, &unique("hookfail"));
    let uid = sp.uid.clone();
    engine.apply(Change::Add(sp.clone()));
    eventually(Duration::from_secs(40), "a second instance", || {
        let c = containers(tb, &uid);
        c.iter().any(|(_, _, rc, _)| rc == "1").then_some(())
    });
    remove(&mut engine, tb, sp);
}

#[test]
fn active_deadline_seconds_stops_the_pod_for_good() {
    let _room = common::room(module_path!());
    let tb = testbed();
    let sh = shared(tb, "deadline");
    let mut engine = sh.engine();
    let yaml = SLEEPER.replace("  hostNetwork: true\n", "  hostNetwork: true\n  activeDeadlineSeconds: 3\n");
    let sp = static_pod(&yaml, &unique("deadline"));
    let uid = sp.uid.clone();
    engine.apply(Change::Add(sp.clone()));
    eventually(Duration::from_secs(30), "the container running", || running(tb, &uid, "main"));
    let status =
        eventually(Duration::from_secs(30), "phase Failed", || sh.statuses().get(&uid).filter(|s| s.phase == "Failed"));
    assert_eq!(status.reason.as_deref(), Some("DeadlineExceeded"));
    eventually(Duration::from_secs(20), "nothing running", || running(tb, &uid, "main").is_none().then_some(()));
    std::thread::sleep(Duration::from_secs(2));
    assert!(running(tb, &uid, "main").is_none(), "a pod past its deadline is not restarted");
    remove(&mut engine, tb, sp);
}

#[test]
fn host_path_mounts_and_resources_reach_the_container() {
    let _room = common::room(module_path!());
    let tb = testbed();
    let mut engine = shared(tb, "resources").engine();
    let host = crate::common::Scratch::new("hostpath");
    let yaml = format!(
        "apiVersion: v1
kind: Pod
metadata:
  name: NAME
spec:
  hostNetwork: true
  terminationGracePeriodSeconds: 1
  containers:
  - name: main
    image: docker.io/library/busybox:1.36
    command: [\"sh\", \"/host/probe.sh\"]
    resources:
      limits: {{cpu: 500m, memory: 64Mi}}
    volumeMounts: [{{name: host, mountPath: /host}}]
  volumes:
  - name: host
    hostPath: {{path: {}, type: DirectoryOrCreate}}
",
        host.display()
    );
    // What the container reports: its memory limit and CFS quota, from cgroup v2 or v1.
    std::fs::create_dir_all(&host).unwrap();
    std::fs::write(
        host.join("probe.sh"),
        "cg=/sys/fs/cgroup\n\
         mem=$(cat $cg/memory.max 2>/dev/null || cat $cg/memory/memory.limit_in_bytes)\n\
         cpu=$(cat $cg/cpu.max 2>/dev/null || echo $(cat $cg/cpu/cpu.cfs_quota_us) $(cat $cg/cpu/cpu.cfs_period_us))\n\
         echo mem=$mem cpu=$cpu > /host/report\n\
         exec sleep 3600\n",
    )
    .unwrap();
    let sp = static_pod(&yaml, &unique("res"));
    engine.apply(Change::Add(sp.clone()));
    let report = eventually(Duration::from_secs(30), "the container's report in the hostPath", || {
        std::fs::read_to_string(host.join("report")).ok().filter(|r| r.contains("cpu="))
    });
    assert_eq!(
        report.trim(),
        format!("mem={} cpu=50000 100000", 64 << 20),
        "DirectoryOrCreate made {}",
        host.display()
    );
    remove(&mut engine, tb, sp);
    assert!(host.join("report").exists(), "a hostPath outlives the pod");
    std::fs::remove_dir_all(&host).unwrap();
}

#[test]
fn a_new_version_of_a_pod_starts_only_after_the_old_one_is_gone() {
    let _room = common::room(module_path!());
    let tb = testbed();
    let sh = shared(tb, "replace");
    let mut engine = sh.engine();
    let finished = engine.finished();
    let name = unique("replace");
    let v1 = static_pod(
        &SLEEPER
            .replace("app: sleeper", "app: v1")
            .replace("terminationGracePeriodSeconds: 1", "terminationGracePeriodSeconds: 3"),
        &name,
    );
    let v2 = static_pod(&SLEEPER.replace("app: sleeper", "app: v2"), &name);
    assert_ne!(v1.uid, v2.uid);
    engine.apply(Change::Add(v1.clone()));
    eventually(Duration::from_secs(30), "v1 running", || running(tb, &v1.uid, "main"));
    // An edit: the merge sends remove(v1), add(v2).
    engine.apply(Change::Remove(v1.clone()));
    engine.apply(Change::Add(v2.clone()));
    // While v1 terminates (within its 3 s grace), v2 has nothing on the runtime.
    let mut overlap = false;
    let deadline = std::time::Instant::now() + Duration::from_secs(40);
    loop {
        if let Ok(uid) = finished.try_recv() {
            engine.worker_done(&uid);
        }
        let old = sandboxes(tb, &v1.uid).len();
        let new = sandboxes(tb, &v2.uid).len();
        if old > 0 && new > 0 {
            overlap = true;
        }
        if old == 0 && running(tb, &v2.uid, "main").is_some() {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "v2 did not start after v1 was gone");
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(!overlap, "the two versions of one pod existed at the same time");
    remove(&mut engine, tb, v2);
}
