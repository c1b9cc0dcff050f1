//! Hostile input against a running `atoll run`, the real private containerd and (for the
//! mirror) the test API server. Each test throws one class of bad input at the agent, with a
//! good pod running beside it and canary files next to atoll's own directories, and asserts
//! that the agent lives (inside a 128 MiB memory cgroup, the shipped unit's `MemoryMax`), that
//! its peak memory stays bounded, that nothing outside its directories changed, and that the
//! good pod keeps running the same container.
//! (Its own test binary, one test at a time: atoll removes every atoll-made sandbox it was not
//! told to run.)

use crate::apiserver;
use crate::common;

use common::{eventually, free_port, testbed, unique, Agent, Testbed};
use serde_json::{json, Value};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, Instant};

static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

/// The shipped unit's MemoryMax.
const MEMORY_MAX: u64 = 128 << 20;
/// The most the agent (a debug build here) may ever hold resident, in KiB.
const PEAK_KIB: u64 = 64 << 10;

const GOOD: &str = "apiVersion: v1
kind: Pod
metadata: {name: good}
spec:
  hostNetwork: true
  terminationGracePeriodSeconds: 2
  containers:
  - name: app
    image: docker.io/library/busybox:1.36
    command: [sh, -c, 'trap \"exit 0\" TERM; while true; do sleep 0.2; done']
";

/// A memory cgroup (v1 or v2) with the unit's limit, for the agent.
struct MemoryCap(PathBuf);

impl MemoryCap {
    fn new(name: &str) -> MemoryCap {
        let v2 = Path::new("/sys/fs/cgroup/cgroup.controllers").exists();
        let base = if v2 { PathBuf::from("/sys/fs/cgroup") } else { PathBuf::from("/sys/fs/cgroup/memory") };
        let dir = base.join(name);
        std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("a memory cgroup at {}: {e}", dir.display()));
        let limit = if v2 { "memory.max" } else { "memory.limit_in_bytes" };
        std::fs::write(dir.join(limit), MEMORY_MAX.to_string()).expect("set the memory limit");
        MemoryCap(dir)
    }

    fn add(&self, pid: u32) {
        std::fs::write(self.0.join("cgroup.procs"), pid.to_string()).expect("move atoll into the cgroup");
    }
}

impl Drop for MemoryCap {
    fn drop(&mut self) {
        let deadline = Instant::now() + Duration::from_secs(5);
        while std::fs::remove_dir(&self.0).is_err() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

/// One hostile scenario: a directory with atoll's state, manifests and canaries, an agent in
/// its memory cgroup, and the good pod running.
struct Bed {
    agent: Agent,
    cap: MemoryCap,
    good_id: String,
    started: Instant,
    /// Last: removed (its mounts first) after the agent has been stopped.
    dir: crate::common::Scratch,
}

impl Bed {
    fn start(tb: &Testbed, name: &str, kubelet_extra: &str, args: &[&str]) -> Bed {
        let dir = crate::common::Scratch::new(&format!("hostile-{name}"));
        std::fs::create_dir_all(dir.join("manifests")).unwrap();
        std::fs::create_dir_all(dir.join("canary")).unwrap();
        std::fs::write(dir.join("canary/keep"), "keep me").unwrap();
        std::fs::write(dir.join("manifests/good.yaml"), GOOD).unwrap();
        let cap = MemoryCap::new(&unique("atoll-hostile"));
        let agent = Agent::start(tb, &dir, &format!("fileCheckFrequency: 1s\n{kubelet_extra}"), args, &[]);
        cap.add(agent.child.id());
        let mut bed = Bed { dir, agent, cap, good_id: String::new(), started: Instant::now() };
        bed.good_id = eventually(Duration::from_secs(60), "the good pod running", || bed.running("good"));
        bed
    }

    fn manifest(&self, file: &str, text: &str) {
        std::fs::write(self.dir.join("manifests").join(file), text).unwrap();
    }

    /// The running container's ID of pod `name`.
    fn running(&self, name: &str) -> Option<String> {
        let p = self.agent.pod(&format!("{name}-tb"))?;
        let c = &p["status"]["containerStatuses"][0];
        c["state"]["running"].is_object().then(|| c["containerID"].as_str().unwrap_or("").to_string())
    }

    /// A container's status in pod `name`.
    fn container(&self, name: &str, container: &str) -> Option<Value> {
        let p = self.agent.pod(&format!("{name}-tb"))?;
        let all = p["status"]["containerStatuses"].as_array()?;
        all.iter().find(|c| c["name"] == container).cloned()
    }

    /// The agent lived through it all, within its memory, touched nothing outside its own
    /// directories, and the good pod still runs its first container.
    fn assert_unharmed(&mut self) {
        assert!(self.agent.alive(), "atoll died; its log:\n{}", self.agent.log());
        let peak = self.agent.memory_kib("VmHWM");
        assert!(peak > 0 && peak < PEAK_KIB, "peak RSS {peak} KiB (limit {PEAK_KIB} KiB)");
        assert_eq!(std::fs::read_to_string(self.dir.join("canary/keep")).ok().as_deref(), Some("keep me"));
        assert_eq!(self.running("good").as_deref(), Some(self.good_id.as_str()), "the good pod was disturbed");
        assert!(!self.agent.log().contains("panicked"), "{}", self.agent.log());
        eprintln!("peak RSS {peak} KiB after {:?}", self.started.elapsed());
    }

    /// `atoll validate` over the manifest directory: its output.
    fn validate(&self) -> String {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_atoll"))
            .arg("validate")
            .arg(self.dir.join("manifests"))
            .arg("--hostname-override=tb")
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned()
    }
}

impl Drop for Bed {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(self.dir.join("manifests"));
    }
}

fn turn() -> std::sync::MutexGuard<'static, ()> {
    ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner())
}

