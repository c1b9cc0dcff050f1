//! What the benchmarks that run atoll in their own process share: the trace of CRI calls made
//! in it (atoll's, logged as each reply arrives, and the bench's own) with the instant each
//! ended, read to take a measurement's end without polling the runtime; and small helpers on
//! pods in the test bed's runtime.

#![allow(dead_code)]

use atoll::cri::api::{ContainerFilter, ContainerState, PodSandboxFilter};
use atoll::cri::Cri;
use std::collections::HashMap;
use std::path::Path;
use std::time::{Duration, Instant};

/// Records the trace of CRI calls made in this process (`atoll::cri::call`: name, outcome,
/// microseconds) with the instant each ended: atoll's, and the bench's own.
pub struct CallLog {
    pub calls: std::sync::Mutex<Vec<(Instant, String)>>,
    added: std::sync::Condvar,
}

impl log::Log for CallLog {
    fn enabled(&self, m: &log::Metadata) -> bool {
        m.target() == "atoll::cri::call"
    }
    fn log(&self, r: &log::Record) {
        if self.enabled(r.metadata()) {
            self.calls.lock().unwrap().push((Instant::now(), r.args().to_string()));
            self.added.notify_all();
        }
    }
    fn flush(&self) {}
}

pub static CALLS: CallLog = CallLog { calls: std::sync::Mutex::new(Vec::new()), added: std::sync::Condvar::new() };

/// Where the trace ends now: later calls are counted from here.
pub fn mark() -> usize {
    CALLS.calls.lock().unwrap().len()
}

/// The instant the `n`th successful `call` after `from` ended (waiting for it); only atoll
/// makes CRI calls while the bench waits here.
pub fn nth_call(from: usize, call: &str, n: usize) -> Instant {
    let deadline = Instant::now() + Duration::from_secs(120);
    let mut calls = CALLS.calls.lock().unwrap();
    loop {
        let done = calls.iter().skip(from).filter(|(_, text)| text.starts_with(&format!("{call} ok "))).nth(n - 1);
        if let Some((at, _)) = done {
            return *at;
        }
        let left = deadline.checked_duration_since(Instant::now()).expect("timed out waiting for atoll's {call}");
        calls = CALLS.added.wait_timeout(calls, left).unwrap().0;
    }
}

/// When a call in the trace began: its end `at` less the microseconds it logged.
fn began(at: Instant, text: &str) -> Option<Instant> {
    let us: u64 = text.rsplit(' ').next()?.parse().ok()?;
    at.checked_sub(Duration::from_micros(us))
}

/// How much of `t0..end` no CRI call in the trace after `from` covered: the time atoll itself
/// was on the way (noticing the event, deciding, preparing a request), not waiting on the
/// runtime. Each call's span is its end less the microseconds it logged.
pub fn outside_calls(from: usize, t0: Instant, end: Instant) -> Duration {
    let calls = CALLS.calls.lock().unwrap();
    let mut spans: Vec<(Instant, Instant)> = calls
        .iter()
        .skip(from)
        .filter_map(|(at, text)| Some((began(*at, text)?.max(t0), (*at).min(end))))
        .filter(|(b, e)| b < e)
        .collect();
    spans.sort();
    let (mut covered, mut reach) = (Duration::ZERO, t0);
    for (b, e) in spans {
        let b = b.max(reach);
        if e > b {
            covered += e - b;
            reach = e;
        }
    }
    end.saturating_duration_since(t0).saturating_sub(covered)
}

/// A measurement by the agent in this process: how long it took in all, how much of that was
/// outside the runtime's calls (`outside_calls`), and how many calls it made.
#[derive(Clone, Copy, Debug)]
pub struct Timed {
    pub took: Duration,
    pub outside: Duration,
    pub calls: usize,
}

impl Timed {
    /// `t0..end`, with the calls in the trace after `from`.
    pub fn between(from: usize, t0: Instant, end: Instant) -> Timed {
        let calls = calls_within(from, t0, end);
        Timed { took: end.saturating_duration_since(t0), outside: outside_calls(from, t0, end), calls }
    }
}

