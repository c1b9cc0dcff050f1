//! The pod engine: turns the desired set of pods into sandboxes and containers and keeps them
//! so, through any [`RuntimeService`](crate::cri::RuntimeService) (the CRI client, or `cri::fake` in
//! unit tests). Four trades, as in kubelet:
//!
//! - **the loop**: `engine` (one worker per pod UID), `ledger` (its pure decisions: one
//!   worker per name, replacements, adoption, orphans), `worker` (one pod's
//!   loop), `lifecycle` (its pure verdicts: runtime class, activeDeadlineSeconds, Failed),
//!   `workers` (the one registry of their inboxes), `inbox` (its ways in), `context` (what every worker shares), `sync` (one sync:
//!   observe, decide, act) and `plan/` (the decision, a pure function of desired and observed);
//! - **kuberuntime's acts**: `observe` (reading the runtime), `sandbox` and `container` (the
//!   CRI configs), `pod_cgroup` (the cgroup of a pod with pod-level limits), `host_files` (what starts need on the host, made on the blocking pool, while the sandbox is made), `start`, `stop` (preStop, kills, removal), `orphan` (pods nobody wants,
//!   rebuilt from their labels), `images` and `prepull` (pulls), `credentials`, `logs`
//!   (rotation); `tuning` and `backoff` (what SIGHUP may change); `errors` (what a sync returns);
//! - **`pleg/`**: detects that the runtime changed (events, process exits, the relist) and wakes
//!   the worker of the pod it concerns;
//! - **`volumes/`**: the pod's directory and everything mounted or written below it.
//!
//! | kubelet                                   | atoll                                   |
//! |-------------------------------------------|-----------------------------------------|
//! | `syncLoopIteration`, `podWorkers`         | `engine`, `ledger`, `workers` (the agent's loop feeds them) |
//! | `podWorkerLoop`, `SyncPod`                | `worker`, `sync`                        |
//! | `computePodActions`                       | `plan::plan`                            |
//! | kuberuntime `startContainer`, `killPod`   | `start`, `stop`                         |
//! | `generatePodSandboxConfig`, `generateContainerConfig` | `sandbox`, `container`      |
//! | `restoreSpecsFromContainerLabels`         | `orphan`                                |
//! | PLEG (generic and evented)                | `pleg/` (relist, events, process exits) |
//! | image manager, pull back-off              | `images`, `backoff`                     |
//! | credential provider keyring               | `credentials`                           |
//! | pod container manager (pod cgroups)       | `pod_cgroup`                            |
//! | volume manager, atomic writer, subpath    | `volumes/`                              |
//! | container log manager                     | `logs`                                  |
//! | status manager                            | `crate::status` (a worker publishes to the node's store) |
//! | prober manager                            | `crate::probe` (results reach workers through the node) |
//! | image GC, side-loading                    | `crate::images`                         |

pub mod backoff;
pub mod container;
pub mod context;
pub mod credentials;
pub mod engine;
pub mod errors;
pub mod host_files;
pub mod images;
pub mod inbox;
pub mod ledger;
pub mod lifecycle;
pub mod logs;
pub mod observe;
pub mod orphan;
pub mod plan;
pub mod pleg;
pub mod pod_cgroup;
pub mod prepull;
pub mod sandbox;
pub mod start;
pub mod stop;
pub mod sync;
pub mod tuning;
pub mod volumes;
pub mod worker;
pub mod workers;

pub use engine::{Control, Engine};
pub use tuning::{EngineConfig, Tuning, TuningConfig};

#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_pod_level;
#[cfg(test)]
mod tests_start;
