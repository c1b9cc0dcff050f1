//! Fuzzes gRPC message framing and the protobuf decoders behind it: the runtime's CRI replies
//! (`grpc::decode_message`, and `take_frame` that cuts a server stream into messages) and
//! konnectivity's tunnel packets (`tunnel::packet::Packet`, framed the same way by the tunnel's
//! gRPC stream). Beyond not panicking: a message that decodes encodes and decodes to itself,
//! and cutting a stream into messages in any chunking gives the same messages.
#![no_main]

use atoll::cri::api;
use atoll::grpc::{decode_message, encode_message, take_frame};
use atoll::tunnel::packet::Packet;
use bytes::{Bytes, BytesMut};
use libfuzzer_sys::fuzz_target;
use prost::Message;

const MAX: usize = 1 << 20;

fn round_trip<M: Message + Default + PartialEq + std::fmt::Debug>(data: &[u8]) {
    // Unframed, as prost reads the body.
    if let Ok(m) = M::decode(data) {
        assert_eq!(M::decode(m.encode_to_vec().as_slice()).as_ref(), Ok(&m));
    }
    // Framed, as a unary reply.
    if let Ok(m) = decode_message::<M>(Bytes::copy_from_slice(data), MAX) {
        let framed = encode_message(&m, MAX).expect("a decoded message fits again");
        assert_eq!(decode_message::<M>(framed, MAX).ok().as_ref(), Some(&m));
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((&pick, body)) = data.split_first() else { return };
    match pick % 8 {
        0 => round_trip::<Packet>(body),
        1 => round_trip::<api::VersionResponse>(body),
        2 => round_trip::<api::ListContainersResponse>(body),
        3 => round_trip::<api::PodSandboxStatusResponse>(body),
        4 => round_trip::<api::ContainerStatusResponse>(body),
        5 => round_trip::<api::ListPodSandboxResponse>(body),
        6 => round_trip::<api::ImageFsInfoResponse>(body),
        _ => round_trip::<api::ListContainerStatsResponse>(body),
    }
    // A stream of frames read whole and read in chunks of `pick` bytes: the same frames.
    let frames = |chunk: usize| {
        let (mut buf, mut out) = (BytesMut::new(), Vec::new());
        for piece in body.chunks(chunk.max(1)) {
            buf.extend_from_slice(piece);
            loop {
                match take_frame(&mut buf, 4096) {
                    Ok(Some(f)) => out.push(Ok(f)),
                    Ok(None) => break,
                    Err(e) => {
                        out.push(Err(e.to_string()));
                        return out;
                    }
                }
            }
        }
        out
    };
    assert_eq!(frames(body.len()), frames(usize::from(pick)));
});
