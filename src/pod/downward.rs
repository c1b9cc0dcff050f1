//! The downward API's serde types, in the API's shape (`types` re-exports them): the field and
//! resource selectors of env (`fieldRef`, `resourceFieldRef`) and of `downwardAPI` volumes and
//! projections. What they resolve to is `fieldpath`'s; the files are written by
//! `runtime::volumes::object_volumes`.

use super::quantity::Quantity;
use serde::Serialize;

api_struct! {
    pub struct ObjectFieldSelector {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub api_version: Option<String>,
        #[serde(default)]
        pub field_path: String,
    }
}

api_struct! {
    pub struct ResourceFieldSelector {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub container_name: Option<String>,
        #[serde(default)]
        pub resource: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub divisor: Option<Quantity>,
    }
}

api_struct! {
    /// A `downwardAPI` volume.
    pub struct DownwardAPIVolumeSource {
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        pub items: Vec<DownwardAPIVolumeFile>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub default_mode: Option<i64>,
    }
}

api_struct! {
    /// A `downwardAPI` source of a projected volume (the volume's `defaultMode` applies).
    pub struct DownwardAPIProjection {
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        pub items: Vec<DownwardAPIVolumeFile>,
    }
}

api_struct! {
    /// One file: a field of the pod (`fieldRef`) or a container's resource (`resourceFieldRef`).
    pub struct DownwardAPIVolumeFile {
        #[serde(default)]
        pub path: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub field_ref: Option<ObjectFieldSelector>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub resource_field_ref: Option<ResourceFieldSelector>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub mode: Option<i64>,
    }
}
