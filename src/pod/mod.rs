//! The Pod model: what a manifest means to atoll.
//!
//! `types` (serde types for v1 Pod), `quantity` (exact resource quantities), `decode` (bytes →
//! pods, unknown fields reported by path), `defaults` (API-server defaulting), `validate`
//! (kubelet's checks and the static-pod restrictions), `identity` (static pod name, UID and
//! annotations). [`load`] runs them in kubelet's order. Nothing here does I/O: sources hand in
//! bytes and get back pods or errors naming the field.

pub mod decode;
pub mod defaults;
pub mod derived;
pub mod identity;
pub mod paths;
pub mod quantity;
pub mod status;
pub mod types;
pub mod validate;

pub use decode::Shape;
pub use identity::{Origin, StaticPod};
pub use types::Pod;

use std::fmt;

/// One problem or warning about a manifest, at a field path (empty for the whole document).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Finding {
    pub path: String,
    pub message: String,
}

impl Finding {
    pub fn new(path: &str, message: impl Into<String>) -> Finding {
        Finding { path: path.to_string(), message: message.into() }
    }

    pub fn root(message: impl Into<String>) -> Finding {
        Finding::new("", message)
    }
}

impl fmt::Display for Finding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.path.is_empty() {
            write!(f, "{}", self.message)
        } else {
            write!(f, "{}: {}", self.path, self.message)
        }
    }
}

/// A manifest that could not be used: where it came from and everything wrong with it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ManifestError {
    pub origin: String,
    pub problems: Vec<Finding>,
}

impl fmt::Display for ManifestError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, p) in self.problems.iter().enumerate() {
            if i > 0 {
                writeln!(f)?;
            }
            write!(f, "{}: {p}", self.origin)?;
        }
        Ok(())
    }
}

impl std::error::Error for ManifestError {}

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
    pub warnings: Vec<Finding>,
}

/// The whole intake pipeline for one file or URL payload, in kubelet's order: decode,
/// require a name, API defaults, static pod identity (UID over the defaulted content),
/// validation and static-pod restrictions. `node` is the node name (lowercased here).
pub fn load(bytes: &[u8], shape: Shape, origin: &Origin, node: &str, policy: Policy) -> Result<Loaded, ManifestError> {
    let fail = |problems| ManifestError { origin: origin.to_string(), problems };
    let decode::Decoded { pods, warnings, list } = decode::decode(bytes, shape).map_err(fail)?;
    if policy.strict && !warnings.is_empty() {
        let problems =
            warnings.into_iter().map(|w| Finding { message: format!("{} (--strict)", w.message), ..w }).collect();
        return Err(fail(problems));
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
        Ok(Loaded { pods: out, warnings })
    } else {
        Err(fail(problems))
    }
}

/// A change to the desired set of static pods: what the sources' merge sends the engine.
#[derive(Clone, Debug, PartialEq)]
pub enum Change {
    Add(StaticPod),
    Update(StaticPod),
    Remove(StaticPod),
}

impl Change {
    pub fn pod(&self) -> &StaticPod {
        match self {
            Change::Add(p) | Change::Update(p) | Change::Remove(p) => p,
        }
    }
}
