//! A worker's ways in: its messages (a new spec, a delete, a restart) and the PLEG's wake-up,
//! which coalesces.

use crate::pod::StaticPod;
use std::time::Duration;

/// A message to a worker.
#[derive(Debug)]
pub enum Msg {
    /// A new version of the pod (same UID).
    Update(Box<StaticPod>),
    /// Stop the pod within this grace period and end.
    Terminate(Duration),
    /// Stop the running containers (preStop first); they come back per restartPolicy. The
    /// names of the stopped containers are sent back.
    Restart(smol::channel::Sender<Vec<String>>),
}

/// A worker's ways in: its messages and its (coalescing) wake-up.
#[derive(Clone)]
pub struct Inbox {
    pub tx: smol::channel::Sender<Msg>,
    pub wake: smol::channel::Sender<()>,
}
