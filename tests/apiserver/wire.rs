//! The API server's HTTP/1.1 side and what both protocols share: connections (bytes
//! counted), the token bucket, the request's fate (`decide`: faults, authentication,
//! throttling), the request log, and the answers' encoding, headers and dates.

use super::*;

/// A token bucket: `rate` requests a second, `burst` at once; beyond, 429 with Retry-After.
pub(super) struct Limit {
    pub(super) rate: f64,
    pub(super) burst: f64,
    pub(super) tokens: f64,
    pub(super) last: Instant,
    pub(super) retry_after: u64,
}

/// Counts bytes both ways.
pub(super) struct Counting {
    pub(super) inner: TcpStream,
    pub(super) state: Arc<State>,
}

impl Read for Counting {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.state.bytes_in.fetch_add(n as u64, Ordering::SeqCst);
        Ok(n)
    }
}

impl Write for Counting {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.state.bytes_out.fetch_add(n as u64, Ordering::SeqCst);
        Ok(n)
    }
    fn flush(&mut self) -> std::io::Result<()> {
        self.inner.flush()
    }
}

pub(super) struct Request {
    /// `HTTP/1.1` or `HTTP/2`.
    pub(super) proto: &'static str,
    pub(super) method: String,
    pub(super) path: String,
    /// Lower-cased names; a repeated header's last value.
    pub(super) headers: HashMap<String, String>,
    /// Every header line in order (`X-Stream-Protocol-Version` comes once per protocol).
    pub(super) lines: Vec<(String, String)>,
    pub(super) body: Vec<u8>,
}

pub(super) enum Reply {
    Json(u16, Value),
    Watch(WatchAsked),
}

/// A watch as asked: the resource, the field selector, where to start, how long, and whether
/// bookmarks were asked for (`allowWatchBookmarks`).
pub(super) struct WatchAsked {
    pub resource: &'static str,
    pub selector: Vec<(String, String)>,
    pub from: Option<u64>,
    pub timeout: Duration,
    pub bookmarks: bool,
}

pub(super) fn connection(state: &Arc<State>, stream: TcpStream, id: u64) {
    let config = state.tls.lock().unwrap().clone();
    let conn = rustls::ServerConnection::new(config).unwrap();
    let _ = stream.set_read_timeout(Some(Duration::from_secs(120)));
    let mut tls = rustls::StreamOwned::new(conn, Counting { inner: stream, state: state.clone() });
    while tls.conn.is_handshaking() {
        if tls.conn.complete_io(&mut tls.sock).is_err() {
            return;
        }
    }
    let cert_user = tls.conn.peer_certificates().and_then(|c| c.first()).and_then(|c| {
        state.certs.lock().unwrap().iter().find(|(der, _)| der == c.as_ref()).map(|(_, user)| user.clone())
    });
    if tls.conn.alpn_protocol() == Some(b"h2".as_slice()) {
        return h2::serve(state, tls, cert_user, id);
    }
    loop {
        let Some(req) = read_request(&mut tls) else { return };
        let arrived = Instant::now();
        let Some((user, outcome)) = decide(state, &req, cert_user.as_deref()) else { return };
        let user = user.unwrap_or_default();
        let ok = match outcome {
            Outcome::Proxy(t) => {
                let status = node_proxy::serve(state, tls, &req, &t);
                record(state, &req, arrived, status, &user, 0);
                return;
            }
            Outcome::Reply(Reply::Json(status, body), retry_after) => {
                let answer = encoded(req.headers.get("accept").map(String::as_str), &body);
                record(state, &req, arrived, status, &user, answer.1.len());
                write_answer(&mut tls, answer, status, retry_after).is_ok()
            }
            Outcome::Reply(Reply::Watch(mut asked), _) => {
                let limit = state.faults.lock().unwrap().watch_limit;
                asked.timeout = limit.map_or(asked.timeout, |l| l.min(asked.timeout));
                record(state, &req, arrived, 200, &user, 0);
                // A watch that ran its course leaves the connection open for more.
                match Chunked::start(&mut tls) {
                    Ok(mut out) => stream_watch(state, &mut out, &asked).unwrap_or(false),
                    Err(_) => false,
                }
            }
        };
        if !ok {
            return;
        }
    }
}

/// Whether the rate limit turns this request away: its Retry-After if so.
pub(super) fn throttled(state: &State) -> Option<u64> {
    let mut limit = state.limit.lock().unwrap();
    let l = limit.as_mut()?;
    let now = Instant::now();
    l.tokens = (l.tokens + now.duration_since(l.last).as_secs_f64() * l.rate).min(l.burst);
    l.last = now;
    if l.tokens >= 1.0 {
        l.tokens -= 1.0;
        None
    } else {
        Some(l.retry_after)
    }
}

/// What the server makes of a request.
pub(super) enum Outcome {
    /// An answer, and its `Retry-After`.
    Reply(Reply, Option<u64>),
    /// Sent on to the node (`node_proxy`).
    Proxy(Target),
}