/// `metadata.uid` becomes the pod's directory names: a UID that climbs out (or is absolute)
/// must be refused, and never lead pod removal to delete a directory outside atoll's own.
#[test]
fn a_uid_cannot_name_a_directory_outside_atolls_own() {
    let _room = common::room(module_path!());
    let _turn = turn();
    let mut bed = Bed::start(testbed(), "uid", "", &[]);
    std::fs::create_dir_all(bed.dir.join("canary2")).unwrap();
    std::fs::write(bed.dir.join("canary2/keep"), "keep me").unwrap();
    let pod = |name: &str, uid: &str| {
        format!(
            "apiVersion: v1\nkind: Pod\nmetadata: {{name: {name}, uid: '{uid}'}}\nspec:\n  hostNetwork: true\n  terminationGracePeriodSeconds: 0\n  containers:\n  - name: c\n    image: docker.io/library/busybox:1.36\n    command: [sleep, '3600']\n"
        )
    };
    // <root>/pods/../../canary is the canary beside the root dir.
    bed.manifest("climb.yaml", &pod("climb", "../../canary"));
    bed.manifest("absolute.yaml", &pod("absolute", &bed.dir.join("canary2").display().to_string()));
    let report = bed.validate();
    assert!(report.contains("climb.yaml: error: metadata.uid: \"../../canary\" must be 1 to 128 letters"), "{report}");
    assert!(report.contains("absolute.yaml: error: metadata.uid:"), "{report}");
    std::thread::sleep(Duration::from_secs(4));
    // Removal (manifest deleted) is where an unchecked UID would delete the canaries.
    std::fs::remove_file(bed.dir.join("manifests/climb.yaml")).unwrap();
    std::fs::remove_file(bed.dir.join("manifests/absolute.yaml")).unwrap();
    std::thread::sleep(Duration::from_secs(4));
    assert_eq!(std::fs::read_to_string(bed.dir.join("canary2/keep")).unwrap(), "keep me");
    assert!(bed.agent.log().contains("metadata.uid"), "the error names the field");
    bed.assert_unharmed();
}

