//! `atoll port-forward POD [LOCAL:]REMOTE...`: kubectl's, from the box, through the local API
//! socket (root only). One SPDY/3.1 session (`portforward.k8s.io`) to the runtime's streaming
//! server, spliced by the agent; each local connection gets a pair of streams (error, data)
//! for its remote port, as kubectl opens them, and the runtime connects inside the pod's
//! network namespace. Runs until interrupted (exit 0) or the session is lost (exit 1).

use super::error::Error;
use super::exec::{background, on_signals};
use super::local_api::{get_json, pod_path, upgrade};
use super::render::str_of;
use super::spdy::{Session, Sink, PORT_FORWARD_PROTOCOL};
use super::{Flag, Flags};
use serde_json::Value;
use std::io::{self, Read, Write};
use std::net::{IpAddr, Shutdown, TcpListener, TcpStream};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

/// A `[LOCAL:]REMOTE` spec read as kubectl reads it: LOCAL empty or 0 is any free port;
/// REMOTE may name a container port of the pod.
fn forward(spec: &str, pod: &Value) -> Result<(u16, u16), Error> {
    let (local, remote) = match spec.split_once(':') {
        Some((l, r)) => (Some(l), r),
        None => (None, spec),
    };
    let remote = match remote.parse::<u16>() {
        Ok(0) => return Err(format!("remote port must be > 0 in {spec:?}").into()),
        Ok(n) => n,
        Err(_) => named_port(pod, remote).ok_or_else(|| {
            Error::Failed(format!("pod {} does not have a named port {remote:?}", str_of(pod, &["metadata", "name"])))
        })?,
    };
    let local = match local {
        None => remote,
        Some("") => 0,
        Some(l) => l.parse().map_err(|_| Error::Failed(format!("error parsing local port {l:?} in {spec:?}")))?,
    };
    Ok((local, remote))
}

/// The container port of `pod` named `name`.
fn named_port(pod: &Value, name: &str) -> Option<u16> {
    let containers = pod["spec"]["containers"].as_array().into_iter().flatten();
    let ports = containers.flat_map(|c| c["ports"].as_array().into_iter().flatten());
    ports.filter(|p| p["name"] == name).find_map(|p| p["containerPort"].as_u64()).and_then(|n| u16::try_from(n).ok())
}

/// The addresses `--address` names: `localhost` is both loopbacks.
fn addresses(flag: Option<&str>) -> Result<Vec<IpAddr>, Error> {
    let mut out = vec![];
    for a in flag.unwrap_or("localhost").split(',') {
        match a.trim() {
            "localhost" => out.extend([IpAddr::from([127, 0, 0, 1]), IpAddr::from(std::net::Ipv6Addr::LOCALHOST)]),
            ip => out.push(
                ip.parse()
                    .map_err(|_| Error::Failed(format!("--address: {ip:?} is not an IP address or localhost")))?,
            ),
        }
    }
    Ok(out)
}

/// A data stream's bytes go to the local connection; its end half-closes it.
struct ToLocal(TcpStream);

impl Sink for ToLocal {
    fn data(&mut self, bytes: &[u8]) -> io::Result<()> {
        self.0.write_all(bytes)
    }
    fn end(&mut self, _: bool) {
        let _ = self.0.shutdown(Shutdown::Write);
    }
}

/// An error stream: a message from the runtime (it could not connect) is said and the local
/// connection closed.
struct Failure {
    conn: TcpStream,
    what: String,
    message: Vec<u8>,
}

impl Sink for Failure {
    fn data(&mut self, bytes: &[u8]) -> io::Result<()> {
        let room = 4096usize.saturating_sub(self.message.len());
        self.message.extend_from_slice(&bytes[..bytes.len().min(room)]);
        Ok(())
    }
    fn end(&mut self, _: bool) {
        if !self.message.is_empty() {
            eprintln!("an error occurred forwarding {}: {}", self.what, String::from_utf8_lossy(&self.message));
            let _ = self.conn.shutdown(Shutdown::Both);
        }
    }
}

