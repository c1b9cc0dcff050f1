//! What the tunnel is told: the `konnectivity` settings (read and checked by
//! `config::konnectivity`) and who the node is.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

/// The `konnectivity` section of atoll's settings file, with the upstream agent's names.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TunnelSettings {
    /// `proxyServerHost` and `proxyServerPort`: the servers' agent port (one address; a
    /// load balancer in front of several instances is usual).
    pub host: String,
    pub port: u16,
    /// `caCert`: the CA the server's certificate is checked against.
    pub ca_cert: PathBuf,
    /// `agentCert` and `agentKey`: the node's client certificate, when the server checks them.
    pub agent_cert: Option<(PathBuf, PathBuf)>,
    /// `serviceAccountTokenPath`: a token sent as `Authorization: Bearer`, read at each
    /// connect.
    pub token_file: Option<PathBuf>,
    /// `agentID` (default: the node name).
    pub agent_id: Option<String>,
    /// `agentIdentifiers` (default: `host=<node name>&ipv4=<node IP>`).
    pub agent_identifiers: Option<String>,
    /// `syncInterval` (1s) growing by half per failed attempt up to `syncIntervalCap` (30s).
    pub sync_interval: Duration,
    pub sync_interval_cap: Duration,
    /// `keepaliveTime` (60s): a PING on each idle link this often; the server allows one per
    /// 30 s at most.
    pub keepalive: Duration,
}

impl TunnelSettings {
    /// `host:port` (an IPv6 host in brackets).
    pub fn authority(&self) -> String {
        match self.host.contains(':') {
            true => format!("[{}]:{}", self.host, self.port),
            false => format!("{}:{}", self.host, self.port),
        }
    }
}

/// Who the node is to the servers, and where its kubelet server listens.
#[derive(Clone, Debug)]
pub struct Node {
    pub name: String,
    /// The addresses the node publishes (its status' InternalIP).
    pub ips: Vec<String>,
    /// The kubelet server's address (an unspecified one is reached on loopback).
    pub kubelet: SocketAddr,
    /// Where the kubelet server takes tunnelled connections.
    pub handoff: smol::channel::Sender<smol::net::unix::UnixStream>,
}

/// The kubelet server as a link reaches it: its address (what dials are checked against, and
/// named in errors), and where it takes connections in-process.
#[derive(Clone, Debug)]
pub struct Kubelet {
    pub address: SocketAddr,
    pub handoff: smol::channel::Sender<smol::net::unix::UnixStream>,
}
