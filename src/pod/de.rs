//! The one deserializer of the Pod types: a JSON value read the way Go's decoder reads it, a
//! struct only from an object (serde_json's own value deserializer also builds a struct from
//! a list, its fields in order, which kubelet refuses).
//!
//! The API structs (`api_struct!`) are read by table: [`Table`] gives each struct's field
//! names and one assignment per field, [`Field`] reads a field's type from its JSON value
//! (lists, maps, options and boxes of API structs here; plain values through serde, `V`, so
//! their messages are serde_json's). One loop per struct instead of serde's derived visitor,
//! field enum and per-field options, which were most of the Pod decoder's code. The
//! messages are the ones serde's derive gave: `invalid type: X, expected struct Pod`, `...
//! expected a sequence`, and a field's own.
//! `Deserialize` still holds for every API struct (other deserializers: tests, atoll's own
//! annotations), through [`Struct`], the same field names and a generic per-field read.

use super::quantity::Quantity;
use super::types::IntOrString;
use serde::de::{self, DeserializeSeed, IntoDeserializer, Visitor};
use serde_json::{Error, Map, Number, Value};
use std::collections::BTreeMap;
use std::marker::PhantomData;

/// An API struct read by table (`api_struct!` implements it).
pub trait Table: Default {
    /// The struct's name, for `expected struct NAME`.
    const NAME: &'static str;
    /// Every field's JSON name in declaration order, `None` for one serde skips.
    const ALL: &'static [Option<&'static str>];
    /// The JSON names of the fields it reads, in declaration order.
    const FIELDS: &'static [&'static str];
    /// Reads field `i` (of `ALL`) from `v`.
    fn set(&mut self, i: usize, v: Value) -> Result<(), Error>;
    /// The same, from any deserializer's map.
    fn set_from<'de, A: de::MapAccess<'de>>(&mut self, key: &str, map: &mut A) -> Result<(), A::Error>;
}

/// A type a field of an API struct may have, read from its JSON value.
pub trait Field: Sized {
    fn take(v: Value) -> Result<Self, Error>;
}

/// Reads an API struct: an object only, its fields in the object's order (the first error
/// wins), every field absent left at its default.
pub fn table<T: Table>(v: Value) -> Result<T, Error> {
    let mut t = T::default();
    fields(v, T::NAME, T::ALL, &mut |i, v| t.set(i, v))?;
    Ok(t)
}

/// The loop of [`table`], the same for every struct: each key of the object that names a
/// field goes to `set` with the field's index.
fn fields(
    v: Value,
    name: &str,
    all: &[Option<&str>],
    set: &mut dyn FnMut(usize, Value) -> Result<(), Error>,
) -> Result<(), Error> {
    let map = match v {
        Value::Object(map) => map,
        other => return Err(not_a_struct(&other, name)),
    };
    for (k, v) in map {
        if let Some(i) = all.iter().position(|n| *n == Some(k.as_str())) {
            set(i, v)?;
        }
    }
    Ok(())
}

/// `*slot = F::take(v)`, one copy per field type (not per field).
#[inline(never)]
pub fn assign<F: Field>(slot: &mut F, v: Value) -> Result<(), Error> {
    *slot = F::take(v)?;
    Ok(())
}

fn not_a_struct(v: &Value, name: &str) -> Error {
    de::Error::invalid_type(unexpected(v), &ExpectStruct(name))
}

struct ExpectStruct<'a>(&'a str);

impl de::Expected for ExpectStruct<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "struct {}", self.0)
    }
}

/// The error a visitor expecting `exp` gives for `v`, as `V::deserialize_any` shows it.
fn not_a(v: &Value, exp: &str) -> Error {
    let un = match v {
        Value::Number(n) => match (n.as_u64(), n.as_i64()) {
            (Some(u), _) => de::Unexpected::Unsigned(u),
            (None, Some(i)) => de::Unexpected::Signed(i),
            (None, None) => de::Unexpected::Float(n.as_f64().unwrap_or(f64::NAN)),
        },
        Value::Null => de::Unexpected::Unit,
        other => unexpected(other),
    };
    de::Error::invalid_type(un, &exp)
}

