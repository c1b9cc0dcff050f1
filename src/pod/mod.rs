//! The Pod model: what a manifest means to atoll.
//!
//! `types` (serde types for v1 Pod; `refs` the parts that name local ConfigMaps and Secrets,
//! `security` the security profiles), `status` (the v1 PodStatus types), `quantity` (exact
//! resource quantities), `decode` (bytes
//! → pods, unknown fields reported by path through `schema`, the Pod's shape; `fields`: the
//! unimplemented fields that are errors), `defaults` (API-server defaulting), `validate`
//! (kubelet's checks and the static-pod restrictions), `identity` (static pod name, [`PodUid`] and annotations),
//! `finding` (what is wrong, by field). `load` runs them in kubelet's order ([`load()`]).
//! `paths` is the one way a name becomes a path; `derived` holds what follows from a spec
//! (QoS class, `$(VAR)` expansion, named ports); `references` lists every object a pod names;
//! `order` and `rollback_policy` read atoll's start-ordering and rollback annotations;
//! `apparmor` the profile each container runs with and kubelet's admission check for it.
//! Nothing here does I/O (but `apparmor::host_enabled`, one read of the kernel's flag):
//! sources hand in bytes and get back pods or errors naming the field.

/// A v1 API struct: camelCase fields, comparable, serialisable back to the same JSON.
macro_rules! api_struct {
    ($(#[$m:meta])* pub struct $name:ident { $($body:tt)* }) => {
        $(#[$m])*
        #[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
        #[serde(rename_all = "camelCase")]
        pub struct $name { $($body)* }
    };
}

pub mod affinity;
pub mod apparmor;
pub mod de;
pub mod decode;
pub mod defaults;
pub mod derived;
pub mod downward;
pub mod fieldpath;
pub mod fields;
pub mod finding;
pub mod identity;
pub mod load;
pub mod order;
pub mod paths;
pub mod quantity;
pub mod redact;
pub mod references;
pub mod refs;
pub mod rollback_policy;
pub mod schema;
pub mod security;
pub mod shape;
pub mod status;
pub mod types;
pub mod validate;

pub use decode::Shape;
pub use finding::{Finding, ManifestError};
pub use identity::{Origin, PodUid, StaticPod};
pub use load::{load, Loaded, Policy};
pub use types::Pod;

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
