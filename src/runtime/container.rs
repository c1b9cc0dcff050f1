//! ContainerConfig for one container instance, as kubelet builds it: metadata with the attempt
//! number, image, command and args with `$(VAR)` expansion, env (values, fieldRef,
//! resourceFieldRef, local ConfigMaps and Secrets), working dir, mounts (hostPath, emptyDir,
//! image volumes, object volumes read-only, the managed /etc/hosts, the termination log),
//! kubelet's four labels and its annotations, the log path `<container>/<restartCount>.log`,
//! Linux resources with the QoS class's oom_score_adj, and the security context (container
//! over pod; AppArmor as `pod::apparmor` resolves it). A pure function; the worker prepares the files.

use super::plan::container_hash;
use super::sandbox::{
    namespace_options, ANNOTATION_MANAGED_BY, LABEL_CONTAINER_NAME, LABEL_POD_NAME, LABEL_POD_NAMESPACE, LABEL_POD_UID,
};
use super::volumes::poddir::volume_path;
use crate::cri::api::{
    Capability, ContainerConfig, ContainerMetadata, ImageSpec, Int64Value, KeyValue, LinuxContainerConfig,
    LinuxContainerResources, LinuxContainerSecurityContext, Mount, MountPropagation, SecurityProfile,
};
use crate::pod::apparmor::Profile;
use crate::pod::derived::{expand, qos_class};
use crate::pod::fieldpath;
use crate::pod::paths::PodDir;
use crate::pod::schema;
use crate::pod::types::{Container, Pod};
use std::collections::HashMap;
use std::path::PathBuf;

/// kubelet's annotations from which a container's stop is rebuilt when its pod is gone
/// (`orphan`).
pub const ANNOTATION_GRACE: &str = "io.kubernetes.pod.terminationGracePeriod";
pub const ANNOTATION_PRE_STOP: &str = "io.kubernetes.container.preStopHandler";
pub const ANNOTATION_PORTS: &str = "io.kubernetes.container.ports";

/// What the node and the running sandbox contribute.
#[derive(Clone, Debug)]
pub struct InstanceContext {
    /// The pod's directory (made once per sync), where its volumes live.
    pub pod_dir: PodDir,
    pub pod_ip: String,
    pub host_ip: String,
    /// The node's allocatable CPU and memory: a container without a limit sees them as its
    /// limits (env `resourceFieldRef`).
    pub allocatable: fieldpath::Allocatable,
    /// The machine's memory (oom_score_adj, as kubelet computes it from capacity).
    pub node_memory_bytes: i64,
    /// A fresh, empty termination-log file for this instance, when the spec asks for one.
    pub termination_log: Option<PathBuf>,
    /// The managed hosts file, once written.
    pub hosts_file: Option<PathBuf>,
    /// Where each `volumeMounts[i]` with a subPath was safely bind-mounted (`subpath`), by i.
    pub subpaths: std::collections::BTreeMap<usize, PathBuf>,
    /// The image (as the runtime knows it) of each image volume, by volume name.
    pub image_volumes: std::collections::BTreeMap<String, String>,
    /// The local ConfigMaps and Secrets the pod references, as they were at this start
    /// (`Debug` shows keys and sizes only).
    pub objects: crate::objects::resolve::Snapshot,
}

