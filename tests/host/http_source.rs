//! The URL source against a real HTTP server on 127.0.0.1 whose answers each test scripts:
//! Pod, PodList, List, 500, timeout, garbage, oversize, empty body, ETag 304, headers, and an
//! offline start served from the on-disk copy of the last good payload, signed payloads.

use crate::common::signing;

use atoll::pod::Policy;
use atoll::source::http::{self, HttpSourceConfig};
use atoll::source::payload::Intake;
use atoll::source::{SourceId, Update};
use atoll::trust::Trust;
use smol::channel::Receiver;
use std::io::{BufRead, BufReader, Write};
use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// What the server answers next.
#[derive(Clone)]
enum Answer {
    /// 200 with this body, an ETag, and 304 when the client already has that ETag.
    Payload {
        body: Vec<u8>,
        etag: String,
    },
    Status(u16),
    /// Files by path (404 for any other).
    Files(Vec<(String, Vec<u8>)>),
    /// Answers only after this long (longer than the client's timeout).
    Slow(Duration),
}

#[derive(Default)]
struct Log {
    /// Each request's header lines, lower-cased names.
    requests: Vec<Vec<(String, String)>>,
}

struct Server {
    port: u16,
    answer: Arc<Mutex<Answer>>,
    log: Arc<Mutex<Log>>,
}

impl Server {
    fn start(first: Answer) -> Server {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let answer = Arc::new(Mutex::new(first));
        let log = Arc::new(Mutex::new(Log::default()));
        let (a, l) = (answer.clone(), log.clone());
        std::thread::spawn(move || {
            for conn in listener.incoming().flatten() {
                let (a, l) = (a.clone(), l.clone());
                std::thread::spawn(move || serve(conn, &a, &l));
            }
        });
        Server { port, answer, log }
    }

    fn url(&self) -> String {
        format!("http://127.0.0.1:{}/pods", self.port)
    }

    fn set(&self, a: Answer) {
        *self.answer.lock().unwrap() = a;
    }

    fn requests(&self) -> Vec<Vec<(String, String)>> {
        self.log.lock().unwrap().requests.clone()
    }
}

fn serve(conn: TcpStream, answer: &Mutex<Answer>, log: &Mutex<Log>) {
    let mut reader = BufReader::new(conn.try_clone().unwrap());
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).unwrap_or(0) == 0 {
            return;
        }
        let mut headers = Vec::new();
        loop {
            let mut h = String::new();
            if reader.read_line(&mut h).unwrap_or(0) == 0 {
                return;
            }
            let h = h.trim_end();
            if h.is_empty() {
                break;
            }
            if let Some((n, v)) = h.split_once(':') {
                headers.push((n.trim().to_ascii_lowercase(), v.trim().to_string()));
            }
        }
        let path = line.split_whitespace().nth(1).unwrap_or("").to_string();
        let if_none_match = headers.iter().find(|(n, _)| n == "if-none-match").map(|(_, v)| v.clone());
        log.lock().unwrap().requests.push(headers);
        let current = answer.lock().unwrap().clone();
        let mut out = &conn;
        let response = match current {
            Answer::Payload { etag, .. } if if_none_match.as_deref() == Some(etag.as_str()) => {
                format!("HTTP/1.1 304 Not Modified\r\nETag: {etag}\r\nContent-Length: 0\r\n\r\n").into_bytes()
            }
            Answer::Payload { body, etag } => {
                let mut r =
                    format!("HTTP/1.1 200 OK\r\nETag: {etag}\r\nContent-Length: {}\r\n\r\n", body.len()).into_bytes();
                r.extend_from_slice(&body);
                r
            }
            Answer::Files(files) => match files.iter().find(|(p, _)| *p == path) {
                Some((_, body)) => {
                    let mut r = format!("HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n", body.len()).into_bytes();
                    r.extend_from_slice(body);
                    r
                }
                None => b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n".to_vec(),
            },
            Answer::Status(code) => format!("HTTP/1.1 {code} Oops\r\nContent-Length: 5\r\n\r\noops!").into_bytes(),
            Answer::Slow(d) => {
                std::thread::sleep(d);
                b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n".to_vec()
            }
        };
        if out.write_all(&response).is_err() {
            return;
        }
    }
}

