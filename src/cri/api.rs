//! CRI v1 messages, as prost generates them from `proto/cri.proto` (checked in as
//! `runtime.v1.rs`; CI checks it is current), plus a `Debug` for credentials that never shows
//! a secret.
#![allow(clippy::all, clippy::pedantic, missing_docs)]

include!("runtime.v1.rs");

impl std::fmt::Debug for AuthConfig {
    /// Shows which credentials are set, never their values.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let set = |s: &str| if s.is_empty() { "" } else { "<redacted>" };
        f.debug_struct("AuthConfig")
            .field("username", &self.username)
            .field("password", &set(&self.password))
            .field("auth", &set(&self.auth))
            .field("server_address", &self.server_address)
            .field("identity_token", &set(&self.identity_token))
            .field("registry_token", &set(&self.registry_token))
            .finish()
    }
}
