//! The Kubernetes protobuf encoding (`application/vnd.kubernetes.protobuf`), as far as the
//! mirror needs it: the `k8s\0` envelope (`runtime.Unknown`: typeMeta, raw), the Lease
//! (coordination.k8s.io/v1) written fresh, a renewal written into the server's own bytes, and
//! the `Status` of a refusal.
//!
//! A renewal edits the Lease the server last sent: the spec replaced, the owner set, the
//! fields only the server writes left out, every other field (labels, annotations, fields
//! newer than atoll) kept byte for byte, where a decode into atoll's own types and back would
//! drop what they do not name.
//!
//! Field numbers: k8s.io/api coordination/v1 and apimachinery meta/v1 and runtime
//! `generated.proto`. Everything read is bounded by the answer's size; a malformed message is
//! an error, never a panic.

use super::error::Malformed;
use std::time::{SystemTime, UNIX_EPOCH};

pub const CONTENT_TYPE: &str = "application/vnd.kubernetes.protobuf";
const MAGIC: &[u8] = b"k8s\0";

const LEN: u8 = 2;
const VARINT: u8 = 0;

fn varint(buf: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        buf.push((v as u8) | 0x80);
        v >>= 7;
    }
    buf.push(v as u8);
}

fn bytes_field(buf: &mut Vec<u8>, number: u32, value: &[u8]) {
    varint(buf, u64::from(number) << 3 | u64::from(LEN));
    varint(buf, value.len() as u64);
    buf.extend_from_slice(value);
}

fn int_field(buf: &mut Vec<u8>, number: u32, value: u64) {
    varint(buf, u64::from(number) << 3 | u64::from(VARINT));
    varint(buf, value);
}

fn read_varint(b: &[u8], at: &mut usize) -> Result<u64, Malformed> {
    let mut v = 0u64;
    for shift in (0..64).step_by(7) {
        let byte = *b.get(*at).ok_or(Malformed::VarintCut)?;
        *at += 1;
        v |= u64::from(byte & 0x7f) << shift;
        if byte < 0x80 {
            return Ok(v);
        }
    }
    Err(Malformed::VarintLong)
}

/// One field of a message: its number, the whole field as encoded, and its value (the
/// payload of a length-delimited one, the varint's bytes otherwise).
struct Field<'a> {
    number: u32,
    wire: u8,
    whole: &'a [u8],
    value: &'a [u8],
}

/// The fields of `msg` in order.
fn fields(msg: &[u8]) -> Result<Vec<Field<'_>>, Malformed> {
    let mut out = Vec::new();
    let mut at = 0;
    while at < msg.len() {
        let start = at;
        let key = read_varint(msg, &mut at)?;
        let (number, wire) = (u32::try_from(key >> 3).map_err(|_| Malformed::FieldNumber)?, (key & 7) as u8);
        let value_at = at;
        let end = match wire {
            VARINT => {
                read_varint(msg, &mut at)?;
                at
            }
            1 => at.checked_add(8).ok_or(Malformed::Overflow)?,
            LEN => {
                let len = usize::try_from(read_varint(msg, &mut at)?).map_err(|_| Malformed::Length)?;
                at.checked_add(len).ok_or(Malformed::Overflow)?
            }
            5 => at.checked_add(4).ok_or(Malformed::Overflow)?,
            _ => return Err(Malformed::WireType(wire)),
        };
        if end > msg.len() || number == 0 {
            return Err(Malformed::PastEnd);
        }
        let value = if wire == LEN { &msg[at..end] } else { &msg[value_at..end] };
        out.push(Field { number, wire, whole: &msg[start..end], value });
        at = end;
    }
    Ok(out)
}

/// The first length-delimited field `number` of `msg` (empty when absent).
fn field(msg: &[u8], number: u32) -> Result<&[u8], Malformed> {
    Ok(fields(msg)?.into_iter().find(|f| f.number == number && f.wire == LEN).map_or(&[][..], |f| f.value))
}

/// A string field, lossily (for messages meant for people and names).
fn text(msg: &[u8], number: u32) -> Result<String, Malformed> {
    Ok(String::from_utf8_lossy(field(msg, number)?).into_owned())
}

/// `msg` with its fields `number` replaced by `with` (each one such a field), where the first
/// of them was, or at the end.
fn replaced(msg: &[u8], number: u32, with: &[&[u8]]) -> Result<Vec<u8>, Malformed> {
    let mut out = Vec::with_capacity(msg.len() + with.iter().map(|w| w.len() + 4).sum::<usize>());
    let mut put = false;
    let mut put_here = |out: &mut Vec<u8>| {
        if !std::mem::replace(&mut put, true) {
            for w in with {
                bytes_field(out, number, w);
            }
        }
    };
    for f in fields(msg)? {
        if f.number == number {
            put_here(&mut out);
        } else {
            out.extend_from_slice(f.whole);
        }
    }
    put_here(&mut out);
    Ok(out)
}

