//! kubelet's HTTPS server against its floors, on the private test bed, in one run:
//! - **logs**: a container's 1 GiB log read through `/containerLogs` against the same file sent
//!   raw by a minimal server in this process over the same TLS (rustls, ring, the node's own
//!   certificate), and the agent's RSS growth while it serves;
//! - **exec set-up**: a WebSocket exec of `echo` until its output arrives, through atoll
//!   against the same exec made straight to the runtime's streaming URL (CRI Exec from a
//!   minimal client, then the upgrade), medians of alternating rounds;
//! - **open sessions**: the agent's RSS growth per exec session held open (50 of them);
//! - **port-forward**: a pod's file fetched over a forwarded port (SPDY, atoll's own client,
//!   `atoll port-forward`'s) through the agent's socket, against the same client straight to
//!   the runtime's streaming URL (CRI PortForward), alternately.
//!
//! Prints figures, asserts nothing about them. Under `cargo test` a smoke run (8 MiB, 3
//! rounds, 5 sessions).
//!
//!   cargo bench --bench kubelet_server

#[path = "../tests/apiserver/mod.rs"]
mod apiserver;
#[path = "../tests/common/mod.rs"]
mod common;

use common::median;

use common::forward::{forwarded_get, switched};
use common::kubelet_client::{connect, first_output, ws_open, As, Tls};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use std::io::{Read, Write};
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Sends `file` raw over TLS to whoever connects first, with the node's certificate.
fn raw_tls_server(cert: &Path, key: &Path, file: std::path::PathBuf) -> u16 {
    let chain: Vec<CertificateDer<'static>> =
        CertificateDer::pem_file_iter(cert).unwrap().map(Result::unwrap).collect();
    let key = PrivateKeyDer::from_pem_file(key).unwrap();
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(chain, key)
        .unwrap();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        let (tcp, _) = listener.accept().unwrap();
        let conn = rustls::ServerConnection::new(Arc::new(config)).unwrap();
        let mut tls = rustls::StreamOwned::new(conn, tcp);
        let mut head = Vec::new();
        let mut byte = [0u8; 1];
        while !head.ends_with(b"\r\n\r\n") && tls.read_exact(&mut byte).is_ok() {
            head.push(byte[0]);
        }
        let _ = tls.write_all(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nConnection: close\r\n\r\n");
        let mut f = std::fs::File::open(file).unwrap();
        let mut buf = vec![0u8; 64 << 10];
        while let Ok(n) = f.read(&mut buf) {
            if n == 0 || tls.write_all(&buf[..n]).is_err() {
                break;
            }
        }
        tls.conn.send_close_notify();
        let _ = tls.flush();
    });
    port
}

/// Reads a whole HTTPS answer to GET `path`: the bytes after the head, and how long it took.
fn download(port: u16, ca: &Path, who: &As, path: &str) -> (u64, Duration) {
    let started = Instant::now();
    let mut tls = connect(port, ca, who).expect("TLS to the server");
    let token = match who {
        As::Token(t) => format!("Authorization: Bearer {t}\r\n"),
        _ => String::new(),
    };
    write!(tls, "GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n{token}Connection: close\r\n\r\n").unwrap();
    let mut buf = vec![0u8; 256 << 10];
    let (mut total, mut head_seen, mut tail) = (0u64, false, Vec::new());
    while let Ok(n) = tls.read(&mut buf) {
        if n == 0 {
            break;
        }
        if head_seen {
            total += n as u64;
            continue;
        }
        tail.extend_from_slice(&buf[..n]);
        if let Some(i) = tail.windows(4).position(|w| w == b"\r\n\r\n") {
            head_seen = true;
            total += (tail.len() - i - 4) as u64;
        }
    }
    (total, started.elapsed())
}

