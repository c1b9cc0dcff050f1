//! IDs that come from outside (a runtime's container ID, a pod's UID and full name): how atoll
//! shows one in logs and events, its first 13 characters as `crictl` does ([`short`]), and the
//! newtype each kind of ID gets (`text_id!`). Nothing here assumes an ID's length or that it is ASCII.

/// The first 13 characters of `id`; a multibyte character is never cut.
pub fn short(id: &str) -> &str {
    match id.char_indices().nth(13) {
        Some((end, _)) => id.get(..end).unwrap_or(id),
        None => id,
    }
}

/// A newtype over `String` for one kind of ID: shown short ([`short`]), read as `&str`
/// (`Deref`, `as_str`), compared with strings, looked up in maps by `&str`, serialised as the
/// bare string (so a record written with a `String` in its place reads the same).
#[macro_export]
macro_rules! text_id {
    ($(#[$m:meta])* $name:ident) => {
        $(#[$m])*
        #[derive(Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
        pub struct $name(String);

        impl $name {
            pub fn as_str(&self) -> &str {
                &self.0
            }

            /// As logs show it: its first 13 characters (a character is never cut).
            pub fn short(&self) -> &str {
                $crate::short_id::short(&self.0)
            }
        }

        impl From<String> for $name {
            fn from(id: String) -> Self {
                $name(id)
            }
        }

        impl From<&str> for $name {
            fn from(id: &str) -> Self {
                $name(id.to_string())
            }
        }

        impl std::ops::Deref for $name {
            type Target = str;
            fn deref(&self) -> &str {
                &self.0
            }
        }

        /// Maps keyed by the ID are looked up with a `&str` (hashed as the string is).
        impl std::borrow::Borrow<str> for $name {
            fn borrow(&self) -> &str {
                &self.0
            }
        }

        /// Serialised as the bare string it wraps (records written before it keep reading).
        impl serde::Serialize for $name {
            fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.serialize_str(&self.0)
            }
        }

        impl<'de> serde::Deserialize<'de> for $name {
            fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                <String as serde::Deserialize>::deserialize(d).map($name)
            }
        }

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(&self.0)
            }
        }

        impl PartialEq<str> for $name {
            fn eq(&self, other: &str) -> bool {
                self.0 == other
            }
        }

        impl PartialEq<&str> for $name {
            fn eq(&self, other: &&str) -> bool {
                self.0 == *other
            }
        }

        impl PartialEq<String> for $name {
            fn eq(&self, other: &String) -> bool {
                &self.0 == other
            }
        }

        impl PartialEq<$name> for String {
            fn eq(&self, other: &$name) -> bool {
                *self == other.0
            }
        }
    };
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
