//! Fuzzes the SPDY/3.1 frame reader (`cli::spdy::Session::run`), which reads what the
//! runtime's streaming server sends to `atoll exec`, `attach` and `port-forward`: any bytes end
//! the session cleanly or with an error, never a panic, and every stream opened ends exactly
//! once, with no data delivered after its end.
#![no_main]

use atoll::cli::spdy::{Session, Sink};
use libfuzzer_sys::fuzz_target;
use std::io;
use std::sync::{Arc, Mutex};

/// Counts what a stream got: bytes, and how many ends.
struct Count(Arc<Mutex<(usize, u32)>>, bool);

impl Sink for Count {
    fn data(&mut self, bytes: &[u8]) -> io::Result<()> {
        let mut c = self.0.lock().unwrap();
        assert_eq!(c.1, 0, "data after the stream's end");
        c.0 += bytes.len();
        // The second stream refuses data, so the reset path runs.
        if self.1 { Err(io::Error::other("refused")) } else { Ok(()) }
    }
    fn end(&mut self, _clean: bool) {
        self.0.lock().unwrap().1 += 1;
    }
}

fuzz_target!(|data: &[u8]| {
    let session = Session::new(Box::new(io::sink()));
    let counts: Vec<_> = (0..3).map(|_| Arc::new(Mutex::new((0usize, 0u32)))).collect();
    for (i, c) in counts.iter().enumerate() {
        session.open(&[(":path", "/x")], Box::new(Count(c.clone(), i == 1))).expect("open to a sink");
    }
    let _ = session.run(data);
    for c in &counts {
        assert_eq!(c.lock().unwrap().1, 1, "every stream ends once");
    }
});
