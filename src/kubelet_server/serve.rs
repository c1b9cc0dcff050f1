//! The listener: TLS 1.2/1.3 (rustls), client certificates asked for and verified against
//! `clientCAFile` when one is given (optional, so a bearer token can stand in), one request
//! per connection. Nothing is routed before the request is authenticated and authorized
//! (`auth`). Errors before a response starts are plain text, as kubelet's.
//!
//! Until a connection has finished TLS and sent its request head it is *pending*
//! ([`crate::gate`]): [`PENDING`] sets how many at once, how many from one address, and 10 s
//! for the whole phase; idle ones (no finished handshake) are closed first to make room.
//! Connections the konnectivity tunnel hands over in-process have a gate of their own, so
//! nobody on the LAN or the box can crowd out the API server's way in from behind NAT.

use super::auth::{Auth, Credentials, Decision, Reviewer};
use super::error::{Error, Kind};
use super::{authz, ServerSettings};
use crate::api::server::{parse_head, respond, Request, Response};
use crate::api::stream::Client;
use crate::api::Api;
use crate::cri::RuntimeService;
use crate::gate::{Gate, Limits, Pending};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use std::sync::Arc;
use std::time::Duration;

/// kubelet's MaxHeaderBytes is 1 MiB; the API server's requests are a few hundred bytes.
const HEAD_LIMIT: usize = 64 << 10;
/// The TCP listener's budgets: pending connections (from anyone who can reach the port) and
/// sessions (past their request head: being authenticated, authorized, served).
/// An API server opens many connections at once (50 `kubectl exec`s are 100 handshakes), so
/// one source (an address; a local user, for a peer on this host) may hold half the pending
/// budget.
pub const PENDING: Limits = Limits { pending: 128, per_source: 64, deadline: Duration::from_secs(10), sessions: 128 };
/// The same for connections through the tunnel (every link's, whose source is a konnectivity
/// server). Fewer pending than a link may carry (`tunnel::conns`: 128), so a link full of idle
/// connections always has one closed for a new one.
pub const TUNNELLED: Limits = Limits { pending: 64, per_source: 64, deadline: Duration::from_secs(10), sessions: 128 };

/// A connection the konnectivity tunnel hands to the server: one end of a socket pair.
pub type Handoff = smol::channel::Receiver<smol::net::unix::UnixStream>;

/// The TLS settings: the serving certificate (the configured files, else `made`) in `slot`
/// unless one is there already (an issued one: `serverTLSBootstrap`), where a renewed one
/// replaces it without a restart; the client CA when there is one. The certificate's end is
/// recorded for `/metrics` (`kubelet_certificate_manager_server_ttl_seconds`).
pub fn tls_config(
    s: &ServerSettings,
    made: Option<super::cert::Serving>,
    slot: &Arc<crate::tls::Serving>,
) -> Result<Arc<rustls::ServerConfig>, Error> {
    let (chain, key) = match (&s.tls, made) {
        (Some((cert, key)), _) => {
            let read =
                |p: &std::path::Path| crate::bounded::read_following(p, 1 << 20).map_err(|e| config("tls", p, e));
            let pem = read(cert)?;
            let chain = crate::tls::pem_chain(&pem);
            if chain.is_empty() {
                return Err(config("tlsCertFile", cert, "no PEM certificate"));
            }
            let key = PrivateKeyDer::from_pem_slice(&read(key)?).map_err(|e| config("tlsPrivateKeyFile", key, e))?;
            (chain, key)
        }
        (None, Some(m)) => (vec![CertificateDer::from(m.cert)], PrivateKeyDer::Pkcs8(m.key.into())),
        (None, None) => return Err(Error::from(Kind::NoCertificate)),
    };
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| Error::from(Kind::Tls(e.to_string())))?;
    let builder = match &s.client_ca_file {
        None => builder.with_no_client_auth(),
        Some(path) => {
            let pem = crate::bounded::read_following(path, 4 << 20).map_err(|e| config(CLIENT_CA, path, e))?;
            let roots =
                crate::tls::pem_roots(&pem).ok_or_else(|| config(CLIENT_CA, path, "no usable PEM certificate"))?;
            let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider)
                .allow_unauthenticated()
                .build()
                .map_err(|e| config(CLIENT_CA, path, e))?;
            builder.with_client_cert_verifier(verifier)
        }
    };
    if !slot.is_set() {
        let end = chain.first().and_then(|c| crate::x509::validity(c)).map(|(_, until)| until);
        slot.set(chain, key).map_err(|e| Error::from(Kind::Tls(format!("the serving certificate: {e}"))))?;
        crate::metrics::certificate(crate::metrics::Certificate::Server, end);
    }
    let mut config = builder.with_cert_resolver(slot.clone());
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

