//! The commands that talk to a running agent over its local API socket: `atoll pods`,
//! `describe`, `logs`, `restart` (and `images`, in images.rs). Output fits an 80-column serial console, has no colour, and
//! `-o json|yaml` is stable for scripts.

use super::describe::describe_text;
use super::error::Error;
use super::render::{age, status_column, str_of, table, to_yaml};
use super::{Flag, Flags};
use serde_json::Value;
use std::io::{BufReader, Read, Write};
use std::os::unix::net::UnixStream;
use std::time::SystemTime;

/// A response from the local API: status and a reader positioned at the body.
struct Reply {
    status: u16,
    body: BufReader<Body>,
}

fn socket(flags: &Flags) -> String {
    flags.get(Flag::ApiSocket).unwrap_or(crate::api::DEFAULT_SOCKET).to_string()
}

fn request(flags: &Flags, method: &str, path: &str) -> Result<Reply, Error> {
    let (status, _, body) = exchange(flags, method, path, "Content-Length: 0\r\nConnection: close")?;
    Ok(Reply { status, body: BufReader::new(body) })
}

type Body = std::io::Chain<std::io::Cursor<Vec<u8>>, UnixStream>;

/// Sends a request head with `headers`; the answer's status, head, and a reader at its body.
fn exchange(flags: &Flags, method: &str, path: &str, headers: &str) -> Result<(u16, String, Body), Error> {
    let socket = socket(flags);
    let mut s = match UnixStream::connect(&socket) {
        Ok(s) => s,
        Err(source) => return Err(Error::Unreachable { socket, source }),
    };
    let broke = |reason: String| Error::Exchange { socket: socket.clone(), reason };
    write!(s, "{method} {path} HTTP/1.1\r\nHost: atoll\r\n{headers}\r\n\r\n").map_err(|e| broke(e.to_string()))?;
    // The one reading of a head, on a blocking socket (the CLI has nothing else to do).
    let head = smol::block_on(crate::http1::read_head(&mut smol::io::AssertAsync::new(&mut s), 64 << 10));
    let (head, rest) = head.map_err(|e| broke(e.to_string()))?;
    let status = crate::http1::status(&head).map_err(|e| broke(e.to_string()))?;
    Ok((status, head, std::io::Cursor::new(rest).chain(s)))
}

/// The message of an error answer: its JSON `message`, else its text.
fn message(mut body: impl Read) -> String {
    let mut text = String::new();
    let _ = body.by_ref().take(64 << 10).read_to_string(&mut text);
    let msg = serde_json::from_str::<Value>(&text).ok().and_then(|v| v["message"].as_str().map(String::from));
    msg.unwrap_or_else(|| text.trim_end().to_string())
}

/// Opens a streaming session (`/exec`, `/attach`, `/portForward`) over SPDY/3.1 with
/// `protocol`: a reader of the peer's frames and the socket to write to.
pub(super) fn upgrade(flags: &Flags, path: &str, protocol: &str) -> Result<(Body, UnixStream), Error> {
    let headers = format!(
        "Connection: Upgrade\r\nUpgrade: SPDY/3.1\r\nX-Stream-Protocol-Version: {protocol}\r\nContent-Length: 0"
    );
    let (status, head, body) = exchange(flags, "POST", path, &headers)?;
    if status != 101 {
        return Err(Error::Refused(message(body)));
    }
    let agreed = crate::http1::header(&head, "x-stream-protocol-version");
    if agreed != Some(protocol) {
        return Err(Error::Failed(format!("the runtime's streaming server agreed to {agreed:?}, not {protocol}")));
    }
    let writer = body.get_ref().1.try_clone()?;
    Ok((body, writer))
}

pub(super) fn get_json(flags: &Flags, method: &str, path: &str) -> Result<Value, Error> {
    let mut reply = request(flags, method, path)?;
    let mut text = String::new();
    reply.body.read_to_string(&mut text)?;
    let value: Value = serde_json::from_str(&text).map_err(Error::Reply)?;
    if reply.status != 200 {
        return Err(Error::Refused(value["message"].as_str().unwrap_or(&text).to_string()));
    }
    Ok(value)
}

/// `NAME` or `NAMESPACE/NAME` (with `-n`), as path segments; kubectl's `pod/NAME` is `NAME`.
pub(super) fn pod_path(flags: &Flags, arg: &str) -> String {
    let arg = arg.strip_prefix("pod/").or_else(|| arg.strip_prefix("pods/")).unwrap_or(arg);
    let (ns, name) = match arg.split_once('/') {
        Some((ns, name)) => (ns.to_string(), name.to_string()),
        None => (flags.get(Flag::Namespace).unwrap_or("default").to_string(), arg.to_string()),
    };
    format!("{ns}/{name}")
}

