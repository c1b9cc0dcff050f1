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

/// Connections one listener serves at once.
pub const MAX_CONNECTIONS: usize = 64;

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
}

/// One admitted connection: counted while it lives, on its listener and in the total.
pub(crate) struct Slot<'a> {
    listener: &'a AtomicUsize,
    total: &'a AtomicUsize,
}

impl Drop for Slot<'_> {
    fn drop(&mut self) {
        self.listener.fetch_sub(1, Ordering::AcqRel);
        self.total.fetch_sub(1, Ordering::AcqRel);
    }
}

impl<R: RuntimeService> Api<R> {
    pub fn new(node: Arc<Node>, runtime: R, control: Option<Control>, mirror: Option<Arc<MirrorState>>) -> Arc<Api<R>> {
        let images = std::sync::OnceLock::new();
        let started_at = SystemTime::now();
        Arc::new(Api { node, runtime, control, mirror, started_at, images, open: AtomicUsize::new(0) })
    }

    /// Serves `/images` from this collector.
    pub fn set_images(&self, collector: Arc<crate::images::gc::Collector>) {
        let _ = self.images.set(collector);
    }

    /// Connections being served now.
    pub fn open_connections(&self) -> usize {
        self.open.load(Ordering::Acquire)
    }

    /// A slot on `listener` (its own count), or `None` when it serves its maximum already.
    pub(crate) fn admit<'a>(&'a self, listener: &'a AtomicUsize) -> Option<Slot<'a>> {
        if listener.fetch_add(1, Ordering::AcqRel) >= MAX_CONNECTIONS {
            listener.fetch_sub(1, Ordering::AcqRel);
            return None;
        }
        self.open.fetch_add(1, Ordering::AcqRel);
        Some(Slot { listener, total: &self.open })
    }

    /// `None` while healthy, else why not.
    pub fn stalled(&self) -> Option<String> {
        self.node.stalled()
    }
}
