//! Kubernetes' name rules: RFC 1123 labels and subdomains, IANA port names, label keys and
//! values.

/// RFC 1123 label: at most 63 lowercase letters, digits and '-', alphanumeric at both ends.
pub fn dns1123_label(s: &str) -> Result<(), String> {
    if s.is_empty() {
        return Err("must not be empty".into());
    }
    if s.len() > 63 {
        return Err("must be at most 63 characters".into());
    }
    let ok_chars = s.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-');
    if !ok_chars || s.starts_with('-') || s.ends_with('-') {
        return Err(
            "must consist of lowercase letters, digits and '-', and start and end with a letter or digit".into()
        );
    }
    Ok(())
}

/// RFC 1123 subdomain: at most 253 characters, dot-separated labels.
pub fn dns1123_subdomain(s: &str) -> Result<(), String> {
    if s.is_empty() {
        return Err("must not be empty".into());
    }
    if s.len() > 253 {
        return Err("must be at most 253 characters".into());
    }
    let ok_chars = s.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '.');
    let ok_ends = s.split('.').all(|part| {
        !part.is_empty()
            && part.starts_with(|c: char| c.is_ascii_alphanumeric())
            && part.ends_with(|c: char| c.is_ascii_alphanumeric())
    });
    if !ok_chars || !ok_ends {
        return Err("must consist of lowercase letters, digits, '-' and '.', each part starting and ending with a letter or digit".into());
    }
    Ok(())
}

/// An IANA service name: at most 15 lowercase letters, digits and '-', with a letter, no
/// '-' at either end and no "--".
pub fn port_name(s: &str) -> Result<(), String> {
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
        Err("must be at most 15 lowercase letters, digits and '-', contain a letter, and not start, end or double '-'"
            .into())
    }
}

/// A label value: empty, or at most 63 letters, digits, '-', '_' or '.', alphanumeric at both
/// ends.
pub fn label_value(v: &str) -> Result<(), String> {
    let bad = v.len() > 63
        || !v.chars().all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
        || v.starts_with(['-', '_', '.'])
        || v.ends_with(['-', '_', '.']);
    if bad {
        Err(format!("value {v:?} must be at most 63 characters of letters, digits, '-', '_' or '.', starting and ending with a letter or digit"))
    } else {
        Ok(())
    }
}

/// A label key: optional DNS subdomain prefix and '/', then a name of at most 63 characters.
pub fn qualified_name(key: &str) -> Result<(), String> {
    let (prefix, name) = match key.rsplit_once('/') {
        Some((p, n)) => (Some(p), n),
        None => (None, key),
    };
    if let Some(p) = prefix {
        dns1123_subdomain(p).map_err(|e| format!("key prefix {p:?} {e}"))?;
    }
    let ok = !name.is_empty()
        && name.len() <= 63
        && name.chars().all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
        && name.starts_with(|c: char| c.is_ascii_alphanumeric())
        && name.ends_with(|c: char| c.is_ascii_alphanumeric());
    if ok {
        Ok(())
    } else {
        Err(format!("key {key:?} must be a name of at most 63 letters, digits, '-', '_' or '.', starting and ending with a letter or digit"))
    }
}
