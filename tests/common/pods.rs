//! Pods more than one test runs (busybox from the test bed's offline image).

/// Serves a 100 MiB file of random bytes as `/blob` on port 8080 of the pod's own network.
pub const FILES: &str = "apiVersion: v1\nkind: Pod\nmetadata: {name: files}\nspec:\n  terminationGracePeriodSeconds: 1\n  containers:\n  - name: httpd\n    image: docker.io/library/busybox:1.36\n    command: [sh, -c, 'mkdir -p /www && head -c 104857600 /dev/urandom > /www/part && mv /www/part /www/blob && exec httpd -f -p 8080 -h /www']\n";
/// Answers each line of its stdin (attach); stdinOnce: it ends when the session closes stdin.
pub const READER: &str = "apiVersion: v1\nkind: Pod\nmetadata: {name: reader}\nspec:\n  restartPolicy: Never\n  containers:\n  - name: c\n    image: docker.io/library/busybox:1.36\n    stdin: true\n    stdinOnce: true\n    command: [sh, -c, 'while read l; do echo got $l; done']\n";

/// The local port in a port-forward's first line ("Forwarding from 127.0.0.1:41235 -> 8080"),
/// kubectl's or atoll's.
pub fn forwarded_port(line: &str) -> u16 {
    let port = line.split("127.0.0.1:").nth(1).and_then(|r| r.split(' ').next()).and_then(|p| p.parse().ok());
    port.unwrap_or_else(|| panic!("port-forward said {line:?}"))
}

/// The body of an HTTP/1.0 GET of `path` on 127.0.0.1:`port`, read to the end (panics on an
/// error or an answer without a head).
pub fn http_get(port: u16, path: &str) -> Vec<u8> {
    use std::io::{Read, Write};
    let mut tcp = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    tcp.set_read_timeout(Some(std::time::Duration::from_secs(60))).unwrap();
    let _ = write!(tcp, "GET {path} HTTP/1.0\r\n\r\n");
    let mut raw = Vec::new();
    let read = tcp.read_to_end(&mut raw);
    assert!(read.is_ok(), "{read:?} after {} bytes", raw.len());
    let body_at = raw.windows(4).position(|w| w == b"\r\n\r\n").expect("an HTTP answer") + 4;
    raw.split_off(body_at)
}

pub fn sha256_hex(bytes: &[u8]) -> String {
    ring::digest::digest(&ring::digest::SHA256, bytes).as_ref().iter().map(|b| format!("{b:02x}")).collect()
}
