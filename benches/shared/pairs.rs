//! Paired figures for the replay benchmark: atoll and the replay take turns, so each round's two
//! samples met the same machine (its load, the runtime's store, the disk's state). What atoll
//! adds is taken per pair (the difference, and the ratio) and summed up by the median of the
//! pairs with a 95% interval from the order statistics (distribution-free: the pairs' ranks
//! n/2 ± 0.98·√n), so a figure carries how far one run of it can be trusted.

#![allow(dead_code)]

use crate::calls::{pct, Timed};
use std::time::Duration;

/// The median of `v` and its 95% interval (the values at ranks n/2 ± 0.98·√n); zeros if empty.
pub fn median_interval(mut v: Vec<f64>) -> (f64, f64, f64) {
    v.sort_by(|a, b| a.total_cmp(b));
    let n = v.len() as f64;
    let half = 0.98 * n.sqrt();
    let at = |rank: f64| v.get((rank.max(0.0) as usize).min(v.len().saturating_sub(1))).copied().unwrap_or(0.0);
    (at(n / 2.0), at((n / 2.0 - half).floor()), at((n / 2.0 + half).ceil()))
}

/// A table row: atoll's times and the replay's (paired round by round), what atoll adds (the
/// median of the pairs' differences and of their ratios, each with its interval), how much of
/// atoll's time no runtime call was in flight, and the CRI calls each made in its window
/// (atoll's median; the replay's are the recording's).
pub fn row(what: &str, atoll: &[Timed], replay: &[Duration], replay_calls: usize) -> String {
    let took: Vec<Duration> = atoll.iter().map(|t| t.took).collect();
    let outside: Vec<Duration> = atoll.iter().map(|t| t.outside).collect();
    let pairs = || took.iter().zip(replay).map(|(a, r)| (a.as_secs_f64(), r.as_secs_f64()));
    let (add, add_lo, add_hi) = median_interval(pairs().map(|(a, r)| (a - r) * 1e3).collect());
    let (ratio, ratio_lo, ratio_hi) = median_interval(pairs().map(|(a, r)| a / r).collect());
    let calls = pct(&atoll.iter().map(|t| Duration::from_secs(t.calls as u64)).collect::<Vec<_>>(), 50).as_secs();
    let ms1 = |d: Duration| format!("{:.1} ms", d.as_secs_f64() * 1e3);
    format!(
        "| {what} | {} / {} | {} / {} | {add:+.1} ms [{add_lo:+.1}, {add_hi:+.1}] | {} / {} | {calls} / {replay_calls} | {ratio:.3} [{ratio_lo:.3}, {ratio_hi:.3}] |",
        ms1(pct(&took, 50)),
        ms1(pct(&took, 90)),
        ms1(pct(replay, 50)),
        ms1(pct(replay, 90)),
        ms1(pct(&outside, 50)),
        ms1(pct(&outside, 90)),
    )
}

/// The table's head.
pub const HEAD: &str = "| measurement | atoll, median / p90 | replay, median / p90 | atoll adds: median of the pairs [95%] | atoll with no runtime call in flight | CRI calls, atoll / replay | ratio: median of the pairs [95%] |\n|---|---|---|---|---|---|---|";
