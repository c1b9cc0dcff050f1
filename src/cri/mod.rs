//! The container runtime, seen through CRI v1 (`runtime.v1`) over its unix socket.
//!
//! - `api`: the protobuf messages, generated from `proto/cri.proto` by `tools/crigen` and
//!   checked in (no `protoc` at build time; CI checks the file is current).
//! - `client`: [`Cri`], one typed async method per RPC atoll uses.
//! - `ids`: [`ids::ContainerId`], and how logs show a runtime's ID ([`ids::short`], safe on any).
//! - [`Status`] and [`Code`], the typed errors every call returns, are `grpc`'s, re-exported.
//! - `features`: what a runtime can do that CRI cannot be asked, by its version.
//! - `service`: [`RuntimeService`], the calls every part makes, as a trait (so it can run
//!   against a fake in unit tests).
//! - `fake` (tests only): a runtime in memory implementing it.
//!
//! Nothing here decides anything about pods: the runtime module calls these methods.

pub mod api;
pub mod client;
#[cfg(test)]
pub mod fake;
pub mod features;
pub mod ids;
pub mod service;

pub use crate::grpc::status::{Code, Status};
pub use client::{BadEndpoint, Cri, Endpoint};
pub use service::{EventStream, RuntimeService};

#[cfg(test)]
mod tests {
    use super::api::{AuthConfig, ImageSpec, PullImageRequest};

    #[test]
    fn registry_secrets_never_show_in_debug_output() {
        let req = PullImageRequest {
            image: Some(ImageSpec { image: "registry.example/app:1".into(), ..Default::default() }),
            auth: Some(AuthConfig {
                username: "robot".into(),
                password: "hunter2".into(),
                auth: "cm9ib3Q6aHVudGVyMg==".into(),
                registry_token: "tok-123".into(),
                ..Default::default()
            }),
            sandbox_config: None,
        };
        let shown = format!("{req:?}");
        assert!(shown.contains("robot"), "{shown}");
        assert!(shown.contains("<redacted>"), "{shown}");
        for secret in ["hunter2", "cm9ib3Q6aHVudGVyMg==", "tok-123"] {
            assert!(!shown.contains(secret), "{secret} leaked: {shown}");
        }
    }
}
