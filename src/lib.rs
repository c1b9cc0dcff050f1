//! atoll: a small agent that runs Kubernetes static pods on one machine through CRI.
//!
//! Data flows one way: `source` (manifest dir and URL: each source's snapshot of pods; the pods
//! the API server binds to the node come as a third source's snapshots from `mirror::bound`) →
//! `rollback` (the health-gated stage: the last good version for a bad one) → the merge
//! (`source::merge`: desired pods) → `admission` → `runtime` (one worker per pod) → the
//! runtime through `cri` (over `grpc`); workers and `probe`s → `status` → the node's status
//! store → `api` (local API), `mirror` (API server) and `kubelet_server` (the API server's way
//! to logs, exec and stats, reached through `tunnel` from behind NAT). The `agent` wires it.
//!
//! The rooms stand on floors. A room imports only rooms on floors below its own, never one
//! beside it or above it (`tests/architecture.rs` reads this list and checks every import of
//! every file against it; a new room must be given a floor here). From the top:
//!
//! 1. `cli`: the commands; `atoll run` calls the agent.
//! 2. `agent`: the one runner, which builds every part from the settings.
//! 3. `config`: the flag table, the config files, and `Settings` made of each part's options.
//! 4. `kubelet_server`: kubelet's HTTPS server for the API server, metrics-server and kubectl.
//! 5. `api`: the local API, healthz and the read-only port.
//! 6. `mirror` `rollback` `tunnel`: the API server side; the health-gated rollback stage over the
//!    sources; the konnectivity agent that lets the API server in from behind NAT.
//! 7. `source` `admission` `images` `runtime` `probe`: manifest sources; kubelet's admission
//!    of new pods against the node; side-loading and image GC; the engine, workers and
//!    kuberuntime's acts; the probers.
//! 8. `status` `handlers`: pod status; the probe and hook actions (exec, HTTP, TCP, gRPC, sleep).
//! 9. `node`: node-wide state with narrow handles (facts, statuses, events, imports, objects).
//! 10. `objects` `cri` `trust` `age` `gate`: local ConfigMaps and Secrets; the CRI client and
//!     its trait; signatures and versions; age decryption; every listener's budgets for
//!     connections that have not shown who they are.
//! 11. `records` `metrics` `grpc` `http1` `x509`: small JSON records on disk; counters and
//!     histograms; the gRPC transport (unary, server-streaming and bidirectional calls over
//!     HTTP/2) used by the CRI client, the konnectivity agent and the gRPC probe; HTTP/1.1
//!     heads and the blocking client of the manifest URL and the mirror; keys, CSRs and
//!     certificates read.
//! 12. `pod`: the Pod model, its validation and safe paths.
//! 13. `parse` `bounded` `deadline` `dirwatch` `duration` `tls` `base64` `fnv` `locks`
//!     `rfc3339` `notify` `root_dir` `short_id` `task`: leaves, which import nothing of atoll.

#![forbid(unsafe_code)]

pub mod admission;
pub mod age;
pub mod agent;
pub mod api;
pub mod base64;
pub mod bounded;
pub mod cli;
pub mod config;
pub mod cri;
pub mod deadline;
pub mod dirwatch;
pub mod duration;
pub mod fnv;
pub mod gate;
pub mod grpc;
pub mod handlers;
pub mod http1;
pub mod images;
pub mod kubelet_server;
pub mod locks;
pub mod metrics;
pub mod mirror;
pub mod node;
pub mod notify;
pub mod objects;
pub mod parse;
pub mod pod;
pub mod probe;
pub mod records;
pub mod rfc3339;
pub mod rollback;
pub mod root_dir;
pub mod runtime;
pub mod short_id;
pub mod source;
pub mod status;
pub mod task;
pub mod tls;
pub mod trust;
pub mod tunnel;
pub mod x509;

#[cfg(test)]
pub(crate) mod testdir;

/// What `atoll version` prints: version, target triple and git commit, one per line.
pub fn version_text() -> String {
    format!(
        "atoll {}\ntarget: {}\ncommit: {}\n",
        env!("CARGO_PKG_VERSION"),
        env!("ATOLL_TARGET"),
        env!("ATOLL_GIT_COMMIT")
    )
}
