//! The relist's heartbeat: when the node-wide look at the runtime last completed, and whether
//! the runtime answered it. One reading of "is the agent's sync loop alive and the runtime
//! up" for `/healthz`, the watchdog, `/metrics` and the Node's Ready condition.

use std::sync::Mutex;
use std::time::{Duration, Instant};

/// The sync loop counts as stalled when the relist has not completed for this long, or for
/// three of its periods when that is longer.
pub const STALL_AFTER: Duration = Duration::from_secs(30);

#[derive(Debug, Default)]
pub struct Heartbeat(Mutex<Beat>);

#[derive(Debug, Default)]
struct Beat {
    last: Option<(Instant, bool)>,
    /// The relist's period when it last completed.
    period: Duration,
}

impl Heartbeat {
    /// A relist completed at `at`; `ok` if the runtime answered it; the next is due within
    /// `period`.
    pub fn beat(&self, at: Instant, ok: bool, period: Duration) {
        *crate::locks::lock(&self.0) = Beat { last: Some((at, ok)), period };
    }

    /// When the relist last completed and whether the runtime answered (None before the first).
    pub fn last(&self) -> Option<(Instant, bool)> {
        crate::locks::lock(&self.0).last
    }

    /// How long the relist may take before the loop counts as stalled.
    fn limit(&self) -> Duration {
        STALL_AFTER.max(crate::locks::lock(&self.0).period.saturating_mul(3))
    }

    /// Whether the runtime answered the last relist.
    pub fn runtime_up(&self) -> bool {
        self.last().is_some_and(|(_, ok)| ok)
    }

    /// The Node's Ready: by the same measure as `/healthz`, and only once the runtime has
    /// answered; else why not.
    pub fn ready(&self) -> Result<(), NotReady> {
        match self.last() {
            Some((at, true)) if at.elapsed() <= self.limit() => Ok(()),
            Some((_, false)) => Err(NotReady::RuntimeDown),
            Some((at, true)) => Err(NotReady::Stalled(at.elapsed())),
            None => Err(NotReady::NotYet),
        }
    }

    /// `None` while the loop is alive, else why not; `started` is when the agent started (it
    /// has [`STALL_AFTER`] to complete its first relist).
    pub fn stalled(&self, started: Instant) -> Option<String> {
        match self.last() {
            Some((at, _)) if at.elapsed() <= self.limit() => None,
            Some((at, _)) => Some(format!("sync loop stalled: the last relist completed {:?} ago", at.elapsed())),
            None if started.elapsed() <= STALL_AFTER => None,
            None => Some(format!("sync loop stalled: no relist completed in {:?}", started.elapsed())),
        }
    }
}

/// Why the Node is not Ready (its condition's message).
#[derive(Debug, PartialEq, Eq)]
pub enum NotReady {
    /// The runtime did not answer the last relist.
    RuntimeDown,
    /// The last relist completed this long ago.
    Stalled(Duration),
    /// No relist has completed yet.
    NotYet,
}

impl std::fmt::Display for NotReady {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            NotReady::RuntimeDown => f.write_str("container runtime is down"),
            NotReady::Stalled(d) => write!(f, "the pod sync loop has not completed for {d:?}"),
            NotReady::NotYet => f.write_str("the pod sync loop has not completed yet"),
        }
    }
}

impl std::error::Error for NotReady {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_relist_older_than_the_limit_is_a_stall() {
        let h = Heartbeat::default();
        let now = Instant::now();
        assert_eq!(h.stalled(now), None, "just started");
        assert!(h.stalled(now - Duration::from_secs(45)).unwrap().contains("no relist completed"));
        let s = Duration::from_secs(1);
        h.beat(Instant::now(), true, s);
        assert_eq!(h.stalled(now), None);
        assert!(h.runtime_up());
        h.beat(Instant::now() - Duration::from_secs(45), false, s);
        let why = h.stalled(now).expect("stalled");
        assert!(why.starts_with("sync loop stalled: the last relist completed"), "{why}");
        assert!(!h.runtime_up());
        assert_eq!(h.ready(), Err(NotReady::RuntimeDown));
        assert_eq!(NotReady::RuntimeDown.to_string(), "container runtime is down");
        h.beat(Instant::now(), true, s);
        assert_eq!(h.ready(), Ok(()));
        // A relist every minute (relistPeriod) is not stalled after 45 s, only after three.
        h.beat(Instant::now() - Duration::from_secs(45), true, Duration::from_secs(60));
        assert_eq!(h.stalled(now), None);
        h.beat(Instant::now() - Duration::from_secs(200), true, Duration::from_secs(60));
        assert!(h.stalled(now).is_some());
    }
}
