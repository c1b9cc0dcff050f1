//! A recording CRI proxy for the benchmarks: a unix socket that passes each gRPC call on to the
//! runtime's socket unchanged (head, message, the reply's head, messages and trailers) and
//! keeps, for every call that has ended, its path, its request and reply bodies as they went
//! (gRPC frames), and when it began and ended. atoll pointed at it makes exactly the calls it
//! makes against the runtime itself; what was kept can be sent again byte for byte
//! (`replay.rs`). Each client connection gets its own connection to the runtime. Below the
//! proxy: what a recorded call was (its method, the ID the runtime returned) and which of the
//! calls were made for one pod.

#![allow(dead_code)]

use atoll::cri::api::{CreateContainerResponse, RunPodSandboxResponse};
use bytes::{Bytes, BytesMut};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Instant;
use tokio_util::compat::FuturesAsyncReadCompatExt;

/// One call as it went through.
#[derive(Clone, Debug)]
pub struct Recorded {
    pub path: String,
    pub request: Bytes,
    pub response: Bytes,
    pub began: Instant,
    pub ended: Instant,
}

pub struct Proxy {
    pub socket: PathBuf,
    calls: Arc<Mutex<Vec<Recorded>>>,
}

impl Proxy {
    /// Listens on `socket`, passing calls on to the runtime at `upstream`.
    pub fn start(upstream: &Path, socket: &Path) -> Proxy {
        let _ = std::fs::remove_file(socket);
        let listener = UnixListener::bind(socket).expect("the proxy's socket");
        let calls = Arc::new(Mutex::new(Vec::new()));
        let (kept, upstream) = (calls.clone(), upstream.to_path_buf());
        std::thread::spawn(move || {
            for conn in listener.incoming().flatten() {
                let (calls, upstream) = (kept.clone(), upstream.clone());
                std::thread::spawn(move || smol::block_on(serve(conn, &upstream, calls)));
            }
        });
        Proxy { socket: socket.to_path_buf(), calls }
    }

    /// The calls that have ended so far, in the order they ended.
    pub fn calls(&self) -> Vec<Recorded> {
        self.calls.lock().unwrap().clone()
    }
}

async fn serve(conn: UnixStream, upstream: &Path, calls: Arc<Mutex<Vec<Recorded>>>) {
    let Ok(down) = smol::Async::new(conn) else { return };
    let Ok(mut server) = h2::server::handshake(down.compat()).await else { return };
    let Ok(up) = smol::Async::<UnixStream>::connect(upstream).await else { return };
    let Ok((client, up_conn)) = h2::client::handshake(up.compat()).await else { return };
    std::thread::spawn(move || smol::block_on(up_conn));
    while let Some(Ok((req, respond))) = server.accept().await {
        let (client, calls) = (client.clone(), calls.clone());
        std::thread::spawn(move || {
            if let Some(call) = smol::block_on(forward(client, req, respond)) {
                calls.lock().unwrap().push(call);
            }
        });
    }
}

/// Reads a body whole (what a unary call and a streaming call's request send).
async fn whole(body: &mut h2::RecvStream) -> Option<Bytes> {
    let mut all = BytesMut::new();
    while let Some(chunk) = body.data().await {
        let chunk = chunk.ok()?;
        let _ = body.flow_control().release_capacity(chunk.len());
        all.extend_from_slice(&chunk);
    }
    Some(all.freeze())
}

