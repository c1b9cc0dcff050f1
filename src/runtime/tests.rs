//! The engine against the in-memory runtime (`fake`): a pod's sync, back-off, image pulls,
//! teardown, adoption after a restart, orphans, the replacement of a pod changed while atoll
//! was down, a restart through the worker. The real-containerd tests (`tests/engine*.rs`)
//! prove the same against containerd; these prove the engine's own decisions, fast.

use super::context::Context;
use super::sync::{sync, Mode, Synced};
use super::{Engine, EngineConfig, Tuning, TuningConfig};
use crate::cri::api::ContainerState as Cri;
use crate::cri::fake::FakeRuntime;
use crate::node::observed::{ProbeVerdicts, WaitReason, Waits};
use crate::node::probing::NoProbes;
use crate::node::{Facts, Node};
use crate::pod::{self, Change, Origin, Policy, Shape, StaticPod};
use std::sync::Arc;
use std::time::{Duration, Instant};

const IMAGE: &str = "docker.io/library/busybox:1.36";

pub(super) fn dir(name: &str) -> crate::testdir::TestDir {
    crate::testdir::TestDir::new(&format!("engine-unit-{name}"))
}

fn node(root: &std::path::Path) -> Arc<Node> {
    let facts = Facts {
        name: "n1".into(),
        root_dir: root.join("state"),
        pod_logs_dir: root.join("logs"),
        host_ip: "192.0.2.1".into(),
        cpu_millis: 2000,
        memory_bytes: 4 << 30,
        runtime_name: "fake".into(),
        ..Default::default()
    };
    Node::new(facts)
}

pub(super) fn context(root: &std::path::Path, rt: &FakeRuntime) -> Context<FakeRuntime> {
    let config = EngineConfig { resync: Some(Duration::from_millis(200)), ..Default::default() };
    context_with(root, rt, config)
}

fn context_with(root: &std::path::Path, rt: &FakeRuntime, config: EngineConfig) -> Context<FakeRuntime> {
    let s = Duration::from_secs(1);
    let workers = super::workers::Workers::new();
    Context {
        node: node(root),
        runtime: rt.clone(),
        tuning: Arc::new(Tuning::new(&TuningConfig::back_off((s, s * 4)))),
        config,
        prober: Arc::new(NoProbes),
        workers: workers.clone(),
        pleg: super::pleg::Pleg::new(workers),
        runtime_version: Default::default(),
    }
}

pub(super) fn static_pod(yaml: &str) -> StaticPod {
    let origin = Origin::File("/manifests/web.yaml".into());
    pod::load(yaml.as_bytes(), Shape::SinglePod, &origin, "n1", Policy::default()).unwrap().pods.remove(0)
}

const WEB: &str = "apiVersion: v1
kind: Pod
metadata: {name: web}
spec:
  terminationGracePeriodSeconds: 5
  initContainers:
  - {name: init, image: docker.io/library/busybox:1.36}
  containers:
  - name: app
    image: docker.io/library/busybox:1.36
    lifecycle: {preStop: {exec: {command: [sh, -c, 'echo bye']}}}
  - {name: side, image: docker.io/library/busybox:1.36}
";

/// Syncs until the runtime stops changing (or `limit` syncs).
fn converge(cx: &Context<FakeRuntime>, sp: &StaticPod, waits: &mut Waits, limit: usize) -> Synced {
    let mut last = Synced::Again(None);
    for _ in 0..limit {
        let (s, _) = smol::block_on(sync(cx, &sp.pod, Mode::Run, &ProbeVerdicts::default(), waits)).unwrap();
        last = s;
    }
    last
}

/// The container that ran a preStop hook (the only one with an exec here).
fn rt_app_id(calls: &[String]) -> String {
    calls.iter().find_map(|c| c.strip_prefix("ExecSync ")).unwrap_or_default().to_string()
}

fn running(rt: &FakeRuntime) -> Vec<String> {
    let mut names: Vec<String> =
        rt.containers().into_iter().filter(|c| c.1 == Cri::ContainerRunning).map(|c| c.0).collect();
    names.sort();
    names
}

