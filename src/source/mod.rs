//! Manifest sources: where desired pods come from. (The third, the pods the API server binds
//! to the node, sends [`SourceId::Api`] snapshots from `mirror::bound`, beside the mirror.)
//!
//! `file` (staticPodPath: a directory or file, inotify plus a periodic rescan) and `http`
//! (staticPodURL: polled, with ETag and an on-disk copy of the last good payload) each send
//! full snapshots as [`Update`]s; `merge` turns snapshots into add/update/remove changes keyed
//! by UID. A source never waits on another, and a bad manifest only ever affects its own pods.
//! `payload` is how anything a source reads (or kept, or cached) is opened: signature first.
//! The file source's parts: `scan` (reading the directory), `kept` (last valid copies on disk),
//! `last_wins` (its notes and kubelet's last-file-wins rule, pure); the URL source's: `fetch`
//! (the HTTP client, bounded).

mod error;
pub mod fetch;
pub mod file;
pub mod http;
pub mod kept;
pub mod last_wins;
pub mod merge;
pub mod payload;
pub mod scan;

use crate::pod::{ManifestError, StaticPod};
pub use error::Error;
use std::fmt;

/// Which source an update came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum SourceId {
    File,
    Http,
    /// `secretsDir`: the file source over a private directory of Secrets and ConfigMaps.
    Secrets,
    /// The pods the API server binds to the node (`mirror::bound`).
    Api,
}

impl fmt::Display for SourceId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            SourceId::File => "file",
            SourceId::Http => "http",
            SourceId::Secrets => "secrets",
            SourceId::Api => "api",
        })
    }
}

/// A source's complete current set of pods and local objects, plus the manifests it could
/// not use.
#[derive(Clone, Debug)]
pub struct Update {
    pub source: SourceId,
    pub pods: Vec<StaticPod>,
    /// Its ConfigMaps and Secrets (for the node's `objects` store).
    pub objects: Vec<std::sync::Arc<crate::objects::LocalObject>>,
    /// Manifests that failed this time (their last good pods, if any, are still in `pods`).
    pub errors: Vec<ManifestError>,
    /// The payloads its pods came from (one per origin), for the rollback stage to keep.
    pub payloads: Vec<std::sync::Arc<payload::Payload>>,
    /// Pods that leave it to stop within a grace period of their own, not their spec's (a pod
    /// the cluster deletes: its `deletionGracePeriodSeconds`).
    pub leaving: Vec<StaticPod>,
}

/// Records a good read of a manifest source (for `/metrics`).
pub fn source_success(source: &str) {
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    crate::metrics::set(&crate::metrics::SOURCE_SUCCESS, &[("source", source)], now.as_secs_f64().floor());
}