/// The container's environment as kubelet builds it: `envFrom` first, then `env` in
/// declaration order (later duplicates win, as in kubelet's map). A missing object or key that
/// is not optional is kubelet's CreateContainerConfigError message.
pub fn environment(pod: &Pod, c: &Container, ctx: &InstanceContext) -> Result<Vec<(String, String)>, String> {
    use crate::objects::{resolve, ObjectKind};
    let ns = &pod.metadata.namespace;
    let mut vars: Vec<(String, String)> = Vec::new();
    for ef in &c.env_from {
        for (k, v) in resolve::env_from(ns, ef, &ctx.objects)? {
            vars.retain(|(n, _)| *n != k);
            vars.push((k, v));
        }
    }
    for (i, e) in c.env.iter().enumerate() {
        let value = if let Some(src) = &e.value_from {
            if let Some(f) = &src.field_ref {
                fieldpath::field(pod, &f.field_path, &ctx.pod_ip, &ctx.host_ip)
                    .ok_or_else(|| format!("env[{i}] {}: unsupported fieldPath {:?}", e.name, f.field_path))?
            } else if let Some(r) = &src.resource_field_ref {
                fieldpath::resource(pod, Some(c), r, ctx.allocatable)
                    .map_err(|m| format!("env[{i}] {}: {m}", e.name))?
            } else {
                let (kind, sel) = match (&src.config_map_key_ref, &src.secret_key_ref) {
                    (Some(sel), _) => (ObjectKind::ConfigMap, sel),
                    (None, Some(sel)) => (ObjectKind::Secret, sel),
                    (None, None) => return Err(format!("env[{i}] {}: valueFrom has no source", e.name)),
                };
                match resolve::key_ref(ns, kind, sel, &ctx.objects)? {
                    Some(v) => v,
                    None => continue, // optional and missing: not set
                }
            }
        } else {
            let known = vars.clone();
            let lookup = move |n: &str| known.iter().rev().find(|(k, _)| k == n).map(|(_, v)| v.clone());
            expand(e.value.as_deref().unwrap_or(""), &lookup)
        };
        vars.retain(|(k, _)| k != &e.name);
        vars.push((e.name.clone(), value));
    }
    Ok(vars)
}

/// Linux resources: cpu shares, CFS quota and period, memory limit, oom_score_adj.
pub fn linux_resources(pod: &Pod, c: &Container, node_memory_bytes: i64) -> LinuxContainerResources {
    let r = c.resources.clone().unwrap_or_default();
    let cpu_req = r.requests.get("cpu").or(r.limits.get("cpu")).map(|q| q.milli_value());
    let cpu_lim = r.limits.get("cpu").map(|q| q.milli_value());
    let mut out = LinuxContainerResources {
        cpu_shares: super::pod_cgroup::shares(cpu_req),
        memory_limit_in_bytes: r.limits.get("memory").map_or(0, |q| q.value()),
        ..Default::default()
    };
    if let Some(limit) = cpu_lim {
        out.cpu_period = 100_000;
        out.cpu_quota = super::pod_cgroup::quota(limit);
    }
    out.oom_score_adj = match qos_class(pod) {
        "Guaranteed" => -997,
        "BestEffort" => 1000,
        _ => {
            let req = r.requests.get("memory").map_or(0, |q| q.value());
            if node_memory_bytes <= 0 {
                999
            } else {
                1000i64.saturating_sub(req.saturating_mul(1000) / node_memory_bytes).clamp(3, 999)
            }
        }
    };
    out
}

/// Builds the config of one container instance. `image_ref` is what the runtime resolved
/// (an image id), or the spec's image.
pub fn container_config(
    pod: &Pod,
    c: &Container,
    restart_count: u32,
    image_ref: &str,
    ctx: &InstanceContext,
) -> Result<ContainerConfig, String> {
    let env = environment(pod, c, ctx)?;
    let lookup = |n: &str| env.iter().rev().find(|(k, _)| k == n).map(|(_, v)| v.clone());
    let mounts = mounts(pod, c, ctx)?;
    let uid = &pod.metadata.uid;
    let labels = HashMap::from([
        (LABEL_POD_NAME.to_string(), pod.metadata.name.clone()),
        (LABEL_POD_NAMESPACE.to_string(), pod.metadata.namespace.clone()),
        (LABEL_POD_UID.to_string(), uid.clone()),
        (LABEL_CONTAINER_NAME.to_string(), c.name.clone()),
    ]);
    let annotations = annotations(pod, c, restart_count);
    let security = security_context(pod, c);
    Ok(ContainerConfig {
        metadata: Some(ContainerMetadata { name: c.name.clone(), attempt: restart_count }),
        image: Some(ImageSpec { image: image_ref.into(), user_specified_image: c.image.clone(), ..Default::default() }),
        command: c.command.iter().map(|s| expand(s, &lookup)).collect(),
        args: c.args.iter().map(|s| expand(s, &lookup)).collect(),
        working_dir: c.working_dir.clone().unwrap_or_default(),
        envs: env.iter().map(|(k, v)| KeyValue { key: k.clone(), value: v.clone().into_bytes() }).collect(),
        mounts,
        labels,
        annotations,
        log_path: format!("{}/{restart_count}.log", c.name),
        stdin: c.stdin,
        stdin_once: c.stdin_once,
        tty: c.tty,
        linux: Some(LinuxContainerConfig {
            resources: Some(linux_resources(pod, c, ctx.node_memory_bytes)),
            security_context: Some(security),
        }),
        ..Default::default()
    })
}

