//! The Kubernetes v1 Pod, as far as atoll reads it: hand-written serde types.
//!
//! Every field here is one atoll implements, or one it must see to refuse it (a Secret volume
//! in a static pod, say). A field that is not here is not silently dropped: the decoder
//! (`decode.rs`) reports it by path as "not implemented". Field names and JSON shapes follow
//! the Kubernetes API exactly, so a pod serialises back to valid v1 JSON (for `/pods` and the
//! mirror pod). Maps are `BTreeMap` so serialisation is canonical.

pub use super::affinity::{Affinity, PodOs};
pub use super::downward::*;
use super::quantity::Quantity;
pub use super::refs::*;
pub use super::security::*;
use serde::Serialize;
use serde_json::Value;
use std::collections::BTreeMap;

/// An integer or a string, as Kubernetes' `IntOrString` (ports by number or name). Read as
/// `#[serde(untagged)]` read it (`pod::de`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(untagged)]
pub enum IntOrString {
    Int(i64),
    Str(String),
}

impl std::fmt::Display for IntOrString {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            IntOrString::Int(i) => write!(f, "{i}"),
            IntOrString::Str(s) => write!(f, "{s}"),
        }
    }
}

api_struct! {
    /// A v1 Pod. `status` is accepted (kubeadm manifests carry `status: {}`) and not used.
    pub struct Pod {
        #[serde(default, skip_serializing_if = "String::is_empty")]
        pub api_version: String,
        #[serde(default, skip_serializing_if = "String::is_empty")]
        pub kind: String,
        #[serde(default)]
        pub metadata: ObjectMeta,
        #[serde(default)]
        pub spec: PodSpec,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub status: Option<Value>,
        /// Read from an age-encrypted file: set by the intake, never by a manifest, and shown
        /// to unprivileged readers and the mirror redacted (`pod::redact`).
        #[serde(skip)]
        pub from_encrypted_file: bool,
    }
}

api_struct! {
    pub struct ObjectMeta {
        #[serde(default, skip_serializing_if = "String::is_empty")]
        pub name: String,
        #[serde(default, skip_serializing_if = "String::is_empty")]
        pub namespace: String,
        #[serde(default, skip_serializing_if = "String::is_empty")]
        pub uid: String,
        #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
        pub labels: BTreeMap<String, String>,
        #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
        pub annotations: BTreeMap<String, String>,
        /// Generated manifests say `creationTimestamp: null`; accepted and not used.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub creation_timestamp: Option<Value>,
    }
}

api_struct! {
    pub struct PodSpec {
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        pub containers: Vec<Container>,
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        pub init_containers: Vec<Container>,
        /// Forbidden on create; kept so validation can say so.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        pub ephemeral_containers: Vec<Value>,
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        pub volumes: Vec<Volume>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub restart_policy: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub termination_grace_period_seconds: Option<i64>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub active_deadline_seconds: Option<i64>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub dns_policy: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub dns_config: Option<PodDnsConfig>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub node_name: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub service_account_name: Option<String>,
        /// Deprecated alias of serviceAccountName; refused like it.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub service_account: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub automount_service_account_token: Option<bool>,
        #[serde(default, skip_serializing_if = "is_false")]
        pub host_network: bool,
        #[serde(default, rename = "hostPID", skip_serializing_if = "is_false")]
        pub host_pid: bool,
        #[serde(default, rename = "hostIPC", skip_serializing_if = "is_false")]
        pub host_ipc: bool,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub share_process_namespace: Option<bool>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub security_context: Option<PodSecurityContext>,
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        pub image_pull_secrets: Vec<Value>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub hostname: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub subdomain: Option<String>,
        #[serde(default, rename = "setHostnameAsFQDN", skip_serializing_if = "Option::is_none")]
        pub set_hostname_as_fqdn: Option<bool>,
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        pub host_aliases: Vec<HostAlias>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub scheduler_name: Option<String>,
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        pub tolerations: Vec<Toleration>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub priority_class_name: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub priority: Option<i32>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub runtime_class_name: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub enable_service_links: Option<bool>,
        /// Forbidden for static pods; kept so validation can say so.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        pub scheduling_gates: Vec<Value>,
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        pub resource_claims: Vec<Value>,
        #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
        pub node_selector: BTreeMap<String, String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub affinity: Option<Affinity>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub os: Option<PodOs>,
        /// What the runtime class costs beside the containers (admission counts it).
        #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
        pub overhead: BTreeMap<String, Quantity>,
        /// Pod-level resources: the pod's cgroup bounds its containers (`runtime::pod_cgroup`).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub resources: Option<ResourceRequirements>,
    }
}

