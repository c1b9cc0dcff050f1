//! Which Pod fields atoll does not implement would change what a container sees or may do.
//!
//! The decoder names every field the Pod types leave out. Ignoring one of those listed here
//! would run the containers differently from what the manifest asks (a missing volume, a
//! device, another stop signal), so the manifest is refused with the field named. Every
//! other unknown field (scheduling, Windows options, status-only fields, fields of a newer
//! API) changes nothing at run time: a warning names it.

/// Volume fields the Pod types model; any other key of a volume is a volume type.
const VOLUME_FIELDS: &[&str] = &[
    "name",
    "hostPath",
    "emptyDir",
    "image",
    "secret",
    "configMap",
    "persistentVolumeClaim",
    "projected",
    "csi",
    "ephemeral",
    "downwardAPI",
];

/// Container fields (under `spec.containers[]` and `spec.initContainers[]`) that change the
/// container at run time, with why.
const CONTAINER_FIELDS: &[(&str, &str)] = &[
    ("volumeDevices", "raw block devices are not implemented by atoll"),
    ("lifecycle.stopSignal", "stop signals other than the image's are not implemented by atoll"),
    ("restartPolicyRules", "container restart rules are not implemented by atoll"),
    ("volumeMounts[].subPathExpr", "subPathExpr is not implemented by atoll (subPath is)"),
    ("volumeMounts[].recursiveReadOnly", "recursive read-only mounts are not implemented by atoll"),
    ("volumeMounts[].bindMountOptions", "bind mount options are not implemented by atoll"),
    ("env[].valueFrom.fileKeyRef", "environment variables from files are not implemented by atoll"),
    ("resources.claims", "resource claims are not implemented by atoll"),
];

/// Fields anywhere under a container (its probes' and hooks' handlers) that change what
/// happens to it: a probe atoll would make differently fails, and restarts the container.
const HANDLER_FIELDS: &[(&str, &str)] = &[
    ("httpGet.protocol", "HTTP probes and hooks over h2c are not implemented by atoll"),
    ("grpc.mode", "gRPC probes over TLS are not implemented by atoll"),
];

/// Fields of volumes atoll writes (emptyDir, Secret, ConfigMap, projected) that change the
/// files a container sees.
const VOLUME_FILE_FIELDS: &[(&str, &str)] = &[
    ("emptyDir.mode", "emptyDir modes are not implemented by atoll"),
    ("defaultUser", "file owners in Secret, ConfigMap and projected volumes are not implemented by atoll"),
    ("user", "file owners in Secret, ConfigMap and projected volumes are not implemented by atoll"),
];

/// Pod fields that change what its containers see or may do, with why.
const POD_FIELDS: &[(&str, &str)] = &[
    ("spec.hostUsers", "user namespaces are not implemented by atoll"),
    ("spec.resources.claims", "resource claims are not implemented by atoll"),
    ("spec.securityContext.supplementalGroupsPolicy", "supplementalGroupsPolicy is not implemented by atoll"),
];

/// Why the unimplemented field at `path` (as the decoder names it, such as
/// `spec.containers[0].volumeDevices`) cannot be ignored; `None` when ignoring it changes
/// nothing a container sees.
pub fn runtime_visible(path: &str) -> Option<String> {
    let general = generalise(path);
    let under = |field: &str, prefix: &str| field == prefix || field.starts_with(&format!("{prefix}."));
    for (field, why) in POD_FIELDS {
        if under(&general, field) {
            return Some((*why).to_string());
        }
    }
    if let Some(rest) = general.strip_prefix("spec.volumes[].") {
        let key = rest.split('.').next().unwrap_or(rest);
        if !VOLUME_FIELDS.contains(&key) {
            return Some(format!("{key} volumes are not implemented by atoll (hostPath, emptyDir and image are)"));
        }
        let last = rest.rsplit('.').next().unwrap_or(rest);
        for (field, why) in VOLUME_FILE_FIELDS {
            if rest == *field || (!field.contains('.') && last == *field && key != "hostPath") {
                return Some((*why).to_string());
            }
        }
    }
    for prefix in ["spec.containers[].", "spec.initContainers[]."] {
        if let Some(rest) = general.strip_prefix(prefix) {
            for (field, why) in CONTAINER_FIELDS {
                if under(rest, field) {
                    return Some((*why).to_string());
                }
            }
            for (field, why) in HANDLER_FIELDS {
                if rest.ends_with(&format!(".{field}")) {
                    return Some((*why).to_string());
                }
            }
        }
    }
    None
}

/// `path` with every list index left out: `a[3].b[0]` → `a[].b[]`.
fn generalise(path: &str) -> String {
    let mut out = String::with_capacity(path.len());
    let mut in_index = false;
    for ch in path.chars() {
        match ch {
            '[' => {
                in_index = true;
                out.push('[');
            }
            ']' => {
                in_index = false;
                out.push(']');
            }
            _ if in_index => {}
            _ => out.push(ch),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_that_change_a_container_are_named_with_why() {
        for path in [
            "spec.hostUsers",
            "spec.resources.claims",
            "spec.volumes[2].nfs",
            "spec.volumes[0].gitRepo.repository",
            "spec.containers[1].volumeDevices",
            "spec.initContainers[0].lifecycle.stopSignal",
            "spec.containers[0].volumeMounts[3].subPathExpr",
            "spec.containers[0].env[4].valueFrom.fileKeyRef",
            "spec.containers[0].volumeMounts[0].bindMountOptions",
            "spec.containers[0].livenessProbe.httpGet.protocol",
            "spec.initContainers[0].lifecycle.postStart.httpGet.protocol",
            "spec.containers[0].readinessProbe.grpc.mode",
            "spec.volumes[0].emptyDir.mode",
            "spec.volumes[1].secret.defaultUser",
            "spec.volumes[1].configMap.items[0].user",
            "spec.volumes[1].projected.sources[0].secret.items[2].user",
        ] {
            assert!(runtime_visible(path).is_some(), "{path} must not be ignored");
        }
        assert_eq!(
            runtime_visible("spec.volumes[0].nfs").as_deref(),
            Some("nfs volumes are not implemented by atoll (hostPath, emptyDir and image are)")
        );
    }

    #[test]
    fn fields_that_change_nothing_at_run_time_are_only_warnings() {
        for path in [
            "spec.nodeSelector",
            "spec.affinity.nodeAffinity",
            "spec.os",
            "spec.overhead",
            "spec.readinessGates",
            "spec.topologySpreadConstraints",
            "spec.containers[0].resizePolicy",
            "spec.containers[0].securityContext.windowsOptions",
            "spec.securityContext.windowsOptions",
            "metadata.ownerReferences",
            "spec.resourcesx",
            "spec.containers[0].volumeDevicesX",
        ] {
            assert_eq!(runtime_visible(path), None, "{path}");
        }
    }

    #[test]
    fn indexes_are_left_out() {
        assert_eq!(generalise("spec.containers[12].env[0].valueFrom"), "spec.containers[].env[].valueFrom");
        assert_eq!(generalise("items[1].spec"), "items[].spec");
    }
}
