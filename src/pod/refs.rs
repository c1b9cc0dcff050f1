//! The parts of a Pod that name local ConfigMaps and Secrets (atoll's `objects`): the volume
//! sources (`configMap`, `secret`, `projected`), `env[].valueFrom.configMapKeyRef` /
//! `secretKeyRef` and `envFrom`, as serde types in the API's shape (`types` re-exports them;
//! `references` lists what a pod names through them).

use serde::Serialize;
use serde_json::Value;

api_struct! {
    /// One key of an object projected to a file: `path` relative to the volume, `mode` its bits.
    pub struct KeyToPath {
        #[serde(default)]
        pub key: String,
        #[serde(default)]
        pub path: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub mode: Option<i64>,
    }
}

api_struct! {
    pub struct ConfigMapVolumeSource {
        #[serde(default)]
        pub name: String,
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        pub items: Vec<KeyToPath>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub default_mode: Option<i64>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub optional: Option<bool>,
    }
}

api_struct! {
    pub struct SecretVolumeSource {
        #[serde(default)]
        pub secret_name: String,
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        pub items: Vec<KeyToPath>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub default_mode: Option<i64>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub optional: Option<bool>,
    }
}

api_struct! {
    pub struct ProjectedVolumeSource {
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        pub sources: Vec<VolumeProjection>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub default_mode: Option<i64>,
    }
}

api_struct! {
    /// One source of a projected volume: a ConfigMap, a Secret or the downward API; the others
    /// are here so that validation can refuse them by name.
    pub struct VolumeProjection {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub config_map: Option<ObjectProjection>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub secret: Option<ObjectProjection>,
        #[serde(default, rename = "downwardAPI", skip_serializing_if = "Option::is_none")]
        pub downward_api: Option<super::downward::DownwardAPIProjection>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub service_account_token: Option<Value>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub cluster_trust_bundle: Option<Value>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub pod_certificate: Option<Value>,
    }
}

api_struct! {
    pub struct ObjectProjection {
        #[serde(default)]
        pub name: String,
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        pub items: Vec<KeyToPath>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub optional: Option<bool>,
    }
}

api_struct! {
    /// `configMapKeyRef` / `secretKeyRef`.
    pub struct KeySelector {
        #[serde(default)]
        pub name: String,
        #[serde(default)]
        pub key: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub optional: Option<bool>,
    }
}

api_struct! {
    pub struct EnvFromSource {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub prefix: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub config_map_ref: Option<ObjectRef>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub secret_ref: Option<ObjectRef>,
    }
}

api_struct! {
    /// `configMapRef` / `secretRef` of `envFrom`.
    pub struct ObjectRef {
        #[serde(default)]
        pub name: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub optional: Option<bool>,
    }
}
