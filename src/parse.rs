//! Structured input from outside, parsed under one budget.
//!
//! Manifests (files and URL payloads), config files, the URL source's cached payload and the
//! API server's replies are all text someone else wrote. Whatever their format, they are read
//! here under the same limits: at most [`MAX_NODES`] values (map keys count) and at most
//! [`MAX_DEPTH`] levels of nesting. YAML gets them through serde-saphyr's budget (which also
//! bounds aliases, so an alias bomb cannot expand); JSON is measured by a linear scan before
//! serde_json allocates anything, so a 10 MiB array of tiny numbers costs a scan, not a tree
//! of millions of values. Sizes are bounded by the callers' readers (`bounded`).

use serde_json::Value;

/// The most values (scalars, maps, lists and map keys) one input may hold. A large static pod
/// is a few hundred; a URL payload of a hundred pods a few tens of thousands.
pub const MAX_NODES: usize = 100_000;
/// The deepest nesting one input may have (a Pod is about 12 levels deep).
pub const MAX_DEPTH: usize = 64;

/// A YAML or JSON document, and how many further YAML documents followed it (unused).
pub struct Document {
    pub value: Value,
    pub more_documents: usize,
}

/// Why an input was refused.
#[derive(Debug)]
pub enum Error {
    /// Not UTF-8 text.
    NotUtf8(std::str::Utf8Error),
    /// Over [`MAX_NODES`] or [`MAX_DEPTH`] (JSON; YAML's budget is the YAML parser's error).
    Budget(Budget),
    /// Not YAML (nor JSON): the parser's message, on one line.
    Yaml(String),
    /// Not JSON.
    Json(serde_json::Error),
}

/// Which limit of the budget an input is over.
#[derive(Debug, PartialEq, Eq)]
pub enum Budget {
    Depth,
    Nodes,
}

impl std::fmt::Display for Budget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Budget::Depth => write!(f, "nested deeper than {MAX_DEPTH} levels"),
            Budget::Nodes => write!(f, "more than {MAX_NODES} values"),
        }
    }
}

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Error::NotUtf8(e) => write!(f, "not UTF-8 text: {e}"),
            Error::Budget(b) => write!(f, "over the parser's budget: {b}"),
            Error::Yaml(e) => write!(f, "not valid YAML or JSON: {e}"),
            Error::Json(e) => write!(f, "not valid JSON: {e}"),
        }
    }
}

impl std::error::Error for Error {}

impl From<Budget> for Error {
    fn from(b: Budget) -> Error {
        Error::Budget(b)
    }
}

/// For the rooms whose errors are still text.
impl From<Error> for String {
    fn from(e: Error) -> String {
        e.to_string()
    }
}

/// Parses JSON or YAML into a JSON value, as kubelet converts YAML to JSON. A YAML stream with
/// several documents yields the first, and says how many others there were.
pub fn document(bytes: &[u8]) -> Result<Document, Error> {
    let text = std::str::from_utf8(bytes).map_err(Error::NotUtf8)?;
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    if text.trim_start().starts_with('{') {
        within_budget(text.as_bytes())?;
        if let Ok(v) = serde_json::from_str::<Value>(text) {
            return Ok(Document { value: v, more_documents: 0 });
        }
    }
    // YAML (a superset of JSON, so JSON with YAML-only spellings lands here too).
    let mut options = serde_saphyr::Options::default();
    options.legacy_octal_numbers = true;
    options.with_snippet = false;
    let mut budget = serde_saphyr::Budget::default();
    budget.max_nodes = MAX_NODES;
    budget.max_depth = MAX_DEPTH;
    options.budget = Some(budget);
    let docs: Vec<Value> =
        serde_saphyr::from_multiple_with_options(text, options).map_err(|e| Error::Yaml(one_line(&e.to_string())))?;
    let mut docs = docs.into_iter().filter(|d| !d.is_null());
    let value = docs.next().unwrap_or(Value::Null);
    Ok(Document { value, more_documents: docs.count() })
}

