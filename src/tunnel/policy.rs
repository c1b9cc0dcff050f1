//! The tunnel's decisions, as pure functions: which dial a server may ask for (only atoll's own
//! kubelet server, by any name the node publishes), how the node names itself to the server
//! (`agentIdentifiers`), and how long to wait before the next connection attempt.

use std::time::Duration;

/// Where dials may go: the kubelet server's port, under the names and addresses the node
/// publishes (the API server dials the node's status address).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Destination {
    pub port: u16,
    /// Host names and addresses that mean this node (lower case, IPv6 without brackets).
    pub hosts: Vec<String>,
}

/// Whether a DIAL_REQ for `protocol` and `address` (`host:port`) may be dialled; the reason
/// it may not, for the DIAL_RSP and the log.
pub fn check_dial(to: &Destination, protocol: &str, address: &str) -> Result<(), String> {
    let refused = |why: &str| {
        Err(format!("atoll's tunnel reaches only the node's kubelet server (port {}); {why}: {address:?}", to.port))
    };
    if protocol != "tcp" {
        return refused(&format!("protocol {protocol:?} is not tcp"));
    }
    let Some((host, port)) = address.rsplit_once(':') else { return refused("no port") };
    let host = host.strip_prefix('[').and_then(|h| h.strip_suffix(']')).unwrap_or(host).to_ascii_lowercase();
    if port.parse::<u16>().ok() != Some(to.port) {
        return refused("another port");
    }
    if !to.hosts.contains(&host) {
        return refused("another host");
    }
    Ok(())
}

/// `agentIdentifiers` in the server's query format: `host=NAME&ipv4=IP` (or `ipv6=`), which
/// its `destHost` strategy matches against the host of each dial.
pub fn identifiers(node_name: &str, ips: &[String]) -> String {
    let mut parts = vec![format!("host={}", query_escape(node_name))];
    for ip in ips {
        let kind = if ip.contains(':') { "ipv6" } else { "ipv4" };
        parts.push(format!("{kind}={}", query_escape(ip)));
    }
    parts.join("&")
}

fn query_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => out.push(b as char),
            _ => out.push_str(&format!("%{b:02X}")),
        }
    }
    out
}

/// Exponential back-off between connection attempts: `initial` growing by half each failure
/// up to `cap`, each wait stretched by a random part of up to half of it (`random` in 0..1),
/// so a fleet that lost its server together does not come back in step.
#[derive(Clone, Debug)]
pub struct BackOff {
    initial: Duration,
    cap: Duration,
    next: Duration,
}

impl BackOff {
    pub fn new(initial: Duration, cap: Duration) -> BackOff {
        BackOff { initial, cap: cap.max(initial), next: initial }
    }

    /// The wait after a failed attempt.
    pub fn failed(&mut self, random: f64) -> Duration {
        let base = self.next;
        self.next = base.saturating_add(base / 2).min(self.cap);
        stretch(base, random)
    }

    /// The wait after a good connection (the next server instance, or a reconnect).
    pub fn succeeded(&mut self, random: f64) -> Duration {
        self.next = self.initial;
        stretch(self.initial, random)
    }
}

fn stretch(d: Duration, random: f64) -> Duration {
    d.saturating_add(d.mul_f64(random.clamp(0.0, 1.0) / 2.0))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node() -> Destination {
        Destination { port: 10250, hosts: vec!["edge-7".into(), "198.18.0.2".into(), "fd00::2".into()] }
    }

    #[test]
    fn only_the_kubelet_server_may_be_dialled() {
        let to = node();
        assert_eq!(check_dial(&to, "tcp", "198.18.0.2:10250"), Ok(()));
        assert_eq!(check_dial(&to, "tcp", "EDGE-7:10250"), Ok(()));
        assert_eq!(check_dial(&to, "tcp", "[fd00::2]:10250"), Ok(()));
        for (protocol, address, why) in [
            ("tcp", "198.18.0.2:22", "another port"),
            ("tcp", "127.0.0.1:10250", "another host"),
            ("tcp", "10.0.0.9:10250", "another host"),
            ("tcp", "169.254.169.254:80", "another port"),
            ("udp", "198.18.0.2:10250", "not tcp"),
            ("tcp", "198.18.0.2", "no port"),
            ("tcp", "198.18.0.2:10250x", "another port"),
            ("tcp", "edge-7.evil:10250", "another host"),
        ] {
            let e = check_dial(&to, protocol, address).unwrap_err();
            assert!(e.contains(why) && e.contains("port 10250"), "{address}: {e}");
        }
    }

    #[test]
    fn identifiers_are_the_servers_query_format() {
        assert_eq!(identifiers("edge-7", &["198.18.0.2".into()]), "host=edge-7&ipv4=198.18.0.2");
        assert_eq!(identifiers("a b", &["fd00::2".into()]), "host=a%20b&ipv6=fd00%3A%3A2");
    }

    #[test]
    fn back_off_grows_by_half_to_its_cap_with_jitter_and_resets() {
        let mut b = BackOff::new(Duration::from_secs(1), Duration::from_secs(10));
        let waits: Vec<f64> = (0..8).map(|_| b.failed(0.0).as_secs_f64()).collect();
        assert_eq!(waits, [1.0, 1.5, 2.25, 3.375, 5.0625, 7.59375, 10.0, 10.0]);
        assert_eq!(b.failed(1.0), Duration::from_secs(15), "at most half again");
        assert_eq!(b.succeeded(0.5), Duration::from_millis(1250));
        assert_eq!(b.failed(0.0), Duration::from_secs(1));
        let mut huge = BackOff::new(Duration::MAX, Duration::MAX);
        assert_eq!(huge.failed(1.0), Duration::MAX, "saturates");
    }
}
