//! Operating atoll: a running `atoll run` against the test bed, with its local API on a unix
//! socket, healthz and the read-only API on loopback, and systemd's notify socket; every
//! endpoint and every CLI command (`pods`, `describe`, `logs` incl. `-f`, `restart`,
//! `doctor`), metrics read with a Prometheus parser, SIGHUP, and SIGTERM leaving pods running.
//! (Its own test binary: atoll removes every atoll-made sandbox it was not told to run.)

use crate::common;

use common::{eventually, free_port, testbed, Testbed};
use serde_json::Value;
use std::io::{BufRead, BufReader, Read, Write};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// atoll with systemd's notify socket (read by a thread, as systemd would), healthz and the
/// read-only API on free ports.
struct Agent {
    inner: common::Agent,
    healthz: u16,
    read_only: u16,
    /// Every notify message so far.
    notes: std::sync::Arc<std::sync::Mutex<Vec<String>>>,
    seen: std::cell::Cell<usize>,
}

impl std::ops::Deref for Agent {
    type Target = common::Agent;
    fn deref(&self) -> &common::Agent {
        &self.inner
    }
}

impl std::ops::DerefMut for Agent {
    fn deref_mut(&mut self) -> &mut common::Agent {
        &mut self.inner
    }
}

impl Agent {
    fn start(tb: &Testbed, dir: &Path, extra: &[&str]) -> Agent {
        let (healthz, read_only) = (free_port(), free_port());
        let own = dir.join("atoll.yaml");
        std::fs::create_dir_all(dir).unwrap();
        if !own.exists() {
            std::fs::write(&own, "apiVersion: atoll.io/v1alpha1\nkind: AtollConfiguration\n").unwrap();
        }
        let notify_path = dir.join("notify.sock");
        let _ = std::fs::remove_file(&notify_path);
        let notify = std::os::unix::net::UnixDatagram::bind(&notify_path).unwrap();
        let notes = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let sink = notes.clone();
        std::thread::spawn(move || {
            let mut buf = [0u8; 256];
            while let Ok(n) = notify.recv(&mut buf) {
                sink.lock().unwrap().push(String::from_utf8_lossy(&buf[..n]).into_owned());
            }
        });
        let own_flag = format!("--atoll-config={}", own.display());
        let args: Vec<&str> = std::iter::once(own_flag.as_str()).chain(extra.iter().copied()).collect();
        let inner = common::Agent::start(
            tb,
            dir,
            &format!("fileCheckFrequency: 1s\nhealthzPort: {healthz}\nreadOnlyPort: {read_only}\n"),
            &args,
            &[("NOTIFY_SOCKET", &notify_path), ("WATCHDOG_USEC", Path::new("600000"))],
        );
        Agent { inner, healthz, read_only, notes, seen: std::cell::Cell::new(0) }
    }

    /// The next notify message.
    fn notified(&self) -> String {
        let i = self.seen.get();
        let note =
            eventually(Duration::from_secs(30), "a notify message", || self.notes.lock().unwrap().get(i).cloned());
        self.seen.set(i + 1);
        note
    }
}

/// A plain HTTP request over TCP to 127.0.0.1: (status, body).
fn http(port: u16, method: &str, path: &str) -> (u16, String) {
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    write!(s, "{method} {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").unwrap();
    let mut text = String::new();
    s.read_to_string(&mut text).unwrap();
    let status = text.split(' ').nth(1).and_then(|c| c.parse().ok()).unwrap_or(0);
    let body = text.split_once("\r\n\r\n").map(|(_, b)| b.to_string()).unwrap_or_default();
    (status, body)
}

fn pod_json(agent: &Agent, name: &str) -> Option<Value> {
    agent.pod(name)
}

fn running_and_ready(p: &Value) -> bool {
    p["status"]["containerStatuses"].as_array().is_some_and(|cs| {
        !cs.is_empty() && cs.iter().all(|c| c["ready"].as_bool() == Some(true) && c["state"]["running"].is_object())
    })
}