fn pod_yaml(name: &str) -> String {
    format!("apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\nspec:\n  containers:\n  - name: c\n    image: busybox:1.36\n")
}

fn payload(body: &str, etag: &str) -> Answer {
    Answer::Payload { body: body.as_bytes().to_vec(), etag: format!("\"{etag}\"") }
}

struct Source {
    rx: Receiver<Update>,
    _task: smol::Task<()>,
}

fn cache_dir(name: &str) -> crate::common::Scratch {
    crate::common::Scratch::new(&format!("http-source-{name}"))
}

fn start(url: &str, headers: Vec<(String, String)>, cache: Option<PathBuf>) -> Source {
    start_trusting(url, headers, cache, None, None)
}

/// [`start`] with signed payloads trusted, the accepted versions kept at `versions`.
fn start_trusting(
    url: &str,
    headers: Vec<(String, String)>,
    cache: Option<PathBuf>,
    trust: Option<Trust>,
    versions: Option<PathBuf>,
) -> Source {
    let (tx, rx) = smol::channel::bounded(64);
    let cfg = HttpSourceConfig {
        url: url.into(),
        headers,
        check_frequency: Duration::from_millis(200),
        timeout: Duration::from_millis(700),
        ca_file: None,
        cache_dir: cache,
        intake: Intake { trust, node: "edge-1".into(), policy: Policy::default(), key: None },
        versions,
    };
    Source { rx, _task: smol::spawn(http::run(cfg, tx)) }
}

fn recv(s: &Source, within: Duration) -> Option<Update> {
    smol::block_on(async {
        let timeout = async {
            smol::Timer::after(within).await;
            None
        };
        smol::future::or(async { s.rx.recv().await.ok() }, timeout).await
    })
}

fn next(s: &Source) -> Update {
    recv(s, Duration::from_secs(5)).expect("an update within 5 s")
}

fn names(u: &Update) -> Vec<String> {
    u.pods.iter().map(|p| p.pod.metadata.name.clone()).collect()
}

#[test]
fn a_single_pod_a_pod_list_and_a_list_are_all_accepted() {
    let server = Server::start(payload(&pod_yaml("web"), "1"));
    let src = start(&server.url(), vec![], None);
    let u = next(&src);
    assert_eq!(u.source, SourceId::Http);
    assert_eq!(names(&u), vec!["web-edge-1"]);
    assert_eq!(u.pods[0].pod.metadata.annotations["kubernetes.io/config.source"], "http");

    let list = r#"{"apiVersion":"v1","kind":"PodList","items":[
        {"metadata":{"name":"a"},"spec":{"containers":[{"name":"c","image":"x:1"}]}},
        {"metadata":{"name":"b"},"spec":{"containers":[{"name":"c","image":"x:1"}]}}]}"#;
    server.set(payload(list, "2"));
    assert_eq!(names(&next(&src)), vec!["a-edge-1", "b-edge-1"]);

    let generic = format!("apiVersion: v1\nkind: List\nitems:\n- {}", pod_yaml("c").replace('\n', "\n  "));
    server.set(payload(&generic, "3"));
    assert_eq!(names(&next(&src)), vec!["c-edge-1"]);
}

#[test]
fn errors_timeouts_garbage_and_bad_items_keep_the_previous_pods() {
    let server = Server::start(payload(&pod_yaml("web"), "1"));
    let src = start(&server.url(), vec![], None);
    assert_eq!(names(&next(&src)), vec!["web-edge-1"]);
    let quiet = |what: &str| {
        if let Some(u) = recv(&src, Duration::from_millis(1200)) {
            panic!("{what}: expected the previous pods to stay, got an update {:?}", names(&u));
        }
    };
    server.set(Answer::Status(500));
    quiet("HTTP 500");
    server.set(Answer::Slow(Duration::from_millis(1500)));
    quiet("a timeout");
    server.set(payload("{{{ not yaml", "g"));
    quiet("garbage");
    let mut big = pod_yaml("big").into_bytes();
    big.resize(10 * 1024 * 1024 + 10, b' ');
    server.set(Answer::Payload { body: big, etag: "\"big\"".into() });
    quiet("an oversize body");
    let one_bad = r#"{"apiVersion":"v1","kind":"PodList","items":[
        {"metadata":{"name":"ok"},"spec":{"containers":[{"name":"c","image":"x:1"}]}},
        {"metadata":{"name":"bad"},"spec":{"containers":[{"name":"c"}]}}]}"#;
    server.set(payload(one_bad, "b"));
    quiet("one invalid item");
    // Still alive and listening: a good payload goes through.
    server.set(payload(&pod_yaml("next"), "n"));
    assert_eq!(names(&next(&src)), vec!["next-edge-1"]);
}

