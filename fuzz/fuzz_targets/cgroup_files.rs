//! Fuzzes what `/metrics/cadvisor` reads: any text as every cgroup v1 and v2 file, as
//! `/proc/<pid>/cgroup` and `/proc/<pid>/net/dev`, and as a runtime's verbose info, then the
//! scrape rendered. Beyond not panicking: a process cgroup that is found is a plain path (no
//! `..`, no empty element), and each interface's name is one the text held.
#![no_main]

use atoll::api::cadvisor::{render, verbose_info, Entry, Scrape};
use atoll::api::cgroups::{parse_net_dev, parse_proc_cgroup, sample_v1, sample_v2, Cgroup};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data).into_owned();
    for v2 in [true, false] {
        let paths = match parse_proc_cgroup(&text, v2) {
            Some(Cgroup::V2(p)) => vec![p],
            Some(Cgroup::V1(list)) => list.into_iter().map(|(_, p)| p).collect(),
            None => Vec::new(),
        };
        for p in paths {
            assert!(p.is_empty() || p.split('/').all(|e| !e.is_empty() && e != "." && e != ".."), "{p:?}");
        }
    }
    let interfaces = parse_net_dev(&text);
    assert!(interfaces.iter().all(|i| text.contains(&i.name)));
    let info = std::collections::HashMap::from([("info".to_string(), text.clone())]);
    let _ = verbose_info(&info);
    let a = sample_v2(&|_| Some(text.clone()));
    let b = sample_v1(&|_, _| Some(text.clone()));
    let entries = [a, b]
        .into_iter()
        .map(|sample| Entry { sample, network: interfaces.clone(), at_ms: i64::MAX, ..Default::default() })
        .collect();
    let _ = render(&Scrape { entries, now_ms: i64::MIN, ..Default::default() });
});