#[test]
fn a_new_pod_gets_a_sandbox_then_its_init_then_its_containers() {
    let root = dir("new");
    let rt = FakeRuntime::default().with_image(IMAGE);
    let cx = context(&root, &rt);
    let sp = static_pod(WEB);
    let mut waits = Waits::new();
    converge(&cx, &sp, &mut waits, 1);
    assert_eq!(rt.count("RunPodSandbox"), 1);
    assert_eq!(running(&rt), ["init"], "the init container first, alone");
    rt.exit(&rt.containers()[0].3, 0);
    converge(&cx, &sp, &mut waits, 2);
    assert_eq!(running(&rt), ["app", "side"]);
    assert_eq!(rt.count("RunPodSandbox"), 1, "one sandbox");
    assert_eq!(rt.count("PullImage"), 0, "the image is present (IfNotPresent)");
    assert!(root.join("state/pods").join(sp.uid.as_str()).join("etc-hosts").exists(), "the managed hosts file");
}

#[test]
fn a_crashed_container_restarts_at_once_then_waits_out_its_back_off() {
    let root = dir("crash");
    let rt = FakeRuntime::default().with_image(IMAGE);
    let cx = context(&root, &rt);
    let sp =
        static_pod(&WEB.replace("  initContainers:\n  - {name: init, image: docker.io/library/busybox:1.36}\n", ""));
    let mut waits = Waits::new();
    converge(&cx, &sp, &mut waits, 1);
    let app = |rt: &FakeRuntime| rt.containers().into_iter().rfind(|c| c.0 == "app").unwrap();
    rt.exit(&app(&rt).3, 1);
    converge(&cx, &sp, &mut waits, 1);
    assert_eq!((app(&rt).1, app(&rt).2.as_str()), (Cri::ContainerRunning, "1"), "first restart at once");
    rt.exit(&app(&rt).3, 1);
    let synced = converge(&cx, &sp, &mut waits, 1);
    assert_eq!(app(&rt).1, Cri::ContainerExited, "the second waits for the back-off");
    assert_eq!(waits.get("app").map(|w| w.reason), Some(WaitReason::CrashLoopBackOff));
    let Synced::Again(Some(retry)) = synced else { panic!("a retry time: {synced:?}") };
    assert!(retry <= Duration::from_secs(1), "{retry:?}");
    std::thread::sleep(retry);
    converge(&cx, &sp, &mut waits, 1);
    assert_eq!((app(&rt).1, app(&rt).2.as_str()), (Cri::ContainerRunning, "2"));
    assert!(!waits.contains_key("app"));
}

#[test]
fn an_image_that_cannot_be_pulled_waits_and_backs_off_without_pulling_again() {
    let root = dir("image");
    let rt = FakeRuntime::default();
    rt.unpullable("docker.io/library/nope:1");
    let cx = context(&root, &rt);
    let sp = static_pod("apiVersion: v1\nkind: Pod\nmetadata: {name: web}\nspec:\n  containers:\n  - {name: c, image: docker.io/library/nope:1}\n");
    let mut waits = Waits::new();
    converge(&cx, &sp, &mut waits, 1);
    assert_eq!(waits.get("c").map(|w| w.reason), Some(WaitReason::ErrImagePull));
    assert_eq!(rt.count("PullImage"), 1);
    converge(&cx, &sp, &mut waits, 2);
    assert_eq!(waits.get("c").map(|w| w.reason), Some(WaitReason::ImagePullBackOff));
    assert_eq!(rt.count("PullImage"), 1, "no pull during the back-off");
    assert_eq!(rt.count("CreateContainer"), 0);
    // kubelet's events: the failed pull a warning, the back-off after it a normal event.
    let events = cx.node.events().all();
    let kinds: Vec<(&str, &str)> = events.iter().map(|e| (e.type_, e.reason.as_str())).collect();
    assert_eq!(kinds, [("Normal", "Pulling"), ("Warning", "Failed"), ("Normal", "BackOff")], "{events:?}");
}

