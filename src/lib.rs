//! atoll: a small agent that runs Kubernetes static pods on one machine through CRI.
//!
//! Data flows one way: `source` (manifest dir and URL) → desired pods (`pod::Change`) →
//! `runtime` (one worker per pod) → the runtime through `cri`; workers and `probe`s → `status`
//! → the node's status store → `api` (local API) and `mirror` (API server).
//!
//! From the top down: `cli` (commands; `atoll run` calls `agent`, the one runner) and `config`;
//! `agent`; `api`, `mirror`, `source`, `images`, `runtime`, `probe`; `status`, `handlers` (probe and hook
//! actions); `node` (node-wide state: runtime client, facts, statuses, events, heartbeat,
//! local objects), `objects` (local ConfigMaps and Secrets), `pod` (the Pod model,
//! validation, safe paths), `cri`; leaves: `parse`, `bounded`,
//! `deadline`, `dirwatch`, `records`, `http1`, `tls`, `trust`, `base64`, `fnv`, `locks`,
//! `rfc3339`, `metrics`, `notify`, `root_dir`. Lower layers never import higher ones
//! (`tests/architecture.rs` checks it).

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
pub mod handlers;
pub mod http1;
pub mod images;
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
pub mod source;
pub mod status;
pub mod tls;
pub mod trust;

/// What `atoll version` prints: version, target triple and git commit, one per line.
pub fn version_text() -> String {
    format!(
        "atoll {}\ntarget: {}\ncommit: {}\n",
        env!("CARGO_PKG_VERSION"),
        env!("ATOLL_TARGET"),
        env!("ATOLL_GIT_COMMIT")
    )
}
