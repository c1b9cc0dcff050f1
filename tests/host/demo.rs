//! The README's demo (`configs/demo.sh`) as a new user meets it on a box where atoll is already
//! installed: another atoll holds the default local API socket and kubelet's healthz port.
//! The demo runs anyway, and a Ctrl-C (SIGINT to its process group, as a terminal sends it)
//! during start-up, and again while its pods run, leaves no process, no mount and no directory
//! of it behind. The demo runs the binary under test (ATOLL_BIN), not a release build of its
//! own, and its own private containerd: this test takes no test bed of tests/common.

use crate::common;

use common::eventually;
use std::collections::BTreeSet;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

const BIN: &str = env!("CARGO_BIN_EXE_atoll");
const DEFAULT_SOCKET: &str = "/run/atoll/atoll.sock";

/// The parent of `pid`, if it still runs.
fn parent(pid: u32) -> Option<u32> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status.lines().find_map(|l| l.strip_prefix("PPid:")).and_then(|p| p.trim().parse().ok())
}

/// The processes before a demo runs, once no other test bed is running or tearing down (the
/// test beds' lock is free).
fn quiet_processes() -> BTreeSet<(u32, String)> {
    let status = Command::new("flock").args(["/run/atoll-testbed.lock", "true"]).status().unwrap();
    assert!(status.success());
    processes()
}

/// The processes alive now, with their command lines (kernel threads, which have none, left out).
fn processes() -> BTreeSet<(u32, String)> {
    let mut out = BTreeSet::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Some(pid) = entry.file_name().to_str().and_then(|n| n.parse::<u32>().ok()) else { continue };
        let cmdline = std::fs::read(entry.path().join("cmdline")).unwrap_or_default();
        if !cmdline.is_empty() {
            out.insert((pid, String::from_utf8_lossy(&cmdline).replace('\0', " ").trim_end().to_string()));
        }
    }
    out
}

/// A process the test started, stopped if the test fails half-way: the demo (by Ctrl-C, its
/// teardown awaited) or the installed atoll (by SIGTERM, so its socket goes with it).
struct Running(Child, &'static str);

impl Drop for Running {
    fn drop(&mut self) {
        if let Ok(None) = self.0.try_wait() {
            let target = if self.1 == "-INT" { format!("-{}", self.0.id()) } else { self.0.id().to_string() };
            let _ = Command::new("kill").args([self.1, "--", &target]).status();
            let _ = self.0.wait();
        }
    }
}

/// The demo, started as a shell in a terminal starts it: its own process group, SIGINT at its
/// default (a runner started in the background, as CI may be, hands it down ignored, and a
/// shell cannot trap a signal ignored when it started); what it prints goes to `log`.
fn start_demo(tmp: &Path, log: &Path) -> Running {
    let root = env!("CARGO_MANIFEST_DIR");
    let child = Command::new("env")
        .args(["--default-signal=INT", "bash", &format!("{root}/configs/demo.sh")])
        .env("ATOLL_BIN", BIN)
        .env("TMPDIR", tmp)
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(log).unwrap())
        .stderr(std::fs::File::create(log.with_extension("err")).unwrap())
        .process_group(0)
        .spawn()
        .expect("bash configs/demo.sh");
    Running(child, "-INT")
}

fn printed(log: &Path) -> String {
    let out = std::fs::read_to_string(log).unwrap_or_default();
    out + &std::fs::read_to_string(log.with_extension("err")).unwrap_or_default()
}

/// Ctrl-C: SIGINT to the whole foreground process group.
fn ctrl_c(demo: &Running) {
    let status = Command::new("kill").args(["-INT", "--", &format!("-{}", demo.0.id())]).status().unwrap();
    assert!(status.success());
}

