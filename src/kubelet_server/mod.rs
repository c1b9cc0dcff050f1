//! kubelet's HTTPS server (`:10250`), through which the API server, metrics-server and
//! kubectl reach a node: logs, exec, attach, port-forward, stats and resource metrics, each
//! request authenticated (client certificate, bearer token by TokenReview, anonymous only when
//! enabled) and authorized (SubjectAccessReview of `nodes/<subresource>`, or AlwaysAllow) with
//! kubelet's rules and answers. `docs/src/reference/kubelet-server.md` holds kubelet's behaviour.
//!
//! It runs when atoll mirrors to an API server (a kubeconfig is given) and `port` is not 0;
//! without one only when configured as a standalone kubelet's ([`standalone`]).
//! Served: `/healthz`, `/pods`, `/containerLogs` (the local API's reader), `/exec`, `/attach`
//! and `/portForward` (the runtime's streaming server, spliced by `api::stream`, which the
//! local API shares), `/run` (ExecSync),
//! `/metrics` (the local API's), `/metrics/resource` and `/stats/summary` (kubectl top's).
//!
//! - `serve`: the TLS listener and the route of each authorized request;
//! - `resource`: the node's and containers' CPU and memory, as metrics-server reads them;
//! - `summary`: `/stats/summary` (kubectl top's and the API server's node stats), with the
//!   disks `disks` reads (file systems, volumes, logs, writable layers, walked safely);
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
pub mod disks;
mod error;
pub mod peer;
pub mod resource;
pub mod reviews;
pub mod serve;
pub mod summary;

pub use error::{Error, Kind as ErrorKind};

/// kubelet's server settings (KubeletConfiguration `address`, `port`, `tlsCertFile`,
/// `tlsPrivateKeyFile`, `authentication`, `authorization`, `enableDebuggingHandlers`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServerSettings {
    pub address: std::net::SocketAddr,
    /// The serving certificate and key (PEM); none: a self-signed one under the root dir.
    pub tls: Option<(std::path::PathBuf, std::path::PathBuf)>,
    /// `authentication.x509.clientCAFile`: client certificates signed by it name their user.
    pub client_ca_file: Option<std::path::PathBuf>,
    pub auth: auth::AuthSettings,
    /// `enableDebuggingHandlers`: logs, exec, attach, port-forward and run (405 when off).
    pub debugging_handlers: bool,
    /// `streamingConnectionIdleTimeout` (default 4h): a stream with no traffic this long is
    /// closed; also the longest `/run` waits for its command.
    pub idle_timeout: std::time::Duration,
}

/// Without an API server to ask (no kubeconfig), the settings the server runs with, as a
/// standalone kubelet's: only when configured for it, with its own certificate
/// (`tlsCertFile`, `tlsPrivateKeyFile`), client certificates from `clientCAFile` and
/// `authorization.mode: AlwaysAllow` (kubelet will not start with `Webhook` and no API
/// server). No token can be reviewed, so none is accepted; anonymous only when enabled.
/// `Ok(None)` when none of it is configured (the default: no listener), else why not.
pub fn standalone(s: &ServerSettings) -> Result<Option<ServerSettings>, &'static str> {
    match (&s.tls, &s.client_ca_file, s.auth.mode) {
        (None, None, _) => Ok(None),
        (Some(_), Some(_), auth::Mode::AlwaysAllow) => {
            let mut s = s.clone();
            s.auth.token_webhook = false;
            Ok(Some(s))
        }
        (Some(_), Some(_), auth::Mode::Webhook { .. }) => Err("authorization.mode Webhook needs an API server to ask; without a kubeconfig set authorization.mode: AlwaysAllow (client certificates from clientCAFile are then allowed everything)"),
        _ => Err("without a kubeconfig it needs tlsCertFile, tlsPrivateKeyFile and authentication.x509.clientCAFile"),
    }
}

/// Asks the API server the kubeconfig names (the mirror's kubeconfig), through the mirror's
/// client, off the executor; a kubeconfig that cannot be read yet is read again next time.
/// None: a standalone server, which never asks.
pub struct ApiServer {
    kubeconfig: Option<std::path::PathBuf>,
    client: std::sync::Mutex<Option<std::sync::Arc<crate::mirror::apiserver::Client>>>,
}

impl ApiServer {
    pub fn new(kubeconfig: Option<&std::path::Path>) -> ApiServer {
        ApiServer { kubeconfig: kubeconfig.map(Into::into), client: Default::default() }
    }

    fn client(&self) -> Result<std::sync::Arc<crate::mirror::apiserver::Client>, Error> {
        let mut held = crate::locks::lock(&self.client);
        if let Some(c) = &*held {
            return Ok(c.clone());
        }
        let kubeconfig = self.kubeconfig.as_deref().ok_or_else(|| Error::from(ErrorKind::NoApiServer))?;
        let c = std::sync::Arc::new(crate::mirror::apiserver::Client::from_kubeconfig(kubeconfig)?);
        *held = Some(c.clone());
        Ok(c)
    }
}

impl auth::Reviewer for ApiServer {
    async fn review(&self, path: &'static str, body: serde_json::Value) -> Result<Vec<u8>, Error> {
        let client = self.client()?;
        let reply = crate::task::unblock(move || client.call("POST", path, "application/json", Some(&body))).await?;
        if !reply.ok() {
            return Err(Error::from(ErrorKind::Refused { path, describe: reply.describe() }));
        }
        serde_json::to_vec(&reply.body).map_err(|e| Error::from(ErrorKind::Reply { review: path, why: e.to_string() }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn without_an_api_server_it_serves_only_as_configured_and_never_takes_a_token() {
        let base = ServerSettings {
            address: "127.0.0.1:10250".parse().unwrap(),
            tls: None,
            client_ca_file: None,
            auth: auth::AuthSettings::kubelet_defaults("n"),
            debugging_handlers: true,
            idle_timeout: std::time::Duration::from_secs(60),
        };
        assert_eq!(standalone(&base), Ok(None), "nothing configured: no listener");
        let tls = Some(("c.pem".into(), "k.pem".into()));
        let full = ServerSettings { tls: tls.clone(), client_ca_file: Some("ca.pem".into()), ..base.clone() };
        assert!(standalone(&full).unwrap_err().contains("Webhook needs an API server"), "kubelet will not start so");
        let mut allow = full.clone();
        allow.auth.mode = auth::Mode::AlwaysAllow;
        let served = standalone(&allow).unwrap().unwrap();
        assert!(!served.auth.token_webhook && !served.auth.anonymous && served.client_ca_file.is_some());
        for partial in
            [ServerSettings { tls: tls.clone(), ..allow.clone() }, ServerSettings { tls: None, ..allow.clone() }]
        {
            let partial = ServerSettings { client_ca_file: partial.tls.is_none().then(|| "ca.pem".into()), ..partial };
            assert!(standalone(&partial).unwrap_err().contains("needs tlsCertFile"), "{partial:?}");
        }
    }
}