#[test]
fn an_empty_body_removes_the_url_pods() {
    let server = Server::start(payload(&pod_yaml("web"), "1"));
    let src = start(&server.url(), vec![], None);
    assert_eq!(names(&next(&src)), vec!["web-edge-1"]);
    server.set(payload("", "empty"));
    assert!(next(&src).pods.is_empty());
    // And the same payload as before brings them back (kubelet would not, as its cache still
    // held it).
    server.set(payload(&pod_yaml("web"), "1"));
    assert_eq!(names(&next(&src)), vec!["web-edge-1"]);
}

#[test]
fn an_unchanged_payload_costs_a_304() {
    let server = Server::start(payload(&pod_yaml("web"), "v1"));
    let src = start(&server.url(), vec![], None);
    next(&src);
    std::thread::sleep(Duration::from_millis(700));
    let reqs = server.requests();
    assert!(reqs.len() >= 2, "polled again: {}", reqs.len());
    assert_eq!(reqs[0].iter().find(|(n, _)| n == "if-none-match"), None);
    let later = &reqs[reqs.len() - 1];
    assert_eq!(later.iter().find(|(n, _)| n == "if-none-match").map(|(_, v)| v.as_str()), Some("\"v1\""));
    assert!(recv(&src, Duration::from_millis(400)).is_none(), "a 304 changes nothing");
}

#[test]
fn configured_headers_are_sent_in_order_on_every_poll() {
    let server = Server::start(payload(&pod_yaml("web"), "1"));
    let headers = vec![
        ("Authorization".to_string(), "Bearer s3cret".to_string()),
        ("X-A".to_string(), "1".to_string()),
        ("X-A".to_string(), "2".to_string()),
    ];
    let src = start(&server.url(), headers, None);
    next(&src);
    let first = &server.requests()[0];
    assert_eq!(first.iter().find(|(n, _)| n == "authorization").map(|(_, v)| v.as_str()), Some("Bearer s3cret"));
    let xa: Vec<&str> = first.iter().filter(|(n, _)| n == "x-a").map(|(_, v)| v.as_str()).collect();
    assert_eq!(xa, vec!["1", "2"]);
}

#[test]
fn an_offline_start_serves_the_last_good_payload_from_disk() {
    let cache = cache_dir("offline");
    let _ = std::fs::remove_dir_all(&cache);
    let server = Server::start(payload(&pod_yaml("web"), "v7"));
    let url = server.url();
    {
        let src = start(&url, vec![], Some(cache.to_path_buf()));
        assert_eq!(names(&next(&src)), vec!["web-edge-1"]);
    }
    let file = http::cache_path(&cache, &url);
    let record = http::read_cache(&file, &url).expect("the payload was kept on disk");
    assert_eq!(record.validators.etag.as_deref(), Some("\"v7\""));

    // "Reboot" with the server unreachable: the same URL answers 503 now.
    server.set(Answer::Status(503));
    let src = start(&url, vec![], Some(cache.to_path_buf()));
    let u = next(&src);
    assert_eq!(names(&u), vec!["web-edge-1"], "URL pods come back from the disk copy");

    // A URL nobody listens on at all, with a copy on disk under that URL: same.
    let closed = TcpListener::bind("127.0.0.1:0").unwrap();
    let dead_url = format!("http://127.0.0.1:{}/pods", closed.local_addr().unwrap().port());
    drop(closed);
    let rec = http::CacheRecord::new(&dead_url, record.validators.clone(), record.body.clone(), None);
    http::write_cache(&http::cache_path(&cache, &dead_url), &rec).unwrap();
    let src = start(&dead_url, vec![], Some(cache.to_path_buf()));
    assert_eq!(names(&next(&src)), vec!["web-edge-1"]);
    std::fs::remove_dir_all(&cache).unwrap();
}

