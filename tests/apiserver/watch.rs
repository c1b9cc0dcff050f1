//! Watches: the events a watch from a resourceVersion sends, over HTTP/1.1 chunks here or
//! HTTP/2 DATA frames (`h2`), with 410 Gone for a compacted resourceVersion, and bookmarks
//! when asked for, as kube-apiserver's watch cache sends them (cacher's `nextBookmarkTime`):
//! about every minute, and 2 s before the watch's deadline (none when that has passed); each
//! an empty object of the kind with only the current resourceVersion, sent only when that
//! moves the watch on (as the cache watcher drops one that would not).

use super::*;

/// Where a watch's events go: HTTP/1.1 chunks, or HTTP/2 DATA (`h2`).
pub(super) trait Events {
    /// Sends one event; the bytes its encoding took.
    fn event(&mut self, event: Value) -> std::io::Result<usize>;
    /// The end of the answer (the watch ran its course, or ended in an ERROR event).
    fn end(&mut self) -> std::io::Result<()>;
}

/// A watch's answer over HTTP/1.1: one chunk per event.
pub(super) struct Chunked<'a, W: Write>(&'a mut W);

impl<'a, W: Write> Chunked<'a, W> {
    pub(super) fn start(w: &'a mut W) -> std::io::Result<Self> {
        let mut head = "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n".to_string();
        for (k, v) in answer_headers("application/json", None, None) {
            head.push_str(&format!("{k}: {v}\r\n"));
        }
        head.push_str("\r\n");
        w.write_all(head.as_bytes())?;
        Ok(Chunked(w))
    }
}

impl<W: Write> Events for Chunked<'_, W> {
    fn event(&mut self, event: Value) -> std::io::Result<usize> {
        let mut line = serde_json::to_vec(&event).unwrap();
        line.push(b'\n');
        write!(self.0, "{:x}\r\n", line.len())?;
        self.0.write_all(&line)?;
        self.0.write_all(b"\r\n")?;
        self.0.flush().map(|_| line.len())
    }

    fn end(&mut self) -> std::io::Result<()> {
        self.0.write_all(b"0\r\n\r\n")?;
        self.0.flush()
    }
}

/// A bookmark of `resource` at `rv`: the kind's empty object, as the watch cache makes it
/// (`newFunc()` with the resourceVersion set), encoded as k8s.io/api encodes an empty one.
fn bookmark(resource: &str, rv: u64) -> Value {
    let (kind, api_version) = kind_of(resource);
    let mut object = json!({"kind": kind, "apiVersion": api_version, "metadata": {"resourceVersion": rv.to_string()}});
    if resource == "pods" {
        object["spec"] = json!({"containers": null});
        object["status"] = json!({});
    }
    json!({"type": "BOOKMARK", "object": object})
}

/// Streams a watch into `w` until it times out; false when the server went down.
pub(super) fn stream_watch(state: &State, w: &mut dyn Events, asked: &WatchAsked) -> std::io::Result<bool> {
    let WatchAsked { resource, ref selector, from, timeout, bookmarks } = *asked;
    let every = state.faults.lock().unwrap().bookmark_every.unwrap_or(Duration::from_secs(60));
    let mut store = state.store.lock().unwrap();
    let mut seen = match from {
        Some(rv) if rv < store.compacted => {
            let gone = status_obj(410, "Expired", &format!("too old resource version: {rv} ({})", store.compacted));
            drop(store);
            w.event(json!({"type": "ERROR", "object": gone}))?;
            return w.end().map(|_| true);
        }
        Some(rv) => rv,
        None => {
            // No resourceVersion: the current state as ADDED events first.
            let current: Vec<Value> = store
                .objects
                .iter()
                .filter(|(k, v)| k.0 == resource && matches(v, &selector[..]))
                .map(|(_, v)| v.clone())
                .collect();
            let rv = store.rv;
            drop(store);
            for obj in current {
                let n = w.event(json!({"type": "ADDED", "object": obj}))?;
                state.watch_bytes.fetch_add(n as u64, Ordering::Relaxed);
            }
            store = state.store.lock().unwrap();
            rv
        }
    };
    let end = Instant::now() + timeout;
    // The next bookmark: a minute on, or 2 s before the end if sooner; none once that is past.
    let next_bookmark = |now: Instant| {
        let before_end = end.checked_sub(Duration::from_secs(2)).filter(|t| *t > now).unwrap_or(end);
        (now + every).min(before_end)
    };
    let mut bookmark_at = next_bookmark(Instant::now());
    // The resourceVersion the client has been told (an event's or a bookmark's): a bookmark
    // that would not move it is not sent (the cache watcher drops it).
    let mut told = seen;
    loop {
        if !state.up.load(Ordering::SeqCst) {
            return Ok(false);
        }
        let now = Instant::now();
        if now >= end {
            drop(store);
            return w.end().map(|_| true);
        }
        if bookmarks && now >= bookmark_at {
            // After the one before the deadline, none more.
            bookmark_at = if bookmark_at + Duration::from_secs(2) >= end { end } else { next_bookmark(now) };
            if seen > told {
                // At what this watch has sent, never past events it has not.
                let event = bookmark(resource, seen);
                told = seen;
                drop(store);
                let n = w.event(event)?;
                state.watch_bytes.fetch_add(n as u64, Ordering::Relaxed);
                state.bookmarks.fetch_add(1, Ordering::Relaxed);
                store = state.store.lock().unwrap();
            }
            continue;
        }
        if state.faults.lock().unwrap().watches_held {
            store = state.changed(resource).wait_timeout(store, Duration::from_millis(200)).unwrap().0;
            continue;
        }
        // From the newest back to the last seen: a wake costs what is new, not the history.
        let mut batch: Vec<(u64, Value)> = store
            .events
            .iter()
            .rev()
            .take_while(|e| e.rv > seen)
            .filter(|e| e.resource == resource && matches(&e.object, &selector[..]))
            .map(|e| (e.rv, json!({"type": e.kind, "object": e.object})))
            .collect();
        batch.reverse();
        seen = store.rv;
        if batch.is_empty() {
            store = state.changed(resource).wait_timeout(store, Duration::from_millis(200)).unwrap().0;
            continue;
        }
        drop(store);
        for (rv, e) in batch {
            told = told.max(rv);
            let n = w.event(e)?;
            state.watch_bytes.fetch_add(n as u64, Ordering::Relaxed);
        }
        store = state.store.lock().unwrap();
    }
}