const CLIENT_CA: &str = "authentication.x509.clientCAFile";

fn config(field: &'static str, path: &std::path::Path, why: impl std::fmt::Display) -> Error {
    Error::from(Kind::Config { field, path: path.to_path_buf(), why: why.to_string() })
}

/// What every connection shares.
pub struct Server<RT, R> {
    tls: futures_rustls::TlsAcceptor,
    auth: Auth<R>,
    api: Arc<Api<RT>>,
    debugging_handlers: bool,
    idle_timeout: Duration,
    direct: Arc<Gate>,
    tunnelled: Arc<Gate>,
}

impl<RT: RuntimeService, R: Reviewer + 'static> Server<RT, R> {
    pub fn new(tls: Arc<rustls::ServerConfig>, auth: Auth<R>, api: Arc<Api<RT>>, s: &ServerSettings) -> Arc<Self> {
        let tls = futures_rustls::TlsAcceptor::from(tls);
        let (debugging_handlers, idle_timeout) = (s.debugging_handlers, s.idle_timeout);
        let (direct, tunnelled) = (Gate::new("kubelet", PENDING), Gate::new("kubelet-tunnel", TUNNELLED));
        Arc::new(Server { tls, auth, api, debugging_handlers, idle_timeout, direct, tunnelled })
    }

    /// Serves `listener` until the task is dropped.
    pub async fn serve(self: Arc<Self>, listener: smol::net::TcpListener) {
        loop {
            match listener.accept().await {
                Ok((stream, peer)) => {
                    // Small writes (a session's frames, an answer's head) leave at once.
                    let _ = stream.set_nodelay(true);
                    let pending = self
                        .direct
                        .arrive(Some(crate::gate::source_of(&stream, peer)), crate::gate::sent_already(&stream));
                    self.spawn(Box::new(stream), pending);
                    // Its handshake starts before the next accept (a backlog of floods would not wait).
                    smol::future::yield_now().await;
                }
                Err(e) => {
                    log::warn!("kubelet server: accept: {e}");
                    smol::Timer::after(Duration::from_millis(100)).await;
                }
            }
        }
    }

    /// Serves the connections the tunnel hands over until the task is dropped.
    pub async fn serve_tunnelled(self: Arc<Self>, handoff: Handoff) {
        while let Ok(stream) = handoff.recv().await {
            let pending = self.tunnelled.arrive(None, false);
            self.spawn(Box::new(stream), pending);
        }
    }

    fn spawn(self: &Arc<Self>, stream: Box<dyn Client>, pending: Pending) {
        let server = self.clone();
        crate::task::spawn(async move { server.connection(stream, pending).await }).detach();
    }

    /// One connection, TCP or tunnelled (boxed: one copy of all that follows serves both).
    async fn connection(&self, stream: Box<dyn Client>, pending: Pending) {
        let Ok(Ok(mut tls)) = pending.step(self.tls.accept(stream)).await else { return };
        pending.progressed();
        let Ok(Ok((head, _))) = pending.step(crate::http1::read_head(&mut tls, HEAD_LIMIT)).await else { return };
        // The review below has its own deadline (and its answer is cached whoever waits).
        let Some(_session) = pending.admit() else {
            return respond(&mut tls, &Response::text(503, "too many sessions; try again")).await;
        };
        let req = match parse_head(&head) {
            Ok(r) => r,
            Err(e) => return respond(&mut tls, &Response::text(400, e)).await,
        };
        let Some(attributes) = authz::attributes(&req.method, &req.path) else {
            return respond(&mut tls, &Response::text(400, "the path is not in normal form")).await;
        };
        let peer = tls.get_ref().1.peer_certificates().and_then(|c| c.first()).map(|c| c.to_vec());
        let credentials = match (&peer, bearer(&head)) {
            (Some(der), _) => Credentials::Certificate(der),
            (None, Some(token)) => Credentials::Bearer(token),
            (None, None) => Credentials::None,
        };
        let user = match self.auth.check(credentials, &attributes).await {
            Decision::Allowed(user) => user,
            Decision::Unauthorized => return respond(&mut tls, &Response::text(401, "Unauthorized")).await,
            Decision::Forbidden(why) => return respond(&mut tls, &Response::text(403, why)).await,
            Decision::Error(why) => {
                log::warn!("kubelet server: {why}: the API server could not be asked");
                return respond(&mut tls, &Response::text(500, why)).await;
            }
        };
        log::debug!("kubelet server: {} {} by {}", req.method, req.path, user.name);
        let segments: Vec<&str> = req.path.trim_matches('/').split('/').collect();
        if let ["containerLogs", ns, pod, container] = segments[..] {
            if req.method != "GET" || !self.debugging_handlers {
                return respond(&mut tls, &self.refused(&req)).await;
            }
            let local = match logs_request(&req) {
                Ok(r) => r,
                Err(r) => return respond(&mut tls, &r).await,
            };
            if let Some(r) = missing(&self.api, ns, pod, container) {
                return respond(&mut tls, &r).await;
            }
            let (mut reader, mut writer) = smol::io::split(tls);
            if let Err(r) =
                crate::api::logs::serve(&self.api, &local, (ns, pod, container), &mut reader, &mut writer).await
            {
                respond(&mut writer, &r).await;
            }
            return;
        }
        if segments.first() == Some(&"run") && self.debugging_handlers {
            let response = crate::api::stream::run(&self.api, &req, &segments[1..], self.idle_timeout).await;
            return respond(&mut tls, &response).await;
        }
        if matches!(segments.first(), Some(&("exec" | "attach" | "portForward"))) && self.debugging_handlers {
            return crate::api::stream::serve(&self.api, &req, &head, &segments, Box::new(tls), self.idle_timeout)
                .await;
        }
        let response = self.route(&req, &segments).await;
        respond(&mut tls, &response).await;
    }

    async fn route(&self, req: &Request, segments: &[&str]) -> Response {
        use super::resource;
        let text =
            |body: String| Response { status: 200, content_type: "text/plain; version=0.0.4", body: body.into() };
        match (req.method.as_str(), segments) {
            ("GET", ["metrics"]) => text(crate::api::metrics::metrics(&self.api).await),
            ("GET", ["metrics", "cadvisor"]) => {
                text(crate::api::cadvisor::render(&crate::api::cadvisor::collect(&self.api).await))
            }
            ("GET", ["metrics", "probes"]) => {
                text(crate::api::metrics::registry(&self.api, crate::metrics::Path::Probes))
            }
            ("GET", ["metrics", "slis"]) => text(crate::api::metrics::registry(&self.api, crate::metrics::Path::Slis)),
            ("GET", ["metrics", "resource"]) => text(resource::prometheus(&resource::collect(&self.api).await)),
            ("GET" | "POST", ["stats", "summary"]) => {
                let only = req.query.get("only_cpu_and_memory").map(String::as_str);
                Response::json(200, &super::summary::answer(&self.api, only).await)
            }
            // Only the whole check is counted for /metrics/slis, as kubelet's; each part alone is not.
            ("GET" | "HEAD", ["healthz", rest @ ..]) if matches!(rest, [] | ["ping" | "syncloop"]) => {
                let failed = match rest {
                    [] => self.api.healthz(),
                    ["syncloop"] => self.api.stalled(),
                    _ => None,
                };
                failed.map_or_else(|| Response::text(200, "ok"), |why| Response::text(500, why))
            }
            ("GET" | "HEAD", ["pods"]) => {
                Response::json(200, &crate::api::pods::pod_list(&self.api, crate::api::pods::Reader::Unprivileged))
            }
            (_, [first, ..]) if DEBUGGING.contains(first) => self.refused(req),
            _ => Response::text(404, "404 page not found"),
        }
    }

    /// The answer to a debugging path this version does not serve, or that is turned off.
    fn refused(&self, req: &Request) -> Response {
        if !self.debugging_handlers {
            return Response::text(405, "Debug endpoints are disabled.");
        }
        match req.path.starts_with("/containerLogs/") {
            true => Response::text(405, "only GET is allowed"),
            false => Response::text(501, format!("{} is not served by this version of atoll", req.path)),
        }
    }
}

