//! The fake runtime's container events: how they are sent, and the stream they come on.

use super::{FakeRuntime, State};
use crate::cri::api::{ContainerEventResponse, ContainerEventType, ContainerStatus};
use crate::cri::{Code, EventStream, Status};

impl FakeRuntime {
    /// Sends an event about container `id` (or sandbox) to every subscriber, with the
    /// container's labels as containerd sends its statuses.
    pub(super) fn emit(st: &mut State, id: &str, kind: ContainerEventType) {
        let labels = match (st.containers.get(id), st.sandboxes.get(id)) {
            (Some(c), _) => c.config.labels.clone(),
            (None, Some(s)) => s.config.labels.clone(),
            _ => return,
        };
        let event = ContainerEventResponse {
            container_id: id.to_string(),
            container_event_type: kind as i32,
            created_at: Self::now(st),
            containers_statuses: vec![ContainerStatus { id: id.to_string(), labels, ..Default::default() }],
            ..Default::default()
        };
        if st.events_stolen {
            return;
        }
        if let Some(subscribers) = &mut st.events {
            subscribers.retain(|s| s.try_send(event.clone()).is_ok());
        }
    }
}

/// The fake's event stream: events as they come, or Unimplemented.
pub struct FakeEvents(pub(super) Option<smol::channel::Receiver<ContainerEventResponse>>);

impl EventStream for FakeEvents {
    async fn next(&mut self) -> Result<Option<ContainerEventResponse>, Status> {
        match &self.0 {
            Some(rx) => Ok(rx.recv().await.ok()),
            None => Err(Status::new(Code::Unimplemented, "unknown method GetContainerEvents")),
        }
    }
}
