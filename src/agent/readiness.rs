//! The agent's way to systemd's READY=1, as a pure value: the first full sync comes when every
//! source has answered; READY=1 is sent then, or at a deadline if a source (a URL with no
//! cached copy on an offline boot) has not answered by it, so a start timeout never kills the
//! agent in a restart loop while the pods that can run are running.

use std::time::{Duration, Instant};

/// The longest `atoll run` waits for its sources before telling systemd it is ready.
pub const READY_AT_THE_LATEST: Duration = Duration::from_secs(30);

/// What happened on the way to READY=1.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Milestone {
    /// Every source has answered: orphans may go. `notify`: READY=1 is sent now.
    FirstSync { notify: bool },
    /// The deadline passed with a source still silent: READY=1 is sent anyway.
    ReadyLate,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Readiness {
    synced: bool,
    notified: bool,
    by: Instant,
}

impl Readiness {
    pub fn new(now: Instant) -> Readiness {
        Readiness { synced: false, notified: false, by: now + READY_AT_THE_LATEST }
    }

    /// What is reached given whether every source has answered, at `now` (each milestone once).
    pub fn advance(&mut self, all_sources_seen: bool, now: Instant) -> Vec<Milestone> {
        let mut out = Vec::new();
        if !self.synced && all_sources_seen {
            self.synced = true;
            out.push(Milestone::FirstSync { notify: !self.notified });
            self.notified = true;
        }
        if !self.notified && now >= self.by {
            self.notified = true;
            out.push(Milestone::ReadyLate);
        }
        out
    }

    /// Every source has answered once.
    pub fn synced(&self) -> bool {
        self.synced
    }

    /// READY=1 was sent: the watchdog is fed from now on, and the mirror learns the desired
    /// pods (before that, a mirror pod could look orphaned when it is not).
    pub fn notified(&self) -> bool {
        self.notified
    }

    /// When the loop must wake to report ready at the latest, if it still must.
    pub fn deadline(&self) -> Option<Instant> {
        (!self.notified).then_some(self.by)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ready_comes_with_the_first_full_sync_or_at_the_deadline_once() {
        let t0 = Instant::now();
        let mut r = Readiness::new(t0);
        assert_eq!(r.advance(false, t0), []);
        assert_eq!(r.deadline(), Some(t0 + READY_AT_THE_LATEST));
        assert_eq!(r.advance(true, t0 + Duration::from_secs(1)), [Milestone::FirstSync { notify: true }]);
        assert!(r.synced() && r.notified() && r.deadline().is_none());
        assert_eq!(r.advance(true, t0 + Duration::from_secs(60)), [], "each milestone once");

        // A silent source: ready at the deadline, the first sync later without a second READY.
        let mut r = Readiness::new(t0);
        assert_eq!(r.advance(false, t0 + READY_AT_THE_LATEST - Duration::from_millis(1)), []);
        assert_eq!(r.advance(false, t0 + READY_AT_THE_LATEST), [Milestone::ReadyLate]);
        assert!(r.notified() && !r.synced());
        assert_eq!(r.advance(true, t0 + Duration::from_secs(90)), [Milestone::FirstSync { notify: false }]);
        assert_eq!(r.advance(true, t0 + Duration::from_secs(91)), []);
    }
}
