//! A pod's health-gated rollback policy (atoll's annotations `atoll.io/rollback-after` and
//! `atoll.io/rollback-max-restarts`, over atoll's config default), checked at validation so a
//! bad value is an error naming the field. The `rollback` stage acts on it.

use super::types::Pod;
use std::time::Duration;

/// On a version run again by rollback: `<uid of the failed version>: <why>`.
pub const ROLLED_BACK_FROM: &str = "atoll.io/rolled-back-from";

pub const AFTER: &str = "atoll.io/rollback-after";
pub const MAX_RESTARTS: &str = "atoll.io/rollback-max-restarts";

/// A changed pod must be Ready at the end of `window` having restarted at most
/// `max_restarts` times within it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Policy {
    pub window: Duration,
    pub max_restarts: u32,
}

/// The default restarts allowed in the window.
pub const DEFAULT_MAX_RESTARTS: u32 = 3;

/// An annotation whose value is wrong: which one, and what is wrong with it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BadAnnotation {
    pub annotation: &'static str,
    pub problem: String,
}

impl std::fmt::Display for BadAnnotation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.annotation, self.problem)
    }
}

/// `pod`'s policy: its annotations over the config's default; `None`: off.
pub fn policy(pod: &Pod, default: Option<Policy>) -> Result<Option<Policy>, BadAnnotation> {
    let a = &pod.metadata.annotations;
    let bad = |annotation, problem| BadAnnotation { annotation, problem };
    let window = match a.get(AFTER) {
        Some(v) => Some(crate::duration::parse_duration(v).map_err(|e| bad(AFTER, e.to_string()))?),
        None => default.map(|d| d.window),
    };
    let Some(window) = window else { return Ok(None) };
    if window < Duration::from_secs(1) || window > Duration::from_secs(24 * 3600) {
        return Err(bad(AFTER, format!("{window:?} is not between 1s and 24h")));
    }
    let max_restarts = match a.get(MAX_RESTARTS) {
        Some(v) => v.trim().parse::<u32>().map_err(|_| bad(MAX_RESTARTS, format!("{v:?} is not a whole number")))?,
        None => default.map_or(DEFAULT_MAX_RESTARTS, |d| d.max_restarts),
    };
    Ok(Some(Policy { window, max_restarts }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_policy_comes_from_annotations_over_the_default() {
        let mut pod = Pod::default();
        assert_eq!(policy(&pod, None).unwrap(), None);
        let d = Policy { window: Duration::from_secs(60), max_restarts: 5 };
        assert_eq!(policy(&pod, Some(d)).unwrap(), Some(d));
        pod.metadata.annotations.insert(AFTER.into(), "2m".into());
        assert_eq!(policy(&pod, None).unwrap(), Some(Policy { window: Duration::from_secs(120), max_restarts: 3 }));
        pod.metadata.annotations.insert(MAX_RESTARTS.into(), "0".into());
        assert_eq!(policy(&pod, Some(d)).unwrap().unwrap().max_restarts, 0);
        pod.metadata.annotations.insert(AFTER.into(), "soon".into());
        assert_eq!(policy(&pod, None).unwrap_err().annotation, "atoll.io/rollback-after");
        pod.metadata.annotations.insert(AFTER.into(), "1000h".into());
        assert!(policy(&pod, None).unwrap_err().problem.contains("not between"));
    }
}