/// `s` as a query value: everything but RFC 3986's unreserved characters escaped.
pub(super) fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// The container a command without `-c` means, as kubectl picks it: the pod's
/// `kubectl.kubernetes.io/default-container`, else its first (saying so when there are more,
/// unless `--quiet`).
pub(super) fn default_container(flags: &Flags, pod: &Value) -> Result<String, Error> {
    let names: Vec<&str> =
        pod["spec"]["containers"].as_array().into_iter().flatten().filter_map(|c| c["name"].as_str()).collect();
    let named = str_of(pod, &["metadata", "annotations", "kubectl.kubernetes.io/default-container"]);
    if !named.is_empty() && names.contains(&named) {
        return Ok(named.to_string());
    }
    let first = names.first().ok_or_else(|| Error::Failed("the pod has no containers".into()))?;
    if names.len() > 1 && !flags.is_set(Flag::Quiet) {
        eprintln!("Defaulted container {first:?} out of: {}", names.join(", "));
    }
    Ok(first.to_string())
}

/// Runs a client command; returns the exit code.
pub fn run(command: &str, flags: &Flags, args: &[String]) -> Result<u8, Error> {
    match command {
        "pods" => pods(flags),
        "describe" => describe(flags, &args[0]),
        "logs" => logs(flags, &args[0]),
        "restart" => {
            let v = get_json(flags, "POST", &format!("/pods/{}/restart", pod_path(flags, &args[0])))?;
            let stopped: Vec<&str> = v["stopped"].as_array().into_iter().flatten().filter_map(|s| s.as_str()).collect();
            if stopped.is_empty() {
                println!("pod {}: no running containers to stop", v["pod"].as_str().unwrap_or(""));
            } else {
                println!("pod {}: stopped {}", v["pod"].as_str().unwrap_or(""), stopped.join(", "));
            }
            Ok(0)
        }
        other => Err(Error::Failed(format!("unknown command {other:?}"))),
    }
}

fn pods(flags: &Flags) -> Result<u8, Error> {
    let list = get_json(flags, "GET", "/pods")?;
    let mut items: Vec<Value> = list["items"].as_array().cloned().unwrap_or_default();
    if let Some(ns) = flags.get(Flag::Namespace) {
        items.retain(|p| str_of(p, &["metadata", "namespace"]) == ns);
    }
    match flags.get(Flag::Output) {
        Some("json") => {
            let out = serde_json::json!({"apiVersion": "v1", "kind": "List", "items": items});
            println!("{}", serde_json::to_string_pretty(&out).unwrap_or_default());
            return Ok(0);
        }
        Some("yaml") => {
            let out = serde_json::json!({"apiVersion": "v1", "kind": "List", "items": items});
            print!("{}", to_yaml(&out));
            return Ok(0);
        }
        _ => {}
    }
    let wide = flags.get(Flag::Output) == Some("wide");
    if items.is_empty() {
        println!("No pods.");
        return Ok(0);
    }
    let namespaces: std::collections::BTreeSet<&str> =
        items.iter().map(|p| str_of(p, &["metadata", "namespace"])).collect();
    let show_ns = namespaces.len() > 1;
    let now = SystemTime::now();
    let mut rows = vec![];
    let mut head = vec![];
    if show_ns {
        head.push("NAMESPACE");
    }
    head.extend(["NAME", "READY", "STATUS", "RESTARTS", "AGE", "SOURCE"]);
    if wide {
        head.extend(["IP", "NODE"]);
    }
    rows.push(head.iter().map(|s| s.to_string()).collect::<Vec<_>>());
    for p in &items {
        let cs = p["status"]["containerStatuses"].as_array().cloned().unwrap_or_default();
        let total = p["spec"]["containers"].as_array().map_or(0, |c| c.len());
        let ready = cs.iter().filter(|c| c["ready"].as_bool() == Some(true)).count();
        let restarts: i64 = cs.iter().map(|c| c["restartCount"].as_i64().unwrap_or(0)).sum();
        let start = crate::rfc3339::parse_seconds(str_of(p, &["status", "startTime"]));
        let mut row = vec![];
        if show_ns {
            row.push(str_of(p, &["metadata", "namespace"]).to_string());
        }
        row.extend([
            str_of(p, &["metadata", "name"]).to_string(),
            format!("{ready}/{total}"),
            status_column(p),
            restarts.to_string(),
            age(start, now),
            source_column(p),
        ]);
        if wide {
            let ip = str_of(p, &["status", "podIP"]);
            row.push(if ip.is_empty() { "<none>".into() } else { ip.into() });
            row.push(str_of(p, &["spec", "nodeName"]).to_string());
        }
        rows.push(row);
    }
    print!("{}", table(&rows));
    // Versions run again by health-gated rollback say so under the table.
    for p in &items {
        if !str_of(p, &["metadata", "annotations", crate::pod::rollback_policy::ROLLED_BACK_FROM]).is_empty() {
            println!("{}: {}", str_of(p, &["metadata", "name"]), str_of(p, &["status", "message"]));
        }
    }
    Ok(0)
}