/// The container's mounts: its volumes (an image volume as the runtime mounts it, a subPath
/// as prepared), then `/etc/hosts` and the termination log unless the pod mounts its own.
fn mounts(pod: &Pod, c: &Container, ctx: &InstanceContext) -> Result<Vec<Mount>, String> {
    let mut mounts = Vec::new();
    for (i, m) in c.volume_mounts.iter().enumerate() {
        let v = pod
            .spec
            .volumes
            .iter()
            .find(|v| v.name == m.name)
            .ok_or_else(|| format!("volumeMounts[{i}]: no volume {:?}", m.name))?;
        if v.image.is_some() {
            // The runtime mounts the image's content, read only (CRI's Mount.image).
            let image =
                ctx.image_volumes.get(&v.name).ok_or_else(|| format!("image volume {:?} not pulled", v.name))?;
            mounts.push(Mount {
                container_path: m.mount_path.clone(),
                readonly: true,
                image: Some(ImageSpec { image: image.clone(), ..Default::default() }),
                ..Default::default()
            });
            continue;
        }
        let mut host =
            volume_path(&ctx.pod_dir, v)?.ok_or_else(|| format!("volume {:?}: its type is not implemented", v.name))?;
        if m.sub_path.as_deref().is_some_and(|s| !s.is_empty()) {
            // Never the volume path joined with the subPath: that would follow the pod's links.
            host = ctx.subpaths.get(&i).cloned().ok_or_else(|| format!("volumeMounts[{i}]: subPath not prepared"))?;
        }
        mounts.push(Mount {
            container_path: m.mount_path.clone(),
            host_path: host.to_string_lossy().into_owned(),
            // kubelet mounts ConfigMap, Secret, projected and downwardAPI volumes read-only, always.
            readonly: m.read_only || super::volumes::object_volumes::written(v),
            propagation: match m.mount_propagation.as_deref() {
                Some("HostToContainer") => MountPropagation::PropagationHostToContainer,
                Some("Bidirectional") => MountPropagation::PropagationBidirectional,
                _ => MountPropagation::PropagationPrivate,
            } as i32,
            ..Default::default()
        });
    }
    if let Some(hosts) = &ctx.hosts_file {
        if !c.volume_mounts.iter().any(|m| m.mount_path == "/etc/hosts") {
            mounts.push(Mount {
                container_path: "/etc/hosts".into(),
                host_path: hosts.to_string_lossy().into_owned(),
                ..Default::default()
            });
        }
    }
    if let (Some(log), Some(path)) =
        (&ctx.termination_log, c.termination_message_path.as_deref().filter(|p| !p.is_empty()))
    {
        mounts.push(Mount {
            container_path: path.into(),
            host_path: log.to_string_lossy().into_owned(),
            ..Default::default()
        });
    }
    Ok(mounts)
}