#[test]
fn an_image_still_being_imported_is_a_normal_wait_not_a_failure() {
    let root = dir("importing");
    let rt = FakeRuntime::default();
    let cx = context(&root, &rt);
    cx.node.imports().set("app.tar", crate::node::imports::FileState::Importing);
    let sp = static_pod("apiVersion: v1\nkind: Pod\nmetadata: {name: web}\nspec:\n  containers:\n  - {name: c, image: docker.io/library/app:1}\n");
    let mut waits = Waits::new();
    converge(&cx, &sp, &mut waits, 1);
    assert_eq!(waits.get("c").map(|w| w.reason), Some(WaitReason::ImageImporting));
    assert_eq!(rt.count("PullImage"), 0, "no pull while the directory may hold the image");
    let events = cx.node.events().all();
    let kinds: Vec<(&str, &str)> = events.iter().map(|e| (e.type_, e.reason.as_str())).collect();
    assert_eq!(kinds, [("Normal", "ImageImporting")], "{events:?}");
    assert!(events[0].message.contains("app.tar"), "{events:?}");
}

#[test]
fn teardown_runs_pre_stop_then_stops_and_removes_everything() {
    let root = dir("teardown");
    let rt = FakeRuntime::default().with_image(IMAGE);
    let cx = context(&root, &rt);
    let sp =
        static_pod(&WEB.replace("  initContainers:\n  - {name: init, image: docker.io/library/busybox:1.36}\n", ""));
    let mut waits = Waits::new();
    converge(&cx, &sp, &mut waits, 1);
    rt.forget_calls();
    let (synced, _) = smol::block_on(sync(
        &cx,
        &sp.pod,
        Mode::Terminate(Duration::from_secs(5)),
        &ProbeVerdicts::default(),
        &mut waits,
    ))
    .unwrap();
    assert_eq!(synced, Synced::Removed);
    let calls = rt.calls();
    let app = &rt_app_id(&calls);
    let at = |c: &str| calls.iter().position(|x| x == c).unwrap_or_else(|| panic!("no {c} in {calls:?}"));
    let first = |m: &str| calls.iter().position(|c| c.starts_with(m)).unwrap_or_else(|| panic!("no {m} in {calls:?}"));
    assert!(at(&format!("ExecSync {app}")) < at(&format!("StopContainer {app}")), "preStop before the stop: {calls:?}");
    assert!(first("StopContainer") < first("StopPodSandbox") && first("StopPodSandbox") < first("RemovePodSandbox"));
    assert!(rt.containers().is_empty() && rt.sandboxes().is_empty());
    assert!(!root.join("state/pods").join(sp.uid.as_str()).exists(), "the pod's directory is gone");
}

#[test]
fn a_restarted_engine_adopts_what_runs_and_creates_nothing() {
    let root = dir("adopt");
    let rt = FakeRuntime::default().with_image(IMAGE);
    let sp =
        static_pod(&WEB.replace("  initContainers:\n  - {name: init, image: docker.io/library/busybox:1.36}\n", ""));
    converge(&context(&root, &rt), &sp, &mut Waits::new(), 1);
    let before = rt.containers();
    rt.forget_calls();
    // A new context is a restarted atoll: nothing in memory.
    converge(&context(&root, &rt), &sp, &mut Waits::new(), 3);
    assert_eq!(rt.containers(), before);
    for m in ["RunPodSandbox", "CreateContainer", "StartContainer", "StopContainer"] {
        assert_eq!(rt.count(m), 0, "{m} after a restart: {:?}", rt.calls());
    }
}

#[test]
fn a_runtime_class_that_is_not_configured_fails_the_pod() {
    let root = dir("class");
    let rt = FakeRuntime::default().with_image(IMAGE);
    let cx = context(&root, &rt);
    let sp = static_pod("apiVersion: v1\nkind: Pod\nmetadata: {name: web}\nspec:\n  runtimeClassName: gvisor\n  containers:\n  - {name: c, image: docker.io/library/busybox:1.36}\n");
    let e = smol::block_on(sync(&cx, &sp.pod, Mode::Run, &ProbeVerdicts::default(), &mut Waits::new())).unwrap_err();
    assert!(matches!(&e, super::errors::SyncError::Refused(f) if f.message.contains("RuntimeClass \"gvisor\"")), "{e}");
    assert_eq!(rt.count("RunPodSandbox"), 0);
}

/// An engine on the fake runtime, its owner's loop run by hand.
fn engine(root: &std::path::Path, rt: &FakeRuntime) -> Engine<FakeRuntime> {
    let cx = context(root, rt);
    Engine::new(cx.node, rt.clone(), cx.tuning, cx.config, cx.prober)
}

