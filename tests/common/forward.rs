//! A port-forward client for benchmarks: atoll's own SPDY client (`atoll port-forward`'s) on
//! any connection (the agent's socket, the runtime's streaming server, TLS to the node),
//! fetching a pod's `/blob` and timing it to the last byte.

use std::io::{Read, Write};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Reads an upgrade's answer head, byte by byte so nothing after it is taken, and insists on
/// `101 Switching Protocols`.
pub fn switched(r: &mut impl Read) {
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        r.read_exact(&mut byte).unwrap();
        head.push(byte[0]);
    }
    assert!(head.starts_with(b"HTTP/1.1 101"), "{}", String::from_utf8_lossy(&head));
}

/// Counts a forwarded stream's bytes, notes when the last came, and says when it ends.
struct Count(Arc<AtomicU64>, Arc<std::sync::Mutex<Instant>>, std::sync::mpsc::Sender<()>);

impl atoll::cli::spdy::Sink for Count {
    fn data(&mut self, bytes: &[u8]) -> std::io::Result<()> {
        self.0.fetch_add(bytes.len() as u64, Ordering::Relaxed);
        *self.1.lock().unwrap() = Instant::now();
        Ok(())
    }
    fn end(&mut self, _: bool) {
        let _ = self.2.send(());
    }
}

/// GET /blob over a port-forward session on `conn` (upgraded at `path` of `host`, with `extra`
/// header lines): the bytes
/// that came back (head and body) and how long from the upgrade to the last of them (the
/// runtime ends the streams about a second later, whichever way it was reached).
pub fn forwarded_get<R: Read + Send + 'static, W: Write + Send + 'static>(
    mut conn: R,
    mut writer: W,
    close: impl FnOnce(),
    host: &str,
    path: &str,
    extra: &str,
) -> (u64, Duration) {
    let started = Instant::now();
    write!(writer, "POST {path} HTTP/1.1\r\nHost: {host}\r\n{extra}Connection: Upgrade\r\nUpgrade: SPDY/3.1\r\nX-Stream-Protocol-Version: portforward.k8s.io\r\nContent-Length: 0\r\n\r\n").unwrap();
    switched(&mut conn);
    let session = atoll::cli::spdy::Session::new(Box::new(writer));
    let reader = {
        let session = session.clone();
        std::thread::spawn(move || session.run(conn))
    };
    let (bytes, last, (done, ended)) =
        (Arc::new(AtomicU64::new(0)), Arc::new(std::sync::Mutex::new(started)), std::sync::mpsc::channel());
    let pair = |kind| [("streamtype", kind), ("port", "8080"), ("requestid", "0")];
    let error =
        session.open(&pair("error"), Box::new(Count(Arc::default(), Arc::new(started.into()), done.clone()))).unwrap();
    session.finish(error).unwrap();
    let data = session.open(&pair("data"), Box::new(Count(bytes.clone(), last.clone(), done))).unwrap();
    session.send(data, b"GET /blob HTTP/1.0\r\n\r\n").unwrap();
    ended.recv().unwrap();
    ended.recv().unwrap();
    let took = last.lock().unwrap().duration_since(started);
    close();
    let _ = reader.join();
    (bytes.load(Ordering::Relaxed), took)
}
