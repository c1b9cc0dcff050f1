//! The list and watch of a collection, as client-go's reflector runs it: a list, then a watch
//! from its resourceVersion, resumed from the last one seen after a break (bookmarks asked
//! for, so an idle watch still moves it), listed again after 410 Gone, ended by the server
//! every 5 to 10 minutes. The node's pods (for the mirror and the API source) and each
//! Secret or ConfigMap the API source's pods need (`needs`) are watched so, each on a thread
//! of its own, into a channel.

use super::apiserver::Client;
use super::retry::{jitter, Retry, JSON};
use serde_json::Value;
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

/// What the watch thread passes on.
pub enum Seen {
    /// A full list (at start and after a 410).
    Listed(Vec<Value>),
    /// A watch event: ADDED, MODIFIED or DELETED, and the pod.
    Event(String, Value),
}

pub fn pods_query(node: &str) -> String {
    format!("/api/v1/pods?fieldSelector=spec.nodeName%3D{node}")
}

/// A watch on a thread of its own: what it sees comes out of `rx`; dropped, the thread ends
/// before its next request, at its next event (a bookmark too) or at the watch's end.
pub struct Watch {
    pub rx: mpsc::Receiver<Seen>,
    _alive: Arc<()>,
}

/// `list` listed and watched on a thread of its own, into a channel of `room` (None: no thread
/// could be started).
pub fn spawn(client: &Arc<Client>, list: String, what: String, room: usize) -> Option<Watch> {
    let (tx, rx) = mpsc::sync_channel(room);
    let client = client.clone();
    let alive = Arc::new(());
    let wanted = Arc::downgrade(&alive);
    let name = "atoll-watch".to_string();
    let run = move || watch_list(&client, &list, &what, &tx, &|| wanted.strong_count() > 0);
    std::thread::Builder::new().name(name).spawn(run).ok()?;
    Some(Watch { rx, _alive: alive })
}

/// Lists and watches the node's pods into `tx`, forever (returns when `tx` is closed).
pub fn watch_loop(client: &Client, node: &str, tx: &mpsc::SyncSender<Seen>) {
    watch_list(client, &pods_query(node), "the node's pods", tx, &|| true)
}

/// Lists and watches `list` (a collection path with its field selector) into `tx`, forever:
/// resumed from the last resourceVersion after a break, listed again after a 410, bookmarks
/// asked for. Returns when `tx` is closed (at the next event or the watch's end), or once
/// `wanted` says no (checked before each request and at each event).
pub fn watch_list(client: &Client, list: &str, what: &str, tx: &mpsc::SyncSender<Seen>, wanted: &dyn Fn() -> bool) {
    let mut backoff = Retry::default();
    let mut rv: Option<String> = None;
    while wanted() {
        if let Some(u) = backoff.until {
            std::thread::sleep(u.saturating_duration_since(Instant::now()));
        }
        let Some(from) = rv.clone() else {
            match client.call("GET", list, JSON, None) {
                Ok(r) if r.status == 200 => {
                    rv = r.body["metadata"]["resourceVersion"].as_str().map(String::from);
                    let items = r.body["items"].as_array().cloned().unwrap_or_default();
                    if tx.send(Seen::Listed(items)).is_err() {
                        return;
                    }
                    backoff.ok();
                }
                Ok(r) => {
                    let wait = backoff.fail(r.retry_after);
                    log::warn!("API server: listing {what}: {}; retrying in {wait:.1?}", r.describe());
                }
                Err(e) => {
                    let wait = backoff.fail(None);
                    log::debug!("API server: {e}; retrying in {wait:.1?}");
                }
            }
            continue;
        };
        // The server ends each watch after 5 to 10 minutes, as client-go's reflector asks.
        let timeout = Duration::from_secs(300) + jitter(Duration::from_secs(600)) - Duration::from_secs(300);
        let path = format!(
            "{}&watch=true&allowWatchBookmarks=true&resourceVersion={from}&timeoutSeconds={}",
            list,
            timeout.as_secs()
        );
        let mut gone = false;
        let mut closed = false;
        let mut events = 0usize;
        let began = Instant::now();
        let result = client.watch(&path, timeout, &mut |event| {
            events += 1;
            let kind = event["type"].as_str().unwrap_or_default().to_string();
            let obj = event["object"].clone();
            if kind == "ERROR" {
                gone = obj["code"] == 410;
                return false;
            }
            if let Some(v) = obj["metadata"]["resourceVersion"].as_str() {
                rv = Some(v.to_string());
            }
            if kind == "BOOKMARK" {
                closed = !wanted();
                return !closed;
            }
            if !wanted() || tx.send(Seen::Event(kind, obj)).is_err() {
                closed = true;
                return false;
            }
            true
        });
        if closed {
            return;
        }
        match result {
            // A watch ended at once with nothing in it (a proxy cutting streams): not a
            // reason to ask again at once.
            Ok(None) if !gone && events == 0 && began.elapsed() < Duration::from_secs(1) => {
                let wait = backoff.fail(None);
                log::warn!("API server: the watch of {what} ended at once; watching again in {wait:.1?}");
            }
            Ok(None) if !gone => backoff.ok(),
            Ok(None) => rv = None,
            Ok(Some(r)) if r.status == 410 => rv = None,
            Ok(Some(r)) => {
                let wait = backoff.fail(r.retry_after);
                log::warn!("API server: watching {what}: {}; retrying in {wait:.1?}", r.describe());
            }
            Err(e) => {
                let wait = backoff.fail(None);
                log::debug!("API server: {e}; retrying in {wait:.1?}");
            }
        }
    }
}
