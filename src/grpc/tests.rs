//! The gRPC layer against servers on unix sockets made in the test: framing, deadlines,
//! hang-ups, streaming.

use super::*;

// Two messages of the tests' own, shaped as CRI's (the transport knows nothing of CRI, and
// importing `cri` here would point an arrow back up).
#[derive(Clone, PartialEq, ::prost::Message)]
struct VersionRequest {
    #[prost(string, tag = "1")]
    version: String,
}

#[derive(Clone, PartialEq, ::prost::Message)]
struct ExecSyncResponse {
    #[prost(bytes = "vec", tag = "1")]
    stdout: Vec<u8>,
    #[prost(bytes = "vec", tag = "2")]
    stderr: Vec<u8>,
    #[prost(int32, tag = "3")]
    exit_code: i32,
}

#[test]
fn timeout_header_uses_at_most_eight_digits() {
    assert_eq!(grpc_timeout(Duration::from_millis(1500)), "1500m");
    assert_eq!(grpc_timeout(Duration::from_micros(10)), "1m");
    assert_eq!(grpc_timeout(Duration::from_secs(120)), "120000m");
    assert_eq!(grpc_timeout(Duration::from_secs(100_000_000)), "27777H");
    assert_eq!(grpc_timeout(Duration::from_secs(200_000)), "200000S");
}

#[test]
fn a_message_survives_framing() {
    let m = VersionRequest { version: "v1".into() };
    let framed = encode_message(&m, 1024).unwrap();
    assert_eq!(&framed[..5], &[0, 0, 0, 0, 4]);
    let back: VersionRequest = decode_message(framed, 1024).unwrap();
    assert_eq!(back, m);
}

#[test]
fn oversize_messages_are_refused_both_ways() {
    let m = ExecSyncResponse { stdout: vec![b'x'; 100], ..Default::default() };
    assert_eq!(encode_message(&m, 50).unwrap_err().code, Code::ResourceExhausted);
    let framed = encode_message(&m, 1000).unwrap();
    let err = decode_message::<ExecSyncResponse>(framed, 50).unwrap_err();
    assert_eq!(err.code, Code::ResourceExhausted);
}

#[test]
fn broken_frames_are_internal_errors() {
    let short = Bytes::from_static(&[0, 0, 0]);
    assert_eq!(decode_message::<VersionRequest>(short, 100).unwrap_err().code, Code::Internal);
    let compressed = Bytes::from_static(&[1, 0, 0, 0, 0]);
    let err = decode_message::<VersionRequest>(compressed, 100).unwrap_err();
    assert!(err.message.contains("compressed"), "{err}");
    let truncated = Bytes::from_static(&[0, 0, 0, 0, 9, 1, 2]);
    let err = decode_message::<VersionRequest>(truncated, 100).unwrap_err();
    assert!(err.message.contains("says 9 bytes but 2 follow"), "{err}");
    let garbage = Bytes::from_static(&[0, 0, 0, 0, 2, 0xff, 0xff]);
    assert_eq!(decode_message::<VersionRequest>(garbage, 100).unwrap_err().code, Code::Internal);
}

#[test]
fn status_comes_from_grpc_status_and_message() {
    let mut h = http::HeaderMap::new();
    assert_eq!(status_from(&h).unwrap_err().code, Code::Internal);
    h.insert("grpc-status", "0".parse().unwrap());
    assert!(status_from(&h).is_ok());
    h.insert("grpc-status", "5".parse().unwrap());
    h.insert("grpc-message", "container %22c1%22 not found".parse().unwrap());
    let err = status_from(&h).unwrap_err();
    assert_eq!(err.code, Code::NotFound);
    assert_eq!(err.message, "container \"c1\" not found");
    h.insert("grpc-status", "banana".parse().unwrap());
    assert_eq!(status_from(&h).unwrap_err().code, Code::Unknown);
}

/// A unix socket whose server accepts connections and does `then` with each.
fn server(name: &str, then: fn(std::os::unix::net::UnixStream)) -> (crate::testdir::TestDir, PathBuf) {
    let dir = crate::testdir::TestDir::new(&format!("grpc-{name}"));
    let path = dir.join("s.sock");
    let listener = std::os::unix::net::UnixListener::bind(&path).unwrap();
    std::thread::spawn(move || {
        for conn in listener.incoming().flatten() {
            then(conn);
        }
    });
    (dir, path)
}

