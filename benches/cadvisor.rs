//! `/metrics/cadvisor`'s cost to the agent, on the private containerd test bed: atoll with 50
//! small pods (one busybox container each, each pod with its own network namespace), then
//! 1. the agent's CPU per scrape over the local API socket (utime+stime from /proc/PID/stat
//!    before and after N scrapes, divided; and its threads' scheduler time, in ns) and the
//!    median wall time of a scrape;
//! 2. the floor: the same cgroup and proc files (every cgroup the scrape reports by its `id`
//!    label, each v1 controller's directory or the v2 one; each sandbox's `cgroup.procs` and
//!    its first process's `net/dev`; the root's, `/proc/stat`, `/proc/meminfo`, the machine's
//!    identity, the block devices' `uevent`) read by a minimal loop in this process, its CPU
//!    per round from /proc/thread-self (ticks and scheduler ns);
//! 3. the local API's `/metrics` (which asks the runtime for its stats too) as a second
//!    reference;
//! 4. the agent's RSS before the scrapes (which follows the few that waited for the pods and
//!    found every cgroup), after them (and the `/metrics` ones), and after a window of one
//!    scrape every 15 s.
//!
//! Prints a table; asserts nothing about the figures. Under `cargo test` a smoke run (3 pods,
//! 5 scrapes, a 2 s window).
//!
//!   cargo bench --bench cadvisor

#[path = "../tests/common/mod.rs"]
mod common;

use common::median;
use std::collections::BTreeSet;
use std::io::{Read, Write};
use std::path::Path;
use std::time::{Duration, Instant};

/// GET `path` on the agent's local API socket: the body (asserting a 200).
fn get(socket: &Path, path: &str) -> String {
    let mut s = std::os::unix::net::UnixStream::connect(socket).expect("the local API socket");
    s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    write!(s, "GET {path} HTTP/1.1\r\nHost: atoll\r\nConnection: close\r\n\r\n").unwrap();
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).expect("the answer");
    let text = String::from_utf8(raw).expect("UTF-8");
    let (head, body) = text.split_once("\r\n\r\n").expect("an HTTP answer");
    assert!(head.starts_with("HTTP/1.1 200"), "{path}: {head}");
    assert!(!head.to_ascii_lowercase().contains("chunked"), "{path}: a chunked body: {head}");
    body.to_string()
}

/// A label's value in a sample line.
fn label<'a>(line: &'a str, name: &str) -> Option<&'a str> {
    let start = line.find(&format!("{name}=\""))? + name.len() + 2;
    let rest = line.get(start..)?;
    rest.get(..rest.find('"')?)
}

/// The series of one scrape: (containers, sandboxes), each by its `id` label (the root left
/// out).
fn entries(text: &str) -> (BTreeSet<String>, BTreeSet<String>) {
    let (mut containers, mut sandboxes) = (BTreeSet::new(), BTreeSet::new());
    for line in text.lines().filter(|l| l.starts_with("container_last_seen{")) {
        let (Some(c), Some(id)) = (label(line, "container"), label(line, "id")) else { continue };
        match (c, id) {
            (_, "/") | (_, "") => {}
            ("", id) => drop(sandboxes.insert(id.to_string())),
            (_, id) => drop(containers.insert(id.to_string())),
        }
    }
    (containers, sandboxes)
}

/// A process's (or thread's, `/proc/thread-self`) utime+stime from its `stat`, in ms (10 ms
/// ticks).
fn ticks_ms(proc_dir: &str) -> u64 {
    let stat = std::fs::read_to_string(format!("{proc_dir}/stat")).unwrap_or_default();
    let after = stat.rsplit_once(')').map_or("", |(_, a)| a);
    let f: Vec<u64> = after.split_whitespace().map(|v| v.parse().unwrap_or(0)).collect();
    (f.get(11).unwrap_or(&0) + f.get(12).unwrap_or(&0)) * 10
}

/// The scheduler's run time of every live thread of process `pid`, in ns (threads that have
/// exited are not in it).
fn threads_ns(pid: u32) -> u64 {
    let mut ns = 0;
    for t in std::fs::read_dir(format!("/proc/{pid}/task")).into_iter().flatten().flatten() {
        let stat = std::fs::read_to_string(t.path().join("schedstat")).unwrap_or_default();
        ns += stat.split_whitespace().next().and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
    }
    ns
}

/// This thread's scheduler run time, in ns.
fn thread_ns() -> u64 {
    let stat = std::fs::read_to_string("/proc/thread-self/schedstat").unwrap_or_default();
    stat.split_whitespace().next().and_then(|v| v.parse().ok()).unwrap_or(0)
}

