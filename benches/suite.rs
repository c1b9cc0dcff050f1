//! atoll against the raw CRI floor on the private containerd test bed. Prints a table of
//! figures; asserts nothing about time.
//!
//! 1. pod start: manifest written (atomic rename) -> the runtime's reply to atoll's
//!    StartContainer, host network and bridge, next to the same CRI calls made directly (the
//!    floor, ending with its StartContainer's reply);
//! 2. teardown: manifest removed -> the reply to atoll's RemovePodSandbox (grace 0), next to
//!    its floor;
//! 3. crash-to-restart: the runtime's finishedAt of the exited container -> the reply to the
//!    StartContainer of the new one (first restart, no back-off);
//! 4. batch: 10 and 50 manifests at once -> the last StartContainer's reply, next to the same
//!    calls made concurrently;
//!
//! The end of each measurement is taken from atoll's own trace of its CRI calls (target
//! `atoll::cri::call`, logged as each reply arrives), then checked through CRI. The bench does
//! not poll the runtime while atoll works: a ListContainers every few milliseconds (one per pod
//! in a batch) would load the runtime atoll is waiting on, which the floor does not pay.
//! 5. where a start's time goes: one pod start with every CRI call atoll makes, from the
//!    manifest's rename (atoll's own trace of its calls);
//! 6. footprint: the `atoll` binary's RSS and CPU (all its threads' scheduler time, from
//!    /proc) with no pods, 50 pods without probes, and 50 pods with an HTTP liveness and a
//!    readiness probe each every 10 s, over a window.
//!
//!   cargo bench --bench suite        (ATOLL_BENCH_ROUNDS=20, ATOLL_BENCH_WINDOW=60 by default;
//!                                     under `cargo test` a short smoke run)
//!   ATOLL_BENCH_ONLY=footprint ATOLL_BIN=target/cross/atoll-x86_64-unknown-linux-musl \
//!     cargo bench --bench suite      (part 6 only, with a cross-built binary)

#[path = "shared/calls.rs"]
mod calls;
#[path = "../tests/common/mod.rs"]
mod common;

use atoll::cri::api::{ContainerConfig, ContainerMetadata, ImageSpec};
use atoll::cri::Cri;
use calls::*;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// One pod start with atoll's CRI calls on a timeline from the manifest's rename.
fn start_timeline(cri: &Cri, manifests: &Path) -> Vec<String> {
    let name = "timeline";
    let staged = stage(manifests, name, &pod_yaml(name, true, STOPS_ON_TERM));
    let from = mark();
    let t0 = Instant::now();
    rename_in(staged);
    let started = nth_call(from, "StartContainer", 1);
    wait("start", || !running(cri, &format!("{name}-bench")).is_empty());
    let calls: Vec<(Instant, String)> =
        CALLS.calls.lock().unwrap()[from..].iter().filter(|(at, _)| *at <= started).cloned().collect();
    let mut lines = vec!["| from the rename | CRI call | took |".to_string(), "|---|---|---|".to_string()];
    for (ended, text) in calls {
        let mut parts = text.split(' ');
        let (Some(call), Some(_), Some(us)) = (parts.next(), parts.next(), parts.next()) else { continue };
        let took = Duration::from_micros(us.parse().unwrap_or(0));
        let started = ended.saturating_duration_since(t0).saturating_sub(took);
        if ended < t0 {
            continue;
        }
        lines.push(format!("| {:.1} ms | {call} | {:.1} ms |", started.as_secs_f64() * 1e3, took.as_secs_f64() * 1e3));
    }
    std::fs::remove_file(manifests.join(format!("{name}.yaml"))).unwrap();
    wait("timeline pod gone", || sandboxes(cri, &format!("{name}-bench")) == 0);
    lines
}

/// A container that exits on SIGTERM: teardown then measures atoll, not kubelet's 2 s minimum
/// grace (which atoll keeps, and which a PID 1 that ignores SIGTERM would wait out).
const STOPS_ON_TERM: &str = "trap \"exit 0\" TERM; sleep 3600 & wait";

