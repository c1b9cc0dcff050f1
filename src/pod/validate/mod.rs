//! Validation of a defaulted static pod: the API server's checks that matter on one node
//! (names, containers, ports, probes, policies, volumes, env, AppArmor) and kubelet's static-pod
//! restrictions (no ServiceAccount, PVC or other API object references, no ephemeral
//! containers or scheduling gates). ConfigMaps and Secrets are allowed: atoll's are local
//! objects (`objects`), checked in `objects.rs`. Every problem is reported, each with its
//! field path; an empty list means the pod is valid.

mod affinity;
mod apparmor;
mod container;
mod downward;
pub(crate) mod names;
pub mod objects;
mod pod_resources;
#[cfg(test)]
mod tests;
mod validator;

pub use names::{dns1123_label, dns1123_subdomain, label_value, port_name, qualified_name};

use super::finding::Finding;
use super::paths;
use super::types::*;
use container::Kind;
use std::collections::{BTreeMap, HashSet};
use validator::{Validator, INT32_MAX};

/// All problems with `pod` (already defaulted and named for the node).
pub fn validate(pod: &Pod) -> Vec<Finding> {
    let mut v = Validator::default();
    v.pod(pod);
    v.problems
}

/// All problems with a pod the API server bound to the node (already defaulted): the same
/// checks, but the static pods' restrictions: a service account, pull secrets and ephemeral
/// containers are the cluster's to give. What atoll cannot provide yet is still refused by
/// name, as not implemented.
pub fn validate_bound(pod: &Pod) -> Vec<Finding> {
    let mut v = Validator { bound: true, ..Validator::default() };
    v.pod(pod);
    v.problems
}

const RESTART_POLICIES: &[&str] = &["Always", "OnFailure", "Never"];
const DNS_POLICIES: &[&str] = &["ClusterFirst", "ClusterFirstWithHostNet", "Default", "None"];
const HOST_PATH_TYPES: &[&str] =
    &["", "DirectoryOrCreate", "Directory", "FileOrCreate", "File", "Socket", "CharDevice", "BlockDevice"];

impl Validator {
    fn pod(&mut self, pod: &Pod) {
        let m = &pod.metadata;
        if let Err(e) = dns1123_subdomain(&m.name) {
            self.err("metadata.name", format!("{:?} (with the node name appended) {e}", m.name));
        }
        if let Err(e) = dns1123_label(&m.namespace) {
            self.err("metadata.namespace", format!("{:?} {e}", m.namespace));
        }
        if let Err(e) = paths::check_uid(&m.uid) {
            self.err("metadata.uid", e);
        }
        for (k, v) in &m.labels {
            if let Err(e) = qualified_name(k) {
                self.err(format!("metadata.labels[{k}]"), e);
            }
            if let Err(e) = label_value(v) {
                self.err(format!("metadata.labels[{k}]"), e);
            }
        }
        if let Err(e) = super::order::depends_on(pod) {
            self.err(super::order::FIELD, e);
        }
        if let Err(e) = super::rollback_policy::policy(pod, None) {
            self.err(format!("metadata.annotations[{}]", e.annotation), e.problem);
        }
        self.spec(&pod.spec);
        self.apparmor(pod);
        self.static_restrictions(&pod.spec);
    }

