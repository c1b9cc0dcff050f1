//! The node's way in from behind NAT: a konnectivity agent (apiserver-network-proxy's
//! `AgentService/Connect`), so the API server reaches the kubelet server through a tunnel the
//! node dials out, with no route to the box.
//!
//! The node connects to the konnectivity server's agent port over TLS (its CA; a client
//! certificate, read again for a new link when its files changed, or a service-account token), says who it is (`agentID`, `agentIdentifiers`:
//! `host=<node>&ipv4=<ip>`, for the server's `destHost` strategy) and connects again until
//! it holds a link to every instance the servers count (`serverCount`; instances behind one
//! address are told apart by `serverID`; how many links to hold and when to dial is `pool`'s).
//! Each link answers the server's dials by handing a connection to the kubelet server
//! in-process, and only to it (`policy`): the tunnel is not a way into the box's network. A
//! failed attempt is tried again after a jittered, growing wait; a link that drops, after the
//! first interval; nothing wakes while every link is up but the keepalive.
//!
//! - `packet`: the protocol's messages;
//! - `policy`: which dials are allowed, the identifiers, the back-off;
//! - `pool`: how many links to hold, what to do with a new one, when to dial again;
//! - `link`: one link: the call, the server's packets, the dials;
//! - `conns`: a link's tunnelled connections, what they may queue, how they end;
//! - `outbox`: the link's one writer, and what may wait for it;
//! - `error`: why a link cannot be made;
//! - `settings`: the `konnectivity` settings and the node's identity.

mod conns;
mod error;
pub mod link;
mod outbox;
pub mod packet;
pub mod policy;
mod pool;
pub mod settings;

pub use error::Error;
use pool::{Action, Event, Pool};
pub use settings::{Node, TunnelSettings};
use std::net::SocketAddr;

/// Keeps a link to every server instance, for as long as the agent runs.
pub async fn run(s: TunnelSettings, node: Node) {
    let agent_id = s.agent_id.clone().unwrap_or_else(|| node.name.clone());
    let identifiers = s.agent_identifiers.clone().unwrap_or_else(|| policy::identifiers(&node.name, &node.ips));
    let (to, kubelet) = reach(&node);
    let budget = std::sync::Arc::new(conns::Budget::default());
    let mut pool = Pool::new(policy::BackOff::new(s.sync_interval, s.sync_interval_cap));
    let (ended_tx, ended) = smol::channel::unbounded::<String>();
    let mut tls: Option<(link::Stamp, std::sync::Arc<rustls::ClientConfig>)> = None;
    log::info!("tunnel: connecting to the konnectivity server at {} as {agent_id:?}", s.authority());
    servers(&pool);
    loop {
        // Every link that ended is taken first; while every instance is linked, nothing
        // happens until one ends.
        let gone = match ended.try_recv() {
            Ok(id) => Some(id),
            Err(_) if pool.full() => Some(match ended.recv().await {
                Ok(id) => id,
                Err(_) => return,
            }),
            Err(_) => None,
        };
        if let Some(id) = gone {
            let actions = pool.decide(Event::Ended { server: &id }, random());
            servers(&pool);
            for action in actions {
                if let Action::Wait(wait) = action {
                    smol::Timer::after(wait).await;
                }
            }
            continue;
        }
        // One TLS configuration for every link, made again when its files changed (a
        // rotated certificate, a new CA) and after any failed attempt.
        let attempt = async {
            let (s2, cached) = (s.clone(), tls.take());
            let (stamp, config) = crate::task::unblock(move || link::tls_config_again(&s2, cached)).await?;
            tls = Some((stamp, config.clone()));
            link::connect(&s, config, &agent_id, &identifiers).await
        };
        let result = attempt.await;
        let actions = match &result {
            Ok(l) => pool.decide(Event::Linked { server: &l.server_id, count: l.server_count }, random()),
            Err(_) => {
                tls = None;
                pool.decide(Event::Failed, random())
            }
        };
        let (mut made, error) = match result {
            Ok(l) => (Some(l), String::new()),
            Err(e) => (None, e.into_message()),
        };
        for action in actions {
            match action {
                Action::Serve => {
                    let Some(l) = made.take() else { continue };
                    let id = l.server_id.clone();
                    servers(&pool);
                    log::info!("tunnel: linked to konnectivity server {id} ({} of {})", pool.linked(), pool.count());
                    serve(l, (to.clone(), kubelet.clone()), budget.clone(), s.keepalive, ended_tx.clone());
                }
                Action::Close => {
                    let Some(l) = made.take() else { continue };
                    let (n, count) = (pool.linked(), pool.count());
                    log::debug!("tunnel: server {} is already linked; {n} of {count}", l.server_id);
                }
                Action::Unreachable { warn: true } => {
                    log::warn!("tunnel: cannot reach the konnectivity server: {error}; trying again")
                }
                Action::Unreachable { warn: false } => {
                    log::debug!("tunnel: cannot reach the konnectivity server: {error}")
                }
                Action::Wait(wait) => {
                    smol::Timer::after(wait).await;
                }
            }
        }
    }
}

/// Where the links' dials may go, and the kubelet server they reach: its address (an
/// unspecified one on loopback) and its hand-off.
fn reach(node: &Node) -> (policy::Destination, settings::Kubelet) {
    let mut local = node.kubelet;
    if local.ip().is_unspecified() {
        local.set_ip(match local {
            SocketAddr::V4(_) => std::net::Ipv4Addr::LOCALHOST.into(),
            SocketAddr::V6(_) => std::net::Ipv6Addr::LOCALHOST.into(),
        });
    }
    let mut hosts: Vec<String> = node.ips.iter().chain([&node.name]).map(|h| h.to_ascii_lowercase()).collect();
    hosts.push(local.ip().to_string());
    let to = policy::Destination { port: node.kubelet.port(), hosts };
    let kubelet = settings::Kubelet { address: local, handoff: node.handoff.clone() };
    (to, kubelet)
}

/// Serves a new link until it ends, then sends its server's ID to `done`.
fn serve(
    l: link::Link,
    (to, kubelet): (policy::Destination, settings::Kubelet),
    budget: std::sync::Arc<conns::Budget>,
    keepalive: std::time::Duration,
    done: smol::channel::Sender<String>,
) {
    let id = l.server_id.clone();
    crate::task::spawn(async move {
        let why = l.serve(to, kubelet, budget, keepalive).await;
        log::warn!("tunnel: the link to konnectivity server {id} ended: {why}");
        let _ = done.send(id).await;
    })
    .detach();
}

/// Sets the gauge of linked server instances.
fn servers(pool: &Pool) {
    crate::metrics::set(&crate::metrics::TUNNEL_SERVERS, &[], pool.linked() as f64);
}

/// A number in 0..1 for the back-off's jitter.
fn random() -> f64 {
    let mut b = [0u8; 4];
    let _ = ring::rand::SecureRandom::fill(&ring::rand::SystemRandom::new(), &mut b);
    f64::from(u32::from_le_bytes(b)) / f64::from(u32::MAX)
}
