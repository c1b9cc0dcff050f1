//! The latest status of every pod, by UID: written by the pod workers, read by the local API
//! and the mirror. The one place where the engine's results meet their readers.

use crate::pod::status::PodStatus;
use crate::pod::types::Pod;
use crate::pod::PodUid;
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

/// The latest status of every pod, by UID: written by the workers, read by the API and mirror.
#[derive(Debug)]
pub struct StatusStore {
    inner: Mutex<BTreeMap<PodUid, PodStatus>>,
    /// The pod each worker runs, by UID (for the local API's PodList): shared with the
    /// worker and the sources, not a copy.
    pods: Mutex<BTreeMap<PodUid, Arc<Pod>>>,
    /// One pending wake-up whenever the pods change (a worker's pod set or removed): the
    /// images' pins follow the pods at once, not at their next period.
    changed: (smol::channel::Sender<()>, smol::channel::Receiver<()>),
}

impl Default for StatusStore {
    fn default() -> Self {
        StatusStore { inner: Default::default(), pods: Default::default(), changed: smol::channel::bounded(1) }
    }
}

impl StatusStore {
    pub fn set(&self, uid: &PodUid, status: PodStatus) {
        crate::locks::lock(&self.inner).insert(uid.clone(), status);
    }

    /// Records the pod a worker runs (its spec and metadata).
    pub fn set_pod(&self, uid: &PodUid, pod: &Arc<Pod>) {
        crate::locks::lock(&self.pods).insert(uid.clone(), pod.clone());
        let _ = self.changed.0.try_send(());
    }

    pub fn remove(&self, uid: &str) {
        crate::locks::lock(&self.inner).remove(uid);
        crate::locks::lock(&self.pods).remove(uid);
        let _ = self.changed.0.try_send(());
    }

    /// Wakes (once for any number of changes since the last wake) when the pods change. One
    /// reader: wake-ups are shared, not copied.
    pub fn changes(&self) -> smol::channel::Receiver<()> {
        self.changed.1.clone()
    }

    /// Every pod with its latest status (none before its first sync), by UID.
    pub fn pods(&self) -> Vec<(Arc<Pod>, Option<PodStatus>)> {
        let pods = crate::locks::lock(&self.pods).clone();
        let statuses = crate::locks::lock(&self.inner);
        pods.into_iter().map(|(uid, pod)| (pod, statuses.get(&uid).cloned())).collect()
    }

    /// The UIDs of the pods workers run (stopping ones included).
    pub fn uids(&self) -> Vec<PodUid> {
        crate::locks::lock(&self.pods).keys().cloned().collect()
    }

    pub fn get(&self, uid: &str) -> Option<PodStatus> {
        crate::locks::lock(&self.inner).get(uid).cloned()
    }

    pub fn all(&self) -> BTreeMap<PodUid, PodStatus> {
        crate::locks::lock(&self.inner).clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_store_lists_the_pods_workers_run_until_removed() {
        let store = StatusStore::default();
        store.set_pod(&"u1".into(), &Arc::new(Pod::default()));
        store.set_pod(&"u2".into(), &Arc::new(Pod::default()));
        store.set(&"u2".into(), PodStatus { phase: "Running".into(), ..Default::default() });
        assert_eq!(store.uids(), ["u1", "u2"]);
        store.remove("u1");
        assert_eq!(store.uids(), ["u2"]);
        assert_eq!(store.get("u2").map(|s| s.phase), Some("Running".into()));
    }
}