const TALKER: &str = "apiVersion: v1
kind: Pod
metadata: {name: talker}
spec:
  hostNetwork: true
  terminationGracePeriodSeconds: 1
  containers:
  - name: talk
    image: docker.io/library/busybox:1.36
    command: [sh, -c, 'trap \"exit 0\" TERM; i=0; while true; do echo line $i; i=$((i+1)); sleep 0.2; done']
";

const SHORT: &str = "apiVersion: v1
kind: Pod
metadata: {name: short}
spec:
  hostNetwork: true
  restartPolicy: Never
  terminationGracePeriodSecond: 1
  containers:
  - name: once
    image: docker.io/library/busybox:1.36
    command: [sh, -c, 'sleep 3; echo one; sleep 0.5; echo two; sleep 0.5; echo three']
";

#[test]
fn the_local_api_and_cli_serve_an_operator_on_site() {
    let _room = common::room(module_path!());
    let tb = testbed();
    let dir = crate::common::Scratch::new("local-api");
    std::fs::create_dir_all(dir.join("manifests")).unwrap();
    std::fs::write(dir.join("manifests/talker.yaml"), TALKER).unwrap();
    std::fs::write(dir.join("manifests/short.yaml"), SHORT).unwrap();
    let agent = Agent::start(tb, &dir, &[]);

    // systemd: READY after the first full sync, then the watchdog, fed from the main loop.
    let ready = agent.notified();
    assert!(ready.starts_with("READY=1"), "{ready}");
    let t0 = Instant::now();
    let mut pings = 0;
    while pings < 2 {
        if agent.notified() == "WATCHDOG=1" {
            pings += 1;
        }
    }
    assert!(t0.elapsed() < Duration::from_secs(5), "pings every 300 ms: {:?}", t0.elapsed());

    // The socket is root's alone.
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(&agent.socket).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600, "socket mode {mode:o}");
    let dir_mode = std::fs::metadata(agent.socket.parent().unwrap()).unwrap().permissions().mode() & 0o777;
    assert_eq!(dir_mode, 0o700, "socket directory mode {dir_mode:o}");

    // The talker runs and is ready; the short pod finishes.
    let talker = eventually(Duration::from_secs(60), "talker running", || {
        pod_json(&agent, "talker-tb").filter(running_and_ready)
    });
    assert_eq!(talker["kind"], "Pod");
    // A typo in a manifest: the agent's log names the key and the field it is closest to.
    let log = agent.log();
    let typo =
        "spec.terminationGracePeriodSecond: unknown field (did you mean terminationGracePeriodSeconds?); ignored";
    assert!(log.lines().any(|l| l.starts_with("WARN") && l.contains("short.yaml") && l.contains(typo)), "{log}");
    assert!(talker["status"]["containerStatuses"][0]["containerID"].as_str().unwrap().starts_with("containerd://"));

    // It has started (it may even have finished already: then -f prints all and ends).
    eventually(Duration::from_secs(30), "short started", || {
        pod_json(&agent, "short-tb")
            .filter(|p| p["status"]["containerStatuses"][0]["containerID"].as_str().is_some_and(|id| !id.is_empty()))
    });
    // `atoll logs -f` on the short pod streams its lines and ends when the container exits.
    let follower = Command::new(env!("CARGO_BIN_EXE_atoll"))
        .args(["logs", "short", "-f"])
        .arg(format!("--api-socket={}", agent.socket.display()))
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let started = Instant::now();
    let out = follower.wait_with_output().unwrap();
    assert!(out.status.success());
    assert_eq!(String::from_utf8_lossy(&out.stdout), "one\ntwo\nthree\n", "followed to the end");
    assert!(started.elapsed() < Duration::from_secs(30));

    the_cli_lists_pods(&agent);

    logs_whole_tail_flagged_and_followed(&agent);

    restart_then_describe(&agent);

    the_read_only_api_and_its_metrics(&agent);

    exec_through_the_socket(&agent);

    doctor_fails_clearly_and_passes_on_the_test_bed(tb, &dir);

    sighup_reloads_the_config(&agent, &dir);

    // SIGTERM: STOPPING, exit 0, and the pods keep running.
    let id = talker["metadata"]["uid"].as_str().unwrap().to_string();
    let mut agent = agent;
    agent.signal("TERM");
    let status = eventually(Duration::from_secs(20), "atoll to exit", || agent.child.try_wait().unwrap());
    assert!(status.success(), "{}", agent.log());
    eventually(Duration::from_secs(5), "STOPPING=1", || {
        agent.notes.lock().unwrap().iter().any(|n| n == "STOPPING=1").then_some(())
    });
    assert!(!agent.socket.exists(), "the socket is removed on exit");
    let cri = tb.cri();
    let sel = std::collections::HashMap::from([("io.kubernetes.pod.uid".to_string(), id.clone())]);
    let running = smol::block_on(
        cri.list_containers(Some(atoll::cri::api::ContainerFilter { label_selector: sel, ..Default::default() })),
    )
    .unwrap()
    .into_iter()
    .filter(|c| c.state == atoll::cri::api::ContainerState::ContainerRunning as i32)
    .count();
    assert_eq!(running, 1, "the pod survives the agent");
    drop(agent);

    // Started again with --drain-on-exit (and a valid config): the pod is adopted, and SIGTERM
    // stops it first.
    std::fs::write(dir.join("atoll.yaml"), "apiVersion: atoll.io/v1alpha1\nkind: AtollConfiguration\n").unwrap();
    let agent = Agent::start(tb, &dir, &["--drain-on-exit"]);
    assert!(agent.notified().starts_with("READY=1"));
    let adopted = eventually(Duration::from_secs(30), "talker adopted", || {
        pod_json(&agent, "talker-tb").filter(running_and_ready)
    });
    assert_eq!(adopted["status"]["containerStatuses"][0]["restartCount"], 1, "adopted, not restarted");
    let mut agent = agent;
    agent.signal("TERM");
    let status = eventually(Duration::from_secs(60), "atoll to drain and exit", || agent.child.try_wait().unwrap());
    assert!(status.success());
    let sel = std::collections::HashMap::from([("io.kubernetes.pod.uid".to_string(), id)]);
    let left = smol::block_on(
        cri.list_pod_sandbox(Some(atoll::cri::api::PodSandboxFilter { label_selector: sel, ..Default::default() })),
    )
    .unwrap();
    assert!(left.is_empty(), "drained: {left:?}");
    drop(agent);
    let _ = std::fs::remove_dir_all(&dir);
}

