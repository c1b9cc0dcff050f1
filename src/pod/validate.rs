//! Validation of a defaulted static pod: the API server's checks that matter on one node
//! (names, containers, ports, probes, policies, volumes, env) and kubelet's static-pod
//! restrictions (no ServiceAccount, Secret, ConfigMap, PVC or other API object references,
//! no ephemeral containers or scheduling gates). Every problem is reported, each with its
//! field path; an empty list means the pod is valid.

use super::types::*;
use super::{paths, Finding};
use std::collections::{BTreeMap, BTreeSet, HashSet};

/// All problems with `pod` (already defaulted and named for the node).
pub fn validate(pod: &Pod) -> Vec<Finding> {
    let mut v = Validator::default();
    v.pod(pod);
    v.problems
}

#[derive(Default)]
struct Validator {
    problems: Vec<Finding>,
    /// The pod's terminationGracePeriodSeconds (a sleep hook may not outlast it).
    grace: i64,
}

/// The API's int32 fields (probe timings, activeDeadlineSeconds, user and group IDs) are
/// limited to this; atoll's types are wider, so it checks.
const INT32_MAX: i64 = i32::MAX as i64;

const RESTART_POLICIES: &[&str] = &["Always", "OnFailure", "Never"];
const DNS_POLICIES: &[&str] = &["ClusterFirst", "ClusterFirstWithHostNet", "Default", "None"];
const PULL_POLICIES: &[&str] = &["Always", "IfNotPresent", "Never"];
const PROTOCOLS: &[&str] = &["TCP", "UDP", "SCTP"];
const HOST_PATH_TYPES: &[&str] =
    &["", "DirectoryOrCreate", "Directory", "FileOrCreate", "File", "Socket", "CharDevice", "BlockDevice"];
const FIELD_REFS: &[&str] = &[
    "metadata.name",
    "metadata.namespace",
    "metadata.uid",
    "spec.nodeName",
    "spec.serviceAccountName",
    "status.hostIP",
    "status.hostIPs",
    "status.podIP",
    "status.podIPs",
];
const RESOURCE_REFS: &[&str] = &[
    "limits.cpu",
    "limits.memory",
    "limits.ephemeral-storage",
    "requests.cpu",
    "requests.memory",
    "requests.ephemeral-storage",
];

impl Validator {
    fn err(&mut self, path: impl AsRef<str>, msg: impl Into<String>) {
        self.problems.push(Finding::new(path.as_ref(), msg));
    }