/// Waits for the demo to end after a Ctrl-C, then checks that nothing of it is left: no
/// directory under its TMPDIR, no mount there, no process it started.
fn ended_without_leftovers(mut demo: Running, tmp: &Path, log: &Path, before: &BTreeSet<(u32, String)>) {
    let deadline = std::time::Instant::now() + Duration::from_secs(180);
    let status = loop {
        if let Some(status) = demo.0.try_wait().unwrap() {
            break status;
        }
        assert!(std::time::Instant::now() < deadline, "the demo did not end after Ctrl-C:\n{}", printed(log));
        std::thread::sleep(Duration::from_millis(100));
    };
    let out = printed(log);
    assert!(status.success(), "a Ctrl-C ends the demo with 0: {status:?}\n{out}");
    assert!(out.contains("demo: tearing down the test bed"), "{out}");
    assert!(!out.contains("Device or resource busy") && !out.contains("cannot remove"), "{out}");
    let left: Vec<PathBuf> = std::fs::read_dir(tmp)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.file_name().and_then(|n| n.to_str()).is_some_and(|n| n.starts_with("atoll-demo.")))
        .collect();
    assert!(left.is_empty(), "the demo's directory is gone: {left:?}\n{out}");
    let prefix = format!("{}/", tmp.display());
    let mounts: Vec<String> = std::fs::read_to_string("/proc/self/mountinfo")
        .unwrap()
        .lines()
        .filter(|l| l.split(' ').nth(4).is_some_and(|m| m.starts_with(&prefix)))
        .map(String::from)
        .collect();
    assert!(mounts.is_empty(), "no mount of the demo is left: {mounts:?}\n{out}");
    // Every process the demo started (containerd, its shims, the pods' processes) is gone; a
    // killed one may take a moment to be reaped.
    // A new child of a process that ran before the demo is not the demo's (a loop's `sleep`
    // elsewhere on the box), unless that parent is init, which takes in whatever a killed
    // parent leaves behind.
    let test = std::process::id();
    let old: BTreeSet<u32> = before.iter().map(|(pid, _)| *pid).collect();
    let started = || -> Vec<(u32, String)> {
        processes()
            .difference(before)
            .filter(|(pid, _)| *pid != test && parent(*pid).is_none_or(|p| p == 1 || !old.contains(&p)))
            .cloned()
            .collect()
    };
    let gone = (0..100).any(|_| {
        std::thread::sleep(Duration::from_millis(100));
        started().is_empty()
    });
    assert!(gone, "processes the demo started are still running: {:?}\n{out}", started());
}

#[test]
fn the_demo_runs_beside_an_installed_atoll_and_leaves_nothing_behind() {
    let tmp = crate::common::Scratch::new("demo-test");
    let installed = tmp.join("installed");
    let demos = tmp.join("demos");
    std::fs::create_dir_all(installed.join("manifests")).unwrap();
    std::fs::create_dir_all(&demos).unwrap();

    // The installed atoll: kubelet's default healthz port and atoll's default socket, as the
    // package runs it (its runtime does not matter here). One already running on this machine
    // plays the part as well.
    let other = Command::new(BIN)
        .args(["run", "--hostname-override=installed"])
        .arg(format!("--pod-manifest-path={}", installed.join("manifests").display()))
        .arg(format!("--root-dir={}", installed.join("state").display()))
        .arg(format!("--container-runtime-endpoint=unix://{}", installed.join("no-runtime.sock").display()))
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(installed.join("atoll.log")).unwrap())
        .spawn()
        .expect("start the installed atoll");
    let mut other = Running(other, "-TERM");
    eventually(Duration::from_secs(30), "an atoll on the default socket", || {
        std::os::unix::net::UnixStream::connect(DEFAULT_SOCKET).ok()
    });
    let ours = other.0.try_wait().unwrap().is_none();

    // Ctrl-C during start-up: while the test bed's containerd comes up.
    let before = quiet_processes();
    let log = tmp.join("start-up.log");
    let demo = start_demo(&demos, &log);
    eventually(Duration::from_secs(120), "the demo starting its containerd", || {
        printed(&log).contains("demo: starting a private containerd").then_some(())
    });
    ctrl_c(&demo);
    ended_without_leftovers(demo, &demos, &log, &before);

    // Ctrl-C while the pods run, their volumes mounted (greeter's Secret is a tmpfs).
    let before = quiet_processes();
    let log = tmp.join("running.log");
    let demo = start_demo(&demos, &log);
    let socket = eventually(Duration::from_secs(180), "the demo's hint naming its socket", || {
        let out = printed(&log);
        let hint = out.lines().find(|l| l.starts_with("demo: from another terminal: "))?.to_string();
        let socket = hint.split("--api-socket=").nth(1)?.split(' ').next()?.to_string();
        Some(socket)
    });
    assert!(socket.starts_with(&format!("{}/", demos.display())), "its own socket: {socket}");
    let pods = eventually(Duration::from_secs(180), "the example pods running", || {
        let out = Command::new(BIN).args(["pods", &format!("--api-socket={socket}")]).output().ok()?;
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        (text.lines().filter(|l| l.contains("Running")).count() >= 3).then_some(text)
    });
    assert!(pods.contains("greeter-atoll-demo") && pods.contains("hello-web-atoll-demo"), "{pods}");
    let secret_mounted = std::fs::read_to_string("/proc/self/mountinfo").unwrap().lines().any(|l| {
        l.split(' ').nth(4).is_some_and(|m| m.starts_with(&demos.display().to_string()) && m.contains("secret"))
    });
    assert!(secret_mounted, "greeter's Secret volume is mounted: the case the teardown must undo");
    ctrl_c(&demo);
    ended_without_leftovers(demo, &demos, &log, &before);

    // The installed atoll was never disturbed.
    assert!(!ours || other.0.try_wait().unwrap().is_none(), "the installed atoll still runs");
    assert!(std::os::unix::net::UnixStream::connect(DEFAULT_SOCKET).is_ok());
    drop(other);
    let _ = std::fs::remove_dir_all(&tmp);
}