/// pods: a kubectl-like table that fits 80 columns, wide, and YAML.
fn the_cli_lists_pods(agent: &Agent) {
    let (code, table, _) = agent.cli(&["pods"]);
    assert_eq!(code, 0);
    let lines: Vec<&str> = table.lines().collect();
    assert!(lines[0].starts_with("NAME") && lines[0].contains("READY   STATUS"), "{table}");
    let row = lines.iter().find(|l| l.starts_with("talker-tb")).expect("talker row");
    assert!(row.contains("1/1") && row.contains("Running"), "{row}");
    let short_row = lines.iter().find(|l| l.starts_with("short-tb")).expect("short row");
    assert!(short_row.contains("0/1") && short_row.contains("Completed"), "{short_row}");
    assert!(lines.iter().all(|l| l.len() <= 80), "{table}");
    let (_, wide, _) = agent.cli(&["pods", "-o", "wide"]);
    assert!(wide.lines().next().unwrap().ends_with("IP         NODE") || wide.contains("NODE"), "{wide}");
    let (_, yaml, _) = agent.cli(&["pods", "-o", "yaml"]);
    let from_yaml: Value = serde_saphyr::from_str(&yaml).unwrap();
    assert_eq!(from_yaml["items"].as_array().unwrap().len(), 2);
}