/// One local connection: its pair of streams, and its bytes copied out until it ends.
fn handle(session: &Session, request: u32, mut conn: TcpStream, local: u16, remote: u16) -> io::Result<()> {
    let (port, id) = (remote.to_string(), request.to_string());
    let failure = Failure { conn: conn.try_clone()?, what: format!("{local} -> {remote}"), message: vec![] };
    let error = session.open(&[("streamtype", "error"), ("port", &port), ("requestid", &id)], Box::new(failure))?;
    session.finish(error)?; // nothing is written on it
    let sink = Box::new(ToLocal(conn.try_clone()?));
    let data = session.open(&[("streamtype", "data"), ("port", &port), ("requestid", &id)], sink)?;
    let mut buf = vec![0u8; 32 << 10];
    loop {
        match conn.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => session.send(data, &buf[..n])?,
        }
    }
    session.finish(data)
}

/// `atoll port-forward POD [LOCAL:]REMOTE...` (`args` = the pod, then the specs).
pub fn run(flags: &Flags, args: &[String]) -> Result<u8, Error> {
    let path = pod_path(flags, &args[0]);
    let pod = get_json(flags, "GET", &format!("/pods/{path}"))?;
    let phase = str_of(&pod, &["status", "phase"]);
    if phase != "Running" {
        return Err(format!("unable to forward port because pod is not running. Current status={phase}").into());
    }
    let forwards = args[1..].iter().map(|s| forward(s, &pod)).collect::<Result<Vec<_>, _>>()?;
    let addresses = addresses(flags.get(Flag::Address))?;
    let (reader, writer) = upgrade(flags, &format!("/portForward/{path}"), PORT_FORWARD_PROTOCOL)?;
    let session = Session::new(Box::new(writer));
    let requests = Arc::new(AtomicU32::new(0));
    for (mut local, remote) in forwards {
        let mut bound = 0;
        for ip in &addresses {
            let listener = match TcpListener::bind((*ip, local)) {
                Ok(l) => l,
                Err(e) => {
                    eprintln!("Unable to listen on {ip}:{local}: {e}");
                    continue;
                }
            };
            // A free port chosen for the first address is used for the others too.
            local = listener.local_addr()?.port();
            bound += 1;
            let shown = if ip.is_ipv6() { format!("[{ip}]") } else { ip.to_string() };
            println!("Forwarding from {shown}:{local} -> {remote}");
            let (session, requests) = (session.clone(), requests.clone());
            background(Box::new(move || {
                for conn in listener.incoming().flatten() {
                    println!("Handling connection for {local}");
                    let (session, request) = (session.clone(), requests.fetch_add(1, Ordering::Relaxed));
                    background(Box::new(move || drop(handle(&session, request, conn, local, remote))));
                }
            }));
        }
        if bound == 0 {
            return Err(format!("unable to listen on any of the requested ports: [{local}:{remote}]").into());
        }
    }
    let _ = io::stdout().flush();
    // Interrupted is done; a lost session is a failure.
    on_signals(&[async_signal::Signal::Int, async_signal::Signal::Term], Box::new(|_| std::process::exit(0)));
    session.run(reader).map_err(|source| Error::Session { what: "lost connection to pod", source })?;
    Err(Error::Failed("lost connection to pod".into()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn port_specs_read_as_kubectl_reads_them() {
        let forward = |spec: &str, pod: &Value| super::forward(spec, pod).map_err(|e| e.to_string());
        let pod = serde_json::json!({"metadata": {"name": "web"}, "spec": {"containers": [
            {"name": "a", "ports": [{"name": "http", "containerPort": 8080}]}]}});
        assert_eq!(forward("80", &pod), Ok((80, 80)));
        assert_eq!(forward(":80", &pod), Ok((0, 80)));
        assert_eq!(forward("0:80", &pod), Ok((0, 80)));
        assert_eq!(forward("9000:80", &pod), Ok((9000, 80)));
        assert_eq!(forward("http", &pod), Ok((8080, 8080)));
        assert_eq!(forward("9000:http", &pod), Ok((9000, 8080)));
        assert_eq!(forward("ftp", &pod), Err("pod web does not have a named port \"ftp\"".into()));
        assert!(forward("x:80", &pod).unwrap_err().contains("local port \"x\""));
        assert!(forward("0", &pod).is_err());
        assert_eq!(addresses(None).unwrap().len(), 2);
        assert_eq!(addresses(Some("0.0.0.0,::")).unwrap().len(), 2);
        assert!(addresses(Some("example.org")).is_err());
    }
}
