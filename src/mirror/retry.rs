//! How the mirror fails and waits: the back-off (1 s doubling to 60 s, jittered, Retry-After
//! honoured and spread), which answers are worth retrying, and the content types of its
//! requests.

use super::wire::Reply;
use std::time::{Duration, Instant, SystemTime};

/// Failure back-off: 1 s doubling to 60 s (the lease's: 200 ms doubling to 7 s), each wait
/// jittered to 50–100 %, a `Retry-After` honoured (up to 5 minutes).
#[derive(Debug)]
pub(super) struct Retry {
    delay: Duration,
    pub(super) until: Option<Instant>,
    first: Duration,
    max: Duration,
}

impl Default for Retry {
    fn default() -> Retry {
        Retry { delay: Duration::ZERO, until: None, first: Self::FIRST, max: Self::MAX }
    }
}

impl Retry {
    const FIRST: Duration = Duration::from_secs(1);
    const MAX: Duration = Duration::from_secs(60);
    const MAX_RETRY_AFTER: Duration = Duration::from_secs(300);

    /// The lease's: kubelet's lease controller (component-helpers' lease/controller.go) retries
    /// within its renew interval, 200 ms doubling to 7 s, so a node is renewed within 7 s of
    /// the server answering again, however long it was away. Each wait is jittered here too:
    /// a fleet does not redial in step, and the 7 s bound holds.
    pub(super) fn lease() -> Retry {
        Retry { first: Duration::from_millis(200), max: Duration::from_secs(7), ..Retry::default() }
    }

    pub(super) fn fail(&mut self, retry_after: Option<Duration>) -> Duration {
        self.delay = if self.delay.is_zero() { self.first } else { self.delay.saturating_mul(2).min(self.max) };
        let mut wait = jitter(self.delay);
        if let Some(ra) = retry_after {
            wait = wait.max(self::retry_after(ra));
        }
        self.until = Some(Instant::now() + wait);
        wait
    }

    /// Whether the last request failed too.
    pub(super) fn failing(&self) -> bool {
        !self.delay.is_zero()
    }

    pub(super) fn ok(&mut self) {
        self.delay = Duration::ZERO;
        self.until = None;
    }

    pub(super) fn waiting(&self) -> bool {
        self.until.is_some_and(|u| Instant::now() < u)
    }
}

/// How long a `Retry-After` of `ra` keeps a node waiting: at least that (up to 5 minutes),
/// and up to half as long again at random, so a fleet told the same number at the same moment
/// (APF answers 429s with `Retry-After: 1`) does not come back in step.
pub(super) fn retry_after(ra: Duration) -> Duration {
    let ra = ra.min(Retry::MAX_RETRY_AFTER);
    ra + jitter(ra) - ra / 2
}

/// `d` scaled to a pseudo-random 50–100 % (spreads a fleet's retries after an outage).
pub(super) fn jitter(d: Duration) -> Duration {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(SystemTime::now().duration_since(SystemTime::UNIX_EPOCH).unwrap_or_default().as_nanos());
    let frac = 0.5 + (h.finish() % 1000) as f64 / 2000.0;
    d.mul_f64(frac)
}

/// Whether an answer means "try again later" (server trouble) rather than "no".
pub(super) fn transient(r: &Reply) -> bool {
    r.status == 429 || r.status >= 500
}

pub(super) const SMP: &str = "application/strategic-merge-patch+json";
pub(super) const JSON: &str = "application/json";

pub(super) type Failure = (String, Option<Duration>);

/// A request that failed is a failure of the loop that sent it, with no wait asked for.
impl From<super::error::Error> for Failure {
    fn from(e: super::error::Error) -> Self {
        (e.to_string(), None)
    }
}

pub(super) fn fail_of(what: &str, r: &Reply) -> Failure {
    (format!("{what}: {}", r.describe()), r.retry_after)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::Value;

    #[test]
    fn back_off_doubles_jitters_caps_honours_retry_after_and_resets() {
        let mut b = Retry::default();
        assert!(!b.waiting());
        let mut last = Duration::ZERO;
        for n in 0..10 {
            let wait = b.fail(None);
            let delay = Retry::FIRST * 2u32.pow(n).min(60);
            let delay = delay.min(Retry::MAX);
            assert!(wait >= delay / 2 && wait <= delay, "try {n}: {wait:?} for {delay:?}");
            last = wait;
        }
        assert!(last <= Retry::MAX && b.waiting());
        b.ok();
        assert!(!b.waiting());
        // Retry-After wins over a shorter back-off, up to its own cap, spread by up to half.
        let wait = b.fail(Some(Duration::from_secs(30)));
        assert!(wait >= Duration::from_secs(30) && wait <= Duration::from_secs(45), "{wait:?}");
        let wait = b.fail(Some(Duration::from_secs(3600)));
        assert!(wait >= Retry::MAX_RETRY_AFTER && wait <= Retry::MAX_RETRY_AFTER * 3 / 2, "{wait:?}");
    }

    #[test]
    fn the_lease_retries_within_kubelets_renew_interval() {
        let mut b = Retry::lease();
        assert!(!b.failing());
        let waits: Vec<Duration> = (0..40).map(|_| b.fail(None)).collect();
        assert!(b.failing());
        // 200 ms doubling (each wait 50–100 % of it) to 7 s, and never past it: after an outage of
        // any length the lease is tried again within 7 s of the server answering.
        for (n, wait) in waits.iter().enumerate() {
            let delay = (Duration::from_millis(200) * 2u32.pow(n.min(6) as u32)).min(Duration::from_secs(7));
            assert!(*wait >= delay / 2 && *wait <= delay, "try {n}: {wait:?} for {delay:?}");
        }
        assert!(waits.iter().all(|w| *w <= Duration::from_secs(7)));
        // A Retry-After still holds it.
        assert!(b.fail(Some(Duration::from_secs(30))) >= Duration::from_secs(30));
        b.ok();
        assert!(!b.failing() && !b.waiting());
        assert!(b.fail(None) <= Duration::from_millis(200), "from the start again");
    }

    #[test]
    fn transient_answers_are_5xx_and_429() {
        let r = |status| Reply { status, body: Value::Null, retry_after: None };
        assert!(transient(&r(429)) && transient(&r(500)) && transient(&r(503)));
        assert!(!transient(&r(403)) && !transient(&r(422)) && !transient(&r(409)));
    }
}