/// logs: whole, tail, previous (none yet), kubectl's flags, and `-f` following a running
/// container.
fn logs_whole_tail_flagged_and_followed(agent: &Agent) {
    let (code, logs, _) = agent.cli(&["logs", "talker"]);
    assert_eq!(code, 0);
    assert!(logs.starts_with("line 0\nline 1\n"), "{logs}");
    let (_, tail, _) = agent.cli(&["logs", "default/talker", "--tail", "2"]);
    assert_eq!(tail.lines().count(), 2, "{tail}");
    let (code, _, err) = agent.cli(&["logs", "talker", "--previous"]);
    assert_ne!(code, 0);
    assert!(err.contains("previous terminated container"), "{err}");
    // kubectl's log flags: a time on each line, a byte limit, since.
    let (_, stamped, _) = agent.cli(&["logs", "talker", "--tail", "1", "--timestamps"]);
    let (time, text) = stamped.trim_end().split_once(' ').unwrap();
    assert!(time.len() == 30 && text.starts_with("line "), "{stamped}");
    assert_eq!(agent.cli(&["logs", "talker", "--limit-bytes", "9"]).1, "line 0\nli");
    // An offset's `+` reaches the agent as `+` (sent raw it would be read as a space: 400).
    let (code, out, err) = agent.cli(&["logs", "talker", "--since-time", "2099-01-01T00:00:00+01:00"]);
    assert_eq!((code, out.as_str()), (0, ""), "{err}");
    let (code, out, err) = agent.cli(&["logs", "talker", "--since-time", "2000-01-01T00:00:00+01:00"]);
    assert!(code == 0 && out.starts_with("line 0\n"), "{err}");
    assert!(agent.cli(&["logs", "talker", "--since", "1h"]).1.starts_with("line 0\n"));
    let (code, _, err) = agent.cli(&["logs", "talker", "--since", "soon"]);
    assert!(code != 0 && err.contains("--since"), "{err}");
    let (code, _, err) = agent.cli(&["logs", "nosuchpod"]);
    assert_ne!(code, 0);
    assert!(err.contains("not found"), "{err}");

    // logs -f follows a running container: new lines keep coming.
    let mut follow = Command::new(env!("CARGO_BIN_EXE_atoll"))
        .args(["logs", "talker", "-f", "--tail", "1"])
        .arg(format!("--api-socket={}", agent.socket.display()))
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut reader = BufReader::new(follow.stdout.take().unwrap());
    let mut numbers = vec![];
    for _ in 0..6 {
        let mut line = String::new();
        reader.read_line(&mut line).unwrap();
        numbers.push(line.trim().trim_start_matches("line ").parse::<u64>().unwrap());
    }
    let _ = follow.kill();
    let _ = follow.wait();
    assert!(numbers.windows(2).all(|w| w[1] == w[0] + 1), "consecutive lines: {numbers:?}");
}

/// restart: the container comes back, restartCount 1, the previous logs are readable; then
/// describe: spec summary, states, last state, events.
fn restart_then_describe(agent: &Agent) {
    let (code, out, _) = agent.cli(&["restart", "talker"]);
    assert_eq!(code, 0);
    assert!(out.contains("stopped talk"), "{out}");
    eventually(Duration::from_secs(60), "talker restarted", || {
        pod_json(agent, "talker-tb")
            .filter(|p| p["status"]["containerStatuses"][0]["restartCount"] == 1 && running_and_ready(p))
    });
    let (code, prev, _) = agent.cli(&["logs", "talker", "--previous"]);
    assert_eq!(code, 0);
    assert!(prev.starts_with("line 0\n"), "{prev}");

    // describe: spec summary, states, last state, events.
    let (code, text, _) = agent.cli(&["describe", "talker"]);
    assert_eq!(code, 0);
    for want in [
        "Name:         talker-tb",
        "Namespace:    default",
        "Status:       Running",
        "Restart Count: 1",
        "Last State:",
        "Events:",
        "Killing",
        "Started",
    ] {
        assert!(text.contains(want), "describe lacks {want:?}:\n{text}");
    }
    assert!(text.lines().all(|l| l.len() <= 160), "{text}");
}

