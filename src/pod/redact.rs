//! What a reader without root sees of a pod read from an age-encrypted manifest: the values
//! someone encrypted it for (env values, `command` and `args`, and the commands and HTTP header
//! values of its probes and lifecycle hooks) replaced by [`MARKER`]. The read-only port, the
//! kubelet server's `/pods` and, unless `mirrorEncryptedPodSpecs` says otherwise, the mirror pod
//! show [`for_unprivileged`]; root's socket shows the pod as it is. The result is still a valid
//! v1 Pod (a string where a string was, a one-element list where a list was not empty), so the
//! API server accepts it as a mirror.

use super::types::{Container, ExecAction, HttpGetAction, Pod};
use std::borrow::Cow;

/// What stands in for a value read from an encrypted manifest.
pub const MARKER: &str = "(redacted: encrypted manifest)";

/// `pod` as a reader without root may see it: unchanged unless it was read from an
/// age-encrypted file.
pub fn for_unprivileged(pod: &Pod) -> Cow<'_, Pod> {
    if !pod.from_encrypted_file {
        return Cow::Borrowed(pod);
    }
    let mut shown = pod.clone();
    for c in shown.spec.init_containers.iter_mut().chain(shown.spec.containers.iter_mut()) {
        container(c);
    }
    Cow::Owned(shown)
}

fn container(c: &mut Container) {
    for e in &mut c.env {
        if e.value.is_some() {
            e.value = Some(MARKER.into());
        }
    }
    list(&mut c.command);
    list(&mut c.args);
    for p in [&mut c.liveness_probe, &mut c.readiness_probe, &mut c.startup_probe].into_iter().flatten() {
        actions(p.exec.as_mut(), p.http_get.as_mut());
    }
    if let Some(l) = &mut c.lifecycle {
        for h in [&mut l.post_start, &mut l.pre_stop].into_iter().flatten() {
            actions(h.exec.as_mut(), h.http_get.as_mut());
        }
    }
}

fn actions(exec: Option<&mut ExecAction>, http: Option<&mut HttpGetAction>) {
    if let Some(e) = exec {
        list(&mut e.command);
    }
    for h in http.into_iter().flat_map(|h| h.http_headers.iter_mut()) {
        h.value = MARKER.into();
    }
}

/// A non-empty list becomes the marker alone (an empty one stays empty: the image's default).
fn list(l: &mut Vec<String>) {
    if !l.is_empty() {
        *l = vec![MARKER.into()];
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(encrypted: bool) -> Pod {
        let mut p: Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "db", "annotations": {"a": "kept"}},
            "spec": {
                "initContainers": [{"name": "i", "image": "x", "args": ["--token=s3cret"]}],
                "containers": [{
                    "name": "c", "image": "x",
                    "command": ["sh", "-c", "connect s3cret"],
                    "env": [
                        {"name": "PW", "value": "s3cret"},
                        {"name": "EMPTY", "value": ""},
                        {"name": "REF", "valueFrom": {"secretKeyRef": {"name": "db", "key": "pw"}}}
                    ],
                    "livenessProbe": {"exec": {"command": ["check", "s3cret"]}},
                    "readinessProbe": {"httpGet": {"port": 80, "httpHeaders": [{"name": "Authorization", "value": "Bearer s3cret"}]}},
                    "lifecycle": {"preStop": {"exec": {"command": ["stop", "s3cret"]}}}
                }]
            }
        }))
        .unwrap();
        p.from_encrypted_file = encrypted;
        p
    }

    #[test]
    fn an_encrypted_manifests_values_are_redacted_and_nothing_else() {
        let cases: &[(bool, bool)] = &[(false, true), (true, false)];
        for &(encrypted, secret_shown) in cases {
            let p = pod(encrypted);
            let shown = serde_json::to_string(&*for_unprivileged(&p)).unwrap();
            assert_eq!(shown.contains("s3cret"), secret_shown, "encrypted {encrypted}: {shown}");
            assert_eq!(shown.contains(MARKER), !secret_shown, "{shown}");
        }
        let shown = for_unprivileged(&pod(true)).into_owned();
        let c = &shown.spec.containers[0];
        assert_eq!(c.command, [MARKER]);
        assert!(c.args.is_empty(), "an empty list stays empty");
        assert_eq!(shown.spec.init_containers[0].args, [MARKER]);
        let env: Vec<(&str, Option<&str>)> = c.env.iter().map(|e| (e.name.as_str(), e.value.as_deref())).collect();
        assert_eq!(env, [("PW", Some(MARKER)), ("EMPTY", Some(MARKER)), ("REF", None)], "names and references stay");
        assert!(c.env[2].value_from.is_some());
        assert_eq!(shown.metadata, pod(true).metadata, "metadata is not touched");
        assert_eq!((c.name.as_str(), c.image.as_str()), ("c", "x"));
        assert!(shown.from_encrypted_file);
    }
}