/// The token of `Authorization: Bearer <token>` (the scheme in any case, as Kubernetes reads
/// it); none for another scheme or an empty token.
fn bearer(head: &str) -> Option<&str> {
    let value = crate::http1::header(head, "authorization")?;
    let (scheme, token) = value.split_once(' ')?;
    let token = token.trim();
    (scheme.eq_ignore_ascii_case("bearer") && !token.is_empty() && !token.contains(' ')).then_some(token)
}

/// kubelet's 404 for a pod it does not run or a container its spec does not name (before the
/// log reader's own answers: a container with no log yet is 400).
fn missing<RT: RuntimeService>(api: &Api<RT>, ns: &str, name: &str, container: &str) -> Option<Response> {
    let Some((_, pod)) = crate::api::pods::find_pod(api, ns, name, crate::api::pods::Reader::Root) else {
        return Some(Response::text(404, format!("pod {name:?} does not exist")));
    };
    let s = &pod.spec;
    let named = s.containers.iter().chain(&s.init_containers).any(|c| c.name == container);
    (!named).then(|| Response::text(404, format!("container {container:?} not found in pod {name:?}")))
}

/// The paths kubelet turns off with `enableDebuggingHandlers: false`.
const DEBUGGING: [&str; 7] = ["run", "exec", "attach", "portForward", "containerLogs", "runningpods", "logs"];