/// The API directly: healthz on its own listener, the read-only API (GETs only), /events and
/// /metrics, read by a Prometheus parser, with the right figures.
fn the_read_only_api_and_its_metrics(agent: &Agent) {
    let events = agent.cli(&["describe", "short"]).1;
    assert!(events.contains("Completed") || events.contains("Terminated"), "{events}");

    // healthz on its own listener; the read-only API serves GETs only.
    assert_eq!(http(agent.healthz, "GET", "/healthz"), (200, "ok".into()));
    assert_eq!(http(agent.healthz, "GET", "/pods").0, 403);
    let (code, body) = http(agent.read_only, "GET", "/pods");
    assert_eq!(code, 200);
    let list: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(list["kind"], "PodList");
    assert_eq!(http(agent.read_only, "POST", "/pods/default/talker-tb/restart").0, 403);
    assert_eq!(http(agent.read_only, "GET", "/logs/default/talker-tb/talk").0, 403);
    let (code, body) = http(agent.read_only, "GET", "/events");
    assert_eq!(code, 200);
    let events: Value = serde_json::from_str(&body).unwrap();
    assert!(events["items"].as_array().unwrap().iter().any(|e| e["reason"] == "Started" && e["pod"] == "talker-tb"));
    assert_eq!(http(agent.read_only, "GET", "/pods/default/nope").0, 404);

    // metrics: a Prometheus parser reads them, and the figures are right.
    let (code, body) = http(agent.read_only, "GET", "/metrics");
    assert_eq!(code, 200);
    let scrape = prometheus_parse::Scrape::parse(body.lines().map(|l| Ok(l.to_string()))).expect("valid text format");
    let value = |name: &str, labels: &[(&str, &str)]| -> Option<f64> {
        scrape.samples.iter().find(|s| s.metric == name && labels.iter().all(|(k, v)| s.labels.get(k) == Some(v))).map(
            |s| match s.value {
                prometheus_parse::Value::Counter(v)
                | prometheus_parse::Value::Gauge(v)
                | prometheus_parse::Value::Untyped(v) => v,
                _ => f64::NAN,
            },
        )
    };
    assert_eq!(value("atoll_pods", &[("phase", "Running")]), Some(1.0), "{body}");
    assert_eq!(value("atoll_pods", &[("phase", "Succeeded")]), Some(1.0), "{body}");
    assert_eq!(value("atoll_container_restarts", &[("pod", "talker-tb"), ("container", "talk")]), Some(1.0));
    assert!(value("atoll_cri_requests_total", &[("method", "RunPodSandbox"), ("result", "ok")]).unwrap_or(0.0) >= 2.0);
    assert!(value("process_resident_memory_bytes", &[]).unwrap_or(0.0) > 1e6);
    assert!(
        value("container_memory_working_set_bytes", &[("pod", "talker-tb"), ("container", "talk")]).unwrap_or(0.0)
            > 0.0,
        "{body}"
    );
    assert!(value("atoll_manifest_source_last_success_timestamp_seconds", &[("source", "file")]).unwrap_or(0.0) > 1e9);
    assert_eq!(value("atoll_runtime_up", &[]), Some(1.0));
    assert_eq!(agent.cli(&["pods", "-o", "json"]).0, 0);
}

/// exec and attach for root on the box: the same splice as kubelet's server, through the
/// socket (what `atoll exec` speaks); the read-only port never streams.
fn exec_through_the_socket(agent: &Agent) {
    let exec = |path: &str| {
        let mut unix = std::os::unix::net::UnixStream::connect(&agent.socket).unwrap();
        unix.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        let status = common::kubelet_client::ws_upgrade(&mut unix, "atoll", "", path).unwrap();
        (status, common::kubelet_client::ws_channels(&mut unix))
    };
    let (status, out) =
        exec("/exec/default/talker-tb/talk?command=sh&command=-c&command=echo%20hi%3B%20exit%204&output=1&error=1");
    assert_eq!(status, 101);
    assert_eq!(out.get(&1).map(Vec::as_slice), Some(&b"hi\n"[..]));
    assert!(String::from_utf8_lossy(&out[&3]).contains("\"4\""), "{out:?}");
    assert_eq!(exec("/exec/default/talker-tb/nope?command=true&output=1").0, 404);
    assert_eq!(exec("/portForward/default/nobody").0, 404);
    // The read-only port never streams.
    let (code, _) = http(agent.read_only, "GET", "/exec/default/talker-tb/talk?command=true&output=1");
    assert!(code == 403 || code == 404, "{code}");
}

