//! atoll: a small agent that runs Kubernetes static pods on one machine through CRI.
//!
//! Layout (see shared/DESIGN.md): `cli` parses commands and flags, `config` holds settings,
//! `cri` talks to the container runtime. Later parts (pod model, sources, pod engine, probes,
//! status, local API, mirror) get a module each, with data flowing one way.

pub mod agent;
pub mod api;
pub mod bounded;
pub mod cli;
pub mod config;
pub mod cri;
pub mod deadline;
pub mod fnv;
pub mod handlers;
pub mod locks;
pub mod metrics;
pub mod mirror;
pub mod node;
pub mod notify;
pub mod parse;
pub mod pod;
pub mod probe;
pub mod rfc3339;
pub mod runtime;
pub mod source;
pub mod status;
pub mod tls;

/// What `atoll version` prints: version, target triple and git commit, one per line.
pub fn version_text() -> String {
    format!(
        "atoll {}\ntarget: {}\ncommit: {}\n",
        env!("CARGO_PKG_VERSION"),
        env!("ATOLL_TARGET"),
        env!("ATOLL_GIT_COMMIT")
    )
}
