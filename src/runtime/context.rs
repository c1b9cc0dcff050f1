//! What every worker of one engine works with: the node, the runtime (the CRI client, or a
//! fake in unit tests), the engine's settings, and the prober.

use super::tuning::{EngineConfig, Tuning};
use crate::node::probing::Prober;
use crate::node::Node;
use std::sync::Arc;

pub struct Context<R> {
    pub node: Arc<Node>,
    pub runtime: R,
    pub tuning: Arc<Tuning>,
    pub config: EngineConfig,
    pub prober: Arc<dyn Prober>,
}
