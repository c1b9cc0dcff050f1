//! The probe's decisions, tick by tick, with no clock and no socket.

use super::*;
use crate::pod::types::Probe;
use std::time::Instant;

#[test]
fn timing_has_kubelets_defaults() {
    let t = Timing::of(&Probe::default());
    assert_eq!(
        t,
        Timing {
            initial_delay: Duration::ZERO,
            period: Duration::from_secs(10),
            success_threshold: 1,
            failure_threshold: 3
        }
    );
    let p = Probe {
        initial_delay_seconds: Some(5),
        period_seconds: Some(1),
        success_threshold: Some(2),
        failure_threshold: Some(1),
        ..Default::default()
    };
    let t = Timing::of(&p);
    assert_eq!(
        (t.initial_delay, t.period, t.success_threshold, t.failure_threshold),
        (Duration::from_secs(5), Duration::from_secs(1), 2, 1)
    );
}

#[test]
fn huge_periods_neither_divide_by_zero_nor_overflow() {
    // 2^55 s: as u64 nanoseconds this truncated to a zero divisor.
    let period = Duration::from_secs(1 << 55);
    assert!(jitter("p", "c", Kind::Liveness, period, 7) < period);
    let p = Probe { period_seconds: Some(i64::MAX), initial_delay_seconds: Some(i64::MAX), ..Default::default() };
    let t = Timing::of(&p);
    assert_eq!(t.period, Duration::from_secs(i64::MAX as u64));
    let now = Instant::now();
    assert_eq!(next_tick(now, now, t.period), None);
    assert_eq!(next_tick(now, now, Duration::from_secs(1)), Some(now + Duration::from_secs(1)));
    let late = now + Duration::from_millis(2500);
    assert_eq!(next_tick(now, late, Duration::from_secs(1)), Some(now + Duration::from_secs(3)));
}

#[test]
fn jitter_stays_within_the_period_and_spreads() {
    let period = Duration::from_secs(10);
    let all: Vec<Duration> = (0..20).map(|i| jitter(&format!("p{i}"), "c", Kind::Liveness, period, 7)).collect();
    assert!(all.iter().all(|d| *d < period));
    let distinct: std::collections::HashSet<_> = all.iter().map(|d| d.as_secs()).collect();
    assert!(distinct.len() >= 5, "{all:?}");
    let salted = |salt| jitter("p", "c", Kind::Liveness, period, salt);
    assert_ne!(salted(7), salted(8), "another process spreads them anew");
}

fn timing(initial_delay: u64, success: u32, failure: u32) -> Timing {
    Timing {
        initial_delay: Duration::from_secs(initial_delay),
        period: Duration::from_secs(1),
        success_threshold: success,
        failure_threshold: failure,
    }
}

fn target(id: &str, running: bool, started_at: SystemTime) -> ContainerView {
    ContainerView { container_id: id.into(), running, finished_for_good: false, started_at: Some(started_at) }
}

#[test]
fn a_new_container_resets_and_thresholds_decide_what_is_published() {
    let t0 = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000);
    let mut p = Progress::new(Kind::Readiness, timing(0, 2, 2));
    // No container yet: nothing.
    assert_eq!(p.before(&ContainerView::default(), false, true, t0), (vec![], Then::Wait));
    // A new instance: readiness starts at Failure, then probes.
    assert_eq!(p.before(&target("id1", true, t0), false, true, t0), (vec![ProbeResult::Failure], Then::Attempt));
    assert_eq!(p.after(ProbeResult::Success), None, "one success of two");
    assert_eq!(p.after(ProbeResult::Success), Some(ProbeResult::Success));
    assert_eq!(p.after(ProbeResult::Failure), None);
    assert_eq!(p.after(ProbeResult::Success), None, "a different result starts the count again");
    assert_eq!(p.after(ProbeResult::Failure), None);
    assert_eq!(p.after(ProbeResult::Failure), Some(ProbeResult::Failure));
    assert_eq!(p.after(ProbeResult::Failure), Some(ProbeResult::Failure), "readiness never holds");
    assert_eq!(p.before(&target("id1", true, t0), false, true, t0), (vec![], Then::Attempt));
}

#[test]
fn a_liveness_failure_holds_until_the_container_is_replaced() {
    let t0 = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000);
    let mut p = Progress::new(Kind::Liveness, timing(0, 1, 1));
    assert_eq!(p.before(&target("id1", true, t0), false, true, t0), (vec![ProbeResult::Success], Then::Attempt));
    assert_eq!(p.after(ProbeResult::Failure), Some(ProbeResult::Failure));
    assert_eq!(p.before(&target("id1", true, t0), false, true, t0), (vec![], Then::Wait), "held");
    assert_eq!(p.before(&target("id2", true, t0), false, true, t0), (vec![ProbeResult::Success], Then::Attempt));
    assert_eq!(p.container_id(), "id2");
}

#[test]
fn not_running_deleting_delay_and_startup_gate_the_attempts() {
    let t0 = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000);
    let s = Duration::from_secs;
    // Not running reads Failure; finished for good stops the probe.
    let mut p = Progress::new(Kind::Liveness, timing(0, 1, 3));
    let (published, then) = p.before(&target("id1", false, t0), false, true, t0);
    assert_eq!((published, then), (vec![ProbeResult::Success, ProbeResult::Failure], Then::Wait));
    let gone = ContainerView { finished_for_good: true, ..target("id1", false, t0) };
    assert_eq!(p.before(&gone, false, true, t0), (vec![ProbeResult::Failure], Then::Stop));
    // A deleted pod's liveness and startup read Success and stop; readiness goes on.
    let mut live = Progress::new(Kind::Liveness, timing(0, 1, 3));
    assert_eq!(live.before(&target("id1", true, t0), true, true, t0).1, Then::Stop);
    let mut ready = Progress::new(Kind::Readiness, timing(0, 1, 3));
    assert_eq!(ready.before(&target("id1", true, t0), true, true, t0).1, Then::Attempt);
    // Nothing before initialDelaySeconds.
    let mut p = Progress::new(Kind::Readiness, timing(5, 1, 3));
    assert_eq!(p.before(&target("id1", true, t0), false, true, t0 + s(4)).1, Then::Wait);
    assert_eq!(p.before(&target("id1", true, t0), false, true, t0 + s(5)).1, Then::Attempt);
    // Until the startup probe succeeds only it runs; after, only the others.
    let mut startup = Progress::new(Kind::Startup, timing(0, 1, 3));
    let mut live = Progress::new(Kind::Liveness, timing(0, 1, 3));
    assert_eq!(startup.before(&target("id1", true, t0), false, false, t0).1, Then::Attempt);
    assert_eq!(live.before(&target("id1", true, t0), false, false, t0).1, Then::Wait);
    assert_eq!(startup.before(&target("id1", true, t0), false, true, t0).1, Then::Wait);
    assert_eq!(live.before(&target("id1", true, t0), false, true, t0).1, Then::Attempt);
}
