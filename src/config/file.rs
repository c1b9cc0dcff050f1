//! Reading a settings file (YAML or JSON) into a typed config, under the parser's budget: the
//! value, warnings about the file, and the paths of fields the type does not have.

/// Reads a YAML or JSON settings file into `T`; returns it and the paths of fields `T` does not
/// have. Errors name the file and the field.
pub fn load_settings_file<T: serde::de::DeserializeOwned>(
    path: &std::path::Path,
) -> Result<(T, Vec<String>, Vec<String>), String> {
    let shown = path.display();
    let bytes = std::fs::read(path).map_err(|e| format!("config {shown}: {e}"))?;
    let mut warnings = Vec::new();
    let value = crate::pod::decode::to_value(&bytes, &mut warnings).map_err(|e| format!("config {shown}: {e}"))?;
    let mut ignored = Vec::new();
    let mut note = |p: serde_ignored::Path<'_>| ignored.push(crate::pod::decode::render(&p));
    let cfg: T = serde_path_to_error::deserialize(serde_ignored::Deserializer::new(value, &mut note))
        .map_err(|e| format!("config {shown}: {}: {}", e.path(), e.inner()))?;
    let warnings = warnings.iter().map(|w| format!("config {shown}: {w}")).collect();
    Ok((cfg, warnings, ignored))
}
