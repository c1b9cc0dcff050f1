//! The judge of what the test API server takes: every request body it would accept goes to
//! `k8scheck` (tests/k8scheck/main.go: Kubernetes' own k8s.io/api and apimachinery code, from
//! Debian's packaged sources), which decodes it as kube-apiserver does with
//! `fieldValidation=Strict` (JSON strictly into the API type; protobuf through the type's
//! generated code, in the apimachinery envelope) and applies patches with the real JSON merge
//! patch and strategic merge patch code. What upstream code refuses, the server refuses with
//! the checker's message, and the test fails (`ApiServer` panics when dropped, naming every
//! refusal); what it merges is what the server keeps.
//!
//! One checker process per test binary, shared by every server in it (one request a line on
//! its standard input, one answer a line on its standard output). The test bed's `install`
//! builds it into its cache (`tests/testbed/gosrc.sh`); `ATOLL_TB_K8SCHECK` names another.
//! Without one the server does not start.

use super::{fail, Reply};
use serde_json::{json, Value};
use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::sync::{Mutex, OnceLock};

struct Checker {
    _child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
}

const HOW: &str = "`bash tests/testbed/testbed.sh install` builds it (tests/testbed/gosrc.sh), or set \
                   ATOLL_TB_K8SCHECK to a binary built as its header says";

fn checker() -> &'static Mutex<Checker> {
    static CHECKER: OnceLock<Mutex<Checker>> = OnceLock::new();
    CHECKER.get_or_init(|| {
        let path = std::env::var_os("ATOLL_TB_K8SCHECK").unwrap_or_else(|| {
            let cache = std::env::var_os("ATOLL_TESTBED_CACHE").unwrap_or_else(|| "/var/cache/atoll-testbed".into());
            let built = std::path::Path::new(&cache).join("gosrc/bin/k8scheck");
            assert!(
                built.exists(),
                "{} is missing: the test API server checks every request with k8scheck; {HOW}",
                built.display()
            );
            built.into_os_string()
        });
        let mut child = Command::new(&path)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("ATOLL_TB_K8SCHECK={}: {e}; {HOW}", path.to_string_lossy()));
        let stdin = child.stdin.take().unwrap();
        let stdout = BufReader::new(child.stdout.take().unwrap());
        Mutex::new(Checker { _child: child, stdin, stdout })
    })
}

/// Starts the checker (or panics saying how to get one), before a server takes requests.
pub fn ready() {
    checker();
}

/// One question: the answer's object (Null when there is none), or (HTTP code, message).
pub(super) fn ask(question: &Value) -> Result<Value, (u16, String)> {
    let mut c = checker().lock().unwrap_or_else(|e| e.into_inner());
    let mut line = serde_json::to_vec(question).unwrap();
    line.push(b'\n');
    let mut answer = String::new();
    let asked = c.stdin.write_all(&line).and_then(|_| c.stdin.flush());
    if asked.is_err() || c.stdout.read_line(&mut answer).unwrap_or(0) == 0 {
        return Err((500, "k8scheck is gone (it exited or crashed)".into()));
    }
    let a: Value = serde_json::from_str(&answer).map_err(|e| (500, format!("k8scheck answered {answer:?}: {e}")))?;
    if a["ok"] == true {
        return Ok(a["object"].clone());
    }
    let code = a["code"].as_u64().and_then(|c| u16::try_from(c).ok()).unwrap_or(500);
    Err((code, a["error"].as_str().unwrap_or("k8scheck: no reason given").to_string()))
}

/// A refusal as the server answers it, noted in `refused` for the test to fail on.
fn refusal(refused: &Mutex<Vec<String>>, what: &str, (code, msg): (u16, String)) -> Reply {
    let note = format!("{what}: {msg}");
    eprintln!("test API server: refused by k8scheck: {note}");
    refused.lock().unwrap().push(note);
    let reason = match code {
        400 => "BadRequest",
        415 => "UnsupportedMediaType",
        422 => "Invalid",
        _ => "InternalError",
    };
    fail(code, reason, msg)
}

/// A create or update body of `kind` (`Pod`, `Node`, `Lease`, `DeleteOptions`, ...), as the
/// server decodes it: the object for a protobuf body (what the server then keeps), None for a
/// JSON one (the server keeps its own parse, which the checker found sound).
pub fn body(
    refused: &Mutex<Vec<String>>,
    kind: &str,
    content_type: &str,
    bytes: &[u8],
) -> Result<Option<Value>, Reply> {
    let q = json!({"op": "body", "kind": kind, "contentType": content_type, "body": atoll::base64::encode(bytes)});
    match ask(&q) {
        Ok(Value::Null) => Ok(None),
        Ok(object) => Ok(Some(object)),
        Err(e) => Err(refusal(refused, &format!("{kind} body ({content_type})"), e)),
    }
}

/// `patch` (of `content_type`: merge or strategic merge) applied to `before` by upstream code:
/// the merged object.
pub fn patch(
    refused: &Mutex<Vec<String>>,
    kind: &str,
    content_type: &str,
    before: &Value,
    patch: &[u8],
) -> Result<Value, Reply> {
    let q = json!({"op": "patch", "kind": kind, "contentType": content_type, "before": before,
                   "body": atoll::base64::encode(patch)});
    ask(&q).map_err(|e| refusal(refused, &format!("{kind} patch ({content_type})"), e))
}

/// Fails the test with every refusal (unless it is failing already: then they are printed).
pub fn assert_none(refused: &Mutex<Vec<String>>) {
    let refused = std::mem::take(&mut *refused.lock().unwrap_or_else(|e| e.into_inner()));
    if refused.is_empty() {
        return;
    }
    let list = refused.join("\n  ");
    if std::thread::panicking() {
        eprintln!("the test API server refused, by upstream definitions:\n  {list}");
    } else {
        panic!("the test API server refused, by upstream definitions:\n  {list}");
    }
}
