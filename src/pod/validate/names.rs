//! Kubernetes' name rules: RFC 1123 labels and subdomains, IANA port names, label keys and
//! values.

use crate::pod::{Invalid, InvalidKind as Kind};

/// RFC 1123 label: at most 63 lowercase letters, digits and '-', alphanumeric at both ends.
pub fn dns1123_label(s: &str) -> Result<(), Invalid> {
    if s.is_empty() {
        return Err(Invalid::from(Kind::Empty));
    }
    if s.len() > 63 {
        return Err(Invalid::from(Kind::TooLong(63)));
    }
    let ok_chars = s.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-');
    if !ok_chars || s.starts_with('-') || s.ends_with('-') {
        return Err(Invalid::from(Kind::LabelChars));
    }
    Ok(())
}

/// RFC 1123 subdomain: at most 253 characters, dot-separated labels.
pub fn dns1123_subdomain(s: &str) -> Result<(), Invalid> {
    if s.is_empty() {
        return Err(Invalid::from(Kind::Empty));
    }
    if s.len() > 253 {
        return Err(Invalid::from(Kind::TooLong(253)));
    }
    let ok_chars = s.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '.');
    let ok_ends = s.split('.').all(|part| {
        !part.is_empty()
            && part.starts_with(|c: char| c.is_ascii_alphanumeric())
            && part.ends_with(|c: char| c.is_ascii_alphanumeric())
    });
    if !ok_chars || !ok_ends {
        return Err(Invalid::from(Kind::SubdomainChars));
    }
    Ok(())
}

/// An IANA service name: at most 15 lowercase letters, digits and '-', with a letter, no
/// '-' at either end and no "--".
pub fn port_name(s: &str) -> Result<(), Invalid> {
    let ok = !s.is_empty()
        && s.len() <= 15
        && s.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
        && s.chars().any(|c| c.is_ascii_lowercase())
        && !s.starts_with('-')
        && !s.ends_with('-')
        && !s.contains("--");
    if ok {
        Ok(())
    } else {
        Err(Invalid::from(Kind::PortName))
    }
}

/// A label value: empty, or at most 63 letters, digits, '-', '_' or '.', alphanumeric at both
/// ends.
pub fn label_value(v: &str) -> Result<(), Invalid> {
    let bad = v.len() > 63
        || !v.chars().all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
        || v.starts_with(['-', '_', '.'])
        || v.ends_with(['-', '_', '.']);
    if bad {
        Err(Invalid::from(Kind::LabelValue(v.to_string())))
    } else {
        Ok(())
    }
}

/// A label key: optional DNS subdomain prefix and '/', then a name of at most 63 characters.
pub fn qualified_name(key: &str) -> Result<(), Invalid> {
    let (prefix, name) = match key.rsplit_once('/') {
        Some((p, n)) => (Some(p), n),
        None => (None, key),
    };
    if let Some(p) = prefix {
        dns1123_subdomain(p)
            .map_err(|e| Invalid::from(Kind::Part { what: "key prefix", value: p.to_string(), why: e }))?;
    }
    let ok = !name.is_empty()
        && name.len() <= 63
        && name.chars().all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
        && name.starts_with(|c: char| c.is_ascii_alphanumeric())
        && name.ends_with(|c: char| c.is_ascii_alphanumeric());
    if ok {
        Ok(())
    } else {
        Err(Invalid::from(Kind::Key(key.to_string())))
    }
}
