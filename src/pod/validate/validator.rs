//! The validator's state and its small tools: the problems found so far, and how a problem,
//! an enumerated value and a numeric range are reported (each naming the field).

use crate::pod::finding::Finding;

#[derive(Default)]
pub(super) struct Validator {
    pub(super) problems: Vec<Finding>,
    /// The pod's terminationGracePeriodSeconds (a sleep hook may not outlast it).
    pub(super) grace: i64,
    /// A pod the API server bound to the node, not a static pod.
    pub(super) bound: bool,
}

/// The API's int32 fields (probe timings, activeDeadlineSeconds, user and group IDs) are
/// limited to this; atoll's types are wider, so it checks.
pub(super) const INT32_MAX: i64 = i32::MAX as i64;

impl Validator {
    pub(super) fn err(&mut self, path: impl AsRef<str>, msg: impl Into<String>) {
        self.problems.push(Finding::new(path.as_ref(), msg));
    }

    pub(super) fn one_of(&mut self, path: &str, value: Option<&str>, allowed: &[&str]) {
        if let Some(v) = value {
            if !allowed.contains(&v) {
                self.err(path, format!("unsupported value {v:?}: must be one of {}", allowed.join(", ")));
            }
        }
    }

    /// `value` must lie in `min..=max`; the error names the field and the range.
    pub(super) fn range(&mut self, path: &str, value: Option<i64>, min: i64, max: i64) {
        match value {
            Some(v) if v < min || v > max => self.err(path, format!("{v} must be between {min} and {max}")),
            _ => {}
        }
    }
}
