//! When certificates are renewed, as client-go's certificate manager decides it: at a point
//! drawn between 70 and 90 % of the lifetime (a fleet issued at once does not renew at
//! once), and after a failure 2 s doubling five times (up to 10 % more each), then every 32 s.
//! Pure: the randomness comes in as `jitter`, a number in [0, 1).

use std::time::{Duration, SystemTime};

/// The renewal deadline of a certificate valid from `not_before` to `not_after`.
pub fn deadline(not_before: SystemTime, not_after: SystemTime, jitter: f64) -> SystemTime {
    let total = not_after.duration_since(not_before).unwrap_or_default();
    let share = 0.7 + 0.2 * jitter.clamp(0.0, 1.0);
    not_before.checked_add(total.mul_f64(share)).unwrap_or(not_after)
}

/// The wait after the `failures`th failure in a row.
pub fn retry_after(failures: u32, jitter: f64) -> Duration {
    if failures == 0 || failures > 5 {
        return Duration::from_secs(32);
    }
    let base = Duration::from_secs(2u64 << (failures - 1).min(4));
    base.mul_f64(1.0 + 0.1 * jitter.clamp(0.0, 1.0))
}

/// Whether a certificate that ends at `not_after` has expired at `now`.
pub fn expired(not_after: SystemTime, now: SystemTime) -> bool {
    now > not_after
}

#[cfg(test)]
mod tests {
    use super::*;

    const T0: SystemTime = SystemTime::UNIX_EPOCH;

    fn at(s: u64) -> SystemTime {
        T0 + Duration::from_secs(s)
    }

    #[test]
    fn deadlines_fall_between_70_and_90_percent() {
        type Case = (&'static str, u64, u64, f64, u64);
        let cases: &[Case] = &[
            ("no jitter: 70 %", 0, 1000, 0.0, 700),
            ("all the jitter: 90 %", 0, 1000, 1.0, 900),
            ("half: 80 %", 1000, 2000, 0.5, 1800),
            ("jitter out of range is clamped", 0, 1000, 7.0, 900),
            ("ends before it begins: at once", 1000, 10, 0.5, 1000),
        ];
        for (what, from, until, j, want) in cases {
            assert_eq!(deadline(at(*from), at(*until), *j), at(*want), "{what}");
        }
    }

    #[test]
    fn retries_double_five_times_then_every_32_seconds() {
        let secs: Vec<u64> = (1..=7).map(|f| retry_after(f, 0.0).as_secs()).collect();
        assert_eq!(secs, [2, 4, 8, 16, 32, 32, 32]);
        assert_eq!(retry_after(1, 1.0), Duration::from_millis(2200), "up to 10 % more");
        assert!(expired(at(10), at(11)) && !expired(at(10), at(10)));
    }

    /// A fleet of 1,000 whose certificates were issued at once: the deadlines spread over the
    /// window, no tenth of it holding more than 3x the average.
    #[test]
    fn a_fleet_issued_at_once_renews_spread_over_the_window() {
        let mut state = 0x2545_f491_4f6c_dd1du64; // xorshift: a fixed, honest spread
        let mut counts = [0u32; 10];
        for _ in 0..1000 {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            let j = (state >> 11) as f64 / (1u64 << 53) as f64;
            let d = deadline(at(0), at(100_000), j).duration_since(T0).unwrap().as_secs();
            assert!((70_000..=90_000).contains(&d), "{d}");
            counts[((d - 70_000) / 2000).min(9) as usize] += 1;
        }
        assert!(counts.iter().all(|c| *c <= 300), "per tenth of the window: {counts:?}");
        assert!(counts.iter().all(|c| *c > 0), "{counts:?}");
    }
}