/// The runtime's utime+stime in ms: the test bed's containerd and every containerd shim (only
/// one test bed runs on the machine at a time).
fn runtime_ms(containerd: u32) -> u64 {
    let shims = std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| std::fs::read_to_string(e.path().join("comm")).is_ok_and(|c| c.starts_with("containerd-shim")));
    ticks_ms(&format!("/proc/{containerd}")) + shims.map(|e| ticks_ms(&e.path().to_string_lossy())).sum::<u64>()
}

/// One path's scrapes: the agent's CPU per GET (ticks; its live threads' scheduler time), the
/// runtime's (ticks), the median wall time, the last body's bytes.
struct Cost {
    ticks: f64,
    ns: f64,
    runtime: f64,
    wall: Duration,
    bytes: usize,
}

/// `n` GETs of `path`, back to back.
fn scrapes(pid: u32, containerd: u32, socket: &Path, path: &str, n: u32) -> Cost {
    let rt0 = runtime_ms(containerd);
    let (ticks0, ns0) = (ticks_ms(&format!("/proc/{pid}")), threads_ns(pid));
    let mut walls = Vec::new();
    let mut bytes = 0;
    for _ in 0..n {
        let t = Instant::now();
        bytes = get(socket, path).len();
        walls.push(t.elapsed());
    }
    let (ticks1, ns1) = (ticks_ms(&format!("/proc/{pid}")), threads_ns(pid));
    let per = |d: u64, unit: f64| d as f64 / unit / f64::from(n);
    Cost {
        ticks: per(ticks1 - ticks0, 1.0),
        ns: per(ns1.saturating_sub(ns0), 1e6),
        runtime: per(runtime_ms(containerd).saturating_sub(rt0), 1.0),
        wall: median(walls),
        bytes,
    }
}

const ROOT: &str = "/sys/fs/cgroup";
const V2_FILES: &[&str] = &[
    "cpu.stat",
    "cpu.max",
    "cpu.weight",
    "memory.current",
    "memory.stat",
    "memory.swap.current",
    "memory.events",
    "memory.max",
    "io.stat",
];
const V1_FILES: &[(&str, &str)] = &[
    ("cpuacct", "cpuacct.usage"),
    ("cpuacct", "cpuacct.stat"),
    ("cpu", "cpu.stat"),
    ("cpu", "cpu.cfs_quota_us"),
    ("cpu", "cpu.cfs_period_us"),
    ("cpu", "cpu.shares"),
    ("memory", "memory.usage_in_bytes"),
    ("memory", "memory.stat"),
    ("memory", "memory.memsw.usage_in_bytes"),
    ("memory", "memory.failcnt"),
    ("memory", "memory.oom_control"),
    ("memory", "memory.limit_in_bytes"),
    ("blkio", "blkio.throttle.io_service_bytes"),
];

/// The files one scrape reads, as atoll reads them: every cgroup's, then per sandbox its
/// `cgroup.procs` (whose first pid's `net/dev` is read in the round), the root's and the
/// machine's.
struct Floor {
    files: Vec<String>,
    procs: Vec<String>,
}

impl Floor {
    fn new(containers: &BTreeSet<String>, sandboxes: &BTreeSet<String>) -> Floor {
        let v2 = Path::new(ROOT).join("cgroup.controllers").exists();
        let cgroup_files = |id: &str| -> Vec<String> {
            let rel = id.trim_start_matches('/');
            let join =
                |dir: String, f: &str| if rel.is_empty() { format!("{dir}/{f}") } else { format!("{dir}/{rel}/{f}") };
            match v2 {
                true => V2_FILES.iter().map(|f| join(ROOT.to_string(), f)).collect(),
                false => V1_FILES.iter().map(|(c, f)| join(format!("{ROOT}/{c}"), f)).collect(),
            }
        };
        let mut files: Vec<String> = cgroup_files("/");
        for id in containers.iter().chain(sandboxes) {
            files.extend(cgroup_files(id));
        }
        files.extend(
            [
                "/proc/stat",
                "/proc/meminfo",
                "/proc/self/net/dev",
                "/sys/devices/system/cpu/online",
                "/proc/sys/kernel/random/boot_id",
                "/etc/machine-id",
                "/sys/class/dmi/id/product_uuid",
            ]
            .map(String::from),
        );
        // The block devices the root's I/O names, by major:minor.
        let io = match v2 {
            true => std::fs::read_to_string(format!("{ROOT}/io.stat")),
            false => std::fs::read_to_string(format!("{ROOT}/blkio/blkio.throttle.io_service_bytes")),
        };
        let devices: BTreeSet<String> = io
            .unwrap_or_default()
            .lines()
            .filter_map(|l| l.split_whitespace().next().filter(|d| d.contains(':')).map(String::from))
            .collect();
        files.extend(devices.iter().map(|d| format!("/sys/dev/block/{d}/uevent")));
        let procs = sandboxes
            .iter()
            .map(|id| {
                let rel = id.trim_start_matches('/');
                match v2 {
                    true => format!("{ROOT}/{rel}/cgroup.procs"),
                    false => format!("{ROOT}/pids/{rel}/cgroup.procs"),
                }
            })
            .collect();
        Floor { files, procs }
    }

