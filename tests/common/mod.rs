//! Shared by the end-to-end tests: one private containerd test bed per test binary, and the
//! rooms that keep the test files of one binary from running their pods at the same time.
//!
//! The first test that asks for [`testbed()`] starts `tests/testbed/testbed.sh run DIR` and
//! waits for it to print READY. The script holds our end of a pipe as its standard input; when
//! the test binary exits (or dies), the pipe closes and the script tears everything down. A
//! test bed that cannot start fails the test with the script's log: nothing is skipped.

#![allow(dead_code)]

pub mod archives;
pub mod edge;
pub mod forward;
pub mod kubectl;
pub mod kubelet_client;
pub mod pods;
pub mod prometheus;
pub mod scratch;
pub mod signing;

use atoll::cri::api::{
    Container, ContainerFilter, ContainerState, LinuxPodSandboxConfig, LinuxSandboxSecurityContext, NamespaceMode,
    NamespaceOption, PodSandbox, PodSandboxConfig, PodSandboxFilter, PodSandboxMetadata,
};
use atoll::cri::{Cri, Endpoint};
pub use scratch::Scratch;
use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

pub struct Testbed {
    pub dir: PathBuf,
    pub endpoint: Endpoint,
    pub logs: PathBuf,
    pub busybox: String,
    pub pause: String,
    /// An image that only the test bed's registry has: pulling it is a real pull.
    pub pullable: String,
    pub subnet_prefix: String,
    env: HashMap<String, String>,
    // Kept for the life of the test binary: dropping it would close the script's stdin.
    _runner: Mutex<Child>,
}

static TESTBED: OnceLock<Testbed> = OnceLock::new();

pub fn testbed() -> &'static Testbed {
    TESTBED.get_or_init(start)
}

fn script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/testbed/testbed.sh")
}

fn start() -> Testbed {
    let dir = std::env::temp_dir().join(format!("atoll-testbed-{}", std::process::id()));
    let log_path = std::env::temp_dir().join(format!("atoll-testbed-{}.log", std::process::id()));
    let log = std::fs::File::create(&log_path).expect("create test bed log");
    let mut child = Command::new("bash")
        .arg(script())
        .arg("run")
        .arg(&dir)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(log)
        .spawn()
        .expect("start tests/testbed/testbed.sh");
    let stdout = child.stdout.take().expect("test bed stdout");
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if let Some(env) = line.strip_prefix("READY ") {
                let _ = tx.send(Some(PathBuf::from(env)));
                return;
            }
        }
        let _ = tx.send(None);
    });
    // Generous: a fresh machine installs packages first, and another binary's test bed may
    // still be tearing down.
    let env_file = match rx.recv_timeout(Duration::from_secs(900)) {
        Ok(Some(p)) => p,
        _ => {
            let _ = child.kill();
            let mut text = String::new();
            let _ = std::fs::File::open(&log_path).and_then(|mut f| f.read_to_string(&mut text));
            let tail: Vec<&str> = text.lines().rev().take(40).collect::<Vec<_>>().into_iter().rev().collect();
            panic!("the containerd test bed did not start; its log ({}):\n{}", log_path.display(), tail.join("\n"));
        }
    };
    // Started: the log is only kept for a test bed that fails to start.
    let _ = std::fs::remove_file(&log_path);
    let env: HashMap<String, String> = std::fs::read_to_string(&env_file)
        .expect("read test bed env")
        .lines()
        .filter_map(|l| l.split_once('=').map(|(k, v)| (k.to_string(), v.to_string())))
        .collect();
    let get = |k: &str| env.get(k).unwrap_or_else(|| panic!("test bed env lacks {k}")).clone();
    let subnet = get("ATOLL_TB_SUBNET");
    let subnet_prefix = subnet.rsplit_once('.').map(|(p, _)| format!("{p}.")).expect("subnet a.b.c.0/24");
    let tb = Testbed {
        dir: dir.clone(),
        endpoint: Endpoint::parse(&get("ATOLL_TB_ENDPOINT")).expect("endpoint"),
        logs: PathBuf::from(get("ATOLL_TB_LOGS")),
        busybox: get("ATOLL_TB_BUSYBOX_IMAGE"),
        pause: get("ATOLL_TB_PAUSE_IMAGE"),
        pullable: get("ATOLL_TB_PULLABLE_IMAGE"),
        subnet_prefix,
        env,
        _runner: Mutex::new(child),
    };
    tb.wait_for_cri();
    tb
}

