//! The cgroup v1 and v2 files, `/proc/<pid>/cgroup` and `/proc/<pid>/net/dev` as the kernel
//! writes them, read into cAdvisor's numbers.

use super::*;

#[test]
fn a_process_cgroup_is_found_on_v2_and_v1_and_odd_paths_are_refused() {
    let v2 = "0::/k8s.io/abc\n";
    assert_eq!(parse_proc_cgroup(v2, true), Some(Cgroup::V2("k8s.io/abc".into())));
    let hybrid = "12:pids:/k8s.io/abc\n4:cpu,cpuacct:/k8s.io/abc\n3:memory:/k8s.io/abc\n1:name=systemd:/x\n0::/x\n";
    let Some(Cgroup::V1(list)) = parse_proc_cgroup(hybrid, false) else { panic!("v1") };
    let names: Vec<&str> = list.iter().map(|(c, _)| c.as_str()).collect();
    assert_eq!(names, ["pids", "cpu", "cpuacct", "memory"]);
    assert!(list.iter().all(|(_, p)| p == "k8s.io/abc"));
    for bad in ["0::/k8s.io/../../etc\n", "0::relative\n", "0::/a//b\n"] {
        assert_eq!(parse_proc_cgroup(bad, true), None, "{bad:?}");
    }
    assert_eq!(parse_proc_cgroup("garbage\n", true), None);
    assert_eq!(parse_proc_cgroup("0::/x\n", false), None, "a v1 host needs v1 lines");
}

#[test]
fn v2_files_give_cadvisors_numbers() {
    let files: &[(&str, &str)] = &[
        ("cpu.stat", "usage_usec 2500000\nuser_usec 2000000\nsystem_usec 500000\nnr_periods 40\nnr_throttled 30\nthrottled_usec 1500000\n"),
        ("cpu.max", "10000 100000\n"),
        ("cpu.weight", "100\n"),
        ("memory.current", "10485760\n"),
        ("memory.stat", "anon 4194304\nfile 6291456\nkernel 1\ninactive_file 2097152\nactive_file 4194304\n"),
        ("memory.swap.current", "4096\n"),
        ("memory.events", "low 0\nhigh 0\nmax 7\noom 2\noom_kill 2\noom_group_kill 0\n"),
        ("memory.max", "33554432\n"),
        ("io.stat", "8:0 rbytes=1024 wbytes=2048 rios=1 wios=2 dbytes=0 dios=0\n253:1 rbytes=5 wbytes=0\n"),
    ];
    let read = |name: &str| files.iter().find(|(f, _)| *f == name).map(|(_, t)| t.to_string());
    let s = sample_v2(&read);
    assert_eq!((s.cpu_ns, s.user_ns, s.system_ns), (Some(2_500_000_000), Some(2_000_000_000), Some(500_000_000)));
    assert_eq!(s.cfs, Some((40, 30, 1_500_000_000)));
    assert_eq!((s.quota, s.period), (10_000, Some(100_000)));
    // cpu.weight back to shares by cAdvisor's formula (runc's, inverted): 2 + (w − 1) × 262142 / 9999.
    assert_eq!(s.shares, Some(2 + 99 * 262_142 / 9_999));
    assert_eq!((s.memory, s.working_set), (Some(10_485_760), Some(10_485_760 - 2_097_152)));
    assert_eq!((s.rss, s.cache, s.swap), (Some(4_194_304), Some(6_291_456), Some(4096)));
    assert_eq!((s.failcnt, s.oom_kills, s.memory_limit), (Some(7), Some(2), Some(33_554_432)));
    assert_eq!(s.io, vec![("8:0".to_string(), [1024, 2048, 1, 2]), ("253:1".to_string(), [5, 0, 0, 0])]);

    let unlimited = |name: &str| match name {
        "cpu.max" => Some("max 100000\n".to_string()),
        "memory.max" => Some("max\n".to_string()),
        _ => None,
    };
    let s = sample_v2(&unlimited);
    assert_eq!((s.quota, s.period, s.memory_limit), (0, Some(100_000), Some(0)), "max is no limit: 0");
    assert_eq!((s.cpu_ns, s.memory, s.working_set, s.cfs), (None, None, None, None), "unread stays unknown");
    assert_eq!((s.rss, s.swap, s.oom_kills), (None, None, None), "no memory.stat, no memory readings");
    // memory.stat read: what the kernel leaves out is 0, as cAdvisor shows it.
    let bare = |name: &str| (name == "memory.stat").then(|| "anon 5\n".to_string());
    let s = sample_v2(&bare);
    assert_eq!((s.rss, s.cache, s.swap, s.failcnt, s.oom_kills), (Some(5), Some(0), Some(0), Some(0), Some(0)));
    assert_eq!(s.memory_limit, None, "not read is not unlimited");
}