    /// One round: every file read once. Returns how many could be read.
    fn round(&self, buf: &mut String) -> usize {
        let mut read = 0;
        let mut one = |path: &str, buf: &mut String| {
            buf.clear();
            let ok = std::fs::File::open(path).and_then(|mut f| f.read_to_string(buf)).is_ok();
            read += usize::from(ok);
            ok
        };
        for f in &self.files {
            one(f, buf);
        }
        for p in &self.procs {
            if one(p, buf) {
                if let Some(pid) = buf.lines().next().map(|l| l.trim().to_string()) {
                    one(&format!("/proc/{pid}/net/dev"), buf);
                }
            }
        }
        read
    }

    /// Where a round's time goes: wall µs per read of each kind of file (its name; `net/dev`
    /// for the sandboxes' namespaces), over `rounds` rounds, costliest first.
    fn kinds(&self, rounds: u32) -> Vec<(String, f64, usize)> {
        let mut by: std::collections::BTreeMap<String, (Duration, usize)> = Default::default();
        let mut buf = String::new();
        let mut time = |path: &str, kind: &str, buf: &mut String| {
            buf.clear();
            let t = Instant::now();
            let ok = std::fs::File::open(path).and_then(|mut f| f.read_to_string(buf)).is_ok();
            let e = by.entry(kind.to_string()).or_default();
            e.0 += t.elapsed();
            e.1 += 1;
            ok
        };
        for _ in 0..rounds {
            for f in &self.files {
                let kind = if f.starts_with("/proc/") || f.starts_with("/etc/") {
                    f.as_str()
                } else {
                    f.rsplit('/').next().unwrap_or(f)
                };
                time(f, kind, &mut buf);
            }
            for p in &self.procs {
                if time(p, "cgroup.procs", &mut buf) {
                    if let Some(pid) = buf.lines().next().map(|l| l.trim().to_string()) {
                        time(&format!("/proc/{pid}/net/dev"), "net/dev", &mut buf);
                    }
                }
            }
        }
        let mut v: Vec<(String, f64, usize)> =
            by.into_iter().map(|(k, (d, n))| (k, d.as_secs_f64() * 1e6 / n as f64, n / rounds as usize)).collect();
        v.sort_by(|a, b| (b.1 * b.2 as f64).total_cmp(&(a.1 * a.2 as f64)));
        v
    }

    fn count(&self) -> usize {
        self.files.len() + 2 * self.procs.len()
    }
}

/// `a / b` as a ratio, or `-` when `b` read nothing (below a clock tick).
fn ratio(a: f64, b: f64) -> String {
    if b > 0.0 {
        format!("{:.1}x", a / b)
    } else {
        "-".into()
    }
}

fn rss_kib(pid: u32) -> u64 {
    common::status_field(&format!("/proc/{pid}/status"), "VmRSS")
}