#[test]
fn a_server_that_never_answers_hits_the_local_deadline() {
    let (_dir, path) = server("silent", |conn| {
        // Hold the connection open, say nothing.
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_secs(30));
            drop(conn);
        });
    });
    let channel = Channel::new(path);
    let req = VersionRequest { version: "v1".into() };
    let result: Result<VersionRequest, Status> =
        smol::block_on(channel.unary("/runtime.v1.RuntimeService/Version", &req, Some(Duration::from_millis(300))));
    assert_eq!(result.unwrap_err().code, Code::DeadlineExceeded);
}

#[test]
fn a_server_that_hangs_up_is_unavailable_not_a_hang() {
    let (_dir, path) = server("hangup", drop);
    let channel = Channel::new(path);
    let req = VersionRequest { version: "v1".into() };
    let result: Result<VersionRequest, Status> =
        smol::block_on(channel.unary("/runtime.v1.RuntimeService/Version", &req, Some(Duration::from_secs(10))));
    assert_eq!(result.unwrap_err().code, Code::Unavailable);
}

#[test]
fn a_missing_socket_is_unavailable_and_named() {
    let channel = Channel::new("/nonexistent/atoll/cri.sock");
    let req = VersionRequest::default();
    let err = smol::block_on(channel.unary::<_, VersionRequest>("/x/Y", &req, None)).unwrap_err();
    assert_eq!(err.code, Code::Unavailable);
    assert!(err.message.contains("/nonexistent/atoll/cri.sock"), "{err}");
}

/// A unix socket whose HTTP/2 server answers every call with `head_status` and, when it
/// is OK, the bytes of `chunks` as separate DATA frames, then `grpc-status: trailer`.
fn streaming_server(name: &str, chunks: Vec<Vec<u8>>, trailer: &'static str) -> (crate::testdir::TestDir, PathBuf) {
    let dir = crate::testdir::TestDir::new(&format!("grpc-{name}"));
    let path = dir.join("s.sock");
    let listener = std::os::unix::net::UnixListener::bind(&path).unwrap();
    std::thread::spawn(move || {
        smol::block_on(async move {
            let listener = smol::Async::new(listener).unwrap();
            let (stream, _) = listener.accept().await.unwrap();
            let mut conn = h2::server::handshake(stream.compat()).await.unwrap();
            while let Some(Ok((_request, mut respond))) = conn.accept().await {
                let ok = trailer == "0";
                let mut head = http::Response::builder().status(200).header("content-type", "application/grpc");
                if !ok {
                    head = head.header("grpc-status", trailer);
                }
                let mut send = respond.send_response(head.body(()).unwrap(), !ok).unwrap();
                if ok {
                    for c in &chunks {
                        send.send_data(Bytes::from(c.clone()), false).unwrap();
                    }
                    let mut t = http::HeaderMap::new();
                    t.insert("grpc-status", trailer.parse().unwrap());
                    send.send_trailers(t).unwrap();
                }
            }
        })
    });
    (dir, path)
}

#[test]
fn streamed_messages_are_reassembled_across_frames() {
    let messages: Vec<VersionRequest> =
        ["v1", "", &"x".repeat(300)].iter().map(|v| VersionRequest { version: v.to_string() }).collect();
    let mut wire = Vec::new();
    for m in &messages {
        wire.extend_from_slice(&encode_message(m, 1024).unwrap());
    }
    // Frames cut inside a prefix, inside a message, and several messages in one frame.
    let cuts = [3, 9, 12, wire.len() - 100, wire.len()];
    let mut chunks = Vec::new();
    let mut at = 0;
    for c in cuts {
        chunks.push(wire[at..c].to_vec());
        at = c;
    }
    let (_dir, path) = streaming_server("stream", chunks, "0");
    let channel = Channel::new(path);
    smol::block_on(async {
        let mut replies = channel.server_streaming("/x/Events", &VersionRequest::default()).await.unwrap();
        for m in &messages {
            assert_eq!(replies.next::<VersionRequest>().await.unwrap().as_ref(), Some(m));
        }
        assert_eq!(replies.next::<VersionRequest>().await.unwrap(), None);
    });
}

#[test]
fn a_refused_stream_fails_when_opened() {
    let (_dir, path) = streaming_server("refused", Vec::new(), "12");
    let channel = Channel::new(path);
    let err = smol::block_on(async {
        let mut replies = channel.server_streaming("/x/Events", &VersionRequest::default()).await.unwrap();
        replies.next::<VersionRequest>().await.unwrap_err()
    });
    assert_eq!(err.code, Code::Unimplemented);
}
