//! A container's checks: name, image, policies, ports, env sources, resources, volume mounts,
//! probes and hooks (handlers, ports, int32 timings), security context (IDs, seccomp).

use super::names::{dns1123_label, port_name, qualified_name};
use super::validator::{Validator, INT32_MAX};
use crate::pod::types::*;
use std::collections::{BTreeMap, HashSet};

const PULL_POLICIES: &[&str] = &["Always", "IfNotPresent", "Never"];
const PROTOCOLS: &[&str] = &["TCP", "UDP", "SCTP"];
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
pub(super) const RESOURCE_REFS: &[&str] = &[
    "limits.cpu",
    "limits.memory",
    "limits.ephemeral-storage",
    "requests.cpu",
    "requests.memory",
    "requests.ephemeral-storage",
];

impl Validator {
    pub(super) fn container(
        &mut self,
        path: &str,
        c: &Container,
        volumes: &BTreeMap<String, bool>,
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
                    // An extended resource (a device plugin's): a whole number, never
                    // overcommitted; admission drops it where the node has none.
                    let extended = name.contains('/') && !name.contains("kubernetes.io/");
                    if extended && (qualified_name(name).is_err() || q.milli_value() % 1000 != 0) {
                        self.err(&rp, "an extended resource must be a qualified name with a whole number");
                    } else if extended && which == "requests" && r.limits.get(name) != Some(q) {
                        self.err(&rp, "an extended resource's request must equal its limit");
                    } else if !(extended
                        || matches!(name.as_str(), "cpu" | "memory" | "ephemeral-storage")
                        || name.starts_with("hugepages-"))
                    {
                        self.err(&rp, format!("resource {name:?} is not supported by atoll (cpu, memory, ephemeral-storage, hugepages-*, extended resources)"));
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
            let image_volume = match volumes.get(&m.name) {
                Some(image) => *image,
                None => {
                    self.err(format!("{mp}.name"), format!("no volume named {:?} in spec.volumes", m.name));
                    false
                }
            };
            if m.mount_path.is_empty() {
                self.err(format!("{mp}.mountPath"), "is required");
            } else if !mount_paths.insert(m.mount_path.clone()) {
                self.err(format!("{mp}.mountPath"), format!("{:?} is mounted twice", m.mount_path));
            }
            if let Some(sp) = &m.sub_path {
                if sp.starts_with('/') || sp.split('/').any(|seg| seg == "..") {
                    self.err(format!("{mp}.subPath"), format!("{sp:?} must be a relative path without '..'"));
                } else if image_volume && !sp.is_empty() {
                    self.err(format!("{mp}.subPath"), "a subPath of an image volume is not implemented by atoll");
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
    pub(super) fn ids(&mut self, path: &str, user: Option<i64>, group: Option<i64>) {
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
}

#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Kind {
    Init,
    Regular,
}

fn field_ref_ok(path: &str) -> bool {
    FIELD_REFS.contains(&path) || subscript_ok(path)
}

/// `metadata.labels['KEY']` or `metadata.annotations['KEY']`, the key a qualified name (an
/// annotation's compared in lower case), as the API's field selectors check it.
pub(super) fn subscript_ok(path: &str) -> bool {
    let key = |prefix: &str| path.strip_prefix(prefix).and_then(|r| r.strip_suffix("']"));
    match (key("metadata.labels['"), key("metadata.annotations['")) {
        (Some(k), _) => super::names::qualified_name(k).is_ok(),
        (_, Some(k)) => super::names::qualified_name(&k.to_ascii_lowercase()).is_ok(),
        _ => false,
    }
}