#[test]
fn a_crash_is_acted_on_when_the_runtime_says_so_not_at_the_next_relist() {
    let root = dir("events");
    let rt = FakeRuntime::default().with_image(IMAGE).with_events();
    // Neither the relist nor a resync comes within the test: only the event can wake the worker.
    let hour = Duration::from_secs(3600);
    let cx = context_with(&root, &rt, EngineConfig { resync: Some(hour), relist: hour, ..Default::default() });
    let mut e = Engine::new(cx.node, rt.clone(), cx.tuning, cx.config, cx.prober);
    let sp = static_pod("apiVersion: v1\nkind: Pod\nmetadata: {name: web}\nspec:\n  containers:\n  - {name: c, image: docker.io/library/busybox:1.36}\n");
    e.apply(Change::Add(sp.clone()));
    run_until(&mut e, "the pod running", || running(&rt) == ["c"]);
    let control = e.control();
    run_until(&mut e, "events live", || control.runtime_signal() == super::pleg::Signal::Events);
    // Past the relist that runs when events go live.
    std::thread::sleep(Duration::from_millis(300));
    let first = rt.containers()[0].3.clone();
    rt.exit(&first, 1);
    run_until(&mut e, "the container restarted", || {
        rt.containers().iter().any(|c| c.1 == Cri::ContainerRunning && c.2 == "1")
    });
    e.apply(Change::Remove(sp));
    run_until(&mut e, "the pod removed", || rt.sandboxes().is_empty());
}

#[test]
fn events_that_go_to_another_reader_turn_process_exits_on() {
    let root = dir("stolen");
    let rt = FakeRuntime::default().with_image(IMAGE).with_events();
    let cx = context_with(&root, &rt, EngineConfig { relist: Duration::from_secs(1), ..Default::default() });
    let mut e = Engine::new(cx.node, rt.clone(), cx.tuning, cx.config, cx.prober);
    let control = e.control();
    let sp = static_pod("apiVersion: v1\nkind: Pod\nmetadata: {name: web}\nspec:\n  containers:\n  - {name: c, image: docker.io/library/busybox:1.36}\n");
    e.apply(Change::Add(sp.clone()));
    run_until(&mut e, "the pod running", || running(&rt) == ["c"]);
    run_until(&mut e, "events live", || control.runtime_signal() == super::pleg::Signal::Events);
    std::thread::sleep(Duration::from_millis(1500));
    assert_eq!(control.runtime_signal(), super::pleg::Signal::Events, "nothing was missed yet");
    rt.steal_events();
    let first = rt.containers()[0].3.clone();
    rt.exit(&first, 1);
    // The relist restarts it, and finds that no event announced the change.
    run_until(&mut e, "process exits watched too", || control.runtime_signal() == super::pleg::Signal::EventsAndExits);
    e.apply(Change::Remove(sp));
    run_until(&mut e, "the pod removed", || rt.sandboxes().is_empty());
}

#[test]
fn without_runtime_events_process_exits_are_watched() {
    let root = dir("noevents");
    let rt = FakeRuntime::default().with_image(IMAGE);
    let mut e = engine(&root, &rt);
    let control = e.control();
    let expected =
        if super::pleg::exits::supported() { super::pleg::Signal::Exits } else { super::pleg::Signal::Relist };
    run_until(&mut e, "the fallback chosen", || control.runtime_signal() == expected);
}

