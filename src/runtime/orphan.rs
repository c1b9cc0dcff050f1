//! Pods atoll finds in the runtime that no manifest wants any more (removed or replaced while
//! atoll was down). As kubelet does for a container it has no spec for
//! (`restoreSpecsFromContainerLabels`), the parts of the spec a stop needs are rebuilt from the
//! labels and annotations atoll wrote when it created the containers: the pod's name and UID,
//! its termination grace period, each container's preStop hook and ports. Then the pod is
//! stopped the way its worker would have stopped it (preStop within the grace, then
//! StopContainer with what is left) and removed with its directories, by the worker's own
//! teardown (`stop::teardown`).

use super::container::{ANNOTATION_GRACE, ANNOTATION_PORTS, ANNOTATION_PRE_STOP};
use super::context::Context;
use super::errors::SyncError;
use super::observe::observe;
use super::plan::Kill;
use super::sandbox::{LABEL_CONTAINER_NAME, LABEL_POD_NAME, LABEL_POD_NAMESPACE};
use super::stop::{teardown, MIN_GRACE};
use crate::cri::api::ContainerStatus;
use crate::cri::RuntimeService;
use crate::node::observed::ContainerState;
use crate::pod::types::{Container, ContainerPort, Lifecycle, LifecycleHandler, Pod};
use std::time::Duration;

/// The pod as far as its containers' labels and annotations tell, and its grace period
/// (kubelet's minimum, 2 s, when none was recorded).
pub fn restore(uid: &str, statuses: &[ContainerStatus]) -> (Pod, Duration) {
    let mut pod = Pod::default();
    pod.metadata.uid = uid.to_string();
    let mut grace: Option<i64> = None;
    for st in statuses {
        let label = |k: &str| st.labels.get(k).cloned().unwrap_or_default();
        if pod.metadata.name.is_empty() {
            pod.metadata.name = label(LABEL_POD_NAME);
            pod.metadata.namespace = label(LABEL_POD_NAMESPACE);
        }
        if let Some(g) = st.annotations.get(ANNOTATION_GRACE).and_then(|g| g.parse::<i64>().ok()) {
            grace = Some(grace.map_or(g, |h| h.max(g)));
        }
        let name = label(LABEL_CONTAINER_NAME);
        if name.is_empty() || pod.spec.containers.iter().any(|c| c.name == name) {
            continue;
        }
        let json = |k: &str| st.annotations.get(k).map(|v| v.as_bytes().to_vec());
        let pre_stop: Option<LifecycleHandler> = json(ANNOTATION_PRE_STOP).and_then(|b| crate::parse::json_as(&b).ok());
        let ports: Vec<ContainerPort> =
            json(ANNOTATION_PORTS).and_then(|b| crate::parse::json_as(&b).ok()).unwrap_or_default();
        pod.spec.containers.push(Container {
            name,
            ports,
            lifecycle: pre_stop.map(|h| Box::new(Lifecycle { pre_stop: Some(h), post_start: None })),
            ..Default::default()
        });
    }
    pod.spec.termination_grace_period_seconds = grace;
    let grace = grace.map_or(MIN_GRACE, crate::deadline::secs);
    (pod, grace)
}

/// Stops (preStop hooks included, within the recorded grace) and removes everything the
/// runtime has for a pod UID nobody wants, and its directories.
pub async fn remove<R: RuntimeService>(cx: &Context<R>, uid: &str) -> Result<(), SyncError> {
    let obs = observe(&cx.runtime, uid, Default::default()).await.map_err(SyncError::runtime("observe"))?;
    let live: Vec<_> = obs
        .containers
        .iter()
        .filter(|c| matches!(c.state, ContainerState::Running | ContainerState::Created | ContainerState::Unknown))
        .collect();
    let mut statuses = Vec::new();
    for c in obs.containers.iter() {
        if let Ok(r) = cx.runtime.container_status(&c.id, false).await {
            statuses.extend(r.status);
        }
    }
    let (pod, grace) = restore(uid, &statuses);
    let kills: Vec<Kill> = live
        .iter()
        .map(|c| Kill::new(c, format!("Stopping container {}: its pod is no longer in any manifest", c.name)))
        .collect();
    // The same teardown as a worker's. The UID comes from a runtime label: the pod's
    // directory is a path only if it is a safe name (`poddir::pod_dir` checks).
    teardown(cx, &pod, &obs, &kills, grace).await
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn status(name: &str, annotations: &[(&str, &str)]) -> ContainerStatus {
        ContainerStatus {
            labels: HashMap::from([
                (LABEL_POD_NAME.to_string(), "web-n1".to_string()),
                (LABEL_POD_NAMESPACE.to_string(), "prod".to_string()),
                (LABEL_CONTAINER_NAME.to_string(), name.to_string()),
            ]),
            annotations: annotations.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect(),
            ..Default::default()
        }
    }

    #[test]
    fn the_stop_is_rebuilt_from_what_atoll_wrote() {
        let pre = r#"{"exec":{"command":["sh","-c","touch /done"]}}"#;
        let ports = r#"[{"name":"http","containerPort":8080}]"#;
        let (pod, grace) = restore(
            "u1",
            &[
                status("app", &[(ANNOTATION_GRACE, "45"), (ANNOTATION_PRE_STOP, pre), (ANNOTATION_PORTS, ports)]),
                status("side", &[(ANNOTATION_GRACE, "45")]),
            ],
        );
        assert_eq!(grace, Duration::from_secs(45));
        assert_eq!((pod.metadata.name.as_str(), pod.metadata.namespace.as_str()), ("web-n1", "prod"));
        assert_eq!(pod.metadata.uid, "u1");
        let app = &pod.spec.containers[0];
        let hook = app.lifecycle.as_ref().and_then(|l| l.pre_stop.as_ref()).expect("preStop restored");
        assert_eq!(hook.exec.as_ref().unwrap().command[2], "touch /done");
        assert_eq!(app.ports[0].container_port, 8080);
        assert!(pod.spec.containers[1].lifecycle.is_none());
    }

    #[test]
    fn missing_or_bad_annotations_give_kubelets_minimum_and_no_hook() {
        let (pod, grace) = restore("u1", &[status("app", &[(ANNOTATION_GRACE, "x"), (ANNOTATION_PRE_STOP, "[[[")])]);
        assert_eq!(grace, MIN_GRACE);
        assert!(pod.spec.containers[0].lifecycle.is_none());
        let (_, huge) = restore("u1", &[status("app", &[(ANNOTATION_GRACE, "9223372036854775807")])]);
        assert_eq!(huge, Duration::from_secs(i64::MAX as u64), "saturates, never overflows");
    }
}
