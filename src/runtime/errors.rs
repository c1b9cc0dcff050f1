//! What can go wrong in a pod's sync, as values its callers branch on. A container that
//! cannot start yet is not an error of the sync: it is a [`Wait`](crate::node::observed::Wait)
//! with kubelet's reason, recorded for the status. A [`SyncError`] is what stops a sync
//! halfway; the worker logs it once and tries again at its next sync.

use crate::cri::Status;
use std::fmt;
use std::time::Duration;

/// The next try after a sync failed (kubelet's pod workers' back-off period), and after a
/// container's own files could not be made on the host.
pub const SYNC_ERROR_RETRY: Duration = Duration::from_secs(10);

#[derive(Clone, Debug, PartialEq)]
pub enum SyncError {
    /// The runtime refused or did not answer a call.
    Runtime { call: &'static str, status: Status },
    /// RunPodSandbox failed (kubelet's FailedCreatePodSandBox).
    CreateSandbox(Status),
    /// The pod's config could not be built (a name that cannot be a directory).
    Config(String),
    /// Something on the host could not be prepared or removed (a directory, a volume, a file).
    Host(String),
    /// The pod cannot run on this node as it is: it fails, with this reason and message.
    Refused(super::lifecycle::Failure),
}

impl SyncError {
    /// A runtime call failed.
    pub fn runtime(call: &'static str) -> impl FnOnce(Status) -> SyncError {
        move |status| SyncError::Runtime { call, status }
    }
}

impl fmt::Display for SyncError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SyncError::Runtime { call, status } => write!(f, "{call}: {status}"),
            SyncError::CreateSandbox(status) => write!(f, "FailedCreatePodSandBox: {status}"),
            SyncError::Config(e) => write!(f, "{e}"),
            SyncError::Host(e) => write!(f, "{e}"),
            SyncError::Refused(failure) => write!(f, "{}: {}", failure.reason, failure.message),
        }
    }
}

impl std::error::Error for SyncError {}
