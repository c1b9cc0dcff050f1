//! `GET /logs/{namespace}/{name}/{container}?follow&previous&tail=N`: a container's output,
//! streamed. The files are CRI logs (`<time> <stream> <P|F> <text>` lines, written by the
//! runtime from what the container prints), so they are read in chunks of [`CHUNK`] bytes and
//! never held whole: a 50 MiB log costs 64 KiB of memory. `tail` counts lines back from the
//! end (across rotated files, where kubelet stops at the live one); `follow` streams new lines
//! until that instance of the container stops, or the client goes away.

use super::log_lines::Lines;
use super::pods::{find_pod, not_found, Reader};
use super::server::WRITE_DEADLINE;
use super::server::{self, Request, Response};
use super::view::Api;
use crate::cri::RuntimeService;
use smol::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// How much of a log file is read at once.
pub const CHUNK: usize = 64 * 1024;
/// A line longer than this without a newline is passed on as it is (the runtime splits lines
/// at 16 KiB, so only a broken file has longer ones).
const MAX_PARTIAL: usize = 4 * CHUNK;

/// The log files of one container instance, oldest first: rotated files, then the live one.
pub fn log_files(dir: &Path, restart: u32) -> Vec<PathBuf> {
    let live = dir.join(format!("{restart}.log"));
    let mut files = crate::runtime::logs::rotated(&live);
    files.sort();
    files.push(live);
    files
}

/// Where the last `n` lines of `files` (read as one stream) begin: (file index, offset).
/// Reads backwards a chunk at a time.
pub fn tail_start(files: &[PathBuf], n: usize) -> (usize, u64) {
    let mut seen = 0;
    let mut last_byte = true;
    for (i, f) in files.iter().enumerate().rev() {
        let Ok(mut file) = crate::bounded::open_regular(f) else { continue };
        let mut end = file.metadata().map(|m| m.len()).unwrap_or(0);
        let mut buf = vec![0u8; CHUNK];
        while end > 0 {
            let start = end.saturating_sub(CHUNK as u64);
            let len = (end - start) as usize;
            if file.seek(SeekFrom::Start(start)).is_err() || file.read_exact(&mut buf[..len]).is_err() {
                break;
            }
            for j in (0..len).rev() {
                if buf[j] != b'\n' {
                    last_byte = false;
                    continue;
                }
                if std::mem::replace(&mut last_byte, false) {
                    continue; // the stream's final newline ends the last line; it starts none
                }
                seen += 1;
                if seen == n {
                    return (i, start + j as u64 + 1);
                }
            }
            end = start;
        }
    }
    (0, 0)
}

/// Writes `bytes`, or gives up when the client does not take them within the deadline.
async fn send<W: AsyncWrite + Unpin>(w: &mut W, bytes: &[u8]) -> bool {
    let write = async {
        w.write_all(bytes).await?;
        w.flush().await
    };
    matches!(crate::deadline::with_deadline(WRITE_DEADLINE, write).await, Some(Ok(())))
}

/// The text of the complete lines in `partial` (all of it past [`MAX_PARTIAL`]), which keeps
/// the rest.
fn take_lines(partial: &mut Vec<u8>, lines: &mut Lines) -> Vec<u8> {
    let complete = match partial.iter().rposition(|b| *b == b'\n') {
        Some(i) => i + 1,
        None if partial.len() > MAX_PARTIAL => partial.len(),
        None => return Vec::new(),
    };
    let mut text = Vec::with_capacity(complete);
    lines.decode(&partial[..complete], &mut text);
    partial.drain(..complete);
    text
}

/// Decodes the complete lines in `partial` and sends them; keeps the rest. False when the
/// client has gone or the byte limit is reached: nothing more is to be sent.
async fn send_lines<W: AsyncWrite + Unpin>(w: &mut W, partial: &mut Vec<u8>, lines: &mut Lines) -> bool {
    let text = take_lines(partial, lines);
    (text.is_empty() || send(w, &text).await) && !lines.done()
}

/// Sends `files` from `(index, offset)` on. The files are read and decoded on a blocking
/// thread, a chunk ahead of the client (two at most in flight), so a large log neither
/// blocks the executor nor waits for its own decoding. Returns the live file's length when
/// done (where following goes on), or `None` when the client went away or the byte limit was
/// reached.
async fn stream_files<W: AsyncWrite + Unpin>(
    w: &mut W,
    files: &[PathBuf],
    from: (usize, u64),
    lines: &mut Lines,
) -> Option<u64> {
    let (tx, rx) = smol::channel::bounded::<Vec<u8>>(2);
    let (files, state) = (files.to_vec(), std::mem::take(lines));
    let reader = crate::task::unblock(move || read_decoded(&files, from, state, &tx));
    let mut sent = true;
    while let Ok(text) = rx.recv().await {
        if !send(w, &text).await {
            sent = false;
            break;
        }
    }
    drop(rx); // a reader still going stops at its next chunk
    let (live_len, state) = reader.await;
    *lines = state;
    (sent && !lines.done()).then_some(live_len)
}