/// Who sent `req` (its client certificate's user, else its token's) and what the server
/// makes of it, injected delays and failures first; None when the server is down.
pub(super) fn decide(state: &Arc<State>, req: &Request, cert_user: Option<&str>) -> Option<(Option<String>, Outcome)> {
    if !state.up.load(Ordering::SeqCst) {
        return None;
    }
    let token_user = req
        .headers
        .get("authorization")
        .and_then(|a| a.strip_prefix("Bearer "))
        .and_then(|t| state.tokens.lock().unwrap().get(t.trim()).cloned());
    let user = cert_user.map(str::to_string).or(token_user);
    let delay = state.faults.lock().unwrap().delay;
    std::thread::sleep(delay);
    let injected = {
        let mut f = state.faults.lock().unwrap();
        if f.unavailable {
            Some((503, None, None))
        } else {
            f.fail_next.pop_front()
        }
    };
    let outcome = match (&user, injected) {
        (_, Some((code, ra, Some(body)))) => Outcome::Reply(Reply::Json(code, body), ra),
        (_, Some((code, ra, None))) => {
            Outcome::Reply(Reply::Json(code, status_obj(code, reason_for(code), "injected failure")), ra)
        }
        (None, None) => Outcome::Reply(Reply::Json(401, status_obj(401, "Unauthorized", "Unauthorized")), None),
        (Some(_), None) if let Some(ra) = throttled(state) => {
            let msg = "Too many requests, please try again later.";
            let mut body = status_obj(429, "TooManyRequests", msg);
            body["details"] = json!({"retryAfterSeconds": ra});
            Outcome::Reply(Reply::Json(429, body), Some(ra))
        }
        (Some(u), None) => match parse_target(&req.path).filter(node_proxy::proxied) {
            Some(t) => Outcome::Proxy(t),
            None => Outcome::Reply(route(state, req, u), None),
        },
    };
    Some((user, outcome))
}

pub(super) fn record(state: &State, req: &Request, arrived: Instant, status: u16, user: &str, answer: usize) {
    state.log.lock().unwrap().push(Logged {
        at: arrived,
        method: req.method.clone(),
        path: req.path.clone(),
        status,
        user: user.into(),
        proto: req.proto,
        content_type: req.headers.get("content-type").cloned().unwrap_or_default(),
        body: req.body.len(),
        answer,
    });
}

pub(super) fn read_request(r: &mut impl Read) -> Option<Request> {
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        if r.read(&mut byte).ok()? == 0 || head.len() > 64 << 10 {
            return None;
        }
        head.push(byte[0]);
    }
    let text = String::from_utf8_lossy(&head).into_owned();
    let mut lines = text.split("\r\n");
    let mut first = lines.next()?.split(' ');
    let (method, path) = (first.next()?.to_string(), first.next()?.to_string());
    let mut headers = HashMap::new();
    let mut all = Vec::new();
    for l in lines.filter(|l| !l.is_empty()) {
        let (k, v) = l.split_once(':')?;
        headers.insert(k.trim().to_ascii_lowercase(), v.trim().to_string());
        all.push((k.trim().to_ascii_lowercase(), v.trim().to_string()));
    }
    let len: usize = headers.get("content-length").and_then(|v| v.parse().ok()).unwrap_or(0);
    let mut body = vec![0u8; len];
    r.read_exact(&mut body).ok()?;
    Some(Request { proto: "HTTP/1.1", method, path, headers, lines: all, body })
}

/// An answer's body and content type: protobuf when the client puts it first and the kind has
/// it, JSON otherwise.
pub(super) fn encoded(accept: Option<&str>, body: &Value) -> (&'static str, Vec<u8>) {
    match proto::wanted(accept).then(|| proto::encode(body)).flatten() {
        Some(bytes) => (proto::CONTENT_TYPE, bytes),
        None => ("application/json", serde_json::to_vec(body).unwrap()),
    }
}

pub(super) fn write_json(
    w: &mut impl Write,
    accept: Option<&str>,
    status: u16,
    body: &Value,
    retry_after: Option<u64>,
) -> std::io::Result<()> {
    write_answer(w, encoded(accept, body), status, retry_after)
}

