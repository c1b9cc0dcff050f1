//! What every worker of one engine works with: the node, the runtime (the CRI client, or a
//! fake in unit tests), the engine's settings, the prober, the
//! registry of workers, and the PLEG that wakes them.

use super::pleg::Pleg;
use super::tuning::{EngineConfig, Tuning};
use super::workers::Workers;
use crate::node::probing::Prober;
use crate::node::Node;
use std::sync::Arc;

pub struct Context<R> {
    pub node: Arc<Node>,
    pub runtime: R,
    pub tuning: Arc<Tuning>,
    pub config: EngineConfig,
    pub prober: Arc<dyn Prober>,
    /// The one registry of workers' inboxes.
    pub workers: Arc<Workers>,
    pub pleg: Arc<Pleg>,
    /// The runtime's name and version, once known (what it can do that CRI cannot be asked).
    pub runtime_version: std::sync::OnceLock<(String, String)>,
}
