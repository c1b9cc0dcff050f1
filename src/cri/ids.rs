//! The runtime's IDs as atoll keeps and shows them. The runtime chooses them: nothing here
//! assumes their length or that they are ASCII.

crate::text_id! {
    /// A container's ID, as the runtime answered it (CreateContainer, ListContainers).
    ContainerId
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
