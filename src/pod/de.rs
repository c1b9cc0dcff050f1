//! The one deserializer of the Pod types: a JSON value read the way Go's decoder reads it, a
//! struct only from an object. serde_json's own value deserializer also builds a struct from
//! a list (its fields in order), which kubelet refuses, and that second way in costs every
//! derived type a second copy of its field code (tens of KB of the binary over the Pod's
//! types). Everything else (numbers, strings, lists, maps, free JSON) is visited as
//! serde_json's is, so its messages are the same.

use serde::de::{self, DeserializeOwned, DeserializeSeed, IntoDeserializer, Visitor};
use serde_json::{Error, Map, Number, Value};

/// `T` from `value`, objects only for structs.
pub fn from_value<T: DeserializeOwned>(value: Value) -> Result<T, Error> {
    T::deserialize(V(value))
}

/// A JSON value, as a deserializer.
struct V(Value);

fn number<'de, W: Visitor<'de>>(n: &Number, visitor: W) -> Result<W::Value, Error> {
    if let Some(u) = n.as_u64() {
        visitor.visit_u64(u)
    } else if let Some(i) = n.as_i64() {
        visitor.visit_i64(i)
    } else {
        visitor.visit_f64(n.as_f64().unwrap_or(f64::NAN))
    }
}

impl<'de> de::Deserializer<'de> for V {
    type Error = Error;

    fn deserialize_any<W: Visitor<'de>>(self, visitor: W) -> Result<W::Value, Error> {
        match self.0 {
            Value::Null => visitor.visit_unit(),
            Value::Bool(b) => visitor.visit_bool(b),
            Value::Number(n) => number(&n, visitor),
            Value::String(s) => visitor.visit_string(s),
            Value::Array(items) => visitor.visit_seq(Seq(items.into_iter())),
            Value::Object(map) => visitor.visit_map(Fields { iter: map.into_iter(), value: None }),
        }
    }

    fn deserialize_option<W: Visitor<'de>>(self, visitor: W) -> Result<W::Value, Error> {
        match self.0 {
            Value::Null => visitor.visit_none(),
            v => visitor.visit_some(V(v)),
        }
    }

    fn deserialize_struct<W: Visitor<'de>>(
        self,
        _: &'static str,
        _: &'static [&'static str],
        visitor: W,
    ) -> Result<W::Value, Error> {
        match self.0 {
            Value::Object(map) => visitor.visit_map(Fields { iter: map.into_iter(), value: None }),
            other => Err(de::Error::invalid_type(unexpected(&other), &visitor)),
        }
    }

    fn deserialize_newtype_struct<W: Visitor<'de>>(self, _: &'static str, visitor: W) -> Result<W::Value, Error> {
        visitor.visit_newtype_struct(self)
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes byte_buf unit
        unit_struct seq tuple tuple_struct map enum identifier ignored_any
    }
}

fn unexpected(v: &Value) -> de::Unexpected<'_> {
    match v {
        Value::Null => de::Unexpected::Unit,
        Value::Bool(b) => de::Unexpected::Bool(*b),
        Value::Number(_) => de::Unexpected::Other("number"),
        Value::String(s) => de::Unexpected::Str(s),
        Value::Array(_) => de::Unexpected::Seq,
        Value::Object(_) => de::Unexpected::Map,
    }
}

struct Seq(std::vec::IntoIter<Value>);

impl<'de> de::SeqAccess<'de> for Seq {
    type Error = Error;

    fn next_element_seed<S: DeserializeSeed<'de>>(&mut self, seed: S) -> Result<Option<S::Value>, Error> {
        self.0.next().map(|v| seed.deserialize(V(v))).transpose()
    }

    fn size_hint(&self) -> Option<usize> {
        Some(self.0.len())
    }
}

struct Fields {
    iter: <Map<String, Value> as IntoIterator>::IntoIter,
    value: Option<Value>,
}

impl<'de> de::MapAccess<'de> for Fields {
    type Error = Error;

    fn next_key_seed<S: DeserializeSeed<'de>>(&mut self, seed: S) -> Result<Option<S::Value>, Error> {
        let Some((k, v)) = self.iter.next() else { return Ok(None) };
        self.value = Some(v);
        seed.deserialize(k.into_deserializer()).map(Some)
    }

    fn next_value_seed<S: DeserializeSeed<'de>>(&mut self, seed: S) -> Result<S::Value, Error> {
        seed.deserialize(V(self.value.take().unwrap_or(Value::Null)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pod::types::{Pod, ResourceRequirements};
    use serde_json::json;

    #[test]
    fn reads_what_serde_json_reads_and_no_struct_from_a_list() {
        let v = json!({"metadata": {"name": "p", "labels": {"a": "b"}}, "spec": {"priority": 5,
            "containers": [{"name": "c", "image": "i", "ports": [{"containerPort": 80, "hostPort": null}],
            "resources": {"limits": {"cpu": "1", "memory": 128}}}], "ephemeralContainers": [{"x": [1, 2.5, true]}]}});
        let ours: Pod = from_value(v.clone()).unwrap();
        let theirs: Pod = serde_json::from_value(v).unwrap();
        assert_eq!(ours, theirs);
        // serde_json reads a struct from a list of its fields in order; Go does not.
        let listed = json!([{"cpu": "1"}]);
        assert!(serde_json::from_value::<ResourceRequirements>(listed.clone()).is_ok());
        let e = from_value::<ResourceRequirements>(listed).unwrap_err().to_string();
        assert!(e.starts_with("invalid type: sequence, expected struct ResourceRequirements"), "{e}");
        // The same messages for the same mistakes.
        for bad in [json!({"spec": {"priority": "high"}}), json!({"spec": {"containers": {"name": "c"}}})] {
            let ours = from_value::<Pod>(bad.clone()).unwrap_err().to_string();
            assert_eq!(ours, serde_json::from_value::<Pod>(bad).unwrap_err().to_string());
        }
    }
}