fn pod_yaml(name: &str, host: bool, command: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\nspec:\n  hostNetwork: {host}\n  terminationGracePeriodSeconds: 0\n  containers:\n  - name: c\n    image: docker.io/library/busybox:1.36\n    command: [sh, -c, '{command}']\n"
    )
}

/// The agent in this process: `atoll run`'s own runner, on the manifests directory. Dropping
/// the sender stops it (pods keep running, as under kubelet).
fn start_agent(tb: &common::Testbed, manifests: &Path) -> InProcess {
    let dir = manifests.parent().expect("manifests in a bench dir").join("agent");
    std::fs::create_dir_all(&dir).unwrap();
    let config = dir.join("kubelet.yaml");
    let text = format!(
        "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\nstaticPodPath: {}\npodLogsDir: {}\nhealthzPort: 0\n",
        manifests.display(),
        tb.logs.display()
    );
    std::fs::write(&config, text).unwrap();
    agent_in_process(&config, &tb.endpoint.to_string(), &dir.join("state"), "bench", &[])
}

/// The floor of a start: RunPodSandbox, its status, ImageStatus, CreateContainer,
/// StartContainer. Returns the sandbox's and container's IDs.
async fn floor_start(cri: &Cri, tb: &common::Testbed, name: &str, host: bool) -> (String, String) {
    let config = common::sandbox_config(tb, name, host);
    let sb = cri.run_pod_sandbox(config.clone(), "").await.unwrap();
    cri.pod_sandbox_status(&sb, false).await.unwrap();
    let _ = cri.image_status(&tb.busybox).await.unwrap();
    std::fs::create_dir_all(Path::new(&config.log_directory).join("c")).unwrap();
    let c = ContainerConfig {
        metadata: Some(ContainerMetadata { name: "c".into(), attempt: 0 }),
        image: Some(ImageSpec { image: tb.busybox.clone(), ..Default::default() }),
        command: vec!["sleep".into(), "3600".into()],
        log_path: "c/0.log".into(),
        ..Default::default()
    };
    let id = cri.create_container(&sb, c, config).await.unwrap();
    cri.start_container(&id).await.unwrap();
    (sb, id)
}

/// The floor of a teardown with grace 0: StopContainer, StopPodSandbox, RemovePodSandbox.
async fn floor_teardown(cri: &Cri, sb: &str, id: &str) {
    cri.stop_container(id, Duration::ZERO).await.unwrap();
    cri.stop_pod_sandbox(sb).await.unwrap();
    cri.remove_pod_sandbox(sb).await.unwrap();
}

/// A boxed future, for running a batch of calls concurrently.
type Fut<'a, T> = std::pin::Pin<Box<dyn std::future::Future<Output = T> + 'a>>;

/// Awaits all futures concurrently.
async fn join_all<T>(futures: Vec<Fut<'_, T>>) -> Vec<T> {
    let mut slots: Vec<Option<T>> = futures.iter().map(|_| None).collect();
    let mut pending: Vec<(usize, Fut<'_, T>)> = futures.into_iter().enumerate().collect();
    std::future::poll_fn(|cx| {
        pending.retain_mut(|(i, f)| match f.as_mut().poll(cx) {
            std::task::Poll::Ready(v) => {
                slots[*i] = Some(v);
                false
            }
            std::task::Poll::Pending => true,
        });
        if pending.is_empty() {
            std::task::Poll::Ready(())
        } else {
            std::task::Poll::Pending
        }
    })
    .await;
    slots.into_iter().map(|s| s.expect("every future finished")).collect()
}

struct Row {
    what: String,
    atoll: String,
    floor: String,
    ratio: String,
}

fn row(what: &str, agent: &[Duration], floor: Option<&[Duration]>) -> Row {
    let (am, a90) = (pct(agent, 50), pct(agent, 90));
    let (floor_text, ratio) = match floor {
        Some(f) => {
            let (fm, f90) = (pct(f, 50), pct(f, 90));
            (format!("{} / {}", ms(fm), ms(f90)), format!("{:.2}", am.as_secs_f64() / fm.as_secs_f64()))
        }
        None => ("-".into(), "-".into()),
    };
    Row { what: what.into(), atoll: format!("{} / {}", ms(am), ms(a90)), floor: floor_text, ratio }
}

/// /proc/PID: (CPU seconds of all its threads, from the scheduler's nanosecond counters; RSS
/// KiB).
fn usage(pid: u32) -> (f64, u64) {
    let mut ns: u64 = 0;
    if let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) {
        for t in tasks.flatten() {
            let stat = std::fs::read_to_string(t.path().join("schedstat")).unwrap_or_default();
            ns += stat.split_whitespace().next().and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
        }
    }
    let rss = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines().find(|l| l.starts_with("VmRSS:")).and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
        })
        .unwrap_or(0);
    (ns as f64 / 1e9, rss)
}

