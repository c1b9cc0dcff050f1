//! systemd's notify protocol (sd_notify), without libsystemd: datagrams to `$NOTIFY_SOCKET`
//! (a path, or `@name` in the abstract namespace). `READY=1` after the first full sync,
//! `WATCHDOG=1` from the main loop every half `$WATCHDOG_USEC` while the sync loop is healthy,
//! `STOPPING=1` on the way out. Without `$NOTIFY_SOCKET` every call does nothing.

use std::time::Duration;

/// Where to send, from the environment (read once at start).
#[derive(Clone, Debug, Default)]
pub struct Notifier {
    socket: Option<String>,
    watchdog: Option<Duration>,
}

impl Notifier {
    pub fn from_env() -> Notifier {
        let socket = std::env::var("NOTIFY_SOCKET").ok().filter(|s| !s.is_empty());
        let pid_ok = std::env::var("WATCHDOG_PID").ok().is_none_or(|p| p.trim() == std::process::id().to_string());
        let watchdog = std::env::var("WATCHDOG_USEC")
            .ok()
            .and_then(|u| u.trim().parse::<u64>().ok())
            .filter(|u| *u > 0 && pid_ok)
            .map(Duration::from_micros);
        Notifier { socket, watchdog }
    }

    /// How often to ping the watchdog (half its timeout, as systemd advises), if it is on.
    pub fn watchdog_interval(&self) -> Option<Duration> {
        self.watchdog.map(|w| w / 2)
    }

    /// Sends one state message; errors are logged once at debug level (no systemd is fine).
    pub fn send(&self, state: &str) {
        let Some(path) = &self.socket else { return };
        if let Err(e) = send_to(path, state) {
            log::debug!("sd_notify to {path}: {e}");
        }
    }
}

fn send_to(path: &str, state: &str) -> std::io::Result<()> {
    let sock = std::os::unix::net::UnixDatagram::unbound()?;
    // Never block the main loop on a receiver that is not reading: a full queue drops the
    // message (the next ping comes soon).
    sock.set_nonblocking(true)?;
    if let Some(name) = path.strip_prefix('@') {
        use std::os::linux::net::SocketAddrExt;
        let addr = std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes())?;
        sock.send_to_addr(state.as_bytes(), &addr)?;
    } else {
        sock.send_to(state.as_bytes(), path)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_reach_a_path_socket() {
        let dir = crate::testdir::TestDir::new("notify");
        let path = dir.join("notify.sock");
        let _ = std::fs::remove_file(&path);
        let rx = std::os::unix::net::UnixDatagram::bind(&path).unwrap();
        let n = Notifier { socket: Some(path.to_string_lossy().into_owned()), watchdog: Some(Duration::from_secs(10)) };
        n.send("READY=1");
        let mut buf = [0u8; 64];
        let len = rx.recv(&mut buf).unwrap();
        assert_eq!(&buf[..len], b"READY=1");
        assert_eq!(n.watchdog_interval(), Some(Duration::from_secs(5)));
        Notifier::default().send("READY=1"); // no socket: nothing happens
                                             // A receiver that never reads: sends fail fast instead of blocking.
        let started = std::time::Instant::now();
        for _ in 0..1000 {
            n.send("WATCHDOG=1");
        }
        assert!(started.elapsed() < Duration::from_secs(2));
    }
}