impl<T: Field> Field for Option<T> {
    fn take(v: Value) -> Result<Self, Error> {
        match v {
            Value::Null => Ok(None),
            v => T::take(v).map(Some),
        }
    }
}

impl<T: Field> Field for Box<T> {
    fn take(v: Value) -> Result<Self, Error> {
        T::take(v).map(Box::new)
    }
}

impl<T: Field> Field for Vec<T> {
    fn take(v: Value) -> Result<Self, Error> {
        match v {
            Value::Array(items) => {
                let mut out = Vec::with_capacity(items.len());
                for item in items {
                    out.push(T::take(item)?);
                }
                Ok(out)
            }
            other => Err(not_a(&other, "a sequence")),
        }
    }
}

impl<T: Field> Field for BTreeMap<String, T> {
    fn take(v: Value) -> Result<Self, Error> {
        match v {
            Value::Object(map) => {
                let mut out = BTreeMap::new();
                for (k, v) in map {
                    out.insert(k, T::take(v)?);
                }
                Ok(out)
            }
            other => Err(not_a(&other, "a map")),
        }
    }
}

/// Free JSON is kept as it is (what serde's `Value` visitor would rebuild).
impl Field for Value {
    fn take(v: Value) -> Result<Self, Error> {
        Ok(v)
    }
}

macro_rules! plain {
    ($($t:ty),*) => {$(
        impl Field for $t {
            fn take(v: Value) -> Result<Self, Error> {
                <$t as de::Deserialize>::deserialize(V(v))
            }
        }
    )*};
}
plain!(String, bool, i64, i32, Quantity, IntOrString);

/// What serde's `#[serde(untagged)]` derive said of a value that is neither.
const NO_VARIANT: &str = "data did not match any variant of untagged enum IntOrString";

/// An `i64`, else a string, as the untagged derive read it, without first copying the value
/// into serde's buffer (whose code was instantiated for each deserializer).
impl<'de> de::Deserialize<'de> for IntOrString {
    fn deserialize<D: de::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(IntOrStr)
    }
}

struct IntOrStr;

impl<'de> Visitor<'de> for IntOrStr {
    type Value = IntOrString;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("an integer or a string")
    }
    fn visit_i64<E: de::Error>(self, v: i64) -> Result<IntOrString, E> {
        Ok(IntOrString::Int(v))
    }
    fn visit_u64<E: de::Error>(self, v: u64) -> Result<IntOrString, E> {
        i64::try_from(v).map(IntOrString::Int).map_err(|_| E::custom(NO_VARIANT))
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<IntOrString, E> {
        Ok(IntOrString::Str(v.to_string()))
    }
    fn visit_string<E: de::Error>(self, v: String) -> Result<IntOrString, E> {
        Ok(IntOrString::Str(v))
    }
    fn visit_bytes<E: de::Error>(self, v: &[u8]) -> Result<IntOrString, E> {
        std::str::from_utf8(v).map(|s| IntOrString::Str(s.to_string())).map_err(|_| E::custom(NO_VARIANT))
    }
    fn visit_bool<E: de::Error>(self, _: bool) -> Result<IntOrString, E> {
        Err(E::custom(NO_VARIANT))
    }
    fn visit_f64<E: de::Error>(self, _: f64) -> Result<IntOrString, E> {
        Err(E::custom(NO_VARIANT))
    }
    fn visit_unit<E: de::Error>(self) -> Result<IntOrString, E> {
        Err(E::custom(NO_VARIANT))
    }
    fn visit_none<E: de::Error>(self) -> Result<IntOrString, E> {
        Err(E::custom(NO_VARIANT))
    }
    fn visit_seq<A: de::SeqAccess<'de>>(self, _: A) -> Result<IntOrString, A::Error> {
        Err(de::Error::custom(NO_VARIANT))
    }
    fn visit_map<A: de::MapAccess<'de>>(self, _: A) -> Result<IntOrString, A::Error> {
        Err(de::Error::custom(NO_VARIANT))
    }
}

