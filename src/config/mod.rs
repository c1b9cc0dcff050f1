//! The agent's settings, one checked value ([`Settings`]) from the command line's flags
//! (`flags`, the one table of them), over the kubelet config file (`kubelet`), with atoll's own
//! file (`atoll`) for what kubelet has no field for, over kubelet's defaults. `Settings` holds
//! each part's own settings, each built and checked by a small function of `parts`, with the
//! flag or the file and field named in every error, so the parts get only valid settings.
//! [`needs_restart`] says which changes a SIGHUP cannot apply.

pub mod atoll;
mod error;
mod fields;
pub mod flags;
pub mod konnectivity;
pub mod kubelet;
pub mod parts;

pub use crate::duration::parse_duration;
pub use atoll::AtollConfiguration;
pub use error::{Error, Problem};
pub use flags::{Flag, Flags};
pub use kubelet::KubeletConfiguration;
pub use parts::{
    hostname, ImageSettings, Listeners, MirrorSettings, NodeSettings, RuntimeSettings, SourceSettings, UrlSettings,
    DEFAULT_CHECK_FREQUENCY, DEFAULT_ROOT_DIR, DEFAULT_RUNTIME_ENDPOINT,
};

/// The agent's settings, part by part: a flag wins over the `--config` file (a kubelet
/// `KubeletConfiguration`), which wins over kubelet's defaults.
#[derive(Clone, Debug)]
pub struct Settings {
    pub node: NodeSettings,
    pub sources: SourceSettings,
    pub runtime: RuntimeSettings,
    pub images: ImageSettings,
    /// `rollbackAfter`, `rollbackMaxRestarts`: health-gated rollback for every pod.
    pub rollback: Option<crate::pod::rollback_policy::Policy>,
    pub listeners: Listeners,
    pub mirror: MirrorSettings,
    /// Stop every pod before exiting on SIGTERM (kubelet leaves them running).
    pub drain_on_exit: bool,
    /// What the config files held that this version does not act on, one line each.
    pub config_notes: Vec<String>,
}

impl Settings {
    /// Flags, over the `--config` file, over defaults.
    pub fn load(flags: &Flags) -> Result<Settings, Error> {
        let (kubelet, mut config_notes) = match flags.get(Flag::Config) {
            Some(path) => KubeletConfiguration::load(std::path::Path::new(path))?,
            None => (KubeletConfiguration::default(), Vec::new()),
        };
        let (own, own_notes) = match flags.get(Flag::AtollConfig) {
            Some(path) => AtollConfiguration::load(std::path::Path::new(path))?,
            None => (AtollConfiguration::default(), Vec::new()),
        };
        config_notes.extend(own_notes);
        let own_shown = flags.get(Flag::AtollConfig).unwrap_or("(none)");
        let i = parts::Inputs { flags, kubelet: &kubelet, own: &own, own_shown };
        let node = parts::node(&i)?;
        Ok(Settings {
            sources: parts::sources(&i)?,
            runtime: parts::runtime(&i, &node.root_dir)?,
            images: parts::images(&i, &node.root_dir)?,
            rollback: own.rollback(own_shown)?,
            listeners: parts::listeners(&i, &node.name)?,
            mirror: parts::mirror(&i, &node.root_dir)?,
            drain_on_exit: flags.is_set(Flag::DrainOnExit),
            config_notes,
            node,
        })
    }
}

/// What changed from `old` to `new` that only a restart of atoll applies (a SIGHUP applies
/// the runtime's tuning: back-off limits, registry credentials, runtime classes). A pure
/// function: every part is compared whole, so no setting can change unnamed.
pub fn needs_restart(old: &Settings, new: &Settings) -> Vec<&'static str> {
    let (o, n) = (&old.sources, &new.sources);
    let mut later = Vec::new();
    let mut name = |changed: bool, what: &'static str| {
        if changed {
            later.push(what);
        }
    };
    name(old.node != new.node, "the node (name, IP, DNS, root and pod log directories)");
    name(
        n.manifest_path != o.manifest_path || n.file_check_frequency != o.file_check_frequency,
        "the manifest directory",
    );
    name(n.url != o.url, "the manifest URL");
    // Keys and `require` are read by the sources when they start: until the restart, what
    // runs was checked under the old settings (the log line says so).
    name(n.trust != o.trust, "manifestTrust");
    let recipient = |s: &SourceSettings| s.decryption.as_ref().map(|k| k.recipient());
    name(n.secrets_dir != o.secrets_dir || recipient(n) != recipient(o), "secretsDir, decryptionKeyFile");
    name(n.strict != o.strict, "strictness");
    let (ro, rn) = (&old.runtime, &new.runtime);
    name(rn.endpoint != ro.endpoint || rn.request_timeout != ro.request_timeout, "the runtime endpoint");
    name(rn.engine != ro.engine, "the engine (syncFrequency, relistPeriod, pod logs, strictImagePullPolicy)");
    name(old.images != new.images, "images (imagesDir, ctrPath, image GC)");
    name(old.listeners != new.listeners, "the API listeners");
    name(old.mirror != new.mirror, "the mirror (kubeconfig, node labels, taints, maxPods, frequencies)");
    name(old.rollback != new.rollback, "rollbackAfter, rollbackMaxRestarts");
    name(old.drain_on_exit != new.drain_on_exit, "--drain-on-exit");
    later
}

#[cfg(test)]
mod tests;