/// How many calls in the trace after `from` began at or after `t0` and ended by `end`.
pub fn calls_within(from: usize, t0: Instant, end: Instant) -> usize {
    let calls = CALLS.calls.lock().unwrap();
    calls.iter().skip(from).filter(|(at, text)| *at <= end && began(*at, text).is_some_and(|b| b >= t0)).count()
}

pub fn pct(v: &[Duration], p: usize) -> Duration {
    let mut v = v.to_vec();
    v.sort();
    v[(v.len() * p / 100).min(v.len() - 1)]
}

pub fn ms(d: Duration) -> String {
    format!("{:.0} ms", d.as_secs_f64() * 1e3)
}

pub fn by_name(name: &str) -> HashMap<String, String> {
    HashMap::from([("io.kubernetes.pod.name".to_string(), name.to_string())])
}

pub fn running(cri: &Cri, pod: &str) -> Vec<atoll::cri::api::Container> {
    smol::block_on(cri.list_containers(Some(ContainerFilter { label_selector: by_name(pod), ..Default::default() })))
        .unwrap()
        .into_iter()
        .filter(|c| c.state == ContainerState::ContainerRunning as i32)
        .collect()
}

pub fn sandboxes(cri: &Cri, pod: &str) -> usize {
    smol::block_on(cri.list_pod_sandbox(Some(PodSandboxFilter { label_selector: by_name(pod), ..Default::default() })))
        .unwrap()
        .len()
}

