//! What a container's cgroup and network namespace say it uses, read as cAdvisor reads them
//! (for `/metrics/cadvisor`): CPU time (user, system, CFS periods and throttling), memory
//! (usage, working set, RSS, cache, swap, failures, OOM kills), block I/O per device, the
//! limits it runs under, and the interfaces of `/proc/<pid>/net/dev`. cgroup v2 and v1 both.
//!
//! Where: a container's cgroup is found once, from `/proc/<pid>/cgroup` of its first process
//! (the runtime's verbose status gives the pid), and kept by path, never by pid, so a reused
//! pid can never point the readings at another process. Every path is made through
//! `pod::paths::descending` under the cgroup root; every file is a bounded read. The parsers
//! are pure; [`read`] and [`interfaces`] are the blocking I/O (callers run them off the
//! executor).

use crate::pod::paths;
use std::path::{Path, PathBuf};

/// Where the cgroup file systems are mounted.
const ROOT: &str = crate::runtime::pod_cgroup::ROOT;
/// The largest cgroup or proc file read (`memory.stat` is about 1.5 KB).
const MAX_FILE: usize = 64 << 10;
/// `/proc/stat`'s and `cpuacct.stat`'s unit: 100 per second on every architecture atoll is
/// built for.
const USER_HZ_NS: u64 = 10_000_000;

/// A container's cgroup: the one v2 path, or v1's path per controller.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Cgroup {
    V2(String),
    V1(Vec<(String, String)>),
}

/// A container's or sandbox's place, found once: its cgroup and the image cAdvisor names.
#[derive(Clone, Debug)]
pub struct Located {
    pub cgroup: Cgroup,
    pub image: String,
}

/// What one cgroup says, each value `None` when its file could not be read.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Sample {
    pub cpu_ns: Option<u64>,
    pub user_ns: Option<u64>,
    pub system_ns: Option<u64>,
    /// CFS periods elapsed, periods throttled, time throttled (ns).
    pub cfs: Option<(u64, u64, u64)>,
    pub memory: Option<u64>,
    pub working_set: Option<u64>,
    pub rss: Option<u64>,
    pub cache: Option<u64>,
    pub swap: Option<u64>,
    pub failcnt: Option<u64>,
    pub oom_kills: Option<u64>,
    /// CFS quota (0: none) and period, in microseconds; cpu shares.
    pub quota: i64,
    pub period: Option<u64>,
    pub shares: Option<u64>,
    /// The memory limit in bytes (0: unlimited; `None`: not read).
    pub memory_limit: Option<u64>,
    /// Bytes read and written, then reads and writes, per block device (`major:minor`).
    pub io: Vec<(String, [u64; 4])>,
}

/// One network interface's counters.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Interface {
    pub name: String,
    /// Bytes, packets, errors and dropped: received, then transmitted.
    pub rx: [u64; 4],
    pub tx: [u64; 4],
}

/// The cgroup of a process, from its `/proc/<pid>/cgroup`: the v2 line (`0::/path`) on a
/// unified host, else every v1 controller's path. Paths must be absolute and plain.
pub fn parse_proc_cgroup(text: &str, v2: bool) -> Option<Cgroup> {
    let mut v1 = Vec::new();
    for line in text.lines() {
        let mut f = line.splitn(3, ':');
        let (Some(id), Some(controllers), Some(path)) = (f.next(), f.next(), f.next()) else { continue };
        let rel = path.strip_prefix('/')?;
        if !rel.is_empty() && paths::check_descending(rel).is_err() {
            return None;
        }
        if v2 && id == "0" && controllers.is_empty() {
            return Some(Cgroup::V2(rel.to_string()));
        }
        for c in controllers.split(',').filter(|c| !c.is_empty() && !c.contains('=')) {
            v1.push((c.to_string(), rel.to_string()));
        }
    }
    (!v2 && !v1.is_empty()).then_some(Cgroup::V1(v1))
}

/// A `key value` line's value, as `cpu.stat`, `memory.stat` and `memory.events` hold them.
fn field(text: &str, key: &str) -> Option<u64> {
    text.lines().find_map(|l| l.strip_prefix(key)?.strip_prefix(' ')?.trim().parse().ok())
}

fn number(text: Option<&str>) -> Option<u64> {
    text?.trim().parse().ok()
}

