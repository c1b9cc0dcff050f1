//! atoll against a byte-identical replay of its own CRI requests: what atoll adds to what the
//! runtime does for it. Prints a table; asserts nothing about time.
//!
//! atoll (in this process, `atoll run`'s runner) first runs through a recording proxy
//! (`shared/cri_proxy.rs`): a pod started and removed, and a pod whose container exits and is
//! restarted. The calls each made for that pod (those naming its UID or the IDs the runtime
//! gave it, and ImageStatus; not the relist's or the node's) are kept as they went. Then, in
//! rounds, atoll (straight to the runtime) and a client that sends those requests again take
//! turns: the same bytes, with only the pod's UID and the IDs the runtime returns swapped for
//! this round's (the same lengths), the calls atoll made at once sent at once, each on the
//! one connection atoll uses too. The pod's directory and log directory are copied for the new
//! UID before the clock starts, since the requests name them.
//!
//! - start: atoll, the manifest's rename -> the runtime's reply to its StartContainer; the
//!   replay, its first call -> the same reply;
//! - stop: atoll, the manifest's removal -> the reply to its RemovePodSandbox (the file
//!   source's 10 ms wait for a re-create included); the replay, its stop calls;
//! - restart: atoll, the runtime's finishedAt of the exited container -> the reply to the new
//!   one's StartContainer; the replay, the calls of the sync that restarted it (from its
//!   lists), so atoll's part includes noticing the exit;
//! - 10 and 50 at once: the manifests all renamed in -> the last StartContainer's reply; the
//!   replay, that many starts sent at once. Each batch begins once the machine is quiet, and
//!   the CPU this process used in each one's window (user and system: in atoll's, atoll and
//!   the bench waiting on its trace; in the replay's, its client and the agent idle beside
//!   it) is printed under the table: the files a start makes on the host are atoll's system
//!   time, the replay's copies are made before its clock, and on an ext4 without a journal
//!   each inode made within minutes of many deletions costs most of a millisecond.
//!
//! Each figure is the median of the pairs (atoll's less the replay's, and atoll's over the
//! replay's) with its 95% interval (`shared/pairs.rs`), and the CRI calls atoll made in its
//! window beside the replay's. The agent's files and its pods' logs (what a start makes on the
//! host) go beside the test bed, or under ATOLL_BENCH_BASE.
//!
//!   cargo bench --bench replay        (ATOLL_BENCH_ROUNDS=100, ATOLL_BENCH_RESTART_ROUNDS=40,
//!                                      ATOLL_BENCH_BATCH_ROUNDS=60 of 10 pods, and a quarter as many of 50;
//!                                      under `cargo test` a short run)

#[path = "replay/batch.rs"]
mod batch;
#[path = "shared/calls.rs"]
mod calls;
#[path = "../tests/common/mod.rs"]
mod common;
#[path = "shared/cri_proxy.rs"]
mod cri_proxy;
#[path = "shared/pairs.rs"]
mod pairs;

use atoll::cri::api::{CreateContainerResponse, RunPodSandboxRequest, RunPodSandboxResponse};
use atoll::grpc::Channel;
use calls::*;
use cri_proxy::{contains, for_pod, given_ids, method, returned_id, shown, Proxy, Recorded};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A request message sent as recorded.
#[derive(Clone, Debug, Default, PartialEq)]
struct Raw(Vec<u8>);

impl prost::Message for Raw {
    fn encode_raw(&self, buf: &mut impl prost::bytes::BufMut) {
        buf.put_slice(&self.0)
    }
    fn merge_field(
        &mut self,
        tag: u32,
        wire: prost::encoding::WireType,
        buf: &mut impl prost::bytes::Buf,
        ctx: prost::encoding::DecodeContext,
    ) -> Result<(), prost::DecodeError> {
        prost::encoding::skip_field(wire, tag, buf, ctx)
    }
    fn encoded_len(&self) -> usize {
        self.0.len()
    }
    fn clear(&mut self) {
        self.0.clear()
    }
}

