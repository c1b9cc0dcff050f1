//! The mirror's HTTP/1.1 transport (`http1::client`, rustls): for an `http://` server, a
//! server whose TLS does not offer HTTP/2, and a proxy from the environment (`HTTPS_PROXY`,
//! `ALL_PROXY`, ..., with `NO_PROXY`). Connections are kept between requests (the lease
//! renews every 10 s).

use super::error::{Error, Kind};
use super::kubeconfig::Connection;
use super::wire::{Answer, Ask, MAX_BODY, REQUEST_TIMEOUT, USER_AGENT};
use crate::http1::client::{self, Agent, Response};
use std::sync::Arc;
use std::time::Duration;

pub(super) struct Http1 {
    agent: Agent,
    server: String,
}

impl Http1 {
    /// `tls`: the server's CA (or none checked) and the client certificate, as for HTTP/2.
    pub(super) fn new(conn: &Connection, tls: Arc<rustls::ClientConfig>) -> Http1 {
        let mut tls = Arc::unwrap_or_clone(tls);
        tls.alpn_protocols = vec![b"http/1.1".to_vec()];
        let agent = Agent::new(Arc::new(tls), USER_AGENT, REQUEST_TIMEOUT);
        Http1 { agent, server: conn.server.trim_end_matches('/').to_string() }
    }

    /// Whether the environment names a proxy: then the mirror speaks HTTP/1.1 through it
    /// rather than dial the server itself.
    pub(super) fn proxied(&self) -> bool {
        self.agent.proxied()
    }

    fn send(&self, ask: &Ask<'_>, timeout: Option<Duration>) -> Result<Response<'_>, Error> {
        let mut headers = vec![("Accept", ask.accept)];
        if !ask.body.is_empty() {
            headers.push(("Content-Type", ask.content_type));
        }
        if let Some(b) = &ask.bearer {
            headers.push(("Authorization", b.as_str()));
        }
        let url = format!("{}{}", self.server, ask.path);
        self.agent.call(ask.method, &url, &headers, ask.body, timeout).map_err(transport)
    }

    pub(super) fn call(&self, ask: &Ask<'_>) -> Result<Answer, Error> {
        let resp = self.send(ask, None)?;
        let (status, head) = (resp.status, resp.head.clone());
        let body = resp.read_to_vec(MAX_BODY as u64).map_err(transport)?;
        Ok(answer(status, &head, body))
    }

    pub(super) fn watch(
        &self,
        ask: &Ask<'_>,
        limit: Duration,
        each: &mut dyn FnMut(&[u8]) -> bool,
    ) -> Result<Option<Answer>, Error> {
        let resp = self.send(ask, Some(limit))?;
        if resp.status != 200 {
            let (status, head) = (resp.status, resp.head.clone());
            let body = resp.read_to_vec(MAX_BODY as u64).unwrap_or_default();
            return Ok(Some(answer(status, &head, body)));
        }
        client::lines(resp, MAX_BODY as u64, each).map_err(transport)?;
        Ok(None)
    }
}

fn answer(status: u16, head: &str, body: Vec<u8>) -> Answer {
    let header = |name| crate::http1::header(head, name);
    Answer::new(status, header("retry-after"), header("content-type"), body)
}

fn transport(e: impl std::fmt::Display) -> Error {
    Error::from(Kind::Transport(e.to_string()))
}
