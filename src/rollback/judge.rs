//! The pure part of health-gated rollback: what a trial's pod shows decides whether the new
//! version stays, is rolled back, or is still on trial (the policy is the pod's, `pod::rollback_policy`).

use std::time::Duration;

pub use crate::pod::rollback_policy::{policy, Policy, AFTER, DEFAULT_MAX_RESTARTS, MAX_RESTARTS};

/// What the pod on trial shows now.
#[derive(Clone, Copy, Debug, Default)]
pub struct Seen {
    pub ready: bool,
    /// Restarts of its containers since the trial began.
    pub restarts: u32,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    OnTrial,
    Keep,
    RollBack(String),
}

/// The verdict on a trial `elapsed` into its window.
pub fn judge(policy: Policy, elapsed: Duration, seen: Seen) -> Verdict {
    if seen.restarts > policy.max_restarts {
        return Verdict::RollBack(format!(
            "restarted {} times within {:?} (at most {} allowed)",
            seen.restarts, policy.window, policy.max_restarts
        ));
    }
    if elapsed < policy.window {
        return Verdict::OnTrial;
    }
    if seen.ready {
        Verdict::Keep
    } else {
        Verdict::RollBack(format!("not Ready within {:?}", policy.window))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_trial_ends_ready_at_its_window_or_early_on_restarts() {
        let p = Policy { window: Duration::from_secs(90), max_restarts: 2 };
        let s = |ready, restarts| Seen { ready, restarts };
        assert_eq!(judge(p, Duration::from_secs(10), s(true, 0)), Verdict::OnTrial);
        assert_eq!(judge(p, Duration::from_secs(10), s(false, 2)), Verdict::OnTrial);
        assert_eq!(
            judge(p, Duration::from_secs(10), s(false, 3)),
            Verdict::RollBack("restarted 3 times within 90s (at most 2 allowed)".into())
        );
        assert_eq!(judge(p, Duration::from_secs(90), s(true, 1)), Verdict::Keep);
        assert_eq!(judge(p, Duration::from_secs(91), s(false, 0)), Verdict::RollBack("not Ready within 90s".into()));
    }
}
