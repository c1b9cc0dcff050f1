//! A client of kubelet's HTTPS server, as the API server and metrics-server are: TLS that
//! checks the node's certificate for 127.0.0.1, a client certificate or a bearer token, plain
//! requests, and WebSocket sessions (`v4.channel.k8s.io`, which the runtime's streaming server
//! speaks) read frame by frame.

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use std::io::{Read, Write};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

/// A TLS connection to the node.
pub type Tls = rustls::StreamOwned<rustls::ClientConnection, std::net::TcpStream>;

/// Who the test client is.
pub enum As<'a> {
    Nobody,
    Token(&'a str),
    /// A client certificate and its key (PEM files), such as the test Pki's.
    Certificate(&'a Path, &'a Path),
}

/// A TLS connection to the node as `who`, verifying its certificate for 127.0.0.1 (reads
/// time out after 30 s).
pub fn connect(port: u16, ca: &Path, who: &As) -> Option<Tls> {
    over(std::net::TcpStream::connect(("127.0.0.1", port)).ok()?, ca, who)
}

/// TLS to the node on `tcp` (dialled, or a tunnel's), as `connect`.
pub fn over(tcp: std::net::TcpStream, ca: &Path, who: &As) -> Option<Tls> {
    let conn = rustls::ClientConnection::new(client_config(ca, who)?, ServerName::try_from("127.0.0.1").ok()?).ok()?;
    tcp.set_read_timeout(Some(Duration::from_secs(30))).ok()?;
    Some(rustls::StreamOwned::new(conn, tcp))
}

/// The client's TLS: the node's CA, and `who`'s certificate if it has one.
pub fn client_config(ca: &Path, who: &As) -> Option<Arc<rustls::ClientConfig>> {
    let mut roots = rustls::RootCertStore::empty();
    for c in CertificateDer::pem_file_iter(ca).ok()? {
        roots.add(c.ok()?).ok()?;
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .ok()?
        .with_root_certificates(roots);
    let config = match who {
        As::Certificate(cert, key) => {
            let chain = CertificateDer::pem_file_iter(cert).ok()?.filter_map(Result::ok).collect();
            builder.with_client_auth_cert(chain, PrivateKeyDer::from_pem_file(key).ok()?).ok()?
        }
        _ => builder.with_no_client_auth(),
    };
    Some(Arc::new(config))
}

/// One HTTPS request to the node: status and body.
pub fn request(port: u16, ca: &Path, who: &As, method: &str, path: &str) -> Option<(u16, String)> {
    let mut tls = connect(port, ca, who)?;
    tls.sock.set_read_timeout(Some(Duration::from_secs(20))).ok()?;
    let auth = match who {
        As::Token(t) => format!("Authorization: Bearer {t}\r\n"),
        _ => String::new(),
    };
    write!(tls, "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n{auth}Connection: close\r\n\r\n").ok()?;
    let mut raw = Vec::new();
    let _ = tls.read_to_end(&mut raw); // the server closes without close_notify on some paths
    let text = String::from_utf8_lossy(&raw).into_owned();
    let (head, body) = text.split_once("\r\n\r\n")?;
    let status = head.split(' ').nth(1)?.parse().ok()?;
    Some((status, body.to_string()))
}

/// Opens a WebSocket session (`v4.channel.k8s.io`) at `path` on `tls` with `token`: the
/// upgrade's status.
pub fn ws_open(tls: &mut Tls, port: u16, token: &str, path: &str) -> Option<u16> {
    ws_upgrade(tls, &format!("127.0.0.1:{port}"), &format!("Authorization: Bearer {token}\r\n"), path)
}

/// Asks for a WebSocket session (`v4.channel.k8s.io`) at `path` on any connection (the local
/// API's unix socket too), with `extra` header lines: the upgrade's status.
pub fn ws_upgrade<S: Read + Write>(s: &mut S, host: &str, extra: &str, path: &str) -> Option<u16> {
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: {host}\r\n{extra}Connection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Protocol: v4.channel.k8s.io\r\n\r\n"
    )
    .ok()?;
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        s.read_exact(&mut byte).ok()?;
        head.push(byte[0]);
    }
    String::from_utf8_lossy(&head).split(' ').nth(1)?.parse().ok()
}

/// Every frame of a session until the server closes: what arrived on each channel (1
/// stdout, 2 stderr, 3 the exit status).
pub fn ws_channels(r: &mut impl Read) -> std::collections::BTreeMap<u8, Vec<u8>> {
    let mut channels = std::collections::BTreeMap::new();
    while let Some((opcode, payload)) = ws_frame(r) {
        match opcode {
            8 => break,
            1 | 2 if !payload.is_empty() => {
                channels.entry(payload[0]).or_insert_with(Vec::new).extend_from_slice(&payload[1..]);
            }
            _ => {}
        }
    }
    channels
}

/// The next WebSocket frame: its opcode and payload; none when the connection ended.
pub fn ws_frame(r: &mut impl Read) -> Option<(u8, Vec<u8>)> {
    let mut h = [0u8; 2];
    r.read_exact(&mut h).ok()?;
    let len = match h[1] & 0x7f {
        126 => {
            let mut l = [0u8; 2];
            r.read_exact(&mut l).ok()?;
            u64::from(u16::from_be_bytes(l))
        }
        127 => {
            let mut l = [0u8; 8];
            r.read_exact(&mut l).ok()?;
            u64::from_be_bytes(l)
        }
        n => u64::from(n),
    };
    let mut payload = vec![0u8; usize::try_from(len).ok()?];
    r.read_exact(&mut payload).ok()?;
    Some((h[0] & 0x0f, payload))
}

/// Waits for the first stdout frame of an open exec session.
pub fn first_output(r: &mut impl Read) -> bool {
    while let Some((opcode, payload)) = ws_frame(r) {
        match opcode {
            8 => return false,
            1 | 2 if payload.len() > 1 && payload[0] == 1 => return true,
            _ => {}
        }
    }
    false
}

/// An exec or attach over WebSocket, through the node: the upgrade's status, and what
/// arrived on each channel (1 stdout, 2 stderr, 3 the exit status) until the server closed.
pub fn ws_session(
    port: u16,
    ca: &Path,
    token: &str,
    path: &str,
) -> Option<(u16, std::collections::BTreeMap<u8, Vec<u8>>)> {
    let mut tls = connect(port, ca, &As::Token(token))?;
    let status = ws_open(&mut tls, port, token, path)?;
    if status != 101 {
        return Some((status, Default::default()));
    }
    Some((status, ws_channels(&mut tls)))
}
