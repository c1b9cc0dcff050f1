//! The one registry of pod workers (kubelet's `podWorkers` map of update channels): each live
//! worker's inbox by pod UID. The engine registers a worker when it starts and unregisters it
//! when it ends; everything else that must reach a worker (the PLEG's wake-ups, the local API's
//! restart, the images directory's wake-all) goes through here, so no second map of inboxes
//! can drift from it.

use super::inbox::{Inbox, Msg};
use crate::pod::{PodKey, PodUid};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

#[derive(Default)]
pub struct Workers {
    inboxes: Mutex<HashMap<PodUid, Inbox>>,
    /// Others that wait as a worker does (a replacement's pull, by pod name): woken with
    /// every worker.
    watchers: Mutex<HashMap<PodKey, smol::channel::Sender<()>>>,
}

impl Workers {
    pub fn new() -> Arc<Workers> {
        Arc::new(Workers::default())
    }

    pub(super) fn register(&self, uid: &PodUid, inbox: Inbox) {
        crate::locks::lock(&self.inboxes).insert(uid.clone(), inbox);
    }

    pub(super) fn unregister(&self, uid: &str) {
        crate::locks::lock(&self.inboxes).remove(uid);
    }

    /// The pod UIDs with a live worker.
    pub fn uids(&self) -> Vec<PodUid> {
        crate::locks::lock(&self.inboxes).keys().cloned().collect()
    }

    pub fn inbox(&self, uid: &str) -> Option<Inbox> {
        crate::locks::lock(&self.inboxes).get(uid).cloned()
    }

    /// Hands `msg` to the worker of `uid` without waiting; false when there is none (or its
    /// inbox is full).
    pub(super) fn send(&self, uid: &str, msg: Msg) -> bool {
        crate::locks::lock(&self.inboxes).get(uid).is_some_and(|i| i.tx.try_send(msg).is_ok())
    }

    /// Wakes the worker of pod `uid`, if there is one; wake-ups coalesce.
    pub fn wake(&self, uid: &str) {
        if let Some(inbox) = crate::locks::lock(&self.inboxes).get(uid) {
            let _ = inbox.wake.try_send(());
        }
    }

    /// Wakes every worker, and every watcher (images arrived, objects changed: whatever
    /// waits for them looks again).
    pub fn wake_all(&self) {
        for inbox in crate::locks::lock(&self.inboxes).values() {
            let _ = inbox.wake.try_send(());
        }
        for watcher in crate::locks::lock(&self.watchers).values() {
            let _ = watcher.try_send(());
        }
    }

    /// A wake-up for the pod named `key` that comes with every [`Workers::wake_all`] (coalescing), replacing
    /// any earlier watcher of `key`.
    pub(super) fn watch(&self, key: &PodKey) -> smol::channel::Receiver<()> {
        let (tx, rx) = smol::channel::bounded(1);
        crate::locks::lock(&self.watchers).insert(key.clone(), tx);
        rx
    }

    pub(super) fn unwatch(&self, key: &PodKey) {
        crate::locks::lock(&self.watchers).remove(key);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wake_ups_coalesce_and_unknown_pods_are_ignored() {
        let workers = Workers::new();
        let (tx, rx) = smol::channel::bounded(8);
        let (wake, woken) = smol::channel::bounded(1);
        workers.register(&"u1".into(), Inbox { tx, wake });
        workers.wake("u1");
        workers.wake("u1");
        workers.wake("nobody");
        assert_eq!(woken.len(), 1);
        assert!(workers.send("u1", Msg::Terminate(std::time::Duration::ZERO)));
        assert!(!workers.send("nobody", Msg::Terminate(std::time::Duration::ZERO)));
        assert_eq!(rx.len(), 1);
        assert_eq!(workers.uids(), ["u1"]);
        workers.unregister("u1");
        assert!(workers.inbox("u1").is_none() && workers.uids().is_empty());
        // A watcher is woken with everyone, once however often, and no more once unwatched.
        let watcher = workers.watch(&"default/web".into());
        workers.wake_all();
        workers.wake_all();
        assert_eq!(watcher.len(), 1);
        let _ = watcher.try_recv();
        workers.unwatch(&"default/web".into());
        workers.wake_all();
        assert!(watcher.try_recv().is_err());
    }
}