/// Parses JSON only (API server replies, atoll's own state files), under the budget.
pub fn json(bytes: &[u8]) -> Result<Value, Error> {
    json_as(bytes)
}

/// Parses JSON into `T`, under the budget.
pub fn json_as<T: serde::de::DeserializeOwned>(bytes: &[u8]) -> Result<T, Error> {
    within_budget(bytes)?;
    serde_json::from_slice(bytes).map_err(Error::Json)
}

/// Counts the values and the nesting of JSON text without building anything. Malformed text
/// passes (the parser names its error); only what is over the budget is refused here.
pub fn within_budget(bytes: &[u8]) -> Result<(), Budget> {
    let (mut nodes, mut depth) = (0usize, 0usize);
    let (mut in_string, mut escaped, mut in_token) = (false, false, false);
    for &b in bytes {
        if in_string {
            match (escaped, b) {
                (true, _) => escaped = false,
                (false, b'\\') => escaped = true,
                (false, b'"') => in_string = false,
                _ => {}
            }
            continue;
        }
        match b {
            b'{' | b'[' => {
                nodes += 1;
                depth += 1;
                in_token = false;
                if depth > MAX_DEPTH {
                    return Err(Budget::Depth);
                }
            }
            b'}' | b']' => {
                depth = depth.saturating_sub(1);
                in_token = false;
            }
            b'"' => {
                nodes += 1;
                in_string = true;
                in_token = false;
            }
            b',' | b':' | b' ' | b'\t' | b'\n' | b'\r' => in_token = false,
            _ if !in_token => {
                nodes += 1;
                in_token = true;
            }
            _ => {}
        }
        if nodes > MAX_NODES {
            return Err(Budget::Nodes);
        }
    }
    Ok(())
}

fn one_line(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_is_counted_without_being_parsed() {
        assert!(within_budget(br#"{"a":[1,2,{"b":"c,d]}"}],"e":true}"#).is_ok());
        let wide = format!("[{}0]", "0,".repeat(MAX_NODES));
        assert_eq!(within_budget(wide.as_bytes()), Err(Budget::Nodes));
        assert_eq!(Budget::Nodes.to_string(), format!("more than {MAX_NODES} values"));
        let deep = format!("{}{}", "[".repeat(MAX_DEPTH + 1), "]".repeat(MAX_DEPTH + 1));
        assert_eq!(within_budget(deep.as_bytes()), Err(Budget::Depth));
        assert_eq!(Budget::Depth.to_string(), format!("nested deeper than {MAX_DEPTH} levels"));
        // Brackets and quotes inside strings are text, not structure.
        let quoted = format!("[\"{}\\\"\"]", "[".repeat(MAX_DEPTH * 2));
        assert!(within_budget(quoted.as_bytes()).is_ok());
    }

    #[test]
    fn json_and_yaml_share_the_budget() {
        let wide_json = format!("{{\"items\":[{}0]}}", "0,".repeat(MAX_NODES));
        let e = document(wide_json.as_bytes()).err().expect("refused").to_string();
        assert_eq!(e, format!("over the parser's budget: more than {MAX_NODES} values"));
        let wide_yaml = format!("items:\n{}", "- 0\n".repeat(MAX_NODES + 1));
        let e = document(wide_yaml.as_bytes()).err().expect("refused").to_string();
        assert!(e.contains("budget") || e.contains("nodes"), "{e}");
        assert!(json(wide_json.as_bytes()).unwrap_err().to_string().contains("more than"));
        let ok = document(b"{\"a\": [1, 2]}").unwrap();
        assert_eq!(ok.value, serde_json::json!({"a": [1, 2]}));
    }

    #[test]
    fn yaml_streams_give_their_first_document() {
        let d = document(b"---\na: 1\n---\nb: 2\n---\nc: 3\n").unwrap();
        assert_eq!((d.value, d.more_documents), (serde_json::json!({"a": 1}), 2));
    }
}