    fn spec(&mut self, s: &PodSpec) {
        self.grace = s.termination_grace_period_seconds.unwrap_or(30);
        if s.containers.is_empty() {
            self.err("spec.containers", "at least one container is required");
        }
        self.one_of("spec.restartPolicy", s.restart_policy.as_deref(), RESTART_POLICIES);
        self.one_of("spec.dnsPolicy", s.dns_policy.as_deref(), DNS_POLICIES);
        if let Some(t) = s.termination_grace_period_seconds {
            if t < 0 {
                self.err("spec.terminationGracePeriodSeconds", "must be zero or more");
            }
        }
        self.range("spec.activeDeadlineSeconds", s.active_deadline_seconds, 1, INT32_MAX);
        for (path, e) in affinity::problems(&s.node_selector, s.affinity.as_ref(), s.os.as_ref()) {
            self.err(format!("spec.{path}"), e);
        }
        if s.dns_policy.as_deref() == Some("None") && s.dns_config.as_ref().is_none_or(|c| c.nameservers.is_empty()) {
            self.err("spec.dnsConfig.nameservers", "dnsPolicy None needs at least one nameserver in dnsConfig");
        }
        if let Some(c) = &s.dns_config {
            if c.nameservers.len() > 3 {
                self.err("spec.dnsConfig.nameservers", "at most 3 nameservers");
            }
            if c.searches.len() > 32 {
                self.err("spec.dnsConfig.searches", "at most 32 search domains");
            }
            for (i, ns) in c.nameservers.iter().enumerate() {
                if ns.parse::<std::net::IpAddr>().is_err() {
                    self.err(format!("spec.dnsConfig.nameservers[{i}]"), format!("{ns:?} is not an IP address"));
                }
            }
        }
        if let Some(h) = &s.hostname {
            if let Err(e) = dns1123_label(h) {
                self.err("spec.hostname", format!("{h:?} {e}"));
            }
        }
        if let Some(h) = &s.subdomain {
            if let Err(e) = dns1123_label(h) {
                self.err("spec.subdomain", format!("{h:?} {e}"));
            }
        }
        for (i, a) in s.host_aliases.iter().enumerate() {
            if a.ip.parse::<std::net::IpAddr>().is_err() {
                self.err(format!("spec.hostAliases[{i}].ip"), format!("{:?} is not an IP address", a.ip));
            }
        }
        if let Some(sc) = &s.security_context {
            self.ids("spec.securityContext", sc.run_as_user, sc.run_as_group);
            self.range("spec.securityContext.fsGroup", sc.fs_group, 0, INT32_MAX);
            for (i, g) in sc.supplemental_groups.iter().enumerate() {
                self.range(&format!("spec.securityContext.supplementalGroups[{i}]"), Some(*g), 0, INT32_MAX);
            }
            for (i, sysctl) in sc.sysctls.iter().enumerate() {
                if sysctl.name.is_empty() {
                    self.err(format!("spec.securityContext.sysctls[{i}].name"), "is required");
                }
            }
        }
        self.pod_resources(s);
        let volumes = self.volumes(&s.volumes);
        let mut names = HashSet::new();
        let mut host_ports: BTreeMap<(String, String, i64), String> = BTreeMap::new();
        for (i, c) in s.init_containers.iter().enumerate() {
            let path = format!("spec.initContainers[{i}]");
            self.container(&path, c, &volumes, s.host_network, &mut names, Kind::Init);
        }
        for (i, c) in s.containers.iter().enumerate() {
            let path = format!("spec.containers[{i}]");
            self.container(&path, c, &volumes, s.host_network, &mut names, Kind::Regular);
            for (j, p) in c.ports.iter().enumerate() {
                let hp = p.host_port.unwrap_or(0);
                if hp > 0 {
                    let key = (p.protocol.clone().unwrap_or_default(), p.host_ip.clone().unwrap_or_default(), hp);
                    let here = format!("{path}.ports[{j}].hostPort");
                    if let Some(first) = host_ports.get(&key) {
                        self.err(&here, format!("host port {hp}/{} is already used by {first}", key.0));
                    } else {
                        host_ports.insert(key, here);
                    }
                }
            }
        }
    }

    /// Checks the volumes; returns their names, each with whether it is an image volume.
    fn volumes(&mut self, volumes: &[Volume]) -> BTreeMap<String, bool> {
        let mut names = BTreeMap::new();
        for (i, v) in volumes.iter().enumerate() {
            let path = format!("spec.volumes[{i}]");
            if let Err(e) = dns1123_label(&v.name) {
                self.err(format!("{path}.name"), format!("{:?} {e}", v.name));
            }
            if names.insert(v.name.clone(), v.image.is_some()).is_some() {
                self.err(format!("{path}.name"), format!("duplicate volume {:?}", v.name));
            }
            let sources = [
                v.host_path.is_some(),
                v.empty_dir.is_some(),
                v.secret.is_some(),
                v.config_map.is_some(),
                v.persistent_volume_claim.is_some(),
                v.projected.is_some(),
                v.csi.is_some(),
                v.ephemeral.is_some(),
                v.downward_api.is_some(),
                v.image.is_some(),
            ];
            if sources.iter().filter(|s| **s).count() > 1 {
                self.err(&path, "a volume must have exactly one source");
            }
            if let Some(hp) = &v.host_path {
                if !hp.path.starts_with('/') {
                    self.err(format!("{path}.hostPath.path"), format!("{:?} must be an absolute path", hp.path));
                }
                self.one_of(&format!("{path}.hostPath.type"), hp.type_.as_deref(), HOST_PATH_TYPES);
            }
            if let Some(ed) = &v.empty_dir {
                self.one_of(&format!("{path}.emptyDir.medium"), ed.medium.as_deref(), &["", "Memory"]);
                if ed.size_limit.is_some_and(|q| q.is_negative()) {
                    self.err(format!("{path}.emptyDir.sizeLimit"), "must not be negative");
                }
            }
            if let Some(image) = &v.image {
                if image.reference.trim().is_empty() {
                    self.err(format!("{path}.image.reference"), "an image volume needs an image reference");
                }
                self.one_of(
                    &format!("{path}.image.pullPolicy"),
                    image.pull_policy.as_deref(),
                    &["Always", "IfNotPresent", "Never"],
                );
            }
            self.object_volume(&path, v);
            if let Some(d) = &v.downward_api {
                let p = format!("{path}.downwardAPI");
                self.range(&format!("{p}.defaultMode"), d.default_mode, 0, objects::MAX_MODE);
                self.downward_items(&p, &d.items, None);
            }
        }
        names
    }