/// A pod plants symlinks in a volume (to `/`, and `..` enough to climb out); a container
/// that mounts them by subPath must not get the host, while a link inside the volume works.
#[test]
fn a_subpath_cannot_follow_a_symlink_out_of_its_volume() {
    let _room = common::room(module_path!());
    let _turn = turn();
    let mut bed = Bed::start(testbed(), "subpath", "", &[]);
    let canary = bed.dir.join("canary/keep");
    bed.manifest(
        "escape.yaml",
        &format!(
            "apiVersion: v1
kind: Pod
metadata: {{name: escape}}
spec:
  hostNetwork: true
  terminationGracePeriodSeconds: 0
  volumes: [{{name: vol, emptyDir: {{}}}}]
  initContainers:
  - name: plant
    image: docker.io/library/busybox:1.36
    command: [sh, -c, 'mkdir -p /vol/data && echo inside > /vol/data/file && ln -s / /vol/root && ln -s ../../../../../../../../.. /vol/up && ln -s data /vol/alias']
    volumeMounts: [{{name: vol, mountPath: /vol}}]
  containers:
  - name: root
    image: docker.io/library/busybox:1.36
    command: [sh, -c, 'cat /host{canary} > /report/escaped; sleep 3600']
    volumeMounts: [{{name: vol, mountPath: /host, subPath: root}}, {{name: vol, mountPath: /report}}]
  - name: up
    image: docker.io/library/busybox:1.36
    command: [sh, -c, 'cat /host{canary} > /report/escaped-up; sleep 3600']
    volumeMounts: [{{name: vol, mountPath: /host, subPath: up}}, {{name: vol, mountPath: /report}}]
  - name: alias
    image: docker.io/library/busybox:1.36
    command: [sh, -c, 'cat /data/file && sleep 3600']
    volumeMounts: [{{name: vol, mountPath: /data, subPath: alias}}]
",
            canary = canary.display()
        ),
    );
    for name in ["root", "up"] {
        let waiting = eventually(Duration::from_secs(60), "the escape refused", || {
            bed.container("escape", name).filter(|c| c["state"]["waiting"]["reason"] == "CreateContainerConfigError")
        });
        let message = waiting["state"]["waiting"]["message"].as_str().unwrap_or("");
        assert!(message.contains("leads outside the volume"), "{name}: {message}");
    }
    eventually(Duration::from_secs(30), "the link inside the volume mounted", || {
        bed.container("escape", "alias").filter(|c| c["state"]["running"].is_object())
    });
    let (_, out, _) = bed.agent.cli(&["logs", "escape", "-c", "alias"]);
    assert_eq!(out, "inside\n");
    // Nothing of the host came through: the refused containers never ran to copy the canary.
    let uid = bed.agent.pod("escape-tb").map(|p| p["metadata"]["uid"].as_str().unwrap_or("").to_string()).unwrap();
    let vol = bed.dir.join(format!("state/pods/{uid}/volumes/kubernetes.io~empty-dir/vol"));
    assert!(vol.join("data/file").exists(), "the volume is where it should be");
    assert!(!vol.join("escaped").exists() && !vol.join("escaped-up").exists());
    bed.assert_unharmed();
}