/// How many of `all` are named (the fields not skipped).
pub const fn count(all: &[Option<&str>]) -> usize {
    let (mut i, mut n) = (0, 0);
    while i < all.len() {
        if all[i].is_some() {
            n += 1;
        }
        i += 1;
    }
    n
}

/// The names of `all`, the skipped fields left out.
pub const fn named<const N: usize>(all: &[Option<&'static str>]) -> [&'static str; N] {
    let mut out = [""; N];
    let (mut i, mut j) = (0, 0);
    while i < all.len() {
        if let Some(name) = all[i] {
            out[j] = name;
            j += 1;
        }
        i += 1;
    }
    out
}

/// The length of `snake` in camelCase.
pub const fn camel_len(snake: &str) -> usize {
    let b = snake.as_bytes();
    let (mut i, mut n) = (0, 0);
    while i < b.len() {
        if b[i] != b'_' {
            n += 1;
        }
        i += 1;
    }
    n
}

/// `snake` in camelCase as serde's `rename_all = "camelCase"` writes it (`host_network` →
/// `hostNetwork`).
pub const fn camel<const N: usize>(snake: &str) -> [u8; N] {
    let b = snake.as_bytes();
    let mut out = [0u8; N];
    let (mut i, mut j, mut upper) = (0, 0, false);
    while i < b.len() {
        if b[i] == b'_' {
            upper = true;
        } else {
            out[j] = if upper { b[i].to_ascii_uppercase() } else { b[i] };
            upper = false;
            j += 1;
        }
        i += 1;
    }
    out
}

/// The visitor of an API struct for any deserializer: a map, each known field read as its
/// type, the rest ignored.
pub struct Struct<T>(PhantomData<T>);

impl<T> Struct<T> {
    pub fn new() -> Self {
        Struct(PhantomData)
    }
}

impl<T> Default for Struct<T> {
    fn default() -> Self {
        Self::new()
    }
}

impl<'de, T: Table> Visitor<'de> for Struct<T> {
    type Value = T;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "struct {}", T::NAME)
    }

    fn visit_map<A: de::MapAccess<'de>>(self, mut map: A) -> Result<T, A::Error> {
        let mut t = T::default();
        while let Some(key) = map.next_key::<String>()? {
            t.set_from(&key, &mut map)?;
        }
        Ok(t)
    }
}