fn is_false(b: &bool) -> bool {
    !*b
}

api_struct! {
    pub struct PodDnsConfig {
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        pub nameservers: Vec<String>,
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        pub searches: Vec<String>,
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        pub options: Vec<PodDnsConfigOption>,
    }
}

api_struct! {
    pub struct PodDnsConfigOption {
        #[serde(default)]
        pub name: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub value: Option<String>,
    }
}

api_struct! {
    pub struct HostAlias {
        #[serde(default)]
        pub ip: String,
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        pub hostnames: Vec<String>,
    }
}

api_struct! {
    pub struct Toleration {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub key: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub operator: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub value: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub effect: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub toleration_seconds: Option<i64>,
    }
}

api_struct! {
    pub struct PodSecurityContext {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub run_as_user: Option<i64>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub run_as_group: Option<i64>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub run_as_non_root: Option<bool>,
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        pub supplemental_groups: Vec<i64>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub fs_group: Option<i64>,
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        pub sysctls: Vec<Sysctl>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub seccomp_profile: Option<SeccompProfile>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub se_linux_options: Option<SeLinuxOptions>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub app_armor_profile: Option<AppArmorProfile>,
    }
}

api_struct! {
    pub struct Sysctl {
        #[serde(default)]
        pub name: String,
        #[serde(default)]
        pub value: String,
    }
}

api_struct! {
    pub struct Container {
        #[serde(default)]
        pub name: String,
        #[serde(default)]
        pub image: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub image_pull_policy: Option<String>,
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        pub command: Vec<String>,
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        pub args: Vec<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub working_dir: Option<String>,
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        pub env: Vec<EnvVar>,
        /// configMapRef/secretRef: local objects only (`objects`).
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        pub env_from: Vec<EnvFromSource>,
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        pub ports: Vec<ContainerPort>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub resources: Option<ResourceRequirements>,
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        pub volume_mounts: Vec<VolumeMount>,
        // Probes, lifecycle hooks and the security context are boxed: most containers have
        // none of them, and inline they made a Container 2 KB, copied in every pod snapshot.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub liveness_probe: Option<Box<Probe>>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub readiness_probe: Option<Box<Probe>>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub startup_probe: Option<Box<Probe>>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub lifecycle: Option<Box<Lifecycle>>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub security_context: Option<Box<SecurityContext>>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub termination_message_path: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub termination_message_policy: Option<String>,
        /// Only on init containers: `Always` makes it a sidecar.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub restart_policy: Option<String>,
        #[serde(default, skip_serializing_if = "is_false")]
        pub stdin: bool,
        #[serde(default, skip_serializing_if = "is_false")]
        pub stdin_once: bool,
        #[serde(default, skip_serializing_if = "is_false")]
        pub tty: bool,
    }
}

api_struct! {
    pub struct EnvVar {
        #[serde(default)]
        pub name: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub value: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub value_from: Option<Box<EnvVarSource>>, // boxed: rare, and 256 bytes inline
    }
}

api_struct! {
    pub struct EnvVarSource {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub field_ref: Option<ObjectFieldSelector>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub resource_field_ref: Option<ResourceFieldSelector>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub secret_key_ref: Option<KeySelector>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub config_map_key_ref: Option<KeySelector>,
    }
}

api_struct! {
    pub struct ContainerPort {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub name: Option<String>,
        #[serde(default)]
        pub container_port: i64,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub host_port: Option<i64>,
        #[serde(default, rename = "hostIP", skip_serializing_if = "Option::is_none")]
        pub host_ip: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub protocol: Option<String>,
    }
}

api_struct! {
    pub struct ResourceRequirements {
        #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
        pub limits: BTreeMap<String, Quantity>,
        #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
        pub requests: BTreeMap<String, Quantity>,
    }
}

api_struct! {
    pub struct VolumeMount {
        #[serde(default)]
        pub name: String,
        #[serde(default)]
        pub mount_path: String,
        #[serde(default, skip_serializing_if = "is_false")]
        pub read_only: bool,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub sub_path: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub mount_propagation: Option<String>,
    }
}

api_struct! {
    pub struct Probe {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub exec: Option<ExecAction>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub http_get: Option<HttpGetAction>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub tcp_socket: Option<TcpSocketAction>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub grpc: Option<GrpcAction>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub initial_delay_seconds: Option<i64>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub timeout_seconds: Option<i64>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub period_seconds: Option<i64>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub success_threshold: Option<i64>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub failure_threshold: Option<i64>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub termination_grace_period_seconds: Option<i64>,
    }
}