fn main() {
    let bench = std::env::args().any(|a| a == "--bench");
    let (pods, n, window) = if bench { (50, 50u32, 60u64) } else { (3, 5, 2) };
    let tb = common::testbed();
    let dir = std::env::temp_dir().join(common::unique("atoll-bench-cadvisor"));
    let manifests = dir.join("manifests");
    std::fs::create_dir_all(&manifests).unwrap();
    for i in 0..pods {
        std::fs::write(
            manifests.join(format!("p{i}.yaml")),
            format!("apiVersion: v1\nkind: Pod\nmetadata: {{name: p{i}}}\nspec:\n  hostNetwork: false\n  terminationGracePeriodSeconds: 0\n  containers:\n  - name: c\n    image: docker.io/library/busybox:1.36\n    command: [sleep, '3600']\n"),
        )
        .unwrap();
    }
    let agent = common::Agent::start(tb, &dir, "fileCheckFrequency: 1s\n", &[], &[]);
    let pid = agent.child.id();
    let started = Instant::now();
    let (containers, sandboxes) = common::eventually(Duration::from_secs(900), "every pod running", || {
        if !agent.socket.exists() {
            return None;
        }
        let (c, s) = entries(&get(&agent.socket, "/metrics/cadvisor"));
        (c.len() == pods && s.len() == pods).then_some((c, s))
    });
    let up = started.elapsed();
    // Let the start's work (the pods' first syncs, status updates) die down.
    std::thread::sleep(Duration::from_secs(if bench { 15 } else { 1 }));
    let quiet = Duration::from_secs(if bench { 10 } else { 1 });
    let (t0, ns0) = (ticks_ms(&format!("/proc/{pid}")), threads_ns(pid));
    std::thread::sleep(quiet);
    let idle_ms_per_s = (ticks_ms(&format!("/proc/{pid}")) - t0) as f64 / quiet.as_secs_f64();
    let idle_ns_ms_per_s = threads_ns(pid).saturating_sub(ns0) as f64 / 1e6 / quiet.as_secs_f64();

    let rss_before = rss_kib(pid);
    let containerd: u32 = std::fs::read_to_string(tb.dir.join("containerd.pid")).unwrap().trim().parse().unwrap();
    let cad = scrapes(pid, containerd, &agent.socket, "/metrics/cadvisor", n);
    let rss_after = rss_kib(pid);
    let met = scrapes(pid, containerd, &agent.socket, "/metrics", n);
    let series = get(&agent.socket, "/metrics/cadvisor").lines().filter(|l| !l.starts_with('#')).count();

    // The floor: the same files, read by this thread.
    let floor = Floor::new(&containers, &sandboxes);
    let mut buf = String::with_capacity(64 << 10);
    let readable = floor.round(&mut buf);
    let (ft0, fns0) = (ticks_ms("/proc/thread-self"), thread_ns());
    let mut walls = Vec::new();
    for _ in 0..n {
        let t = Instant::now();
        floor.round(&mut buf);
        walls.push(t.elapsed());
    }
    let floor_ticks = (ticks_ms("/proc/thread-self") - ft0) as f64 / f64::from(n);
    let floor_ns = thread_ns().saturating_sub(fns0) as f64 / 1e6 / f64::from(n);
    let floor_wall = median(walls);
    let kinds = floor.kinds(n.min(10));

    // A scrape every 15 s over the window (the smoke run: one, after the window).
    let every = Duration::from_secs(15).min(Duration::from_secs(window));
    let end = Instant::now() + Duration::from_secs(window);
    let mut periodic = 0;
    while Instant::now() < end {
        std::thread::sleep(every.min(end.saturating_duration_since(Instant::now())));
        get(&agent.socket, "/metrics/cadvisor");
        periodic += 1;
    }
    let rss_later = rss_kib(pid);
    let hwm = agent.memory_kib("VmHWM");
    drop(agent);
    let _ = std::fs::remove_dir_all(&dir);

    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    println!(
        "/metrics/cadvisor with {pods} pods (containerd {}; {} container and {} sandbox cgroups, {series} series, {} B; all running {:.1} s after the start)",
        tb.var("ATOLL_TB_CONTAINERD_VERSION"),
        containers.len(),
        sandboxes.len(),
        cad.bytes,
        up.as_secs_f64()
    );
    println!("| measurement | atoll | floor | ratio |");
    println!("|---|---:|---:|---:|");
    println!(
        "| agent CPU per scrape over the local API socket, {n} scrapes (utime+stime; target 5 ms) vs the same files read by a minimal loop | {:.2} ms | {floor_ticks:.2} ms | {} |",
        cad.ticks,
        ratio(cad.ticks, floor_ticks)
    );
    println!(
        "| the same, scheduler time (the agent's live threads; the floor's thread) | {:.2} ms | {floor_ns:.2} ms | {} |",
        cad.ns,
        ratio(cad.ns, floor_ns)
    );
    println!(
        "| wall time per scrape, median ({} files of {} read by the floor) | {:.2} ms | {:.2} ms | {} |",
        readable,
        floor.count(),
        ms(cad.wall),
        ms(floor_wall),
        ratio(ms(cad.wall), ms(floor_wall))
    );
    println!(
        "| the runtime's CPU per scrape (containerd and its shims: ListContainerStats, ListPodSandbox) | {:.2} ms | | |",
        cad.runtime
    );
    println!(
        "| reference: the local API's /metrics ({} B): agent CPU per scrape (ticks / scheduler), runtime CPU, median wall | {:.2} / {:.2} ms, {:.2} ms, {:.2} ms | | |",
        met.bytes,
        met.ticks,
        met.ns,
        met.runtime,
        ms(met.wall)
    );
    println!(
        "| agent CPU between scrapes, idle with {pods} pods (ticks / scheduler), per second | {idle_ms_per_s:.2} / {idle_ns_ms_per_s:.2} ms | | |"
    );
    println!(
        "| agent RSS before the scrapes / after {n} / after {window} s more ({periodic} scrapes, one every {} s); peak | {rss_before} / {rss_after} / {rss_later} KiB; {hwm} KiB | | |",
        every.as_secs()
    );
    println!();
    println!("where the floor's round goes (wall per read, reads per round), costliest first");
    let top: Vec<String> = kinds.iter().take(8).map(|(k, us, per)| format!("{k} {us:.1} us x {per}")).collect();
    println!("{}", top.join("; "));
    println!();
}
