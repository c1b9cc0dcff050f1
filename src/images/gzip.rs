//! Gzip (RFC 1952) members one after another, read as one stream, as `zcat` reads what
//! `gzip` and `pigz` write: each member's header checked, its deflate data inflated by
//! flate2's raw inflater, its CRC-32 and length checked at its end.
//!
//! Written here rather than taken from flate2's gzip reader so the CRC is a 4 KiB table:
//! flate2's brings crc32fast, whose tables cost 25 KB of the binary.

use std::io::{BufRead, Read};

/// CRC-32 (IEEE, reflected), four bytes a step (slice-by-4).
const TABLES: [[u32; 256]; 4] = {
    let mut t = [[0u32; 256]; 4];
    let mut i = 0;
    while i < 256 {
        let mut c = i as u32;
        let mut k = 0;
        while k < 8 {
            c = if c & 1 != 0 { 0xEDB8_8320 ^ (c >> 1) } else { c >> 1 };
            k += 1;
        }
        t[0][i] = c;
        i += 1;
    }
    let mut i = 0;
    while i < 256 {
        let mut s = 1;
        while s < 4 {
            let prev = t[s - 1][i];
            t[s][i] = (prev >> 8) ^ t[0][(prev & 0xff) as usize];
            s += 1;
        }
        i += 1;
    }
    t
};

/// The CRC-32 of `data` continuing from `crc` (0 to start).
pub fn crc32(crc: u32, data: &[u8]) -> u32 {
    let mut c = !crc;
    let mut chunks = data.chunks_exact(4);
    for w in &mut chunks {
        c ^= u32::from_le_bytes([w[0], w[1], w[2], w[3]]);
        c = TABLES[3][(c & 0xff) as usize]
            ^ TABLES[2][((c >> 8) & 0xff) as usize]
            ^ TABLES[1][((c >> 16) & 0xff) as usize]
            ^ TABLES[0][(c >> 24) as usize];
    }
    for b in chunks.remainder() {
        c = TABLES[0][((c ^ u32::from(*b)) & 0xff) as usize] ^ (c >> 8);
    }
    !c
}

/// The longest file name or comment a header may carry.
const MAX_HEADER_TEXT: usize = 64 << 10;

fn invalid(what: &str) -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::InvalidData, format!("gzip: {what}"))
}

fn byte<R: BufRead>(r: &mut R) -> std::io::Result<u8> {
    let mut b = [0u8; 1];
    r.read_exact(&mut b)?;
    Ok(b[0])
}

/// Reads one member's header (the magic already known to be next).
fn header<R: BufRead>(r: &mut R) -> std::io::Result<()> {
    let mut fixed = [0u8; 10];
    r.read_exact(&mut fixed)?;
    if fixed[..3] != [0x1f, 0x8b, 8] {
        return Err(invalid("not a gzip member (or not deflate)"));
    }
    let flags = fixed[3];
    if flags & 0xe0 != 0 {
        return Err(invalid("reserved header flags set"));
    }
    if flags & 4 != 0 {
        let len = u16::from_le_bytes([byte(r)?, byte(r)?]);
        std::io::copy(&mut r.by_ref().take(u64::from(len)), &mut std::io::sink())?;
    }
    for text in [8u8, 16] {
        if flags & text != 0 {
            let mut n = 0;
            while byte(r)? != 0 {
                n += 1;
                if n > MAX_HEADER_TEXT {
                    return Err(invalid("a header name or comment too long"));
                }
            }
        }
    }
    if flags & 2 != 0 {
        byte(r)?;
        byte(r)?;
    }
    Ok(())
}

enum State<R: BufRead> {
    /// Before a member (or at the end of the stream).
    Between(R),
    InMember(flate2::bufread::DeflateDecoder<R>, u32, u32),
    Failed,
}

/// Every member of a gzip stream, as one stream.
pub struct Members<R: BufRead> {
    state: State<R>,
    /// Whether a member has been read (an empty stream is no gzip).
    any: bool,
}

impl<R: BufRead> Members<R> {
    pub fn new(r: R) -> Self {
        Members { state: State::Between(r), any: false }
    }
}

impl<R: BufRead> Read for Members<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        if buf.is_empty() {
            return Ok(0);
        }
        loop {
            match std::mem::replace(&mut self.state, State::Failed) {
                State::Between(mut r) => {
                    if self.any && r.fill_buf()?.is_empty() {
                        self.state = State::Between(r);
                        return Ok(0);
                    }
                    header(&mut r)?;
                    self.any = true;
                    self.state = State::InMember(flate2::bufread::DeflateDecoder::new(r), 0, 0);
                }
                State::InMember(mut d, crc, len) => {
                    let n = d.read(buf)?;
                    if n > 0 {
                        self.state = State::InMember(d, crc32(crc, &buf[..n]), len.wrapping_add(n as u32));
                        return Ok(n);
                    }
                    let mut r = d.into_inner();
                    let mut trailer = [0u8; 8];
                    r.read_exact(&mut trailer).map_err(|_| invalid("a member ends without its CRC and length"))?;
                    if u32::from_le_bytes([trailer[0], trailer[1], trailer[2], trailer[3]]) != crc {
                        return Err(invalid("CRC mismatch"));
                    }
                    if u32::from_le_bytes([trailer[4], trailer[5], trailer[6], trailer[7]]) != len {
                        return Err(invalid("length mismatch"));
                    }
                    self.state = State::Between(r);
                }
                State::Failed => return Err(invalid("the stream failed earlier")),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn gz(data: &[u8]) -> Vec<u8> {
        let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        e.write_all(data).unwrap();
        e.finish().unwrap()
    }

    fn read_all(bytes: &[u8]) -> std::io::Result<Vec<u8>> {
        let mut out = Vec::new();
        Members::new(std::io::BufReader::new(bytes)).read_to_end(&mut out)?;
        Ok(out)
    }

    #[test]
    fn crc32_matches_the_standard_check_value() {
        assert_eq!(crc32(0, b"123456789"), 0xCBF4_3926);
        assert_eq!(crc32(crc32(0, b"12345"), b"6789"), 0xCBF4_3926);
        assert_eq!(crc32(0, b""), 0);
    }

    #[test]
    fn members_read_as_one_stream_and_damage_is_an_error() {
        let data: Vec<u8> = (0..300_000u32).map(|i| (i * 7 % 251) as u8).collect();
        let mut two = gz(&data[..100_000]);
        two.extend(gz(&data[100_000..]));
        assert_eq!(read_all(&two).unwrap(), data);
        // A header with a name, a comment and extra fields (as `gzip -N` and others write).
        let plain = gz(b"hello");
        let mut named = vec![0x1f, 0x8b, 8, 4 | 8 | 16, 0, 0, 0, 0, 0, 3, 2, 0, b'x', b'y'];
        named.extend(b"name\0comment\0");
        named.extend(&plain[10..]);
        assert_eq!(read_all(&named).unwrap(), b"hello");
        // A flipped bit in the data or the trailer, a cut, junk after a member.
        let mut bad = gz(&data);
        let at = bad.len() - 6;
        bad[at] ^= 1;
        assert!(read_all(&bad).is_err());
        let whole = gz(&data);
        assert!(read_all(&whole[..whole.len() - 3]).is_err());
        let mut junk = gz(b"a");
        junk.extend(b"not gzip");
        assert!(read_all(&junk).is_err());
        assert!(read_all(&[0x1f, 0x8b, 8, 0x20, 0, 0, 0, 0, 0, 3]).is_err(), "reserved flags");
    }
}
