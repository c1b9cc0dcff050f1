//! The runtime's IDs as atoll keeps and shows them. The runtime chooses them: nothing here
//! assumes their length or that they are ASCII.

/// A container's ID, as the runtime answered it (CreateContainer, ListContainers).
#[derive(Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ContainerId(String);

impl ContainerId {
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// As logs show it (see [`short`]).
    pub fn short(&self) -> &str {
        short(&self.0)
    }
}

impl From<String> for ContainerId {
    fn from(id: String) -> Self {
        ContainerId(id)
    }
}

impl From<&str> for ContainerId {
    fn from(id: &str) -> Self {
        ContainerId(id.to_string())
    }
}

impl std::ops::Deref for ContainerId {
    type Target = str;
    fn deref(&self) -> &str {
        &self.0
    }
}

/// Maps keyed by ID are looked up with a `&str` (hashed as the string is).
impl std::borrow::Borrow<str> for ContainerId {
    fn borrow(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Display for ContainerId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl PartialEq<str> for ContainerId {
    fn eq(&self, other: &str) -> bool {
        self.0 == other
    }
}

impl PartialEq<&str> for ContainerId {
    fn eq(&self, other: &&str) -> bool {
        self.0 == *other
    }
}

impl PartialEq<ContainerId> for String {
    fn eq(&self, other: &ContainerId) -> bool {
        *self == other.0
    }
}

impl PartialEq<String> for ContainerId {
    fn eq(&self, other: &String) -> bool {
        &self.0 == other
    }
}

pub use crate::short_id::short;

#[cfg(test)]
mod tests {
    use super::ContainerId;

    #[test]
    fn a_container_id_is_shown_short_and_compared_as_text() {
        let id = ContainerId::from("aaaaaaaaaaaaé-tail");
        assert_eq!(id.short(), "aaaaaaaaaaaaé");
        assert!(id == "aaaaaaaaaaaaé-tail" && id.as_str().len() == 19);
    }
}
