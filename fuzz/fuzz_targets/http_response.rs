//! Fuzzes the HTTP/1.1 responses atoll's client reads from servers it does not control (the
//! manifest URL, an API server without HTTP/2, a proxy's answer to CONNECT; `http1::body`):
//! the head and its limit, the framing, a body read whole under a limit and read again in
//! small pieces. Beyond not panicking: both readings agree, and neither gives more than its
//! limit.
#![no_main]

use atoll::http1::body::{read_all, read_body, read_head, Framing, HEAD_LIMIT};
use libfuzzer_sys::fuzz_target;

const LIMIT: u64 = 1 << 20;

fuzz_target!(|data: &[u8]| {
    let mut whole = std::io::Cursor::new(data);
    let Ok((head, status)) = read_head(&mut whole) else { return };
    assert!(head.len() <= HEAD_LIMIT + 2);
    let method = if data.len() % 2 == 0 { "GET" } else { "HEAD" };
    let Ok(framing) = Framing::of(method, status, &head) else { return };
    let at = whole.position();
    let got = read_all(&mut whole, &mut framing.clone(), LIMIT);
    if let Ok(body) = &got {
        assert!(body.len() as u64 <= LIMIT);
    }
    // The same body in pieces of 3 bytes: the same bytes, or an error where the whole failed.
    let mut pieces = std::io::BufReader::with_capacity(5, std::io::Cursor::new(&data[at as usize..]));
    let (mut f, mut out, mut buf) = (framing, Vec::new(), [0u8; 3]);
    let by_pieces = loop {
        match read_body(&mut pieces, &mut f, &mut buf) {
            Ok(0) => break Ok(out),
            Ok(n) if out.len() as u64 + n as u64 <= LIMIT => out.extend_from_slice(&buf[..n]),
            Ok(_) => break Err(()),
            Err(_) => break Err(()),
        }
    };
    assert_eq!(got.ok(), by_pieces.ok(), "whole and in pieces");
});
