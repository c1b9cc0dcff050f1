//! The mirror's HTTP/1.1 transport (ureq, rustls): for an `http://` server, a server whose TLS
//! does not offer HTTP/2, and a proxy from the environment (`HTTPS_PROXY`, `ALL_PROXY`, ...,
//! with `NO_PROXY`), which ureq honours. Connections are kept between requests (the lease
//! renews every 10 s).

use super::error::{Error, Kind};
use super::kubeconfig::Connection;
use super::wire::{Answer, Ask, MAX_BODY, REQUEST_TIMEOUT, USER_AGENT};
use std::io::{BufRead, Read};
use std::time::Duration;

pub(super) struct Http1 {
    agent: ureq::Agent,
    server: String,
}

/// Whether the environment names a proxy ureq would use (then the mirror speaks HTTP/1.1
/// through it rather than dial the server itself).
pub(super) fn proxy_in_env() -> bool {
    ["ALL_PROXY", "all_proxy", "HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy"]
        .iter()
        .any(|k| std::env::var_os(k).is_some_and(|v| !v.is_empty()))
}

impl Http1 {
    /// `roots` are the CA's certificates (PEM), `identity` the client certificate and key (PEM).
    pub(super) fn new(conn: &Connection, roots: &[u8], identity: Option<(&[u8], &[u8])>) -> Result<Http1, Error> {
        let client_cert = match identity {
            Some((cert, key)) => {
                let chain = crate::tls::pem_certs(cert);
                if chain.is_empty() {
                    return Err(Error::from(Kind::Setting {
                        what: "client-certificate",
                        why: "no PEM certificate in it".into(),
                    }));
                }
                let key = ureq::tls::PrivateKey::from_pem(key).map_err(|e| {
                    Error::from(Kind::Setting { what: "client-key", why: format!("not a PEM private key: {e}") })
                })?;
                Some(ureq::tls::ClientCert::new_with_certs(&chain, key))
            }
            None => None,
        };
        let tls = ureq::tls::TlsConfig::builder()
            .root_certs(ureq::tls::RootCerts::new_with_certs(&crate::tls::pem_certs(roots)))
            .client_cert(client_cert)
            .disable_verification(conn.insecure_skip_tls_verify)
            .build();
        let config = ureq::Agent::config_builder()
            .timeout_global(Some(REQUEST_TIMEOUT))
            .http_status_as_error(false)
            .max_redirects(0)
            // The lease renews every 10 s: keep its connection between renewals.
            .max_idle_age(Duration::from_secs(30))
            .max_idle_connections(4)
            .user_agent(USER_AGENT)
            .tls_config(tls)
            .build();
        Ok(Http1 { agent: config.into(), server: conn.server.trim_end_matches('/').to_string() })
    }

    fn request(&self, ask: &Ask<'_>) -> Result<http::Request<Vec<u8>>, Error> {
        let mut req = http::Request::builder()
            .method(ask.method)
            .uri(format!("{}{}", self.server, ask.path))
            .header("Accept", ask.accept);
        if !ask.body.is_empty() {
            req = req.header("Content-Type", ask.content_type);
        }
        if let Some(b) = &ask.bearer {
            req = req.header("Authorization", b.as_str());
        }
        req.body(ask.body.to_vec()).map_err(transport)
    }

    pub(super) fn call(&self, ask: &Ask<'_>) -> Result<Answer, Error> {
        let mut resp = self.agent.run(self.request(ask)?).map_err(transport)?;
        let body = resp.body_mut().with_config().limit(MAX_BODY as u64).read_to_vec().map_err(transport)?;
        Ok(Answer::new(resp.status(), resp.headers(), body))
    }

    pub(super) fn watch(
        &self,
        ask: &Ask<'_>,
        limit: Duration,
        each: &mut dyn FnMut(&[u8]) -> bool,
    ) -> Result<Option<Answer>, Error> {
        let req = self.agent.configure_request(self.request(ask)?).timeout_global(Some(limit)).build();
        let mut resp = self.agent.run(req).map_err(transport)?;
        if resp.status() != 200 {
            let body = resp.body_mut().with_config().limit(MAX_BODY as u64).read_to_vec().unwrap_or_default();
            return Ok(Some(Answer::new(resp.status(), resp.headers(), body)));
        }
        let mut reader = std::io::BufReader::new(resp.into_body().into_reader());
        let mut line = Vec::new();
        loop {
            line.clear();
            let n = reader.by_ref().take(MAX_BODY as u64).read_until(b'\n', &mut line).map_err(transport)?;
            if n == 0 || !each(&line) {
                return Ok(None);
            }
        }
    }
}

fn transport(e: impl std::fmt::Display) -> Error {
    Error::from(Kind::Transport(e.to_string()))
}