/// A container writes 100 MB to its termination log, another 64 MB to stdout with
/// FallbackToLogsOnError; then the logs are read whole, by tail, followed and abandoned, and a
/// client stops reading mid-stream. The agent reads kubelet's few KiB and streams the rest.
#[test]
fn what_containers_write_is_read_within_bounds() {
    let _room = common::room(module_path!());
    let _turn = turn();
    let mut bed = Bed::start(testbed(), "bounded", "", &[]);
    bed.manifest(
        "tlog.yaml",
        "apiVersion: v1
kind: Pod
metadata: {name: tlog}
spec:
  hostNetwork: true
  restartPolicy: Never
  containers:
  - name: c
    image: docker.io/library/busybox:1.36
    command: [sh, -c, 'dd if=/dev/zero bs=1048576 count=100 2>/dev/null | tr \"\\0\" t > /dev/termination-log && echo END >> /dev/termination-log || exit 7; exit 1']
",
    );
    bed.manifest(
        "flog.yaml",
        "apiVersion: v1
kind: Pod
metadata: {name: flog}
spec:
  hostNetwork: true
  restartPolicy: Never
  containers:
  - name: c
    image: docker.io/library/busybox:1.36
    terminationMessagePolicy: FallbackToLogsOnError
    command: [sh, -c, 'dd if=/dev/zero bs=1048576 count=64 2>/dev/null | tr \"\\0\" f | fold -w 1000; echo; echo LAST; exit 1']
",
    );
    let terminated = |name: &str| {
        eventually(Duration::from_secs(240), "the writer to finish", || {
            bed.container(name, "c").filter(|c| c["state"]["terminated"].is_object())
        })
    };
    let t = terminated("tlog");
    // Exit code 7: the writer could not write its file (the disk is full), not atoll's fault.
    assert_eq!(t["state"]["terminated"]["exitCode"], 1, "the writer wrote its whole file: {t}");
    let message = t["state"]["terminated"]["message"].as_str().unwrap_or("");
    assert_eq!(message.len(), 4096, "kubelet's 4 KiB of the termination log");
    assert!(message.ends_with("END\n"), "the file's end: {:?}", message.get(message.len().saturating_sub(40)..));
    let f = terminated("flog");
    let message = f["state"]["terminated"]["message"].as_str().unwrap_or("");
    assert!(
        message.len() <= 2048 && message.ends_with("LAST"),
        "{:?}",
        message.get(message.len().saturating_sub(80)..)
    );

    // The whole 64 MB log through the socket: streamed, not buffered.
    let mut s = std::os::unix::net::UnixStream::connect(&bed.agent.socket).unwrap();
    write!(s, "GET /logs/default/flog-tb/c HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
    let mut total = 0u64;
    let mut buf = vec![0u8; 1 << 16];
    loop {
        match s.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => total += n as u64,
        }
    }
    assert!(total > 64_000_000, "the whole log came: {total} bytes");
    let (_, tail, _) = bed.agent.cli(&["logs", "flog", "--tail", "1"]);
    assert_eq!(tail, "LAST\n");

    // A client that asks for the log and stops reading is cut after the write deadline.
    let mut stalled = std::os::unix::net::UnixStream::connect(&bed.agent.socket).unwrap();
    write!(stalled, "GET /logs/default/flog-tb/c HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
    // A follower of the good pod that goes away.
    let mut follower = std::os::unix::net::UnixStream::connect(&bed.agent.socket).unwrap();
    write!(follower, "GET /logs/default/good-tb/app?follow HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
    let mut head = [0u8; 64];
    let _ = follower.read(&mut head);
    drop(follower);
    eventually(Duration::from_secs(30), "both connections closed by the agent", || {
        (connections(&bed.agent) == 1.0).then_some(())
    });
    drop(stalled);
    bed.assert_unharmed();
}

/// `atoll_api_connections` (the request that reads it counts itself).
fn connections(agent: &Agent) -> f64 {
    let mut s = std::os::unix::net::UnixStream::connect(&agent.socket).unwrap();
    write!(s, "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
    let mut text = String::new();
    let _ = s.read_to_string(&mut text);
    text.lines()
        .find_map(|l| l.strip_prefix("atoll_api_connections "))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(-1.0)
}

/// A 10 MiB JSON manifest of a million tiny values, and one nested 10,000 deep: refused by
/// the parser's budget before they are built, on every rescan.
#[test]
fn oversized_json_manifests_are_refused_within_the_budget() {
    let _room = common::room(module_path!());
    let _turn = turn();
    let mut bed = Bed::start(testbed(), "json", "", &[]);
    let mut wide = String::from(r#"{"apiVersion":"v1","kind":"Pod","metadata":{"name":"wide"},"spec":{"x":["#);
    while wide.len() < (10 << 20) - 64 {
        wide.push_str("0,");
    }
    wide.push_str("0]}}");
    bed.manifest("wide.json", &wide);
    let deep = format!(
        r#"{{"apiVersion":"v1","kind":"Pod","metadata":{{"name":"deep"}},"spec":{}{}}}"#,
        "[".repeat(10_000),
        "]".repeat(10_000)
    );
    bed.manifest("deep.json", &deep);
    // Several rescans (fileCheckFrequency 1s).
    std::thread::sleep(Duration::from_secs(6));
    let log = bed.agent.log();
    assert!(log.contains("wide.json: over the parser's budget: more than 100000 values"), "{log}");
    assert!(log.contains("deep.json: over the parser's budget: nested deeper than 64 levels"), "{log}");
    bed.assert_unharmed();
}

/// Numbers that overflow a naive conversion: refused by validation, naming the field, or (a
/// grace period, which the API allows up to 2^63-1) used with saturation: the pod with the
/// largest grace and a preStop httpGet is removed, then drained on exit.
#[test]
fn huge_numbers_are_refused_by_field_or_saturate() {
    let _room = common::room(module_path!());
    let _turn = turn();
    let mut bed = Bed::start(testbed(), "numbers", "", &["--drain-on-exit"]);
    let probe = |field: &str, value: &str| {
        format!(
            "apiVersion: v1\nkind: Pod\nmetadata: {{name: p{}}}\nspec:\n  hostNetwork: true\n  containers:\n  - name: c\n    image: docker.io/library/busybox:1.36\n    command: [sleep, '3600']\n    livenessProbe: {{exec: {{command: ['true']}}, {field}: {value}}}\n",
            field.to_lowercase()
        )
    };
    bed.manifest("period.yaml", &probe("periodSeconds", "36028797018963968"));
    bed.manifest("timeout.yaml", &probe("timeoutSeconds", "9223372036854775807"));
    let report = bed.validate();
    assert!(
        report.contains("period.yaml: error: spec.containers[0].livenessProbe.periodSeconds: 36028797018963968 must be between 1 and 2147483647"),
        "{report}"
    );
    assert!(report.contains("timeout.yaml: error: spec.containers[0].livenessProbe.timeoutSeconds:"), "{report}");
    let closed = free_port();
    let forever = format!(
        "apiVersion: v1
kind: Pod
metadata: {{name: forever}}
spec:
  hostNetwork: true
  terminationGracePeriodSeconds: 9223372036854775807
  containers:
  - name: c
    image: docker.io/library/busybox:1.36
    command: [sh, -c, 'trap \"exit 0\" TERM; while true; do sleep 0.2; done']
    lifecycle:
      preStop:
        httpGet: {{host: 127.0.0.1, port: {closed}, path: /stop}}
"
    );
    bed.manifest("forever.yaml", &forever);
    eventually(Duration::from_secs(60), "forever running", || bed.running("forever"));
    std::fs::remove_file(bed.dir.join("manifests/forever.yaml")).unwrap();
    eventually(Duration::from_secs(60), "forever stopped and removed", || {
        bed.agent.pod("forever-tb").is_none().then_some(())
    });
    bed.manifest("forever.yaml", &forever);
    eventually(Duration::from_secs(60), "forever running again", || bed.running("forever"));
    bed.assert_unharmed();
    // --drain-on-exit stops it (and the good pod) with that grace, without overflowing.
    bed.agent.signal("TERM");
    let status = eventually(Duration::from_secs(90), "atoll to drain and exit", || bed.agent.child.try_wait().unwrap());
    assert!(status.success(), "{status:?}\n{}", bed.agent.log());
    assert!(!bed.agent.log().contains("panicked"));
}

/// An invalid edit keeps the last valid pod, also across a restart of atoll: the pod keeps
/// its container.
#[test]
fn the_last_valid_version_survives_a_restart() {
    let _room = common::room(module_path!());
    let _turn = turn();
    let tb = testbed();
    let mut bed = Bed::start(tb, "lastgood", "", &[]);
    std::fs::write(bed.dir.join("manifests/good.yaml"), GOOD.replace("image: docker.io", "imagee: docker.io")).unwrap();
    std::thread::sleep(Duration::from_secs(3));
    assert_eq!(bed.running("good").as_deref(), Some(bed.good_id.as_str()), "kept while atoll runs");
    bed.agent.signal("TERM");
    eventually(Duration::from_secs(30), "atoll to exit", || bed.agent.child.try_wait().unwrap());
    let dir = bed.dir.to_path_buf();
    let kept = std::fs::read_dir(dir.join("state/sources/files")).map(|d| d.count()).unwrap_or(0);
    assert_eq!(kept, 1, "the last valid version is kept on disk");
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(dir.join("state/sources/files")).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o700);
    bed.agent = Agent::start(tb, &dir, "fileCheckFrequency: 1s\n", &[], &[]);
    bed.cap.add(bed.agent.child.id());
    std::thread::sleep(Duration::from_secs(4));
    assert!(bed.agent.log().contains("running its last valid version"), "{}", bed.agent.log());
    bed.assert_unharmed();
}

/// Secrets in the manifest URL's query, in its headers and in the kubeconfig's token, with
/// every library's most verbose logging asked for: none reaches the log or a readable file,
/// and the headers do not follow a redirect to another origin.
#[test]
fn secrets_never_reach_the_log_or_a_readable_file() {
    let _room = common::room(module_path!());
    let _turn = turn();
    let tb = testbed();
    // The URL's server redirects to another origin, which serves the pods.
    let elsewhere = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let elsewhere_port = elsewhere.local_addr().unwrap().port();
    let seen_elsewhere = std::sync::Arc::new(Mutex::new(Vec::<String>::new()));
    let pods = r#"{"apiVersion":"v1","kind":"PodList","items":[{"metadata":{"name":"fromurl"},"spec":{"hostNetwork":true,"terminationGracePeriodSeconds":0,"containers":[{"name":"c","image":"docker.io/library/busybox:1.36","command":["sleep","3600"],"env":[{"name":"PASSWORD","value":"SECRET-IN-ENV"}]}]}}]}"#;
    serve(elsewhere, seen_elsewhere.clone(), move |_| (200, String::new(), pods.to_string()));
    let home = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let home_port = home.local_addr().unwrap().port();
    serve(home, Default::default(), move |_| {
        (302, format!("Location: http://127.0.0.1:{elsewhere_port}/moved\r\n"), String::new())
    });
    // A mirror to the test API server, with a bearer token.
    let dir = crate::common::Scratch::new("hostile-secrets-pki");
    let pki = apiserver::Pki::new(&dir, "tb");
    let server = apiserver::ApiServer::start(&pki, "tb");
    std::fs::write(dir.join("token"), "SECRET-TOKEN").unwrap();
    server.add_token("SECRET-TOKEN", "system:node:tb");
    let kubeconfig = pki.kubeconfig(server.addr, Some(&dir.join("token")));
    let url = format!("http://user:SECRET-PASSWORD@127.0.0.1:{home_port}/pods?token=SECRET-QUERY");
    let mut bed = Bed::start(
        tb,
        "secrets",
        "httpCheckFrequency: 1s\n",
        &[
            &format!("--manifest-url={url}"),
            "--manifest-url-header=X-Token:SECRET-HEADER",
            &format!("--kubeconfig={}", kubeconfig.display()),
            "--v=10",
        ],
    );
    eventually(Duration::from_secs(60), "the URL's pod running", || bed.running("fromurl"));
    eventually(Duration::from_secs(30), "the node registered", || server.get("nodes", "", "tb"));
    std::thread::sleep(Duration::from_secs(3));
    let log = bed.agent.log();
    assert!(log.lines().count() > 20, "a verbose log: {log}");
    for secret in ["SECRET-QUERY", "SECRET-HEADER", "SECRET-TOKEN", "SECRET-PASSWORD", "SECRET-IN-ENV"] {
        assert!(!log.contains(secret), "{secret} in the log:\n{log}");
    }
    let elsewhere_saw = seen_elsewhere.lock().unwrap().join("\n");
    assert!(!elsewhere_saw.is_empty() && !elsewhere_saw.to_lowercase().contains("x-token"), "{elsewhere_saw}");
    // The URL's payload (with the env value) is kept for offline boots, for root only.
    use std::os::unix::fs::PermissionsExt;
    let cache_dir = bed.dir.join("state/sources");
    let mut cached = 0;
    for e in std::fs::read_dir(&cache_dir).unwrap().filter_map(|e| e.ok()).filter(|e| e.path().is_file()) {
        let mode = e.metadata().unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600, "{}", e.path().display());
        let text = std::fs::read_to_string(e.path()).unwrap();
        assert!(!text.contains("SECRET-QUERY") && !text.contains("SECRET-PASSWORD"), "{text}");
        cached += 1;
    }
    assert_eq!(cached, 1);
    assert_eq!(std::fs::metadata(&cache_dir).unwrap().permissions().mode() & 0o777, 0o700);
    bed.assert_unharmed();
}

/// A minimal HTTP server: each request's head is recorded, `answer` gives status, extra
/// header lines and body.
fn serve(
    listener: std::net::TcpListener,
    seen: std::sync::Arc<Mutex<Vec<String>>>,
    answer: impl Fn(&str) -> (u16, String, String) + Send + 'static,
) {
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(mut conn) = conn else { continue };
            let mut head = Vec::new();
            let mut byte = [0u8; 1];
            while !head.ends_with(b"\r\n\r\n") && conn.read(&mut byte).map(|n| n == 1).unwrap_or(false) {
                head.push(byte[0]);
            }
            let head = String::from_utf8_lossy(&head).into_owned();
            seen.lock().unwrap().push(head.clone());
            let (status, headers, body) = answer(&head);
            let _ = write!(
                conn,
                "HTTP/1.1 {status} X\r\n{headers}Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            );
        }
    });
}