    /// kubelet refuses static pods that reference API objects (PreventStaticPodAPIReferences).
    /// A bound pod may name its service account, pull secrets and ephemeral containers; the
    /// volumes atoll does not provide are refused for it as not implemented.
    fn static_restrictions(&mut self, s: &PodSpec) {
        let refuse = |this: &mut Self, path: String, what: &str| match this.bound {
            true => this.err(path, format!("{what} are not implemented by atoll")),
            false => this.err(path, format!("static pods may not reference {what}")),
        };
        if !self.bound {
            self.static_only(s);
        }
        // A pull secret's name becomes a request's path: a name the API could hold, or none.
        for (i, name) in s.image_pull_secrets.iter().filter_map(|p| p["name"].as_str()).enumerate() {
            if let (false, Err(e)) = (name.is_empty(), dns1123_subdomain(name)) {
                self.err(format!("spec.imagePullSecrets[{i}].name"), format!("{name:?} {e}"));
            }
        }
        if !s.resource_claims.is_empty() {
            refuse(self, "spec.resourceClaims".into(), "resourceclaims");
        }
        for (i, v) in s.volumes.iter().enumerate() {
            let p = format!("spec.volumes[{i}]");
            for (set, field, what) in [
                (v.persistent_volume_claim.is_some(), "persistentVolumeClaim", "persistentvolumeclaims"),
                (v.csi.is_some(), "csi", "CSI volumes"),
                (v.ephemeral.is_some(), "ephemeral", "persistentvolumeclaims (ephemeral volumes)"),
            ] {
                if set {
                    refuse(self, format!("{p}.{field}"), what);
                }
            }
        }
        let containers = s
            .init_containers
            .iter()
            .enumerate()
            .map(|(i, c)| (format!("spec.initContainers[{i}]"), c))
            .chain(s.containers.iter().enumerate().map(|(i, c)| (format!("spec.containers[{i}]"), c)));
        // ConfigMaps and Secrets are local objects here (`objects`), not API references.
        for (cp, c) in containers {
            self.env_objects(&cp, c);
        }
    }

    /// What kubelet refuses of static pods only: references to the service account and pull
    /// secrets, ephemeral containers and scheduling gates.
    fn static_only(&mut self, s: &PodSpec) {
        let refuse = |this: &mut Self, path: String, what: &str| {
            this.err(path, format!("static pods may not reference {what}"));
        };
        if s.service_account_name.as_deref().is_some_and(|n| !n.is_empty()) {
            refuse(self, "spec.serviceAccountName".into(), "serviceaccounts");
        }
        if s.service_account.as_deref().is_some_and(|n| !n.is_empty()) {
            refuse(self, "spec.serviceAccount".into(), "serviceaccounts");
        }
        if !s.image_pull_secrets.is_empty() {
            refuse(self, "spec.imagePullSecrets".into(), "secrets (give registry credentials in atoll's config)");
        }
        if !s.ephemeral_containers.is_empty() {
            self.err("spec.ephemeralContainers", "ephemeral containers cannot be set on create");
        }
        if !s.scheduling_gates.is_empty() {
            self.err("spec.schedulingGates", "static pods may not have scheduling gates");
        }
    }
}