/// An object in its envelope.
pub fn envelope(api_version: &str, kind: &str, raw: &[u8]) -> Vec<u8> {
    let mut type_meta = Vec::new();
    bytes_field(&mut type_meta, 1, api_version.as_bytes());
    bytes_field(&mut type_meta, 2, kind.as_bytes());
    let mut out = MAGIC.to_vec();
    bytes_field(&mut out, 1, &type_meta);
    bytes_field(&mut out, 2, raw);
    out
}

/// The object in an envelope, and its kind.
pub fn open(body: &[u8]) -> Result<(String, &[u8]), Malformed> {
    let unknown = body.strip_prefix(MAGIC).ok_or(Malformed::NoEnvelope)?;
    if !field(unknown, 3)?.is_empty() {
        return Err(Malformed::Compressed);
    }
    Ok((text(field(unknown, 1)?, 2)?, field(unknown, 2)?))
}

/// A `Status` (a refusal): its message, reason and code, as the JSON one reads.
pub fn status(raw: &[u8]) -> Result<serde_json::Value, Malformed> {
    let code = fields(raw)?.into_iter().find(|f| f.number == 6 && f.wire == VARINT).map(|f| {
        let mut at = 0;
        read_varint(f.value, &mut at).unwrap_or(0)
    });
    Ok(serde_json::json!({
        "kind": "Status",
        "message": text(raw, 3)?,
        "reason": text(raw, 4)?,
        "code": code.unwrap_or(0),
    }))
}

/// What a Lease's holder writes at each renewal.
pub struct LeaseSpec<'a> {
    pub holder: &'a str,
    pub duration_seconds: u32,
    pub renew: SystemTime,
    /// The Node that owns the lease: its name and UID.
    pub owner: Option<(&'a str, &'a str)>,
}

impl LeaseSpec<'_> {
    fn spec(&self) -> Vec<u8> {
        let since = self.renew.duration_since(UNIX_EPOCH).unwrap_or_default();
        let mut micro_time = Vec::new();
        int_field(&mut micro_time, 1, since.as_secs());
        // MicroTime: microseconds, as its JSON form carries.
        int_field(&mut micro_time, 2, u64::from(since.subsec_micros() * 1000));
        let mut spec = Vec::new();
        bytes_field(&mut spec, 1, self.holder.as_bytes());
        int_field(&mut spec, 2, u64::from(self.duration_seconds));
        bytes_field(&mut spec, 4, &micro_time);
        spec
    }

    fn owner(&self) -> Option<Vec<u8>> {
        let (name, uid) = self.owner?;
        let mut r = Vec::new();
        bytes_field(&mut r, 5, b"v1");
        bytes_field(&mut r, 1, b"Node");
        bytes_field(&mut r, 3, name.as_bytes());
        bytes_field(&mut r, 4, uid.as_bytes());
        Some(r)
    }

    /// A new Lease `namespace/name`.
    pub fn new_lease(&self, name: &str, namespace: &str) -> Vec<u8> {
        let mut meta = Vec::new();
        bytes_field(&mut meta, 1, name.as_bytes());
        bytes_field(&mut meta, 3, namespace.as_bytes());
        if let Some(owner) = self.owner() {
            bytes_field(&mut meta, 13, &owner);
        }
        let mut lease = Vec::new();
        bytes_field(&mut lease, 1, &meta);
        bytes_field(&mut lease, 2, &self.spec());
        lease
    }

    /// The server's Lease `raw`, renewed: the spec replaced, the owner set when known, what
    /// only the server writes left out (it keeps its own: the UID, the creation time, the
    /// managed fields, the self link), the rest as the server sent it, its resourceVersion
    /// with it.
    pub fn renewed(&self, raw: &[u8]) -> Result<Vec<u8>, Malformed> {
        let mut meta = field(raw, 1)?.to_vec();
        for server_owned in [4, 5, 8, 17] {
            meta = replaced(&meta, server_owned, &[])?;
        }
        if let Some(owner) = self.owner() {
            meta = replaced(&meta, 13, &[&owner])?;
        }
        let lease = replaced(raw, 1, &[&meta])?;
        replaced(&lease, 2, &[&self.spec()])
    }
}