/// Where the pod came from (`file`, `http`, `api`); `api (kept)` while it runs from the copy
/// kept on disk, before the API server has listed the node's pods.
fn source_column(p: &serde_json::Value) -> String {
    let source = str_of(p, &["metadata", "annotations", crate::pod::identity::ANNOTATION_SOURCE]);
    let report = str_of(p, &["metadata", "annotations", crate::api::pods::ANNOTATION_MIRROR_STATE]);
    match source {
        "api" if report.starts_with(crate::mirror::bound::FROM_KEPT) => "api (kept)".into(),
        "" => "<none>".into(),
        s => s.into(),
    }
}

fn describe(flags: &Flags, arg: &str) -> Result<u8, Error> {
    let pod = get_json(flags, "GET", &format!("/pods/{}", pod_path(flags, arg)))?;
    let ns = str_of(&pod, &["metadata", "namespace"]);
    let name = str_of(&pod, &["metadata", "name"]);
    let events = get_json(flags, "GET", &format!("/events?namespace={ns}&pod={name}"))?;
    let events: Vec<Value> = events["items"].as_array().cloned().unwrap_or_default();
    let tail: Vec<Value> = events.iter().rev().take(20).rev().cloned().collect();
    // An older agent has no objects endpoint: the section is left out.
    let objects = get_json(flags, "GET", &format!("/pods/{ns}/{name}/objects")).unwrap_or_default();
    let objects: Vec<Value> = objects["items"].as_array().cloned().unwrap_or_default();
    print!("{}", describe_text(&pod, &objects, &tail, SystemTime::now()));
    Ok(0)
}

fn logs(flags: &Flags, arg: &str) -> Result<u8, Error> {
    let path = pod_path(flags, arg);
    let container = match flags.get(Flag::Container) {
        Some(c) => c.to_string(),
        None => default_container(flags, &get_json(flags, "GET", &format!("/pods/{path}"))?)?,
    };
    let mut query = vec![];
    if flags.is_set(Flag::Follow) {
        query.push("follow=true".to_string());
    }
    if flags.is_set(Flag::Previous) {
        query.push("previous=true".to_string());
    }
    if let Some(t) = flags.get(Flag::Tail) {
        query.push(format!("tail={t}"));
    }
    if flags.is_set(Flag::Timestamps) {
        query.push("timestamps=true".to_string());
    }
    if let Some(since) = flags.get(Flag::Since) {
        // kubectl's rounding: whole seconds, up.
        let d = crate::duration::parse_duration(since).map_err(|e| Error::Failed(format!("--since: {e}")))?;
        query.push(format!("sinceSeconds={}", d.as_secs() + u64::from(d.subsec_nanos() > 0)));
    }
    if let Some(t) = flags.get(Flag::SinceTime) {
        query.push(format!("sinceTime={}", escape(t)));
    }
    if let Some(n) = flags.get(Flag::LimitBytes) {
        query.push(format!("limitBytes={n}"));
    }
    let mut reply = request(flags, "GET", &format!("/logs/{path}/{}?{}", escape(&container), query.join("&")))?;
    if reply.status != 200 {
        return Err(Error::Refused(message(reply.body)));
    }
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    let mut buf = [0u8; 8192];
    loop {
        match reply.body.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => {
                if out.write_all(&buf[..n]).and_then(|_| out.flush()).is_err() {
                    break;
                }
            }
            Err(e) => return Err(Error::Io(e)),
        }
    }
    Ok(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_container_is_kubectls() {
        let flags = Flags::default();
        let pod = |annotation: &str| {
            serde_json::json!({"metadata": {"annotations": {"kubectl.kubernetes.io/default-container": annotation}},
                "spec": {"containers": [{"name": "app"}, {"name": "sidecar"}]}})
        };
        assert_eq!(default_container(&flags, &pod("sidecar")).unwrap(), "sidecar");
        assert_eq!(default_container(&flags, &pod("gone")).unwrap(), "app", "one that is not there: the first");
        assert!(default_container(&flags, &serde_json::json!({"spec": {}})).is_err());
        assert_eq!(pod_path(&flags, "pod/web"), "default/web");
        assert_eq!(pod_path(&flags, "kube-system/web"), "kube-system/web");
    }

    #[test]
    fn values_are_escaped_into_the_query() {
        assert_eq!(escape("sh"), "sh");
        assert_eq!(escape("echo a&b=c; x+1%"), "echo%20a%26b%3Dc%3B%20x%2B1%25");
        assert_eq!(escape("é"), "%C3%A9");
    }
}
