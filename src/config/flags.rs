//! Every flag atoll takes, named once: its name (kubelet's where kubelet has it), its kubectl
//! short form, how it takes a value, which commands take it, its help line, and whether this
//! version acts on it. Parsing, the per-command help and the settings all read this table, so a
//! flag is spelt in one place.

/// A flag. The code refers to flags by this, never by their spelling.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Flag {
    Config,
    AtollConfig,
    PodManifestPath,
    ManifestUrl,
    ManifestUrlHeader,
    ManifestUrlCaFile,
    ContainerRuntimeEndpoint,
    FileCheckFrequency,
    HttpCheckFrequency,
    SyncFrequency,
    HostnameOverride,
    RootDir,
    Kubeconfig,
    BootstrapKubeconfig,
    CertDir,
    RotateCertificates,
    RotateServerCertificates,
    NodeIp,
    NodeLabels,
    NodeStatusUpdateFrequency,
    NodeStatusReportFrequency,
    RuntimeRequestTimeout,
    ApiSocket,
    DrainOnExit,
    ApiPodSource,
    Strict,
    Verbosity,
    Output,
    Namespace,
    Container,
    Follow,
    Previous,
    Tail,
    Timestamps,
    Since,
    SinceTime,
    LimitBytes,
    DryRun,
    Stdin,
    Tty,
    Quiet,
    Address,
}

/// How a flag takes its value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Value,
    /// A value, and the flag may be given again (every value is kept).
    Repeated,
    /// No value (`--strict`), or `=true`/`=false`.
    Bool,
}

/// Which commands take a flag.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Group {
    /// `run`, `validate`, `doctor`: the agent's settings.
    Agent,
    /// `pods`, `describe`, `logs`, `restart`, `images`: talking to a running agent.
    Client,
    /// Both (`--api-socket`).
    Both,
}

pub struct Spec {
    pub flag: Flag,
    pub name: &'static str,
    pub short: Option<&'static str>,
    pub kind: Kind,
    pub group: Group,
    pub help: &'static str,
    /// Whether this version acts on it (a flag kept for kubelet's command lines but not used
    /// yet is reported at start, never silently ignored).
    pub in_use: bool,
}

const fn spec(flag: Flag, name: &'static str, kind: Kind, group: Group, help: &'static str) -> Spec {
    Spec { flag, name, short: None, kind, group, help, in_use: true }
}

const fn short(s: Spec, short: &'static str) -> Spec {
    Spec { short: Some(short), ..s }
}

use Group::{Agent, Both, Client};
use Kind::{Bool, Repeated, Value};