/// The annotations kubelet puts on a container, and atoll's own (grace, preStop, ports).
fn annotations(pod: &Pod, c: &Container, restart_count: u32) -> HashMap<String, String> {
    let mut annotations = HashMap::from([
        ("io.kubernetes.container.hash".to_string(), container_hash(c)),
        ("io.kubernetes.container.restartCount".to_string(), restart_count.to_string()),
        (
            "io.kubernetes.container.terminationMessagePath".to_string(),
            c.termination_message_path.clone().unwrap_or_default(),
        ),
        (
            "io.kubernetes.container.terminationMessagePolicy".to_string(),
            c.termination_message_policy.clone().unwrap_or_default(),
        ),
        (ANNOTATION_MANAGED_BY.to_string(), "atoll".to_string()),
    ]);
    if let Some(g) = pod.spec.termination_grace_period_seconds {
        annotations.insert(ANNOTATION_GRACE.into(), g.to_string());
    }
    if let Some(pre) = c.lifecycle.as_ref().and_then(|l| l.pre_stop.as_ref()) {
        annotations.insert(ANNOTATION_PRE_STOP.into(), schema::to_string_ordered(&schema::HANDLER, pre));
    }
    if !c.ports.is_empty() {
        annotations.insert(ANNOTATION_PORTS.into(), schema::to_string_ordered(&schema::PORT, &c.ports));
    }
    annotations
}

/// The container's Linux security context, the pod's settings under the container's.
fn security_context(pod: &Pod, c: &Container) -> LinuxContainerSecurityContext {
    let psc = pod.spec.security_context.clone().unwrap_or_default();
    let sc = c.security_context.clone().unwrap_or_default();
    let seccomp = sc.seccomp_profile.or(psc.seccomp_profile).map(|p| SecurityProfile {
        profile_type: match p.type_.as_str() {
            "RuntimeDefault" => 0,
            "Localhost" => 2,
            _ => 1,
        },
        localhost_ref: p.localhost_profile.unwrap_or_default(),
    });
    let apparmor = crate::pod::apparmor::profile(pod, c);
    LinuxContainerSecurityContext {
        capabilities: sc.capabilities.map(|caps| Capability {
            add_capabilities: caps.add,
            drop_capabilities: caps.drop,
            ..Default::default()
        }),
        privileged: sc.privileged.unwrap_or(false),
        namespace_options: Some(namespace_options(pod)),
        run_as_user: sc.run_as_user.or(psc.run_as_user).map(|value| Int64Value { value }),
        run_as_group: sc.run_as_group.or(psc.run_as_group).map(|value| Int64Value { value }),
        readonly_rootfs: sc.read_only_root_filesystem.unwrap_or(false),
        supplemental_groups: psc.fs_group.into_iter().chain(psc.supplemental_groups.iter().copied()).collect(),
        no_new_privs: sc.allow_privilege_escalation == Some(false),
        seccomp: Some(seccomp.unwrap_or(SecurityProfile { profile_type: 1, localhost_ref: String::new() })),
        apparmor: apparmor.as_ref().map(security_profile),
        apparmor_profile: apparmor.map(|p| p.annotation()).unwrap_or_default(),
        ..Default::default()
    }
}