/// The files of a v2 cgroup, as `read(file)` gives them.
pub fn sample_v2(read: &dyn Fn(&str) -> Option<String>) -> Sample {
    let mut s = Sample::default();
    let us = |v: u64| v.saturating_mul(1000);
    if let Some(cpu) = read("cpu.stat") {
        s.cpu_ns = field(&cpu, "usage_usec").map(us);
        s.user_ns = field(&cpu, "user_usec").map(us);
        s.system_ns = field(&cpu, "system_usec").map(us);
        if let (Some(p), Some(t), Some(tt)) =
            (field(&cpu, "nr_periods"), field(&cpu, "nr_throttled"), field(&cpu, "throttled_usec"))
        {
            s.cfs = Some((p, t, us(tt)));
        }
    }
    if let Some(max) = read("cpu.max") {
        let mut f = max.split_whitespace();
        s.quota = f.next().and_then(|q| q.parse().ok()).unwrap_or(0);
        s.period = f.next().and_then(|p| p.parse().ok());
    }
    // cAdvisor's cpu.weight back to shares (runc's conversion, inverted).
    s.shares = number(read("cpu.weight").as_deref())
        .map(|w: u64| 2u64.saturating_add(w.saturating_sub(1).saturating_mul(262_142) / 9_999));
    s.memory = number(read("memory.current").as_deref());
    if let Some(stat) = read("memory.stat") {
        // What the kernel does not say is 0, as cAdvisor shows it.
        s.rss = field(&stat, "anon").or(Some(0));
        s.cache = field(&stat, "file").or(Some(0));
        let inactive = field(&stat, "inactive_file").unwrap_or(0);
        s.working_set = s.memory.map(|m| m.saturating_sub(inactive));
        s.swap = number(read("memory.swap.current").as_deref()).or(Some(0));
        let events = read("memory.events").unwrap_or_default();
        s.failcnt = field(&events, "max").or(Some(0));
        s.oom_kills = field(&events, "oom_kill").or(Some(0));
    }
    s.memory_limit = read("memory.max").map(|m| m.trim().parse().unwrap_or(0));
    if let Some(io) = read("io.stat") {
        s.io = io
            .lines()
            .filter_map(|l| {
                let mut f = l.split_whitespace();
                let dev = f.next()?.to_string();
                let kv: Vec<(&str, &str)> = f.filter_map(|p| p.split_once('=')).collect();
                let get = |k: &str| kv.iter().find(|(key, _)| *key == k).and_then(|(_, v)| v.parse().ok()).unwrap_or(0);
                Some((dev, [get("rbytes"), get("wbytes"), get("rios"), get("wios")]))
            })
            .collect();
    }
    s
}

/// The files of a v1 cgroup, as `read(controller, file)` gives them.
pub fn sample_v1(read: &dyn Fn(&str, &str) -> Option<String>) -> Sample {
    let mut s = Sample { cpu_ns: number(read("cpuacct", "cpuacct.usage").as_deref()), ..Default::default() };
    if let Some(stat) = read("cpuacct", "cpuacct.stat") {
        s.user_ns = field(&stat, "user").map(|t| t.saturating_mul(USER_HZ_NS));
        s.system_ns = field(&stat, "system").map(|t| t.saturating_mul(USER_HZ_NS));
    }
    if let Some(cpu) = read("cpu", "cpu.stat") {
        if let (Some(p), Some(t), Some(tt)) =
            (field(&cpu, "nr_periods"), field(&cpu, "nr_throttled"), field(&cpu, "throttled_time"))
        {
            s.cfs = Some((p, t, tt));
        }
    }
    s.quota = read("cpu", "cpu.cfs_quota_us").and_then(|q| q.trim().parse().ok()).filter(|q| *q > 0).unwrap_or(0);
    s.period = number(read("cpu", "cpu.cfs_period_us").as_deref());
    s.shares = number(read("cpu", "cpu.shares").as_deref());
    s.memory = number(read("memory", "memory.usage_in_bytes").as_deref());
    if let Some(stat) = read("memory", "memory.stat") {
        // What the kernel does not say is 0, as cAdvisor shows it (`total_swap` only with
        // swap accounting).
        s.rss = field(&stat, "total_rss").or(Some(0));
        s.cache = field(&stat, "total_cache").or(Some(0));
        s.swap = field(&stat, "total_swap").or(Some(0));
        let inactive = field(&stat, "total_inactive_file").unwrap_or(0);
        s.working_set = s.memory.map(|m| m.saturating_sub(inactive));
        s.failcnt = number(read("memory", "memory.failcnt").as_deref()).or(Some(0));
        s.oom_kills = read("memory", "memory.oom_control").and_then(|t| field(&t, "oom_kill")).or(Some(0));
    }
    // The kernel's "unlimited" is the largest page-aligned i64, not a number anyone set.
    s.memory_limit =
        number(read("memory", "memory.limit_in_bytes").as_deref()).map(|l| if l > 1 << 62 { 0 } else { l });
    // runc's order: the recursive files where the kernel has them.
    let blkio = |name: &str| read("blkio", &format!("{name}_recursive")).or_else(|| read("blkio", name));
    let mut by_dev: Vec<(String, [u64; 4])> = Vec::new();
    for (file, at) in [("blkio.throttle.io_service_bytes", 0), ("blkio.throttle.io_serviced", 2)] {
        for l in blkio(file).unwrap_or_default().lines() {
            let mut f = l.split_whitespace();
            let (Some(dev), Some(op), Some(n)) = (f.next(), f.next(), f.next().and_then(|n| n.parse::<u64>().ok()))
            else {
                continue;
            };
            let slot = match op {
                "Read" => at,
                "Write" => at + 1,
                _ => continue,
            };
            if !by_dev.iter().any(|(d, _)| d == dev) {
                by_dev.push((dev.to_string(), [0; 4]));
            }
            if let Some(v) = by_dev.iter_mut().find(|(d, _)| d == dev).and_then(|(_, v)| v.get_mut(slot)) {
                *v = n;
            }
        }
    }
    s.io = by_dev;
    s
}

