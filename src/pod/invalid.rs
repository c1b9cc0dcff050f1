//! Why a value in a manifest breaks one of the pod model's rules (names, keys, UIDs, paths,
//! quantities, ports, start-ordering), as kubelet words its field errors: `Display` gives the
//! text a finding shows after the field's path, exactly as kubelet's validation does. Callers
//! that collect findings as text take it with `?` or `to_string()`.

use std::fmt;

/// Why, boxed: the rule checks' `Result`s stay a word wide on every validation path.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Invalid(Box<Kind>);

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Kind {
    /// An empty name.
    Empty,
    /// A name longer than the rule's limit.
    TooLong(usize),
    /// An RFC 1123 label with other characters, or with '-' at an end.
    LabelChars,
    /// An RFC 1123 subdomain with other characters, or a part with '-' or '.' at an end.
    SubdomainChars,
    /// An IANA port name that breaks its rule.
    PortName,
    /// A label value that breaks its rule.
    LabelValue(String),
    /// A label key whose name part breaks its rule.
    Key(String),
    /// A ConfigMap or Secret key that breaks kubelet's rule.
    ConfigKey(String),
    /// A `metadata.uid` atoll cannot name directories after.
    Uid(String),
    /// A path in a volume that could climb out of it.
    Descending(String),
    /// A quantity that does not parse: the text and why.
    Quantity { text: String, why: &'static str },
    /// A quantity with a suffix the grammar does not have.
    QuantitySuffix { text: String, suffix: String },
    /// A port number out of range.
    PortRange(i64),
    /// A port name no port of the container has.
    NoPortNamed(String),
    /// A part of a value (`namespace`, `name`, `key prefix`) that breaks its rule.
    Part { what: &'static str, value: String, why: Invalid },
    /// An item of the start-ordering annotation that cannot be used.
    DependsOn { item: String, why: Invalid },
    /// A pod that names itself in its start-ordering annotation.
    WaitsForItself,
}

/// The characters and form of a label or name, as kubelet words it.
const NAME_FORM: &str = "letters, digits, '-', '_' or '.', starting and ending with a letter or digit";

impl Invalid {
    pub fn kind(&self) -> &Kind {
        &self.0
    }
}

impl From<Kind> for Invalid {
    fn from(k: Kind) -> Invalid {
        Invalid(Box::new(k))
    }
}

impl fmt::Display for Invalid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

impl fmt::Display for Kind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Kind::Empty => f.write_str("must not be empty"),
            Kind::TooLong(n) => write!(f, "must be at most {n} characters"),
            Kind::LabelChars => f.write_str(
                "must consist of lowercase letters, digits and '-', and start and end with a letter or digit",
            ),
            Kind::SubdomainChars => f.write_str("must consist of lowercase letters, digits, '-' and '.', each part starting and ending with a letter or digit"),
            Kind::PortName => f.write_str(
                "must be at most 15 lowercase letters, digits and '-', contain a letter, and not start, end or double '-'",
            ),
            Kind::LabelValue(v) => write!(f, "value {v:?} must be at most 63 characters of {NAME_FORM}"),
            Kind::Key(k) => write!(f, "key {k:?} must be a name of at most 63 {NAME_FORM}"),
            Kind::ConfigKey(k) => {
                write!(f, "{k:?} must be 1 to 253 letters, digits, '-', '_' or '.', and not '.' or start with '..'")
            }
            Kind::Uid(uid) => write!(
                f,
                "{uid:?} must be 1 to {} letters, digits, '-', '_' or '.', not starting with '.' \
                 (atoll names the pod's directories after it)",
                super::paths::MAX_UID_LEN
            ),
            Kind::Descending(rel) => write!(
                f,
                "{rel:?} must be a relative path of non-empty elements, none of them '.' or '..', not starting with '..'"
            ),
            Kind::Quantity { text, why } => write!(f, "quantity {text:?}: {why}"),
            Kind::QuantitySuffix { text, suffix } => write!(f, "quantity {text:?}: unknown suffix {suffix:?}"),
            Kind::PortRange(n) => write!(f, "port {n} is out of range"),
            Kind::NoPortNamed(s) => write!(f, "no port named {s:?}"),
            Kind::Part { what, value, why } => write!(f, "{what} {value:?} {why}"),
            Kind::DependsOn { item, why } => write!(f, "{item:?}: {why}"),
            Kind::WaitsForItself => f.write_str("a pod cannot wait for itself"),
        }
    }
}

impl std::error::Error for Invalid {}

/// Findings are text (a field's path and kubelet's message): an `Invalid` joins them as its
/// message.
impl From<Invalid> for String {
    fn from(e: Invalid) -> String {
        e.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_are_kubelets() {
        let cases = [
            (Kind::TooLong(63), "must be at most 63 characters"),
            (
                Kind::LabelValue("-a".into()),
                "value \"-a\" must be at most 63 characters of letters, digits, '-', '_' or '.', starting and ending with a letter or digit",
            ),
            (
                Kind::Key("a/".into()),
                "key \"a/\" must be a name of at most 63 letters, digits, '-', '_' or '.', starting and ending with a letter or digit",
            ),
            (
                Kind::DependsOn {
                    item: "x/y".into(),
                    why: Kind::Part { what: "namespace", value: "x".into(), why: Kind::Empty.into() }.into(),
                },
                "\"x/y\": namespace \"x\" must not be empty",
            ),
            (Kind::Quantity { text: "1q".into(), why: "too large" }, "quantity \"1q\": too large"),
        ];
        for (e, want) in cases {
            assert_eq!(e.to_string(), want);
        }
    }
}
