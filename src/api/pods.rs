//! Pods as the local API shows them: v1 Pod objects with their status (kubelet's read-only
//! `/pods`), found by `namespace/name` or by the name without its node suffix, and the
//! operator's restart, which goes through the pod's worker. A reader without root sees a pod
//! from an encrypted manifest redacted (`pod::redact`).

use super::server::Response;
use super::view::Api;
use crate::cri::RuntimeService;

/// Where the pod's mirror on the API server stands (local API only; never sent anywhere).
pub const ANNOTATION_MIRROR_STATE: &str = "atoll.io/mirror";

/// Who reads a pod.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reader {
    /// Root, on the local socket: the pod as it is.
    Root,
    /// The read-only port (any local user) or the kubelet server (`get nodes/proxy`, which
    /// grants no exec here): an encrypted manifest's values redacted.
    Unprivileged,
}

/// A pod as the API shows it to `reader`: the manifest's object with `status` added, and the
/// state of its mirror as an annotation when atoll mirrors to an API server.
pub fn pod_json<RT: RuntimeService>(
    api: &Api<RT>,
    pod: &crate::pod::types::Pod,
    status: Option<&crate::pod::status::PodStatus>,
    reader: Reader,
) -> serde_json::Value {
    let shown = match reader {
        Reader::Root => std::borrow::Cow::Borrowed(pod),
        Reader::Unprivileged => crate::pod::redact::for_unprivileged(pod),
    };
    let mut v = serde_json::to_value(&*shown).unwrap_or_default();
    if let Some(report) = api.mirror.as_ref().and_then(|m| m.report(&pod.metadata.uid)) {
        v["metadata"]["annotations"][ANNOTATION_MIRROR_STATE] = report.into();
    }
    if let Some(obj) = v.as_object_mut() {
        obj.insert("apiVersion".into(), "v1".into());
        obj.insert("kind".into(), "Pod".into());
        let status = match status {
            Some(s) => serde_json::to_value(s).unwrap_or_default(),
            None => serde_json::json!({"phase": "Pending"}),
        };
        obj.insert("status".into(), status);
    }
    v
}

pub fn pod_list<RT: RuntimeService>(api: &Api<RT>, reader: Reader) -> serde_json::Value {
    let mut pods = api.node.statuses().pods();
    pods.sort_by_key(|p| p.0.key());
    let items: Vec<serde_json::Value> = pods.iter().map(|(p, s)| pod_json(api, p, s.as_ref(), reader)).collect();
    serde_json::json!({"kind": "PodList", "apiVersion": "v1", "metadata": {}, "items": items})
}

/// The pod `ns/name` as `reader` sees it, and as it is; a static pod may also be named without
/// its node suffix.
pub fn find_pod<RT: RuntimeService>(
    api: &Api<RT>,
    ns: &str,
    name: &str,
    reader: Reader,
) -> Option<(serde_json::Value, crate::pod::types::Pod)> {
    let pods = api.node.statuses().pods();
    let with_node = format!("{name}-{}", api.node.facts().name);
    let found = pods
        .iter()
        .find(|(p, _)| p.metadata.namespace == ns && p.metadata.name == name)
        .or_else(|| pods.iter().find(|(p, _)| p.metadata.namespace == ns && p.metadata.name == with_node))?;
    Some((pod_json(api, &found.0, found.1.as_ref(), reader), (*found.0).clone()))
}

/// Restarts through the pod's worker, so the containers stop as for any kill (preStop first,
/// within the pod's grace period) and come back per restartPolicy.
/// kubectl's NotFound for a pod.
pub fn not_found(ns: &str, name: &str) -> Response {
    Response::error(404, "NotFound", format!("pods \"{name}\" not found in namespace \"{ns}\""))
}

pub async fn restart<RT: RuntimeService>(api: &Api<RT>, ns: &str, name: &str) -> Response {
    let Some((_, pod)) = find_pod(api, ns, name, Reader::Root) else { return not_found(ns, name) };
    let Some(control) = &api.control else {
        return Response::error(503, "ServiceUnavailable", "this agent runs no pods");
    };
    match control.restart(&pod.metadata.uid).await {
        Some(stopped) => Response::json(200, &serde_json::json!({"pod": pod.key(), "stopped": stopped})),
        None => Response::error(503, "ServiceUnavailable", format!("pod {} has no worker (stopping?)", pod.key())),
    }
}