/// `T` from `value`, objects only for structs.
pub fn from_value<T: Field>(value: Value) -> Result<T, Error> {
    T::take(value)
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
        // serde_json's derive read a struct from a list of its fields in order; Go does not,
        // nor does either path here.
        let listed = json!([{"cpu": "1"}]);
        let e = from_value::<ResourceRequirements>(listed.clone()).unwrap_err().to_string();
        assert!(e.starts_with("invalid type: sequence, expected struct ResourceRequirements"), "{e}");
        assert!(serde_json::from_value::<ResourceRequirements>(listed).is_err());
        // The messages serde's derive gave over this deserializer, pinned.
        for (bad, message) in MESSAGES {
            let bad: Value = serde_json::from_str(bad).unwrap();
            let ours = from_value::<Pod>(bad.clone()).unwrap_err().to_string();
            assert_eq!(ours, *message, "for {bad}");
        }
    }

    /// Mistakes and what serde's derived decoder of the Pod types said of each.
    const MESSAGES: &[(&str, &str)] = &[
        (r#"{"spec":{"containers":[{"livenessProbe":{"httpGet":{"port":1.5}}}]}}"#, NO_VARIANT),
        (r#"{"spec":{"containers":[{"livenessProbe":{"httpGet":{"port":null}}}]}}"#, NO_VARIANT),
        (r#"{"spec":{"containers":[{"livenessProbe":{"httpGet":{"port":[80]}}}]}}"#, NO_VARIANT),
        (r#"{"spec":{"containers":[{"livenessProbe":{"tcpSocket":{"port":{"a":1}}}}]}}"#, NO_VARIANT),
        (r#"{"spec":{"containers":[{"livenessProbe":{"tcpSocket":{"port":18446744073709551615}}}]}}"#, NO_VARIANT),
        (r#"{"spec":{"priority":"high"}}"#, "invalid type: string \"high\", expected i32"),
        (r#"{"spec":{"containers":{"name":"c"}}}"#, "invalid type: map, expected a sequence"),
        (r#"{"spec":{"containers":[{"ports":5}]}}"#, "invalid type: integer `5`, expected a sequence"),
        (r#"{"spec":{"containers":[{"ports":[-1.5]}]}}"#, "invalid type: number, expected struct ContainerPort"),
        (r#"{"spec":{"nodeSelector":[true]}}"#, "invalid type: sequence, expected a map"),
        (r#"{"spec":{"nodeSelector":{"a":null}}}"#, "invalid type: null, expected a string"),
        (r#"{"spec":{"overhead":{"cpu":"1x"}}}"#, "quantity \"1x\": unknown suffix \"x\""),
        (r#"{"metadata":"x"}"#, "invalid type: string \"x\", expected struct ObjectMeta"),
        (r#"{"spec":{"tolerations":null,"volumes":[{"hostPath":7}]}}"#, "invalid type: null, expected a sequence"),
        (
            r#"{"spec":{"volumes":[{"hostPath":{"path":1}},{"name":2}]}}"#,
            "invalid type: integer `1`, expected a string",
        ),
        (
            r#"{"spec":{"containers":[{"env":[{"name":"a","valueFrom":{"fieldRef":[]}}]}]}}"#,
            "invalid type: sequence, expected struct ObjectFieldSelector",
        ),
        (
            r#"{"spec":{"containers":[{"livenessProbe":{"httpGet":{"port":true}}}]}}"#,
            "data did not match any variant of untagged enum IntOrString",
        ),
        (r#"{"spec":{"hostPID":"yes"}}"#, "invalid type: string \"yes\", expected a boolean"),
        (
            r#"{"spec":{"securityContext":{"sysctls":[{"name":"a","value":1}]}}}"#,
            "invalid type: integer `1`, expected a string",
        ),
        (r#"{"spec":{"containers":[{"args":["a",1]}]}}"#, "invalid type: integer `1`, expected a string"),
        (r#"{"spec":{"containers":[{"args":"a"}]}}"#, "invalid type: string \"a\", expected a sequence"),
        (r#"{"spec":{"containers":[{"args":-3}]}}"#, "invalid type: integer `-3`, expected a sequence"),
        (r#"{"spec":{"containers":[{"args":2.5}]}}"#, "invalid type: floating point `2.5`, expected a sequence"),
        (r#"{"spec":{"containers":[{"args":null}]}}"#, "invalid type: null, expected a sequence"),
        (r#"{"spec":{"containers":[{"args":false}]}}"#, "invalid type: boolean `false`, expected a sequence"),
        (
            r#"{"spec":{"affinity":{"nodeAffinity":{"requiredDuringSchedulingIgnoredDuringExecution":{"nodeSelectorTerms":[{"matchExpressions":[{"values":{}}]}]}}}}}"#,
            "invalid type: map, expected a sequence",
        ),
        (r#"{"spec":{"containers":[null]}}"#, "invalid type: null, expected struct Container"),
        (
            r#"{"spec":{"containers":[{"resources":{"limits":{"cpu":null}}}]}}"#,
            "invalid type: null, expected a quantity such as \"250m\", \"64Mi\" or 2",
        ),
        (r#"{"kind":5}"#, "invalid type: integer `5`, expected a string"),
        (
            r#"{"spec":{"priority":10000000000.0},"status":{"x":1}}"#,
            "invalid type: floating point `10000000000.0`, expected i32",
        ),
    ];
}
