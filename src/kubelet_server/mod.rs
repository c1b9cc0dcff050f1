//! kubelet's HTTPS server (`:10250`), through which the API server, metrics-server and
//! kubectl reach a node: logs, exec, attach, port-forward, stats and resource metrics, each
//! request authenticated (client certificate, bearer token by TokenReview, anonymous only when
//! enabled) and authorized (SubjectAccessReview of `nodes/<subresource>`, or AlwaysAllow) with
//! kubelet's rules and answers. `shared/reference/kubelet-server.md` holds kubelet's behaviour.
//!
//! It runs when atoll mirrors to an API server (a kubeconfig is given) and `port` is not 0.
//! Served: `/healthz`, `/pods`, `/containerLogs` (the local API's reader), `/exec`, `/attach`
//! and `/portForward` (the runtime's streaming server, spliced by `api::stream`, which the
//! local API shares), `/run` (ExecSync),
//! `/metrics` (the local API's), `/metrics/resource` and `/stats/summary` (kubectl top's).
//!
//! - `serve`: the TLS listener and the route of each authorized request;
//! - `resource`: the node's and containers' CPU and memory, as metrics-server reads them;
//! - `authz`: a request's attributes (verb from the method, subresource from the path; the
//!   streaming paths always `create`), and kubelet's 403 and 500 answers;
//! - `reviews`: the TokenReview and SubjectAccessReview bodies and replies;
//! - `cache`: the answers kept for their TTLs, bounded, tokens keyed by digest;
//! - `cert`: the self-signed serving certificate, made again when the node's names change;
//! - `peer`: the user and groups a verified client certificate names;
//! - `auth`: one request's authentication and authorization, with kubelet's chain, caches
//!   and answers, asking the API server through a `Reviewer`.

pub mod auth;
pub mod authz;
pub mod cache;
pub mod cert;
pub mod peer;
pub mod resource;
pub mod reviews;
pub mod serve;

/// kubelet's server settings (KubeletConfiguration `address`, `port`, `tlsCertFile`,
/// `tlsPrivateKeyFile`, `authentication`, `authorization`, `enableDebuggingHandlers`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServerSettings {
    pub address: std::net::SocketAddr,
    /// The serving certificate and key (PEM); none: a self-signed one under the root dir.
    pub tls: Option<(std::path::PathBuf, std::path::PathBuf)>,
    /// `authentication.x509.clientCAFile`: client certificates signed by it name their user.
    pub client_ca_file: Option<std::path::PathBuf>,
    pub auth: auth::Settings,
    /// `enableDebuggingHandlers`: logs, exec, attach, port-forward and run (405 when off).
    pub debugging_handlers: bool,
    /// `streamingConnectionIdleTimeout` (default 4h): a stream with no traffic this long is
    /// closed; also the longest `/run` waits for its command.
    pub idle_timeout: std::time::Duration,
}

/// Asks the API server the kubeconfig names (the mirror's kubeconfig), through the mirror's
/// client, off the executor; a kubeconfig that cannot be read yet is read again next time.
pub struct ApiServer {
    kubeconfig: std::path::PathBuf,
    client: std::sync::Mutex<Option<std::sync::Arc<crate::mirror::apiserver::Client>>>,
}

impl ApiServer {
    pub fn new(kubeconfig: &std::path::Path) -> ApiServer {
        ApiServer { kubeconfig: kubeconfig.to_path_buf(), client: Default::default() }
    }

    fn client(&self) -> Result<std::sync::Arc<crate::mirror::apiserver::Client>, String> {
        let mut held = crate::locks::lock(&self.client);
        if let Some(c) = &*held {
            return Ok(c.clone());
        }
        let c = std::sync::Arc::new(crate::mirror::apiserver::Client::from_kubeconfig(&self.kubeconfig)?);
        *held = Some(c.clone());
        Ok(c)
    }
}

impl auth::Reviewer for ApiServer {
    async fn review(&self, path: &'static str, body: serde_json::Value) -> Result<Vec<u8>, String> {
        let client = self.client()?;
        let reply = smol::unblock(move || client.call("POST", path, "application/json", Some(&body))).await?;
        if !reply.ok() {
            return Err(format!("POST {path}: {}", reply.describe()));
        }
        serde_json::to_vec(&reply.body).map_err(|e| e.to_string())
    }
}