/// Where a process's resident memory is, from /proc/PID/smaps, in KiB: (mapped files, i.e. the
/// binary's pages touched; the heap, i.e. the allocator's brk area; anonymous mappings: thread
/// stacks, large allocations and the allocator's mmapped groups; the rest: the main stack,
/// vdso).
fn rss_parts(pid: u32) -> [u64; 4] {
    let mut parts = [0u64; 4];
    let mut slot = 3;
    for line in std::fs::read_to_string(format!("/proc/{pid}/smaps")).unwrap_or_default().lines() {
        let fields: Vec<&str> = line.split_whitespace().collect();
        if fields.first().is_some_and(|f| f.contains('-') && f.chars().all(|c| c.is_ascii_hexdigit() || c == '-')) {
            slot = match fields.get(5) {
                Some(p) if p.starts_with('/') => 0,
                Some(&"[heap]") => 1,
                None => 2,
                Some(_) => 3,
            };
        } else if fields.first() == Some(&"Rss:") {
            parts[slot] += fields.get(1).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
        }
    }
    parts
}

/// CPU seconds of the runtime: containerd and its shims (every process whose name starts with
/// `containerd`; runc's short runs are not seen).
fn runtime_cpu() -> f64 {
    let Ok(procs) = std::fs::read_dir("/proc") else { return 0.0 };
    procs
        .flatten()
        .filter_map(|p| p.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| std::fs::read_to_string(format!("/proc/{pid}/comm")).is_ok_and(|c| c.starts_with("containerd")))
        .map(|pid| usage(pid).0)
        .sum()
}

/// The CRI calls of the trace after `from` that ended by `until`: by method, their count and
/// durations.
fn calls_between(from: usize, until: Instant) -> BTreeMap<String, Vec<Duration>> {
    let mut out: BTreeMap<String, Vec<Duration>> = BTreeMap::new();
    for (_, text) in CALLS.calls.lock().unwrap()[from..].iter().filter(|(at, _)| *at <= until) {
        let mut parts = text.split(' ');
        if let (Some(call), Some(_), Some(us)) = (parts.next(), parts.next(), parts.next()) {
            out.entry(call.to_string()).or_default().push(Duration::from_micros(us.parse().unwrap_or(0)));
        }
    }
    out
}

/// One batch, atoll's next to the floor's: wall time, CPU of the client (the agent, or the
/// floor's minimal client) and of the runtime, and every CRI method's calls (count, median and
/// p90 of how long each took).
type BatchRun = (Duration, (f64, f64), BTreeMap<String, Vec<Duration>>);

fn breakdown(n: usize, atoll: BatchRun, floor: BatchRun) -> String {
    let mut lines = vec![
        format!("{n} pods at once"),
        "| | atoll | CRI floor |".to_string(),
        "|---|---|---|".to_string(),
        format!("| until the last StartContainer's reply | {} | {} |", ms(atoll.0), ms(floor.0)),
        format!(
            "| CPU of the client (atoll / the floor's) | {:.0} ms | {:.0} ms |",
            atoll.1 .0 * 1e3,
            floor.1 .0 * 1e3
        ),
        format!("| CPU of containerd and its shims | {:.0} ms | {:.0} ms |", atoll.1 .1 * 1e3, floor.1 .1 * 1e3),
    ];
    let methods: BTreeSet<&String> = atoll.2.keys().chain(floor.2.keys()).collect();
    let shown = |v: Option<&Vec<Duration>>| match v {
        Some(v) if !v.is_empty() => {
            let ms1 = |d: Duration| format!("{:.1} ms", d.as_secs_f64() * 1e3);
            format!("{} calls, {} / {}", v.len(), ms1(pct(v, 50)), ms1(pct(v, 90)))
        }
        _ => "-".to_string(),
    };
    for m in methods {
        lines.push(format!("| {m} (median / p90 each) | {} | {} |", shown(atoll.2.get(m)), shown(floor.2.get(m))));
    }
    lines.join("\n")
}

