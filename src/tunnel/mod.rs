//! The node's way in from behind NAT: a konnectivity agent (apiserver-network-proxy's
//! `AgentService/Connect`), so the API server reaches the kubelet server through a tunnel the
//! node dials out, with no route to the box.
//!
//! The node connects to the konnectivity server's agent port over TLS (its CA; a client
//! certificate or a service-account token), says who it is (`agentID`, `agentIdentifiers`:
//! `host=<node>&ipv4=<ip>`, for the server's `destHost` strategy) and connects again until
//! it holds a link to every instance the servers count (`serverCount`; instances behind one
//! address are told apart by `serverID`). Each link answers the server's dials by connecting
//! to the kubelet server, and only to it (`policy`): the tunnel is not a way into the box's
//! network. A link that drops is replaced after a jittered, growing wait; nothing wakes while
//! every link is up but the keepalive.
//!
//! - `packet`: the protocol's messages;
//! - `policy`: which dials are allowed, the identifiers, the back-off;
//! - `link`: one link: the call, the server's packets, the dials;
//! - `conns`: a link's tunnelled connections, what they may queue, how they end;
//! - `outbox`: the link's one writer, and what may wait for it;
//! - `settings`: the `konnectivity` settings and the node's identity.

mod conns;
pub mod link;
mod outbox;
pub mod packet;
pub mod policy;
pub mod settings;

pub use settings::{Node, Settings};
use std::collections::BTreeSet;
use std::net::SocketAddr;

/// Keeps a link to every server instance, for as long as the agent runs.
pub async fn run(s: Settings, node: Node) {
    let agent_id = s.agent_id.clone().unwrap_or_else(|| node.name.clone());
    let identifiers = s.agent_identifiers.clone().unwrap_or_else(|| policy::identifiers(&node.name, &node.ips));
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
    let budget = std::sync::Arc::new(conns::Budget::default());
    let mut back_off = policy::BackOff::new(s.sync_interval, s.sync_interval_cap);
    let (ended_tx, ended) = smol::channel::unbounded::<String>();
    let mut linked: BTreeSet<String> = BTreeSet::new();
    let mut count = 1usize;
    let mut failing = false;
    let mut tls = None;
    log::info!("tunnel: connecting to the konnectivity server at {} as {agent_id:?}", s.authority());
    loop {
        while let Ok(id) = ended.try_recv() {
            linked.remove(&id);
        }
        crate::metrics::set(&crate::metrics::TUNNEL_SERVERS, &[], linked.len() as f64);
        if linked.len() >= count {
            // Every instance is linked: nothing to do until one link ends.
            let Ok(id) = ended.recv().await else { return };
            linked.remove(&id);
            crate::metrics::set(&crate::metrics::TUNNEL_SERVERS, &[], linked.len() as f64);
            smol::Timer::after(back_off.succeeded(random())).await;
            continue;
        }
        // One TLS configuration for every link, made again after any failed attempt (a
        // certificate or CA that rotated is read then).
        let attempt = async {
            let config = match tls.clone() {
                Some(c) => c,
                None => {
                    let s2 = s.clone();
                    smol::unblock(move || link::tls_config(&s2)).await?
                }
            };
            tls = Some(config.clone());
            link::connect(&s, config, &agent_id, &identifiers).await
        };
        let result = attempt.await;
        if result.is_err() {
            tls = None;
        }
        let wait = match result {
            Ok(l) if linked.contains(&l.server_id) => {
                // The address led to an instance already linked: not a failure (the load
                // balancer's choice), so, as the upstream agent, try again for another after
                // the first interval.
                log::debug!("tunnel: server {} is already linked; {} of {count}", l.server_id, linked.len());
                back_off.succeeded(random())
            }
            Ok(l) => {
                count = l.server_count;
                failing = false;
                let id = l.server_id.clone();
                linked.insert(id.clone());
                crate::metrics::set(&crate::metrics::TUNNEL_SERVERS, &[], linked.len() as f64);
                log::info!("tunnel: linked to konnectivity server {id} ({} of {count})", linked.len());
                let (to, done) = (to.clone(), ended_tx.clone());
                let (keepalive, kubelet, budget) = (s.keepalive, kubelet.clone(), budget.clone());
                crate::task::spawn(async move {
                    let why = l.serve(to, kubelet, budget, keepalive).await;
                    log::warn!("tunnel: the link to konnectivity server {id} ended: {why}");
                    let _ = done.send(id).await;
                })
                .detach();
                back_off.succeeded(random())
            }
            Err(e) => {
                // Said once per outage, not at every attempt of a box that may stay offline.
                match std::mem::replace(&mut failing, true) {
                    false => log::warn!("tunnel: cannot reach the konnectivity server: {e}; trying again"),
                    true => log::debug!("tunnel: cannot reach the konnectivity server: {e}"),
                }
                back_off.failed(random())
            }
        };
        if linked.len() < count {
            smol::Timer::after(wait).await;
        }
    }
}

/// A number in 0..1 for the back-off's jitter.
fn random() -> f64 {
    let mut b = [0u8; 4];
    let _ = ring::rand::SecureRandom::fill(&ring::rand::SystemRandom::new(), &mut b);
    f64::from(u32::from_le_bytes(b)) / f64::from(u32::MAX)
}