/// The calls made for one pod, as recorded, and what a replay needs to make them again.
struct Recording {
    calls: Vec<Recorded>,
    uid: String,
    /// Where atoll keeps the pod's files and logs (named in the requests), copied per replay.
    pod_dir: PathBuf,
    log_dir: String,
    containers: Vec<String>,
}

/// Byte strings to swap in a request (old, new: the same length).
type Subs = Vec<(Vec<u8>, Vec<u8>)>;

/// Makes `calls` again on `ch` with `subs` applied (old bytes -> new, the same length); the
/// IDs the runtime returns are added to `subs`. Calls that overlapped in the recording are
/// sent at once. Returns how long it took and the calls that failed.
async fn replay(ch: &Arc<Channel>, calls: &[Recorded], subs: &mut Subs) -> (Duration, Vec<String>) {
    let t0 = Instant::now();
    let mut failed = Vec::new();
    let mut i = 0;
    while i < calls.len() {
        // A group: the calls that began before every earlier one of it had ended.
        let mut end = i + 1;
        let mut open_until = calls[i].ended;
        while end < calls.len() && calls[end].began < open_until {
            open_until = open_until.max(calls[end].ended);
            end += 1;
        }
        let tasks: Vec<_> = calls[i..end]
            .iter()
            .map(|c| {
                let mut body = c.request.get(5..).unwrap_or_default().to_vec();
                for (old, new) in subs.iter() {
                    replace(&mut body, old, new);
                }
                let (ch, path, name) = (ch.clone(), leak(&c.path), method(c).to_string());
                let recorded = c.response.clone();
                smol::spawn(async move {
                    let (req, limit) = (Raw(body), Some(Duration::from_secs(120)));
                    let got = match name.as_str() {
                        "RunPodSandbox" => ch
                            .unary::<Raw, RunPodSandboxResponse>(path, &req, limit)
                            .await
                            .map(|r| Some(r.pod_sandbox_id)),
                        "CreateContainer" => ch
                            .unary::<Raw, CreateContainerResponse>(path, &req, limit)
                            .await
                            .map(|r| Some(r.container_id)),
                        _ => ch.unary::<Raw, ()>(path, &req, limit).await.map(|()| None),
                    };
                    (name, recorded, got)
                })
            })
            .collect();
        for t in tasks {
            let (name, recorded, got) = t.await;
            match got {
                Ok(new) => {
                    if let (Some(old), Some(new)) = (returned_id(&name, recorded), new) {
                        assert_eq!(old.len(), new.len(), "IDs of one length");
                        subs.push((old.into_bytes(), new.into_bytes()));
                    }
                }
                Err(e) => failed.push(format!("{name}: {e}")),
            }
        }
        i = end;
    }
    (t0.elapsed(), failed)
}

fn replace(body: &mut [u8], old: &[u8], new: &[u8]) {
    let mut at = 0;
    while at + old.len() <= body.len() {
        if &body[at..at + old.len()] == old {
            body[at..at + old.len()].copy_from_slice(new);
            at += old.len();
        } else {
            at += 1;
        }
    }
}

fn leak(s: &str) -> &'static str {
    Box::leak(s.to_string().into_boxed_str())
}

/// A container that exits on SIGTERM (kubelet's 2 s minimum grace is not what is measured).
const STOPS_ON_TERM: &str = "trap \"exit 0\" TERM; sleep 3600 & wait";

fn pod_yaml(name: &str, command: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\nspec:\n  hostNetwork: true\n  terminationGracePeriodSeconds: 0\n  containers:\n  - name: c\n    image: docker.io/library/busybox:1.36\n    command: [sh, -c, '{command}']\n"
    )
}

/// The agent in this process on `dir/manifests`, its state in `dir/state` and its pods' logs
/// in `dir/logs`, the runtime at `endpoint`. Dropping the sender stops it (pods keep running).
fn start_agent(dir: &Path, endpoint: &str) -> InProcess {
    std::fs::create_dir_all(dir.join("manifests")).unwrap();
    let config = dir.join("kubelet.yaml");
    let text = format!(
        "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\nstaticPodPath: {}\npodLogsDir: {}\nhealthzPort: 0\nport: 0\n",
        dir.join("manifests").display(),
        dir.join("logs").display()
    );
    std::fs::write(&config, text).unwrap();
    agent_in_process(&config, endpoint, &dir.join("state"), "bench", &[])
}

