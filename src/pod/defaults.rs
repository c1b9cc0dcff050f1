//! API-server defaulting of a v1 Pod (what kubelet's decoder applies to static pods).
//!
//! Runs before the UID is computed, so a manifest that spells out a default and one that
//! leaves it out are the same pod. Only fields left unset are touched.

use super::quantity::Quantity;
use super::types::*;

pub const DEFAULT_TERMINATION_GRACE_SECONDS: i64 = 30;
pub const DEFAULT_TERMINATION_MESSAGE_PATH: &str = "/dev/termination-log";

/// Applies the v1 defaults in place.
pub fn apply(pod: &mut Pod) {
    let spec = &mut pod.spec;
    spec.restart_policy.get_or_insert_with(|| "Always".into());
    spec.dns_policy.get_or_insert_with(|| "ClusterFirst".into());
    spec.termination_grace_period_seconds.get_or_insert(DEFAULT_TERMINATION_GRACE_SECONDS);
    spec.scheduler_name.get_or_insert_with(|| "default-scheduler".into());
    spec.security_context.get_or_insert_with(Default::default);
    spec.enable_service_links.get_or_insert(true);
    let host_network = spec.host_network;
    for c in spec.init_containers.iter_mut().chain(spec.containers.iter_mut()) {
        container(c, host_network);
    }
    pod_requests(pod);
    let spec = &mut pod.spec;
    for v in &mut spec.volumes {
        let has_source = v.host_path.is_some()
            || v.empty_dir.is_some()
            || v.secret.is_some()
            || v.config_map.is_some()
            || v.persistent_volume_claim.is_some()
            || v.projected.is_some()
            || v.csi.is_some()
            || v.ephemeral.is_some()
            || v.downward_api.is_some()
            || v.image.is_some();
        if !has_source {
            v.empty_dir = Some(EmptyDirVolumeSource::default());
        }
        // The API's defaultMode for object volumes: 0644.
        let modes = [
            v.config_map.as_mut().map(|c| &mut c.default_mode),
            v.secret.as_mut().map(|s| &mut s.default_mode),
            v.projected.as_mut().map(|p| &mut p.default_mode),
            v.downward_api.as_mut().map(|d| &mut d.default_mode),
        ];
        for mode in modes.into_iter().flatten() {
            mode.get_or_insert(0o644);
        }
        if let Some(image) = &mut v.image {
            if image.pull_policy.is_none() {
                image.pull_policy = Some(default_pull_policy(&image.reference).into());
            }
        }
    }
}

/// Pod-level requests a manifest leaves out, where it sets pod-level limits: the containers'
/// aggregate request of that resource, else the pod's limit (the API server's
/// defaultPodRequests, for cpu and memory).
fn pod_requests(pod: &mut Pod) {
    let Some(r) = &pod.spec.resources else { return };
    let mut requests = r.requests.clone();
    for (name, limit) in r.limits.iter().filter(|(n, _)| matches!(n.as_str(), "cpu" | "memory")) {
        if !requests.contains_key(name) {
            let aggregate = container_requests(&pod.spec, name, Quantity::milli_value);
            requests.insert(name.clone(), aggregate.map_or(*limit, |m| Quantity::new(m, -3)));
        }
    }
    if let Some(r) = &mut pod.spec.resources {
        r.requests = requests;
    }
}

/// kubelet's AggregateContainerRequests for resource `name`, each request in `unit`
/// (`Quantity::milli_value`, `Quantity::value`): the regular containers and sidecars summed,
/// or the most an init container needs beside the sidecars started before it, whichever is
/// more; `None` when no container requests it. Pod-level defaults and validation use it, and
/// admission (the scheduler's request of a pod is the same sum).
pub fn container_requests(spec: &PodSpec, name: &str, unit: fn(&Quantity) -> i64) -> Option<i64> {
    let req = |c: &Container| c.resources.as_ref().and_then(|r| r.requests.get(name)).map(unit);
    let (mut any, mut sum, mut sidecars, mut peak) = (false, 0i64, 0i64, 0i64);
    for c in &spec.init_containers {
        let r = req(c);
        any |= r.is_some();
        let r = r.unwrap_or(0);
        if c.restart_policy.as_deref() == Some("Always") {
            sum = sum.saturating_add(r);
            sidecars = sidecars.saturating_add(r);
            peak = peak.max(sidecars);
        } else {
            peak = peak.max(sidecars.saturating_add(r));
        }
    }
    for c in &spec.containers {
        let r = req(c);
        any |= r.is_some();
        sum = sum.saturating_add(r.unwrap_or(0));
    }
    any.then_some(sum.max(peak))
}

fn container(c: &mut Container, host_network: bool) {
    if c.image_pull_policy.is_none() {
        c.image_pull_policy = Some(default_pull_policy(&c.image).into());
    }
    c.termination_message_path.get_or_insert_with(|| DEFAULT_TERMINATION_MESSAGE_PATH.into());
    c.termination_message_policy.get_or_insert_with(|| "File".into());
    for p in &mut c.ports {
        p.protocol.get_or_insert_with(|| "TCP".into());
        if host_network && p.host_port.is_none() {
            p.host_port = Some(p.container_port);
        }
    }
    if let Some(r) = &mut c.resources {
        // Requests default to limits where only a limit is given.
        for (name, limit) in &r.limits {
            r.requests.entry(name.clone()).or_insert(*limit);
        }
    }
    for probe in [&mut c.liveness_probe, &mut c.readiness_probe, &mut c.startup_probe].into_iter().flatten() {
        probe.timeout_seconds.get_or_insert(1);
        probe.period_seconds.get_or_insert(10);
        probe.success_threshold.get_or_insert(1);
        probe.failure_threshold.get_or_insert(3);
        if let Some(h) = &mut probe.http_get {
            http_get(h);
        }
    }
    if let Some(l) = &mut c.lifecycle {
        for h in [&mut l.post_start, &mut l.pre_stop].into_iter().flatten() {
            if let Some(g) = &mut h.http_get {
                http_get(g);
            }
        }
    }
}