#[test]
fn without_a_disk_copy_an_unreachable_url_delivers_nothing() {
    let closed = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://127.0.0.1:{}/pods", closed.local_addr().unwrap().port());
    drop(closed);
    let cache = cache_dir("none");
    let src = start(&url, vec![], Some(cache.to_path_buf()));
    assert!(recv(&src, Duration::from_millis(800)).is_none());
}

/// A TLS server (Debian's `openssl s_server`) with a certificate from a private CA, serving
/// `DIR/pods`. Returns the URL, the CA file and the server process.
fn tls_server(dir: &std::path::Path) -> (String, PathBuf, std::process::Child) {
    let run = |args: &[&str]| {
        let out = std::process::Command::new("openssl").args(args).current_dir(dir).output().expect("run openssl");
        assert!(out.status.success(), "openssl {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    };
    std::fs::write(dir.join("san.cnf"), "subjectAltName=IP:127.0.0.1\n").unwrap();
    run(&[
        "req",
        "-x509",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-keyout",
        "ca.key",
        "-out",
        "ca.pem",
        "-days",
        "1",
        "-subj",
        "/CN=atoll test CA",
    ]);
    run(&["req", "-newkey", "rsa:2048", "-nodes", "-keyout", "srv.key", "-out", "srv.csr", "-subj", "/CN=127.0.0.1"]);
    run(&[
        "x509",
        "-req",
        "-in",
        "srv.csr",
        "-CA",
        "ca.pem",
        "-CAkey",
        "ca.key",
        "-CAcreateserial",
        "-out",
        "srv.pem",
        "-days",
        "1",
        "-extfile",
        "san.cnf",
    ]);
    let port = {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let child = std::process::Command::new("openssl")
        .args([
            "s_server",
            "-quiet",
            "-accept",
            &format!("127.0.0.1:{port}"),
            "-cert",
            "srv.pem",
            "-key",
            "srv.key",
            "-WWW",
        ])
        .current_dir(dir)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("start openssl s_server");
    for _ in 0..100 {
        if TcpStream::connect(("127.0.0.1", port)).is_ok() {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    (format!("https://127.0.0.1:{port}/pods"), dir.join("ca.pem"), child)
}

#[test]
fn https_works_with_a_private_ca_and_fails_without_it() {
    let dir = cache_dir("tls");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("pods"), pod_yaml("secure")).unwrap();
    let (url, ca, mut server) = tls_server(&dir);

    let trusting = HttpSourceConfig {
        url: url.clone(),
        headers: vec![],
        check_frequency: Duration::from_millis(300),
        timeout: Duration::from_secs(5),
        ca_file: Some(ca),
        cache_dir: None,
        intake: Intake { node: "edge-1".into(), ..Default::default() },
        versions: None,
    };
    let (tx, rx) = smol::channel::bounded(8);
    let task = smol::spawn(http::run(trusting.clone(), tx));
    let src = Source { rx, _task: task };
    assert_eq!(names(&next(&src)), vec!["secure-edge-1"]);

    // Without the private CA the server's certificate is not trusted: no pods.
    let (tx, rx) = smol::channel::bounded(8);
    let task = smol::spawn(http::run(HttpSourceConfig { ca_file: None, ..trusting }, tx));
    let untrusting = Source { rx, _task: task };
    assert!(recv(&untrusting, Duration::from_secs(2)).is_none(), "an untrusted certificate must not deliver pods");
    let _ = server.kill();
    let _ = server.wait();
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_signed_payload_is_checked_against_url_minisig_and_an_older_one_is_refused() {
    let keys = cache_dir("signed-keys");
    let _ = std::fs::remove_dir_all(&keys);
    std::fs::create_dir_all(&keys).unwrap();
    let trust = Trust { keys: vec![signing::key(&keys, "fleet")], require: true };
    let versions = keys.join("versions.json");
    let v = |label: &str| pod_yaml("web").replace("spec:", &format!("  labels: {{v: \"{label}\"}}\nspec:"));
    let files = |body: &str, sig: Option<Vec<u8>>| {
        let mut f = vec![("/pods".to_string(), body.as_bytes().to_vec())];
        f.extend(sig.map(|s| ("/pods.minisig".to_string(), s)));
        Answer::Files(f)
    };
    let server = Server::start(files(&v("1"), Some(signing::sign(&keys, &v("1"), "fleet", 1))));
    let src = start_trusting(&server.url(), vec![], None, Some(trust.clone()), Some(versions.clone()));
    let first = next(&src);
    assert_eq!(names(&first), vec!["web-edge-1"]);
    let v1 = first.pods[0].uid.clone();

    // Newer and signed: taken; the signature was fetched from <url>.minisig.
    server.set(files(&v("2"), Some(signing::sign(&keys, &v("2"), "fleet", 2))));
    let second = next(&src);
    assert_ne!(second.pods[0].uid, v1);
    drop(src);

    // Version 1 again, with its own good signature: a fresh source with the recorded versions
    // refuses it (nothing is delivered), one without them takes it.
    server.set(files(&v("1"), Some(signing::sign(&keys, &v("1"), "fleet", 1))));
    let replayed = start_trusting(&server.url(), vec![], None, Some(trust.clone()), Some(versions.clone()));
    assert!(recv(&replayed, Duration::from_millis(1500)).is_none(), "a replayed older version was taken");
    let fresh = start_trusting(&server.url(), vec![], None, Some(trust.clone()), None);
    assert_eq!(next(&fresh).pods[0].uid, v1, "version 1 is well signed");

    // Unsigned, or altered after signing: refused.
    for answer in [files(&v("3"), None), files(&v("3"), Some(signing::sign(&keys, &v("4"), "fleet", 4)))] {
        server.set(answer);
        let src = start_trusting(&server.url(), vec![], None, Some(trust.clone()), None);
        assert!(recv(&src, Duration::from_millis(1500)).is_none(), "an unsigned or altered payload was taken");
    }
    let untrusting = start(&server.url(), vec![], None);
    assert_eq!(names(&next(&untrusting)), vec!["web-edge-1"], "the same payload without manifestTrust");
    let _ = std::fs::remove_dir_all(&keys);
}

#[test]
fn a_list_brings_configmaps_and_secrets_with_its_pods_also_offline_from_disk() {
    use std::os::unix::fs::PermissionsExt;
    let cache = cache_dir("objects");
    let _ = std::fs::remove_dir_all(&cache);
    let list = r#"{"apiVersion":"v1","kind":"List","items":[
        {"apiVersion":"v1","kind":"Pod","metadata":{"name":"web"},"spec":{"containers":[{"name":"c","image":"x:1"}]}},
        {"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"cfg"},"data":{"a":"b"}},
        {"apiVersion":"v1","kind":"Secret","metadata":{"name":"db"},"data":{"password":"aHVudGVyMg=="}}]}"#;
    let server = Server::start(payload(list, "1"));
    let url = server.url();
    {
        let src = start(&url, vec![], Some(cache.to_path_buf()));
        let u = next(&src);
        assert_eq!(names(&u), vec!["web-edge-1"]);
        let objects: Vec<String> = u.objects.iter().map(|o| format!("{} {}", o.kind.as_str(), o.key())).collect();
        assert_eq!(objects, vec!["ConfigMap default/cfg", "Secret default/db"]);
        assert_eq!(u.objects[1].data["password"], b"hunter2");
        // A bad object refuses the whole payload; the last good one stays.
        server.set(payload(&list.replace(r#""name":"cfg""#, r#""name":"Bad_Cfg""#), "2"));
        assert!(recv(&src, Duration::from_millis(1500)).is_none(), "a refused payload was delivered");
    }
    // The disk copy, root's alone, brings the objects back on an offline start.
    let file = http::cache_path(&cache, &url);
    assert_eq!(std::fs::metadata(&file).unwrap().permissions().mode() & 0o077, 0);
    server.set(Answer::Status(503));
    let src = start(&url, vec![], Some(cache.to_path_buf()));
    assert_eq!(next(&src).objects.len(), 2, "the objects came back from the disk copy");
    std::fs::remove_dir_all(&cache).unwrap();
}

/// The answers of a URL and of its signature (`/pods`, `/pods.minisig`).
fn signed_files(body: &str, sig: Option<Vec<u8>>) -> Answer {
    let mut f = vec![("/pods".to_string(), body.as_bytes().to_vec())];
    f.extend(sig.map(|s| ("/pods.minisig".to_string(), s)));
    Answer::Files(f)
}

#[test]
fn whoever_answers_the_url_cannot_empty_replay_or_rebind_a_signed_payload() {
    let keys = cache_dir("url-attacker-keys");
    let cache = cache_dir("url-attacker-cache");
    let _ = std::fs::remove_dir_all(&keys);
    let _ = std::fs::remove_dir_all(&cache);
    std::fs::create_dir_all(&keys).unwrap();
    let trust = Trust { keys: vec![signing::key(&keys, "fleet")], require: true };
    let versions = keys.join("versions.json");
    let v = |label: &str| pod_yaml("web").replace("spec:", &format!("  labels: {{v: \"{label}\"}}\nspec:"));
    let sign = |text: &str, comment: &str| Some(signing::sign_with(&keys, text, "fleet", Some(comment)));
    let server = Server::start(signed_files(&v("5"), sign(&v("5"), "serial=5")));
    let start = || {
        start_trusting(&server.url(), vec![], Some(cache.to_path_buf()), Some(trust.clone()), Some(versions.clone()))
    };
    let src = start();
    let v5 = next(&src).pods[0].uid.clone();

    // An unsigned empty 200 removes nothing (the signature is checked before the body is
    // read), nor does an empty body signed long ago, nor one signed for another box.
    for (body, sig) in [
        ("", None),
        ("\n", sign("\n", "serial=4")),
        ("\n", sign("\n", "timestamp:1700000000")),
        ("\n", sign("\n", "serial=9 node=gw-2")),
        (v("9").as_str(), sign(&v("9"), "serial=9 node=gw-2")),
    ] {
        server.set(signed_files(body, sig));
        assert!(recv(&src, Duration::from_millis(1200)).is_none(), "{body:?} was taken");
    }
    // One signed for this box (or for every box) is taken.
    server.set(signed_files(&v("6"), sign(&v("6"), "serial=6 node=gw-1,edge-1")));
    let v6 = next(&src).pods[0].uid.clone();
    assert_ne!(v6, v5);
    drop(src);

    // An offline restart serves the copy on disk, checked again: version 6, not the empty ones.
    server.set(Answer::Status(503));
    assert_eq!(next(&start()).pods[0].uid, v6);

    // Version 5 again with its own good signature, after a restart: refused, so the copy on
    // disk runs (as for any payload refused at boot), and stays version 6.
    server.set(signed_files(&v("5"), sign(&v("5"), "serial=5")));
    let src = start();
    assert_eq!(next(&src).pods[0].uid, v6, "a replay was taken");
    assert!(recv(&src, Duration::from_millis(1000)).is_none());
    drop(src);
    server.set(Answer::Status(503));
    assert_eq!(next(&start()).pods[0].uid, v6);
    let _ = std::fs::remove_dir_all(&keys);
    let _ = std::fs::remove_dir_all(&cache);
}

#[test]
fn a_copy_cached_before_signatures_were_required_is_not_served_after() {
    let keys = cache_dir("url-before-trust-keys");
    let cache = cache_dir("url-before-trust-cache");
    let _ = std::fs::remove_dir_all(&keys);
    let _ = std::fs::remove_dir_all(&cache);
    std::fs::create_dir_all(&keys).unwrap();
    let server = Server::start(payload(&pod_yaml("web"), "1"));
    assert_eq!(names(&next(&start(&server.url(), vec![], Some(cache.to_path_buf())))), vec!["web-edge-1"]);
    // manifestTrust is turned on; the box reboots offline: the unsigned copy does not run.
    server.set(Answer::Status(503));
    let trust = Trust { keys: vec![signing::key(&keys, "fleet")], require: true };
    let src = start_trusting(&server.url(), vec![], Some(cache.to_path_buf()), Some(trust), None);
    assert!(recv(&src, Duration::from_millis(1500)).is_none(), "the unsigned copy was served under require");
    let _ = std::fs::remove_dir_all(&keys);
    let _ = std::fs::remove_dir_all(&cache);
}
