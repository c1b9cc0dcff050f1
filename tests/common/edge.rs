//! The node `edge-1` for tests that run atoll's mirror in this process: its facts (a runtime
//! shown up), and the mirror's options for it.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Node `edge-1` (2 CPUs, 4 GiB, containerd), its heartbeat fresh for an hour.
pub fn node() -> Arc<atoll::node::Node> {
    let node = atoll::node::Node::new(atoll::node::Facts {
        name: "edge-1".into(),
        host_ip: "192.0.2.7".into(),
        cpu_millis: 2000,
        memory_bytes: 4 << 30,
        runtime_name: "containerd".into(),
        labels: atoll::node::machine::labels("edge-1", &Default::default()),
        allocatable: atoll::node::machine::Resources {
            cpu_millis: 2000,
            memory_bytes: 4 << 30,
            ephemeral_bytes: 0,
            pods: 10,
        },
        ..Default::default()
    });
    node.heartbeat().beat(Instant::now(), true, Duration::from_secs(3600));
    node
}

/// The mirror's options for `edge-1` through `kubeconfig`: status compared every `update`,
/// reported every 5 minutes, a 40 s lease, its state under `dir`.
pub fn mirror_options(kubeconfig: PathBuf, dir: &Path, update: Duration) -> atoll::mirror::Options {
    atoll::mirror::Options {
        kubeconfig,
        node: "edge-1".into(),
        taints: vec![],
        status_update_frequency: update,
        status_report_frequency: Duration::from_secs(300),
        lease_duration_seconds: 40,
        runtime_version: "containerd://1.6.20".into(),
        endpoint_port: 0,
        encrypted_pod_specs: false,
        bootstrap_kubeconfig: None,
        cert_dir: dir.join("pki"),
        rotate_certificates: false,
        server_tls_bootstrap: false,
        serving: None,
        api_source: None,
    }
}