/// doctor: a clear failure on a missing runtime socket, and the runtime and node checks passed
/// against the test bed's.
fn doctor_fails_clearly_and_passes_on_the_test_bed(tb: &Testbed, dir: &Path) {
    let out = Command::new(env!("CARGO_BIN_EXE_atoll"))
        .args(["doctor", "--container-runtime-endpoint=unix:///nonexistent/containerd.sock"])
        .arg(format!("--root-dir={}", dir.join("state").display()))
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{text}");
    // The failing check, its continuation lines and its fix, up to the next check.
    let block: String = text
        .lines()
        .skip_while(|l| !l.starts_with("FAIL runtime"))
        .take_while(|l| l.starts_with("FAIL runtime") || l.starts_with(' '))
        .collect::<Vec<_>>()
        .join(" ");
    assert!(block.contains("/nonexistent/containerd.sock"), "{text}");
    assert!(block.contains("fix: start it"), "{text}");
    assert!(text.lines().all(|l| l.len() <= 80), "an 80-column console: {text}");
    // ... and passes the runtime check against the test bed's.
    let out = Command::new(env!("CARGO_BIN_EXE_atoll"))
        .args(["doctor", &format!("--container-runtime-endpoint={}", tb.endpoint), "--node-labels=zone=z1"])
        .arg(format!("--root-dir={}", dir.join("state").display()))
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.lines().any(|l| l.starts_with("ok   runtime") && l.contains("containerd")), "{text}");
    // The node as admission sees it: its labels and allocatable resources.
    let words = text.split_whitespace().collect::<Vec<_>>().join(" ");
    assert!(text.lines().any(|l| l.starts_with("ok   node")), "{text}");
    assert!(
        words.contains("zone=z1") && words.contains("kubernetes.io/os=linux") && words.contains("pods 110"),
        "{text}"
    );
    assert!(text.lines().all(|l| l.len() <= 80), "an 80-column console: {text}");
}

/// SIGHUP reloads atoll's config; a bad one is refused and the old settings stay; each
/// /healthz counts its checks for /metrics/slis.
fn sighup_reloads_the_config(agent: &Agent, dir: &Path) {
    std::fs::write(
        dir.join("atoll.yaml"),
        "apiVersion: atoll.io/v1alpha1\nkind: AtollConfiguration\ncrashLoopBackOff: {initialDelay: 1s, maxDelay: 2s}\n",
    )
    .unwrap();
    agent.signal("HUP");
    eventually(Duration::from_secs(10), "the reload logged", || agent.log().contains("SIGHUP: reloaded").then_some(()));
    // kubelet_node_config_error: whether atoll runs on an older config than it was asked to read.
    let config_error = || {
        http(agent.read_only, "GET", "/metrics")
            .1
            .lines()
            .find_map(|l| l.strip_prefix("kubelet_node_config_error ").map(String::from))
    };
    assert_eq!(config_error().as_deref(), Some("0"));
    std::fs::write(
        dir.join("atoll.yaml"),
        "apiVersion: atoll.io/v1alpha1\nkind: AtollConfiguration\ncrashLoopBackOff: {initialDelay: soon}\n",
    )
    .unwrap();
    agent.signal("HUP");
    eventually(Duration::from_secs(10), "the refusal logged", || {
        agent.log().contains("config not reloaded").then_some(())
    });
    assert_eq!(http(agent.healthz, "GET", "/healthz").0, 200, "still healthy");
    assert_eq!(config_error().as_deref(), Some("1"), "the bad config was not read");
    // Each /healthz, on any listener, counts its checks for /metrics/slis (read-only too).
    let (code, slis) = http(agent.read_only, "GET", "/metrics/slis");
    assert_eq!(code, 200);
    assert!(slis.contains("\nkubernetes_healthcheck{name=\"syncloop\",type=\"healthz\"} 1\n"), "{slis}");
    let (code, probes) = http(agent.read_only, "GET", "/metrics/probes");
    assert!(code == 200 && probes.contains("# TYPE process_start_time_seconds gauge\n"), "{probes}");
}
