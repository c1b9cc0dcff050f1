//! PodSandboxConfig for a pod, as kubelet builds it: metadata and attempt, hostname (none for
//! host-network pods), log directory `<podLogsDir>/<ns>_<name>_<uid>`, DNS per dnsPolicy,
//! host port mappings, kubelet's labels, the pod's annotations, namespace options (PID mode
//! CONTAINER by default), sysctls, and for a pod with pod-level limits its own cgroup as the
//! parent with the pod's resources. A pure function of the pod and the node's facts.

use crate::cri::api::{
    DnsConfig, Int64Value, LinuxPodSandboxConfig, LinuxSandboxSecurityContext, NamespaceMode, NamespaceOption,
    PodSandboxConfig, PodSandboxMetadata, PortMapping, Protocol, SecurityProfile,
};
use crate::node::Facts;
use crate::pod::types::Pod;
use std::collections::HashMap;
use std::path::PathBuf;

pub const LABEL_POD_NAME: &str = "io.kubernetes.pod.name";
pub const LABEL_POD_NAMESPACE: &str = "io.kubernetes.pod.namespace";
pub const LABEL_POD_UID: &str = "io.kubernetes.pod.uid";
pub const LABEL_CONTAINER_NAME: &str = "io.kubernetes.container.name";
/// Marks what atoll created, so it never touches anything else. An annotation, not a label,
/// so that the labels `crictl pods` shows are exactly kubelet's.
pub const ANNOTATION_MANAGED_BY: &str = "atoll.io/managed-by";

/// `<podLogsDir>/<namespace>_<name>_<uid>`
pub fn log_directory(facts: &Facts, pod: &Pod) -> Result<PathBuf, String> {
    let m = &pod.metadata;
    crate::pod::paths::pod_log_dir(&facts.pod_logs_dir, &m.namespace, &m.name, &m.uid)
        .map_err(|e| format!("pod log directory: {e}"))
}

/// The sandbox's labels: the pod's, with kubelet's three on top.
pub fn sandbox_labels(pod: &Pod) -> HashMap<String, String> {
    let mut labels: HashMap<String, String> = pod.metadata.labels.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
    labels.insert(LABEL_POD_NAME.into(), pod.metadata.name.clone());
    labels.insert(LABEL_POD_NAMESPACE.into(), pod.metadata.namespace.clone());
    labels.insert(LABEL_POD_UID.into(), pod.metadata.uid.clone());
    labels
}

/// The namespace options of the pod's sandbox and containers.
pub fn namespace_options(pod: &Pod) -> NamespaceOption {
    let s = &pod.spec;
    let pid = if s.host_pid {
        NamespaceMode::Node
    } else if s.share_process_namespace == Some(true) {
        NamespaceMode::Pod
    } else {
        NamespaceMode::Container
    };
    NamespaceOption {
        network: if s.host_network { NamespaceMode::Node } else { NamespaceMode::Pod } as i32,
        pid: pid as i32,
        ipc: if s.host_ipc { NamespaceMode::Node } else { NamespaceMode::Pod } as i32,
        target_id: String::new(),
    }
}

/// The pod's hostname (kubelet: spec.hostname or the pod name, at most 63 characters).
pub fn hostname(pod: &Pod) -> String {
    let h = pod.spec.hostname.clone().unwrap_or_else(|| pod.metadata.name.clone());
    let cut: String = h.chars().take(63).collect();
    cut.trim_end_matches(['-', '.']).to_string()
}

