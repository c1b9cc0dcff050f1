//! The client against small servers on 127.0.0.1: kept connections, a kept one the server
//! closed, the deadline, a CONNECT proxy, Basic authorization from the URL; URLs and proxy
//! settings taken apart.

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
    let heads = heads.lock().unwrap();
    assert_eq!(super::super::header(&heads[0], "authorization"), Some("Basic dTpw"));
    assert_eq!(super::super::header(&heads[1], "authorization"), Some("Bearer t"));
    assert!(a.call("GET", &url, &[("X", "a\r\nInjected: 1")], b"", None).is_err(), "no header injection");
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
    let p = |vars: &[(&'static str, &'static str)]| {
        let vars = vars.to_vec();
        Proxy::from_vars(&move |k| vars.iter().find(|(n, _)| *n == k).map(|(_, v)| v.to_string()))
    };
    assert_eq!(p(&[]), None);
    assert_eq!(p(&[("HTTP_PROXY", "socks5://h:1080")]), None, "only http:// proxies");
    let chosen = p(&[("HTTP_PROXY", "http://second:1"), ("ALL_PROXY", "first:3128")]).unwrap();
    assert_eq!((chosen.url.host.as_str(), chosen.url.port), ("first", 3128), "ALL_PROXY first");
    let with =
        p(&[("https_proxy", "http://h:1"), ("NO_PROXY", " .corp.example, exact.example ,*.wild.example")]).unwrap();
    for (host, through) in [
        ("a.corp.example", false),
        ("corp.example", true),
        ("exact.example", false),
        ("sub.exact.example", true),
        ("x.wild.example", false),
        ("elsewhere", true),
    ] {
        assert_eq!(with.serves(host), through, "{host}");
    }
    let all = p(&[("http_proxy", "http://h:1"), ("no_proxy", "*")]).unwrap();
    assert!(!all.serves("anything"));
}
