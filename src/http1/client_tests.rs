//! The client against small servers on 127.0.0.1: kept connections, a kept one the server
//! closed, one that closes on a request (retried only when idempotent), the deadline over a
//! server that trickles, a CONNECT proxy, Basic authorization from the URL; URLs taken apart.

use super::*;
use std::net::TcpListener;
use std::sync::atomic::{AtomicUsize, Ordering};

fn agent() -> Agent {
    Agent::new(crate::tls::insecure_client(), "atoll-test", Duration::from_secs(5)).with_proxy(None)
}

/// A server answering each request on a connection with `answer` (after reading its head;
/// `close`: then closing), counting connections, keeping what the heads said.
fn serve(answer: &'static [u8], close: bool) -> (u16, Arc<AtomicUsize>, Arc<Mutex<Vec<String>>>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let (count, heads) = (Arc::new(AtomicUsize::new(0)), Arc::new(Mutex::new(Vec::new())));
    let (c, h) = (count.clone(), heads.clone());
    std::thread::spawn(move || {
        for s in listener.incoming().map_while(Result::ok) {
            c.fetch_add(1, Ordering::SeqCst);
            let h = h.clone();
            std::thread::spawn(move || {
                let mut r = BufReader::new(s);
                while let Some(head) = request_head(&mut r) {
                    h.lock().unwrap().push(head);
                    if r.get_mut().write_all(answer).is_err() || close {
                        return;
                    }
                }
            });
        }
    });
    (port, count, heads)
}

/// A request's head as a server reads it (no body is sent with the tests' requests but a
/// POST's, which follows its head: read past it).
fn request_head(r: &mut BufReader<TcpStream>) -> Option<String> {
    let mut head = String::new();
    loop {
        let mut line = String::new();
        if r.read_line(&mut line).ok()? == 0 {
            return None;
        }
        if line == "\r\n" {
            break;
        }
        head.push_str(&line);
    }
    let n: usize = super::super::header(&head, "content-length").and_then(|n| n.parse().ok()).unwrap_or(0);
    let mut body = vec![0u8; n];
    r.read_exact(&mut body).ok()?;
    Some(head)
}

const OK: &[u8] = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok";

#[test]
fn a_connection_read_to_its_end_is_kept_and_one_the_server_closed_is_replaced() {
    let (port, count, heads) = serve(OK, false);
    let a = agent();
    let url = format!("http://127.0.0.1:{port}/x?y=1");
    for _ in 0..3 {
        let r = a.call("GET", &url, &[("Accept", "a/b")], b"", None).unwrap();
        assert_eq!((r.status, r.read_to_vec(10).unwrap()), (200, b"ok".to_vec()));
    }
    assert_eq!(count.load(Ordering::SeqCst), 1, "one connection for three requests");
    let head = heads.lock().unwrap()[0].clone();
    assert!(head.starts_with("GET /x?y=1 HTTP/1.1\r\n"), "{head}");
    assert_eq!(super::super::header(&head, "host"), Some(format!("127.0.0.1:{port}").as_str()));
    assert_eq!(super::super::header(&head, "user-agent"), Some("atoll-test"));

    let (port, count, _) = serve(OK, true);
    let url = format!("http://127.0.0.1:{port}/");
    for _ in 0..3 {
        let r = a.call("POST", &url, &[], b"{}", None).unwrap();
        assert_eq!(r.read_to_vec(10).unwrap(), b"ok");
        std::thread::sleep(Duration::from_millis(50)); // the server's close arrives
    }
    assert_eq!(count.load(Ordering::SeqCst), 3, "each kept connection the server closed was replaced");
}

#[test]
fn a_server_that_never_answers_is_given_up_at_the_deadline() {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/", listener.local_addr().unwrap());
    let started = Instant::now();
    let e = agent().call("GET", &url, &[], b"", Some(Duration::from_millis(300))).err().unwrap();
    assert!(started.elapsed() < Duration::from_secs(3), "{:?}", started.elapsed());
    assert!(e.contains("timed out") || e.contains("Resource temporarily unavailable"), "{e}");
    drop(listener);
}