#[test]
fn v1_files_give_cadvisors_numbers() {
    let files: &[(&str, &str, &str)] = &[
        ("cpuacct", "cpuacct.usage", "2500000000\n"),
        ("cpuacct", "cpuacct.stat", "user 150\nsystem 50\n"),
        ("cpu", "cpu.stat", "nr_periods 40\nnr_throttled 30\nthrottled_time 1500000000\nnr_bursts 0\n"),
        ("cpu", "cpu.cfs_quota_us", "10000\n"),
        ("cpu", "cpu.cfs_period_us", "100000\n"),
        ("cpu", "cpu.shares", "102\n"),
        ("memory", "memory.usage_in_bytes", "10485760\n"),
        (
            "memory",
            "memory.stat",
            "cache 1\nrss 2\ntotal_cache 6291456\ntotal_rss 4194304\ntotal_swap 4096\ntotal_inactive_file 2097152\n",
        ),
        ("memory", "memory.failcnt", "7\n"),
        ("memory", "memory.oom_control", "oom_kill_disable 0\nunder_oom 0\noom_kill 2\n"),
        ("memory", "memory.limit_in_bytes", "33554432\n"),
        (
            "blkio",
            "blkio.throttle.io_service_bytes_recursive",
            "8:0 Read 1024\n8:0 Write 2048\n8:0 Sync 0\n8:0 Total 3072\nTotal 3072\n",
        ),
        ("blkio", "blkio.throttle.io_serviced", "8:0 Read 1\n8:0 Write 2\n8:16 Read 3\nTotal 6\n"),
    ];
    let read =
        |c: &str, name: &str| files.iter().find(|(fc, f, _)| *fc == c && *f == name).map(|(.., t)| t.to_string());
    let s = sample_v1(&read);
    assert_eq!((s.cpu_ns, s.user_ns, s.system_ns), (Some(2_500_000_000), Some(1_500_000_000), Some(500_000_000)));
    assert_eq!(s.cfs, Some((40, 30, 1_500_000_000)));
    assert_eq!((s.quota, s.period, s.shares), (10_000, Some(100_000), Some(102)));
    assert_eq!((s.memory, s.working_set), (Some(10_485_760), Some(10_485_760 - 2_097_152)));
    assert_eq!((s.rss, s.cache, s.swap), (Some(4_194_304), Some(6_291_456), Some(4096)));
    assert_eq!((s.failcnt, s.oom_kills, s.memory_limit), (Some(7), Some(2), Some(33_554_432)));
    assert_eq!(s.io, vec![("8:0".to_string(), [1024, 2048, 1, 2]), ("8:16".to_string(), [0, 0, 3, 0])]);

    let unlimited = |_: &str, name: &str| match name {
        "cpu.cfs_quota_us" => Some("-1\n".to_string()),
        "memory.limit_in_bytes" => Some("9223372036854771712\n".to_string()),
        _ => None,
    };
    let s = sample_v1(&unlimited);
    assert_eq!((s.quota, s.memory_limit), (0, Some(0)), "the kernel's unlimited is no limit");
}

#[test]
fn hostile_numbers_saturate_and_garbage_is_unknown() {
    let read = |name: &str| match name {
        "cpu.stat" => Some(format!("usage_usec {}\nuser_usec x\n", u64::MAX)),
        "cpu.weight" => Some(format!("{}\n", u64::MAX)),
        "memory.current" => Some("-5\n".to_string()),
        "io.stat" => Some("8:0 rbytes==1 wbytes\n\n".to_string()),
        _ => None,
    };
    let s = sample_v2(&read);
    assert_eq!((s.cpu_ns, s.user_ns, s.memory), (Some(u64::MAX), None, None));
    assert!(s.shares.is_some());
    assert_eq!(s.io, vec![("8:0".to_string(), [0; 4])]);
}

#[test]
fn net_dev_drops_loopback_and_host_link_ends() {
    let text = "Inter-|   Receive                                                |  Transmit
 face |bytes    packets errs drop fifo frame compressed multicast|bytes    packets errs drop fifo colls carrier compressed
    lo:     100       1    0    0    0     0          0         0      100       1    0    0    0     0       0          0
  eth0:    2000      24    1    2    0     0          0         0      962      13    3    4    0     0       0          0
vethab12:     5       1    0    0    0     0          0         0        5       1    0    0    0     0       0          0
VETHcd:     5       1    0    0    0     0          0         0        5       1    0    0    0     0       0          0
  eth2:     5       1    0    0    0     0          0         0        5       1    0    0    0     0       0
  eth1: 1 2 3
";
    assert_eq!(parse_net_dev(text), vec![Interface { name: "eth0".into(), rx: [2000, 24, 1, 2], tx: [962, 13, 3, 4] }]);
}

#[test]
fn this_machines_files_are_read() {
    let Some(cg) = of_process(std::process::id()) else { panic!("this process's cgroup") };
    let s = read(&cg, &[]);
    assert!(s.cpu_ns.is_some() || s.memory.is_some(), "{cg:?}: {s:?}");
    assert!(host_interfaces().iter().all(|i| i.name != "lo"));
}
