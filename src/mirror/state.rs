//! What the mirror knows and shares: its options from the settings, the state it shares with
//! the agent (the static pods to mirror, the reports the local API shows, the Node's UID), and
//! what its threads share.

use crate::node::Node;
use crate::pod::StaticPod;
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// What the mirror needs to know, from the settings.
#[derive(Clone, Debug)]
pub struct Options {
    pub kubeconfig: PathBuf,
    pub node: String,
    pub taints: Vec<Value>,
    /// How often the node status is computed and compared (nodeStatusUpdateFrequency).
    pub status_update_frequency: Duration,
    /// How often it is sent when unchanged (nodeStatusReportFrequency).
    pub status_report_frequency: Duration,
    pub lease_duration_seconds: u32,
    /// `containerd://1.6.20`
    pub runtime_version: String,
    pub endpoint_port: u16,
    /// Mirror pods from encrypted manifests as they are (`mirrorEncryptedPodSpecs`); by
    /// default their values are redacted (`pod::redact`).
    pub encrypted_pod_specs: bool,
    /// TLS bootstrap's credentials (`--bootstrap-kubeconfig`).
    pub bootstrap_kubeconfig: Option<PathBuf>,
    /// Where issued certificates are kept (`--cert-dir`).
    pub cert_dir: PathBuf,
    /// `rotateCertificates`: the client certificate is renewed before it expires.
    pub rotate_certificates: bool,
    /// `serverTLSBootstrap`: the kubelet server's certificate is issued by the cluster.
    pub server_tls_bootstrap: bool,
    /// The kubelet server's certificate, which an issued one replaces (none: no server).
    pub serving: Option<Arc<crate::tls::Serving>>,
    /// The API source (`--api-pod-source`): where its snapshots go and its copy is kept.
    pub api_source: Option<super::bound::ApiSource>,
}

/// Between the agent and the mirror: the static pods to mirror (set by the agent's main loop),
/// what became of each (read by the local API), and the registered Node's UID.
#[derive(Debug, Default)]
pub struct MirrorState {
    pub(super) desired: Mutex<(u64, Arc<Vec<StaticPod>>)>,
    /// By static pod UID: where its mirror stands, in words.
    pub(super) reports: Mutex<BTreeMap<String, String>>,
    pub(super) node_uid: Mutex<Option<String>>,
}

/// What the mirror's threads share: the node, and the state it shares with the agent.
pub(super) struct Env {
    pub(super) node: Arc<Node>,
    pub(super) state: Arc<MirrorState>,
}

impl MirrorState {
    /// The static pods the agent runs now.
    pub fn set_desired<'a>(&self, pods: impl Iterator<Item = &'a StaticPod>) {
        let mut d = crate::locks::lock(&self.desired);
        d.0 += 1;
        d.1 = Arc::new(pods.cloned().collect());
    }

    /// Where the mirror of the static pod `uid` stands (None when atoll mirrors nothing).
    pub fn report(&self, uid: &str) -> Option<String> {
        crate::locks::lock(&self.reports).get(uid).cloned()
    }

    pub(super) fn set_report(&self, uid: &str, text: String) {
        crate::locks::lock(&self.reports).insert(uid.to_string(), text);
    }

    pub(super) fn desired(&self) -> (u64, Arc<Vec<StaticPod>>) {
        crate::locks::lock(&self.desired).clone()
    }

    pub(super) fn node_uid(&self) -> Option<String> {
        crate::locks::lock(&self.node_uid).clone()
    }
}