/// The `atoll` binary with `pods` pods, each with an HTTP liveness and readiness probe every
/// `probe_period` seconds when given: (RSS KiB at the end, CPU % of one core over the window,
/// probe attempts per second).
fn footprint(tb: &common::Testbed, base: &Path, pods: usize, probe_period: Option<u32>, window: Duration) -> Footprint {
    let dir = base.join(format!("footprint-{pods}-{}", probe_period.unwrap_or(0)));
    let manifests = dir.join("manifests");
    std::fs::create_dir_all(&manifests).unwrap();
    let ports: Vec<u16> = (0..pods).map(|_| common::free_port()).collect();
    for (i, port) in ports.iter().enumerate() {
        let probes = match probe_period {
            Some(p) => format!(
                "    livenessProbe: {{httpGet: {{host: 127.0.0.1, port: {port}, path: /index.html}}, periodSeconds: {p}}}\n    readinessProbe: {{httpGet: {{host: 127.0.0.1, port: {port}, path: /index.html}}, periodSeconds: {p}}}\n"
            ),
            None => String::new(),
        };
        let yaml = format!(
            "apiVersion: v1\nkind: Pod\nmetadata:\n  name: fp{i}\nspec:\n  hostNetwork: true\n  terminationGracePeriodSeconds: 0\n  containers:\n  - name: web\n    image: docker.io/library/busybox:1.36\n    command: [httpd, -f, -p, '127.0.0.1:{port}', -h, /var/www]\n{probes}"
        );
        std::fs::write(manifests.join(format!("fp{i}.yaml")), yaml).unwrap();
    }
    let config = common::kubelet_config(tb, &dir, "");
    let mut child = common::atoll_run(tb, &dir, &config, &dir.join("api.sock"), "bench").spawn().expect("start atoll");
    let cri = tb.cri();
    wait("the footprint pods running", || (0..pods).all(|i| !running(&cri, &format!("fp{i}-bench")).is_empty()));
    std::thread::sleep(Duration::from_secs(12).min(window)); // let start-up work settle (a relist period)
                                                             // Metrics are read outside the window: a scrape makes CRI calls of its own.
    let before = counters(&dir);
    let (cpu0, _) = usage(child.id());
    std::thread::sleep(window);
    let (cpu1, rss) = usage(child.id());
    let parts = rss_parts(child.id());
    let after = counters(&dir);
    for i in 0..pods {
        std::fs::remove_file(manifests.join(format!("fp{i}.yaml"))).unwrap();
    }
    wait("the footprint pods gone", || (0..pods).all(|i| sandboxes(&cri, &format!("fp{i}-bench")) == 0));
    let _ = child.kill();
    let _ = child.wait();
    let secs = window.as_secs_f64();
    let per = |i: usize| (after[i] - before[i]).max(0.0) / secs;
    Footprint { rss, parts, cpu: 100.0 * (cpu1 - cpu0) / secs, probes: per(0), cri_per_min: per(1) * 60.0 }
}

/// What the agent did and cost over a footprint window.
struct Footprint {
    /// KiB at the end.
    rss: u64,
    /// KiB at the end: the binary, the heap, anonymous mappings, the rest (`rss_parts`).
    parts: [u64; 4],
    /// % of one core.
    cpu: f64,
    /// Probe attempts per second.
    probes: f64,
    /// CRI calls per minute.
    cri_per_min: f64,
}