fn main() {
    let bench = std::env::args().any(|a| a == "--bench");
    let (log_mib, rounds, sessions) = if bench { (1024u64, 20, 50) } else { (8, 3, 5) };
    let tb = common::testbed();
    let dir = std::env::temp_dir().join(common::unique("atoll-bench-kubelet"));
    let manifests = dir.join("manifests");
    std::fs::create_dir_all(&manifests).unwrap();
    let pki = apiserver::Pki::new(&dir.join("pki"), "tb");
    let server = apiserver::ApiServer::start(&pki, "tb");
    server.add_reviewed_token("tok", "admin", &[]);
    let line = "x".repeat(99);
    std::fs::write(
        manifests.join("logger.yaml"),
        format!(
            "apiVersion: v1\nkind: Pod\nmetadata: {{name: logger}}\nspec:\n  hostNetwork: true\n  terminationGracePeriodSeconds: 1\n  containers:\n  - name: c\n    image: docker.io/library/busybox:1.36\n    command: [sh, -c, 'yes {line} | head -c {}; echo; echo DONE; exec sleep 3600']\n",
            log_mib << 20
        ),
    )
    .unwrap();
    std::fs::write(
        manifests.join("shell.yaml"),
        "apiVersion: v1\nkind: Pod\nmetadata: {name: shell}\nspec:\n  hostNetwork: true\n  terminationGracePeriodSeconds: 1\n  containers:\n  - name: c\n    image: docker.io/library/busybox:1.36\n    command: [sh, -c, 'trap \"exit 0\" TERM; while true; do sleep 1; done']\n",
    )
    .unwrap();
    // The pod's writable layer on the test bed holds about 100 MiB.
    let blob_mib = log_mib.min(64);
    std::fs::write(
        manifests.join("blob.yaml"),
        format!("apiVersion: v1\nkind: Pod\nmetadata: {{name: blob}}\nspec:\n  terminationGracePeriodSeconds: 1\n  containers:\n  - name: httpd\n    image: docker.io/library/busybox:1.36\n    command: [sh, -c, 'mkdir -p /www && head -c {} /dev/zero > /www/part && mv /www/part /www/blob && exec httpd -f -p 8080 -h /www']\n", blob_mib << 20),
    )
    .unwrap();
    let port = common::free_port();
    let kubelet = common::kubelet_config(
        tb,
        &dir,
        &format!(
            "address: 127.0.0.1\nport: {port}\nfileCheckFrequency: 1s\ncontainerLogMaxSize: 2Gi\nauthorization: {{mode: AlwaysAllow}}\n"
        ),
    );
    let mut child = common::atoll_run(tb, &dir, &kubelet, &dir.join("api.sock"), "tb")
        .arg(format!("--kubeconfig={}", pki.kubeconfig(server.addr, None).display()))
        .arg("--node-ip=127.0.0.1")
        .spawn()
        .expect("start atoll");
    let pid = child.id();
    let ca = dir.join("state/pki/kubelet.crt");
    let who = As::Token("tok");
    let written = Instant::now();
    common::eventually(Duration::from_secs(900), "the logger's whole log", || {
        let (status, tail) =
            common::kubelet_client::request(port, &ca, &who, "GET", "/containerLogs/default/logger-tb/c?tailLines=1")?;
        (status == 200 && tail == "DONE\n").then_some(())
    });
    let written = written.elapsed();
    let log_file = std::fs::read_dir(&tb.logs)
        .unwrap()
        .flatten()
        .find(|e| e.file_name().to_string_lossy().starts_with("default_logger-tb_"))
        .map(|e| e.path().join("c/0.log"))
        .expect("the logger's log file");
    let file_bytes = std::fs::metadata(&log_file).unwrap().len();

    // Logs: atoll against the raw file over the same TLS, alternately, twice each.
    let (mut atoll_times, mut raw_times, mut growth) = (Vec::new(), Vec::new(), 0u64);
    let mut decoded = 0;
    for _ in 0..2 {
        let raw_port = raw_tls_server(&ca, &dir.join("state/pki/kubelet.key"), log_file.clone());
        let (raw_bytes, took) = download(raw_port, &ca, &As::Nobody, "/");
        assert_eq!(raw_bytes, file_bytes, "the raw server sent the whole file");
        raw_times.push(took);
        let before = rss_kib(pid);
        let (peak, sampling) = (Arc::new(AtomicU64::new(before)), Arc::new(AtomicBool::new(true)));
        let sampler = {
            let (peak, sampling) = (peak.clone(), sampling.clone());
            std::thread::spawn(move || {
                while sampling.load(Ordering::Relaxed) {
                    peak.fetch_max(rss_kib(pid), Ordering::Relaxed);
                    std::thread::sleep(Duration::from_millis(20));
                }
            })
        };
        let (bytes, took) = download(port, &ca, &who, "/containerLogs/default/logger-tb/c");
        sampling.store(false, Ordering::Relaxed);
        sampler.join().unwrap();
        decoded = bytes;
        atoll_times.push(took);
        growth = growth.max(peak.load(Ordering::Relaxed).saturating_sub(before));
    }
    let (atoll_t, raw_t) = (median(atoll_times), median(raw_times));
    let mibs = |b: u64, t: Duration| b as f64 / 1048576.0 / t.as_secs_f64();

    // Exec set-up: through atoll, and straight to the runtime, alternately.
    let id = tb.running_in("shell-tb").first().expect("the shell container").id.clone();
    let cri = tb.cri();
    let (mut through, mut direct) = (Vec::new(), Vec::new());
    for _ in 0..rounds {
        let started = Instant::now();
        let mut tls: Tls = connect(port, &ca, &who).unwrap();
        let status = ws_open(&mut tls, port, "tok", "/exec/default/shell-tb/c?command=echo&command=x&output=1");
        assert_eq!(status, Some(101));
        assert!(first_output(&mut tls), "output through atoll");
        through.push(started.elapsed());
        drop(tls);

        let started = Instant::now();
        let req = atoll::cri::api::ExecRequest {
            container_id: id.clone(),
            cmd: vec!["echo".into(), "x".into()],
            stdout: true,
            ..Default::default()
        };
        let url = smol::block_on(cri.exec(req)).expect("CRI Exec");
        let rest = url.strip_prefix("http://").unwrap();
        let (authority, path) = rest.split_at(rest.find('/').unwrap());
        let mut tcp = std::net::TcpStream::connect(authority).unwrap();
        write!(tcp, "GET {path} HTTP/1.1\r\nHost: {authority}\r\nConnection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Protocol: v4.channel.k8s.io\r\n\r\n").unwrap();
        switched(&mut tcp);
        assert!(first_output(&mut tcp), "output straight from the runtime");
        direct.push(started.elapsed());
    }
    let (through, direct) = (median(through), median(direct));

    // Port-forward: the same client through the agent's socket and straight to the runtime.
    let socket = dir.join("api.sock");
    let via_atoll = || {
        let unix = std::os::unix::net::UnixStream::connect(&socket).unwrap();
        let end = unix.try_clone().unwrap();
        let close = move || drop(end.shutdown(std::net::Shutdown::Both));
        forwarded_get(unix.try_clone().unwrap(), unix, close, "atoll", "/portForward/default/blob-tb", "")
    };
    let straight = || {
        let sandbox = tb.sandboxes_of("blob-tb").into_iter().find(|s| s.state == 0).expect("blob's sandbox").id;
        let req = atoll::cri::api::PortForwardRequest { pod_sandbox_id: sandbox, port: vec![8080] };
        let url = smol::block_on(cri.port_forward(req)).expect("CRI PortForward");
        let rest = url.strip_prefix("http://").unwrap();
        let (authority, path) = rest.split_at(rest.find('/').unwrap());
        let tcp = std::net::TcpStream::connect(authority).unwrap();
        let end = tcp.try_clone().unwrap();
        let close = move || drop(end.shutdown(std::net::Shutdown::Both));
        forwarded_get(tcp.try_clone().unwrap(), tcp, close, authority, path, "")
    };
    common::eventually(Duration::from_secs(300), "the blob served", || (via_atoll().0 > blob_mib << 20).then_some(()));
    let (mut pf_through, mut pf_direct) = (Vec::new(), Vec::new());
    for _ in 0..rounds.min(7) {
        let (bytes, took) = via_atoll();
        assert!(bytes > blob_mib << 20, "the whole blob through atoll: {bytes}");
        pf_through.push(took);
        let (bytes, took) = straight();
        assert!(bytes > blob_mib << 20, "the whole blob from the runtime: {bytes}");
        pf_direct.push(took);
    }
    let (pf_through, pf_direct) = (median(pf_through), median(pf_direct));

    // Open sessions: the agent's RSS growth per session held open.
    std::thread::sleep(Duration::from_secs(1));
    let before = rss_kib(pid);
    let mut open = Vec::new();
    for _ in 0..sessions {
        let mut tls = connect(port, &ca, &who).unwrap();
        let path = "/exec/default/shell-tb/c?command=sh&command=-c&command=echo%20up%3B%20sleep%20120&input=1&output=1";
        assert_eq!(ws_open(&mut tls, port, "tok", path), Some(101));
        assert!(first_output(&mut tls));
        open.push(tls);
    }
    std::thread::sleep(Duration::from_secs(1));
    let after = rss_kib(pid);
    drop(open);
    let _ = child.kill();
    let _ = child.wait();
    let _ = std::fs::remove_dir_all(&dir);

    println!("kubelet server against its floors (containerd {})", tb.var("ATOLL_TB_CONTAINERD_VERSION"));
    println!("| measurement | atoll | floor | ratio |");
    println!("|---|---:|---:|---:|");
    println!(
        "| a {log_mib} MiB log ({file_bytes} B of CRI lines, {decoded} B of text; written in {:.1} s): atoll's /containerLogs vs the raw file over the same TLS | {:.0} MiB/s of file in {:.2} s | {:.0} MiB/s in {:.2} s | {:.2}x the speed |",
        written.as_secs_f64(),
        mibs(file_bytes, atoll_t),
        atoll_t.as_secs_f64(),
        mibs(file_bytes, raw_t),
        raw_t.as_secs_f64(),
        raw_t.as_secs_f64() / atoll_t.as_secs_f64()
    );
    println!("| agent RSS growth while serving that log | {growth} KiB | | |");
    println!(
        "| exec set-up to the first output, median of {rounds} | {:.1} ms | {:.1} ms straight to the runtime | {:.2}x |",
        through.as_secs_f64() * 1e3,
        direct.as_secs_f64() * 1e3,
        through.as_secs_f64() / direct.as_secs_f64()
    );
    println!(
        "| agent RSS per open exec session ({sessions} open) | {} KiB | | |",
        after.saturating_sub(before) / sessions as u64
    );
    println!(
        "| port-forward of a {blob_mib} MiB file, median of {}: through the agent's socket vs straight to the runtime | {:.0} MiB/s | {:.0} MiB/s | {:.2}x the speed |",
        rounds.min(7),
        mibs(blob_mib << 20, pf_through),
        mibs(blob_mib << 20, pf_direct),
        pf_direct.as_secs_f64() / pf_through.as_secs_f64()
    );
    println!();
}

fn rss_kib(pid: u32) -> u64 {
    common::status_field(&format!("/proc/{pid}/status"), "VmRSS")
}
