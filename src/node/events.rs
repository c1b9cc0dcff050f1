//! Lifecycle events, as kubelet records them (Pulling, Pulled, Created, Started, Killing,
//! BackOff, Unhealthy, Failed, ...): each is one log line and an entry in a bounded ring that
//! the local API serves at `/events` and `atoll describe` shows.
//!
//! Messages often carry what a container printed (an exec probe's output, a hook's stderr),
//! so they are made [`printable`] first: one line, control characters escaped, at most
//! [`MAX_MESSAGE`] bytes. A container cannot forge journal lines or send escape sequences to
//! an operator's terminal.

use serde::Serialize;
use std::collections::VecDeque;
use std::sync::Mutex;
use std::time::SystemTime;

/// How many events the ring keeps (the oldest go first).
pub const CAPACITY: usize = 1000;
/// The longest message kept (kubelet cuts event messages at 1 KiB; probe output at 10 KiB).
pub const MAX_MESSAGE: usize = 4096;

/// `s` as one printable line: newlines, tabs, escape and other control characters written as
/// `\n`, `\t`, `\u{1b}`; cut at `max` bytes (on a character boundary) with `...`.
pub fn printable(s: &str, max: usize) -> String {
    let mut out = String::with_capacity(s.len().min(max));
    for c in s.chars() {
        if out.len() >= max {
            out.push_str("...");
            break;
        }
        match c {
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if c.is_control() => out.push_str(&c.escape_unicode().to_string()),
            c => out.push(c),
        }
    }
    out
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Event {
    /// RFC 3339, seconds.
    pub time: String,
    /// `Normal` or `Warning`.
    #[serde(rename = "type")]
    pub type_: &'static str,
    pub reason: String,
    pub namespace: String,
    pub pod: String,
    pub uid: String,
    pub message: String,
    /// How many times in a row the same event was recorded (kubelet's event aggregation).
    pub count: u32,
}

#[derive(Debug, Default)]
pub struct Events {
    ring: Mutex<VecDeque<Event>>,
    /// A sequence number for every event ever recorded (for metrics).
    total: std::sync::atomic::AtomicU64,
}

impl Events {
    /// Logs `message` for the pod and keeps it. A repeat of the newest event of the same pod,
    /// reason and message bumps its count instead of adding a line to the ring.
    pub fn record(&self, pod: &crate::pod::types::Pod, warning: bool, reason: &str, message: &str) {
        let key = pod.key();
        let message = printable(message, MAX_MESSAGE);
        let message = message.as_str();
        if warning {
            log::warn!("pod {key}: {reason}: {message}");
        } else {
            log::info!("pod {key}: {reason}: {message}");
        }
        self.total.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let event = Event {
            time: crate::rfc3339::format_seconds(SystemTime::now()),
            type_: if warning { "Warning" } else { "Normal" },
            reason: reason.to_string(),
            namespace: pod.metadata.namespace.clone(),
            pod: pod.metadata.name.clone(),
            uid: pod.metadata.uid.clone(),
            message: message.to_string(),
            count: 1,
        };
        let mut ring = crate::locks::lock(&self.ring);
        if let Some(last) = ring
            .iter_mut()
            .rev()
            .find(|e| e.uid == event.uid)
            .filter(|e| e.reason == event.reason && e.message == event.message)
        {
            last.count += 1;
            last.time = event.time;
            return;
        }
        if ring.len() == CAPACITY {
            ring.pop_front();
        }
        ring.push_back(event);
    }

    /// The kept events, oldest first.
    pub fn all(&self) -> Vec<Event> {
        crate::locks::lock(&self.ring).iter().cloned().collect()
    }

    /// How many events were ever recorded.
    pub fn total(&self) -> u64 {
        self.total.load(std::sync::atomic::Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(name: &str) -> crate::pod::types::Pod {
        serde_json::from_value(serde_json::json!({"metadata":{"name":name,"namespace":"ns","uid":format!("u-{name}")},"spec":{"containers":[]}}))
            .unwrap()
    }

    #[test]
    fn repeats_are_counted_and_the_ring_is_bounded() {
        let e = Events::default();
        let a = pod("a");
        e.record(&a, true, "BackOff", "Back-off restarting failed container c");
        e.record(&a, true, "BackOff", "Back-off restarting failed container c");
        e.record(&pod("b"), false, "Started", "Started container c");
        let all = e.all();
        assert_eq!(all.len(), 2);
        assert_eq!((all[0].count, all[0].type_, all[0].namespace.as_str()), (2, "Warning", "ns"));
        assert_eq!(all[1].reason, "Started");
        for i in 0..CAPACITY + 10 {
            e.record(&a, false, "Pulled", &format!("n{i}"));
        }
        let all = e.all();
        assert_eq!(all.len(), CAPACITY);
        assert_eq!(all.last().unwrap().message, format!("n{}", CAPACITY + 9));
        assert_eq!(e.total(), 3 + CAPACITY as u64 + 10);
    }

    #[test]
    fn container_text_cannot_forge_lines_or_escape_sequences() {
        let e = Events::default();
        let output = "boom\nINFO  [atoll] pod default/x: all good\r\u{1b}[2J\u{7}";
        e.record(&pod("a"), true, "Unhealthy", &format!("Liveness probe failed: {output}"));
        let m = &e.all()[0].message;
        assert!(!m.contains('\n') && !m.contains('\u{1b}') && !m.contains('\r'), "{m:?}");
        assert_eq!(m, "Liveness probe failed: boom\\nINFO  [atoll] pod default/x: all good\\r\\u{1b}[2J\\u{7}");
        let long = "x".repeat(100_000);
        assert!(printable(&long, MAX_MESSAGE).len() <= MAX_MESSAGE + 3);
        assert_eq!(printable("héllo\tthere", 100), "héllo\\tthere");
    }
}