/// One call passed on; what went, once it has ended.
async fn forward(
    client: h2::client::SendRequest<Bytes>,
    req: http::Request<h2::RecvStream>,
    mut respond: h2::server::SendResponse<Bytes>,
) -> Option<Recorded> {
    let began = Instant::now();
    let (parts, mut body) = req.into_parts();
    let path = parts.uri.path().to_string();
    let request = whole(&mut body).await?;
    let mut head = http::Request::builder().method(parts.method).uri(parts.uri);
    for (k, v) in &parts.headers {
        head = head.header(k, v);
    }
    let mut client = client.ready().await.ok()?;
    let (answer, mut send) = client.send_request(head.body(()).ok()?, false).ok()?;
    send.send_data(request.clone(), true).ok()?;
    let (rparts, mut rbody) = answer.await.ok()?.into_parts();
    let mut back = respond.send_response(http::Response::from_parts(rparts, ()), false).ok()?;
    let mut response = BytesMut::new();
    while let Some(chunk) = rbody.data().await {
        let chunk = chunk.ok()?;
        let _ = rbody.flow_control().release_capacity(chunk.len());
        if response.len() < 1 << 20 {
            response.extend_from_slice(&chunk);
        }
        back.send_data(chunk, false).ok()?;
    }
    match rbody.trailers().await.ok()? {
        Some(trailers) => back.send_trailers(trailers).ok()?,
        None => back.send_data(Bytes::new(), true).ok()?,
    }
    Some(Recorded { path, request, response: response.freeze(), began, ended: Instant::now() })
}

/// The methods a pod's own calls use.
pub const POD_CALLS: &[&str] = &[
    "ListPodSandbox",
    "ListContainers",
    "RunPodSandbox",
    "PodSandboxStatus",
    "ImageStatus",
    "PullImage",
    "CreateContainer",
    "StartContainer",
    "ContainerStatus",
    "StopContainer",
    "StopPodSandbox",
    "RemovePodSandbox",
    "RemoveContainer",
];

pub fn method(c: &Recorded) -> &str {
    c.path.rsplit('/').next().unwrap_or("")
}

/// A call as the table shows it: its method, and whether it asked for the verbose status
/// (a process watch being set up, on a runtime without container events).
pub fn shown(c: &Recorded) -> String {
    let verbose = match method(c) {
        "ContainerStatus" => {
            atoll::grpc::decode_message::<atoll::cri::api::ContainerStatusRequest>(c.request.clone(), 1 << 24)
                .is_ok_and(|r| r.verbose)
        }
        "PodSandboxStatus" => {
            atoll::grpc::decode_message::<atoll::cri::api::PodSandboxStatusRequest>(c.request.clone(), 1 << 24)
                .is_ok_and(|r| r.verbose)
        }
        _ => false,
    };
    format!("{}{}", method(c), if verbose { " (verbose)" } else { "" })
}

pub fn contains(hay: &[u8], needle: &[u8]) -> bool {
    !needle.is_empty() && hay.windows(needle.len()).any(|w| w == needle)
}

/// The calls of `all` that began in `[from, until]` and were made for the pod `uid` (or name
/// one of `ids`), ImageStatus too; by when they began.
pub fn for_pod(all: &[Recorded], from: Instant, until: Instant, uid: &str, ids: &[String]) -> Vec<Recorded> {
    let mut mine: Vec<Recorded> = all
        .iter()
        .filter(|c| c.began >= from && c.began <= until && POD_CALLS.contains(&method(c)))
        .filter(|c| {
            method(c) == "ImageStatus"
                || contains(&c.request, uid.as_bytes())
                || ids.iter().any(|id| contains(&c.request, id.as_bytes()))
        })
        .cloned()
        .collect();
    mine.sort_by_key(|c| c.began);
    mine
}

/// The IDs the runtime gave in `calls` (sandboxes and containers).
pub fn given_ids(calls: &[Recorded]) -> Vec<String> {
    calls.iter().filter_map(|c| returned_id(method(c), c.response.clone())).collect()
}

pub fn returned_id(method: &str, response: prost::bytes::Bytes) -> Option<String> {
    match method {
        "RunPodSandbox" => {
            atoll::grpc::decode_message::<RunPodSandboxResponse>(response, 1 << 24).ok().map(|r| r.pod_sandbox_id)
        }
        "CreateContainer" => {
            atoll::grpc::decode_message::<CreateContainerResponse>(response, 1 << 24).ok().map(|r| r.container_id)
        }
        _ => None,
    }
}