/// Builds the sandbox config; fails only for a name that cannot be a directory (which
/// validation has already refused). The runtime handler of the pod's class is the engine's.
pub fn sandbox_config(pod: &Pod, attempt: u32, ctx: &Facts) -> Result<PodSandboxConfig, String> {
    let sc = pod.spec.security_context.clone().unwrap_or_default();
    let privileged =
        pod.all_containers().any(|(_, c)| c.security_context.as_ref().and_then(|s| s.privileged) == Some(true));
    let mut port_mappings = Vec::new();
    for c in &pod.spec.containers {
        for p in &c.ports {
            let protocol = match p.protocol.as_deref() {
                Some("UDP") => Protocol::Udp,
                Some("SCTP") => Protocol::Sctp,
                _ => Protocol::Tcp,
            };
            port_mappings.push(PortMapping {
                protocol: protocol as i32,
                container_port: p.container_port as i32,
                host_port: p.host_port.unwrap_or(0) as i32,
                host_ip: p.host_ip.clone().unwrap_or_default(),
            });
        }
    }
    let config = PodSandboxConfig {
        metadata: Some(PodSandboxMetadata {
            name: pod.metadata.name.clone(),
            uid: pod.metadata.uid.clone(),
            namespace: pod.metadata.namespace.clone(),
            attempt,
        }),
        hostname: if pod.spec.host_network { String::new() } else { hostname(pod) },
        log_directory: log_directory(ctx, pod)?.to_string_lossy().into_owned(),
        dns_config: Some(dns_config(pod, ctx)),
        port_mappings,
        labels: sandbox_labels(pod),
        annotations: pod
            .metadata
            .annotations
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .chain([(ANNOTATION_MANAGED_BY.to_string(), "atoll".to_string())])
            .collect(),
        linux: Some(LinuxPodSandboxConfig {
            // Empty (the runtime's choice) unless the pod has pod-level limits.
            cgroup_parent: super::pod_cgroup::parent(pod),
            resources: super::pod_cgroup::values(pod),
            security_context: Some(LinuxSandboxSecurityContext {
                namespace_options: Some(namespace_options(pod)),
                run_as_user: sc.run_as_user.map(|value| Int64Value { value }),
                run_as_group: sc.run_as_group.map(|value| Int64Value { value }),
                supplemental_groups: sc.fs_group.into_iter().chain(sc.supplemental_groups.iter().copied()).collect(),
                privileged,
                seccomp: Some(SecurityProfile { profile_type: 0, localhost_ref: String::new() }),
                ..Default::default()
            }),
            sysctls: sc.sysctls.iter().map(|s| (s.name.replace('/', "."), s.value.clone())).collect(),
            ..Default::default()
        }),
    };
    Ok(config)
}

/// DNS for the pod, by dnsPolicy (kubelet's GetPodDNS), merged with spec.dnsConfig.
pub fn dns_config(pod: &Pod, ctx: &Facts) -> DnsConfig {
    let (host_servers, host_searches, host_options) = parse_resolv_conf(&ctx.host_resolv_conf);
    let mut policy = pod.spec.dns_policy.clone().unwrap_or_else(|| "ClusterFirst".into());
    if policy == "ClusterFirst" && pod.spec.host_network {
        policy = "Default".into();
    }
    if policy == "ClusterFirstWithHostNet" {
        policy = "ClusterFirst".into();
    }
    if policy == "ClusterFirst" && ctx.cluster_dns.is_empty() {
        policy = "Default".into(); // no cluster DNS on this node: the host's resolver
    }
    let mut cfg = match policy.as_str() {
        "None" => DnsConfig::default(),
        "ClusterFirst" => {
            let ns = &pod.metadata.namespace;
            let d = &ctx.cluster_domain;
            let mut searches = vec![format!("{ns}.svc.{d}"), format!("svc.{d}"), d.clone()];
            searches.extend(host_searches);
            DnsConfig { servers: ctx.cluster_dns.clone(), searches, options: vec!["ndots:5".into()] }
        }
        _ => DnsConfig { servers: host_servers, searches: host_searches, options: host_options },
    };
    if let Some(extra) = &pod.spec.dns_config {
        for s in &extra.nameservers {
            if !cfg.servers.contains(s) {
                cfg.servers.push(s.clone());
            }
        }
        for s in &extra.searches {
            if !cfg.searches.contains(s) {
                cfg.searches.push(s.clone());
            }
        }
        for o in &extra.options {
            let text = match &o.value {
                Some(v) => format!("{}:{v}", o.name),
                None => o.name.clone(),
            };
            cfg.options.retain(|existing| existing.split(':').next() != Some(o.name.as_str()));
            cfg.options.push(text);
        }
    }
    cfg.servers.truncate(3);
    cfg.searches.truncate(32);
    cfg
}

