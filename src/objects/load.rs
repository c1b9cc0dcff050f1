//! The intake of one payload: its pods through `pod::load`, its ConfigMaps and Secrets through
//! `decode`, used whole or not at all.

use super::decode;
use super::model::LocalObject;
use crate::pod::{self, Finding, ManifestError, Origin, Policy, Shape, StaticPod};
use std::sync::Arc;

/// What one payload held: pods, local objects and the warnings about either.
#[derive(Clone, Debug, Default)]
pub struct Manifests {
    pub pods: Vec<StaticPod>,
    pub objects: Vec<Arc<LocalObject>>,
    pub warnings: Vec<Finding>,
}

/// The intake of one file or URL payload: the pods through `pod::load`, the ConfigMaps and
/// Secrets beside them through [`decode`]. A payload is used whole or not at all.
pub fn load(
    bytes: &[u8],
    shape: Shape,
    origin: &Origin,
    node: &str,
    policy: Policy,
) -> Result<Manifests, ManifestError> {
    let loaded = pod::load(bytes, shape, origin, node, policy)?;
    let mut warnings = loaded.warnings;
    let mut objects = Vec::with_capacity(loaded.others.len());
    let mut problems = Vec::new();
    let mut seen = std::collections::BTreeSet::new();
    for (prefix, value) in loaded.others {
        match decode::decode(value, &prefix, &origin.to_string(), &mut warnings) {
            Ok(o) => {
                if !seen.insert((o.kind, o.key())) {
                    let path =
                        if prefix.is_empty() { "metadata.name".to_string() } else { format!("{prefix}.metadata.name") };
                    problems.push(Finding::new(&path, format!("duplicate {} {}", o.kind.as_str(), o.key())));
                }
                objects.push(Arc::new(o));
            }
            Err(mut e) => problems.append(&mut e),
        }
    }
    if policy.strict && !warnings.is_empty() {
        problems.extend(warnings.drain(..).map(Finding::strict));
    }
    if !problems.is_empty() {
        return Err(ManifestError { origin: origin.to_string(), problems });
    }
    Ok(Manifests { pods: loaded.pods, objects, warnings })
}