    fn one_of(&mut self, path: &str, value: Option<&str>, allowed: &[&str]) {
        if let Some(v) = value {
            if !allowed.contains(&v) {
                self.err(path, format!("unsupported value {v:?}: must be one of {}", allowed.join(", ")));
            }
        }
    }

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
        self.spec(&pod.spec);
        self.static_restrictions(&pod.spec);
    }

    /// `value` must lie in `min..=max`; the error names the field and the range.
    fn range(&mut self, path: &str, value: Option<i64>, min: i64, max: i64) {
        match value {
            Some(v) if v < min || v > max => self.err(path, format!("{v} must be between {min} and {max}")),
            _ => {}
        }
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

    fn volumes(&mut self, volumes: &[Volume]) -> BTreeSet<String> {
        let mut names = BTreeSet::new();
        for (i, v) in volumes.iter().enumerate() {
            let path = format!("spec.volumes[{i}]");
            if let Err(e) = dns1123_label(&v.name) {
                self.err(format!("{path}.name"), format!("{:?} {e}", v.name));
            }
            if !names.insert(v.name.clone()) {
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
            if v.downward_api.is_some() {
                self.err(
                    format!("{path}.downwardAPI"),
                    "downwardAPI volumes are not implemented by atoll (hostPath and emptyDir are)",
                );
            }
        }
        names
    }

    fn container(
        &mut self,
        path: &str,
        c: &Container,
        volumes: &BTreeSet<String>,
        host_network: bool,
        names: &mut HashSet<String>,
        kind: Kind,
    ) {
        if let Err(e) = dns1123_label(&c.name) {
            self.err(format!("{path}.name"), format!("{:?} {e}", c.name));
        } else if !names.insert(c.name.clone()) {
            self.err(format!("{path}.name"), format!("duplicate container name {:?}", c.name));
        }
        if c.image.is_empty() {
            self.err(format!("{path}.image"), "an image is required");
        } else if c.image.trim() != c.image {
            self.err(format!("{path}.image"), "must not have leading or trailing whitespace");
        }
        self.one_of(&format!("{path}.imagePullPolicy"), c.image_pull_policy.as_deref(), PULL_POLICIES);
        self.one_of(
            &format!("{path}.terminationMessagePolicy"),
            c.termination_message_policy.as_deref(),
            &["File", "FallbackToLogsOnError"],
        );
        let sidecar = c.restart_policy.as_deref() == Some("Always");
        match (kind, c.restart_policy.as_deref()) {
            (_, None) | (Kind::Init, Some("Always")) => {}
            (Kind::Init, Some(other)) => self.err(
                format!("{path}.restartPolicy"),
                format!("{other:?}: an init container may only set Always (a sidecar)"),
            ),
            (Kind::Regular, Some(_)) => {
                self.err(format!("{path}.restartPolicy"), "only init containers may set restartPolicy")
            }
        }
        if kind == Kind::Init && !sidecar {
            for (field, set) in [
                ("lifecycle", c.lifecycle.is_some()),
                ("livenessProbe", c.liveness_probe.is_some()),
                ("readinessProbe", c.readiness_probe.is_some()),
                ("startupProbe", c.startup_probe.is_some()),
            ] {
                if set {
                    self.err(
                        format!("{path}.{field}"),
                        "not allowed on an init container unless it is a sidecar (restartPolicy: Always)",
                    );
                }
            }
        }
        // Ports.
        let mut port_names = HashSet::new();
        for (i, p) in c.ports.iter().enumerate() {
            let pp = format!("{path}.ports[{i}]");
            if !(1..=65535).contains(&p.container_port) {
                self.err(format!("{pp}.containerPort"), format!("{} must be between 1 and 65535", p.container_port));
            }
            if let Some(hp) = p.host_port {
                if !(0..=65535).contains(&hp) {
                    self.err(format!("{pp}.hostPort"), format!("{hp} must be between 0 and 65535"));
                } else if host_network && hp != p.container_port {
                    self.err(
                        format!("{pp}.hostPort"),
                        format!("{hp} must equal containerPort {} with hostNetwork", p.container_port),
                    );
                }
            }
            self.one_of(&format!("{pp}.protocol"), p.protocol.as_deref(), PROTOCOLS);
            if let Some(n) = &p.name {
                if let Err(e) = port_name(n) {
                    self.err(format!("{pp}.name"), format!("{n:?} {e}"));
                } else if !port_names.insert(n.clone()) {
                    self.err(format!("{pp}.name"), format!("duplicate port name {n:?}"));
                }
            }
        }
        // Environment.
        for (i, e) in c.env.iter().enumerate() {
            let ep = format!("{path}.env[{i}]");
            if e.name.is_empty() || e.name.contains('=') {
                self.err(format!("{ep}.name"), format!("{:?} must be non-empty and must not contain '='", e.name));
            }
            if let Some(src) = &e.value_from {
                if e.value.as_deref().is_some_and(|v| !v.is_empty()) {
                    self.err(format!("{ep}.valueFrom"), "may not be set together with value");
                }
                let count = [
                    src.field_ref.is_some(),
                    src.resource_field_ref.is_some(),
                    src.secret_key_ref.is_some(),
                    src.config_map_key_ref.is_some(),
                ]
                .iter()
                .filter(|x| **x)
                .count();
                if count != 1 {
                    self.err(format!("{ep}.valueFrom"), "must have exactly one source");
                }
                if let Some(f) = &src.field_ref {
                    if !field_ref_ok(&f.field_path) {
                        self.err(
                            format!("{ep}.valueFrom.fieldRef.fieldPath"),
                            format!("{:?} is not supported: use one of {}, metadata.labels['KEY'] or metadata.annotations['KEY']", f.field_path, FIELD_REFS.join(", ")),
                        );
                    }
                }
                if let Some(r) = &src.resource_field_ref {
                    if !RESOURCE_REFS.contains(&r.resource.as_str()) {
                        self.err(
                            format!("{ep}.valueFrom.resourceFieldRef.resource"),
                            format!("{:?} is not supported: use one of {}", r.resource, RESOURCE_REFS.join(", ")),
                        );
                    }
                    if r.divisor.is_some_and(|d| d.is_zero() || d.is_negative()) {
                        self.err(format!("{ep}.valueFrom.resourceFieldRef.divisor"), "must be positive");
                    }
                }
            }
        }
        // Resources.
        if let Some(r) = &c.resources {
            for (which, map) in [("limits", &r.limits), ("requests", &r.requests)] {
                for (name, q) in map {
                    let rp = format!("{path}.resources.{which}.{name}");
                    if q.is_negative() {
                        self.err(&rp, "must not be negative");
                    }
                    if !(matches!(name.as_str(), "cpu" | "memory" | "ephemeral-storage")
                        || name.starts_with("hugepages-"))
                    {
                        self.err(&rp, format!("resource {name:?} is not supported by atoll (cpu, memory, ephemeral-storage, hugepages-*)"));
                    }
                }
            }
            for (name, req) in &r.requests {
                if let Some(lim) = r.limits.get(name) {
                    if req.milli_value() > lim.milli_value() {
                        self.err(
                            format!("{path}.resources.requests.{name}"),
                            format!("{req} must not be more than the limit {lim}"),
                        );
                    }
                }
            }
        }
        // Volume mounts.
        let mut mount_paths = HashSet::new();
        for (i, m) in c.volume_mounts.iter().enumerate() {
            let mp = format!("{path}.volumeMounts[{i}]");
            if !volumes.contains(&m.name) {
                self.err(format!("{mp}.name"), format!("no volume named {:?} in spec.volumes", m.name));
            }
            if m.mount_path.is_empty() {
                self.err(format!("{mp}.mountPath"), "is required");
            } else if !mount_paths.insert(m.mount_path.clone()) {
                self.err(format!("{mp}.mountPath"), format!("{:?} is mounted twice", m.mount_path));
            }
            if let Some(sp) = &m.sub_path {
                if sp.starts_with('/') || sp.split('/').any(|seg| seg == "..") {
                    self.err(format!("{mp}.subPath"), format!("{sp:?} must be a relative path without '..'"));
                }
            }
            self.one_of(
                &format!("{mp}.mountPropagation"),
                m.mount_propagation.as_deref(),
                &["None", "HostToContainer", "Bidirectional"],
            );
        }
        // Probes and hooks.
        for (field, probe) in [
            ("livenessProbe", &c.liveness_probe),
            ("readinessProbe", &c.readiness_probe),
            ("startupProbe", &c.startup_probe),
        ] {
            if let Some(p) = probe {
                self.probe(&format!("{path}.{field}"), p, field != "readinessProbe", c);
            }
        }
        if let Some(l) = &c.lifecycle {
            for (field, h) in [("postStart", &l.post_start), ("preStop", &l.pre_stop)] {
                if let Some(h) = h {
                    let hp = format!("{path}.lifecycle.{field}");
                    let n = [h.exec.is_some(), h.http_get.is_some(), h.tcp_socket.is_some(), h.sleep.is_some()]
                        .iter()
                        .filter(|x| **x)
                        .count();
                    if n != 1 {
                        self.err(&hp, "must have exactly one handler (exec, httpGet, tcpSocket or sleep)");
                    }
                    if let Some(e) = &h.exec {
                        if e.command.is_empty() {
                            self.err(format!("{hp}.exec.command"), "is required");
                        }
                    }
                    if let Some(g) = &h.http_get {
                        self.port_ref(&format!("{hp}.httpGet.port"), &g.port, c);
                        self.one_of(&format!("{hp}.httpGet.scheme"), g.scheme.as_deref(), &["HTTP", "HTTPS"]);
                    }
                    if let Some(s) = &h.sleep {
                        let grace = self.grace.max(0);
                        if s.seconds < 0 || s.seconds > grace {
                            self.err(
                                format!("{hp}.sleep.seconds"),
                                format!("{} must be between 0 and terminationGracePeriodSeconds ({grace})", s.seconds),
                            );
                        }
                    }
                }
            }
        }
        if let Some(sc) = &c.security_context {
            self.ids(&format!("{path}.securityContext"), sc.run_as_user, sc.run_as_group);
            if let Some(pm) = &sc.proc_mount {
                self.one_of(&format!("{path}.securityContext.procMount"), Some(pm), &["Default", "Unmasked"]);
            }
            if let Some(sp) = &sc.seccomp_profile {
                self.seccomp(&format!("{path}.securityContext.seccompProfile"), sp);
            }
            if sc.privileged == Some(true) && sc.allow_privilege_escalation == Some(false) {
                self.err(
                    format!("{path}.securityContext.allowPrivilegeEscalation"),
                    "cannot be false when privileged is true",
                );
            }
        }
    }

    /// runAsUser and runAsGroup: Linux IDs, 0 to 2147483647 (the API's IsValidUserID).
    fn ids(&mut self, path: &str, user: Option<i64>, group: Option<i64>) {
        self.range(&format!("{path}.runAsUser"), user, 0, INT32_MAX);
        self.range(&format!("{path}.runAsGroup"), group, 0, INT32_MAX);
    }

    fn seccomp(&mut self, path: &str, sp: &SeccompProfile) {
        self.one_of(&format!("{path}.type"), Some(&sp.type_), &["RuntimeDefault", "Unconfined", "Localhost"]);
        if sp.type_ == "Localhost" && sp.localhost_profile.as_deref().unwrap_or("").is_empty() {
            self.err(format!("{path}.localhostProfile"), "is required for type Localhost");
        }
    }

    fn probe(&mut self, path: &str, p: &Probe, success_must_be_one: bool, c: &Container) {
        let n = [p.exec.is_some(), p.http_get.is_some(), p.tcp_socket.is_some(), p.grpc.is_some()]
            .iter()
            .filter(|x| **x)
            .count();
        if n != 1 {
            self.err(path, "must have exactly one handler (exec, httpGet, tcpSocket or grpc)");
        }
        for (field, value, min) in [
            ("initialDelaySeconds", p.initial_delay_seconds, 0),
            ("timeoutSeconds", p.timeout_seconds, 1),
            ("periodSeconds", p.period_seconds, 1),
            ("successThreshold", p.success_threshold, 1),
            ("failureThreshold", p.failure_threshold, 1),
        ] {
            // int32 in the API: a larger value is refused, never wrapped or overflowed.
            self.range(&format!("{path}.{field}"), value, min, INT32_MAX);
        }
        if success_must_be_one && p.success_threshold.is_some_and(|s| s != 1) {
            self.err(format!("{path}.successThreshold"), "must be 1 for liveness and startup probes");
        }
        if let Some(t) = p.termination_grace_period_seconds {
            if t < 1 {
                self.err(format!("{path}.terminationGracePeriodSeconds"), "must be a positive number of seconds");
            }
        }
        if let Some(e) = &p.exec {
            if e.command.is_empty() {
                self.err(format!("{path}.exec.command"), "is required");
            }
        }
        if let Some(g) = &p.http_get {
            self.port_ref(&format!("{path}.httpGet.port"), &g.port, c);
            self.one_of(&format!("{path}.httpGet.scheme"), g.scheme.as_deref(), &["HTTP", "HTTPS"]);
            for (i, h) in g.http_headers.iter().enumerate() {
                if h.name.is_empty()
                    || !h.name.chars().all(|ch| ch.is_ascii_alphanumeric() || "-_!#$%&'*+.^`|~".contains(ch))
                {
                    self.err(
                        format!("{path}.httpGet.httpHeaders[{i}].name"),
                        format!("{:?} is not a valid header name", h.name),
                    );
                }
            }
        }
        if let Some(t) = &p.tcp_socket {
            self.port_ref(&format!("{path}.tcpSocket.port"), &t.port, c);
        }
        if let Some(g) = &p.grpc {
            if !(1..=65535).contains(&g.port) {
                self.err(format!("{path}.grpc.port"), format!("{} must be between 1 and 65535", g.port));
            }
        }
    }

    /// A port given by number (1-65535) or by the name of one of the container's ports.
    fn port_ref(&mut self, path: &str, port: &IntOrString, c: &Container) {
        match port {
            IntOrString::Int(n) if (1..=65535).contains(n) => {}
            IntOrString::Int(n) => self.err(path, format!("{n} must be between 1 and 65535")),
            IntOrString::Str(name) => {
                if !c.ports.iter().any(|p| p.name.as_deref() == Some(name)) {
                    self.err(path, format!("no port named {name:?} in this container's ports"));
                }
            }
        }
    }

    /// kubelet refuses static pods that reference API objects (PreventStaticPodAPIReferences).
    fn static_restrictions(&mut self, s: &PodSpec) {
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
        if !s.resource_claims.is_empty() {
            refuse(self, "spec.resourceClaims".into(), "resourceclaims");
        }
        if !s.ephemeral_containers.is_empty() {
            self.err("spec.ephemeralContainers", "ephemeral containers cannot be set on create");
        }
        if !s.scheduling_gates.is_empty() {
            self.err("spec.schedulingGates", "static pods may not have scheduling gates");
        }
        for (i, v) in s.volumes.iter().enumerate() {
            let p = format!("spec.volumes[{i}]");
            for (set, field, what) in [
                (v.secret.is_some(), "secret", "secrets"),
                (v.config_map.is_some(), "configMap", "configmaps"),
                (v.persistent_volume_claim.is_some(), "persistentVolumeClaim", "persistentvolumeclaims"),
                (v.projected.is_some(), "projected", "projected API objects"),
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
        for (cp, c) in containers {
            for (i, e) in c.env.iter().enumerate() {
                if let Some(src) = &e.value_from {
                    if src.secret_key_ref.is_some() {
                        refuse(self, format!("{cp}.env[{i}].valueFrom.secretKeyRef"), "secrets");
                    }
                    if src.config_map_key_ref.is_some() {
                        refuse(self, format!("{cp}.env[{i}].valueFrom.configMapKeyRef"), "configmaps");
                    }
                }
            }
            for (i, ef) in c.env_from.iter().enumerate() {
                let what = if ef.get("secretRef").is_some() { "secrets" } else { "configmaps" };
                refuse(self, format!("{cp}.envFrom[{i}]"), what);
            }
        }
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    Init,
    Regular,
}

fn field_ref_ok(path: &str) -> bool {
    if FIELD_REFS.contains(&path) {
        return true;
    }
    for prefix in ["metadata.labels['", "metadata.annotations['"] {
        if let Some(rest) = path.strip_prefix(prefix) {
            return rest.ends_with("']") && rest.len() > 2;
        }
    }
    false
}

/// RFC 1123 label: at most 63 lowercase letters, digits and '-', alphanumeric at both ends.
pub fn dns1123_label(s: &str) -> Result<(), String> {
    if s.is_empty() {
        return Err("must not be empty".into());
    }
    if s.len() > 63 {
        return Err("must be at most 63 characters".into());
    }
    let ok_chars = s.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-');
    if !ok_chars || s.starts_with('-') || s.ends_with('-') {
        return Err(
            "must consist of lowercase letters, digits and '-', and start and end with a letter or digit".into()
        );
    }
    Ok(())
}

/// RFC 1123 subdomain: at most 253 characters, dot-separated labels.
pub fn dns1123_subdomain(s: &str) -> Result<(), String> {
    if s.is_empty() {
        return Err("must not be empty".into());
    }
    if s.len() > 253 {
        return Err("must be at most 253 characters".into());
    }
    let ok_chars = s.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '.');
    let ok_ends = s.split('.').all(|part| {
        !part.is_empty()
            && part.starts_with(|c: char| c.is_ascii_alphanumeric())
            && part.ends_with(|c: char| c.is_ascii_alphanumeric())
    });
    if !ok_chars || !ok_ends {
        return Err("must consist of lowercase letters, digits, '-' and '.', each part starting and ending with a letter or digit".into());
    }
    Ok(())
}

/// An IANA service name: at most 15 lowercase letters, digits and '-', with a letter, no
/// '-' at either end and no "--".
pub fn port_name(s: &str) -> Result<(), String> {
    let ok = !s.is_empty()
        && s.len() <= 15
        && s.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
        && s.chars().any(|c| c.is_ascii_lowercase())
        && !s.starts_with('-')
        && !s.ends_with('-')
        && !s.contains("--");
    if ok {
        Ok(())
    } else {
        Err("must be at most 15 lowercase letters, digits and '-', contain a letter, and not start, end or double '-'"
            .into())
    }
}

/// A label value: empty, or at most 63 letters, digits, '-', '_' or '.', alphanumeric at both
/// ends.
pub fn label_value(v: &str) -> Result<(), String> {
    let bad = v.len() > 63
        || !v.chars().all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
        || v.starts_with(['-', '_', '.'])
        || v.ends_with(['-', '_', '.']);
    if bad {
        Err(format!("value {v:?} must be at most 63 characters of letters, digits, '-', '_' or '.', starting and ending with a letter or digit"))
    } else {
        Ok(())
    }
}

/// A label key: optional DNS subdomain prefix and '/', then a name of at most 63 characters.
pub fn qualified_name(key: &str) -> Result<(), String> {
    let (prefix, name) = match key.rsplit_once('/') {
        Some((p, n)) => (Some(p), n),
        None => (None, key),
    };
    if let Some(p) = prefix {
        dns1123_subdomain(p).map_err(|e| format!("key prefix {p:?} {e}"))?;
    }
    let ok = !name.is_empty()
        && name.len() <= 63
        && name.chars().all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
        && name.starts_with(|c: char| c.is_ascii_alphanumeric())
        && name.ends_with(|c: char| c.is_ascii_alphanumeric());
    if ok {
        Ok(())
    } else {
        Err(format!("key {key:?} must be a name of at most 63 letters, digits, '-', '_' or '.', starting and ending with a letter or digit"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pod::{defaults, identity};

    fn check(json: &str) -> Vec<String> {
        let mut pod: Pod = serde_json::from_str(json).unwrap_or_else(|e| panic!("{e}: {json}"));
        defaults::apply(&mut pod);
        let sp = identity::make_static(pod, &identity::Origin::File("/m/p.yaml".into()), "node-1");
        validate(&sp.pod).into_iter().map(|f| f.to_string()).collect()
    }

    fn with_container(extra: &str) -> String {
        format!(r#"{{"metadata":{{"name":"p"}},"spec":{{"containers":[{{"name":"c","image":"x:1"{extra}}}]}}}}"#)
    }

    fn has(problems: &[String], needle: &str) {
        assert!(problems.iter().any(|p| p.contains(needle)), "expected {needle:?} in {problems:#?}");
    }

    #[test]
    fn a_plain_pod_is_valid() {
        assert_eq!(check(&with_container("")), Vec::<String>::new());
    }

    #[test]
    fn names_must_be_dns_1123() {
        has(
            &check(r#"{"metadata":{"name":"Web_1"},"spec":{"containers":[{"name":"c","image":"x"}]}}"#),
            "metadata.name: \"Web_1-node-1\"",
        );
        has(
            &check(&with_container("").replace(r#""name":"c""#, r#""name":"C""#)),
            "spec.containers[0].name: \"C\" must consist of lowercase",
        );
        has(
            &check(r#"{"metadata":{"name":"p","namespace":"a.b"},"spec":{"containers":[{"name":"c","image":"x"}]}}"#),
            "metadata.namespace",
        );
    }

    #[test]
    fn container_names_are_unique_across_init_and_regular() {
        let p = check(
            r#"{"metadata":{"name":"p"},"spec":{"initContainers":[{"name":"c","image":"x"}],"containers":[{"name":"c","image":"x"}]}}"#,
        );
        has(&p, "spec.containers[0].name: duplicate container name \"c\"");
        has(&check(r#"{"metadata":{"name":"p"},"spec":{}}"#), "spec.containers: at least one container is required");
        has(
            &check(&with_container("").replace(r#""image":"x:1""#, r#""image":" x""#)),
            "spec.containers[0].image: must not have leading",
        );
    }

    #[test]
    fn ports_are_checked() {
        has(
            &check(&with_container(r#","ports":[{"containerPort":0}]"#)),
            "spec.containers[0].ports[0].containerPort: 0 must be between 1 and 65535",
        );
        has(
            &check(&with_container(r#","ports":[{"containerPort":80,"protocol":"ICMP"}]"#)),
            "ports[0].protocol: unsupported value \"ICMP\"",
        );
        has(&check(&with_container(r#","ports":[{"containerPort":80,"name":"HTTP"}]"#)), "ports[0].name: \"HTTP\"");
        has(
            &check(&with_container(
                r#","ports":[{"containerPort":80,"name":"web"},{"containerPort":81,"name":"web"}]"#,
            )),
            "duplicate port name \"web\"",
        );
        let two = r#"{"metadata":{"name":"p"},"spec":{"containers":[{"name":"a","image":"x","ports":[{"containerPort":80,"hostPort":8080}]},{"name":"b","image":"x","ports":[{"containerPort":81,"hostPort":8080}]}]}}"#;
        has(&check(two), "spec.containers[1].ports[0].hostPort: host port 8080/TCP is already used by spec.containers[0].ports[0].hostPort");
        let hn = r#"{"metadata":{"name":"p"},"spec":{"hostNetwork":true,"containers":[{"name":"a","image":"x","ports":[{"containerPort":80,"hostPort":81}]}]}}"#;
        has(&check(hn), "must equal containerPort 80 with hostNetwork");
    }

    #[test]
    fn probes_need_exactly_one_handler_and_sane_numbers() {
        has(
            &check(&with_container(r#","livenessProbe":{"periodSeconds":5}"#)),
            "spec.containers[0].livenessProbe: must have exactly one handler",
        );
        has(
            &check(&with_container(r#","readinessProbe":{"exec":{"command":["true"]},"tcpSocket":{"port":1}}"#)),
            "readinessProbe: must have exactly one handler",
        );
        has(
            &check(&with_container(r#","livenessProbe":{"exec":{"command":["true"]},"successThreshold":2}"#)),
            "must be 1 for liveness",
        );
        has(
            &check(&with_container(r#","livenessProbe":{"httpGet":{"port":"web"}}"#)),
            "livenessProbe.httpGet.port: no port named \"web\"",
        );
        has(
            &check(&with_container(r#","startupProbe":{"tcpSocket":{"port":70000}}"#)),
            "startupProbe.tcpSocket.port: 70000 must be between",
        );
        has(
            &check(&with_container(r#","readinessProbe":{"exec":{"command":["true"]},"periodSeconds":0}"#)),
            "readinessProbe.periodSeconds: 0 must be between 1 and 2147483647",
        );
        assert!(check(&with_container(
            r#","ports":[{"name":"web","containerPort":80}],"livenessProbe":{"httpGet":{"port":"web"}}"#
        ))
        .is_empty());
    }

    #[test]
    fn numbers_from_the_manifest_are_range_checked_with_the_field_named() {
        let p = check(&with_container(
            r#","livenessProbe":{"exec":{"command":["true"]},"periodSeconds":36028797018963968,"timeoutSeconds":9223372036854775807},
            "securityContext":{"runAsUser":-1},"lifecycle":{"preStop":{"sleep":{"seconds":31}}}"#,
        ));
        has(&p, "spec.containers[0].livenessProbe.periodSeconds: 36028797018963968 must be between 1 and 2147483647");
        has(
            &p,
            "spec.containers[0].livenessProbe.timeoutSeconds: 9223372036854775807 must be between 1 and 2147483647",
        );
        has(&p, "spec.containers[0].securityContext.runAsUser: -1 must be between 0 and 2147483647");
        has(&p, "spec.containers[0].lifecycle.preStop.sleep.seconds: 31 must be between 0 and terminationGracePeriodSeconds (30)");
        let d = check(
            r#"{"metadata":{"name":"p"},"spec":{"activeDeadlineSeconds":4294967296,"containers":[{"name":"c","image":"x"}]}}"#,
        );
        has(&d, "spec.activeDeadlineSeconds: 4294967296 must be between 1 and 2147483647");
        // A grace period is int64 in the API: the largest is valid (its use saturates).
        let g = r#"{"metadata":{"name":"p"},"spec":{"terminationGracePeriodSeconds":9223372036854775807,"containers":[{"name":"c","image":"x"}]}}"#;
        assert!(check(g).is_empty(), "{:?}", check(g));
    }

    #[test]
    fn a_uid_must_be_a_safe_directory_name() {
        for bad in ["/", "..", "../../x", "a/b", ".x"] {
            let json = format!(
                r#"{{"metadata":{{"name":"p","uid":"{bad}"}},"spec":{{"containers":[{{"name":"c","image":"x"}}]}}}}"#
            );
            has(&check(&json), &format!("metadata.uid: \"{bad}\" must be 1 to 128 letters"));
        }
        let ok = r#"{"metadata":{"name":"p","uid":"8f1c8d8e-6a4b-4c55-9d2c-0d7b0b0b3c1e"},"spec":{"containers":[{"name":"c","image":"x"}]}}"#;
        assert!(check(ok).is_empty());
    }

    #[test]
    fn policies_must_be_known_values() {
        has(
            &check(
                r#"{"metadata":{"name":"p"},"spec":{"restartPolicy":"Sometimes","containers":[{"name":"c","image":"x"}]}}"#,
            ),
            "spec.restartPolicy: unsupported value \"Sometimes\"",
        );
        has(&check(&with_container(r#","imagePullPolicy":"Maybe""#)), "imagePullPolicy: unsupported value");
        has(
            &check(r#"{"metadata":{"name":"p"},"spec":{"dnsPolicy":"None","containers":[{"name":"c","image":"x"}]}}"#),
            "dnsPolicy None needs at least one nameserver",
        );
        has(
            &check(&with_container(r#","restartPolicy":"Always""#)),
            "spec.containers[0].restartPolicy: only init containers",
        );
        let init = r#"{"metadata":{"name":"p"},"spec":{"initContainers":[{"name":"i","image":"x","livenessProbe":{"exec":{"command":["true"]}}}],"containers":[{"name":"c","image":"x"}]}}"#;
        has(&check(init), "spec.initContainers[0].livenessProbe: not allowed on an init container");
        let sidecar = init.replace(r#""name":"i","#, r#""name":"i","restartPolicy":"Always","#);
        assert!(check(&sidecar).is_empty(), "{:?}", check(&sidecar));
    }

    #[test]
    fn static_pods_may_not_reference_api_objects() {
        let p = check(
            r#"{"metadata":{"name":"p"},"spec":{"serviceAccountName":"sa","imagePullSecrets":[{"name":"s"}],
            "volumes":[{"name":"a","secret":{"secretName":"s"}},{"name":"b","configMap":{"name":"c"}},{"name":"c","persistentVolumeClaim":{"claimName":"x"}}],
            "containers":[{"name":"c","image":"x","env":[{"name":"A","valueFrom":{"secretKeyRef":{"name":"s","key":"k"}}}],"envFrom":[{"configMapRef":{"name":"c"}}]}],
            "ephemeralContainers":[{"name":"e"}],"schedulingGates":[{"name":"g"}]}}"#,
        );
        for needle in [
            "spec.serviceAccountName: static pods may not reference serviceaccounts",
            "spec.imagePullSecrets: static pods may not reference secrets",
            "spec.volumes[0].secret: static pods may not reference secrets",
            "spec.volumes[1].configMap: static pods may not reference configmaps",
            "spec.volumes[2].persistentVolumeClaim: static pods may not reference persistentvolumeclaims",
            "spec.containers[0].env[0].valueFrom.secretKeyRef: static pods may not reference secrets",
            "spec.containers[0].envFrom[0]: static pods may not reference configmaps",
            "spec.ephemeralContainers: ephemeral containers cannot be set on create",
            "spec.schedulingGates: static pods may not have scheduling gates",
        ] {
            has(&p, needle);
        }
    }

    #[test]
    fn volumes_and_mounts_must_agree() {
        let p = check(
            r#"{"metadata":{"name":"p"},"spec":{"volumes":[{"name":"data","hostPath":{"path":"rel","type":"Folder"}}],
            "containers":[{"name":"c","image":"x","volumeMounts":[{"name":"nope","mountPath":"/a"},{"name":"data","mountPath":"/a","subPath":"../x"}]}]}}"#,
        );
        has(&p, "spec.volumes[0].hostPath.path: \"rel\" must be an absolute path");
        has(&p, "spec.volumes[0].hostPath.type: unsupported value \"Folder\"");
        has(&p, "spec.containers[0].volumeMounts[0].name: no volume named \"nope\"");
        has(&p, "spec.containers[0].volumeMounts[1].mountPath: \"/a\" is mounted twice");
        has(&p, "volumeMounts[1].subPath: \"../x\" must be a relative path");
    }

    #[test]
    fn env_sources_and_resources_are_checked() {
        has(
            &check(&with_container(
                r#","env":[{"name":"A","valueFrom":{"fieldRef":{"fieldPath":"spec.nodeSelector"}}}]"#,
            )),
            "fieldRef.fieldPath: \"spec.nodeSelector\" is not supported",
        );
        assert!(check(&with_container(
            r#","env":[{"name":"A","valueFrom":{"fieldRef":{"fieldPath":"metadata.labels['app']"}}}]"#
        ))
        .is_empty());
        has(&check(&with_container(r#","env":[{"name":"A=B","value":"x"}]"#)), "env[0].name: \"A=B\"");
        has(
            &check(&with_container(r#","resources":{"limits":{"cpu":"1"},"requests":{"cpu":"2"}}"#)),
            "resources.requests.cpu: 2 must not be more than the limit 1",
        );
        has(
            &check(&with_container(r#","resources":{"limits":{"nvidia.com/gpu":"1"}}"#)),
            "resource \"nvidia.com/gpu\" is not supported",
        );
    }

    #[test]
    fn every_problem_is_reported_not_only_the_first() {
        let p = check(
            r#"{"metadata":{"name":"p"},"spec":{"restartPolicy":"x","containers":[{"name":"c","image":"","ports":[{"containerPort":0}]}]}}"#,
        );
        assert!(p.len() >= 3, "{p:?}");
    }
}
