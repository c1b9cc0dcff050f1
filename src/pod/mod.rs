//! The Pod model: what a manifest means to atoll.
//!
//! `types` (serde types for v1 Pod; `refs` the parts that name local ConfigMaps and Secrets,
//! `security` the security profiles), `status` (the v1 PodStatus types), `quantity` (exact
//! resource quantities), `decode` (bytes
//! → pods, unknown fields reported by path through `schema`, the Pod's shape; `fields`: the
//! unimplemented fields that are errors), `defaults` (API-server defaulting), `validate`
//! (kubelet's checks and the static-pod restrictions), `identity` (static pod name, [`PodUid`] and annotations),
//! `finding` (what is wrong, by field; `invalid` why a value breaks a rule, in kubelet's words). `load` runs them in kubelet's order ([`load()`]).
//! `paths` is the one way a name becomes a path; `derived` holds what follows from a spec
//! (QoS class, `$(VAR)` expansion, named ports); `references` lists every object a pod names;
//! `order` and `rollback_policy` read atoll's start-ordering and rollback annotations;
//! `apparmor` the profile each container runs with and kubelet's admission check for it.
//! Nothing here does I/O (but `apparmor::host_enabled`, one read of the kernel's flag):
//! sources hand in bytes and get back pods or errors naming the field.

/// A v1 API struct: camelCase fields, comparable, serialisable back to the same JSON, and
/// read by `de`'s table decoder: each field's JSON name (camelCase, or its `rename`; none for
/// `skip`) and one assignment per field, instead of serde's derived visitor (whose code per
/// type was most of the Pod decoder's size). Every field has a default.
macro_rules! api_struct {
    ($(#[$m:meta])* pub struct $name:ident { $($(#[$($fa:tt)*])* pub $f:ident : $t:ty),* $(,)? }) => {
        $(#[$m])*
        #[derive(Clone, Debug, Default, PartialEq, Serialize)]
        #[serde(rename_all = "camelCase")]
        pub struct $name { $($(#[$($fa)*])* pub $f: $t),* }

        impl $crate::pod::de::Table for $name {
            const NAME: &'static str = stringify!($name);
            const ALL: &'static [Option<&'static str>] = &[$(json_name!($f $($($fa)*)*)),*];
            const FIELDS: &'static [&'static str] = {
                const ALL: &[Option<&str>] = <$name as $crate::pod::de::Table>::ALL;
                const NAMES: [&str; $crate::pod::de::count(ALL)] = $crate::pod::de::named(ALL);
                &NAMES
            };
            fn set(&mut self, i: usize, v: serde_json::Value) -> Result<(), serde_json::Error> {
                let mut i = i;
                $(if i == 0 {
                    return $crate::pod::de::assign(&mut self.$f, v);
                }
                i -= 1;)*
                let _ = i;
                Ok(())
            }
            fn set_from<'de, A: serde::de::MapAccess<'de>>(&mut self, key: &str, map: &mut A) -> Result<(), A::Error> {
                $(if json_name!($f $($($fa)*)*) == Some(key) {
                    self.$f = map.next_value()?;
                    return Ok(());
                })*
                map.next_value::<serde::de::IgnoredAny>().map(drop)
            }
        }

        impl $crate::pod::de::Field for $name {
            fn take(v: serde_json::Value) -> Result<Self, serde_json::Error> {
                $crate::pod::de::table(v)
            }
        }

        impl<'de> serde::Deserialize<'de> for $name {
            fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                let fields = <Self as $crate::pod::de::Table>::FIELDS;
                d.deserialize_struct(stringify!($name), fields, $crate::pod::de::Struct::<Self>::new())
            }
        }
    };
}

/// A field's JSON name from its attributes, as serde's derive names it: `None` for `skip`,
/// the `rename`, else the field's name in camelCase.
macro_rules! json_name {
    ($f:ident) => {{
        const S: &str = {
            const B: [u8; $crate::pod::de::camel_len(stringify!($f))] = $crate::pod::de::camel(stringify!($f));
            match core::str::from_utf8(&B) {
                Ok(s) => s,
                Err(_) => panic!("a field name is ASCII"),
            }
        };
        Some(S)
    }};
    ($f:ident skip $($rest:tt)*) => { None::<&'static str> };
    ($f:ident rename = $n:literal $($rest:tt)*) => { Some($n) };
    ($f:ident ($($inner:tt)*) $($rest:tt)*) => { json_name!($f $($inner)* $($rest)*) };
    ($f:ident $other:tt $($rest:tt)*) => { json_name!($f $($rest)*) };
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
pub mod invalid;
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
pub use identity::{Origin, PodKey, PodUid, StaticPod};
pub use invalid::Invalid;
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