#[test]
fn the_probes_run_on_the_engines_own_runtime() {
    // The probe manager the agent builds, on the runtime the engine uses (here the fake): an
    // exec liveness probe that starts failing restarts the container.
    let root = dir("probes-on-fake");
    let rt = FakeRuntime::default().with_image(IMAGE);
    let cx = context(&root, &rt);
    let prober = crate::probe::Manager::new(cx.node.clone(), rt.clone());
    let mut e = Engine::new(cx.node, rt.clone(), cx.tuning, cx.config, prober);
    let sp = static_pod("apiVersion: v1\nkind: Pod\nmetadata: {name: web}\nspec:\n  containers:\n  - name: c\n    image: docker.io/library/busybox:1.36\n    livenessProbe: {exec: {command: [\"true\"]}, periodSeconds: 1, failureThreshold: 1}\n");
    e.apply(Change::Add(sp.clone()));
    run_until(&mut e, "running and probed", || running(&rt) == ["c"] && rt.count("ExecSync") >= 1);
    assert_eq!(rt.count("StopContainer"), 0, "a passing probe kills nothing");
    rt.exec_exits(1);
    run_until(&mut e, "killed for its liveness probe", || rt.count("StopContainer") >= 1);
    run_until(&mut e, "started again", || rt.count("StartContainer") >= 2);
    e.apply(Change::Remove(sp));
    run_until(&mut e, "the pod removed", || rt.sandboxes().is_empty());
}

