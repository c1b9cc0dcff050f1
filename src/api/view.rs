//! What the local API sees of the agent: the node (statuses, events, the heartbeat), the
//! runtime the engine uses (container stats, images), the engine's workers (a restart goes through them), the
//! mirror's reports when atoll mirrors to an API server; the image collector; and the count of
//! connections served.

use crate::cri::{Cri, RuntimeService};
use crate::mirror::MirrorState;
use crate::node::Node;
use crate::runtime::Control;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::SystemTime;

/// The API's view of the agent: the node, the engine's workers (for a restart), and the
/// mirror's reports when atoll mirrors to an API server.
pub struct Api<R = Cri> {
    pub(crate) node: Arc<Node>,
    pub(crate) runtime: R,
    pub(crate) control: Option<Control>,
    pub(crate) mirror: Option<Arc<MirrorState>>,
    pub(crate) started_at: SystemTime,
    /// The image collector, once the agent has one (`/images`).
    pub(crate) images: std::sync::OnceLock<Arc<crate::images::gc::Collector>>,
    /// Connections being served, over all listeners (for `/metrics`).
    open: AtomicUsize,
    /// Each running container's and sandbox's cgroup, found once (`/metrics/cadvisor`).
    pub(crate) cgroups: std::sync::Mutex<std::collections::HashMap<String, super::cgroups::Located>>,
}

/// One connection being served: counted in the total while it lives.
pub(crate) struct Slot<'a> {
    total: &'a AtomicUsize,
}

impl Drop for Slot<'_> {
    fn drop(&mut self) {
        self.total.fetch_sub(1, Ordering::AcqRel);
    }
}

impl<R: RuntimeService> Api<R> {
    pub fn new(node: Arc<Node>, runtime: R, control: Option<Control>, mirror: Option<Arc<MirrorState>>) -> Arc<Api<R>> {
        let images = std::sync::OnceLock::new();
        let started_at = SystemTime::now();
        let cgroups = Default::default();
        Arc::new(Api { node, runtime, control, mirror, started_at, images, open: AtomicUsize::new(0), cgroups })
    }

    /// Serves `/images` from this collector.
    pub fn set_images(&self, collector: Arc<crate::images::gc::Collector>) {
        let _ = self.images.set(collector);
    }

    /// Connections being served now.
    pub fn open_connections(&self) -> usize {
        self.open.load(Ordering::Acquire)
    }

    /// Counts a connection as served while the slot lives (each listener's budget is its
    /// [`crate::gate::Gate`]).
    pub(crate) fn serving(&self) -> Slot<'_> {
        self.open.fetch_add(1, Ordering::AcqRel);
        Slot { total: &self.open }
    }

    /// `None` while healthy, else why not.
    pub fn stalled(&self) -> Option<String> {
        self.node.stalled()
    }

    /// A `/healthz` request's checks (`stalled`), counted for `/metrics/slis` as kubelet counts
    /// its health checks.
    pub fn healthz(&self) -> Option<String> {
        let stalled = self.stalled();
        crate::metrics::healthchecks(stalled.is_none());
        stalled
    }
}
