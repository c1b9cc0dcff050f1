//! The fake runtime's container event stream.

use crate::cri::api::ContainerEventResponse;
use crate::cri::{Code, EventStream, Status};

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