#[test]
fn a_proxy_is_asked_to_connect_and_no_proxy_hosts_are_dialled_directly() {
    let (port, count, heads) = serve(OK, false);
    // A CONNECT proxy: reads the CONNECT head, answers 200, then splices both ways.
    let proxy = TcpListener::bind("127.0.0.1:0").unwrap();
    let proxy_port = proxy.local_addr().unwrap().port();
    let asked = Arc::new(Mutex::new(Vec::new()));
    let seen = asked.clone();
    std::thread::spawn(move || {
        for s in proxy.incoming().map_while(Result::ok) {
            let mut r = BufReader::new(s);
            let Some(head) = request_head(&mut r) else { continue };
            let target = head.split(' ').nth(1).unwrap_or_default().to_string();
            seen.lock().unwrap().push(head);
            let mut up = TcpStream::connect(target).unwrap();
            r.get_mut().write_all(b"HTTP/1.1 200 Connection established\r\n\r\n").unwrap();
            let (mut down_r, mut up_w) = (r.get_ref().try_clone().unwrap(), up.try_clone().unwrap());
            std::thread::spawn(move || std::io::copy(&mut down_r, &mut up_w));
            let mut down_w = r.into_inner();
            std::thread::spawn(move || std::io::copy(&mut up, &mut down_w));
        }
    });
    let vars = |no: &'static str| {
        let no = no.to_string();
        move |k: &str| match k {
            "https_proxy" => Some(format!("user:pw@127.0.0.1:{proxy_port}")),
            "no_proxy" => Some(no.clone()),
            _ => None,
        }
    };
    let a = agent().with_proxy(Proxy::from_vars(&vars("example.com")));
    let r = a.call("GET", &format!("http://127.0.0.1:{port}/p"), &[], b"", None).unwrap();
    assert_eq!(r.read_to_vec(10).unwrap(), b"ok");
    let connect = asked.lock().unwrap().first().cloned().expect("the proxy was asked");
    assert!(connect.starts_with(&format!("CONNECT 127.0.0.1:{port} HTTP/1.1")), "{connect}");
    assert_eq!(super::super::header(&connect, "proxy-authorization"), Some("Basic dXNlcjpwdw=="));
    assert!(heads.lock().unwrap()[0].starts_with("GET /p "), "the request itself went through the tunnel");

    let a = agent().with_proxy(Proxy::from_vars(&vars("localhost,127.0.0.1")));
    let r = a.call("GET", &format!("http://127.0.0.1:{port}/q"), &[], b"", None).unwrap();
    assert_eq!(r.read_to_vec(10).unwrap(), b"ok");
    assert_eq!(asked.lock().unwrap().len(), 1, "NO_PROXY: dialled directly");
    assert_eq!(count.load(Ordering::SeqCst), 2);
}

#[test]
fn a_urls_user_is_sent_as_basic_unless_the_request_has_its_own() {
    let (port, _, heads) = serve(OK, false);
    let a = agent();
    let url = format!("http://u:p@127.0.0.1:{port}/");
    a.call("GET", &url, &[], b"", None).unwrap().read_to_vec(10).unwrap();
    a.call("GET", &url, &[("Authorization", "Bearer t")], b"", None).unwrap().read_to_vec(10).unwrap();
    assert!(a.call("GET", &url, &[("X", "a\r\nInjected: 1")], b"", None).is_err(), "no header injection");
    assert!(a.call("GET", &url, &[("X Y", "1")], b"", None).is_err(), "a name that is not a token");
    assert!(a.call("GET", &url, &[("Content-Length", "0")], b"", None).is_err(), "the body's length is ours");
    a.call("GET", &format!("http://u@127.0.0.1:{port}/"), &[], b"", None).unwrap().read_to_vec(10).unwrap();
    a.call("GET", &format!("http://u%40x:p%3A@127.0.0.1:{port}/"), &[], b"", None).unwrap().read_to_vec(10).unwrap();
    let heads = heads.lock().unwrap();
    assert_eq!(super::super::header(&heads[0], "authorization"), Some("Basic dTpw"));
    assert_eq!(super::super::header(&heads[1], "authorization"), Some("Bearer t"));
    assert_eq!(super::super::header(&heads[2], "authorization"), Some("Basic dTo="), "user alone: user:");
    assert_eq!(super::super::header(&heads[3], "authorization"), Some("Basic dUB4OnA6"), "percent-decoded: u@x:p:");
}

