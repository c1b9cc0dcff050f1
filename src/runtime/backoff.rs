//! Back-off bookkeeping for container restarts (CrashLoopBackOff) and image pulls
//! (ImagePullBackOff), with kubelet's rules (client-go's flowcontrol.Backoff).
//!
//! An entry per key holds the current delay and when it last advanced. A key is "in back-off
//! since" an event (a container's finish, a failed pull) while less than the delay has passed
//! since that event. Advancing doubles the delay up to the cap; an entry whose event comes more
//! than twice the cap after its last advance starts over at the initial delay, which is the
//! "reset after about 10 minutes of running" rule. Time is passed in; nothing here reads a clock.

use std::collections::HashMap;
use std::time::{Duration, SystemTime};

/// kubelet's defaults: 10 s, doubling, capped at 300 s.
pub const DEFAULT_INITIAL: Duration = Duration::from_secs(10);
pub const DEFAULT_MAX: Duration = Duration::from_secs(300);

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Entry {
    delay: Duration,
    last_update: SystemTime,
}

/// Back-off state for a set of keys.
#[derive(Clone, Debug)]
pub struct Backoff {
    initial: Duration,
    max: Duration,
    entries: HashMap<String, Entry>,
}

impl Default for Backoff {
    fn default() -> Self {
        Backoff::new(DEFAULT_INITIAL, DEFAULT_MAX)
    }
}

impl Backoff {
    pub fn new(initial: Duration, max: Duration) -> Backoff {
        Backoff { initial, max: max.max(initial), entries: HashMap::new() }
    }

    fn expired(&self, event: SystemTime, e: &Entry) -> bool {
        event.duration_since(e.last_update).is_ok_and(|d| d > self.max * 2)
    }

    /// New limits (a config reload); entries keep their current delay, capped by the new max.
    pub fn set_limits(&mut self, initial: Duration, max: Duration) {
        self.initial = initial;
        self.max = max.max(initial);
        let cap = self.max;
        for e in self.entries.values_mut() {
            e.delay = e.delay.min(cap);
        }
    }

    /// Whether `key` must still wait after an event at `event`, seen at `now`; if so, how long.
    pub fn remaining(&self, key: &str, event: SystemTime, now: SystemTime) -> Option<Duration> {
        let e = self.entries.get(key)?;
        if self.expired(event, e) {
            return None;
        }
        let since = now.duration_since(event).unwrap_or_default();
        (since < e.delay).then(|| e.delay - since)
    }

    /// Whether `key` must still wait, counting from its last advance (image pulls); if so, how long.
    pub fn remaining_since_update(&self, key: &str, now: SystemTime) -> Option<Duration> {
        let e = self.entries.get(key)?;
        let since = now.duration_since(e.last_update).unwrap_or_default();
        (since < e.delay).then(|| e.delay - since)
    }

    /// Records an attempt after an event at `event`: the first, or one after a long quiet
    /// spell, sets the initial delay; later ones double it up to the cap.
    pub fn advance(&mut self, key: &str, event: SystemTime, now: SystemTime) {
        let delay = match self.entries.get(key) {
            Some(e) if !self.expired(event, e) => (e.delay * 2).min(self.max),
            _ => self.initial,
        };
        self.entries.insert(key.to_string(), Entry { delay, last_update: now });
    }

    /// The current delay of `key`, if it has one.
    pub fn delay(&self, key: &str) -> Option<Duration> {
        self.entries.get(key).map(|e| e.delay)
    }

    /// Forgets keys not advanced for longer than twice the cap (kubelet's periodic GC).
    pub fn gc(&mut self, now: SystemTime) {
        let limit = self.max.saturating_mul(2);
        self.entries.retain(|_, e| now.duration_since(e.last_update).map_or(true, |d| d <= limit));
    }

    pub fn forget(&mut self, key: &str) {
        self.entries.remove(key);
    }

    /// How many keys are remembered.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(secs: u64) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000 + secs)
    }

    /// A container that crashes as soon as it starts: when may each restart happen?
    #[test]
    fn crash_loop_ladder_is_immediate_then_10_20_40_up_to_300() {
        let mut b = Backoff::default();
        let mut now = t(0);
        let mut waits = Vec::new();
        for _ in 0..9 {
            // The container finished at `now`; wait until the back-off allows a restart.
            let finished = now;
            let wait = b.remaining("c", finished, finished).unwrap_or_default();
            waits.push(wait.as_secs());
            now = finished + wait;
            assert_eq!(b.remaining("c", finished, now), None);
            b.advance("c", finished, now);
        }
        assert_eq!(waits, vec![0, 10, 20, 40, 80, 160, 300, 300, 300]);
    }

    #[test]
    fn inside_the_window_the_remaining_wait_shrinks() {
        let mut b = Backoff::default();
        b.advance("c", t(0), t(0));
        assert_eq!(b.remaining("c", t(100), t(100)), Some(Duration::from_secs(10)));
        assert_eq!(b.remaining("c", t(100), t(104)), Some(Duration::from_secs(6)));
        assert_eq!(b.remaining("c", t(100), t(110)), None);
        assert_eq!(b.remaining("other", t(100), t(100)), None);
    }

    #[test]
    fn pull_back_off_counts_from_the_last_failure() {
        let mut b = Backoff::default();
        assert_eq!(b.remaining_since_update("img", t(0)), None);
        b.advance("img", t(0), t(0));
        assert_eq!(b.remaining_since_update("img", t(4)), Some(Duration::from_secs(6)));
        assert_eq!(b.remaining_since_update("img", t(10)), None);
        b.advance("img", t(10), t(10));
        assert_eq!(b.remaining_since_update("img", t(15)), Some(Duration::from_secs(15)));
    }

    #[test]
    fn a_long_run_resets_the_back_off() {
        let mut b = Backoff::default();
        for i in 0..6 {
            b.advance("c", t(i), t(i));
        }
        assert_eq!(b.delay("c"), Some(DEFAULT_MAX));
        // It then ran for more than 2 × 300 s before crashing again: no wait, initial delay.
        assert_eq!(b.remaining("c", t(700), t(700)), None);
        b.advance("c", t(700), t(700));
        assert_eq!(b.delay("c"), Some(DEFAULT_INITIAL));
    }

    #[test]
    fn the_cap_and_initial_delay_are_configurable() {
        let mut b = Backoff::new(Duration::from_millis(100), Duration::from_millis(300));
        b.advance("c", t(0), t(0));
        b.advance("c", t(0), t(0));
        b.advance("c", t(0), t(0));
        assert_eq!(b.delay("c"), Some(Duration::from_millis(300)));
        b.gc(t(1));
        assert_eq!(b.delay("c"), None, "entries idle for more than twice the cap are dropped");
    }
}
