//! A SPDY/3.1 client with only what kubectl's streams need, for `atoll exec`, `attach` and
//! `port-forward`: streams opened with a header block, data both ways, a half-close (FIN),
//! a reset, PINGs answered. The peer is the runtime's streaming server (kubelet's streaming
//! library over spdystream, as in containerd and CRI-O), which does no flow control and opens
//! no streams of its own, so neither does this.
//!
//! Header blocks are sent as zlib *stored* blocks: valid zlib that the peer's one shared
//! decompressor reads (a stream header without a preset dictionary first, then per frame
//! one stored block and the empty one a sync flush ends with), so no compressor is linked. The peer's own header blocks are
//! skipped unread: nothing in them is needed. Every frame read is bounded: a control frame
//! above 32 KiB ends the session.

use std::io::{self, Read, Write};
use std::sync::{Arc, Mutex, PoisonError};

/// The exec and attach protocol asked for (exit status in a JSON Status on the error stream).
pub const EXEC_PROTOCOL: &str = "v4.channel.k8s.io";
pub const PORT_FORWARD_PROTOCOL: &str = "portforward.k8s.io";

const VERSION: u16 = 3;
const SYN_STREAM: u16 = 1;
const RST_STREAM: u16 = 3;
const PING: u16 = 6;
const FIN: u8 = 1;
/// RST_STREAM's CANCEL: this side no longer wants the stream.
const CANCEL: u32 = 5;
/// Data goes out in frames of at most this (what kubectl's copies write at a time), and is
/// read in pieces of it.
const MAX_DATA: usize = 32 << 10;
/// The largest control frame read (it must fit the read buffer).
const MAX_CONTROL: usize = MAX_DATA;

/// A SYN_STREAM frame opening stream `id` with `headers`; `first` when it is the session's
/// first header block (it then carries the zlib stream header).
pub fn syn_stream(id: u32, headers: &[(&str, &str)], first: bool) -> Vec<u8> {
    let mut block = Vec::new();
    block.extend_from_slice(&(headers.len() as u32).to_be_bytes());
    for (name, value) in headers {
        for s in [name, value] {
            block.extend_from_slice(&(s.len() as u32).to_be_bytes());
            block.extend_from_slice(s.as_bytes());
        }
    }
    // One stored block (not final), LEN and its complement little-endian; callers' header
    // blocks are a few hundred bytes, far under a stored block's 65,535.
    let len = block.len().min(0xffff) as u16;
    let mut zlib = if first { vec![0x78, 0x01] } else { vec![] };
    zlib.push(0);
    zlib.extend_from_slice(&len.to_le_bytes());
    zlib.extend_from_slice(&(!len).to_le_bytes());
    zlib.extend_from_slice(&block[..usize::from(len)]);
    // An empty stored block ends it, as a sync flush does: Go's inflater hands over what it
    // has at an empty block, and would otherwise read on past the frame for the next one.
    zlib.extend_from_slice(&[0, 0, 0, 0xff, 0xff]);
    // Stream ID, associated-to 0, priority 0 and slot 0, then the block.
    let mut frame = control_head(SYN_STREAM, 0, 10 + zlib.len());
    frame.extend_from_slice(&(id & 0x7fff_ffff).to_be_bytes());
    frame.extend_from_slice(&[0; 6]);
    frame.extend_from_slice(&zlib);
    frame
}

fn control_head(kind: u16, flags: u8, len: usize) -> Vec<u8> {
    let mut head = Vec::with_capacity(8 + len);
    head.extend_from_slice(&(0x8000 | VERSION).to_be_bytes());
    head.extend_from_slice(&kind.to_be_bytes());
    head.extend_from_slice(&(((flags as u32) << 24) | (len as u32 & 0xff_ffff)).to_be_bytes());
    head
}

/// A data frame's 8-byte head.
pub fn data_head(id: u32, fin: bool, len: usize) -> [u8; 8] {
    let mut head = [0u8; 8];
    head[..4].copy_from_slice(&(id & 0x7fff_ffff).to_be_bytes());
    let flags = if fin { FIN } else { 0 };
    head[4..].copy_from_slice(&(((flags as u32) << 24) | (len as u32 & 0xff_ffff)).to_be_bytes());
    head
}

