//! The runtime's IDs (sandboxes, containers, images) as atoll shows them. The runtime chooses
//! them: nothing here assumes their length or that they are ASCII.

/// A container's ID, as the runtime chose it. Only the runtime makes them: atoll never
/// builds one from anything else.
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

impl PartialEq<String> for ContainerId {
    fn eq(&self, other: &String) -> bool {
        &self.0 == other
    }
}

/// The first 13 characters of a runtime ID, as `crictl` and the logs show them. A multibyte
/// character is never cut.
pub fn short(id: &str) -> &str {
    match id.char_indices().nth(13) {
        Some((end, _)) => &id[..end],
        None => id,
    }
}

#[cfg(test)]
mod tests {
    use super::{short, ContainerId};

    #[test]
    fn a_short_id_is_thirteen_characters_whatever_the_runtime_sent() {
        assert_eq!(short("29d4a5cf7109f1c2e3"), "29d4a5cf7109f");
        assert_eq!(short("abc"), "abc");
        assert_eq!(short(""), "");
        // Byte 13 falls inside a character here: slicing by bytes would panic.
        assert_eq!(short("aaaaaaaaaaaaé-tail"), "aaaaaaaaaaaaé");
        assert_eq!(short("ééééééééééééééé"), "ééééééééééééé");
        assert_eq!(ContainerId::from("aaaaaaaaaaaaé-tail").short(), "aaaaaaaaaaaaé");
    }
}
