//! Node-wide state, at the bottom of the house: what every part may know of this node and
//! nothing that belongs to one of them. A [`Node`] has private fields, one constructor and
//! narrow handles:
//!
//! - [`Node::facts`]: the node's name, labels, addresses, capacity and allocatable resources,
//!   directories and DNS, fixed at start (`machine` computes labels and allocatable);
//! - [`Node::statuses`]: every pod's latest status (written by workers, read by the API and
//!   the mirror), and [`Node::events`]: the lifecycle events;
//! - [`Node::heartbeat`]: the relist's heartbeat, one reading of "the sync loop is alive";
//! - [`Node::imports`]: the images directory's imports (under way, done, failed);
//! - [`Node::objects`]: the local ConfigMaps and Secrets (the agent writes the sources'
//!   sets; workers read them when a container starts and to refresh a pod's volumes).
//!
//! `observed` is the engine's vocabulary for what the runtime shows, shared with the probes
//! and the status. The runtime client, the mirror's state, the back-offs and the registry
//! credentials are not here: the agent hands its one runtime client to each part that calls it
//! (the engine, probes, image GC, the API), and the rest belong to the mirror and the engine.

pub mod events;
pub mod heartbeat;
pub mod imports;
pub mod machine;
pub mod observed;
pub mod probing;
pub mod store;

pub use events::Events;
pub use heartbeat::Heartbeat;
pub use imports::Imports;
pub use store::StatusStore;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// What the node is, fixed at start.
#[derive(Clone, Debug, Default)]
pub struct Facts {
    /// The node name (lowercase; pods are named `<name>-<node>`).
    pub name: String,
    /// atoll's state directory (`<root>/pods/<uid>/...`, `<root>/sources`).
    pub root_dir: PathBuf,
    /// `podLogsDir`: `<dir>/<ns>_<name>_<uid>/<container>/<n>.log`.
    pub pod_logs_dir: PathBuf,
    /// The node's IP (hostNetwork pods' IP; probes without a host there go here).
    pub host_ip: String,
    /// CPU capacity in millicores and memory capacity in bytes (env `resourceFieldRef`s of
    /// containers without limits, oom_score_adj).
    pub cpu_millis: i64,
    pub memory_bytes: i64,
    /// The runtime's name for container IDs (`containerd://...`).
    pub runtime_name: String,
    /// clusterDNS and clusterDomain (ClusterFirst DNS), and the host's resolv.conf text.
    pub cluster_dns: Vec<String>,
    pub cluster_domain: String,
    pub host_resolv_conf: String,
    /// The node's labels (`machine::labels`): what pods' node selectors and affinity match.
    pub labels: std::collections::BTreeMap<String, String>,
    /// The ephemeral-storage capacity: the size of the filesystem of `root_dir`.
    pub ephemeral_bytes: i64,
    /// What pods may request in all (`machine::allocatable`).
    pub allocatable: machine::Resources,
    /// Whether the kernel enforces AppArmor (pods that ask for a profile need it).
    pub apparmor: bool,
    /// `allowedUnsafeSysctls`: sysctls (or prefixes ending in `*`) pods may set besides the
    /// safe ones.
    pub allowed_unsafe_sysctls: Vec<String>,
}

impl Facts {
    /// The node's allocatable CPU and memory, for the downward API.
    pub fn allocatable(&self) -> crate::pod::fieldpath::Allocatable {
        let a = &self.allocatable;
        crate::pod::fieldpath::Allocatable { cpu_millis: a.cpu_millis, memory_bytes: a.memory_bytes }
    }
}

/// The node-wide state every part shares.
pub struct Node {
    facts: Facts,
    /// Every pod's latest status.
    statuses: StatusStore,
    /// Lifecycle events (a log line each, and the ring the local API serves).
    events: Events,
    heartbeat: Heartbeat,
    imports: Imports,
    objects: crate::objects::Store,
    /// When the agent started (probes spread their first run over their first period).
    started: Instant,
}

impl Node {
    pub fn new(facts: Facts) -> Arc<Node> {
        Arc::new(Node {
            facts,
            statuses: StatusStore::default(),
            events: Events::default(),
            heartbeat: Heartbeat::default(),
            imports: Imports::default(),
            objects: crate::objects::Store::default(),
            started: Instant::now(),
        })
    }

    /// A node started an hour ago, for tests and benchmarks.
    pub fn sample() -> Arc<Node> {
        let facts = Facts {
            name: "test-node".into(),
            host_ip: "127.0.0.1".into(),
            cpu_millis: 1000,
            memory_bytes: 1 << 30,
            allocatable: machine::Resources { cpu_millis: 1000, memory_bytes: 1 << 30, ephemeral_bytes: 0, pods: 110 },
            runtime_name: "containerd".into(),
            ..Default::default()
        };
        let mut node = Node::new(facts);
        if let Some(n) = Arc::get_mut(&mut node) {
            n.started = Instant::now().checked_sub(Duration::from_secs(3600)).unwrap_or(n.started);
        }
        node
    }

    pub fn facts(&self) -> &Facts {
        &self.facts
    }

    pub fn statuses(&self) -> &StatusStore {
        &self.statuses
    }

    pub fn events(&self) -> &Events {
        &self.events
    }

    pub fn heartbeat(&self) -> &Heartbeat {
        &self.heartbeat
    }

    pub fn imports(&self) -> &Imports {
        &self.imports
    }

    pub fn objects(&self) -> &crate::objects::Store {
        &self.objects
    }

    pub fn started(&self) -> Instant {
        self.started
    }

    /// `None` while the sync loop is alive, else why not (healthz, the watchdog).
    pub fn stalled(&self) -> Option<String> {
        self.heartbeat.stalled(self.started)
    }
}