/// The first recorded call of `method` that began at or after `from` (waiting for the proxy to
/// have kept it).
fn first_call(proxy: &Proxy, method_name: &str, from: Instant, nth: usize) -> Recorded {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let mut calls: Vec<Recorded> =
            proxy.calls().into_iter().filter(|c| c.began >= from && method(c) == method_name).collect();
        calls.sort_by_key(|c| c.began);
        if let Some(c) = calls.into_iter().nth(nth - 1) {
            return c;
        }
        assert!(Instant::now() < deadline, "the proxy never saw {method_name}");
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// A pod's start as atoll made it through the proxy, its files copied to `keep` before it goes.
fn record_start(proxy: &Proxy, agent_dir: &Path, keep: &Path, name: &str, command: &str) -> Recording {
    let t0 = Instant::now();
    drop_manifest(&agent_dir.join("manifests"), name, &pod_yaml(name, command));
    let run = first_call(proxy, "RunPodSandbox", t0, 1);
    let started = first_call(proxy, "StartContainer", t0, 1);
    let config = atoll::grpc::decode_message::<RunPodSandboxRequest>(run.request.clone(), 1 << 24)
        .expect("a RunPodSandbox request")
        .config
        .expect("a sandbox config");
    let uid = config.metadata.expect("sandbox metadata").uid;
    let all = proxy.calls();
    let ids = given_ids(&all.iter().filter(|c| c.began >= t0).cloned().collect::<Vec<_>>());
    let calls = for_pod(&all, t0, started.began, &uid, &ids);
    let pod_dir = keep.join(name);
    let copied = std::process::Command::new("cp")
        .arg("-a")
        .arg(agent_dir.join("state/pods").join(&uid))
        .arg(&pod_dir)
        .status()
        .expect("cp");
    assert!(copied.success(), "copying the pod's directory");
    Recording { calls, uid, pod_dir, log_dir: config.log_directory, containers: vec!["c".into()] }
}

/// Sets up a replay of `rec` under a new UID (number `n`): its directory and log directory
/// made as atoll had them; the substitutions to send its requests with.
fn prepare(rec: &Recording, state: &Path, n: u64) -> (String, Subs) {
    let keep = rec.uid.chars().count().saturating_sub(12);
    let uid = format!("{}{:012x}", rec.uid.chars().take(keep).collect::<String>(), 0xbe00_0000_0000u64 + n);
    let made = std::process::Command::new("cp")
        .arg("-a")
        .arg(&rec.pod_dir)
        .arg(state.join("pods").join(&uid))
        .status()
        .expect("cp");
    assert!(made.success());
    let log_dir = rec.log_dir.replace(&rec.uid, &uid);
    for c in &rec.containers {
        std::fs::create_dir_all(Path::new(&log_dir).join(c)).unwrap();
    }
    (uid.clone(), vec![(rec.uid.clone().into_bytes(), uid.into_bytes())])
}

/// Stops and removes the sandboxes of pod `uid` (a replay's), not timed.
fn clean(cri: &atoll::cri::Cri, uid: &str) {
    let filter = atoll::cri::api::PodSandboxFilter {
        label_selector: [("io.kubernetes.pod.uid".to_string(), uid.to_string())].into(),
        ..Default::default()
    };
    for sb in smol::block_on(cri.list_pod_sandbox(Some(filter))).unwrap_or_default() {
        let _ = smol::block_on(cri.stop_pod_sandbox(&sb.id));
        let _ = smol::block_on(cri.remove_pod_sandbox(&sb.id));
    }
}

/// What was recorded: a pod's start and stop, and a crashing pod's start and restart.
struct Recorded3 {
    start: Recording,
    stop: Vec<Recorded>,
    crash: Recording,
    restart: Vec<Recorded>,
}

fn record(tb: &common::Testbed, base: &Path, proxy: &Proxy) -> Recorded3 {
    let dir = base.join("recorded");
    let keep = base.join("kept");
    std::fs::create_dir_all(&keep).unwrap();
    let agent = start_agent(&dir, &format!("unix://{}", proxy.socket.display()));
    let cri = tb.cri();
    let manifests = dir.join("manifests");
    // A first pod warms up what a first start pays once (the image looked up, connections).
    let warm = record_start(proxy, &dir, &keep, "warm", STOPS_ON_TERM);
    let start = record_start(proxy, &dir, &keep, "rec", STOPS_ON_TERM);
    wait("rec running", || !running(&cri, "rec-bench").is_empty());
    let mut stop = Vec::new();
    for name in ["warm", "rec"] {
        let t1 = Instant::now();
        std::fs::remove_file(manifests.join(format!("{name}.yaml"))).unwrap();
        let removed = first_call(proxy, "RemovePodSandbox", t1, 1);
        wait("removed", || sandboxes(&cri, &format!("{name}-bench")) == 0);
        if name == "rec" {
            let all = proxy.calls();
            let ids = given_ids(&start.calls);
            stop = for_pod(&all, t1, removed.began, &start.uid, &ids);
        }
    }
    drop(warm);
    // The crash: the calls of the sync that restarted it, from its lists to its StartContainer.
    let t0 = Instant::now();
    let crash = record_start(proxy, &dir, &keep, "crash", "sleep 1; exit 3");
    let again = first_call(proxy, "StartContainer", t0, 2);
    let created = first_call(proxy, "CreateContainer", t0, 2);
    let all = proxy.calls();
    let ids = given_ids(&all.iter().filter(|c| c.began >= t0).cloned().collect::<Vec<_>>());
    // The restarting sync's two lists, sent at once: from the one that went first.
    let last_list = |name: &str| {
        all.iter()
            .filter(|c| method(c) == name && c.began < created.began && contains(&c.request, crash.uid.as_bytes()))
            .map(|c| c.began)
            .max()
            .expect("the restarting sync's lists")
    };
    let (pods, containers) = (last_list("ListPodSandbox"), last_list("ListContainers"));
    let apart = pods.max(containers).duration_since(pods.min(containers));
    assert!(apart < Duration::from_millis(50), "the restarting sync's lists, {apart:?} apart, are one sync's");
    let listed = pods.min(containers);
    let restart = for_pod(&all, listed, again.began, &crash.uid, &ids);
    std::fs::remove_file(manifests.join("crash.yaml")).unwrap();
    wait("crash gone", || sandboxes(&cri, "crash-bench") == 0);
    drop(agent);
    Recorded3 { start, stop, crash, restart }
}

/// The file system `dir` is on, by name where known.
fn file_system(dir: &Path) -> String {
    match rustix::fs::statfs(dir).map(|s| s.f_type as u32) {
        Ok(0xEF53) if journaled(dir) => "ext4 with a journal".into(),
        Ok(0xEF53) => "ext2/3/4 without a journal".into(),
        Ok(0x0102_1994) => "tmpfs".into(),
        Ok(0x5846_5342) => "xfs".into(),
        Ok(0x9123_683E) => "btrfs".into(),
        Ok(t) => format!("a file system of type {t:#x}"),
        Err(e) => format!("an unknown file system ({e})"),
    }
}

/// Whether `dir`'s file system has a journal: its device has one in /proc/fs/jbd2 (without
/// one, ext4 makes each inode past the recently deleted ones, which it reads to skip).
fn journaled(dir: &Path) -> bool {
    let dir = std::fs::canonicalize(dir).unwrap_or_else(|_| dir.to_path_buf());
    let mounts = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    let device = mounts
        .lines()
        .filter_map(|l| Some((Path::new(l.split(' ').nth(4)?), l.split(" - ").nth(1)?.split(' ').nth(1)?)))
        .filter(|(at, _)| dir.starts_with(at))
        .max_by_key(|(at, _)| at.components().count())
        .map(|(_, source)| source.trim_start_matches("/dev/").to_string());
    let mut journals = std::fs::read_dir("/proc/fs/jbd2").into_iter().flatten().flatten();
    device.is_some_and(|d| journals.any(|j| j.file_name().to_string_lossy().starts_with(&format!("{d}-"))))
}

/// What one `mkdir` in `dir`'s file system costs now (the median of 200): a start makes about
/// seven inodes on the host (the pod's directory, its hosts file, termination-message file, log
/// directories), which the replay has made before its clock starts.
fn mkdir_us(dir: &Path) -> f64 {
    let at = dir.join("mkdir");
    std::fs::create_dir_all(&at).unwrap();
    let mut took: Vec<Duration> = (0..200)
        .map(|i| {
            let t0 = Instant::now();
            std::fs::create_dir(at.join(i.to_string())).unwrap();
            t0.elapsed()
        })
        .collect();
    took.sort();
    let _ = std::fs::remove_dir_all(&at);
    took[took.len() / 2].as_secs_f64() * 1e6
}

fn env_or(name: &str, default: u64) -> u64 {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

fn main() {
    let bench = std::env::args().any(|a| a == "--bench");
    // A start's pairs scatter by about 15 ms: 100 of them give its median within about ±4 ms.
    let rounds = env_or("ATOLL_BENCH_ROUNDS", if bench { 100 } else { 2 }) as usize;
    // The restart's rounds each wait a second for the container's exit.
    let restart_rounds = env_or("ATOLL_BENCH_RESTART_ROUNDS", if bench { 40 } else { 2 }) as usize;
    // (pods at once, rounds): a batch is one sample, so it is taken several times. Thirty
    // rounds of 10 gave the ratio's median within about ±0.02, as much as the gap to its target.
    let batch_rounds = env_or("ATOLL_BENCH_BATCH_ROUNDS", if bench { 60 } else { 2 }) as usize;
    let batches = if bench { vec![(10, batch_rounds), (50, batch_rounds / 4)] } else { vec![(3, batch_rounds)] };
    let tb = common::testbed();
    let cri = tb.cri();
    // The agent's files and its pods' logs (the host files a start makes; the replay's are
    // copies made before its clock starts): beside the test bed, or where ATOLL_BENCH_BASE says.
    let base = std::env::var_os("ATOLL_BENCH_BASE")
        .map_or_else(std::env::temp_dir, PathBuf::from)
        .join(common::unique("atoll-bench-replay"));
    std::fs::create_dir_all(&base).unwrap();
    log::set_logger(&CALLS).expect("the only logger in the bench");
    log::set_max_level(log::LevelFilter::Trace);
    let version =
        smol::block_on(cri.version()).map(|v| format!("{} {}", v.runtime_name, v.runtime_version)).unwrap_or_default();
    let upstream = cri.socket().to_path_buf();
    let proxy = Proxy::start(&upstream, &base.join("cri.sock"));
    let rec = record(tb, &base, &proxy);
    let names = |calls: &[Recorded]| calls.iter().map(shown).collect::<Vec<_>>().join(", ");
    println!("atoll's own CRI requests for one pod, as recorded ({version}):");
    println!("  start: {}", names(&rec.start.calls));
    println!("  stop: {}", names(&rec.stop));
    println!("  restart: {}", names(&rec.restart));

    let state = base.join("recorded/state");
    let ch = Arc::new(Channel::new(upstream));
    let direct = base.join("direct");
    let agent = start_agent(&direct, &tb.endpoint.to_string());
    let mut failed: Vec<String> = Vec::new();
    let mut rows = Vec::new();
    let rig = Rig { rec, ch, state, manifests: direct.join("manifests"), cri: tb.cri() };
    if rounds > 0 {
        rows.extend(start_and_stop(&rig, rounds, &mut failed));
    }
    if restart_rounds > 0 {
        rows.push(restart(&rig, restart_rounds, &mut failed));
    }
    let mut notes = Vec::new();
    for &(n, batch_rounds) in batches.iter().filter(|(_, rounds)| *rounds > 0) {
        let (row, note) = batch::batch(&rig, n, batch_rounds, &mut failed);
        rows.push(row);
        notes.push(note);
    }
    drop(agent);
    log::set_max_level(log::LevelFilter::Off);
    println!();
    println!(
        "atoll vs the replay of its own CRI requests ({version}, private test bed on {}, the pods' files and logs on {}), {rounds} rounds ({restart_rounds} of the restart):",
        file_system(&std::env::temp_dir()),
        file_system(&base)
    );
    println!("{}", pairs::HEAD);
    for r in &rows {
        println!("{r}");
    }
    failed.sort();
    failed.dedup();
    println!(
        "replayed calls the runtime refused: {}",
        if failed.is_empty() { "none".into() } else { failed.join("; ") }
    );
    for note in &notes {
        println!("{note}");
    }
    println!("a directory made beside the pods' files after the run: {:.0} µs (median of 200)", mkdir_us(&base));
    println!();
    let _ = std::fs::remove_dir_all(&base);
}

/// What every measurement takes: the recordings, the replay's connection to the runtime,
/// where the recorded pods' directories are made again, and the agent's manifests.
struct Rig {
    rec: Recorded3,
    ch: Arc<Channel>,
    state: PathBuf,
    manifests: PathBuf,
    cri: atoll::cri::Cri,
}

/// One pod's start and stop, `rounds` times, atoll and the replay taking turns at going first.
fn start_and_stop(rig: &Rig, rounds: usize, failed: &mut Vec<String>) -> Vec<String> {
    let Rig { rec, ch, state, manifests, cri } = rig;
    let (mut start, mut stop, mut rstart, mut rstop) = (vec![], vec![], vec![], vec![]);
    // Not counted: the agent's first pod, which meets its start-up (its first relist, the
    // runtime's version) on the way.
    start_then_stop(cri, manifests, "warm", &pod_yaml("warm", STOPS_ON_TERM));
    for i in 0..rounds {
        let mut by_atoll = || {
            let name = format!("s{i}");
            let (up, down) = start_then_stop(cri, manifests, &name, &pod_yaml(&name, STOPS_ON_TERM));
            start.push(up);
            stop.push(down);
        };
        if i % 2 == 0 {
            by_atoll();
        }
        let (uid, mut subs) = prepare(&rec.start, state, i as u64);
        let (took, f) = smol::block_on(replay(ch, &rec.start.calls, &mut subs));
        rstart.push(took);
        failed.extend(f);
        let (took, f) = smol::block_on(replay(ch, &rec.stop, &mut subs));
        rstop.push(took);
        failed.extend(f);
        clean(cri, &uid);
        if i % 2 == 1 {
            by_atoll();
        }
    }
    vec![
        pairs::row("pod start, host network", &start, &rstart, rec.start.calls.len()),
        pairs::row("stop (atoll's includes the 10 ms re-create wait)", &stop, &rstop, rec.stop.len()),
    ]
}

/// A crashed container's restart, `rounds` times, atoll and the replay taking turns at going
/// first.
fn restart(rig: &Rig, rounds: usize, failed: &mut Vec<String>) -> String {
    let Rig { rec, ch, state, manifests, cri } = rig;
    let (mut atoll, mut replayed) = (vec![], vec![]);
    for i in 0..rounds {
        let mut by_atoll = || {
            let name = format!("crash{i}");
            atoll.push(crash_to_restart(cri, manifests, &name, &pod_yaml(&name, "sleep 1; exit 3")));
        };
        if i % 2 == 0 {
            by_atoll();
        }
        let (uid, mut subs) = prepare(&rec.crash, state, 1000 + i as u64);
        let (_, f) = smol::block_on(replay(ch, &rec.crash.calls, &mut subs));
        failed.extend(f);
        let (took, f) = smol::block_on(replay(ch, &rec.restart, &mut subs));
        replayed.push(took);
        failed.extend(f);
        clean(cri, &uid);
        if i % 2 == 1 {
            by_atoll();
        }
    }
    let what = format!("crash -> restarted (atoll's includes noticing the exit; {rounds} rounds)");
    pairs::row(&what, &atoll, &replayed, rig.rec.restart.len())
}