/// The resourceVersion of an object's bytes (its metadata's field 6).
pub fn resource_version(raw: &[u8]) -> Result<String, Malformed> {
    text(field(raw, 1)?, 6)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn spec(owner: Option<(&'static str, &'static str)>) -> LeaseSpec<'static> {
        LeaseSpec {
            holder: "edge-1",
            duration_seconds: 40,
            renew: UNIX_EPOCH + Duration::from_micros(1_700_000_000_123_456),
            owner,
        }
    }

    #[test]
    fn a_new_lease_is_written_with_the_field_numbers_of_generated_proto() {
        // Written by hand from coordination/v1 and meta/v1 generated.proto, not from this
        // module's helpers: Lease{metadata=1{name=1, namespace=3, ownerReferences=13{
        // kind=1, name=3, uid=4, apiVersion=5}}, spec=2{holderIdentity=1,
        // leaseDurationSeconds=2, renewTime=4{seconds=1, nanos=2}}}.
        let owner = b"\x2a\x02v1\x0a\x04Node\x1a\x06edge-1\x22\x03u-1";
        let mut meta = b"\x0a\x06edge-1\x1a\x0fkube-node-lease\x6a".to_vec();
        meta.push(owner.len() as u8);
        meta.extend_from_slice(owner);
        // 1,700,000,000 s and 123,456,000 ns as varints.
        let time = b"\x08\x80\xe2\xcf\xaa\x06\x10\x80\x94\xef\x3a";
        let mut spec_bytes = b"\x0a\x06edge-1\x10\x28\x22".to_vec();
        spec_bytes.push(time.len() as u8);
        spec_bytes.extend_from_slice(time);
        let mut want = vec![0x0a, meta.len() as u8];
        want.extend_from_slice(&meta);
        want.extend_from_slice(&[0x12, spec_bytes.len() as u8]);
        want.extend_from_slice(&spec_bytes);
        assert_eq!(spec(Some(("edge-1", "u-1"))).new_lease("edge-1", "kube-node-lease"), want);
    }

    #[test]
    fn a_renewal_keeps_every_field_it_does_not_own() {
        // The server's lease: labels (11), managedFields (17), resourceVersion (6), an
        // unknown field 99 in the spec's place, and an old spec with acquireTime.
        let mut meta = Vec::new();
        bytes_field(&mut meta, 1, b"edge-1");
        bytes_field(&mut meta, 5, b"the-uid");
        bytes_field(&mut meta, 6, b"4242");
        bytes_field(&mut meta, 8, b"\x08\x01");
        bytes_field(&mut meta, 11, b"\x0a\x01k\x12\x01v");
        bytes_field(&mut meta, 17, b"\x0a\x07kubelet");
        let mut old = Vec::new();
        bytes_field(&mut old, 1, &meta);
        bytes_field(&mut old, 2, b"\x0a\x05other\x1a\x02\x08\x01");
        int_field(&mut old, 99, 7);
        let renewed = spec(Some(("edge-1", "u-1"))).renewed(&old).unwrap();
        let top = fields(&renewed).unwrap();
        assert_eq!(top.iter().map(|f| f.number).collect::<Vec<_>>(), [1, 2, 99]);
        let meta_fields: Vec<u32> = fields(top[0].value).unwrap().iter().map(|f| f.number).collect();
        assert_eq!(meta_fields, [1, 6, 11, 13], "the server's own fields (uid, creation, managed) left to it");
        assert_eq!(resource_version(&renewed).unwrap(), "4242");
        assert_eq!(text(top[1].value, 1).unwrap(), "edge-1");
        assert!(field(top[1].value, 3).unwrap().is_empty(), "the old acquireTime goes with the old spec");
        // Without a known owner, the owners are left as they were.
        let plain = spec(None).renewed(&old).unwrap();
        let meta_fields: Vec<u32> =
            fields(fields(&plain).unwrap()[0].value).unwrap().iter().map(|f| f.number).collect();
        assert_eq!(meta_fields, [1, 6, 11]);
    }

    #[test]
    fn envelopes_and_statuses_round_trip_and_junk_is_an_error() {
        let body = envelope("coordination.k8s.io/v1", "Lease", b"\x0a\x00");
        assert_eq!(&body[..4], b"k8s\0");
        assert_eq!(open(&body).unwrap(), ("Lease".to_string(), &b"\x0a\x00"[..]));
        let mut status = Vec::new();
        bytes_field(&mut status, 2, b"Failure");
        bytes_field(&mut status, 3, b"the object has been modified");
        bytes_field(&mut status, 4, b"Conflict");
        int_field(&mut status, 6, 409);
        let v = status_of(&status);
        assert_eq!((v["reason"].as_str(), v["code"].as_u64()), (Some("Conflict"), Some(409)));
        assert!(open(b"{\"kind\":\"Lease\"}").is_err());
        for junk in [&b"\x0a\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff"[..], b"\x0a\x05ab", b"\x0f", b"\x80"] {
            assert!(fields(junk).is_err(), "{junk:?}");
            assert!(spec(Some(("a", "b"))).renewed(junk).is_err(), "{junk:?}");
        }
    }

    fn status_of(raw: &[u8]) -> serde_json::Value {
        status(raw).unwrap()
    }
}