impl Testbed {
    pub fn cri(&self) -> Cri {
        Cri::new(&self.endpoint).with_request_timeout(Duration::from_secs(60))
    }

    pub fn var(&self, key: &str) -> &str {
        self.env.get(key).map(String::as_str).unwrap_or("")
    }

    /// The running containers of pod `name` (its `io.kubernetes.pod.name` label).
    pub fn running_in(&self, name: &str) -> Vec<Container> {
        let filter = ContainerFilter { label_selector: pod_named(name), ..Default::default() };
        let listed = smol::block_on(self.cri().list_containers(Some(filter))).expect("ListContainers");
        listed.into_iter().filter(|c| c.state == ContainerState::ContainerRunning as i32).collect()
    }

    /// The sandboxes of pod `name`, in any state.
    pub fn sandboxes_of(&self, name: &str) -> Vec<PodSandbox> {
        let filter = PodSandboxFilter { label_selector: pod_named(name), ..Default::default() };
        smol::block_on(self.cri().list_pod_sandbox(Some(filter))).expect("ListPodSandbox")
    }

    /// The test bed's `ctr` in the `k8s.io` namespace (asserting it succeeds).
    pub fn ctr(&self, args: &[&str]) {
        let out = Command::new(self.var("ATOLL_TB_CTR"))
            .args(["--address", self.var("ATOLL_TB_SOCKET"), "--namespace", "k8s.io"])
            .args(args)
            .output()
            .expect("run ctr");
        assert!(out.status.success(), "ctr {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    }

    /// Stops the test bed's containerd and starts it again; running containers stay up.
    pub fn restart_containerd(&self) {
        let status =
            Command::new("bash").arg(script()).arg("restart").arg(&self.dir).status().expect("run testbed.sh restart");
        assert!(status.success(), "restarting containerd failed");
        self.wait_for_cri();
    }

    /// Waits until containerd's CRI service answers (it initialises after the daemon's own
    /// API is up, and says "server is not initialized yet" until then). Uses a client of its
    /// own, so the tests' clients have to find their way back by themselves.
    fn wait_for_cri(&self) {
        let probe = Cri::new(&self.endpoint).with_request_timeout(Duration::from_secs(5));
        eventually(Duration::from_secs(60), "containerd's CRI service", || smol::block_on(probe.version()).ok());
    }

    /// Stops the test bed's containerd without starting it again.
    pub fn stop_containerd(&self) {
        let pid = std::fs::read_to_string(self.dir.join("containerd.pid")).expect("containerd.pid");
        let pid = pid.trim();
        assert!(Command::new("kill").arg(pid).status().expect("kill").success());
        let deadline = Instant::now() + Duration::from_secs(15);
        while Path::new(&format!("/proc/{pid}")).exists() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

/// A unique suffix for names in one test run.
/// A label selector for the pod named `name`.
fn pod_named(name: &str) -> HashMap<String, String> {
    HashMap::from([("io.kubernetes.pod.name".to_string(), name.to_string())])
}

/// A number from a `/proc` status file (`VmRSS` in KiB, `voluntary_ctxt_switches`); 0 if
/// it is not there.
pub fn status_field(path: &str, field: &str) -> u64 {
    let status = std::fs::read_to_string(path).unwrap_or_default();
    status
        .lines()
        .find(|l| l.strip_prefix(field).is_some_and(|rest| rest.starts_with(':')))
        .and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
        .unwrap_or(0)
}

/// A free TCP port on 127.0.0.1 (free when asked).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// The median of some timings.
pub fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

pub fn unique(prefix: &str) -> String {
    use std::sync::atomic::{AtomicU32, Ordering};
    static N: AtomicU32 = AtomicU32::new(0);
    format!("{prefix}-{}-{}", std::process::id(), N.fetch_add(1, Ordering::Relaxed))
}

/// A sandbox config as kubelet would make it for a pod `name` in namespace `default`.
pub fn sandbox_config(tb: &Testbed, name: &str, host_network: bool) -> PodSandboxConfig {
    let uid = format!("uid-{name}");
    let log_directory = tb.logs.join(format!("default_{name}_{uid}"));
    std::fs::create_dir_all(&log_directory).expect("create pod log dir");
    let labels = HashMap::from([
        ("io.kubernetes.pod.name".to_string(), name.to_string()),
        ("io.kubernetes.pod.namespace".to_string(), "default".to_string()),
        ("io.kubernetes.pod.uid".to_string(), uid.clone()),
        ("atoll.test".to_string(), "cri-client".to_string()),
    ]);
    PodSandboxConfig {
        metadata: Some(PodSandboxMetadata { name: name.into(), uid, namespace: "default".into(), attempt: 0 }),
        // As kubelet: host-network sandboxes get no hostname (they share the node's).
        hostname: if host_network { String::new() } else { name.into() },
        log_directory: log_directory.to_string_lossy().into_owned(),
        labels,
        linux: Some(LinuxPodSandboxConfig {
            security_context: Some(LinuxSandboxSecurityContext {
                namespace_options: Some(NamespaceOption {
                    network: if host_network { NamespaceMode::Node } else { NamespaceMode::Pod } as i32,
                    pid: NamespaceMode::Container as i32,
                    ipc: NamespaceMode::Pod as i32,
                    target_id: String::new(),
                }),
                ..Default::default()
            }),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// Polls `check` every 100 ms until it returns `Some`, or panics after `limit`.
pub fn eventually<T>(limit: Duration, what: &str, mut check: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(v) = check() {
            return v;
        }
        assert!(Instant::now() < deadline, "timed out after {limit:?} waiting for {what}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// What the engine tests on the test bed work with: the node (a private root dir, the test
/// bed's log dir), the engine's tuning (back-off 1 s doubling to 4 s) and settings.
pub struct EngineEnv {
    pub node: std::sync::Arc<atoll::node::Node>,
    /// The test bed's runtime, the one client every part uses.
    pub cri: Cri,
    pub tuning: std::sync::Arc<atoll::runtime::Tuning>,
    pub config: atoll::runtime::EngineConfig,
    /// The node's root dir, removed (its mounts first) when the test is done with the engine.
    pub root: Scratch,
}

impl EngineEnv {
    /// An engine as the agent makes one (the CRI client, probes), on this node.
    pub fn engine(&self) -> atoll::runtime::Engine<Cri> {
        atoll::runtime::Engine::new(
            self.node.clone(),
            self.cri.clone(),
            self.tuning.clone(),
            self.config,
            atoll::probe::Manager::new(self.node.clone(), self.cri.clone()),
        )
    }

    pub fn statuses(&self) -> &atoll::node::StatusStore {
        self.node.statuses()
    }
}

/// The engine's world on the test bed, with the given worker resync and log rotation.
pub fn engine_env(
    tb: &Testbed,
    root: &str,
    resync: Duration,
    log_rotation: atoll::runtime::logs::Rotation,
) -> EngineEnv {
    let root_dir = Scratch::new(&format!("engine-{root}"));
    let facts = atoll::node::Facts {
        name: "tb".into(),
        root_dir: root_dir.to_path_buf(),
        pod_logs_dir: tb.logs.clone(),
        host_ip: "127.0.0.1".into(),
        cpu_millis: 2000,
        memory_bytes: 4 << 30,
        runtime_name: "containerd".into(),
        host_resolv_conf: "nameserver 127.0.0.1\n".into(),
        ..Default::default()
    };
    let s = Duration::from_secs(1);
    EngineEnv {
        node: atoll::node::Node::new(facts),
        cri: tb.cri(),
        tuning: std::sync::Arc::new(atoll::runtime::Tuning::new(&atoll::runtime::TuningConfig::back_off((s, s * 4)))),
        config: atoll::runtime::EngineConfig { resync: Some(resync), log_rotation, ..Default::default() },
        root: root_dir,
    }
}

/// A kubelet config file in `dir` for an `atoll run` on the test bed: manifests in
/// `dir/manifests`, pod logs in the test bed's log dir, no healthz port and no kubelet server unless `extra` (more
/// lines) names one.
pub fn kubelet_config(tb: &Testbed, dir: &std::path::Path, extra: &str) -> PathBuf {
    std::fs::create_dir_all(dir.join("manifests")).expect("manifest dir");
    let path = dir.join("kubelet.yaml");
    let healthz = if extra.contains("healthzPort:") { "" } else { "healthzPort: 0\n" };
    // No kubelet server (0.0.0.0:10250 when atoll mirrors) unless a test asks for one.
    let healthz =
        if extra.lines().any(|l| l.starts_with("port:")) { healthz.to_string() } else { format!("{healthz}port: 0\n") };
    let text = format!(
        "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\nstaticPodPath: {}\npodLogsDir: {}\n{healthz}{extra}",
        dir.join("manifests").display(),
        tb.logs.display()
    );
    std::fs::write(&path, text).expect("kubelet config");
    path
}

/// The atoll binary under test: this build's, or `ATOLL_BIN` when set (a cross-built binary,
/// run through `ATOLL_BIN_RUNNER` when that is set too, e.g. `qemu-aarch64-static`).
pub fn atoll_command() -> std::process::Command {
    match (std::env::var_os("ATOLL_BIN"), std::env::var_os("ATOLL_BIN_RUNNER")) {
        (Some(bin), Some(runner)) => {
            let mut cmd = std::process::Command::new(runner);
            cmd.arg(bin);
            cmd
        }
        (Some(bin), None) => std::process::Command::new(bin),
        (None, _) => std::process::Command::new(env!("CARGO_BIN_EXE_atoll")),
    }
}

/// `atoll run` against the test bed: the kubelet config `config`, state under `dir/state`, the
/// local API on `socket`, node name `node`, output discarded (callers may redirect it).
pub fn atoll_run(tb: &Testbed, dir: &Path, config: &Path, socket: &Path, node: &str) -> std::process::Command {
    let mut cmd = atoll_command();
    cmd.arg("run")
        .arg(format!("--config={}", config.display()))
        .arg(format!("--container-runtime-endpoint={}", tb.endpoint))
        .arg(format!("--root-dir={}", dir.join("state").display()))
        .arg(format!("--api-socket={}", socket.display()))
        .arg(format!("--hostname-override={node}"))
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null());
    cmd
}

/// A running `atoll run` on the test bed (the binary under test), killed when dropped: its
/// state under `dir/state`, manifests in `dir/manifests`, the local API on `dir/run/atoll.sock`,
/// its log in `dir/atoll.log`.
pub struct Agent {
    pub child: std::process::Child,
    pub dir: PathBuf,
    pub socket: PathBuf,
}

impl Agent {
    /// Starts atoll with `kubelet_extra` added to its kubelet config and `args` on its command
    /// line, node name `tb`.
    pub fn start(tb: &Testbed, dir: &Path, kubelet_extra: &str, args: &[&str], env: &[(&str, &Path)]) -> Agent {
        std::fs::create_dir_all(dir.join("manifests")).expect("manifest dir");
        let kubelet = kubelet_config(tb, dir, kubelet_extra);
        let socket = dir.join("run").join("atoll.sock");
        let mut cmd = atoll_run(tb, dir, &kubelet, &socket, "tb");
        cmd.args(args).stderr(std::fs::File::create(dir.join("atoll.log")).expect("atoll.log"));
        for (k, v) in env {
            cmd.env(k, v);
        }
        let child = cmd.spawn().expect("start atoll");
        Agent { child, dir: dir.to_path_buf(), socket }
    }

    /// Runs an `atoll` client command against this agent: (exit code, stdout, stderr).
    pub fn cli(&self, args: &[&str]) -> (i32, String, String) {
        let out = atoll_command()
            .args(args)
            .arg(format!("--api-socket={}", self.socket.display()))
            .output()
            .expect("run atoll");
        (
            out.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    }

    /// The pod `name` (with its node suffix) as the local API shows it.
    pub fn pod(&self, name: &str) -> Option<serde_json::Value> {
        let (code, out, _) = self.cli(&["pods", "-o", "json"]);
        if code != 0 {
            return None;
        }
        let v: serde_json::Value = serde_json::from_str(&out).ok()?;
        v["items"].as_array()?.iter().find(|p| p["metadata"]["name"] == name).cloned()
    }

    /// Everything atoll logged so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("atoll.log")).unwrap_or_default()
    }

    pub fn signal(&self, sig: &str) {
        let ok = Command::new("kill").args([&format!("-{sig}"), &self.child.id().to_string()]).status().unwrap();
        assert!(ok.success());
    }

    /// Whether the process still runs.
    pub fn alive(&mut self) -> bool {
        self.child.try_wait().ok().flatten().is_none()
    }

    /// A `/proc/<pid>/status` figure in KiB (`VmRSS`, `VmHWM` = the peak).
    pub fn memory_kib(&self, field: &str) -> u64 {
        status_field(&format!("/proc/{}/status", self.child.id()), field)
    }
}

impl Drop for Agent {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if std::thread::panicking() {
            let log = self.log();
            let tail: Vec<&str> = log.lines().rev().take(80).collect::<Vec<_>>().into_iter().rev().collect();
            eprintln!("--- the end of atoll's log ({}) ---\n{}", self.dir.join("atoll.log").display(), tail.join("\n"));
        }
    }
}

/// Runs `program` with `args` under a two-minute `timeout`, `stdin` fed: (exit code, stdout,
/// stderr).
pub fn run_fed(program: &std::ffi::OsStr, args: &[std::ffi::OsString], stdin: &[u8]) -> (i32, Vec<u8>, String) {
    use std::io::Write;
    use std::process::Stdio;
    let mut child = std::process::Command::new("timeout")
        .arg("120")
        .arg(program)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("it runs");
    let mut input = child.stdin.take().unwrap();
    let stdin = stdin.to_vec();
    let feeder = std::thread::spawn(move || {
        let _ = input.write_all(&stdin);
    });
    let out = child.wait_with_output().unwrap();
    feeder.join().unwrap();
    (out.status.code().unwrap_or(-1), out.stdout, String::from_utf8_lossy(&out.stderr).into_owned())
}

/// Runs the shell command `command` in a pseudo-terminal of its own (script(1)) under a
/// two-minute `timeout`, `typed` as the keyboard: its exit code and what the terminal showed.
pub fn in_terminal(command: &str, typed: &[u8]) -> (Option<i32>, String) {
    use std::io::Write;
    use std::process::Stdio;
    let mut script = std::process::Command::new("timeout")
        .args(["120", "script", "-qec", command, "/dev/null"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("script runs");
    script.stdin.take().unwrap().write_all(typed).unwrap();
    let out = script.wait_with_output().unwrap();
    (out.status.code(), String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Who is in the room: the key (a test file's module path) and how many of its tests.
static ROOM: Mutex<(Option<&'static str>, usize)> = Mutex::new((None, 0));
static ROOM_FREED: std::sync::Condvar = std::sync::Condvar::new();

/// The tests of one file run together, those of another file wait until the room is empty: every
/// `atoll run` removes, at its first full sync, every atoll-made sandbox it was not given (other
/// files' pods too), and files reuse pod names (`web-tb`), so two files' pods must not meet on
/// one test bed. Call as `let _room = common::room(module_path!());` first in each test.
pub fn room(key: &'static str) -> Room {
    let mut held = ROOM.lock().unwrap_or_else(|p| p.into_inner());
    loop {
        match held.0 {
            None => {
                *held = (Some(key), 1);
                break;
            }
            Some(k) if k == key => {
                held.1 += 1;
                break;
            }
            Some(_) => held = ROOM_FREED.wait(held).unwrap_or_else(|p| p.into_inner()),
        }
    }
    Room
}

/// One agent at a time within a file: an agent owns every pod atoll made on its runtime (its
/// first full sync removes the ones it was not given, another test's among them), so the
/// tests that start one take turns.
pub fn one_agent_at_a_time() -> std::sync::MutexGuard<'static, ()> {
    static TURN: Mutex<()> = Mutex::new(());
    TURN.lock().unwrap_or_else(|e| e.into_inner())
}

/// One test at a time: for the tests that disturb the runtime (`tests/exclusive`), whose
/// imports, removals and restarts would time each other out.
pub fn alone() -> std::sync::MutexGuard<'static, ()> {
    static ALONE: Mutex<()> = Mutex::new(());
    ALONE.lock().unwrap_or_else(|e| e.into_inner())
}

/// A place in the room, given up when dropped (also when the test fails).
pub struct Room;

impl Drop for Room {
    fn drop(&mut self) {
        let mut held = ROOM.lock().unwrap_or_else(|p| p.into_inner());
        held.1 -= 1;
        if held.1 == 0 {
            held.0 = None;
            ROOM_FREED.notify_all();
        }
    }
}
