//! Fuzzes side-loaded image archives (`images::archive`): the compression sniffed from the
//! first bytes and the decoder for it, and the tar reader (headers, GNU long names, pax paths,
//! manifest.json and index.json). Beyond not panicking: the tar read whole and read in
//! pieces of any size says the same.
#![no_main]

use atoll::images::archive::{Compression, TarScan};
use libfuzzer_sys::fuzz_target;
use std::io::Read;

/// The contents, or the error as it reads (the same words whole and in pieces).
fn scan(data: &[u8], piece: usize) -> Result<atoll::images::archive::Contents, String> {
    let mut t = TarScan::default();
    for p in data.chunks(piece.max(1)) {
        t.feed(p).map_err(|e| e.to_string())?;
    }
    t.finish().map_err(|e| e.to_string())
}

fuzz_target!(|data: &[u8]| {
    let Some((&piece, body)) = data.split_first() else { return };
    let c = Compression::sniff(body);
    let _ = c.name();
    let mut plain = Vec::new();
    let _ = c.decoder(body).take(1 << 20).read_to_end(&mut plain);
    assert_eq!(scan(body, body.len()), scan(body, usize::from(piece)), "in pieces of {piece}");
    if !plain.is_empty() && plain != body {
        let _ = scan(&plain, 4096);
    }
});