pub const TABLE: &[Spec] = &[
    spec(Flag::Config, "config", Value, Agent, "KubeletConfiguration file (kubelet.config.k8s.io/v1beta1)"),
    spec(
        Flag::AtollConfig,
        "atoll-config",
        Value,
        Agent,
        "atoll's own settings file (AtollConfiguration: back-off, runtime classes, registry credentials)",
    ),
    spec(
        Flag::PodManifestPath,
        "pod-manifest-path",
        Value,
        Agent,
        "directory or file of static pod manifests (staticPodPath)",
    ),
    spec(Flag::ManifestUrl, "manifest-url", Value, Agent, "URL of static pod manifests (staticPodURL)"),
    spec(
        Flag::ManifestUrlHeader,
        "manifest-url-header",
        Repeated,
        Agent,
        "'Name:value,Name:value' headers for --manifest-url (repeatable)",
    ),
    spec(
        Flag::ManifestUrlCaFile,
        "manifest-url-ca-file",
        Value,
        Agent,
        "extra CA certificates (PEM) for an https --manifest-url",
    ),
    spec(
        Flag::ContainerRuntimeEndpoint,
        "container-runtime-endpoint",
        Value,
        Both,
        "CRI socket, default unix:///run/containerd/containerd.sock",
    ),
    spec(
        Flag::FileCheckFrequency,
        "file-check-frequency",
        Value,
        Agent,
        "full rescan of --pod-manifest-path, default 20s",
    ),
    spec(Flag::HttpCheckFrequency, "http-check-frequency", Value, Agent, "poll period of --manifest-url, default 20s"),
    spec(Flag::SyncFrequency, "sync-frequency", Value, Agent, "sync of a pod that did not change, default never"),
    spec(Flag::HostnameOverride, "hostname-override", Value, Agent, "node name instead of the host name"),
    spec(Flag::RootDir, "root-dir", Value, Agent, "atoll's state directory, default /var/lib/atoll"),
    spec(Flag::Kubeconfig, "kubeconfig", Value, Agent, "API server to mirror pods to, when reachable"),
    spec(
        Flag::BootstrapKubeconfig,
        "bootstrap-kubeconfig",
        Value,
        Agent,
        "TLS bootstrap: credentials that ask for the --kubeconfig's client certificate when it has none valid",
    ),
    spec(Flag::CertDir, "cert-dir", Value, Agent, "where issued certificates are kept, default <root-dir>/pki"),
    spec(
        Flag::RotateCertificates,
        "rotate-certificates",
        Bool,
        Agent,
        "renew the client certificate before it expires (rotateCertificates)",
    ),
    spec(
        Flag::RotateServerCertificates,
        "rotate-server-certificates",
        Bool,
        Agent,
        "have the kubelet server's certificate issued and renewed by the cluster (serverTLSBootstrap)",
    ),
    spec(Flag::NodeIp, "node-ip", Value, Agent, "the node's IP address"),
    spec(
        Flag::NodeLabels,
        "node-labels",
        Value,
        Agent,
        "labels for the registered node: key=value,key=value (with --kubeconfig)",
    ),
    spec(
        Flag::NodeStatusUpdateFrequency,
        "node-status-update-frequency",
        Value,
        Agent,
        "how often the node status is checked for changes, default 10s",
    ),
    spec(
        Flag::NodeStatusReportFrequency,
        "node-status-report-frequency",
        Value,
        Agent,
        "how often the node status is sent when unchanged, default 5m",
    ),
    spec(
        Flag::RuntimeRequestTimeout,
        "runtime-request-timeout",
        Value,
        Agent,
        "deadline of CRI calls, e.g. 2m (default)",
    ),
    spec(
        Flag::ApiSocket,
        "api-socket",
        Value,
        Both,
        "the local API's unix socket (default /run/atoll/atoll.sock; none for none)",
    ),
    spec(
        Flag::DrainOnExit,
        "drain-on-exit",
        Bool,
        Agent,
        "on SIGTERM stop every pod before exiting (by default pods keep running, as under kubelet)",
    ),
    spec(
        Flag::ApiPodSource,
        "api-pod-source",
        Bool,
        Agent,
        "with --kubeconfig, run the pods the cluster binds to the node (default true; =false for static pods only)",
    ),
    spec(Flag::Strict, "strict", Bool, Agent, "treat manifest fields atoll does not implement as errors"),
    spec(Flag::Verbosity, "v", Value, Agent, "log verbosity: 0 info, 2 debug, 4 trace"),
    short(spec(Flag::Output, "output", Value, Client, "pods: json, yaml or wide"), "o"),
    short(spec(Flag::Namespace, "namespace", Value, Client, "the pod's namespace (default: default)"), "n"),
    short(
        spec(Flag::Container, "container", Value, Client, "logs, exec, attach: the container (default: the first)"),
        "c",
    ),
    short(spec(Flag::Follow, "follow", Bool, Client, "logs: stream until the container stops"), "f"),
    short(spec(Flag::Previous, "previous", Bool, Client, "logs: the previous instance"), "p"),
    spec(Flag::Tail, "tail", Value, Client, "logs: only the last N lines"),
    spec(Flag::Timestamps, "timestamps", Bool, Client, "logs: each line with its time"),
    spec(Flag::Since, "since", Value, Client, "logs: only lines newer than this (5s, 2m, 3h)"),
    spec(Flag::SinceTime, "since-time", Value, Client, "logs: only lines from this RFC 3339 time on"),
    spec(Flag::LimitBytes, "limit-bytes", Value, Client, "logs: at most this many bytes"),
    spec(Flag::DryRun, "dry-run", Bool, Client, "images prune: list what would be removed, remove nothing"),
    short(spec(Flag::Stdin, "stdin", Bool, Client, "exec, attach: pass stdin to the container"), "i"),
    short(spec(Flag::Tty, "tty", Bool, Client, "exec, attach: stdin is a terminal (raw mode, resized)"), "t"),
    short(spec(Flag::Quiet, "quiet", Bool, Client, "exec, attach: only the command's output"), "q"),
    spec(Flag::Address, "address", Value, Client, "port-forward: addresses to listen on (default: localhost)"),
];

impl Flag {
    pub fn spec(self) -> &'static Spec {
        TABLE.iter().find(|s| s.flag == self).expect("every flag is in the table")
    }

    /// The flag's long name, without dashes.
    pub fn name(self) -> &'static str {
        self.spec().name
    }
}

/// Flags as given, in order; lookups take the last value, as pflag does.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Flags {
    given: Vec<(Flag, String)>,
}

impl Flags {
    pub fn push(&mut self, flag: Flag, value: String) {
        self.given.push((flag, value));
    }

    /// The last value given for `flag`.
    pub fn get(&self, flag: Flag) -> Option<&str> {
        self.given.iter().rev().find(|(f, _)| *f == flag).map(|(_, v)| v.as_str())
    }

    /// Every value given for a repeatable flag, in order.
    pub fn all(&self, flag: Flag) -> Vec<&str> {
        self.given.iter().filter(|(f, _)| *f == flag).map(|(_, v)| v.as_str()).collect()
    }

    pub fn is_set(&self, flag: Flag) -> bool {
        self.get(flag).is_some_and(|v| v == "true")
    }

    /// The distinct flags given, in first-seen order.
    pub fn given(&self) -> Vec<Flag> {
        let mut flags: Vec<Flag> = Vec::new();
        for (f, _) in &self.given {
            if !flags.contains(f) {
                flags.push(*f);
            }
        }
        flags
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_flag_has_one_row_and_names_are_unique() {
        for s in TABLE {
            assert_eq!(TABLE.iter().filter(|t| t.flag == s.flag).count(), 1, "{} has two rows", s.name);
            assert_eq!(TABLE.iter().filter(|t| t.name == s.name).count(), 1, "{}", s.name);
        }
    }
}
