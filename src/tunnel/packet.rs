//! konnectivity's wire messages (apiserver-network-proxy `konnectivity-client/proto/client`,
//! package none, carried by `AgentService/Connect`), as prost types: one `Packet` type
//! with a payload per kind. Field numbers and names are the protocol's.

/// `PacketType`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, prost::Enumeration)]
#[repr(i32)]
pub enum Kind {
    DialReq = 0,
    DialRsp = 1,
    CloseReq = 2,
    CloseRsp = 3,
    Data = 4,
    DialCls = 5,
    Drain = 6,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct Packet {
    #[prost(enumeration = "Kind", tag = "1")]
    pub r#type: i32,
    /// (`closeDial`, 7, and `drain`, 8, are the client's and the agent's to send; atoll sends
    /// neither and skips them, as prost skips any field it does not know.)
    #[prost(oneof = "Payload", tags = "2, 3, 4, 5, 6")]
    pub payload: Option<Payload>,
}

#[derive(Clone, PartialEq, prost::Oneof)]
pub enum Payload {
    #[prost(message, tag = "2")]
    DialRequest(DialRequest),
    #[prost(message, tag = "3")]
    DialResponse(DialResponse),
    #[prost(message, tag = "4")]
    Data(Data),
    #[prost(message, tag = "5")]
    CloseRequest(CloseRequest),
    #[prost(message, tag = "6")]
    CloseResponse(CloseResponse),
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct DialRequest {
    /// `tcp` (or `udp`, which atoll refuses).
    #[prost(string, tag = "1")]
    pub protocol: String,
    /// `host:port`.
    #[prost(string, tag = "2")]
    pub address: String,
    /// The dial's id, chosen by the server.
    #[prost(int64, tag = "3")]
    pub random: i64,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct DialResponse {
    #[prost(string, tag = "1")]
    pub error: String,
    #[prost(int64, tag = "2")]
    pub connect_id: i64,
    #[prost(int64, tag = "3")]
    pub random: i64,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct CloseRequest {
    #[prost(int64, tag = "1")]
    pub connect_id: i64,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct CloseResponse {
    #[prost(string, tag = "1")]
    pub error: String,
    #[prost(int64, tag = "2")]
    pub connect_id: i64,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct Data {
    #[prost(int64, tag = "1")]
    pub connect_id: i64,
    #[prost(string, tag = "2")]
    pub error: String,
    #[prost(bytes = "bytes", tag = "3")]
    pub data: bytes::Bytes,
}

impl Packet {
    pub fn new(kind: Kind, payload: Payload) -> Packet {
        Packet { r#type: kind as i32, payload: Some(payload) }
    }

    pub fn dial_response(error: String, connect_id: i64, random: i64) -> Packet {
        Packet::new(Kind::DialRsp, Payload::DialResponse(DialResponse { error, connect_id, random }))
    }

    pub fn close_response(connect_id: i64, error: &str) -> Packet {
        Packet::new(Kind::CloseRsp, Payload::CloseResponse(CloseResponse { error: error.to_string(), connect_id }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use prost::Message;

    /// Bytes written out by hand from client.proto's field numbers, so a wrong tag here cannot
    /// hide behind a test server that shares these types.
    #[test]
    fn packets_encode_with_the_protos_field_numbers() {
        let data = Packet::new(
            Kind::Data,
            Payload::Data(Data { connect_id: 5, error: String::new(), data: bytes::Bytes::from_static(b"hi") }),
        );
        // type=4 (field 1); data (field 4, 6 bytes): connectID=5 (field 1), data="hi" (field 3).
        assert_eq!(data.encode_to_vec(), [0x08, 0x04, 0x22, 0x06, 0x08, 0x05, 0x1a, 0x02, b'h', b'i']);
        let rsp = Packet::new(
            Kind::DialRsp,
            Payload::DialResponse(DialResponse { error: "x".into(), connect_id: 2, random: 9 }),
        );
        // type=1; dialResponse (field 3): error (1), connectID (2), random (3).
        assert_eq!(rsp.encode_to_vec(), [0x08, 0x01, 0x1a, 0x07, 0x0a, 0x01, b'x', 0x10, 0x02, 0x18, 0x09]);
        // DIAL_REQ (type 0, the default, not written); dialRequest (field 2): protocol (1),
        // address (2), random (3).
        let req =
            Packet::decode(&[0x12, 0x0a, 0x0a, 0x03, b't', b'c', b'p', 0x12, 0x01, b'a', 0x18, 0x07][..]).unwrap();
        assert_eq!(req.r#type, Kind::DialReq as i32);
        assert_eq!(
            req.payload,
            Some(Payload::DialRequest(DialRequest { protocol: "tcp".into(), address: "a".into(), random: 7 }))
        );
        let close = Packet::decode(&[0x08, 0x02, 0x2a, 0x02, 0x08, 0x03][..]).unwrap();
        assert_eq!(close.payload, Some(Payload::CloseRequest(CloseRequest { connect_id: 3 })));
        let close_rsp = Packet::close_response(3, "");
        assert_eq!(close_rsp.encode_to_vec(), [0x08, 0x03, 0x32, 0x02, 0x10, 0x03]);
    }
}