/// A frame's head as read.
#[derive(Debug, PartialEq, Eq)]
enum Head {
    Data { id: u32, fin: bool, len: usize },
    Control { kind: u16, len: usize },
}

fn parse_head(b: [u8; 8]) -> Head {
    let word = u32::from_be_bytes([b[0], b[1], b[2], b[3]]);
    let len = (u32::from_be_bytes([b[4], b[5], b[6], b[7]]) & 0xff_ffff) as usize;
    if word & 0x8000_0000 == 0 {
        Head::Data { id: word, fin: b[4] & FIN != 0, len }
    } else {
        Head::Control { kind: (word & 0xffff) as u16, len }
    }
}

/// Where a stream's incoming data goes.
pub trait Sink: Send {
    /// Bytes the peer sent; an error resets the stream.
    fn data(&mut self, bytes: &[u8]) -> io::Result<()>;
    /// No more data: the peer finished the stream (`clean`), or it was reset or the session ended.
    fn end(&mut self, clean: bool);
}

type Shared = Arc<Mutex<Box<dyn Sink>>>;

/// One upgraded connection's streams. Frames are written whole under one lock, so any thread
/// may send; [`Session::run`] reads.
pub struct Session {
    out: Mutex<Out>,
    /// The open streams' sinks (a handful: a list is smaller than a map).
    sinks: Mutex<Vec<(u32, Shared)>>,
}