/// The blocking half of [`stream_files`]: reads and decodes, sending each chunk's text; stops
/// when the receiver is gone. Returns the live file's length and the line state.
fn read_decoded(
    files: &[PathBuf],
    from: (usize, u64),
    mut lines: Lines,
    tx: &smol::channel::Sender<Vec<u8>>,
) -> (u64, Lines) {
    let mut partial = Vec::new();
    let mut live_len = 0;
    for (i, f) in files.iter().enumerate().skip(from.0) {
        live_len = 0;
        let Ok(mut file) = crate::bounded::open_regular(f) else { continue };
        let mut at = if i == from.0 { from.1 } else { 0 };
        let len = file.metadata().map(|m| m.len()).unwrap_or(0);
        let _ = file.seek(SeekFrom::Start(at));
        let mut buf = vec![0u8; CHUNK];
        while at < len {
            let want = ((len - at) as usize).min(CHUNK);
            let Ok(got) = file.read(&mut buf[..want]) else { break };
            if got == 0 {
                break;
            }
            at += got as u64;
            partial.extend_from_slice(&buf[..got]);
            let text = take_lines(&mut partial, &mut lines);
            if (!text.is_empty() && tx.send_blocking(text).is_err()) || lines.done() {
                return (at, lines);
            }
        }
        live_len = at;
    }
    if !partial.is_empty() {
        partial.push(b'\n');
        let text = take_lines(&mut partial, &mut lines);
        if !text.is_empty() {
            let _ = tx.send_blocking(text);
        }
    }
    (live_len, lines)
}

/// Resolves to `true` once the client has closed its side (or the connection broke).
async fn gone<R: AsyncRead + Unpin>(r: &mut R) {
    let mut b = [0u8; 256];
    while let Ok(n) = r.read(&mut b).await {
        if n == 0 {
            return;
        }
    }
}

/// What a logs request asks for, checked against the pod's status.
struct Wanted {
    pod: crate::pod::types::Pod,
    /// The instance's container ID (empty for a previous one).
    container_id: String,
    /// The instance's log files, oldest first.
    files: Vec<std::path::PathBuf>,
    /// Where to begin: (file index, byte offset).
    from: (usize, u64),
    follow: bool,
    /// kubelet's per-line options: since, timestamps, limitBytes.
    lines: Lines,
}

/// The container of pod `ns/name` and the instance `?previous` names, its files and where
/// `?tail` begins; a request that names nothing there gets kubelet's error.
fn wanted<RT: RuntimeService>(
    api: &Api<RT>,
    req: &Request,
    (ns, name, container): (&str, &str, &str),
) -> Result<Wanted, Response> {
    let (_, pod) = find_pod(api, ns, name, Reader::Root).ok_or_else(|| not_found(ns, name))?;
    let status = api.node.statuses().get(&pod.metadata.uid);
    let cs = status
        .as_ref()
        .and_then(|s| {
            s.container_statuses.iter().chain(&s.init_container_statuses).find(|c| c.name == container).cloned()
        })
        .ok_or_else(|| {
            Response::error(400, "BadRequest", format!("container {container:?} is not valid for pod {}", pod.key()))
        })?;
    let previous = req.query.get("previous").is_some_and(|v| v != "false");
    let follow = req.query.get("follow").is_some_and(|v| v != "false") && !previous;
    let restart = if previous {
        let not_found = || {
            let why = format!("previous terminated container {container:?} in pod {} not found", pod.key());
            Response::error(400, "BadRequest", why)
        };
        previous_instance(&cs).ok_or_else(not_found)?
    } else {
        cs.restart_count
    };
    if !previous && cs.container_id.is_empty() {
        let why = cs.state.waiting.as_ref().map(|w| w.reason.clone()).unwrap_or_default();
        return Err(Response::error(
            400,
            "BadRequest",
            format!("container {container:?} in pod {} is waiting to start: {why}", pod.key()),
        ));
    }
    // The container's name was checked against the pod's status above: a safe path segment.
    let dir = crate::runtime::sandbox::log_directory(api.node.facts(), &pod)
        .map_err(|e| Response::error(500, "InternalError", e))?
        .join(container);
    let files = log_files(&dir, restart);
    let from = match req.query.get("tail").and_then(|t| t.parse::<i64>().ok()) {
        Some(n) if n >= 0 => match usize::try_from(n) {
            Ok(0) => (files.len(), 0),
            Ok(n) => tail_start(&files, n),
            Err(_) => (0, 0),
        },
        _ => (0, 0),
    };
    Ok(Wanted { pod, container_id: cs.container_id, files, from, follow, lines: line_options(req)? })
}