/// cAdvisor's interfaces of a network namespace: `/proc/<pid>/net/dev` without loopback and
/// the host ends of container links (`lo`, `veth`, `docker`, `nerdctl` prefixes).
pub fn parse_net_dev(text: &str) -> Vec<Interface> {
    let ignored = ["lo", "veth", "docker", "nerdctl"];
    text.lines()
        .filter_map(|l| {
            let (name, counters) = l.split_once(':')?;
            let name = name.trim();
            if name.is_empty() || ignored.iter().any(|p| name.to_ascii_lowercase().starts_with(p)) {
                return None;
            }
            let v: Vec<u64> = counters.split_whitespace().map(|f| f.parse().unwrap_or(0)).collect();
            let at = |i: usize| v.get(i).copied().unwrap_or(0);
            // Receive: bytes packets errs drop fifo frame compressed multicast; transmit: bytes
            // packets errs drop ...
            (v.len() == 16).then(|| Interface {
                name: name.to_string(),
                rx: [at(0), at(1), at(2), at(3)],
                tx: [at(8), at(9), at(10), at(11)],
            })
        })
        .collect()
}

/// A small kernel file as text (bounded, not following a last symlink).
pub(super) fn read_text(path: &Path) -> Option<String> {
    String::from_utf8(crate::bounded::read_file(path, MAX_FILE).ok()?).ok()
}

/// Whether this host mounts the unified (v2) hierarchy at the cgroup root.
pub fn unified() -> bool {
    Path::new(ROOT).join("cgroup.controllers").exists()
}

/// A file of a cgroup, its path proven to lie under the cgroup root.
fn file(cgroup: &Cgroup, controller: &str, name: &str) -> Option<PathBuf> {
    let rel = match cgroup {
        Cgroup::V2(rel) => rel.clone(),
        Cgroup::V1(list) => {
            let (_, rel) = list.iter().find(|(c, _)| c == controller)?;
            match rel.is_empty() {
                true => controller.to_string(),
                false => format!("{controller}/{rel}"),
            }
        }
    };
    let dir = if rel.is_empty() { PathBuf::from(ROOT) } else { paths::descending(Path::new(ROOT), &rel).ok()? };
    paths::under(&dir, &[name]).ok()
}

/// The cgroup of process `pid` (blocking).
pub fn of_process(pid: u32) -> Option<Cgroup> {
    let text = read_text(&Path::new("/proc").join(pid.to_string()).join("cgroup"))?;
    parse_proc_cgroup(&text, unified())
}

/// Reads a cgroup (blocking), all but the `skipped` files (what the runtime already said).
pub fn read(cgroup: &Cgroup, skipped: &[&str]) -> Sample {
    let get = |controller: &str, name: &str| match skipped.contains(&name) {
        true => None,
        false => read_text(&file(cgroup, controller, name)?),
    };
    match cgroup {
        Cgroup::V2(_) => sample_v2(&|name| get("", name)),
        Cgroup::V1(_) => sample_v1(&get),
    }
}

/// The files whose numbers CRI's container stats give (usage and memory in use).
pub const CRI_COVERED: &[&str] = &["cpuacct.usage", "memory.usage_in_bytes", "memory.current"];

/// The interfaces of the network namespace of a process in the cgroup (blocking): a pid read
/// from the cgroup's own member list at this moment, never one remembered.
pub fn interfaces(cgroup: &Cgroup) -> Vec<Interface> {
    let procs = match cgroup {
        Cgroup::V2(_) => file(cgroup, "", "cgroup.procs"),
        Cgroup::V1(_) => file(cgroup, "pids", "cgroup.procs").or_else(|| file(cgroup, "memory", "cgroup.procs")),
    };
    let pid = procs.and_then(|p| read_text(&p)).and_then(|t| t.lines().next()?.trim().parse::<u32>().ok());
    pid.and_then(|pid| read_text(&Path::new("/proc").join(pid.to_string()).join("net/dev")))
        .map(|t| parse_net_dev(&t))
        .unwrap_or_default()
}

/// The interfaces of the agent's own (the host's) network namespace (blocking).
pub fn host_interfaces() -> Vec<Interface> {
    read_text(Path::new("/proc/self/net/dev")).map(|t| parse_net_dev(&t)).unwrap_or_default()
}

/// A block device's name (`/dev/sda`) by its `major:minor`, from sysfs (blocking).
pub fn device_name(dev: &str) -> Option<String> {
    let (major, minor) = dev.split_once(':')?;
    let (major, minor): (u32, u32) = (major.parse().ok()?, minor.parse().ok()?);
    let uevent = read_text(&Path::new("/sys/dev/block").join(format!("{major}:{minor}")).join("uevent"))?;
    let name = uevent.lines().find_map(|l| l.strip_prefix("DEVNAME="))?;
    paths::is_segment(name).then(|| format!("/dev/{name}"))
}

#[cfg(test)]
#[path = "cgroups_tests.rs"]
mod tests;
