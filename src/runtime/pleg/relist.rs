//! The PLEG's two tasks (see `pleg`): the relist, and the runtime's event stream.

use super::{Pleg, Signal, RELIST_FALLBACK};
use crate::cri::api::{ContainerEventResponse, ContainerEventType, PodSandboxState};
use crate::cri::{Code, EventStream, RuntimeService};
use crate::metrics;
use crate::runtime::context::Context;
use crate::runtime::sandbox::LABEL_POD_UID;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A stream that stays quiet this long after it was opened is a working one (a runtime sends
/// nothing, not even the reply's head, before its first event; a refusal comes at once).
const QUIET_MEANS_OPEN: Duration = Duration::from_millis(500);
/// Reconnection pauses for a broken event stream.
const RECONNECT: (Duration, Duration) = (Duration::from_millis(100), Duration::from_secs(5));

/// Starts the PLEG's tasks: the relist and the event stream.
pub fn spawn<R: RuntimeService>(cx: &Arc<Context<R>>) -> Vec<smol::Task<()>> {
    vec![crate::task::spawn(relist(cx.clone())), crate::task::spawn(events(cx.clone()))]
}

/// The relist: every period, two list calls for the whole node (sandboxes and containers with
/// their states); a worker whose pod shows any change is woken at once. A quiet node costs two
/// CRI calls a period whatever the number of pods.
async fn relist<R: RuntimeService>(cx: Arc<Context<R>>) {
    let pleg = &cx.pleg;
    let mut last: Option<HashMap<String, u64>> = None;
    let mut last_listed = Instant::now();
    // Pods the previous relist found changed while events were open throughout, and since when.
    let mut to_check: (Vec<crate::pod::PodUid>, Instant) = (Vec::new(), Instant::now());
    let mut housekept = Instant::now();
    loop {
        let period = match pleg.signal() {
            Signal::Relist => RELIST_FALLBACK,
            _ => cx.config.relist,
        };
        let _ = smol::future::or(
            async {
                smol::Timer::after(period).await;
            },
            async {
                let _ = pleg.relist_now.1.recv().await;
            },
        )
        .await;
        if housekept.elapsed() >= Duration::from_secs(60) {
            housekept = Instant::now();
            cx.tuning.housekeeping(std::time::SystemTime::now());
        }
        let listed_at = Instant::now();
        let listed = (cx.runtime.list_pod_sandbox(None).await, cx.runtime.list_containers(None).await);
        cx.node.heartbeat().beat(Instant::now(), listed.0.is_ok() && listed.1.is_ok(), cx.config.relist);
        let (sandboxes, containers) = match listed {
            (Ok(s), Ok(c)) => (s, c),
            _ => continue, // the runtime is away; workers notice on their own
        };
        running_metrics(&sandboxes, &containers);
        let now = fingerprints(&sandboxes, &containers);
        let uids = pleg.watched();
        let changed: Vec<crate::pod::PodUid> = match &last {
            Some(last) => uids.into_iter().filter(|uid| now.get(uid.as_str()) != last.get(uid.as_str())).collect(),
            None => uids,
        };
        for uid in &changed {
            pleg.wake(uid);
        }
        for uid in pleg.logs_over(cx.config.log_rotation.max_size) {
            pleg.wake(&uid);
        }
        if let Some(uid) = pleg.missed(&to_check.0, to_check.1) {
            log::info!("the runtime's container events missed a change of pod {uid} (containerd 1.7 hands each event to one reader: does another client read them?); watching container processes as well");
            pleg.start_watching_exits();
        }
        let evented_throughout = last.is_some() && pleg.events_open_since().is_some_and(|t| t <= last_listed);
        to_check = if evented_throughout { (changed, last_listed) } else { (Vec::new(), listed_at) };
        if last.is_some() {
            metrics::observe(&metrics::RELIST_INTERVAL, &[], (listed_at - last_listed).as_secs_f64());
        }
        metrics::observe(&metrics::RELIST_SECONDS, &[], listed_at.elapsed().as_secs_f64());
        last = Some(now);
        last_listed = listed_at;
    }
}

/// kubelet's gauges of what the runtime runs for the node's pods: pods with a ready sandbox,
/// and containers by state.
fn running_metrics(sandboxes: &[crate::cri::api::PodSandbox], containers: &[crate::cri::api::Container]) {
    let (pods, by_state) = running(sandboxes, containers);
    metrics::set(&metrics::RUNNING_PODS, &[], pods as f64);
    for (state, n) in ["created", "running", "exited", "unknown"].into_iter().zip(by_state) {
        metrics::set(&metrics::RUNNING_CONTAINERS, &[("container_state", state)], n as f64);
    }
}

/// The pods (by UID) with a ready sandbox, and the containers by CRI state (created, running,
/// exited, unknown), counting only what carries a pod UID label (atoll's).
fn running(
    sandboxes: &[crate::cri::api::PodSandbox],
    containers: &[crate::cri::api::Container],
) -> (usize, [usize; 4]) {
    let ready = sandboxes.iter().filter(|s| s.state == PodSandboxState::SandboxReady as i32);
    let uids: Vec<&String> = ready.filter_map(|s| s.labels.get(LABEL_POD_UID)).collect();
    let pods = uids.iter().enumerate().filter(|(i, u)| !uids[..*i].contains(u)).count();
    let mut by_state = [0; 4];
    for c in containers.iter().filter(|c| c.labels.contains_key(LABEL_POD_UID)) {
        let i = usize::try_from(c.state).unwrap_or(3).min(3);
        if let Some(n) = by_state.get_mut(i) {
            *n += 1;
        }
    }
    (pods, by_state)
}

/// A fingerprint of what the runtime shows for each pod UID: its sandboxes' and containers'
/// IDs and states.
fn fingerprints(
    sandboxes: &[crate::cri::api::PodSandbox],
    containers: &[crate::cri::api::Container],
) -> HashMap<String, u64> {
    let mut out: HashMap<String, u64> = HashMap::new();
    let mix = |h: u64, s: &str, state: i32| {
        let h = crate::fnv::add_64(h ^ crate::fnv::start_64(), s.as_bytes());
        h.wrapping_add(state as u64).rotate_left(7)
    };
    let items = sandboxes
        .iter()
        .map(|s| (&s.labels, mix(0, &s.id, s.state)))
        .chain(containers.iter().map(|c| (&c.labels, mix(1, &c.id, c.state))));
    for (labels, h) in items {
        if let Some(uid) = labels.get(LABEL_POD_UID) {
            let e = out.entry(uid.clone()).or_default();
            *e = e.wrapping_add(h);
        }
    }
    out
}

/// The runtime's event stream, reopened whenever it breaks. A runtime without one
/// (Unimplemented) hands over to process exits, or to the relist where pidfds do not work.
async fn events<R: RuntimeService>(cx: Arc<Context<R>>) {
    let pleg = &cx.pleg;
    let mut pause = RECONNECT.0;
    loop {
        let outcome = match cx.runtime.container_events().await {
            Ok(mut stream) => follow(pleg, &mut stream).await,
            Err(e) => Err(e),
        };
        match outcome {
            Err(e) if e.code == Code::Unimplemented => {
                pleg.set_events(false);
                if super::exits::supported() {
                    log::info!("the runtime sends no container events; watching container processes instead");
                    pleg.start_watching_exits();
                } else {
                    log::info!("the runtime sends no container events and pidfds are not available: relisting every {RELIST_FALLBACK:?}");
                }
                return;
            }
            Err(e) => log::debug!("container events: {e}; reconnecting in {pause:?}"),
            Ok(()) => log::debug!("container events: the runtime ended the stream; reconnecting in {pause:?}"),
        }
        // Until the stream is back, the relist (or process exits) sees changes.
        if pleg.events_open_since().is_some() {
            pause = RECONNECT.0; // it worked until now: try again soon
        }
        pleg.set_events(false);
        smol::Timer::after(pause).await;
        pause = (pause * 2).min(RECONNECT.1);
    }
}

/// Reads one event stream until it ends, waking the worker of each event's pod unless the
/// worker began to look after the event was made.
async fn follow<S: EventStream>(pleg: &Pleg, stream: &mut S) -> Result<(), crate::cri::Status> {
    // The first answer tells whether the runtime has events at all; a quiet stream does.
    let first = {
        let mut next = std::pin::pin!(stream.next());
        let quiet = async {
            smol::Timer::after(QUIET_MEANS_OPEN).await;
            None
        };
        match smol::future::or(async { Some((&mut next).await) }, quiet).await {
            Some(first) => first,
            None => {
                pleg.set_events(true);
                next.await
            }
        }
    };
    let mut next = first;
    loop {
        match next? {
            Some(event) => {
                pleg.set_events(true);
                if let Some(uid) = pod_of(&event) {
                    crate::locks::lock(&pleg.evented).insert(uid.clone(), Instant::now());
                    // A sandbox's removal is announced before containerd 2.x takes it out of
                    // its store (NRI is told in between): it always wakes.
                    let removed = event.container_event_type == ContainerEventType::ContainerDeletedEvent as i32;
                    if removed || pleg.news(&uid, event.created_at) {
                        pleg.wake(&uid);
                    }
                }
            }
            None => return Ok(()),
        }
        next = stream.next().await;
    }
}

/// The pod UID an event is about: its sandbox's, or its containers' label.
fn pod_of(event: &ContainerEventResponse) -> Option<String> {
    let from_sandbox = event.pod_sandbox_status.as_ref().and_then(|s| s.metadata.as_ref()).map(|m| m.uid.clone());
    from_sandbox
        .filter(|u| !u.is_empty())
        .or_else(|| event.containers_statuses.iter().find_map(|c| c.labels.get(LABEL_POD_UID).cloned()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cri::api::{ContainerStatus, PodSandboxMetadata, PodSandboxStatus};

    #[test]
    fn an_event_names_its_pod_by_sandbox_or_container_label() {
        let mut ev = ContainerEventResponse::default();
        assert_eq!(pod_of(&ev), None);
        ev.containers_statuses.push(ContainerStatus {
            labels: HashMap::from([(LABEL_POD_UID.to_string(), "from-label".to_string())]),
            ..Default::default()
        });
        assert_eq!(pod_of(&ev).as_deref(), Some("from-label"));
        ev.pod_sandbox_status = Some(PodSandboxStatus {
            metadata: Some(PodSandboxMetadata { uid: "from-sandbox".into(), ..Default::default() }),
            ..Default::default()
        });
        assert_eq!(pod_of(&ev).as_deref(), Some("from-sandbox"));
    }

    #[test]
    fn running_counts_pods_with_a_ready_sandbox_and_containers_by_state() {
        use crate::cri::api::{Container, PodSandbox};
        let ours = |uid: &str| HashMap::from([(LABEL_POD_UID.to_string(), uid.to_string())]);
        let sandbox = |uid: &str, state: PodSandboxState| PodSandbox {
            labels: ours(uid),
            state: state as i32,
            ..Default::default()
        };
        let sandboxes = [
            sandbox("a", PodSandboxState::SandboxReady),
            sandbox("a", PodSandboxState::SandboxNotready), // a's old sandbox: a counts once
            sandbox("b", PodSandboxState::SandboxNotready),
            sandbox("c", PodSandboxState::SandboxReady),
            PodSandbox::default(), // another client's
        ];
        let container = |state: i32, labels| Container { labels, state, ..Default::default() };
        let containers = [
            container(1, ours("a")),
            container(1, ours("c")),
            container(2, ours("a")),
            container(0, ours("c")),
            container(7, ours("c")), // a state this build does not know counts as unknown
            container(1, HashMap::new()),
        ];
        assert_eq!(running(&sandboxes, &containers), (2, [1, 2, 1, 1]));
    }
}