/// kubelet's `/containerLogs` query as the local API's log request: `follow`, `previous`,
/// `timestamps`, `sinceSeconds`, `sinceTime`, `limitBytes` (checked by the local reader), and
/// `tailLines` (or the older `tail`, `all` meaning everything). A `stream` other than All is
/// refused, as kubelet refuses it without its split-streams gate; other parameters are not
/// log options and are ignored, as kubelet's decoder ignores them.
fn logs_request(req: &Request) -> Result<Request, Response> {
    let mut local = Request { method: req.method.clone(), path: req.path.clone(), query: Default::default() };
    for (k, v) in &req.query {
        match k.as_str() {
            "follow" | "previous" | "timestamps" | "sinceSeconds" | "sinceTime" | "limitBytes" => {
                local.query.insert(k.clone(), v.clone());
            }
            "tailLines" | "tail" if v == "all" => {}
            "tailLines" | "tail" => match v.parse::<i64>() {
                Ok(n) if n >= 0 => {
                    local.query.insert("tail".into(), n.to_string());
                }
                _ => return Err(Response::text(422, r#"{"message": "Invalid request."}"#)),
            },
            "stream" if v == "All" => {}
            "stream" => return Err(Response::text(400, "the stream option is not served (PodLogsQuerySplitStreams)")),
            _ => {}
        }
    }
    Ok(local)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_bearer_token_is_a_token() {
        let head = |v: &str| format!("GET / HTTP/1.1\r\nAuthorization: {v}");
        assert_eq!(bearer(&head("Bearer abc")), Some("abc"));
        assert_eq!(bearer(&head("bearer  abc ")), Some("abc"));
        for other in ["Basic YWJj", "Bearer", "Bearer ", "Bearer a b", "abc"] {
            assert_eq!(bearer(&head(other)), None, "{other:?}");
        }
        assert_eq!(bearer("GET / HTTP/1.1"), None);
    }

    #[test]
    fn kubelets_log_options_map_onto_the_local_reader_or_are_refused() {
        let req = |q: &str| parse_head(&format!("GET /containerLogs/ns/p/c?{q} HTTP/1.1")).unwrap();
        let local = logs_request(&req("follow=true&tailLines=10&stream=All&timestamps=true&limitBytes=5")).unwrap();
        assert_eq!(local.query.get("follow").map(String::as_str), Some("true"));
        assert_eq!(local.query.get("tail").map(String::as_str), Some("10"));
        assert_eq!(local.query.get("timestamps").map(String::as_str), Some("true"));
        assert_eq!(local.query.get("limitBytes").map(String::as_str), Some("5"));
        assert_eq!(logs_request(&req("tail=all")).unwrap().query.get("tail"), None);
        assert_eq!(logs_request(&req("tailLines=-1")).unwrap_err().status, 422);
        assert_eq!(logs_request(&req("stream=Stderr")).unwrap_err().status, 400);
        assert_eq!(logs_request(&req("timeout=1m0s&container=c")).unwrap().query.len(), 0, "not log options: ignored");
    }
}