/// Passes finished workers back to the engine until `done` holds (or 10 s pass).
fn run_until(engine: &mut Engine<FakeRuntime>, what: &str, done: impl Fn() -> bool) {
    let finished = engine.finished();
    let deadline = Instant::now() + Duration::from_secs(10);
    while !done() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        while let Ok(uid) = finished.try_recv() {
            engine.worker_done(&uid);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn orphans_stop_with_their_recorded_pre_stop_and_a_replacement_waits_for_them() {
    let root = dir("orphan");
    let rt = FakeRuntime::default().with_image(IMAGE);
    let old =
        static_pod(&WEB.replace("  initContainers:\n  - {name: init, image: docker.io/library/busybox:1.36}\n", ""));
    converge(&context(&root, &rt), &old, &mut Waits::new(), 1);
    rt.forget_calls();
    // atoll restarts; the manifest changed meanwhile (same name, another UID).
    let new = static_pod(
        &WEB.replace("  initContainers:\n  - {name: init, image: docker.io/library/busybox:1.36}\n", "")
            .replace("name: side", "name: other"),
    );
    assert_ne!(old.uid, new.uid);
    let mut e = engine(&root, &rt);
    smol::block_on(e.adopt());
    e.apply(Change::Add(new.clone()));
    run_until(&mut e, "the new version running", || running(&rt) == ["app", "other"]);
    let calls = rt.calls();
    let first = |m: &str| calls.iter().position(|c| c.starts_with(m)).unwrap_or_else(|| panic!("no {m} in {calls:?}"));
    assert!(first("ExecSync") < first("RemovePodSandbox"), "the old preStop ran: {calls:?}");
    assert!(first("RemovePodSandbox") < first("RunPodSandbox"), "the old version was gone first: {calls:?}");
    // Nobody wants the new one either: removed as an orphan once the sources have spoken.
    let mut e2 = engine(&root, &rt);
    smol::block_on(e2.remove_orphans(&Default::default()));
    run_until(&mut e2, "everything removed", || rt.sandboxes().is_empty());
    e.apply(Change::Remove(new));
}

#[test]
fn a_restart_through_control_goes_through_the_worker_and_runs_pre_stop() {
    let root = dir("restart");
    let rt = FakeRuntime::default().with_image(IMAGE);
    let sp =
        static_pod(&WEB.replace("  initContainers:\n  - {name: init, image: docker.io/library/busybox:1.36}\n", ""));
    let mut e = engine(&root, &rt);
    e.apply(Change::Add(sp.clone()));
    run_until(&mut e, "the pod running", || running(&rt) == ["app", "side"]);
    rt.forget_calls();
    let stopped = smol::block_on(e.control().restart(&sp.uid)).expect("a worker answered");
    let mut stopped = stopped;
    stopped.sort();
    assert_eq!(stopped, ["app", "side"]);
    let calls = rt.calls();
    let app = rt_app_id(&calls);
    let at = |c: String| calls.iter().position(|x| *x == c);
    assert!(at(format!("ExecSync {app}")) < at(format!("StopContainer {app}")), "preStop first: {calls:?}");
    run_until(&mut e, "the containers back", || {
        rt.containers().iter().filter(|c| c.1 == Cri::ContainerRunning && c.2 == "1").count() == 2
    });
    assert_eq!(smol::block_on(e.control().restart("no-such-uid")), None);
    e.apply(Change::Remove(sp));
    run_until(&mut e, "the pod removed", || rt.sandboxes().is_empty());
}

#[test]
fn a_failed_sandbox_is_an_error_of_that_sync_and_the_next_one_retries() {
    let root = dir("sandbox");
    let rt = FakeRuntime::default().with_image(IMAGE);
    let cx = context(&root, &rt);
    let sp = static_pod("apiVersion: v1\nkind: Pod\nmetadata: {name: web}\nspec:\n  containers:\n  - {name: c, image: docker.io/library/busybox:1.36}\n");
    rt.fail_next("RunPodSandbox", crate::cri::Code::Unavailable);
    let e = smol::block_on(sync(&cx, &sp.pod, Mode::Run, &ProbeVerdicts::default(), &mut Waits::new())).unwrap_err();
    assert!(matches!(e, super::errors::SyncError::CreateSandbox(_)), "{e}");
    assert!(e.to_string().starts_with("FailedCreatePodSandBox: "), "{e}");
    converge(&cx, &sp, &mut Waits::new(), 1);
    assert_eq!(running(&rt), ["c"]);
}

const WITH_IMAGE_VOLUME: &str = "apiVersion: v1
kind: Pod
metadata: {name: etcd}
spec:
  volumes:
  - name: tools
    image: {reference: registry.example/etcd-tools:1}
  containers:
  - name: c
    image: docker.io/library/busybox:1.36
    volumeMounts: [{name: tools, mountPath: /opt/tools}]
";

#[test]
fn an_image_volume_the_runtime_cannot_mount_fails_the_pod_before_anything_runs() {
    let root = dir("imagevol-old");
    let rt = FakeRuntime::default().with_image(IMAGE).with_version("1.7.24");
    let cx = context(&root, &rt);
    let sp = static_pod(WITH_IMAGE_VOLUME);
    let e = smol::block_on(sync(&cx, &sp.pod, Mode::Run, &ProbeVerdicts::default(), &mut Waits::new())).unwrap_err();
    let text = e.to_string();
    assert!(matches!(&e, super::errors::SyncError::Refused(f) if f.reason == "ImageVolumesNotSupported"), "{text}");
    assert!(text.contains("\"tools\"") && text.contains("containerd 1.7.24"), "{text}");
    assert_eq!(rt.count("RunPodSandbox"), 0);
    assert_eq!(rt.count("PullImage"), 0);
}

#[test]
fn an_image_volume_is_pulled_and_mounted_read_only_through_cri() {
    let root = dir("imagevol");
    let rt = FakeRuntime::default().with_image(IMAGE).with_version("v2.1.0");
    let cx = context(&root, &rt);
    let sp = static_pod(WITH_IMAGE_VOLUME);
    converge(&cx, &sp, &mut Waits::new(), 1);
    assert_eq!(running(&rt), ["c"]);
    assert_eq!(rt.count("PullImage"), 1, "the volume's image was pulled (IfNotPresent, not present)");
    let id = rt.containers()[0].3.clone();
    let st = smol::block_on(crate::cri::RuntimeService::container_status(&rt, &id, false)).unwrap().status.unwrap();
    let m = st.mounts.iter().find(|m| m.container_path == "/opt/tools").expect("the image volume's mount");
    assert!(m.readonly && m.host_path.is_empty(), "{m:?}");
    assert_eq!(m.image.as_ref().map(|i| i.image.as_str()), Some("sha256:registry.example/etcd-tools:1"));
}

#[test]
fn offline_a_pull_policy_always_starts_from_the_image_on_disk_with_a_warning() {
    let root = dir("offline");
    let rt = FakeRuntime::default().with_image(IMAGE);
    rt.set_offline(true);
    let cx = context(&root, &rt);
    let yaml = format!("apiVersion: v1\nkind: Pod\nmetadata: {{name: web}}\nspec:\n  containers:\n  - {{name: c, image: {IMAGE}, imagePullPolicy: Always}}\n");
    let sp = static_pod(&yaml);
    let mut waits = Waits::new();
    converge(&cx, &sp, &mut waits, 2);
    assert_eq!(running(&rt), ["c"], "{waits:?}");
    assert_eq!(rt.count("PullImage"), 1, "the registry was tried first");
    let events = cx.node.events().all();
    let warning = events.iter().find(|e| e.reason == "UsingLocalImage").expect("a warning event");
    assert_eq!(warning.type_, "Warning");
    assert!(warning.message.contains(IMAGE) && warning.message.contains("connection refused"), "{warning:?}");
}

#[test]
fn offline_the_strict_policy_an_absent_image_and_a_registrys_answer_still_fail_the_pull() {
    let yaml = |image: &str| {
        static_pod(&format!("apiVersion: v1\nkind: Pod\nmetadata: {{name: web}}\nspec:\n  containers:\n  - {{name: c, image: {image}, imagePullPolicy: Always}}\n"))
    };
    // strictImagePullPolicy: kubelet's rule.
    let root = dir("offline-strict");
    let rt = FakeRuntime::default().with_image(IMAGE);
    rt.set_offline(true);
    let config = EngineConfig { strict_image_pull_policy: true, ..Default::default() };
    let cx = context_with(&root, &rt, config);
    let mut waits = Waits::new();
    converge(&cx, &yaml(IMAGE), &mut waits, 1);
    assert_eq!(waits.get("c").map(|w| w.reason), Some(WaitReason::ErrImagePull));
    assert!(running(&rt).is_empty());
    // Offline with nothing on disk.
    let root = dir("offline-absent");
    let rt = FakeRuntime::default();
    rt.set_offline(true);
    let cx = context(&root, &rt);
    let mut waits = Waits::new();
    converge(&cx, &yaml(IMAGE), &mut waits, 1);
    assert_eq!(waits.get("c").map(|w| w.reason), Some(WaitReason::ErrImagePull));
    // The registry answered "not found": the local image is not used in its place.
    let root = dir("offline-answered");
    let rt = FakeRuntime::default().with_image("docker.io/library/nope:1");
    rt.unpullable("docker.io/library/nope:1");
    let cx = context(&root, &rt);
    let mut waits = Waits::new();
    converge(&cx, &yaml("docker.io/library/nope:1"), &mut waits, 1);
    assert_eq!(waits.get("c").map(|w| w.reason), Some(WaitReason::ErrImagePull));
    assert!(running(&rt).is_empty());
}

/// An engine running version 1 of pod web, replaced (in one batch) by a version whose image
/// `registry.example/app:2` no registry serves, with both back-offs at `back_off`. Returns
/// the engine and the new version; calls before the replacement are forgotten.
fn replaced_with_an_unpullable_image(
    name: &str,
    rt: &FakeRuntime,
    back_off: Duration,
) -> (Engine<FakeRuntime>, Arc<Node>, StaticPod, crate::testdir::TestDir) {
    let root = dir(name);
    let cx = context(&root, rt);
    let node = cx.node.clone();
    let mut e = Engine::new(cx.node, rt.clone(), cx.tuning, cx.config, cx.prober);
    e.tuning().reload(&TuningConfig::back_off((back_off, back_off * 4)));
    let old = static_pod("apiVersion: v1\nkind: Pod\nmetadata: {name: web}\nspec:\n  containers:\n  - {name: c, image: docker.io/library/busybox:1.36}\n");
    e.apply(Change::Add(old.clone()));
    run_until(&mut e, "the old version running", || running(rt) == ["c"]);
    rt.unpullable(NEW_IMAGE);
    let new = static_pod(&format!(
        "apiVersion: v1\nkind: Pod\nmetadata: {{name: web}}\nspec:\n  containers:\n  - {{name: c, image: {NEW_IMAGE}}}\n"
    ));
    rt.forget_calls();
    e.apply_all(vec![Change::Remove(old), Change::Add(new.clone())]);
    (e, node, new, root)
}

const NEW_IMAGE: &str = "registry.example/app:2";

#[test]
fn a_new_version_is_pulled_while_the_old_one_runs_and_only_then_swapped() {
    let rt = FakeRuntime::default().with_image(IMAGE);
    let (mut e, node, new, _root) = replaced_with_an_unpullable_image("prepull", &rt, Duration::from_millis(100));
    // The pull keeps failing: the old version runs on, and says why.
    std::thread::sleep(Duration::from_millis(800));
    let calls = rt.calls();
    assert!(calls.iter().filter(|c| *c == "PullImage").count() >= 2, "retried after the back-off: {calls:?}");
    assert!(!calls.iter().any(|c| c.starts_with("Stop")), "the old version was stopped: {calls:?}");
    assert_eq!(running(&rt), ["c"]);
    let events = node.events().all();
    assert!(
        events
            .iter()
            .any(|ev| ev.reason == "UpdateWaitingForImage" && ev.type_ == "Normal" && ev.message.contains(NEW_IMAGE)),
        "{events:?}"
    );
    // The registry answers: pulled, then the old version stops, then the new one starts.
    rt.pullable(NEW_IMAGE);
    run_until(&mut e, "the new version running", || {
        running(&rt) == ["c"] && rt.calls().iter().any(|c| c.starts_with("StartContainer"))
    });
    let calls = rt.calls();
    let last_pull = calls.iter().rposition(|c| c == "PullImage").unwrap();
    let stop = calls.iter().position(|c| c.starts_with("StopContainer")).expect("the old version stopped");
    let run = calls.iter().rposition(|c| c.starts_with("RunPodSandbox")).unwrap();
    assert!(last_pull < stop && stop < run, "pull, stop, start: {calls:?}");
    e.apply(Change::Remove(new));
    run_until(&mut e, "the pod removed", || rt.sandboxes().is_empty());
}

#[test]
fn a_replacement_waiting_out_its_pull_back_off_swaps_as_soon_as_an_import_brings_its_image() {
    let rt = FakeRuntime::default().with_image(IMAGE);
    // A back-off far longer than the test: only the wake-up can end the wait.
    let (mut e, _, _, _root) = replaced_with_an_unpullable_image("prepull-import", &rt, Duration::from_secs(3600));
    run_until(&mut e, "the pull failed once", || rt.count("PullImage") == 1);
    // The image is imported from the images directory, which wakes every worker.
    rt.import(NEW_IMAGE);
    e.control().wake_all();
    run_until(&mut e, "the new version running", || {
        running(&rt) == ["c"] && rt.calls().iter().any(|c| c.starts_with("StartContainer"))
    });
    assert_eq!(rt.count("PullImage"), 1, "no second pull: {:?}", rt.calls());
}

#[test]
fn a_pod_that_depends_on_another_creates_its_sandbox_only_once_that_one_is_ready() {
    let root = dir("order");
    let rt = FakeRuntime::default().with_image(IMAGE);
    let cx = context(&root, &rt);
    let node = cx.node.clone();
    let mut e = Engine::new(cx.node, rt.clone(), cx.tuning, cx.config, cx.prober);
    let pod = |name: &str, extra: &str| {
        static_pod(&format!("apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\n{extra}spec:\n  containers:\n  - {{name: {name}, image: docker.io/library/busybox:1.36}}\n"))
    };
    let web = pod("web", "  annotations: {atoll.io/depends-on: db}\n");
    e.apply(Change::Add(web.clone()));
    std::thread::sleep(Duration::from_millis(1500));
    assert!(rt.sandboxes().is_empty(), "web started before db existed");
    let st = node.statuses().get(&web.uid).expect("web's status");
    let waiting = st.container_statuses[0].state.waiting.as_ref().expect("web waits");
    assert_eq!(waiting.reason, "DependencyNotReady");
    assert!(waiting.message.contains("default/db (no such pod on this node)"), "{waiting:?}");
    let db = pod("db", "");
    e.apply(Change::Add(db.clone()));
    run_until(&mut e, "both running", || running(&rt) == ["db", "web"]);
    let calls = rt.calls();
    let sandboxes: Vec<&String> = calls.iter().filter(|c| c.starts_with("RunPodSandbox")).collect();
    assert_eq!(sandboxes.len(), 2, "{calls:?}");
    let db_started = calls.iter().position(|c| c.starts_with("StartContainer")).unwrap();
    let web_sandbox = calls.iter().rposition(|c| c.starts_with("RunPodSandbox")).unwrap();
    assert!(db_started < web_sandbox, "web's sandbox came after db ran: {calls:?}");
    e.apply(Change::Remove(web));
    e.apply(Change::Remove(db));
    run_until(&mut e, "the pods removed", || rt.sandboxes().is_empty());
}
