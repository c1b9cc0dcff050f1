//! Fuzzes CRI log files as the log endpoints read them (`api::log_lines::Lines`): any bytes,
//! with `since`, `timestamps` and `limitBytes` taken from the input. Beyond not panicking:
//! the output with a byte limit is exactly the first bytes of the output without one, and
//! feeding the file whole or line by line gives the same output.
#![no_main]

use atoll::api::log_lines::Lines;
use libfuzzer_sys::fuzz_target;

fn run(mut l: Lines, pieces: &[&[u8]]) -> Vec<u8> {
    let mut out = Vec::new();
    for p in pieces {
        if l.done() {
            break;
        }
        l.decode(p, &mut out);
    }
    out
}

fuzz_target!(|data: &[u8]| {
    let Some((&opts, log)) = data.split_first() else { return };
    let since = (opts & 1 != 0).then_some(1_795_373_717_000_000_000i128);
    let timestamps = opts & 2 != 0;
    let limit = u64::from(opts >> 2) * 7;
    let whole = run(Lines::new(since, timestamps, None), &[log]);
    let lines: Vec<&[u8]> = log.split_inclusive(|b| *b == b'\n').collect();
    assert_eq!(run(Lines::new(since, timestamps, None), &lines), whole, "line by line");
    let cut = run(Lines::new(since, timestamps, Some(limit)), &lines);
    assert_eq!(cut, whole[..whole.len().min(limit as usize)], "limited to {limit}");
});
