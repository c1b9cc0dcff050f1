//! Mirroring to an API server when one is reachable: the Node, its Lease, a mirror pod per
//! static pod, and their status.
//!
//! The API server is a window, never a dependency. The mirror runs on its own threads with
//! blocking, deadline-bound requests; it reads the desired static pods and their statuses and
//! writes nothing the pod engine reads, so nothing the API server does (or fails to do) can
//! delay, stop or restart a local pod. Every loop is level-triggered: it compares what the
//! server shows (a list + watch of the node's pods, the last Node and Lease answers) with what
//! the agent has, and sends only the difference, so a server that comes back converges with no
//! replay of missed work and nothing queues up while it is away. At steady state the only
//! traffic is the Lease renewal, the watch's periodic re-establishment and the node status
//! report every `nodeStatusReportFrequency`.
//!
//! Failures back off with jitter (1 s doubling to 60 s; `Retry-After` honoured up to 5 min,
//! by every loop of the node whichever was told, and spread by up to half again so a fleet
//! told the same number does not return in step).
//! A mirror the server refuses (admission) is reported locally (`atoll describe`, an event)
//! and retried with its own back-off.

pub mod apiserver;
pub mod error;
mod h2;
mod http1;
pub mod kubeconfig;
mod lease;
mod node;
pub mod objects;
mod patch;
mod pods;
pub mod proto;
mod retry;
mod state;
mod wire;

pub use error::Error;
pub use pods::{watch_loop, Seen};
pub use state::{MirrorState, Options};

use crate::node::Node;
use apiserver::Client;
use state::Env;
use std::sync::mpsc;
use std::sync::Arc;
use std::time::Duration;

/// Starts mirroring on threads of its own. Returns at once.
pub fn start(opts: Options, node: Arc<Node>, state: Arc<MirrorState>) {
    let shared = Arc::new(Env { node, state });
    let spawned = std::thread::Builder::new().name("atoll-mirror".into()).spawn(move || {
        let client = Arc::new(connect(&opts).holding());
        log::info!("mirroring node {} to {} (context {})", opts.node, client.server(), client.context);
        let (tx, rx) = mpsc::sync_channel(256);
        {
            let (client, opts) = (client.clone(), opts.clone());
            let _ = std::thread::Builder::new()
                .name("atoll-mirror-watch".into())
                .spawn(move || pods::watch_loop(&client, &opts.node, &tx));
        }
        {
            let (client, opts, shared) = (client.clone(), opts.clone(), shared.clone());
            let _ = std::thread::Builder::new()
                .name("atoll-node".into())
                .spawn(move || node::node_loop(&client, &opts, &shared));
        }
        pods::pods_loop(&client, &opts, &shared, &rx);
    });
    if let Err(e) = spawned {
        log::error!("cannot start mirroring: {e}");
    }
}

/// The client from the kubeconfig; a missing or broken file is reported and read again every
/// minute (a fixed file is picked up without a restart; pods run meanwhile).
fn connect(opts: &Options) -> Client {
    let mut last = String::new();
    loop {
        match Client::from_kubeconfig(&opts.kubeconfig) {
            Ok(c) => {
                // kubelet's client certificate lifetime: +Inf when the kubeconfig uses none.
                crate::metrics::certificate(crate::metrics::Certificate::Client, c.certificate_end);
                return c;
            }
            Err(e) => {
                let e = e.to_string();
                if e != last {
                    log::error!("not mirroring to an API server: {e} (read again every minute)");
                    last = e;
                }
                std::thread::sleep(Duration::from_secs(60));
            }
        }
    }
}