/// The restart number of the instance `--previous` reads: kubelet's last terminated one,
/// which is the newest while the container waits to restart (CrashLoopBackOff: its current
/// instance is the one that ended) and the one before the running one otherwise.
fn previous_instance(cs: &crate::pod::status::ContainerStatus) -> Option<u32> {
    let last = cs.last_state.terminated.as_ref()?;
    if cs.state.running.is_none() && last.container_id == cs.container_id {
        Some(cs.restart_count)
    } else {
        cs.restart_count.checked_sub(1)
    }
}

/// kubelet's per-line log options from the query (`timestamps`, `sinceSeconds` or
/// `sinceTime`, `limitBytes`), checked as kubelet checks them: a value that does not parse is
/// 400, one out of range 422.
fn line_options(req: &Request) -> Result<Lines, Response> {
    let q = |k: &str| req.query.get(k).map(String::as_str);
    let undecodable = || Response::text(400, r#"{"message": "Unable to decode query."}"#);
    let invalid = || Response::text(422, r#"{"message": "Invalid request."}"#);
    let number = |k: &str| q(k).map(|v| v.parse::<i64>().map_err(|_| undecodable())).transpose();
    let (since_seconds, limit) = (number("sinceSeconds")?, number("limitBytes")?);
    let since_time = q("sinceTime").map(|t| crate::rfc3339::parse_nanos(t).ok_or_else(undecodable)).transpose()?;
    if since_seconds.is_some_and(|s| s < 1) || limit.is_some_and(|l| l < 1) {
        return Err(invalid());
    }
    if since_seconds.is_some() && since_time.is_some() {
        return Err(invalid());
    }
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default().as_nanos();
    let now = i128::try_from(now).unwrap_or(i128::MAX);
    let since = since_seconds.map(|s| now.saturating_sub(i128::from(s).saturating_mul(1_000_000_000))).or(since_time);
    let timestamps = q("timestamps").is_some_and(|v| v == "true" || v == "1");
    Ok(Lines::new(since, timestamps, limit.and_then(|l| u64::try_from(l).ok())))
}

pub async fn serve<R, W, RT: RuntimeService>(
    api: &Api<RT>,
    req: &Request,
    path: (&str, &str, &str),
    reader: &mut R,
    out: &mut W,
) -> Result<(), Response>
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let mut w = wanted(api, req, path)?;
    if server::start_stream(out, "text/plain; charset=utf-8").await.is_err() {
        return Ok(());
    }
    let mut lines = std::mem::take(&mut w.lines);
    let Some(offset) = stream_files(out, &w.files, w.from, &mut lines).await else { return Ok(()) };
    if w.follow {
        follow(api, &w, path.2, offset, reader, out, &mut lines).await;
    }
    Ok(())
}

/// Follows the live file: new whole lines as they come, a rotation (the file replaced)
/// followed from its start, the end when this instance of the container has stopped or the
/// client has gone.
async fn follow<R, W, RT: RuntimeService>(
    api: &Api<RT>,
    w: &Wanted,
    container: &str,
    mut offset: u64,
    reader: &mut R,
    out: &mut W,
    lines: &mut Lines,
) where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let live = w.files.last().cloned().unwrap_or_default();
    let meta = std::fs::metadata(&live).ok();
    let mut inode = meta.as_ref().map(std::os::unix::fs::MetadataExt::ino).unwrap_or(0);
    if w.from.0 >= w.files.len() {
        offset = meta.as_ref().map(|m| m.len()).unwrap_or(0);
    }
    let mut partial: Vec<u8> = Vec::new();
    let mut last_round = false;
    let client_gone = gone(reader);
    smol::pin!(client_gone);
    loop {
        let tick = async {
            smol::Timer::after(Duration::from_millis(200)).await;
            false
        };
        if smol::future::or(tick, async {
            (&mut client_gone).await;
            true
        })
        .await
        {
            return;
        }
        let meta = std::fs::metadata(&live).ok();
        let now_inode = meta.as_ref().map(std::os::unix::fs::MetadataExt::ino).unwrap_or(0);
        let len = meta.as_ref().map(|m| m.len()).unwrap_or(0);
        if now_inode != inode || len < offset {
            inode = now_inode;
            offset = 0;
        }
        if len > offset {
            let mut buf = Vec::new();
            if let Ok(mut f) = crate::bounded::open_regular(&live) {
                let _ = f.seek(SeekFrom::Start(offset));
                let _ = f.take((len - offset).min(CHUNK as u64)).read_to_end(&mut buf);
            }
            offset += buf.len() as u64;
            partial.extend_from_slice(&buf);
            if !send_lines(out, &mut partial, lines).await {
                return;
            }
            continue;
        }
        if last_round {
            return;
        }
        let still_running = api.node.statuses().get(&w.pod.metadata.uid).is_some_and(|s| {
            s.container_statuses
                .iter()
                .chain(&s.init_container_statuses)
                .any(|c| c.name == container && c.container_id == w.container_id && c.state.running.is_some())
        });
        if !still_running {
            // One more look: the runtime may flush the last lines just after the exit.
            last_round = true;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dir(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("atoll-api-logs-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn cri_log_lines_decode_to_the_programs_text() {
        let raw = b"2024-01-01T00:00:00.1Z stdout F hello world\n2024-01-01T00:00:00.2Z stderr P par\n2024-01-01T00:00:00.3Z stderr F tial\n2024-01-01T00:00:00.4Z stdout F \n";
        let mut out = Vec::new();
        Lines::default().decode(raw, &mut out);
        assert_eq!(String::from_utf8(out).unwrap(), "hello world\npartial\n\n");
    }

    #[test]
    fn previous_is_the_last_instance_that_ended() {
        use crate::pod::status::{ContainerStatus, Running, Terminated};
        let ended = |id: &str| Some(Terminated { exit_code: 1, container_id: id.into(), ..Default::default() });
        let mut cs = ContainerStatus { restart_count: 1, container_id: "containerd://b".into(), ..Default::default() };
        cs.state.running = Some(Running::default());
        cs.last_state.terminated = ended("containerd://a");
        assert_eq!(previous_instance(&cs), Some(0), "running again: the one before");
        cs.state.running = None;
        cs.last_state.terminated = ended("containerd://b");
        assert_eq!(previous_instance(&cs), Some(1), "waiting to restart: the one that just ended");
        cs.last_state.terminated = None;
        assert_eq!(previous_instance(&cs), None, "nothing ended before");
    }

    #[test]
    fn rotated_files_come_before_the_live_one() {
        let d = dir("rotated");
        for f in ["0.log", "0.log.20240102-000000", "0.log.20240101-000000", "1.log", "0.log.20240103-000000.tmp"] {
            std::fs::write(d.join(f), "").unwrap();
        }
        let names: Vec<String> =
            log_files(&d, 0).iter().map(|p| p.file_name().unwrap().to_string_lossy().into_owned()).collect();
        assert_eq!(names, ["0.log.20240101-000000", "0.log.20240102-000000", "0.log"]);
        let _ = std::fs::remove_dir_all(&d);
    }

    /// Everything `stream_files` sends from the tail of `files`.
    fn streamed(files: &[PathBuf], n: usize) -> String {
        let mut out = Vec::new();
        smol::block_on(stream_files(&mut out, files, tail_start(files, n), &mut Lines::default())).unwrap();
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn tails_count_back_across_files_and_chunks() {
        let d = dir("tail");
        let line = |i: usize| format!("2026-01-01T00:00:00Z stdout F line {i}\n");
        let old: String = (0..3).map(line).collect();
        // The live file spans several chunks.
        let live: String = (3..20_000).map(line).collect();
        std::fs::write(d.join("0.log.20260101-000000"), old).unwrap();
        std::fs::write(d.join("0.log"), live).unwrap();
        let files = log_files(&d, 0);
        assert!(std::fs::metadata(&files[1]).unwrap().len() > 3 * CHUNK as u64);
        assert_eq!(streamed(&files, 2), "line 19998\nline 19999\n");
        let all = streamed(&files, 1_000_000);
        assert!(all.starts_with("line 0\nline 1\nline 2\nline 3\n") && all.ends_with("line 19999\n"));
        assert_eq!(all.lines().count(), 20_000);
        assert_eq!(streamed(&files, 19_998).lines().next(), Some("line 2"), "the tail reaches into the rotated file");
        let _ = std::fs::remove_dir_all(&d);
    }
}