/// kubelet's CRI form of an AppArmor profile (beside it, the deprecated string, which is the
/// annotation's form).
fn security_profile(p: &Profile) -> SecurityProfile {
    let (profile_type, name) = match p {
        Profile::RuntimeDefault => (0, ""),
        Profile::Unconfined => (1, ""),
        Profile::Localhost(name) => (2, name.as_str()),
    };
    SecurityProfile { profile_type, localhost_ref: name.to_string() }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pod::identity;

    fn pod(spec: &str) -> Pod {
        identity::test_pod(r#"{"name":"web","labels":{"app":"a"}}"#, spec, "n1")
    }

    fn ctx() -> InstanceContext {
        InstanceContext {
            pod_dir: PodDir::new("/var/lib/atoll".as_ref(), "u").unwrap(),
            pod_ip: "10.1.2.3".into(),
            host_ip: "192.0.2.1".into(),
            allocatable: fieldpath::Allocatable { cpu_millis: 4000, memory_bytes: 8 << 30 },
            node_memory_bytes: 8 << 30,
            termination_log: None,
            hosts_file: None,
            subpaths: Default::default(),
            image_volumes: Default::default(),
            objects: Default::default(),
        }
    }

    #[test]
    fn env_values_expand_in_order_and_field_refs_resolve() {
        let p = pod(r#"{"containers":[{"name":"c","image":"x:1","resources":{"limits":{"memory":"64Mi"}},"env":[
            {"name":"LATER","value":"$(FIRST)"},{"name":"FIRST","value":"one"},{"name":"BOTH","value":"$(FIRST)-$(POD)"},
            {"name":"POD","valueFrom":{"fieldRef":{"fieldPath":"metadata.name"}}},
            {"name":"APP","valueFrom":{"fieldRef":{"fieldPath":"metadata.labels['app']"}}},
            {"name":"IP","valueFrom":{"fieldRef":{"fieldPath":"status.podIP"}}},
            {"name":"MEM","valueFrom":{"resourceFieldRef":{"resource":"limits.memory","divisor":"1Mi"}}},
            {"name":"CPU","valueFrom":{"resourceFieldRef":{"resource":"limits.cpu","divisor":"1m"}}}]}]}"#);
        let env: HashMap<String, String> =
            environment(&p, &p.spec.containers[0], &ctx()).unwrap().into_iter().collect();
        assert_eq!(env["LATER"], "$(FIRST)", "only earlier variables expand");
        assert_eq!(env["BOTH"], "one-$(POD)");
        assert_eq!(env["POD"], "web-n1");
        assert_eq!(env["APP"], "a");
        assert_eq!(env["IP"], "10.1.2.3");
        assert_eq!(env["MEM"], "64");
        assert_eq!(env["CPU"], "4000", "no cpu limit: the node's capacity");
    }

    #[test]
    fn config_has_kubelets_labels_annotations_log_path_and_mounts() {
        let p = pod(r#"{"volumes":[{"name":"data","hostPath":{"path":"/srv/data"}},{"name":"scratch","emptyDir":{}}],
            "containers":[{"name":"c","image":"busybox:1.36","command":["sh","-c"],"args":["echo $(GREETING)"],
            "env":[{"name":"GREETING","value":"hi"}],
            "volumeMounts":[{"name":"data","mountPath":"/data","readOnly":true},{"name":"scratch","mountPath":"/tmp/s","subPath":"x"}]}]}"#);
        let mut cx = ctx();
        cx.hosts_file = Some("/var/lib/atoll/pods/u/etc-hosts".into());
        cx.termination_log = Some("/var/lib/atoll/pods/u/containers/c/abc".into());
        // A subPath mount is only ever the prepared bind target, never volume + subPath.
        let e = container_config(&p, &p.spec.containers[0], 3, "sha256:img", &cx).unwrap_err();
        assert_eq!(e, "volumeMounts[1]: subPath not prepared");
        cx.subpaths.insert(1, "/var/lib/atoll/pods/u/volume-subpaths/scratch/c/1".into());
        let cfg = container_config(&p, &p.spec.containers[0], 3, "sha256:img", &cx).unwrap();
        assert_eq!(cfg.metadata.as_ref().unwrap().attempt, 3);
        assert_eq!(cfg.log_path, "c/3.log");
        assert_eq!(cfg.args, vec!["echo hi"]);
        assert_eq!(cfg.image.as_ref().unwrap().image, "sha256:img");
        assert_eq!(cfg.image.as_ref().unwrap().user_specified_image, "busybox:1.36");
        let mut label_keys: Vec<&str> = cfg.labels.keys().map(String::as_str).collect();
        label_keys.sort();
        assert_eq!(
            label_keys,
            vec![LABEL_CONTAINER_NAME, LABEL_POD_NAME, LABEL_POD_NAMESPACE, LABEL_POD_UID],
            "exactly kubelet's four"
        );
        assert_eq!(cfg.annotations["io.kubernetes.container.restartCount"], "3");
        assert_eq!(cfg.annotations["io.kubernetes.container.terminationMessagePath"], "/dev/termination-log");
        assert_eq!(cfg.annotations["io.kubernetes.container.hash"], container_hash(&p.spec.containers[0]));
        let mounts: Vec<(&str, &str, bool)> =
            cfg.mounts.iter().map(|m| (m.container_path.as_str(), m.host_path.as_str(), m.readonly)).collect();
        let scratch = "/var/lib/atoll/pods/u/volume-subpaths/scratch/c/1";
        assert_eq!(
            mounts,
            vec![
                ("/data", "/srv/data", true),
                ("/tmp/s", scratch, false),
                ("/etc/hosts", "/var/lib/atoll/pods/u/etc-hosts", false),
                ("/dev/termination-log", "/var/lib/atoll/pods/u/containers/c/abc", false),
            ]
        );
    }

    #[test]
    fn apparmor_goes_to_the_runtime_as_kubelet_sends_it() {
        let key = "container.apparmor.security.beta.kubernetes.io/c";
        // (pod's field, the container's field, annotation) → (CRI type and ref, deprecated string)
        for (psc, csc, annotation, want, deprecated) in [
            ("", "", "", None, ""),
            ("", "", "runtime/default", Some((0, "")), "runtime/default"),
            ("", "", "localhost/k8s-web", Some((2, "k8s-web")), "localhost/k8s-web"),
            (r#"{"type":"Unconfined"}"#, "", "", Some((1, "")), "unconfined"),
            (r#"{"type":"Unconfined"}"#, r#"{"type":"RuntimeDefault"}"#, "", Some((0, "")), "runtime/default"),
            ("", r#"{"type":"Localhost","localhostProfile":"db"}"#, "", Some((2, "db")), "localhost/db"),
        ] {
            let sc = |f: &str| if f.is_empty() { "{}".to_string() } else { format!(r#"{{"appArmorProfile":{f}}}"#) };
            let mut p = pod(&format!(
                r#"{{"securityContext":{},"containers":[{{"name":"c","image":"x:1","securityContext":{}}}]}}"#,
                sc(psc),
                sc(csc)
            ));
            if !annotation.is_empty() {
                p.metadata.annotations.insert(key.into(), annotation.into());
            }
            let cfg = container_config(&p, &p.spec.containers[0], 0, "sha256:img", &ctx()).unwrap();
            let sec = cfg.linux.unwrap().security_context.unwrap();
            let got = sec.apparmor.as_ref().map(|a| (a.profile_type, a.localhost_ref.as_str()));
            assert_eq!((got, sec.apparmor_profile.as_str()), (want, deprecated), "{psc} {csc} {annotation}");
        }
    }

    #[test]
    fn resources_and_qos_follow_kubelet() {
        let g = pod(
            r#"{"containers":[{"name":"c","image":"x:1","resources":{"limits":{"cpu":"500m","memory":"128Mi"}}}]}"#,
        );
        assert_eq!(qos_class(&g), "Guaranteed");
        let r = linux_resources(&g, &g.spec.containers[0], 8 << 30);
        assert_eq!(
            (r.cpu_shares, r.cpu_period, r.cpu_quota, r.memory_limit_in_bytes, r.oom_score_adj),
            (512, 100_000, 50_000, 128 << 20, -997)
        );
        let b = pod(
            r#"{"containers":[{"name":"c","image":"x:1","resources":{"requests":{"cpu":"100m","memory":"1Gi"}}}]}"#,
        );
        assert_eq!(qos_class(&b), "Burstable");
        let r = linux_resources(&b, &b.spec.containers[0], 8 << 30);
        assert_eq!((r.cpu_shares, r.cpu_quota, r.memory_limit_in_bytes, r.oom_score_adj), (102, 0, 0, 875));
        let be = pod(r#"{"containers":[{"name":"c","image":"x:1"}]}"#);
        assert_eq!(qos_class(&be), "BestEffort");
        let r = linux_resources(&be, &be.spec.containers[0], 8 << 30);
        assert_eq!((r.cpu_shares, r.oom_score_adj), (2, 1000));
    }
}
