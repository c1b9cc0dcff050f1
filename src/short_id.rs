//! How atoll shows a long ID (a runtime's container or sandbox ID, a pod's UID) in logs and
//! events: its first 13 characters, as `crictl` does. IDs come from outside (the runtime
//! chooses its own; a manifest may give a UID): nothing here assumes their length or that
//! they are ASCII.

/// The first 13 characters of `id`; a multibyte character is never cut.
pub fn short(id: &str) -> &str {
    match id.char_indices().nth(13) {
        Some((end, _)) => &id[..end],
        None => id,
    }
}

#[cfg(test)]
mod tests {
    use super::short;

    #[test]
    fn a_short_id_is_thirteen_characters_whatever_was_sent() {
        assert_eq!(short("29d4a5cf7109f1c2e3"), "29d4a5cf7109f");
        assert_eq!(short("abc"), "abc");
        assert_eq!(short(""), "");
        // Byte 13 falls inside a character here: slicing by bytes would panic.
        assert_eq!(short("aaaaaaaaaaaaé-tail"), "aaaaaaaaaaaaé");
        assert_eq!(short("ééééééééééééééé"), "ééééééééééééé");
    }
}
