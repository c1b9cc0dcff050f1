//! The pod engine: turns the desired set of pods into sandboxes and containers and keeps them
//! so. `plan` decides a sync as a pure function of desired and observed state; `backoff`
//! keeps kubelet's restart and pull back-off. (The worker, the runtime observer and the
//! CRI config builders join them.)

pub mod backoff;
pub mod container;
pub mod credentials;
pub mod engine;
pub mod hooks;
pub mod logs;
pub mod orphan;
pub mod plan;
pub mod poddir;
pub mod sandbox;
pub mod subpath;
pub mod termination;
pub mod worker;
