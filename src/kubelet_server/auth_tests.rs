use super::*;
use serde_json::json;
use std::sync::Arc;

/// The API server's side of the reviews: tokens it knows, what it allows, every review seen.
#[derive(Clone, Default)]
struct FakeApiServer {
    tokens: Vec<(&'static str, &'static str)>,
    /// (user, verb, subresource) allowed.
    allowed: Vec<(&'static str, &'static str, &'static str)>,
    down: bool,
    seen: Arc<Mutex<Vec<Value>>>,
}

impl Reviewer for FakeApiServer {
    async fn review(&self, path: &'static str, body: Value) -> Result<Vec<u8>, Error> {
        self.seen.lock().unwrap().push(body.clone());
        if self.down {
            return Err(Error::from(super::super::error::Kind::ApiServer(
                crate::mirror::error::Kind::Transport("connection refused".into()).into(),
            )));
        }
        let reply = if path == reviews::TOKEN_REVIEWS {
            let token = body["spec"]["token"].as_str().unwrap_or("");
            match self.tokens.iter().find(|(t, _)| *t == token) {
                Some((_, user)) => {
                    json!({"status": {"authenticated": true, "user": {"username": user, "groups": ["staff"]}}})
                }
                None => json!({"status": {"authenticated": false}}),
            }
        } else {
            let spec = &body["spec"];
            let ra = &spec["resourceAttributes"];
            let allowed =
                self.allowed.iter().any(|(u, v, s)| spec["user"] == *u && ra["verb"] == *v && ra["subresource"] == *s);
            json!({"status": {"allowed": allowed}})
        };
        Ok(serde_json::to_vec(&reply).unwrap())
    }
}

impl FakeApiServer {
    fn seen(&self) -> Vec<Value> {
        self.seen.lock().unwrap().clone()
    }
}

fn attrs(method: &str, path: &str) -> Attributes {
    authz::attributes(method, path).unwrap()
}

fn check<R: Reviewer>(auth: &Auth<R>, c: Credentials<'_>, method: &str, path: &str) -> Decision {
    smol::block_on(auth.check(c, &attrs(method, path)))
}

fn api() -> FakeApiServer {
    FakeApiServer {
        tokens: vec![("tok-ms", "system:serviceaccount:kube-system:metrics-server"), ("tok-bob", "bob")],
        allowed: vec![
            ("system:serviceaccount:kube-system:metrics-server", "get", "metrics"),
            ("bob", "get", "proxy"),
            ("kube-apiserver-kubelet-client", "create", "proxy"),
        ],
        ..Default::default()
    }
}

#[test]
fn nobody_is_turned_away_unless_anonymous_access_is_on() {
    let auth = Auth::new(AuthSettings::kubelet_defaults("gw-1"), api());
    assert_eq!(check(&auth, Credentials::None, "GET", "/pods"), Decision::Unauthorized);
    assert_eq!(check(&auth, Credentials::Bearer("forged"), "GET", "/pods"), Decision::Unauthorized);
    let open = AuthSettings { anonymous: true, mode: Mode::AlwaysAllow, ..AuthSettings::kubelet_defaults("gw-1") };
    let auth = Auth::new(open, api());
    assert_eq!(check(&auth, Credentials::None, "GET", "/pods"), Decision::Allowed(User::anonymous()));
    assert_eq!(
        check(&auth, Credentials::Bearer("forged"), "GET", "/pods"),
        Decision::Unauthorized,
        "a token the API server rejects is refused, not made anonymous"
    );
}

#[test]
fn a_token_user_is_allowed_only_what_the_api_server_allows() {
    let server = api();
    let auth = Auth::new(AuthSettings::kubelet_defaults("gw-1"), server.clone());
    let Decision::Allowed(ms) = check(&auth, Credentials::Bearer("tok-ms"), "GET", "/metrics/resource") else {
        panic!("metrics-server may read metrics");
    };
    assert_eq!(ms.groups, ["staff", "system:authenticated"]);
    assert_eq!(
        check(&auth, Credentials::Bearer("tok-ms"), "GET", "/pods"),
        Decision::Forbidden(
            "Forbidden (user=system:serviceaccount:kube-system:metrics-server, verb=get, resource=nodes, subresource=proxy)"
                .into()
        )
    );
    let review = server.seen().into_iter().rfind(|r| r["kind"] == "SubjectAccessReview").unwrap();
    assert_eq!(review["spec"]["resourceAttributes"]["name"], "gw-1");
    assert_eq!(review["spec"]["groups"], json!(["staff", "system:authenticated"]));
}

/// `get nodes/proxy` reads pods and logs; it does not open a shell, even as a GET.
#[test]
fn get_nodes_proxy_cannot_exec() {
    let auth = Auth::new(AuthSettings::kubelet_defaults("gw-1"), api());
    assert!(matches!(
        check(&auth, Credentials::Bearer("tok-bob"), "GET", "/containerLogs/ns/p/c"),
        Decision::Allowed(_)
    ));
    for path in ["/exec/ns/p/c", "/attach/ns/p/c", "/portForward/ns/p", "/run/ns/p/c"] {
        let v = check(&auth, Credentials::Bearer("tok-bob"), "GET", path);
        assert_eq!(
            v,
            Decision::Forbidden("Forbidden (user=bob, verb=create, resource=nodes, subresource=proxy)".into()),
            "{path}"
        );
    }
}

#[test]
fn a_client_certificate_names_the_user_without_a_review() {
    let server = api();
    let auth = Auth::new(AuthSettings::kubelet_defaults("gw-1"), server.clone());
    let cert = super::super::cert::make(&["kube-apiserver-kubelet-client".to_string()], std::time::SystemTime::now());
    let cert = cert.unwrap().cert;
    // The self-made certificate's CN carries a timestamp; its user is not allowed.
    assert!(matches!(check(&auth, Credentials::Certificate(&cert), "POST", "/exec/ns/p/c"), Decision::Forbidden(_)));
    assert!(server.seen().iter().all(|r| r["kind"] != "TokenReview"), "no TokenReview for a certificate");
    assert_eq!(check(&auth, Credentials::Certificate(b"not DER"), "GET", "/pods"), Decision::Unauthorized);
}

#[test]
fn answers_are_cached_for_their_ttls_and_failures_are_not() {
    let server = api();
    let auth = Auth::new(AuthSettings::kubelet_defaults("gw-1"), server.clone());
    for _ in 0..5 {
        assert!(matches!(check(&auth, Credentials::Bearer("tok-bob"), "GET", "/pods"), Decision::Allowed(_)));
        assert!(matches!(check(&auth, Credentials::Bearer("tok-bob"), "POST", "/exec/ns/p/c"), Decision::Forbidden(_)));
        assert_eq!(check(&auth, Credentials::Bearer("forged"), "GET", "/pods"), Decision::Unauthorized);
    }
    let kinds: Vec<String> = server.seen().iter().map(|r| r["kind"].as_str().unwrap_or("").to_string()).collect();
    assert_eq!(kinds.iter().filter(|k| *k == "TokenReview").count(), 2, "one per token: {kinds:?}");
    assert_eq!(kinds.iter().filter(|k| *k == "SubjectAccessReview").count(), 2, "one per decision: {kinds:?}");
    assert!(server.seen().iter().all(|r| !r.to_string().contains("tok-bob") || r["kind"] == "TokenReview"));

    let down = FakeApiServer { down: true, ..api() };
    let auth = Auth::new(AuthSettings::kubelet_defaults("gw-1"), down.clone());
    assert_eq!(check(&auth, Credentials::Bearer("tok-bob"), "GET", "/pods"), Decision::Unauthorized);
    assert_eq!(check(&auth, Credentials::Bearer("tok-bob"), "GET", "/pods"), Decision::Unauthorized);
    assert_eq!(down.seen().len(), 2, "a review that failed is asked again");
    let certs_only = AuthSettings { token_webhook: false, ..AuthSettings::kubelet_defaults("gw-1") };
    let auth = Auth::new(certs_only, down.clone());
    let cert = super::super::cert::make(&["ops".to_string()], std::time::SystemTime::now()).unwrap().cert;
    let v = check(&auth, Credentials::Certificate(&cert), "GET", "/pods");
    let Decision::Error(message) = v else { panic!("{v:?}") };
    assert!(
        message.starts_with("Authorization error (user=ops@")
            && message.ends_with("verb=get, resource=nodes, subresource=proxy)"),
        "{message}"
    );
    assert_eq!(
        check(&auth, Credentials::Bearer("tok-bob"), "GET", "/pods"),
        Decision::Unauthorized,
        "no token webhook"
    );
}
