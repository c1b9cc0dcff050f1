//! The pod engine: turns the desired set of pods into sandboxes and containers and keeps them
//! so, through any [`RuntimeService`](crate::cri::RuntimeService).
//!
//! - `engine`: one worker per pod UID, adoption of what the runtime runs, orphans, the relist;
//! - `worker`: one pod's loop; `sync`: one sync (observe, `plan`, act); `plan`: the decision,
//!   a pure function of desired and observed state;
//! - acting: `observe` (reading the runtime), `start` (containers, with `images`, `container`
//!   configs and `poddir` files), `stop` (preStop, kills, teardown), `sandbox` configs,
//!   `orphan` (pods nobody wants, stopped from their annotations), `subpath`, `termination`,
//!   `logs` (rotation);
//! - settings: `tuning` (back-off, credentials, runtime classes), `backoff`, `credentials`;
//!   `errors`: what a sync returns; `fake`: a runtime for unit tests.

pub mod atomic_writer;
pub mod backoff;
pub mod container;
pub mod context;
pub mod credentials;
pub mod engine;
pub mod errors;
pub mod exits;
#[cfg(test)]
mod fake;
pub mod images;
pub mod inbox;
pub mod logs;
pub mod object_volumes;
pub mod observe;
pub mod orphan;
pub mod plan;
pub mod pleg;
pub mod poddir;
pub mod prepull;
pub mod relist;
pub mod sandbox;
pub mod start;
pub mod stop;
pub mod subpath;
pub mod sync;
pub mod termination;
pub mod tuning;
pub mod worker;

pub use engine::{Control, Engine};
pub use tuning::{EngineConfig, Tuning};

#[cfg(test)]
mod tests;
