//! Mirroring to an API server when one is reachable: the Node, its Lease, a mirror pod per
//! static pod, and their status; and the API source (`bound`): the pods the cluster binds to
//! the node, sent to the agent like a manifest source's, their status written back, those the
//! cluster deletes stopped and then deleted.
//!
//! The API server is a window, never a dependency. The mirror runs on its own threads with
//! blocking, deadline-bound requests; it reads the desired static pods and their statuses and
//! writes nothing the pod engine reads but the API source's snapshots (which go through the
//! agent's merge like a manifest source's), so nothing the API server does (or fails to do)
//! can delay, stop or restart a static pod. Every loop is level-triggered: it compares what the
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
pub mod bound;
pub mod certs;
pub mod error;
mod h2;
mod http1;
pub mod kubeconfig;
mod lease;
pub mod needs;
mod node;
pub mod objects;
mod patch;
mod pods;
pub mod proto;
mod retry;
pub mod sealed;
mod state;
pub mod watch;
mod wire;

pub use error::Error;
pub use state::{MirrorState, Options};
pub use watch::{watch_loop, Seen};

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
        // The kept pods run before the API server is asked (or its kubeconfig read).
        let bound = opts.api_source.clone().map(|to| {
            let mut b = bound::Bound::new(to, &opts.node);
            b.start();
            b
        });
        let client = Arc::new(connect(&opts).holding());
        log::info!("mirroring node {} to {} (context {})", opts.node, client.server(), client.context);
        if opts.rotate_certificates {
            let store = certs::store::Store::new(&opts.cert_dir, "kubelet-client");
            let in_use = certs::bootstrap::leaf_validity(&opts.kubeconfig);
            let validity = certs::rotate::start_with(&client, &store, in_use);
            let (client, opts) = (client.clone(), opts.clone());
            let _ = std::thread::Builder::new()
                .name("atoll-cert-client".into())
                .spawn(move || certs::rotate::run(client, opts, validity));
        }
        if let (true, Some(slot)) = (opts.server_tls_bootstrap, opts.serving.clone()) {
            let (client, dir, node) = (client.clone(), opts.cert_dir.clone(), shared.node.clone());
            let _ = std::thread::Builder::new()
                .name("atoll-cert-serving".into())
                .spawn(move || certs::serving::run(client, &dir, node, slot));
        }
        let pods = watch::spawn(&client, watch::pods_query(&opts.node), "the node's pods".into(), 256);
        // No thread for the watch: the pods loop ends at once, as it would with the watch gone.
        let none = mpsc::sync_channel(1).1;
        let rx = pods.as_ref().map_or(&none, |w| &w.rx);
        {
            let (client, opts, shared) = (client.clone(), opts.clone(), shared.clone());
            let _ = std::thread::Builder::new()
                .name("atoll-node".into())
                .spawn(move || node::node_loop(&client, &opts, &shared));
        }
        pods::pods_loop(&client, &opts, &shared, rx, bound);
    });
    if let Err(e) = spawned {
        log::error!("cannot start mirroring: {e}");
    }
}

/// The client from the kubeconfig, bootstrapped first when a bootstrap kubeconfig is given and
/// the kubeconfig holds no valid client certificate. A missing or broken file is reported and
/// read again every minute (a fixed file is picked up without a restart); a bootstrap that
/// fails (the API server away, the CSR denied or never approved) is tried again with the
/// mirror's back-off. Pods run meanwhile.
fn connect(opts: &Options) -> Client {
    let mut last = String::new();
    let mut retry = retry::Retry::default();
    loop {
        let bootstrapped = match &opts.bootstrap_kubeconfig {
            Some(boot) => certs::bootstrap::ensure(&opts.kubeconfig, boot, &opts.cert_dir, &opts.node),
            None => Ok(()),
        };
        let wait = match bootstrapped.map(|()| Client::from_kubeconfig(&opts.kubeconfig)) {
            Ok(Ok(c)) => {
                // kubelet's client certificate lifetime: +Inf when the kubeconfig uses none.
                crate::metrics::certificate(crate::metrics::Certificate::Client, c.certificate_end());
                return c;
            }
            Ok(Err(e)) => {
                let e = e.to_string();
                if e != last {
                    log::error!("not mirroring to an API server: {e} (read again every minute)");
                    last = e;
                }
                Duration::from_secs(60)
            }
            Err(e) => {
                log::error!("TLS bootstrap: {e}");
                retry.fail(None)
            }
        };
        std::thread::sleep(wait);
    }
}
