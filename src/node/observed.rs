//! What the runtime shows of a pod, in the engine's words: its sandboxes and container
//! instances (atoll's labels and annotations decoded), and what the probes conclude about
//! them. The shared vocabulary below the engine, the probes and the status (kubelet keeps it in
//! `pkg/kubelet/container`), so none of them imports another for it.

use crate::cri::ids::ContainerId;
use std::collections::HashMap;
use std::time::SystemTime;

/// A sandbox as the runtime reports it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SandboxObs {
    pub id: String,
    pub attempt: u32,
    pub ready: bool,
    /// The pod IP (empty for host-network sandboxes, or when networking failed).
    pub ip: String,
    pub host_network: bool,
    /// Nanoseconds since the epoch; the newest sandbox decides.
    pub created_at: i64,
    /// Its process, when a verbose status showed it (for the watch on process exits).
    pub pid: Option<i32>,
}

/// A container's state, as CRI reports it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ContainerState {
    Created,
    Running,
    Exited,
    Unknown,
}

/// A container instance as the runtime reports it (atoll's labels and annotations decoded).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ContainerObs {
    pub id: ContainerId,
    pub name: String,
    pub sandbox_id: String,
    pub restart_count: u32,
    /// The `io.kubernetes.container.hash` annotation.
    pub hash: String,
    pub state: ContainerState,
    pub exit_code: i32,
    pub reason: String,
    pub message: String,
    pub created_at: i64,
    pub started_at: Option<SystemTime>,
    pub finished_at: Option<SystemTime>,
    /// The CRI log file of this instance (absolute), if the runtime reported one.
    pub log_path: String,
    /// The image as the runtime reports it, and its resolved reference (an image id).
    pub image: String,
    pub image_ref: String,
    /// Its process, when a verbose status showed it running (for the watch on process exits).
    pub pid: Option<i32>,
}

impl ContainerObs {
    /// A running instance with nothing else known (tests, benchmarks).
    pub fn running(id: &str, name: &str, sandbox_id: &str, started_at: Option<SystemTime>) -> ContainerObs {
        ContainerObs {
            id: id.into(),
            name: name.into(),
            sandbox_id: sandbox_id.into(),
            restart_count: 0,
            hash: String::new(),
            state: ContainerState::Running,
            exit_code: 0,
            reason: String::new(),
            message: String::new(),
            created_at: 1,
            started_at,
            finished_at: None,
            log_path: String::new(),
            image: String::new(),
            image_ref: String::new(),
            pid: None,
        }
    }
}

/// Everything the runtime shows for one pod UID.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Observed {
    pub sandboxes: Vec<SandboxObs>,
    pub containers: Vec<ContainerObs>,
}

impl Observed {
    /// Sorts newest first, as kubelet reads them.
    pub fn normalise(&mut self) {
        self.sandboxes.sort_by(|a, b| b.created_at.cmp(&a.created_at).then(b.id.cmp(&a.id)));
        self.containers.sort_by(|a, b| b.created_at.cmp(&a.created_at).then(b.id.cmp(&a.id)));
    }

    /// The newest instance of the container `name`.
    pub fn newest(&self, name: &str) -> Option<&ContainerObs> {
        self.containers.iter().find(|c| c.name == name)
    }
}

/// Failed probes that call for a restart, by container id.
#[derive(Clone, Debug, Default)]
pub struct ProbeVerdicts {
    pub liveness_failed: Vec<ContainerId>,
    pub startup_failed: Vec<ContainerId>,
}

/// Readiness and startedness from the probes, by container ID; a missing entry means "no
/// result yet".
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ProbeView {
    pub ready: HashMap<ContainerId, bool>,
    pub started: HashMap<ContainerId, bool>,
}

/// Why a container that should run is not running, in kubelet's words (its status's
/// `state.waiting.reason`). Carried as a value from where it is decided to the status, never
/// parsed back out of a message.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum WaitReason {
    /// Restarting after a crash, held back by the back-off.
    CrashLoopBackOff,
    /// The last pull failed.
    ErrImagePull,
    /// Pulling again is held back by the back-off.
    ImagePullBackOff,
    /// Not present and `imagePullPolicy: Never`.
    ErrImageNeverPull,
    /// The runtime could not say whether the image is present.
    ImageInspectError,
    /// Not present, and the images directory has a tarball still to import (atoll's).
    ImageImporting,
    /// The container's config cannot be built (runAsNonRoot, an unsafe subPath, ...).
    CreateContainerConfigError,
    /// The runtime refused CreateContainer.
    CreateContainerError,
    /// The runtime refused StartContainer.
    RunContainerError,
    /// postStart failed; the container was killed.
    PostStartHookError,
    /// A pod named in `atoll.io/depends-on` is not Ready yet (atoll's start ordering).
    DependencyNotReady,
    /// A volume cannot be set up yet (a ConfigMap or Secret it needs is missing): kubelet's
    /// FailedMount, with the container still creating.
    ContainerCreating,
}

impl WaitReason {
    pub fn as_str(self) -> &'static str {
        match self {
            WaitReason::CrashLoopBackOff => "CrashLoopBackOff",
            WaitReason::ErrImagePull => "ErrImagePull",
            WaitReason::ImagePullBackOff => "ImagePullBackOff",
            WaitReason::ErrImageNeverPull => "ErrImageNeverPull",
            WaitReason::ImageInspectError => "ImageInspectError",
            WaitReason::ImageImporting => "ImageImporting",
            WaitReason::CreateContainerConfigError => "CreateContainerConfigError",
            WaitReason::CreateContainerError => "CreateContainerError",
            WaitReason::RunContainerError => "RunContainerError",
            WaitReason::PostStartHookError => "PostStartHookError",
            WaitReason::DependencyNotReady => "DependencyNotReady",
            WaitReason::ContainerCreating => "ContainerCreating",
        }
    }
}

impl WaitReason {
    /// The event a container's image wait records: its reason and whether it is a warning.
    /// kubelet's image manager: a failed pull is a Warning `Failed`, the back-off after it a
    /// Normal `BackOff`, a missing image with policy Never a Warning `ErrImageNeverPull`, an
    /// image the runtime cannot inspect a Warning `InspectFailed`. A tarball still being
    /// imported is no failure: a Normal `ImageImporting`.
    pub fn image_event(self) -> (&'static str, bool) {
        match self {
            WaitReason::ImagePullBackOff => ("BackOff", false),
            WaitReason::ImageImporting => ("ImageImporting", false),
            WaitReason::ErrImageNeverPull => ("ErrImageNeverPull", true),
            WaitReason::ImageInspectError => ("InspectFailed", true),
            _ => ("Failed", true),
        }
    }
}

impl std::fmt::Display for WaitReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A container's wait: why, and kubelet's message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Wait {
    pub reason: WaitReason,
    pub message: String,
}

/// Why each container of a pod waits, by container name (kubelet's reason cache).
pub type Waits = HashMap<String, Wait>;