#[test]
fn urls_and_proxy_settings_are_taken_apart() {
    let u = Url::parse("HTTPS://a:b@Host.example:8443/p/q?x=1#frag").unwrap();
    assert_eq!(
        u,
        Url {
            https: true,
            host: "Host.example".into(),
            port: 8443,
            target: "/p/q?x=1".into(),
            userinfo: Some("a:b".into())
        }
    );
    assert_eq!(Url::parse("http://[::1]/").unwrap().bare_host(), "::1");
    assert_eq!(Url::parse("http://[::1]:81").unwrap().port, 81);
    assert_eq!(Url::parse("http://h?x").unwrap().target, "/?x");
    for bad in ["ftp://h/", "h/p", "http:///p", "http://h:x/", "http://h/a b", "http://h/\r\nX: y"] {
        assert!(Url::parse(bad).is_err(), "{bad}");
    }
}

#[test]
fn a_request_the_kept_connection_lost_is_sent_again_only_when_idempotent() {
    // Each connection answers its first request and closes, unanswered, on its second.
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let heads = Arc::new(Mutex::new(Vec::new()));
    let h = heads.clone();
    std::thread::spawn(move || {
        for s in listener.incoming().map_while(Result::ok) {
            let h = h.clone();
            std::thread::spawn(move || {
                let mut r = BufReader::new(s);
                for n in 0..2 {
                    let Some(head) = request_head(&mut r) else { return };
                    h.lock().unwrap().push(head.lines().next().unwrap_or_default().to_string());
                    if n == 0 {
                        let _ = r.get_mut().write_all(OK);
                    }
                }
            });
        }
    });
    let a = agent();
    let url = format!("http://127.0.0.1:{port}/");
    a.call("GET", &url, &[], b"", None).unwrap().read_to_vec(10).unwrap();
    assert_eq!(a.call("GET", &url, &[], b"", None).unwrap().read_to_vec(10).unwrap(), b"ok", "sent again");
    let e = a.call("POST", &url, &[], b"{}", None).err().expect("a POST is not sent twice");
    assert!(e.contains("closed"), "{e}");
    let seen = heads.lock().unwrap().clone();
    assert_eq!(seen.iter().filter(|l| l.starts_with("POST")).count(), 1, "{seen:?}");
    assert_eq!(seen.iter().filter(|l| l.starts_with("GET")).count(), 3, "{seen:?}");
}

#[test]
fn a_tls_server_that_trickles_is_given_up_at_the_deadline() {
    // A TLS record header for 16 KiB, then a byte every 50 ms: each read would wait less than
    // a per-read timeout, for minutes.
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for mut s in listener.incoming().map_while(Result::ok) {
            std::thread::spawn(move || {
                let _ = s.write_all(&[0x16, 0x03, 0x03, 0x40, 0x00]);
                while s.write_all(&[0x02]).is_ok() {
                    std::thread::sleep(Duration::from_millis(50));
                }
            });
        }
    });
    let started = Instant::now();
    let url = format!("https://127.0.0.1:{port}/");
    let e = agent().call("GET", &url, &[], b"", Some(Duration::from_millis(400))).err().unwrap();
    assert!(started.elapsed() < Duration::from_secs(3), "{:?}: {e}", started.elapsed());
}
