//! A settings file read field by field: the file is parsed under the parser's budget (the
//! manifests' `parse::document`), each field is taken by name and shaped by serde_json with
//! an error naming its path, and whatever is left over is the fields this version does not
//! know. One small walker for every settings type instead of a typed deserializer per type
//! (which cost about 40 KB of the binary for two files).

use super::error::{Error, Problem};
use serde_json::{Map, Value};

/// The largest settings file read (they are a few KB).
const FILE_LIMIT: usize = 1 << 20;

/// One settings object: its fields not yet taken, and its path (`authentication.webhook`).
pub struct Fields {
    map: Map<String, Value>,
    path: String,
}

impl Fields {
    /// Reads `path` (YAML or JSON) as an object; the notes are the parser's warnings.
    pub fn read(path: &std::path::Path, notes: &mut Vec<String>) -> Result<Fields, Error> {
        let bytes = crate::bounded::read_following(path, FILE_LIMIT).map_err(|e| Error::from(Problem::Read(e)))?;
        let doc = crate::parse::document(&bytes).map_err(|e| Error::from(Problem::Parse(e)))?;
        if doc.more_documents > 0 {
            notes.push(format!("the file holds {} YAML documents; only the first is used", doc.more_documents + 1));
        }
        Fields::object(doc.value, String::new())
    }

    /// An already parsed settings object (tests).
    #[cfg(test)]
    pub fn read_value(value: Value) -> Result<Fields, Error> {
        Fields::object(value, String::new())
    }

    fn object(value: Value, path: String) -> Result<Fields, Error> {
        match value {
            Value::Object(map) => Ok(Fields { map, path }),
            _ => Err(Error::field(if path.is_empty() { "the file" } else { &path }, "expected an object".into())),
        }
    }

    fn at(&self, key: &str) -> String {
        match self.path.is_empty() {
            true => key.to_string(),
            false => format!("{}.{key}", self.path),
        }
    }

    /// The field `key`, if given (null is not given).
    pub fn get<T: serde::de::DeserializeOwned>(&mut self, key: &str) -> Result<Option<T>, Error> {
        match self.map.remove(key) {
            None | Some(Value::Null) => Ok(None),
            Some(v) => serde_json::from_value(v).map(Some).map_err(|e| Error::field(&self.at(key), e.to_string())),
        }
    }

    /// The object `key`, to be read field by field.
    pub fn section(&mut self, key: &str) -> Result<Option<Fields>, Error> {
        match self.map.remove(key) {
            None | Some(Value::Null) => Ok(None),
            Some(v) => Fields::object(v, self.at(key)).map(Some),
        }
    }

    /// The list of objects `key`, each to be read field by field.
    pub fn list(&mut self, key: &str) -> Result<Vec<Fields>, Error> {
        match self.map.remove(key) {
            None | Some(Value::Null) => Ok(Vec::new()),
            Some(Value::Array(items)) => {
                let base = self.at(key);
                items.into_iter().enumerate().map(|(i, v)| Fields::object(v, format!("{base}[{i}]"))).collect()
            }
            Some(_) => Err(Error::field(&self.at(key), "expected a list".into())),
        }
    }

    /// Done: the paths of the fields nobody took.
    pub fn rest(self, unknown: &mut Vec<String>) {
        unknown.extend(self.map.keys().map(|k| self.at(k)));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fields(v: Value) -> Fields {
        Fields::object(v, String::new()).unwrap()
    }

    #[test]
    fn fields_are_taken_by_name_and_the_rest_are_unknown_with_their_paths() {
        let mut f = fields(serde_json::json!({
            "port": 10250, "name": null, "auth": {"enabled": true, "typo": 1},
            "items": [{"a": "x"}, {"a": "y", "b": 2}], "extra": "z"
        }));
        assert_eq!(f.get::<i64>("port").unwrap(), Some(10250));
        assert_eq!(f.get::<String>("name").unwrap(), None);
        assert_eq!(f.get::<String>("absent").unwrap(), None);
        let mut unknown = Vec::new();
        let mut auth = f.section("auth").unwrap().unwrap();
        assert_eq!(auth.get::<bool>("enabled").unwrap(), Some(true));
        auth.rest(&mut unknown);
        for mut item in f.list("items").unwrap() {
            assert!(item.get::<String>("a").unwrap().is_some());
            item.rest(&mut unknown);
        }
        f.rest(&mut unknown);
        assert_eq!(unknown, ["auth.typo", "items[1].b", "extra"]);
    }

    #[test]
    fn a_wrong_shape_names_the_field() {
        let mut f = fields(serde_json::json!({"port": "x", "auth": [1], "items": {"a": 1}, "s": {"t": {"u": true}}}));
        assert!(f.get::<i64>("port").unwrap_err().to_string().starts_with("port: invalid type"));
        assert_eq!(f.section("auth").err().unwrap().to_string(), "auth: expected an object");
        assert_eq!(f.list("items").err().unwrap().to_string(), "items: expected a list");
        let mut t = f.section("s").unwrap().unwrap().section("t").unwrap().unwrap();
        assert!(t.get::<String>("u").unwrap_err().to_string().starts_with("s.t.u: invalid type"));
        assert_eq!(
            Fields::object(Value::Bool(true), String::new()).err().unwrap().to_string(),
            "the file: expected an object"
        );
    }
}