fn http_get(h: &mut HttpGetAction) {
    h.path.get_or_insert_with(|| "/".into());
    h.scheme.get_or_insert_with(|| "HTTP".into());
}

/// `Always` for `:latest` or an image with neither tag nor digest, else `IfNotPresent`.
pub fn default_pull_policy(image: &str) -> &'static str {
    let (_, tag, digest) = split_image(image);
    match (tag, digest) {
        (_, Some(_)) => "IfNotPresent",
        (Some("latest"), None) | (None, None) => "Always",
        _ => "IfNotPresent",
    }
}

/// Splits `repo[:tag][@digest]`; a `:` before the last `/` belongs to a registry port.
pub fn split_image(image: &str) -> (&str, Option<&str>, Option<&str>) {
    let (name, digest) = match image.split_once('@') {
        Some((n, d)) => (n, Some(d)),
        None => (image, None),
    };
    match name.rsplit_once(':').filter(|(_, tag)| !tag.contains('/')) {
        Some((repo, tag)) => (repo, Some(tag), digest),
        None => (name, None, digest),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pull_policy_follows_the_tag() {
        assert_eq!(default_pull_policy("nginx"), "Always");
        assert_eq!(default_pull_policy("nginx:latest"), "Always");
        assert_eq!(default_pull_policy("nginx:1.27"), "IfNotPresent");
        assert_eq!(default_pull_policy("nginx@sha256:abcd"), "IfNotPresent");
        assert_eq!(default_pull_policy("nginx:latest@sha256:abcd"), "IfNotPresent");
        assert_eq!(default_pull_policy("localhost:5000/app"), "Always");
        assert_eq!(default_pull_policy("localhost:5000/app:v2"), "IfNotPresent");
        assert_eq!(split_image("r.io:443/a/b:c@sha256:d"), ("r.io:443/a/b", Some("c"), Some("sha256:d")));
    }

    #[test]
    fn pod_defaults_match_the_api_server() {
        let mut pod: Pod = serde_json::from_str(
            r#"{"metadata":{"name":"p"},"spec":{"hostNetwork":true,"containers":[{"name":"c","image":"x:1",
            "ports":[{"containerPort":80}],"resources":{"limits":{"cpu":"1","memory":"64Mi"},"requests":{"cpu":"100m"}},
            "livenessProbe":{"httpGet":{"port":80}}}],"volumes":[{"name":"v"}]}}"#,
        )
        .unwrap();
        apply(&mut pod);
        let s = &pod.spec;
        assert_eq!(s.restart_policy.as_deref(), Some("Always"));
        assert_eq!(s.dns_policy.as_deref(), Some("ClusterFirst"));
        assert_eq!(s.termination_grace_period_seconds, Some(30));
        assert_eq!(s.scheduler_name.as_deref(), Some("default-scheduler"));
        assert_eq!(s.enable_service_links, Some(true));
        assert!(s.security_context.is_some());
        assert!(s.volumes[0].empty_dir.is_some());
        let c = &s.containers[0];
        assert_eq!(c.image_pull_policy.as_deref(), Some("IfNotPresent"));
        assert_eq!(c.termination_message_path.as_deref(), Some("/dev/termination-log"));
        assert_eq!(c.termination_message_policy.as_deref(), Some("File"));
        assert_eq!(c.ports[0].protocol.as_deref(), Some("TCP"));
        assert_eq!(c.ports[0].host_port, Some(80), "hostNetwork: hostPort defaults to containerPort");
        let r = c.resources.as_ref().unwrap();
        assert_eq!(r.requests["cpu"].milli_value(), 100, "an explicit request is kept");
        assert_eq!(r.requests["memory"].value(), 64 << 20, "a missing request takes the limit");
        let p = c.liveness_probe.as_ref().unwrap();
        assert_eq!(
            (p.timeout_seconds, p.period_seconds, p.success_threshold, p.failure_threshold),
            (Some(1), Some(10), Some(1), Some(3))
        );
        assert_eq!(p.initial_delay_seconds, None);
        let h = p.http_get.as_ref().unwrap();
        assert_eq!((h.path.as_deref(), h.scheme.as_deref()), (Some("/"), Some("HTTP")));
    }

    #[test]
    fn explicit_values_are_kept() {
        let mut pod: Pod = serde_json::from_str(
            r#"{"spec":{"restartPolicy":"Never","terminationGracePeriodSeconds":0,"containers":[{"name":"c","image":"x","imagePullPolicy":"Never"}]}}"#,
        )
        .unwrap();
        apply(&mut pod);
        assert_eq!(pod.spec.restart_policy.as_deref(), Some("Never"));
        assert_eq!(pod.spec.termination_grace_period_seconds, Some(0));
        assert_eq!(pod.spec.containers[0].image_pull_policy.as_deref(), Some("Never"));
    }
}
