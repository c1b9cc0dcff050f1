//! The shape of a Pod as atoll's types read it: which object fields hold which type, so a
//! manifest's JSON value can be walked beside the typed decode.
//!
//! Field names come from the types themselves (`de::Table::FIELDS`, which `api_struct!` makes
//! from the fields' serde attributes, as the derive names them); this file only says which
//! fields hold another API struct (one or a list) and which hold free JSON (`Any`), which
//! nothing below is checked in. From that:
//! [`unknown`] names every field the types do not read (what serde would drop), and
//! [`locate`] names the field a failed typed decode choked on, by decoding the failing
//! struct one field at a time with the same code the whole decode uses. Both replace serde
//! wrappers that doubled the Pod decoder's code (about 55 KB of the aarch64 binary).
//! [`write_ordered`] writes a serialised value's bytes in the types' field order, as
//! `serde_json::to_vec` of the typed value would (the content UID hashes them).

use super::de::Table;
use super::types::*;
use serde_json::{Map, Value};

/// One API struct: its serde field names, a decode of it from JSON, its struct fields, and the
/// fields Kubernetes has that atoll's type does not read.
pub struct Type {
    fields: &'static [&'static str],
    check: fn(Value) -> Result<(), serde_json::Error>,
    children: &'static [(&'static str, Child)],
    /// Space-separated: the rest of the struct's fields in k8s.io/api core/v1 (the master of
    /// 2026-11, alpha fields included), each with the JSON shape its Go type decodes from
    /// (`name:shape`, see `shape`). A key in neither list is no Kubernetes field at all.
    kube: &'static str,
}

/// A key of a manifest that atoll's types do not read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Unread {
    /// A Kubernetes field atoll does not implement.
    NotImplemented,
    /// No field of this Kubernetes type: a typo, or another type's field. The nearest real
    /// field, when one is close.
    Unknown(Option<&'static str>),
    /// A field atoll does not read (or reads as free JSON) that kubelet's decoder refuses:
    /// the value at this path does not fit the field's Go type, for this reason.
    Malformed(String),
}

