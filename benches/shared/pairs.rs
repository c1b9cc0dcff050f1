//! Paired figures for the replay benchmark: atoll and the replay take turns, so each round's two
//! samples met the same machine (its load, the runtime's store, the disk's state). What atoll
//! adds is taken per pair (the difference, and the ratio) and summed up by the median of the
//! pairs with its 95% interval: the sign test's, from the order statistics (the pairs of ranks
//! k and n+1-k, k = (n+1)/2 - 0.98·√n), which holds whatever the pairs' distribution; none for
//! fewer than six pairs. So a figure carries how far one run of it can be trusted.

#![allow(dead_code)]

use crate::calls::{pct, Timed};
use std::time::Duration;

/// The median of `v` (of the middle two, for an even count) and its 95% interval, if `v` has
/// six values or more.
pub fn median_interval(mut v: Vec<f64>) -> (f64, Option<(f64, f64)>) {
    v.sort_by(|a, b| a.total_cmp(b));
    let n = v.len();
    let median = match n {
        0 => 0.0,
        _ => (v[(n - 1) / 2] + v[n / 2]) / 2.0,
    };
    let k = ((n as f64 + 1.0) / 2.0 - 0.98 * (n as f64).sqrt()).floor();
    let interval = (n >= 6 && k >= 1.0).then(|| (v[k as usize - 1], v[n - k as usize]));
    (median, interval)
}

/// A table row: atoll's times and the replay's (paired round by round), what atoll adds (the
/// median of the pairs' differences and of their ratios, each with its interval), how much of
/// atoll's time no runtime call was in flight, and the CRI calls in each one's window: atoll's
/// (the median count of the calls that began and ended in it, whatever they were for) and the
/// replay's (the recording's: the calls made for the pod).
pub fn row(what: &str, atoll: &[Timed], replay: &[Duration], replay_calls: usize) -> String {
    let took: Vec<Duration> = atoll.iter().map(|t| t.took).collect();
    let outside: Vec<Duration> = atoll.iter().map(|t| t.outside).collect();
    let pairs = || took.iter().zip(replay).map(|(a, r)| (a.as_secs_f64(), r.as_secs_f64()));
    let (add, adds) = median_interval(pairs().map(|(a, r)| (a - r) * 1e3).collect());
    let (ratio, ratios) = median_interval(pairs().map(|(a, r)| a / r).collect());
    let interval = |i: Option<(f64, f64)>, f: &dyn Fn(f64) -> String| {
        i.map_or_else(|| "[n/a]".to_string(), |(lo, hi)| format!("[{}, {}]", f(lo), f(hi)))
    };
    let adds = interval(adds, &|x| format!("{x:+.1}"));
    let ratios = interval(ratios, &|x| format!("{x:.3}"));
    let mut calls: Vec<usize> = atoll.iter().map(|t| t.calls).collect();
    calls.sort();
    let calls = calls.get(calls.len() / 2).copied().unwrap_or(0);
    let ms1 = |d: Duration| format!("{:.1} ms", d.as_secs_f64() * 1e3);
    format!(
        "| {what} | {} / {} | {} / {} | {add:+.1} ms {adds} | {} / {} | {calls} / {replay_calls} | {ratio:.3} {ratios} |",
        ms1(pct(&took, 50)),
        ms1(pct(&took, 90)),
        ms1(pct(replay, 50)),
        ms1(pct(replay, 90)),
        ms1(pct(&outside, 50)),
        ms1(pct(&outside, 90)),
    )
}

/// The table's head.
pub const HEAD: &str = "| measurement | atoll, median / p90 | replay, median / p90 | atoll adds: median of the pairs [95%] | atoll with no runtime call in flight | CRI calls in the window, atoll (any) / replay (the pod's) | ratio: median of the pairs [95%] |\n|---|---|---|---|---|---|---|";