/// An API server whose successful answers are not objects (a list, a string, an object with
/// a list where metadata goes): the mirror reports errors and the agent goes on.
#[test]
fn junk_from_the_api_server_never_stops_the_agent() {
    let _room = common::room(module_path!());
    let _turn = turn();
    let tb = testbed();
    let dir = crate::common::Scratch::new("hostile-junk-pki");
    let pki = apiserver::Pki::new(&dir, "tb");
    let server = apiserver::ApiServer::start(&pki, "tb");
    for body in [json!([]), json!("x"), json!(7), json!({"metadata": [], "spec": "x", "status": []})] {
        server.answer_next(1, 200, body.clone());
        server.answer_next(1, 201, body);
    }
    let kubeconfig = pki.kubeconfig(server.addr, None);
    let mut bed = Bed::start(
        tb,
        "junk",
        "nodeLeaseDurationSeconds: 4\nnodeStatusUpdateFrequency: 1s\n",
        &[&format!("--kubeconfig={}", kubeconfig.display())],
    );
    // Once the junk is used up, the mirror converges: node, lease and the good pod's mirror.
    eventually(Duration::from_secs(120), "the lease renewed", || server.get("leases", "kube-node-lease", "tb"));
    eventually(Duration::from_secs(120), "the good pod's mirror", || server.get("pods", "default", "good-tb"));
    assert!(bed.agent.log().contains("not a JSON object"), "{}", bed.agent.log());
    bed.assert_unharmed();
}