/// What a field holds, when it is not a plain value.
pub enum Child {
    One(&'static Type),
    Many(&'static Type),
    /// Free JSON, kept as it is (`status`, a PVC volume): nothing inside is unknown, and it
    /// has the shape of its Go type (`shape`).
    Any(&'static str),
}

const fn ty<T: Table>(kube: &'static str, children: &'static [(&'static str, Child)]) -> Type {
    Type { fields: T::FIELDS, check: decodes::<T>, children, kube }
}

fn decodes<T: Table>(value: Value) -> Result<(), serde_json::Error> {
    super::de::table::<T>(value).map(drop)
}

use Child::{Any, Many, One};

pub static POD: Type =
    ty::<Pod>("", &[("metadata", One(&OBJECT_META)), ("spec", One(&POD_SPEC)), ("status", Any("@status"))]);
pub static OBJECT_META: Type = ty::<ObjectMeta>("generateName:s selfLink:s resourceVersion:s generation:I deletionTimestamp:t deletionGracePeriodSeconds:I ownerReferences:[@owner] finalizers:[s] clusterName managedFields:[@managed]", &[("creationTimestamp", Any("t"))]);
static POD_SPEC: Type = ty::<PodSpec>("readinessGates:[@gate] preemptionPolicy:s topologySpreadConstraints:[@spread] hostUsers:b hostnameOverride:s workloadRef schedulingGroup:@group evictionResponders:[@responder]", &[
    ("containers", Many(&CONTAINER)),
    ("initContainers", Many(&CONTAINER)),
    ("ephemeralContainers", Any("[@ephemeral]")),
    ("volumes", Many(&VOLUME)),
    ("dnsConfig", One(&DNS_CONFIG)),
    ("securityContext", One(&POD_SECURITY_CONTEXT)),
    ("imagePullSecrets", Any("[@name]")),
    ("hostAliases", Many(&HOST_ALIAS)),
    ("tolerations", Many(&TOLERATION)),
    ("schedulingGates", Any("[@name]")),
    ("resourceClaims", Any("[@podclaim]")),
    ("affinity", One(&AFFINITY)),
    ("os", One(&POD_OS)),
    ("resources", One(&RESOURCES)),
]);
static AFFINITY: Type = ty::<Affinity>(
    "",
    &[("nodeAffinity", One(&NODE_AFFINITY)), ("podAffinity", Any("@podaff")), ("podAntiAffinity", Any("@podaff"))],
);
static NODE_AFFINITY: Type = ty::<crate::pod::affinity::NodeAffinity>(
    "",
    &[
        ("requiredDuringSchedulingIgnoredDuringExecution", One(&NODE_SELECTOR)),
        ("preferredDuringSchedulingIgnoredDuringExecution", Many(&PREFERRED_TERM)),
    ],
);
static NODE_SELECTOR: Type =
    ty::<crate::pod::affinity::NodeSelector>("", &[("nodeSelectorTerms", Many(&SELECTOR_TERM))]);
static PREFERRED_TERM: Type =
    ty::<crate::pod::affinity::PreferredSchedulingTerm>("", &[("preference", One(&SELECTOR_TERM))]);
static SELECTOR_TERM: Type = ty::<crate::pod::affinity::NodeSelectorTerm>(
    "",
    &[("matchExpressions", Many(&REQUIREMENT)), ("matchFields", Many(&REQUIREMENT))],
);
static REQUIREMENT: Type = ty::<crate::pod::affinity::Requirement>("", &[]);
static POD_OS: Type = ty::<PodOs>("", &[]);
static DNS_CONFIG: Type = ty::<PodDnsConfig>("", &[("options", Many(&DNS_OPTION))]);
static DNS_OPTION: Type = ty::<PodDnsConfigOption>("", &[]);
static HOST_ALIAS: Type = ty::<HostAlias>("", &[]);
static TOLERATION: Type = ty::<Toleration>("", &[]);
static POD_SECURITY_CONTEXT: Type = ty::<PodSecurityContext>(
    "windowsOptions:@windows supplementalGroupsPolicy:s fsGroupChangePolicy:s seLinuxChangePolicy:s",
    &[
        ("sysctls", Many(&SYSCTL)),
        ("seccompProfile", One(&SECCOMP)),
        ("seLinuxOptions", One(&SELINUX)),
        ("appArmorProfile", One(&APPARMOR)),
    ],
);
static SYSCTL: Type = ty::<Sysctl>("", &[]);
static SECCOMP: Type = ty::<SeccompProfile>("", &[]);
static SELINUX: Type = ty::<SeLinuxOptions>("", &[]);
static APPARMOR: Type = ty::<AppArmorProfile>("", &[]);
static CONTAINER: Type = ty::<Container>(
    "resizePolicy:[@resize] restartPolicyRules:[@rule] volumeDevices:[@device]",
    &[
        ("env", Many(&ENV_VAR)),
        ("envFrom", Many(&ENV_FROM)),
        ("ports", Many(&PORT)),
        ("resources", One(&RESOURCES)),
        ("volumeMounts", Many(&VOLUME_MOUNT)),
        ("livenessProbe", One(&PROBE)),
        ("readinessProbe", One(&PROBE)),
        ("startupProbe", One(&PROBE)),
        ("lifecycle", One(&LIFECYCLE)),
        ("securityContext", One(&SECURITY_CONTEXT)),
    ],
);
static ENV_VAR: Type = ty::<EnvVar>("", &[("valueFrom", One(&ENV_SOURCE))]);
static ENV_SOURCE: Type = ty::<EnvVarSource>(
    "fileKeyRef:@filekey",
    &[
        ("fieldRef", One(&FIELD_REF)),
        ("resourceFieldRef", One(&RESOURCE_REF)),
        ("secretKeyRef", One(&KEY_SELECTOR)),
        ("configMapKeyRef", One(&KEY_SELECTOR)),
    ],
);
static FIELD_REF: Type = ty::<ObjectFieldSelector>("", &[]);
static RESOURCE_REF: Type = ty::<ResourceFieldSelector>("", &[]);
static KEY_SELECTOR: Type = ty::<KeySelector>("", &[]);
static ENV_FROM: Type = ty::<EnvFromSource>("", &[("configMapRef", One(&OBJECT_REF)), ("secretRef", One(&OBJECT_REF))]);
static OBJECT_REF: Type = ty::<ObjectRef>("", &[]);
pub static PORT: Type = ty::<ContainerPort>("", &[]);
static RESOURCES: Type = ty::<ResourceRequirements>("claims:[@claim]", &[]);
static VOLUME_MOUNT: Type = ty::<VolumeMount>("recursiveReadOnly:s subPathExpr:s bindMountOptions:[s]", &[]);
static PROBE: Type = ty::<Probe>(
    "",
    &[("exec", One(&EXEC)), ("httpGet", One(&HTTP_GET)), ("tcpSocket", One(&TCP_SOCKET)), ("grpc", One(&GRPC))],
);
static EXEC: Type = ty::<ExecAction>("", &[]);
static HTTP_GET: Type = ty::<HttpGetAction>("protocol:s", &[("httpHeaders", Many(&HTTP_HEADER))]);
static HTTP_HEADER: Type = ty::<HttpHeader>("", &[]);
static TCP_SOCKET: Type = ty::<TcpSocketAction>("", &[]);
static GRPC: Type = ty::<GrpcAction>("mode:s", &[]);
static LIFECYCLE: Type = ty::<Lifecycle>("stopSignal:s", &[("postStart", One(&HANDLER)), ("preStop", One(&HANDLER))]);
pub static HANDLER: Type = ty::<LifecycleHandler>(
    "",
    &[("exec", One(&EXEC)), ("httpGet", One(&HTTP_GET)), ("tcpSocket", One(&TCP_SOCKET)), ("sleep", One(&SLEEP))],
);
static SLEEP: Type = ty::<SleepAction>("", &[]);
static SECURITY_CONTEXT: Type = ty::<SecurityContext>(
    "windowsOptions:@windows",
    &[
        ("capabilities", One(&CAPABILITIES)),
        ("seccompProfile", One(&SECCOMP)),
        ("seLinuxOptions", One(&SELINUX)),
        ("appArmorProfile", One(&APPARMOR)),
    ],
);
static CAPABILITIES: Type = ty::<Capabilities>("", &[]);
static VOLUME: Type = ty::<Volume>("gcePersistentDisk:o awsElasticBlockStore:o gitRepo:o nfs:o iscsi:o glusterfs:o rbd:o flexVolume:o cinder:o cephfs:o flocker:o fc:o azureFile:o vsphereVolume:o quobyte:o azureDisk:o photonPersistentDisk:o portworxVolume:o scaleIO:o storageos:o", &[
    ("hostPath", One(&HOST_PATH)),
    ("emptyDir", One(&EMPTY_DIR)),
    ("secret", One(&SECRET_VOLUME)),
    ("configMap", One(&CONFIG_MAP_VOLUME)),
    ("persistentVolumeClaim", Any("@pvc")),
    ("projected", One(&PROJECTED)),
    ("csi", Any("@csi")),
    ("ephemeral", Any("@ephvol")),
    ("downwardAPI", One(&DOWNWARD_VOLUME)),
    ("image", One(&IMAGE_VOLUME)),
]);
static HOST_PATH: Type = ty::<HostPathVolumeSource>("", &[]);
static EMPTY_DIR: Type = ty::<EmptyDirVolumeSource>("mode:i", &[]);
static IMAGE_VOLUME: Type = ty::<ImageVolumeSource>("", &[]);
static SECRET_VOLUME: Type = ty::<SecretVolumeSource>("defaultUser:I", &[("items", Many(&KEY_TO_PATH))]);
static CONFIG_MAP_VOLUME: Type = ty::<ConfigMapVolumeSource>("defaultUser:I", &[("items", Many(&KEY_TO_PATH))]);
static KEY_TO_PATH: Type = ty::<KeyToPath>("user:I", &[]);
static PROJECTED: Type = ty::<ProjectedVolumeSource>("defaultUser:I", &[("sources", Many(&PROJECTION))]);
static PROJECTION: Type = ty::<VolumeProjection>(
    "",
    &[
        ("configMap", One(&OBJECT_PROJECTION)),
        ("secret", One(&OBJECT_PROJECTION)),
        ("downwardAPI", One(&DOWNWARD_PROJECTION)),
        ("serviceAccountToken", Any("@satoken")),
        ("clusterTrustBundle", Any("@ctb")),
        ("podCertificate", Any("@podcert")),
    ],
);
static DOWNWARD_VOLUME: Type = ty::<DownwardAPIVolumeSource>("defaultUser:I", &[("items", Many(&DOWNWARD_FILE))]);
static DOWNWARD_PROJECTION: Type = ty::<DownwardAPIProjection>("", &[("items", Many(&DOWNWARD_FILE))]);
static DOWNWARD_FILE: Type =
    ty::<DownwardAPIVolumeFile>("user:I", &[("fieldRef", One(&FIELD_REF)), ("resourceFieldRef", One(&RESOURCE_REF))]);
static OBJECT_PROJECTION: Type = ty::<ObjectProjection>("", &[("items", Many(&KEY_TO_PATH))]);

#[cfg(test)]
impl Type {
    pub(crate) fn kube_list(&self) -> &'static str {
        self.kube
    }
    pub(crate) fn children(&self) -> &'static [(&'static str, Child)] {
        self.children
    }
}

impl Type {
    fn child(&self, key: &str) -> Option<&Child> {
        self.children.iter().find(|(name, _)| *name == key).map(|(_, c)| c)
    }

    /// The field names this type reads.
    pub fn field_names(&self) -> &'static [&'static str] {
        self.fields
    }

    /// What `key`, which this type does not read, is.
    pub fn unread(&self, key: &str) -> Unread {
        if super::shape::field_shape(self.kube, key).is_some() {
            return Unread::NotImplemented;
        }
        Unread::Unknown(nearest(key, self.field_names(), self.kube))
    }
}

/// The field name closest to `key` (case aside, a few edits away) among `names` and the
/// space-separated `more`, for a did-you-mean; never a deprecated alias, but its current name. A key is a manifest's: only a name within the
/// edit limit by length alone is compared, and a key longer than any field name is not, so
/// a manifest of many or long keys costs little.
pub fn nearest(key: &str, names: &[&'static str], more: &'static str) -> Option<&'static str> {
    if key.len() > 64 {
        return None;
    }
    let key = key.to_ascii_lowercase();
    let limit = (key.len() / 3).max(1);
    let mut best: Option<(usize, &'static str)> = None;
    for name in names.iter().copied().chain(more.split(' ').map(|e| e.split(':').next().unwrap_or(e))) {
        if name.is_empty() || name.len().abs_diff(key.len()) > limit {
            continue;
        }
        let d = edits(&key, &name.to_ascii_lowercase());
        if d <= limit && best.is_none_or(|(b, _)| d < b) {
            best = Some((d, name));
        }
    }
    // A deprecated alias is offered as the field it stands for.
    best.map(|(_, n)| DEPRECATED.iter().find(|(old, _)| *old == n).map_or(n, |(_, current)| current))
}

/// The deprecated aliases among the Pod's fields, with the field each stands for (k8s.io/api
/// core/v1's `Deprecated...` fields).
const DEPRECATED: &[(&str, &str)] = &[("serviceAccount", "serviceAccountName")];

/// Levenshtein distance between two short ASCII names (bytes; a name of another script only
/// ever gets a large distance).
fn edits(a: &str, b: &str) -> usize {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.iter().enumerate() {
        let mut diagonal = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let next = (diagonal + usize::from(ca != cb)).min(row[j] + 1).min(row[j + 1] + 1);
            diagonal = row[j + 1];
            row[j + 1] = next;
        }
    }
    row[b.len()]
}

/// The message for an unknown field (with `; ignored` where it is only a warning).
pub fn unknown_field(near: Option<&str>) -> String {
    match near {
        Some(n) => format!("unknown field (did you mean {n}?)"),
        None => "unknown field".to_string(),
    }
}

/// `prefix.key`, or `key` at the top.
pub fn join(prefix: &str, key: &str) -> String {
    match (prefix.is_empty(), key.is_empty()) {
        (true, _) => key.to_string(),
        (false, true) => prefix.to_string(),
        (false, false) => format!("{prefix}.{key}"),
    }
}

/// Appends to `out` the path (under `path`) of every field of `value` that `ty` does not read,
/// with what it is, in the value's order; below free JSON nothing is unknown. A field of the
/// wrong shape is left to the typed decode to refuse where atoll reads it, and is `Malformed`
/// where it does not (a Kubernetes field atoll leaves out, free JSON), as kubelet refuses it.
pub fn unknown(ty: &Type, value: &Value, path: &str, out: &mut Vec<(String, Unread)>) {
    let Value::Object(map) = value else { return };
    let known = ty.field_names();
    for (key, v) in map {
        let at = join(path, key);
        if !known.contains(&key.as_str()) {
            let shape = super::shape::field_shape(ty.kube, key);
            let unread = match shape.map(|code| super::shape::check(code, v, &at)) {
                Some(Err((bad, why))) => (bad, Unread::Malformed(why)),
                _ => (at, ty.unread(key)),
            };
            out.push(unread);
            continue;
        }
        // A struct is a JSON object (serde would also read one from a list, Go does not).
        let not = |want: &str| Unread::Malformed(format!("expected {want}, found {}", super::shape::kind_of(v)));
        match (ty.child(key), v) {
            (Some(One(_) | Many(_)), Value::Null) => {}
            (Some(One(t)), Value::Object(_)) => unknown(t, v, &at, out),
            (Some(One(_)), _) => out.push((at, not("an object"))),
            (Some(Any(code)), _) => {
                if let Err((bad, why)) = super::shape::check(code, v, &at) {
                    out.push((bad, Unread::Malformed(why)));
                }
            }
            (Some(Many(t)), Value::Array(items)) => {
                for (i, item) in items.iter().enumerate() {
                    let at = format!("{at}[{i}]");
                    match item {
                        Value::Object(_) => unknown(t, item, &at, out),
                        Value::Null => {}
                        other => {
                            let why = format!("expected an object, found {}", super::shape::kind_of(other));
                            out.push((at, Unread::Malformed(why)));
                        }
                    }
                }
            }
            (Some(Many(_)), _) => out.push((at, not("a list"))),
            _ => {}
        }
    }
}

/// Writes `value`, a `ty` (or a list of them) as `serde_json::to_value` made it, as
/// `serde_json::to_vec` writes the typed value: compact, each struct's fields in declaration
/// order (a value's maps are sorted by key, as a `BTreeMap` field and free JSON are anyway).
/// So the bytes come from the one serialisation to a value instead of a second copy of every
/// type's serializer.
pub fn write_ordered(ty: &Type, value: &Value, out: &mut Vec<u8>) {
    match value {
        Value::Object(map) => {
            out.push(b'{');
            let mut first = true;
            for name in ty.fields {
                let Some(v) = map.get(*name) else { continue };
                if !first {
                    out.push(b',');
                }
                first = false;
                write_plain(&Value::String((*name).to_string()), out);
                out.push(b':');
                match ty.child(name) {
                    Some(One(t) | Many(t)) => write_ordered(t, v, out),
                    _ => write_plain(v, out),
                }
            }
            out.push(b'}');
        }
        Value::Array(items) => {
            out.push(b'[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                write_ordered(ty, item, out);
            }
            out.push(b']');
        }
        other => write_plain(other, out),
    }
}

/// `serde_json::to_string(value)` for a `ty` or a list of them (see [`write_ordered`]).
pub fn to_string_ordered(ty: &Type, value: &impl serde::Serialize) -> String {
    let mut out = Vec::new();
    write_ordered(ty, &serde_json::to_value(value).unwrap_or_default(), &mut out);
    String::from_utf8(out).unwrap_or_default()
}

fn write_plain(value: &Value, out: &mut Vec<u8>) {
    // Writing a value to memory cannot fail (its map keys are strings).
    let _ = serde_json::to_writer(out, value);
}

/// The path (under `path`) and the decoder's message of the first field of `value` that `ty`
/// does not accept, found by decoding `ty` from each field alone (every field has a default)
/// and going down into the one that fails; `None` when `value` decodes.
pub fn locate(ty: &Type, value: &Value, path: &str) -> Option<(String, String)> {
    let Value::Object(map) = value else {
        return (ty.check)(value.clone()).err().map(|e| (path.to_string(), e.to_string()));
    };
    for (key, v) in map {
        let alone = Value::Object(Map::from_iter([(key.clone(), v.clone())]));
        let Err(e) = (ty.check)(alone) else { continue };
        let at = join(path, key);
        let deeper = match (ty.child(key), v) {
            (Some(One(t)), Value::Object(_)) => locate(t, v, &at),
            (Some(Many(t)), Value::Array(items)) => {
                items.iter().enumerate().find_map(|(i, item)| locate(t, item, &format!("{at}[{i}]")))
            }
            _ => None,
        };
        return Some(deeper.unwrap_or((at, e.to_string())));
    }
    (ty.check)(value.clone()).err().map(|e| (path.to_string(), e.to_string()))
}

#[cfg(test)]
mod tests;