struct Out {
    w: Box<dyn Write + Send>,
    next: u32,
    buf: Vec<u8>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Session {
    pub fn new(w: Box<dyn Write + Send>) -> Arc<Session> {
        Arc::new(Session { out: Mutex::new(Out { w, next: 1, buf: Vec::new() }), sinks: Mutex::default() })
    }

    /// Opens a stream with `headers`; what the peer sends on it goes to `sink`.
    pub fn open(&self, headers: &[(&str, &str)], sink: Box<dyn Sink>) -> io::Result<u32> {
        let mut out = lock(&self.out);
        let id = out.next;
        out.next = id.checked_add(2).ok_or_else(|| io::Error::other("out of stream IDs"))?;
        lock(&self.sinks).push((id, Arc::new(Mutex::new(sink))));
        let frame = syn_stream(id, headers, id == 1);
        out.w.write_all(&frame)?;
        out.w.flush()?;
        Ok(id)
    }

    /// Sends `bytes` on stream `id`.
    pub fn send(&self, id: u32, bytes: &[u8]) -> io::Result<()> {
        for chunk in bytes.chunks(MAX_DATA) {
            let mut out = lock(&self.out);
            let Out { w, buf, .. } = &mut *out;
            buf.clear();
            buf.extend_from_slice(&data_head(id, false, chunk.len()));
            buf.extend_from_slice(chunk);
            w.write_all(buf)?;
            w.flush()?;
        }
        Ok(())
    }

    /// Half-closes stream `id`: this side sends nothing more on it.
    pub fn finish(&self, id: u32) -> io::Result<()> {
        let mut out = lock(&self.out);
        out.w.write_all(&data_head(id, true, 0))?;
        out.w.flush()
    }

    fn control(&self, kind: u16, body: &[u8]) -> io::Result<()> {
        let mut frame = control_head(kind, 0, body.len());
        frame.extend_from_slice(body);
        let mut out = lock(&self.out);
        out.w.write_all(&frame)?;
        out.w.flush()
    }

    fn sink(&self, id: u32) -> Option<Shared> {
        lock(&self.sinks).iter().find(|(i, _)| *i == id).map(|(_, s)| s.clone())
    }

    fn end(&self, id: u32, clean: bool) {
        let sink = {
            let mut sinks = lock(&self.sinks);
            let at = sinks.iter().position(|(i, _)| *i == id);
            at.map(|at| sinks.swap_remove(at).1)
        };
        if let Some(sink) = sink {
            lock(&sink).end(clean);
        }
    }

    /// Reads the peer's frames until the connection ends (`Ok`) or breaks the protocol;
    /// every stream still open then ends unclean.
    pub fn run(&self, mut r: impl Read) -> io::Result<()> {
        let result = self.read_frames(&mut r);
        let open: Vec<u32> = lock(&self.sinks).iter().map(|(id, _)| *id).collect();
        for id in open {
            self.end(id, false);
        }
        result
    }

    fn read_frames(&self, r: &mut impl Read) -> io::Result<()> {
        let mut buf = vec![0u8; MAX_DATA];
        loop {
            let mut head = [0u8; 8];
            match r.read_exact(&mut head) {
                Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Ok(()),
                other => other?,
            }
            match parse_head(head) {
                Head::Data { id, fin, mut len } => {
                    let sink = self.sink(id);
                    let mut failed = false;
                    while len > 0 {
                        let n = r.read(&mut buf[..len.min(MAX_DATA)])?;
                        if n == 0 {
                            return Err(io::ErrorKind::UnexpectedEof.into());
                        }
                        len -= n;
                        if let (Some(sink), false) = (&sink, failed) {
                            failed = lock(sink).data(&buf[..n]).is_err();
                        }
                    }
                    if failed {
                        self.end(id, false);
                        let mut body = id.to_be_bytes().to_vec();
                        body.extend_from_slice(&CANCEL.to_be_bytes());
                        self.control(RST_STREAM, &body)?;
                    } else if fin {
                        self.end(id, true);
                    }
                }
                Head::Control { kind, len } => {
                    if len > MAX_CONTROL {
                        return Err(io::Error::other(format!("a control frame of {len} bytes")));
                    }
                    let body = &mut buf[..len];
                    r.read_exact(body)?;
                    let id = || u32::from_be_bytes([body[0], body[1], body[2], body[3]]) & 0x7fff_ffff;
                    match kind {
                        PING if len == 4 => self.control(PING, body)?,
                        RST_STREAM if len >= 4 => self.end(id(), false),
                        // SYN_REPLY with FIN: the peer sends nothing on that stream.
                        2 if len >= 4 && head[4] & FIN != 0 => self.end(id(), true),
                        // Replies, settings, window updates, GOAWAY (the close follows).
                        _ => {}
                    }
                }
            }
        }
    }
}

/// A sink that keeps what arrives, up to a limit (the error stream's message).
pub struct Collect(pub Arc<Mutex<(Vec<u8>, Option<bool>)>>);

impl Sink for Collect {
    fn data(&mut self, bytes: &[u8]) -> io::Result<()> {
        let mut kept = lock(&self.0);
        let room = (64usize << 10).saturating_sub(kept.0.len());
        kept.0.extend_from_slice(&bytes[..bytes.len().min(room)]);
        Ok(())
    }
    fn end(&mut self, clean: bool) {
        lock(&self.0).1 = Some(clean);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_blocks_are_zlib_a_peer_inflates_across_frames() {
        let first = syn_stream(1, &[("streamtype", "error"), ("port", "8080")], true);
        let second = syn_stream(3, &[("streamtype", "data")], false);
        for (frame, id) in [(&first, 1u32), (&second, 3)] {
            assert_eq!(&frame[..4], &[0x80, 3, 0, 1], "control, version 3, SYN_STREAM");
            assert_eq!(parse_head(frame[..8].try_into().unwrap()), Head::Control { kind: 1, len: frame.len() - 8 });
            assert_eq!(u32::from_be_bytes(frame[8..12].try_into().unwrap()), id);
        }
        // One decompressor for the whole session, as the peer keeps it.
        let mut z = flate2::Decompress::new(true);
        let mut blocks = vec![];
        for frame in [&first, &second] {
            let mut out = vec![0u8; 256];
            let before = z.total_out();
            z.decompress(&frame[18..], &mut out, flate2::FlushDecompress::Sync).unwrap();
            out.truncate((z.total_out() - before) as usize);
            blocks.push(out);
        }
        let pairs = |b: &[u8]| {
            let mut at = 4;
            let mut read = || {
                let n = u32::from_be_bytes(b[at..at + 4].try_into().unwrap()) as usize;
                at += 4 + n;
                String::from_utf8(b[at - n..at].to_vec()).unwrap()
            };
            let count = u32::from_be_bytes(b[..4].try_into().unwrap());
            (0..count).map(|_| (read(), read())).collect::<Vec<_>>()
        };
        assert_eq!(pairs(&blocks[0]), [("streamtype".into(), "error".into()), ("port".into(), "8080".into())]);
        assert_eq!(pairs(&blocks[1]), [("streamtype".to_string(), "data".to_string())]);
    }

    struct Probe(Arc<Mutex<(Vec<u8>, Option<bool>)>>, bool);
    impl Sink for Probe {
        fn data(&mut self, bytes: &[u8]) -> io::Result<()> {
            if self.1 {
                return Err(io::ErrorKind::BrokenPipe.into());
            }
            Collect(self.0.clone()).data(bytes)
        }
        fn end(&mut self, clean: bool) {
            Collect(self.0.clone()).end(clean)
        }
    }

    #[derive(Clone, Default)]
    struct Wire(Arc<Mutex<Vec<u8>>>);
    impl Write for Wire {
        fn write(&mut self, b: &[u8]) -> io::Result<usize> {
            lock(&self.0).extend_from_slice(b);
            Ok(b.len())
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn data_reaches_its_stream_pings_are_answered_and_a_failed_sink_is_reset() {
        let wire = Wire::default();
        let s = Session::new(Box::new(wire.clone()));
        let (a, b) = (Arc::new(Mutex::default()), Arc::new(Mutex::default()));
        assert_eq!(s.open(&[("streamtype", "stdout")], Box::new(Probe(a.clone(), false))).unwrap(), 1);
        assert_eq!(s.open(&[("streamtype", "data")], Box::new(Probe(b.clone(), true))).unwrap(), 3);
        s.send(1, &vec![7u8; MAX_DATA + 1]).unwrap();
        s.finish(1).unwrap();
        let sent = lock(&wire.0).clone();
        let syns = syn_stream(1, &[("streamtype", "stdout")], true).len()
            + syn_stream(3, &[("streamtype", "data")], false).len();
        assert_eq!(&sent[syns..syns + 8], &data_head(1, false, MAX_DATA));
        assert_eq!(&sent[sent.len() - 8..], &[0, 0, 0, 1, 1, 0, 0, 0], "an empty FIN frame");
        lock(&wire.0).clear();

        let mut peer = vec![];
        peer.extend_from_slice(&data_head(1, false, 3));
        peer.extend_from_slice(b"abc");
        peer.extend_from_slice(&control_head(PING, 0, 4));
        peer.extend_from_slice(&9u32.to_be_bytes());
        peer.extend_from_slice(&data_head(3, false, 2));
        peer.extend_from_slice(b"xy");
        peer.extend_from_slice(&data_head(99, false, 1)); // no such stream: skipped
        peer.push(b'?');
        peer.extend_from_slice(&data_head(1, true, 1));
        peer.push(b'd');
        s.run(&peer[..]).unwrap();
        assert_eq!(*lock(&a), (b"abcd".to_vec(), Some(true)));
        assert_eq!(*lock(&b), (vec![], Some(false)), "the sink failed: reset");
        let mut want = control_head(PING, 0, 4);
        want.extend_from_slice(&9u32.to_be_bytes());
        want.extend_from_slice(&control_head(RST_STREAM, 0, 8));
        want.extend_from_slice(&[0, 0, 0, 3, 0, 0, 0, 5]);
        assert_eq!(*lock(&wire.0), want);
    }

    #[test]
    fn oversized_or_cut_frames_end_the_session_and_every_stream() {
        let s = Session::new(Box::new(Wire::default()));
        let a = Arc::new(Mutex::default());
        s.open(&[], Box::new(Probe(a.clone(), false))).unwrap();
        let mut largest = control_head(2, 0, MAX_CONTROL);
        largest.resize(8 + MAX_CONTROL, 0);
        let big = control_head(2, 0, MAX_CONTROL + 1);
        assert!(s.run(&[&largest[..], &big[..]].concat()[..]).is_err(), "the largest read, then refused");
        assert_eq!(lock(&a).1, Some(false));
        let s = Session::new(Box::new(Wire::default()));
        let mut cut = data_head(1, false, 10).to_vec();
        cut.extend_from_slice(b"abc");
        assert!(s.run(&cut[..]).is_err());
    }
}
