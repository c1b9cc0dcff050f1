//! AppArmor, as kubelet reads it: the `appArmorProfile` field (pod and container security
//! context), the deprecated `container.apparmor.security.beta.kubernetes.io/<container>`
//! annotation, the profile each container runs with (kubelet's `apparmor.GetProfile`), and
//! kubelet's admission check (pkg/security/apparmor `Validate`, lifecycle's AppArmor handler):
//! a pod that asks for a profile other than unconfined is refused where the host has no
//! AppArmor. Pure but for [`host_enabled`], the one read of the kernel's flag.

use super::types::{AppArmorProfile, Container, Pod};

/// The annotation key's prefix; the container's name follows.
pub const ANNOTATION_PREFIX: &str = "container.apparmor.security.beta.kubernetes.io/";
/// The annotation's values (and the CRI's deprecated `apparmor_profile` string).
pub const RUNTIME_DEFAULT: &str = "runtime/default";
pub const UNCONFINED: &str = "unconfined";
pub const LOCALHOST_PREFIX: &str = "localhost/";

/// kubelet's reason for a pod refused at admission (lifecycle's AppArmorNotAdmittedReason).
pub const REASON: &str = "AppArmor";

/// The profile a container runs with.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Profile {
    RuntimeDefault,
    Unconfined,
    /// A profile loaded on the node, by name.
    Localhost(String),
}

impl Profile {
    /// The field's profile; `None` for a type validation refuses.
    fn of_field(p: &AppArmorProfile) -> Option<Profile> {
        match p.type_.as_str() {
            "RuntimeDefault" => Some(Profile::RuntimeDefault),
            "Unconfined" => Some(Profile::Unconfined),
            "Localhost" => Some(Profile::Localhost(p.localhost_profile.clone().unwrap_or_default())),
            _ => None,
        }
    }

    /// The annotation's profile; `None` for a value that names none.
    pub fn of_annotation(value: &str) -> Option<Profile> {
        match value {
            RUNTIME_DEFAULT => Some(Profile::RuntimeDefault),
            UNCONFINED => Some(Profile::Unconfined),
            _ => value.strip_prefix(LOCALHOST_PREFIX).map(|n| Profile::Localhost(n.to_string())),
        }
    }

    /// The profile as the annotation and the CRI's deprecated string write it.
    pub fn annotation(&self) -> String {
        match self {
            Profile::RuntimeDefault => RUNTIME_DEFAULT.to_string(),
            Profile::Unconfined => UNCONFINED.to_string(),
            Profile::Localhost(n) => format!("{LOCALHOST_PREFIX}{n}"),
        }
    }
}

/// The pod's `appArmorProfile` field, if any.
fn pod_field(pod: &Pod) -> Option<&AppArmorProfile> {
    pod.spec.security_context.as_ref()?.app_armor_profile.as_ref()
}

/// The container's own `appArmorProfile` field, if any.
pub fn container_field(c: &Container) -> Option<&AppArmorProfile> {
    c.security_context.as_ref()?.app_armor_profile.as_ref()
}

/// The profile `c` runs with, in kubelet's order: the container's field, then the annotation
/// (static pods may not have had it copied to the fields), then the pod's field; `None`
/// leaves it to the runtime (no AppArmor in the CRI request).
pub fn profile(pod: &Pod, c: &Container) -> Option<Profile> {
    if let Some(p) = container_field(c) {
        return Profile::of_field(p);
    }
    let key = format!("{ANNOTATION_PREFIX}{}", c.name);
    if let Some(p) = pod.metadata.annotations.get(&key).and_then(|v| Profile::of_annotation(v)) {
        return Some(p);
    }
    pod_field(pod).and_then(Profile::of_field)
}

/// Whether the pod asks for AppArmor at all: a field or an annotation naming a profile other
/// than unconfined (kubelet's `isRequired`, for every annotation rather than the first one a
/// Go map happens to yield).
fn required(pod: &Pod) -> bool {
    let confined = |p: Option<&AppArmorProfile>| p.is_some_and(|p| p.type_ != "Unconfined");
    confined(pod_field(pod))
        || pod.spec.init_containers.iter().chain(&pod.spec.containers).any(|c| confined(container_field(c)))
        || pod.metadata.annotations.iter().any(|(k, v)| k.starts_with(ANNOTATION_PREFIX) && v != UNCONFINED)
}

/// kubelet's admission message for `pod` (reason [`REASON`]), `None` when it is admitted: a
/// pod that asks for AppArmor on a host without it, or with a Localhost profile of no name
/// (an annotation `localhost/`, which the API's validation lets through).
pub fn refusal(pod: &Pod, host_enabled: bool) -> Option<String> {
    if !required(pod) {
        return None;
    }
    let why = if !host_enabled {
        "AppArmor is not enabled on the host".to_string()
    } else {
        let empty =
            pod.spec.init_containers.iter().chain(&pod.spec.containers).find_map(|c| match profile(pod, c) {
                Some(Profile::Localhost(n)) if n.trim().is_empty() => Some(n),
                _ => None,
            })?;
        format!("invalid empty AppArmor profile name: {:?}", Profile::Localhost(empty).annotation())
    };
    Some(format!("Cannot enforce AppArmor: {why}"))
}

/// Whether the kernel enforces AppArmor, as runc's `apparmor.IsEnabled` (which kubelet asks):
/// AppArmor's securityfs directory exists and the module's `enabled` parameter reads `Y`.
pub fn enabled(securityfs: bool, parameter: &[u8]) -> bool {
    securityfs && parameter.len() > 1 && parameter.first() == Some(&b'Y')
}

/// [`enabled`] for this host. kubelet asks once, at its start.
pub fn host_enabled() -> bool {
    let securityfs = std::path::Path::new("/sys/kernel/security/apparmor").exists();
    let parameter = std::path::Path::new("/sys/module/apparmor/parameters/enabled");
    enabled(securityfs, &crate::bounded::read_file(parameter, 64).unwrap_or_default())
}

#[cfg(test)]
mod tests;