api_struct! {
    pub struct ExecAction {
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        pub command: Vec<String>,
    }
}

api_struct! {
    pub struct HttpGetAction {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub path: Option<String>,
        #[serde(default = "no_port")]
        pub port: IntOrString,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub host: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub scheme: Option<String>,
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        pub http_headers: Vec<HttpHeader>,
    }
}

fn no_port() -> IntOrString {
    IntOrString::Int(0)
}

impl Default for IntOrString {
    fn default() -> Self {
        no_port()
    }
}

api_struct! {
    pub struct HttpHeader {
        #[serde(default)]
        pub name: String,
        #[serde(default)]
        pub value: String,
    }
}

api_struct! {
    pub struct TcpSocketAction {
        #[serde(default = "no_port")]
        pub port: IntOrString,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub host: Option<String>,
    }
}

api_struct! {
    pub struct GrpcAction {
        #[serde(default)]
        pub port: i64,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub service: Option<String>,
    }
}

api_struct! {
    pub struct Lifecycle {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub post_start: Option<LifecycleHandler>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub pre_stop: Option<LifecycleHandler>,
    }
}

api_struct! {
    pub struct LifecycleHandler {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub exec: Option<ExecAction>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub http_get: Option<HttpGetAction>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub tcp_socket: Option<TcpSocketAction>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub sleep: Option<SleepAction>,
    }
}

api_struct! {
    pub struct SleepAction {
        #[serde(default)]
        pub seconds: i64,
    }
}

api_struct! {
    pub struct SecurityContext {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub privileged: Option<bool>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub run_as_user: Option<i64>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub run_as_group: Option<i64>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub run_as_non_root: Option<bool>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub capabilities: Option<Capabilities>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub read_only_root_filesystem: Option<bool>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub allow_privilege_escalation: Option<bool>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub seccomp_profile: Option<SeccompProfile>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub proc_mount: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub se_linux_options: Option<SeLinuxOptions>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub app_armor_profile: Option<AppArmorProfile>,
    }
}

api_struct! {
    pub struct Capabilities {
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        pub add: Vec<String>,
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        pub drop: Vec<String>,
    }
}

api_struct! {
    /// A volume. atoll implements hostPath, emptyDir, image (an OCI image's content, read
    /// only, mounted by the runtime), downwardAPI and the local-object volumes (configMap,
    /// secret, projected: `refs`); the other API-object volumes are here so that validation can
    /// refuse them by name, as kubelet does for static pods.
    pub struct Volume {
        #[serde(default)]
        pub name: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub host_path: Option<HostPathVolumeSource>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub empty_dir: Option<EmptyDirVolumeSource>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub secret: Option<SecretVolumeSource>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub config_map: Option<ConfigMapVolumeSource>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub persistent_volume_claim: Option<Value>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub projected: Option<ProjectedVolumeSource>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub csi: Option<Value>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub ephemeral: Option<Value>,
        #[serde(default, rename = "downwardAPI", skip_serializing_if = "Option::is_none")]
        pub downward_api: Option<DownwardAPIVolumeSource>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub image: Option<ImageVolumeSource>,
    }
}

api_struct! {
    /// An image volume (KEP 4639): the content of an OCI image, mounted read-only.
    pub struct ImageVolumeSource {
        #[serde(default)]
        pub reference: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub pull_policy: Option<String>,
    }
}

api_struct! {
    pub struct HostPathVolumeSource {
        #[serde(default)]
        pub path: String,
        #[serde(default, rename = "type", skip_serializing_if = "Option::is_none")]
        pub type_: Option<String>,
    }
}

api_struct! {
    pub struct EmptyDirVolumeSource {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub medium: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub size_limit: Option<Quantity>,
    }
}

impl Pod {
    /// `namespace/name`, the key kubelet's file source uses.
    pub fn key(&self) -> String {
        format!("{}/{}", self.metadata.namespace, self.metadata.name)
    }

    /// Init containers then regular containers, each with its field path prefix.
    pub fn all_containers(&self) -> impl Iterator<Item = (String, &Container)> {
        let init = self.spec.init_containers.iter().enumerate().map(|(i, c)| (format!("spec.initContainers[{i}]"), c));
        let main = self.spec.containers.iter().enumerate().map(|(i, c)| (format!("spec.containers[{i}]"), c));
        init.chain(main)
    }
}