/// Probe attempts and CRI calls so far, from the agent's own /metrics on its socket.
fn counters(dir: &Path) -> [f64; 2] {
    use std::io::{Read, Write};
    let Ok(mut s) = std::os::unix::net::UnixStream::connect(dir.join("api.sock")) else { return [0.0; 2] };
    let _ = s.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n");
    let mut text = String::new();
    let _ = s.read_to_string(&mut text);
    let sum = |prefix: &str| -> f64 {
        text.lines().filter(|l| l.starts_with(prefix)).filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok()).sum()
    };
    [sum("atoll_prober_probe_total{"), sum("atoll_cri_requests_total{")]
}

fn main() {
    let bench = std::env::args().any(|a| a == "--bench");
    let env = |k: &str, d: u64| std::env::var(k).ok().and_then(|v| v.parse().ok()).unwrap_or(d);
    let rounds = env("ATOLL_BENCH_ROUNDS", if bench { 20 } else { 2 }) as usize;
    let window = Duration::from_secs(env("ATOLL_BENCH_WINDOW", if bench { 60 } else { 3 }));
    let batches: Vec<usize> = if bench { vec![10, 50] } else { vec![3] };
    let footprints: Vec<(&str, usize, Option<u32>)> = if bench {
        vec![("no pods", 0, None), ("50 pods, no probes", 50, None), ("50 pods, 100 probes every 10 s", 50, Some(10))]
    } else {
        vec![("no pods", 0, None), ("2 pods, 4 probes every 1 s", 2, Some(1))]
    };

    let tb = common::testbed();
    let cri = tb.cri();
    let base: PathBuf = std::env::temp_dir().join(format!("atoll-bench-suite-{}", std::process::id()));
    let manifests = base.join("manifests");
    std::fs::create_dir_all(&manifests).unwrap();
    log::set_logger(&CALLS).expect("the only logger in the bench");
    log::set_max_level(log::LevelFilter::Trace);
    let version =
        smol::block_on(cri.version()).map(|v| format!("{} {}", v.runtime_name, v.runtime_version)).unwrap_or_default();
    // ATOLL_BENCH_ONLY=footprint: only part 6 (e.g. for a cross-built binary in ATOLL_BIN).
    if std::env::var("ATOLL_BENCH_ONLY").as_deref() != Ok("footprint") {
        latency(tb, &manifests, rounds, &batches, &version);
    }

    // 6: footprint of the real binary.
    println!();
    println!("footprint of `atoll run` ({version}), over {window:?}:");
    println!(
        "| pods | RSS | of which binary / heap / anonymous | CPU (% of one core) | probe attempts/s | CRI calls/min |"
    );
    println!("|---|---|---|---|---|---|");
    for (what, n, period) in &footprints {
        let f = footprint(tb, &base, *n, *period, window);
        println!(
            "| {what} | {:.1} MiB | {:.1} / {:.1} / {:.1} MiB | {:.3}% | {:.1} | {:.0} |",
            f.rss as f64 / 1024.0,
            f.parts[0] as f64 / 1024.0,
            f.parts[1] as f64 / 1024.0,
            f.parts[2] as f64 / 1024.0,
            f.cpu,
            f.probes,
            f.cri_per_min
        );
    }
    let _ = std::fs::remove_dir_all(&base);
}