/// An answer already encoded: its content type and bytes.
pub(super) fn write_answer(
    w: &mut impl Write,
    (content_type, bytes): (&'static str, Vec<u8>),
    status: u16,
    retry_after: Option<u64>,
) -> std::io::Result<()> {
    let mut head = format!("HTTP/1.1 {status} {}\r\n", reason_for(status));
    for (k, v) in answer_headers(content_type, Some(bytes.len()), retry_after) {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    head.push_str("\r\n");
    w.write_all(head.as_bytes())?;
    w.write_all(&bytes)?;
    w.flush()
}

/// The headers of kube-apiserver's answers: its audit ID and API Priority and Fairness
/// flow schema and priority level (fixed per server for one user: the node's), no caching,
/// the date; `Retry-After` on a 429 or 503.
pub(super) fn answer_headers(
    content_type: &str,
    len: Option<usize>,
    retry_after: Option<u64>,
) -> Vec<(&'static str, String)> {
    let mut h = vec![
        ("Audit-Id", uuid()),
        ("Cache-Control", "no-cache, private".to_string()),
        ("Content-Type", content_type.to_string()),
        ("X-Kubernetes-Pf-Flowschema-Uid", "6c4e7f0a-3b1d-4d5e-9a8b-2f1c0e9d8a71".to_string()),
        ("X-Kubernetes-Pf-Prioritylevel-Uid", "0d9a8c7b-6e5f-4a3b-8c2d-1e0f9a8b7c6d".to_string()),
        ("Date", http_date(SystemTime::now())),
    ];
    if let Some(n) = len {
        h.push(("Content-Length", n.to_string()));
    }
    if let Some(ra) = retry_after {
        h.push(("Retry-After", ra.to_string()));
    }
    h
}

/// A random version-4 UUID (an audit ID).
pub(super) fn uuid() -> String {
    use std::hash::{BuildHasher, Hasher};
    let mut bytes = [0u8; 16];
    for half in bytes.chunks_mut(8) {
        let mut h = std::collections::hash_map::RandomState::new().build_hasher();
        h.write_u128(SystemTime::now().duration_since(SystemTime::UNIX_EPOCH).unwrap().as_nanos());
        half.copy_from_slice(&h.finish().to_le_bytes());
    }
    bytes[6] = (bytes[6] & 0x0f) | 0x40;
    bytes[8] = (bytes[8] & 0x3f) | 0x80;
    let hex = |r: std::ops::Range<usize>| bytes[r].iter().map(|b| format!("{b:02x}")).collect::<String>();
    format!("{}-{}-{}-{}-{}", hex(0..4), hex(4..6), hex(6..8), hex(8..10), hex(10..16))
}

/// An HTTP date (RFC 9110's IMF-fixdate), as Go's server sends.
pub(super) fn http_date(t: SystemTime) -> String {
    let secs = t.duration_since(SystemTime::UNIX_EPOCH).unwrap().as_secs();
    let day = ["Thu", "Fri", "Sat", "Sun", "Mon", "Tue", "Wed"][(secs / 86_400 % 7) as usize];
    let iso = rfc3339(t); // 2026-11-27T00:30:00Z
    let month = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"]
        [iso.get(5..7).unwrap().parse::<usize>().unwrap() - 1];
    let part = |r: std::ops::Range<usize>| iso.get(r).unwrap();
    format!("{day}, {} {month} {} {} GMT", part(8..10), part(0..4), part(11..19))
}

pub(super) fn reason_for(code: u16) -> &'static str {
    match code {
        200 => "OK",
        201 => "Created",
        400 => "BadRequest",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "NotFound",
        405 => "MethodNotAllowed",
        409 => "Conflict",
        410 => "Gone",
        415 => "UnsupportedMediaType",
        422 => "Invalid",
        429 => "TooManyRequests",
        503 => "ServiceUnavailable",
        _ => "InternalError",
    }
}

pub(super) fn status_obj(code: u16, reason: &str, message: &str) -> Value {
    json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure", "message": message, "reason": reason, "code": code})
}

pub(super) fn fail(code: u16, reason: &str, message: impl Into<String>) -> Reply {
    Reply::Json(code, status_obj(code, reason, &message.into()))
}

pub(super) fn now_rfc3339() -> String {
    rfc3339(SystemTime::now())
}

/// `YYYY-MM-DDTHH:MM:SS[.fraction]Z` as seconds and nanoseconds since the epoch.
pub(super) fn parse_rfc3339(t: &str) -> Option<(u64, u32)> {
    let (date, rest) = t.split_once('T')?;
    let mut d = date.split('-').map(|x| x.parse::<i64>().ok());
    let (y, m, day) = (d.next()??, d.next()??, d.next()??);
    let rest = rest.strip_suffix('Z')?;
    let (hms, frac) = rest.split_once('.').unwrap_or((rest, ""));
    let mut h = hms.split(':').map(|x| x.parse::<u64>().ok());
    let (hh, mm, ss) = (h.next()??, h.next()??, h.next()??);
    let nanos = if frac.is_empty() { 0 } else { format!("{frac:0<9}").get(..9)?.parse().ok()? };
    // Civil date to days (Howard Hinnant's algorithm).
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let doy = (153 * ((m + 9) % 12) + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = u64::try_from(era * 146_097 + doe - 719_468).ok()?;
    Some((days * 86_400 + hh * 3600 + mm * 60 + ss, nanos))
}

pub(super) fn rfc3339(t: SystemTime) -> String {
    let secs = t.duration_since(SystemTime::UNIX_EPOCH).unwrap().as_secs();
    // Days to civil date (Howard Hinnant's algorithm).
    let (days, rem) = ((secs / 86_400) as i64, secs % 86_400);
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!("{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z", rem / 3600, rem % 3600 / 60, rem % 60)
}