pub fn wait(what: &str, mut ok: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(120);
    while !ok() {
        assert!(Instant::now() < deadline, "timed out: {what}");
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Waits until the machine is quiet: a 100 ms window in which its CPUs were at most 5% busy
/// (by /proc/stat), or `limit`. What a batch leaves behind (shims exiting, the runtime's
/// collection of removed snapshots, the agent's removal of pods' files) would otherwise land in
/// the next sample, whichever arm's it is. Returns how long it waited.
pub fn quiet(limit: Duration) -> Duration {
    let t0 = Instant::now();
    let mut last = cpu_ticks();
    while t0.elapsed() < limit {
        std::thread::sleep(Duration::from_millis(100));
        let now = cpu_ticks();
        let (busy, all) = (now.0.saturating_sub(last.0), now.1.saturating_sub(last.1));
        if all > 0 && busy * 20 <= all {
            break;
        }
        last = now;
    }
    t0.elapsed()
}

/// The machine's CPU ticks so far (/proc/stat's first line): busy, and all (idle and iowait
/// are not busy).
fn cpu_ticks() -> (u64, u64) {
    let stat = std::fs::read_to_string("/proc/stat").unwrap_or_default();
    let ticks: Vec<u64> =
        stat.lines().next().unwrap_or_default().split_whitespace().skip(1).filter_map(|t| t.parse().ok()).collect();
    let all: u64 = ticks.iter().take(8).sum();
    let idle = ticks.get(3).copied().unwrap_or(0) + ticks.get(4).copied().unwrap_or(0);
    (all.saturating_sub(idle), all)
}

/// This process's CPU so far (all its threads, /proc/self/stat): user and system, in clock
/// ticks (USER_HZ, 100 on Linux): a difference of two readings is good to a tick.
pub fn own_cpu() -> (u64, u64) {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    // The fields after the command's closing parenthesis; utime and stime are the 14th and 15th.
    let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
    let field = |n: usize| rest.split_whitespace().nth(n - 3).and_then(|t| t.parse().ok()).unwrap_or(0);
    (field(14), field(15))
}

/// This process's CPU (user, system) since [`own_cpu`] gave `before`.
pub fn cpu_since(before: (u64, u64)) -> (Duration, Duration) {
    let now = own_cpu();
    let ticks = |t: u64| Duration::from_millis(t * 10);
    (ticks(now.0.saturating_sub(before.0)), ticks(now.1.saturating_sub(before.1)))
}

/// Writes a manifest as editors and config tools do: a temporary file renamed into place.
pub fn drop_manifest(dir: &Path, name: &str, yaml: &str) {
    rename_in(stage(dir, name, yaml));
}

/// A manifest written beside its place (a hidden file, which atoll ignores), to be renamed in
/// with [`rename_in`]: a measurement that starts at the rename does not time the bench's own
/// writing of the file.
pub fn stage(dir: &Path, name: &str, yaml: &str) -> (std::path::PathBuf, std::path::PathBuf) {
    let tmp = dir.join(format!(".{name}.tmp"));
    std::fs::write(&tmp, yaml).unwrap();
    (tmp, dir.join(format!("{name}.yaml")))
}

/// Renames a [`stage`]d manifest into place.
pub fn rename_in((tmp, to): (std::path::PathBuf, std::path::PathBuf)) {
    std::fs::rename(tmp, to).unwrap();
}

/// An agent running in this process: `atoll run`'s own runner. Dropping the sender stops it
/// (pods keep running, as under kubelet).
pub type InProcess = (smol::Task<Result<(), String>>, smol::channel::Sender<atoll::agent::Command>);

/// `atoll run` in this process: the kubelet config `config`, the runtime at `endpoint`, its
/// state under `root`, node `node`, no local API, and `extra` flags.
pub fn agent_in_process(config: &Path, endpoint: &str, root: &Path, node: &str, extra: &[String]) -> InProcess {
    let mut args = vec![
        "run".to_string(),
        format!("--config={}", config.display()),
        format!("--container-runtime-endpoint={endpoint}"),
        format!("--root-dir={}", root.display()),
        "--api-socket=none".to_string(),
        format!("--hostname-override={node}"),
    ];
    args.extend_from_slice(extra);
    let atoll::cli::Command::Run(flags) = atoll::cli::parse(args).expect("run flags") else { unreachable!() };
    let settings = atoll::config::Settings::load(&flags).expect("settings");
    let (tx, rx) = smol::channel::bounded(1);
    (smol::spawn(atoll::agent::run(settings, rx)), tx)
}

/// A crash and its restart by the agent in this process (node `bench`): the manifest `yaml` of
/// pod `name`, whose container exits; from the runtime's finishedAt of the first instance to
/// the reply to atoll's StartContainer of the second. The pod is removed after.
pub fn crash_to_restart(cri: &Cri, manifests: &Path, name: &str, yaml: &str) -> Timed {
    let pod = format!("{name}-bench");
    let from = mark();
    drop_manifest(manifests, name, yaml);
    nth_call(from, "StartContainer", 1);
    wait("the first instance running", || !running(cri, &pod).is_empty());
    let first = running(cri, &pod)[0].id.clone();
    let restarted = nth_call(from, "StartContainer", 2);
    let seen = std::time::SystemTime::now() - restarted.elapsed();
    wait("the restart", || running(cri, &pod).iter().any(|c| c.id != first));
    let st = smol::block_on(cri.container_status(&first, false)).unwrap().status.unwrap();
    let exited = std::time::SystemTime::UNIX_EPOCH + Duration::from_nanos(st.finished_at as u64);
    std::fs::remove_file(manifests.join(format!("{name}.yaml"))).unwrap();
    wait("crash pod gone", || sandboxes(cri, &pod) == 0);
    let took = seen.duration_since(exited).unwrap_or_default();
    let t0 = restarted.checked_sub(took).unwrap_or(restarted);
    // Between the exit and the restart the bench makes no call (it waits on the trace).
    Timed { took, ..Timed::between(from, t0, restarted) }
}

/// A start and a stop by the agent in this process (node `bench`): the manifest `yaml` of pod
/// `name` renamed in -> the reply to atoll's StartContainer; removed -> the reply to its
/// RemovePodSandbox. Returns both, once the pod has gone.
pub fn start_then_stop(cri: &Cri, manifests: &Path, name: &str, yaml: &str) -> (Timed, Timed) {
    let pod = format!("{name}-bench");
    let staged = stage(manifests, name, yaml);
    let (from, t0) = (mark(), Instant::now());
    rename_in(staged);
    let start = Timed::between(from, t0, nth_call(from, "StartContainer", 1));
    wait("start", || !running(cri, &pod).is_empty());
    let (from, t0) = (mark(), Instant::now());
    std::fs::remove_file(manifests.join(format!("{name}.yaml"))).unwrap();
    let stop = Timed::between(from, t0, nth_call(from, "RemovePodSandbox", 1));
    wait("teardown", || sandboxes(cri, &pod) == 0);
    (start, stop)
}
