//! A worker's verdicts on its pod's life, as pure functions: whether the pod may run here at
//! all (its runtime class, one rule for the worker and the sync), whether it has been active
//! longer than `activeDeadlineSeconds`, when it started, and what a pod that failed for good
//! shows in its status (phase Failed, kubelet's reason and message).

use crate::node::observed::Observed;
use crate::pod::status::PodStatus;
use crate::pod::types::Pod;
use std::time::{Duration, SystemTime};

/// Why the pod failed for good, for its status.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Failure {
    pub reason: &'static str,
    pub message: String,
}

/// The CRI handler the pod's runtime class names (none for the runtime's default), or why the
/// pod cannot run on this node. `lookup` is the runtime class table.
pub fn runtime_handler(pod: &Pod, lookup: impl Fn(&str) -> Option<String>) -> Result<String, Failure> {
    let Some(class) = &pod.spec.runtime_class_name else { return Ok(String::new()) };
    lookup(class).ok_or_else(|| Failure {
        reason: "RuntimeClassNotFound",
        message: format!(
            "RuntimeClass {class:?} is not configured on this node (add it to runtimeClasses in atoll's config)"
        ),
    })
}

/// Where the pod stands against its `activeDeadlineSeconds`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Deadline {
    /// No deadline.
    None,
    /// This long is left.
    Left(Duration),
    /// Passed: the pod is stopped for good.
    Passed { event: String, failure: Failure },
}

/// The pod's deadline, counted from `start` (see [`started`]) to `now`.
pub fn active_deadline(pod: &Pod, start: SystemTime, now: SystemTime) -> Deadline {
    let Some(seconds) = pod.spec.active_deadline_seconds else { return Deadline::None };
    let limit = crate::deadline::secs(seconds);
    let active = now.duration_since(start).unwrap_or_default();
    if active < limit {
        return Deadline::Left(limit - active);
    }
    Deadline::Passed {
        event: format!("active longer than activeDeadlineSeconds ({limit:?}); stopping it"),
        failure: Failure {
            reason: "DeadlineExceeded",
            message: "Pod was active on the node longer than the specified deadline".into(),
        },
    }
}

/// When the pod started: when its first sandbox did (so a restart of atoll does not reset
/// activeDeadlineSeconds), or when this worker first saw it.
pub fn started(obs: &Observed, first_seen: SystemTime) -> SystemTime {
    obs.sandboxes
        .iter()
        .filter_map(|s| u64::try_from(s.created_at).ok().filter(|t| *t > 0))
        .min()
        .map_or(first_seen, |ns| SystemTime::UNIX_EPOCH + Duration::from_nanos(ns))
}

/// A pod that failed for good shows it: phase Failed, with the reason and message.
pub fn show_failure(status: &mut PodStatus, failure: &Failure) {
    status.phase = "Failed".into();
    status.reason = Some(failure.reason.into());
    status.message = Some(failure.message.clone());
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::node::observed::SandboxObs;

    fn pod(class: Option<&str>, deadline: Option<i64>) -> Pod {
        let mut p = Pod::default();
        p.spec.runtime_class_name = class.map(String::from);
        p.spec.active_deadline_seconds = deadline;
        p
    }

    #[test]
    fn a_runtime_class_must_be_in_the_table() {
        let table = |c: &str| (c == "gvisor").then(|| "runsc".to_string());
        assert_eq!(runtime_handler(&pod(None, None), table), Ok(String::new()));
        assert_eq!(runtime_handler(&pod(Some("gvisor"), None), table), Ok("runsc".into()));
        let f = runtime_handler(&pod(Some("kata"), None), table).unwrap_err();
        assert_eq!(f.reason, "RuntimeClassNotFound");
        assert!(f.message.starts_with("RuntimeClass \"kata\" is not configured"), "{}", f.message);
    }

    #[test]
    fn the_deadline_counts_from_the_start_and_passes_once_reached() {
        let t0 = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000);
        let s = Duration::from_secs;
        assert_eq!(active_deadline(&pod(None, None), t0, t0 + s(99)), Deadline::None);
        assert_eq!(active_deadline(&pod(None, Some(60)), t0, t0 + s(20)), Deadline::Left(s(40)));
        let passed = active_deadline(&pod(None, Some(60)), t0, t0 + s(60));
        assert!(matches!(&passed, Deadline::Passed { failure, .. } if failure.reason == "DeadlineExceeded"));
        // A clock that went back counts as no time; a huge deadline never overflows.
        assert_eq!(active_deadline(&pod(None, Some(60)), t0, t0 - s(5)), Deadline::Left(s(60)));
        assert!(matches!(active_deadline(&pod(None, Some(i64::MAX)), t0, t0 + s(1)), Deadline::Left(_)));
    }

    #[test]
    fn the_start_is_the_first_sandbox_else_first_seen_and_a_failure_shows() {
        let seen = SystemTime::UNIX_EPOCH + Duration::from_secs(500);
        let mut obs = Observed::default();
        assert_eq!(started(&obs, seen), seen);
        for created_at in [3_000_000_000i64, 2_000_000_000, 0, -5] {
            let id = created_at.to_string();
            obs.sandboxes.push(SandboxObs {
                id,
                attempt: 0,
                ready: true,
                ip: String::new(),
                host_network: false,
                created_at,
                pid: None,
            });
        }
        assert_eq!(started(&obs, seen), SystemTime::UNIX_EPOCH + Duration::from_secs(2));
        let mut status = PodStatus { phase: "Running".into(), ..Default::default() };
        show_failure(&mut status, &Failure { reason: "DeadlineExceeded", message: "m".into() });
        assert_eq!((status.phase.as_str(), status.reason.as_deref()), ("Failed", Some("DeadlineExceeded")));
    }
}
