//! The whole intake pipeline for one file or URL payload, in kubelet's order: decode, require
//! a name, API defaults, static pod identity (the UID over the defaulted content), validation
//! and the static-pod restrictions.

use super::decode::{self, Shape};
use super::finding::{Finding, ManifestError};
use super::identity::{self, Origin, StaticPod};
use super::{defaults, validate};

/// How strictly manifests are read.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Policy {
    /// Fields atoll does not implement are errors instead of warnings.
    pub strict: bool,
}

/// Pods read from one payload, ready for the sources: identity applied, plus the warnings.
#[derive(Clone, Debug)]
pub struct Loaded {
    pub pods: Vec<StaticPod>,
    /// ConfigMaps and Secrets the payload held, undecoded (`objects` reads them), each with
    /// its field path prefix.
    pub others: Vec<(String, serde_json::Value)>,
    pub warnings: Vec<Finding>,
}

/// The whole intake pipeline for one file or URL payload, in kubelet's order: decode,
/// require a name, API defaults, static pod identity (UID over the defaulted content),
/// validation and static-pod restrictions. `node` is the node name (lowercased here).
pub fn load(bytes: &[u8], shape: Shape, origin: &Origin, node: &str, policy: Policy) -> Result<Loaded, ManifestError> {
    let fail = |problems| ManifestError { origin: origin.to_string(), problems };
    let decode::Decoded { pods, others, warnings, list } = decode::decode(bytes, shape).map_err(fail)?;
    if policy.strict && !warnings.is_empty() {
        return Err(fail(warnings.into_iter().map(Finding::strict).collect()));
    }
    let mut out = Vec::with_capacity(pods.len());
    let mut problems = Vec::new();
    for (i, mut pod) in pods.into_iter().enumerate() {
        let prefix = if list { format!("items[{i}].") } else { String::new() };
        if pod.metadata.name.is_empty() {
            problems.push(Finding::new(&format!("{prefix}metadata.name"), "a name is required"));
            continue;
        }
        defaults::apply(&mut pod);
        let sp = identity::make_static(pod, origin, node);
        let errs = validate::validate(&sp.pod);
        if errs.is_empty() {
            out.push(sp);
        } else {
            problems.extend(errs.into_iter().map(|f| Finding { path: format!("{prefix}{}", f.path), ..f }));
        }
    }
    // Two pods of one payload with the same namespace/name: kubelet drops the second.
    let mut seen = std::collections::BTreeSet::new();
    for (i, sp) in out.iter().enumerate() {
        if !seen.insert(sp.pod.key()) {
            problems
                .push(Finding::new(&format!("items[{i}].metadata.name"), format!("duplicate pod {}", sp.pod.key())));
        }
    }
    if problems.is_empty() {
        Ok(Loaded { pods: out, others, warnings })
    } else {
        Err(fail(problems))
    }
}
