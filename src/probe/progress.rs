//! A probe's decisions, as a pure state machine (kubelet's probe worker, `worker.go`): at each
//! tick, from what the runtime shows of the container ([`ContainerView`]) and whether the pod is
//! being deleted and its startup probe has succeeded, [`Progress::before`] says what to
//! publish and whether to attempt; [`Progress::after`] counts an attempt's outcome against
//! the thresholds. The task in `probe` does the attempts, the clock and the publishing.

use crate::pod::types::{Container, Probe};
use std::time::{Duration, Instant, SystemTime};

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Kind {
    Startup,
    Liveness,
    Readiness,
}

impl Kind {
    pub fn name(self) -> &'static str {
        match self {
            Kind::Startup => "Startup",
            Kind::Liveness => "Liveness",
            Kind::Readiness => "Readiness",
        }
    }

    pub fn initial(self) -> ProbeResult {
        match self {
            Kind::Startup => ProbeResult::Unknown,
            Kind::Liveness => ProbeResult::Success,
            Kind::Readiness => ProbeResult::Failure,
        }
    }

    pub fn of(self, c: &Container) -> Option<&Probe> {
        match self {
            Kind::Startup => c.startup_probe.as_deref(),
            Kind::Liveness => c.liveness_probe.as_deref(),
            Kind::Readiness => c.readiness_probe.as_deref(),
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ProbeResult {
    Unknown,
    Success,
    Failure,
}

/// A probe's timing, with kubelet's defaults.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Timing {
    pub initial_delay: Duration,
    pub period: Duration,
    pub success_threshold: u32,
    pub failure_threshold: u32,
}

impl Timing {
    /// Validation keeps the fields within int32; the conversions saturate all the same.
    pub fn of(p: &Probe) -> Timing {
        let secs = |v: Option<i64>, default: i64| crate::deadline::secs(v.filter(|s| *s > 0).unwrap_or(default));
        let count = |v: Option<i64>, default: u32| {
            v.filter(|n| *n > 0).map_or(default, |n| u32::try_from(n).unwrap_or(u32::MAX))
        };
        Timing {
            initial_delay: crate::deadline::secs(p.initial_delay_seconds.unwrap_or(0)),
            period: secs(p.period_seconds, 10),
            success_threshold: count(p.success_threshold, 1),
            failure_threshold: count(p.failure_threshold, 3),
        }
    }
}

/// What the runtime shows of one container, as the probes need it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ContainerView {
    pub container_id: crate::cri::ids::ContainerId,
    pub running: bool,
    /// Exited, and the pod's restartPolicy is Never: it will not come back.
    pub finished_for_good: bool,
    pub started_at: Option<SystemTime>,
}

/// What a tick does after [`Progress::before`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Then {
    /// Nothing more this tick.
    Wait,
    /// Run the probe, then tell [`Progress::after`] its outcome.
    Attempt,
    /// The probe is done for good (its container will not come back, or the pod is going).
    Stop,
}

/// One probe's memory between ticks.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Progress {
    kind: Kind,
    timing: Timing,
    container_id: crate::cri::ids::ContainerId,
    /// After a liveness or startup failure, until the container is replaced.
    on_hold: bool,
    last: ProbeResult,
    /// Equal results in a row.
    run: u32,
}

impl Progress {
    pub fn new(kind: Kind, timing: Timing) -> Progress {
        Progress { kind, timing, container_id: Default::default(), on_hold: false, last: kind.initial(), run: 0 }
    }

    /// The container the probe follows (empty before it has one).
    pub fn container_id(&self) -> &crate::cri::ids::ContainerId {
        &self.container_id
    }

    /// A tick: what to publish now (for the container it follows), and what comes next.
    /// `started`: the container has no startup probe, or it has succeeded.
    pub fn before(
        &mut self,
        target: &ContainerView,
        deleting: bool,
        started: bool,
        now: SystemTime,
    ) -> (Vec<ProbeResult>, Then) {
        let mut publish = Vec::new();
        if target.container_id.is_empty() {
            return (publish, Then::Wait);
        }
        if target.container_id != self.container_id {
            // A new instance: the initial result, and no hold.
            self.container_id = target.container_id.clone();
            self.on_hold = false;
            self.last = self.kind.initial();
            self.run = 0;
            publish.push(self.last);
        }
        if self.on_hold {
            return (publish, Then::Wait);
        }
        if !target.running {
            self.last = ProbeResult::Failure;
            self.run = 0;
            publish.push(ProbeResult::Failure);
            return (publish, if target.finished_for_good { Then::Stop } else { Then::Wait });
        }
        if deleting && self.kind != Kind::Readiness {
            publish.push(ProbeResult::Success);
            return (publish, Then::Stop);
        }
        let since_start = target.started_at.and_then(|t| now.duration_since(t).ok()).unwrap_or_default();
        if since_start < self.timing.initial_delay {
            return (publish, Then::Wait);
        }
        // Until the startup probe has succeeded only it runs; after that only the others.
        let turn = match self.kind {
            Kind::Startup => !started,
            Kind::Liveness | Kind::Readiness => started,
        };
        (publish, if turn { Then::Attempt } else { Then::Wait })
    }

    /// An attempt's outcome (an error is not counted: don't call this): the result to publish
    /// once the threshold is reached.
    pub fn after(&mut self, outcome: ProbeResult) -> Option<ProbeResult> {
        if outcome == self.last {
            self.run = self.run.saturating_add(1);
        } else {
            self.last = outcome;
            self.run = 1;
        }
        let threshold = match outcome {
            ProbeResult::Failure => self.timing.failure_threshold,
            _ => self.timing.success_threshold,
        };
        if self.run < threshold {
            return None;
        }
        if outcome == ProbeResult::Failure && self.kind != Kind::Readiness {
            // Hold until the container is replaced: no probe of a container being killed.
            self.on_hold = true;
            self.run = 0;
        }
        Some(outcome)
    }
}

/// The tick after `last` on a fixed schedule of `period`: `last + period`, or if that has
/// passed, the next multiple of `period` after `now`. `None` past the clock's range.
pub fn next_tick(last: Instant, now: Instant, period: Duration) -> Option<Instant> {
    let next = last.checked_add(period)?;
    if next >= now {
        return Some(next);
    }
    let behind = (now - next).as_nanos() % period.as_nanos().max(1);
    now.checked_add(period)?.checked_sub(Duration::from_nanos(u64::try_from(behind).unwrap_or(0)))
}

/// A start delay in [0, period), spread by pod, container, kind and `salt` (the caller's
/// process ID, so a restart spreads them anew) (FNV-1a).
pub fn jitter(pod: &str, container: &str, kind: Kind, period: Duration, salt: u32) -> Duration {
    let mut h = crate::fnv::fnv1a_64(pod.as_bytes());
    for part in [container.as_bytes(), kind.name().as_bytes(), &salt.to_le_bytes()] {
        h = crate::fnv::add_64(h, part);
    }
    // In u128: a period of more than 2^64 ns must not truncate to a zero divisor.
    let nanos = u128::from(h) % period.as_nanos().max(1);
    Duration::from_nanos(u64::try_from(nanos).unwrap_or(u64::MAX))
}

#[cfg(test)]
#[path = "progress_tests.rs"]
mod tests;