/// A thousand idle connections to the local API, and a probe whose output tries to forge
/// log lines and terminal escapes.
#[test]
fn floods_and_forged_output_change_nothing() {
    let _room = common::room(module_path!());
    let _turn = turn();
    let mut bed = Bed::start(testbed(), "flood", "", &[]);
    bed.manifest(
        "liar.yaml",
        "apiVersion: v1
kind: Pod
metadata: {name: liar}
spec:
  hostNetwork: true
  terminationGracePeriodSeconds: 0
  containers:
  - name: c
    image: docker.io/library/busybox:1.36
    command: [sleep, '3600']
    readinessProbe:
      exec: {command: [sh, -c, 'printf \"no\\nERROR [atoll] FORGED line\\n\\033[2J\"; exit 1']}
      periodSeconds: 1
",
    );
    let idle: Vec<_> =
        (0..1000).filter_map(|_| std::os::unix::net::UnixStream::connect(&bed.agent.socket).ok()).collect();
    std::thread::sleep(Duration::from_secs(2));
    let fds = std::fs::read_dir(format!("/proc/{}/fd", bed.agent.child.id())).unwrap().count();
    assert!(fds < 300, "the agent holds {fds} descriptors for {} idle clients", idle.len());
    drop(idle);
    eventually(Duration::from_secs(30), "the API answering again", || bed.agent.pod("good-tb"));
    eventually(Duration::from_secs(30), "the liar probed", || bed.agent.log().contains("FORGED").then_some(()));
    let log = bed.agent.log();
    assert!(log.lines().all(|l| !l.starts_with("ERROR [atoll] FORGED")), "a forged line:\n{log}");
    assert!(!log.contains('\u{1b}'), "an escape sequence reached the log");
    bed.assert_unharmed();
}
