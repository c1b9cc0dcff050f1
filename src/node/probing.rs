//! How probes reach pod workers: a narrow pair of traits (kubelet's prober manager and its
//! results cache), so that the engine never imports the probes and the probes never import the
//! engine. The agent gives the engine a [`Prober`]; each pod worker starts its pod's
//! [`PodProbes`], tells them what the runtime shows after every sync, and reads back restart
//! verdicts and readiness.

use super::observed::{Observed, ProbeVerdicts, ProbeView};
use crate::pod::types::Pod;
use std::future::Future;
use std::pin::Pin;

/// One pod's probes.
pub trait PodProbes: Send + Sync {
    /// What the runtime shows after a sync: container IDs and states, the pod's IP, whether
    /// the pod is being deleted.
    fn update(&self, pod: &Pod, obs: &Observed, pod_ip: &str, deleting: bool);
    /// Running containers whose liveness or startup probe has failed.
    fn verdicts(&self) -> ProbeVerdicts;
    /// Readiness and startedness by container ID, for the pod's status.
    fn view(&self) -> ProbeView;
    /// Resolves when a probe publishes a change (never, for a pod without probes).
    fn changed(&self) -> Pin<Box<dyn Future<Output = ()> + Send + '_>>;
}

/// Starts a pod's probes.
pub trait Prober: Send + Sync {
    fn start(&self, pod: &Pod) -> Box<dyn PodProbes>;
}

/// No probes at all: every container is ready once running, nothing is ever restarted for a
/// probe. For engines without probing (tests, benchmarks).
pub struct NoProbes;

impl PodProbes for NoProbes {
    fn update(&self, _: &Pod, _: &Observed, _: &str, _: bool) {}
    fn verdicts(&self) -> ProbeVerdicts {
        ProbeVerdicts::default()
    }
    fn view(&self) -> ProbeView {
        ProbeView::default()
    }
    fn changed(&self) -> Pin<Box<dyn Future<Output = ()> + Send + '_>> {
        Box::pin(std::future::pending())
    }
}

impl Prober for NoProbes {
    fn start(&self, _: &Pod) -> Box<dyn PodProbes> {
        Box::new(NoProbes)
    }
}
