//! Reading what the runtime has for one pod UID (by kubelet's `io.kubernetes.pod.uid` label),
//! newest first, in the engine's words ([`Observed`]): each sandbox's state, IP and network
//! mode; each container instance's state, restart count, hash and (for exited ones) kubelet's
//! termination message. Also the one rule for what atoll may touch: what it created.

use super::sandbox::{ANNOTATION_MANAGED_BY, LABEL_CONTAINER_NAME, LABEL_POD_UID};
use crate::cri::api::{ContainerFilter, NamespaceMode, PodSandboxFilter, PodSandboxState};
use crate::cri::{RuntimeService, Status};
use crate::node::observed::{ContainerObs, ContainerState, Observed, SandboxObs};
use std::collections::HashMap;
use std::time::{Duration, SystemTime};

/// Everything the runtime shows for pod `uid`.
pub async fn observe<R: RuntimeService>(rt: &R, uid: &str) -> Result<Observed, Status> {
    let selector = HashMap::from([(LABEL_POD_UID.to_string(), uid.to_string())]);
    let mut obs = Observed::default();
    // Both lists at once: one round trip, not two.
    let (sandboxes, containers) = smol::future::zip(
        rt.list_pod_sandbox(Some(PodSandboxFilter { label_selector: selector.clone(), ..Default::default() })),
        rt.list_containers(Some(ContainerFilter { label_selector: selector, ..Default::default() })),
    )
    .await;
    let (sandboxes, containers) = (sandboxes?, containers?);
    for s in sandboxes {
        let st = match rt.pod_sandbox_status(&s.id, false).await {
            Ok(r) => r.status.unwrap_or_default(),
            Err(e) if e.is_not_found() => continue,
            Err(e) => return Err(e),
        };
        let host_network = st
            .linux
            .and_then(|l| l.namespaces)
            .and_then(|n| n.options)
            .is_some_and(|o| o.network == NamespaceMode::Node as i32);
        obs.sandboxes.push(SandboxObs {
            id: s.id,
            attempt: s.metadata.map_or(0, |m| m.attempt),
            ready: st.state == PodSandboxState::SandboxReady as i32,
            ip: st.network.map(|n| n.ip).unwrap_or_default(),
            host_network,
            created_at: st.created_at,
        });
    }
    for c in containers {
        let st = match rt.container_status(&c.id, false).await {
            Ok(r) => r.status.unwrap_or_default(),
            Err(e) if e.is_not_found() => continue,
            Err(e) => return Err(e),
        };
        let state = state_of(st.state);
        let ann = |k: &str| st.annotations.get(k).cloned().unwrap_or_default();
        let message = if state == ContainerState::Exited {
            super::volumes::termination::message(&st)
        } else {
            st.message.clone()
        };
        obs.containers.push(ContainerObs {
            id: c.id.into(),
            name: c.labels.get(LABEL_CONTAINER_NAME).cloned().unwrap_or_default(),
            sandbox_id: c.pod_sandbox_id,
            restart_count: ann("io.kubernetes.container.restartCount").parse().unwrap_or(0),
            hash: ann("io.kubernetes.container.hash"),
            state,
            exit_code: st.exit_code,
            reason: st.reason,
            message,
            created_at: st.created_at,
            started_at: time_of(st.started_at),
            finished_at: time_of(st.finished_at),
            log_path: st.log_path,
            image: st.image.map(|i| i.image).unwrap_or_default(),
            image_ref: st.image_ref,
        });
    }
    obs.normalise();
    Ok(obs)
}

/// CRI's container state in the engine's words.
pub fn state_of(cri_state: i32) -> ContainerState {
    use crate::cri::api::ContainerState as Cri;
    match Cri::try_from(cri_state) {
        Ok(Cri::ContainerCreated) => ContainerState::Created,
        Ok(Cri::ContainerRunning) => ContainerState::Running,
        Ok(Cri::ContainerExited) => ContainerState::Exited,
        _ => ContainerState::Unknown,
    }
}

/// Nanoseconds since the epoch from CRI (0 for unset).
fn time_of(nanos: i64) -> Option<SystemTime> {
    u64::try_from(nanos).ok().filter(|n| *n > 0).map(|n| SystemTime::UNIX_EPOCH + Duration::from_nanos(n))
}

/// Whether a sandbox or container was made by atoll (nothing else is ever touched).
pub fn managed(annotations: &HashMap<String, String>) -> bool {
    annotations.get(ANNOTATION_MANAGED_BY).is_some_and(|v| v == "atoll")
}
