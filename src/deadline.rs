//! Time from input, made safe: seconds from a manifest become a [`Duration`] by saturation,
//! an instant that far ahead is `None` rather than an overflow, and a future runs until a
//! deadline. Release builds abort on panic, so no duration taken from a manifest, a config
//! file or a server is ever added to an `Instant` with `+`.

use std::future::Future;
use std::time::{Duration, Instant};

/// Seconds from input as a duration: negative is zero.
pub fn secs(n: i64) -> Duration {
    Duration::from_secs(u64::try_from(n).unwrap_or(0))
}

/// `now + d`, or `None` when that is past what the clock can represent (wait forever).
pub fn after(now: Instant, d: Duration) -> Option<Instant> {
    now.checked_add(d)
}

/// Runs `f` until it finishes or `limit` passes. A limit past the clock's range never passes.
pub async fn with_deadline<F: Future>(limit: Duration, f: F) -> Option<F::Output> {
    smol::future::or(async { Some(f.await) }, async {
        // async-io's Timer::after never fires for an instant it cannot represent.
        smol::Timer::after(limit).await;
        None
    })
    .await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn input_seconds_saturate() {
        assert_eq!(secs(-5), Duration::ZERO);
        assert_eq!(secs(3), Duration::from_secs(3));
        assert_eq!(secs(i64::MAX), Duration::from_secs(i64::MAX as u64));
        assert_eq!(after(Instant::now(), secs(i64::MAX)), None);
        assert!(after(Instant::now(), secs(i32::MAX as i64)).is_some());
    }

    #[test]
    fn a_deadline_ends_a_future_and_a_huge_one_does_not_overflow() {
        let out = smol::block_on(with_deadline(Duration::from_millis(20), smol::future::pending::<()>()));
        assert_eq!(out, None);
        assert_eq!(smol::block_on(with_deadline(Duration::from_secs(5), async { 7 })), Some(7));
        assert_eq!(smol::block_on(with_deadline(Duration::MAX, async { 8 })), Some(8));
    }
}
