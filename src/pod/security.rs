//! The security profiles of a security context (pod and container): seccomp, SELinux and
//! AppArmor, as serde types in the API's shape (`types` re-exports them; `apparmor` reads the
//! AppArmor one).

use serde::Serialize;

api_struct! {
    pub struct SeccompProfile {
        #[serde(default, rename = "type")]
        pub type_: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub localhost_profile: Option<String>,
    }
}

api_struct! {
    pub struct SeLinuxOptions {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub user: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub role: Option<String>,
        #[serde(default, rename = "type", skip_serializing_if = "Option::is_none")]
        pub type_: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub level: Option<String>,
    }
}

api_struct! {
    /// `type` is RuntimeDefault, Localhost or Unconfined; `localhostProfile` is set iff
    /// Localhost.
    pub struct AppArmorProfile {
        #[serde(default, rename = "type")]
        pub type_: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub localhost_profile: Option<String>,
    }
}