/// nameservers, search domains and options of a resolv.conf.
pub fn parse_resolv_conf(text: &str) -> (Vec<String>, Vec<String>, Vec<String>) {
    let (mut servers, mut searches, mut options) = (Vec::new(), Vec::new(), Vec::new());
    for line in text.lines() {
        let line = line.split(['#', ';']).next().unwrap_or("");
        let mut words = line.split_whitespace();
        match words.next() {
            Some("nameserver") => servers.extend(words.next().map(String::from)),
            Some("search") | Some("domain") => searches = words.map(String::from).collect(),
            Some("options") => options.extend(words.map(String::from)),
            _ => {}
        }
    }
    (servers, searches, options)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pod::identity;

    fn pod(spec: &str) -> Pod {
        identity::test_pod(r#"{"name":"web","namespace":"prod","labels":{"app":"a"}}"#, spec, "n1")
    }

    fn ctx() -> Facts {
        Facts {
            name: "n1".into(),
            pod_logs_dir: "/var/log/pods".into(),
            root_dir: "/var/lib/atoll".into(),
            host_resolv_conf: "# host\nnameserver 192.0.2.53\nsearch lan example\noptions edns0\n".into(),
            ..Default::default()
        }
    }

    #[test]
    fn sandbox_config_carries_kubelets_identity_fields() {
        let p = pod(r#"{"containers":[{"name":"c","image":"x:1","ports":[{"containerPort":80,"hostPort":8080}]}]}"#);
        let cfg = sandbox_config(&p, 2, &ctx()).unwrap();
        let m = cfg.metadata.unwrap();
        assert_eq!((m.name.as_str(), m.namespace.as_str(), m.attempt), ("web-n1", "prod", 2));
        assert_eq!(m.uid, p.metadata.uid);
        assert_eq!(cfg.hostname, "web-n1");
        assert_eq!(cfg.log_directory, format!("/var/log/pods/prod_web-n1_{}", p.metadata.uid));
        assert_eq!(cfg.labels["app"], "a");
        assert_eq!(cfg.labels[LABEL_POD_NAME], "web-n1");
        assert_eq!(cfg.labels[LABEL_POD_NAMESPACE], "prod");
        assert_eq!(cfg.labels[LABEL_POD_UID], p.metadata.uid);
        assert_eq!(cfg.annotations["kubernetes.io/config.source"], "file");
        assert_eq!(cfg.port_mappings[0].host_port, 8080);
        let ns = cfg.linux.unwrap().security_context.unwrap().namespace_options.unwrap();
        assert_eq!(
            (ns.network, ns.pid, ns.ipc),
            (NamespaceMode::Pod as i32, NamespaceMode::Container as i32, NamespaceMode::Pod as i32)
        );
    }

    #[test]
    fn host_network_pods_get_no_hostname_and_the_hosts_resolver() {
        let p = pod(r#"{"hostNetwork":true,"hostPID":true,"containers":[{"name":"c","image":"x:1"}]}"#);
        let cfg = sandbox_config(&p, 0, &ctx()).unwrap();
        assert_eq!(cfg.hostname, "");
        let dns = cfg.dns_config.unwrap();
        assert_eq!(dns.servers, vec!["192.0.2.53"]);
        assert_eq!(dns.searches, vec!["lan", "example"]);
        let ns = cfg.linux.unwrap().security_context.unwrap().namespace_options.unwrap();
        assert_eq!((ns.network, ns.pid), (NamespaceMode::Node as i32, NamespaceMode::Node as i32));
    }

    #[test]
    fn dns_policies_follow_kubelet() {
        let mut c = ctx();
        c.cluster_dns = vec!["10.96.0.10".into()];
        c.cluster_domain = "cluster.local".into();
        let p = pod(r#"{"containers":[{"name":"c","image":"x:1"}]}"#);
        let d = dns_config(&p, &c);
        assert_eq!(d.servers, vec!["10.96.0.10"]);
        assert_eq!(d.searches, vec!["prod.svc.cluster.local", "svc.cluster.local", "cluster.local", "lan", "example"]);
        assert_eq!(d.options, vec!["ndots:5"]);
        let none = pod(
            r#"{"dnsPolicy":"None","dnsConfig":{"nameservers":["1.1.1.1"],"searches":["s"],"options":[{"name":"ndots","value":"2"}]},"containers":[{"name":"c","image":"x:1"}]}"#,
        );
        let d = dns_config(&none, &c);
        assert_eq!(
            (d.servers, d.searches, d.options),
            (vec!["1.1.1.1".to_string()], vec!["s".to_string()], vec!["ndots:2".to_string()])
        );
        // No cluster DNS configured: ClusterFirst falls back to the host's resolver.
        assert_eq!(dns_config(&p, &ctx()).servers, vec!["192.0.2.53"]);
    }
}