/// Parts 1 to 5: start, teardown, crash-to-restart, batches and a start's timeline, with their tables.
fn latency(tb: &common::Testbed, manifests: &Path, rounds: usize, batches: &[usize], version: &str) {
    let cri = tb.cri();
    let agent = start_agent(tb, manifests);
    let mut rows = Vec::new();

    // 1 and 2: start and teardown, host network and bridge.
    for host in [true, false] {
        let (mut start, mut stop, mut fstart, mut fstop) = (vec![], vec![], vec![], vec![]);
        for i in 0..rounds {
            let name = format!("s{}{i}", if host { "h" } else { "b" });
            let (up, down) = start_then_stop(&cri, manifests, &name, &pod_yaml(&name, host, STOPS_ON_TERM));
            start.push(up.took);
            stop.push(down.took);

            let fname = format!("f{name}");
            let t0 = Instant::now();
            let (sb, id) = smol::block_on(floor_start(&cri, tb, &fname, host));
            fstart.push(t0.elapsed());
            let t0 = Instant::now();
            smol::block_on(floor_teardown(&cri, &sb, &id));
            fstop.push(t0.elapsed());
        }
        let net = if host { "host network" } else { "bridge (CNI)" };
        rows.push(row(&format!("pod start, {net}"), &start, Some(&fstart)));
        rows.push(row(&format!("teardown, {net}"), &stop, Some(&fstop)));
    }

    // 3: crash-to-restart, from the runtime's finishedAt to the new instance started.
    let mut restart = vec![];
    for i in 0..rounds {
        let name = format!("crash{i}");
        restart.push(crash_to_restart(&cri, manifests, &name, &pod_yaml(&name, true, "sleep 1; exit 3")).took);
    }
    rows.push(row("crash -> restarted (first restart)", &restart, None));

    // 4: batches, next to the same calls made concurrently.
    let mut breakdowns = Vec::new();
    for n in batches {
        let name = |i: usize| format!("b{n}x{i}");
        let staged: Vec<_> =
            (0..*n).map(|i| stage(manifests, &name(i), &pod_yaml(&name(i), true, STOPS_ON_TERM))).collect();
        let (from, t0) = (mark(), Instant::now());
        let cost0 = (usage(std::process::id()).0, runtime_cpu());
        staged.into_iter().for_each(rename_in);
        let ended = nth_call(from, "StartContainer", *n);
        let batch = ended - t0;
        let cost = (usage(std::process::id()).0 - cost0.0, runtime_cpu() - cost0.1);
        let calls = calls_between(from, ended);
        wait("the batch running", || (0..*n).all(|i| !running(&cri, &format!("b{n}x{i}-bench")).is_empty()));
        for i in 0..*n {
            std::fs::remove_file(manifests.join(format!("b{n}x{i}.yaml"))).unwrap();
        }
        wait("the batch gone", || (0..*n).all(|i| sandboxes(&cri, &format!("b{n}x{i}-bench")) == 0));
        let (ffrom, t0) = (mark(), Instant::now());
        let fcost0 = (usage(std::process::id()).0, runtime_cpu());
        let names: Vec<String> = (0..*n).map(|i| format!("fb{n}x{i}")).collect();
        let starts: Vec<Fut<'_, (String, String)>> =
            names.iter().map(|nm| Box::pin(floor_start(&cri, tb, nm, true)) as Fut<'_, (String, String)>).collect();
        let made = smol::block_on(join_all(starts));
        let floor = t0.elapsed();
        let fcost = (usage(std::process::id()).0 - fcost0.0, runtime_cpu() - fcost0.1);
        breakdowns.push(breakdown(*n, (batch, cost, calls), (floor, fcost, calls_between(ffrom, Instant::now()))));
        let stops: Vec<Fut<'_, ()>> =
            made.iter().map(|(sb, id)| Box::pin(floor_teardown(&cri, sb, id)) as Fut<'_, ()>).collect();
        smol::block_on(join_all(stops));
        rows.push(row(&format!("batch of {n} pods -> all RUNNING"), &[batch], Some(&[floor])));
    }
    let timeline = start_timeline(&cri, manifests);
    drop(agent);
    log::set_max_level(log::LevelFilter::Off);

    println!("atoll vs the CRI floor ({version}, private test bed), {rounds} rounds, median / p90:");
    println!("| measurement | atoll | CRI floor | ratio |");
    println!("|---|---|---|---|");
    for r in &rows {
        println!("| {} | {} | {} | {} |", r.what, r.atoll, r.floor, r.ratio);
    }

    for b in &breakdowns {
        println!();
        println!("where a batch's time goes ({version}): {b}");
    }

    println!();
    println!("where a start's time goes ({version}, host network): atoll's CRI calls from the manifest's rename:");
    for l in &timeline {
        println!("{l}");
    }
}
