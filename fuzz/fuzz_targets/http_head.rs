//! Fuzzes the HTTP/1.1 heads atoll reads from the network: the head reader and its limit,
//! the status line and header lookup (`http1`), the local API's request line and query
//! (`api::server::parse_head`, `query_all`), and the streaming URL and port checks
//! (`api::stream::{target, ports}`). Beyond not panicking: percent-decoding must match a
//! strict reference decoder, and what parse_head reads must agree with query_all.
#![no_main]

use atoll::api::server::{parse_head, query_all};
use atoll::api::stream;
use atoll::http1;
use libfuzzer_sys::fuzz_target;

/// RFC 3986 percent-decoding with `+` as a space, as the local API means it: `%XX` with two
/// hex digits is a byte, anything else is itself.
fn reference_decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        let hex = |j: usize| b.get(j).and_then(|c| (*c as char).to_digit(16));
        match (b[i], hex(i + 1), hex(i + 2)) {
            (b'%', Some(h), Some(l)) => {
                out.push((h * 16 + l) as u8);
                i += 3;
            }
            (b'+', _, _) => {
                out.push(b' ');
                i += 1;
            }
            (c, _, _) => {
                out.push(c);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

fuzz_target!(|data: &[u8]| {
    // The reader: the head it returns never holds the blank line, and what came with it is
    // what follows it (as much as the last read took; the rest stays in the stream).
    if let Ok((head, rest)) = smol::block_on(http1::read_head(&mut &data[..], 16 * 1024)) {
        let end = http1::head_end(data).expect("a head was read, so it ended");
        assert!(data[end + 4..].starts_with(&rest));
        assert_eq!(head, String::from_utf8_lossy(&data[..end]));
    }
    let head = String::from_utf8_lossy(data);
    let _ = http1::status(&head);
    let _ = http1::header(&head, "content-length");
    let _ = stream::target(&head);
    if let Some((authority, path)) = stream::target(&head) {
        assert!(!authority.is_empty() && path.starts_with('/'));
    }
    if let Ok(req) = parse_head(&head) {
        let line = head.lines().next().unwrap_or_default();
        let target = line.split(' ').nth(1).unwrap_or_default();
        let (path, query) = target.split_once('?').unwrap_or((target, ""));
        assert_eq!(req.path, reference_decode(path), "path of {line:?}");
        // The first pairs only: query_all reads the whole head again for each.
        for kv in query.split('&').filter(|kv| !kv.is_empty()).take(8) {
            let (k, v) = kv.split_once('=').unwrap_or((kv, ""));
            let key = reference_decode(k);
            let all = query_all(&head, &key);
            assert!(all.contains(&reference_decode(v)), "query_all({key:?}) of {line:?}: {all:?}");
        }
        let ports: Vec<String> = req.query.get("port").into_iter().cloned().collect();
        if let Ok(ports) = stream::ports(&ports) {
            assert!(ports.iter().all(|p| (1..=65535).contains(p)));
        }
    }
});
