//! Each part's settings, as [`Settings`](super::Settings) holds them, and the small checked
//! function that builds each from the flags, the KubeletConfiguration and the
//! AtollConfiguration ([`Inputs`]). A value that is wrong is an error naming the flag or the
//! file and field; a part only ever gets valid settings.

use super::atoll::AtollConfiguration;
use super::error::{Error, Problem};
use super::flags::{Flag, Flags};
use super::kubelet::KubeletConfiguration;
use crate::cri::Endpoint;
use crate::duration::parse_duration;
use crate::kubelet_server::ServerSettings;
use crate::runtime::logs::Rotation;
use crate::runtime::{EngineConfig, TuningConfig};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

pub const DEFAULT_RUNTIME_ENDPOINT: &str = "unix:///run/containerd/containerd.sock";
pub const DEFAULT_ROOT_DIR: &str = "/var/lib/atoll";
pub const DEFAULT_CHECK_FREQUENCY: Duration = Duration::from_secs(20);

/// What the settings are made from: the flags over the kubelet file over atoll's own file.
pub struct Inputs<'a> {
    pub flags: &'a Flags,
    pub kubelet: &'a KubeletConfiguration,
    pub own: &'a AtollConfiguration,
    /// How atoll's own file is named in errors.
    pub own_shown: &'a str,
}

impl Inputs<'_> {
    /// A duration from `flag`, else the kubelet file's `field`, else `default`; never zero.
    fn duration(
        &self,
        flag: Flag,
        field: &str,
        from_config: &Option<String>,
        default: Duration,
    ) -> Result<Duration, Error> {
        let (raw, from_flag) = match (self.flags.get(flag), from_config) {
            (Some(v), _) => (v, true),
            (None, Some(v)) => (v.as_str(), false),
            (None, None) => return Ok(default),
        };
        let bad = |reason: String| if from_flag { Error::flag(flag, reason) } else { Error::kubelet(field, reason) };
        let d = parse_duration(raw).map_err(|e| bad(e.to_string()))?;
        if d.is_zero() {
            return Err(bad("must be more than zero".into()));
        }
        Ok(d)
    }

    /// A string from `flag`, else from a config file.
    fn text(&self, flag: Flag, from_config: &Option<String>) -> Option<String> {
        self.flags.get(flag).map(String::from).or_else(|| from_config.clone())
    }
}

/// The node's identity and the host facts pods see.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeSettings {
    pub name: String,
    /// `--node-ip`; else the address of the default route.
    pub ip: Option<String>,
    /// `--root-dir` (over `stateDir`): atoll's state.
    pub root_dir: PathBuf,
    pub pod_logs_dir: PathBuf,
    pub cluster_dns: Vec<String>,
    pub cluster_domain: String,
    /// The resolver configuration pods with dnsPolicy Default inherit ("" for none).
    pub resolv_conf: String,
    /// `kubeReserved` and `systemReserved` together, and `evictionHard`'s memory and
    /// filesystem thresholds: what allocatable leaves out.
    pub reserved: crate::node::machine::Reserved,
    /// `allowedUnsafeSysctls`, each known to be namespaced.
    pub allowed_unsafe_sysctls: Vec<String>,
}

pub fn node(i: &Inputs) -> Result<NodeSettings, Error> {
    let name = i.flags.get(Flag::HostnameOverride).map_or_else(hostname, String::from);
    let name = crate::pod::identity::node_name(&name);
    if let Err(reason) = crate::pod::validate::dns1123_subdomain(&name) {
        return Err(Problem::NodeName { name, reason: reason.to_string() }.into());
    }
    let root_dir = i
        .flags
        .get(Flag::RootDir)
        .map(String::from)
        .or(i.own.state_dir.clone().filter(|d| !d.is_empty()))
        .unwrap_or_else(|| DEFAULT_ROOT_DIR.into());
    let cfg = i.kubelet;
    Ok(NodeSettings {
        name,
        ip: i.flags.get(Flag::NodeIp).map(String::from),
        root_dir: root_dir.into(),
        pod_logs_dir: cfg.pod_logs_dir.clone().unwrap_or_else(|| "/var/log/pods".into()).into(),
        cluster_dns: cfg.cluster_dns.clone().unwrap_or_default(),
        cluster_domain: cfg.cluster_domain.clone().unwrap_or_default(),
        resolv_conf: cfg.resolv_conf.clone().unwrap_or_else(|| "/etc/resolv.conf".into()),
        reserved: reserved(cfg)?,
        allowed_unsafe_sysctls: match &cfg.allowed_unsafe_sysctls {
            Some(list) => {
                for p in list {
                    crate::admission::sysctls::check_pattern(p)
                        .map_err(|e| Error::kubelet("allowedUnsafeSysctls", e.to_string()))?;
                }
                list.iter().map(|p| crate::admission::sysctls::dotted(p)).collect()
            }
            None => Vec::new(),
        },
    })
}

/// `kubeReserved` plus `systemReserved`, and `evictionHard` (when given, only its thresholds
/// count, as kubelet's without `mergeDefaultEvictionSettings`).
fn reserved(cfg: &crate::config::kubelet::KubeletConfiguration) -> Result<crate::node::machine::Reserved, Error> {
    use crate::node::machine::{Reserved, Threshold};
    let mut r = Reserved::default();
    for (field, map) in [("kubeReserved", &cfg.kube_reserved), ("systemReserved", &cfg.system_reserved)] {
        for (name, q) in map.iter().flatten() {
            if q.is_negative() {
                return Err(Error::kubelet(&format!("{field}.{name}"), "must not be negative".into()));
            }
            let add = |total: &mut i64, v: i64| *total = total.saturating_add(v);
            match name.as_str() {
                "cpu" => add(&mut r.cpu_millis, q.milli_value()),
                "memory" => add(&mut r.memory_bytes, q.value()),
                "ephemeral-storage" => add(&mut r.ephemeral_bytes, q.value()),
                "pid" => {}
                _ => {
                    let reason = "not a resource (cpu, memory, ephemeral-storage, pid)";
                    return Err(Error::kubelet(&format!("{field}.{name}"), reason.into()));
                }
            }
        }
    }
    if let Some(map) = &cfg.eviction_hard {
        (r.memory_available, r.nodefs_available) = (None, None);
        for (signal, value) in map {
            let bad = |reason: String| Error::kubelet(&format!("evictionHard.{signal}"), reason);
            let slot = match signal.as_str() {
                "memory.available" => Some(&mut r.memory_available),
                "nodefs.available" => Some(&mut r.nodefs_available),
                // Other signals do not change allocatable (and atoll does not evict).
                "allocatableMemory.available"
                | "nodefs.inodesFree"
                | "imagefs.available"
                | "imagefs.inodesFree"
                | "pid.available"
                | "containerfs.available"
                | "containerfs.inodesFree" => None,
                _ => return Err(bad("not an eviction signal".into())),
            };
            // kubelet's parseThresholdStatement: 0% and 100% set no threshold; a percentage is
            // a float32 between them; an amount must be positive.
            let threshold = match value.strip_suffix('%') {
                Some(_) if value == "0%" || value == "100%" => None,
                Some(p) => match p.parse::<f32>() {
                    Ok(p) if (0.0..=100.0).contains(&p) => Some(Threshold::Share((p / 100.0).to_bits())),
                    _ => return Err(bad(format!("{value:?} is not a percentage from 0 to 100"))),
                },
                None => match crate::pod::quantity::Quantity::parse(value) {
                    Ok(q) if !q.is_negative() && !q.is_zero() => Some(Threshold::Bytes(q.value())),
                    _ => return Err(bad(format!("{value:?} is not a positive quantity or a percentage"))),
                },
            };
            if let Some(slot) = slot {
                *slot = threshold;
            }
        }
    }
    Ok(r)
}

/// The manifest URL (`staticPodURL`) and how it is fetched (`atoll validate` fetches a URL
/// it is given the same way).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UrlSettings {
    pub url: Option<String>,
    /// `--manifest-url-header` (over `staticPodURLHeader`): sent to the URL's origin only.
    pub headers: Vec<(String, String)>,
    pub ca_file: Option<PathBuf>,
    pub check_frequency: Duration,
}

/// Where pods come from, and how their payloads are trusted.
#[derive(Clone, Debug)]
pub struct SourceSettings {
    /// `staticPodPath`, trailing separators stripped as kubelet does.
    pub manifest_path: Option<PathBuf>,
    pub file_check_frequency: Duration,
    pub url: UrlSettings,
    /// `secretsDir`: Secrets and ConfigMaps apart from the pods (root-owned, 0700).
    pub secrets_dir: Option<PathBuf>,
    /// `manifestTrust`: the keys that sign manifests, and whether a signature is required.
    pub trust: Option<crate::trust::Trust>,
    /// `decryptionKeyFile`: the identity `.age` manifests are decrypted with.
    pub decryption: Option<Arc<crate::age::Identity>>,
    /// `--strict`: manifest fields atoll does not implement are errors.
    pub strict: bool,
}

pub fn sources(i: &Inputs) -> Result<SourceSettings, Error> {
    let (cfg, own, shown) = (i.kubelet, i.own, i.own_shown);
    let check = |flag, field, value: &Option<String>| i.duration(flag, field, value, DEFAULT_CHECK_FREQUENCY);
    let url = UrlSettings {
        url: i.text(Flag::ManifestUrl, &cfg.static_pod_url).filter(|u| !u.is_empty()),
        headers: url_headers(i)?,
        ca_file: i.flags.get(Flag::ManifestUrlCaFile).map(Into::into),
        check_frequency: check(Flag::HttpCheckFrequency, "httpCheckFrequency", &cfg.http_check_frequency)?,
    };
    Ok(SourceSettings {
        manifest_path: i.text(Flag::PodManifestPath, &cfg.static_pod_path).filter(|p| !p.is_empty()).map(|p| {
            let t = p.trim_end_matches('/');
            if t.is_empty() {
                "/".into()
            } else {
                t.into()
            }
        }),
        file_check_frequency: check(Flag::FileCheckFrequency, "fileCheckFrequency", &cfg.file_check_frequency)?,
        url,
        secrets_dir: own.secrets_dir.as_ref().filter(|d| !d.is_empty()).map(PathBuf::from),
        trust: own.manifest_trust(shown)?,
        decryption: own.decryption(shown)?,
        strict: match i.flags.get(Flag::Strict) {
            Some(v) => v == "true",
            None => own.strict.unwrap_or(false),
        },
    })
}

/// `--manifest-url-header` flags, or when none is given, `staticPodURLHeader`.
fn url_headers(i: &Inputs) -> Result<Vec<(String, String)>, Error> {
    let mut headers = Vec::new();
    let flags = i.flags.all(Flag::ManifestUrlHeader);
    if flags.is_empty() {
        for (name, values) in i.kubelet.static_pod_url_header.iter().flatten() {
            for v in values {
                let parsed = crate::source::http::parse_header_flag(&format!("{name}:{v}"))
                    .map_err(|e| Error::kubelet("staticPodURLHeader", e.to_string()))?;
                headers.extend(parsed);
            }
        }
    }
    for v in flags {
        headers.extend(
            crate::source::http::parse_header_flag(v)
                .map_err(|e| Error::flag(Flag::ManifestUrlHeader, e.to_string()))?,
        );
    }
    Ok(headers)
}

/// The container runtime and the engine's settings.
#[derive(Clone, Debug)]
pub struct RuntimeSettings {
    pub endpoint: Endpoint,
    pub request_timeout: Duration,
    /// Fixed for the engine's life.
    pub engine: EngineConfig,
    /// What SIGHUP applies under running pods.
    pub tuning: TuningConfig,
}

pub fn runtime(i: &Inputs, root_dir: &std::path::Path) -> Result<RuntimeSettings, Error> {
    let (cfg, own, shown) = (i.kubelet, i.own, i.own_shown);
    for (class, handler) in &own.runtime_classes {
        if crate::pod::validate::dns1123_subdomain(class).is_err() || handler.is_empty() {
            let reason = "needs a DNS subdomain name and a non-empty handler";
            return Err(Error::in_file(shown, &format!("runtimeClasses.{class}"), reason.into()));
        }
    }
    let endpoint = i
        .text(Flag::ContainerRuntimeEndpoint, &cfg.container_runtime_endpoint)
        .unwrap_or_else(|| DEFAULT_RUNTIME_ENDPOINT.into());
    let sync = i.duration(Flag::SyncFrequency, "syncFrequency", &cfg.sync_frequency, Duration::ZERO)?;
    Ok(RuntimeSettings {
        endpoint: Endpoint::parse(&endpoint).map_err(|e| Error::from(Problem::Endpoint(e)))?,
        request_timeout: i.duration(
            Flag::RuntimeRequestTimeout,
            "runtimeRequestTimeout",
            &cfg.runtime_request_timeout,
            crate::cri::client::DEFAULT_REQUEST_TIMEOUT,
        )?,
        engine: EngineConfig {
            // How often a pod whose runtime state did not change is synced anyway: never
            // unless given (and not zero).
            resync: Some(sync).filter(|d| !d.is_zero()),
            relist: own.relist_period(shown)?,
            log_rotation: log_rotation(cfg)?,
            strict_image_pull_policy: own.strict_image_pull_policy.unwrap_or(false),
        },
        tuning: TuningConfig {
            crash_loop_back_off: AtollConfiguration::back_off(shown, "crashLoopBackOff", &own.crash_loop_back_off)?,
            image_pull_back_off: AtollConfiguration::back_off(shown, "imagePullBackOff", &own.image_pull_back_off)?,
            keyring: own.keyring(shown, root_dir)?,
            runtime_handlers: own.runtime_classes.clone(),
        },
    })
}

/// containerLogMaxSize, containerLogMaxFiles.
fn log_rotation(cfg: &KubeletConfiguration) -> Result<Rotation, Error> {
    let max_size = match cfg.container_log_max_size {
        Some(q) if q.value() > 0 => q.value() as u64,
        Some(q) => return Err(Error::kubelet("containerLogMaxSize", format!("{q} must be positive"))),
        None => crate::runtime::logs::DEFAULT_MAX_SIZE,
    };
    let max_files = match cfg.container_log_max_files {
        Some(n) if n >= 2 => n as usize,
        Some(n) => return Err(Error::kubelet("containerLogMaxFiles", format!("{n} must be at least 2"))),
        None => crate::runtime::logs::DEFAULT_MAX_FILES,
    };
    Ok(Rotation { max_size, max_files })
}

/// Side-loading and image garbage collection.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ImageSettings {
    /// `imagesDir`: image tarballs imported into the runtime (default `<root-dir>/images`).
    pub dir: PathBuf,
    /// `ctrPath`: containerd's `ctr`, when not the first on PATH.
    pub ctr_path: Option<PathBuf>,
    /// imageGCHighThresholdPercent, imageGCLowThresholdPercent, imageMinimumGCAge,
    /// imageMaximumGCAge.
    pub gc: crate::images::gc::Policy,
    /// atoll's `imageGCPeriod` (kubelet's fixed 5 minutes by default).
    pub gc_period: Duration,
}

pub fn images(i: &Inputs, root_dir: &std::path::Path) -> Result<ImageSettings, Error> {
    Ok(ImageSettings {
        dir: i.own.images_dir.as_ref().map_or_else(|| root_dir.join("images"), PathBuf::from),
        ctr_path: i.own.ctr_path.as_ref().map(PathBuf::from),
        gc: i.kubelet.image_gc()?,
        gc_period: i.own.image_gc_period(i.own_shown)?,
    })
}

/// Where atoll listens.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Listeners {
    /// The local API's socket, if any.
    pub api_socket: Option<PathBuf>,
    /// `healthzBindAddress:healthzPort` (none when the port is 0).
    pub healthz: Option<String>,
    /// The read-only API on loopback (`readOnlyPort`; none when 0, kubelet's default).
    pub read_only: Option<String>,
    /// kubelet's HTTPS server (`address:port`; none when the port is 0). It serves when atoll
    /// mirrors to an API server, or without one as `kubelet_server::standalone` allows.
    pub kubelet: Option<crate::kubelet_server::ServerSettings>,
}

pub fn listeners(i: &Inputs, node_name: &str) -> Result<Listeners, Error> {
    let cfg = i.kubelet;
    let port = cfg.healthz_port.unwrap_or(10248);
    if !(0..=65535).contains(&port) {
        return Err(Error::kubelet("healthzPort", format!("{port} is not a port number")));
    }
    let addr = cfg.healthz_bind_address.clone().unwrap_or_else(|| "127.0.0.1".into());
    Ok(Listeners {
        api_socket: match i.text(Flag::ApiSocket, &i.own.api_socket) {
            None => Some(crate::api::DEFAULT_SOCKET.into()),
            Some(p) if p.is_empty() || p == "none" => None,
            Some(p) => Some(p.into()),
        },
        healthz: (port > 0).then(|| {
            if addr.contains(':') {
                format!("[{addr}]:{port}")
            } else {
                format!("{addr}:{port}")
            }
        }),
        read_only: match cfg.read_only_port.unwrap_or(0) {
            0 => None,
            p if (1..=65535).contains(&p) => Some(format!("127.0.0.1:{p}")),
            p => return Err(Error::kubelet("readOnlyPort", format!("{p} is not a port number"))),
        },
        kubelet: kubelet_server(cfg, node_name)?,
    })
}

/// kubelet's server settings, with KubeletConfiguration v1beta1's defaults (0.0.0.0:10250,
/// no anonymous access, token webhook on, Webhook authorization, the debugging handlers on).
fn kubelet_server(cfg: &KubeletConfiguration, node: &str) -> Result<Option<ServerSettings>, Error> {
    use crate::kubelet_server::auth::{AuthSettings as Auth, Mode, ALLOWED_TTL, DENIED_TTL};
    let port = cfg.port.unwrap_or(10250);
    let port = u16::try_from(port).map_err(|_| Error::kubelet("port", format!("{port} is not a port number")))?;
    let ip: std::net::IpAddr = match cfg.address.as_deref().unwrap_or("0.0.0.0").parse() {
        Ok(ip) => ip,
        Err(_) => return Err(Error::kubelet("address", format!("{:?} is not an IP address", cfg.address))),
    };
    let tls = match (&cfg.tls_cert_file, &cfg.tls_private_key_file) {
        (Some(c), Some(k)) if !c.is_empty() && !k.is_empty() => Some((c.into(), k.into())),
        (None, None) => None,
        _ => {
            return Err(Error::invalid("config fields tlsCertFile and tlsPrivateKeyFile: give both or neither".into()))
        }
    };
    let authn = cfg.authentication.as_ref();
    let authz = cfg.authorization.as_ref();
    let defaults = Auth::kubelet_defaults(node);
    let ttl = |field: &str, raw: Option<&String>, default: Duration| match raw {
        None => Ok(default),
        Some(raw) => parse_duration(raw).map_err(|e| Error::kubelet(field, e.to_string())),
    };
    let webhook = authn.and_then(|a| a.webhook.as_ref());
    let token_ttl =
        ttl("authentication.webhook.cacheTTL", webhook.and_then(|w| w.cache_ttl.as_ref()), defaults.token_ttl)?;
    let hook = authz.and_then(|a| a.webhook.as_ref());
    let mode = match authz.and_then(|a| a.mode.as_deref()).unwrap_or("Webhook") {
        "AlwaysAllow" => Mode::AlwaysAllow,
        "Webhook" => Mode::Webhook {
            allowed_ttl: ttl(
                "authorization.webhook.cacheAuthorizedTTL",
                hook.and_then(|h| h.cache_authorized_ttl.as_ref()),
                ALLOWED_TTL,
            )?,
            denied_ttl: ttl(
                "authorization.webhook.cacheUnauthorizedTTL",
                hook.and_then(|h| h.cache_unauthorized_ttl.as_ref()),
                DENIED_TTL,
            )?,
        },
        other => {
            let reason = format!("{other:?} must be AlwaysAllow or Webhook");
            return Err(Error::kubelet("authorization.mode", reason));
        }
    };
    let settings = ServerSettings {
        address: std::net::SocketAddr::new(ip, port),
        tls,
        client_ca_file: authn
            .and_then(|a| a.x509.as_ref()?.client_ca_file.clone())
            .filter(|f| !f.is_empty())
            .map(Into::into),
        auth: Auth {
            anonymous: authn.and_then(|a| a.anonymous.as_ref()?.enabled).unwrap_or(false),
            token_webhook: webhook.and_then(|w| w.enabled).unwrap_or(true),
            token_ttl,
            mode,
            node: node.to_string(),
        },
        debugging_handlers: cfg.enable_debugging_handlers.unwrap_or(true),
        idle_timeout: ttl(
            "streamingConnectionIdleTimeout",
            cfg.streaming_connection_idle_timeout.as_ref(),
            Duration::from_secs(4 * 3600),
        )?,
    };
    Ok((port > 0).then_some(settings))
}

/// The API server side: the node object, its lease and the mirror pods.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MirrorSettings {
    /// Mirror to the API server this kubeconfig names (`--kubeconfig`, or `kubeconfig` in the
    /// AtollConfiguration); none: no mirror.
    pub kubeconfig: Option<PathBuf>,
    /// `--node-labels` (over `nodeLabels` of the AtollConfiguration).
    pub node_labels: BTreeMap<String, String>,
    /// registerWithTaints, as API taint objects.
    pub taints: Vec<serde_json::Value>,
    /// maxPods (the node's `pods` capacity).
    pub max_pods: i64,
    pub status_update_frequency: Duration,
    pub status_report_frequency: Duration,
    pub lease_duration_seconds: u32,
    /// The tunnel to a konnectivity server (`konnectivity` in the AtollConfiguration).
    pub tunnel: Option<crate::tunnel::TunnelSettings>,
    /// `mirrorEncryptedPodSpecs`: mirror pods from encrypted manifests unredacted.
    pub encrypted_pod_specs: bool,
    /// `--bootstrap-kubeconfig`: TLS bootstrap when the kubeconfig has no valid certificate.
    pub bootstrap_kubeconfig: Option<PathBuf>,
    /// `--cert-dir` (`<root-dir>/pki`): the issued certificates.
    pub cert_dir: PathBuf,
    /// `rotateCertificates` (`--rotate-certificates`).
    pub rotate_certificates: bool,
    /// `serverTLSBootstrap` (`--rotate-server-certificates`).
    pub server_tls_bootstrap: bool,
    /// `--api-pod-source` (`apiPodSource`): run the pods bound to the node (with a kubeconfig).
    pub api_pod_source: bool,
}

pub fn mirror(i: &Inputs, root_dir: &std::path::Path) -> Result<MirrorSettings, Error> {
    let cfg = i.kubelet;
    let kubeconfig: Option<PathBuf> =
        i.text(Flag::Kubeconfig, &i.own.kubeconfig).filter(|k| !k.is_empty()).map(Into::into);
    let bootstrap_kubeconfig: Option<PathBuf> =
        i.flags.get(Flag::BootstrapKubeconfig).filter(|k| !k.is_empty()).map(Into::into);
    if bootstrap_kubeconfig.is_some() && kubeconfig.is_none() {
        let why = "needs --kubeconfig, where the kubeconfig of the issued certificate is written";
        return Err(Error::flag(Flag::BootstrapKubeconfig, why.into()));
    }
    let mut taints = Vec::new();
    for (n, t) in cfg.register_with_taints.iter().flatten().enumerate() {
        if t.key.is_empty() || !["NoSchedule", "PreferNoSchedule", "NoExecute"].contains(&t.effect.as_str()) {
            let reason = "needs a key and an effect of NoSchedule, PreferNoSchedule or NoExecute";
            return Err(Error::kubelet(&format!("registerWithTaints[{n}]"), reason.into()));
        }
        taints.push(serde_json::to_value(t).unwrap_or_default());
    }
    let api_pod_source = kubeconfig.is_some()
        && match i.flags.get(Flag::ApiPodSource) {
            Some(v) => v == "true",
            None => i.own.api_pod_source.unwrap_or(true),
        };
    Ok(MirrorSettings {
        kubeconfig,
        node_labels: match i.flags.get(Flag::NodeLabels) {
            Some(v) => parse_labels(v)?,
            None => {
                for (k, v) in &i.own.node_labels {
                    check_label(k, v).map_err(|e| Error::in_file(i.own_shown, &format!("nodeLabels.{k}"), e))?;
                }
                i.own.node_labels.clone()
            }
        },
        taints,
        max_pods: match cfg.max_pods {
            None => 110,
            Some(n) if n > 0 => n,
            Some(n) => return Err(Error::kubelet("maxPods", format!("{n} must be positive"))),
        },
        status_update_frequency: i.duration(
            Flag::NodeStatusUpdateFrequency,
            "nodeStatusUpdateFrequency",
            &cfg.node_status_update_frequency,
            Duration::from_secs(10),
        )?,
        status_report_frequency: i.duration(
            Flag::NodeStatusReportFrequency,
            "nodeStatusReportFrequency",
            &cfg.node_status_report_frequency,
            Duration::from_secs(300),
        )?,
        lease_duration_seconds: match cfg.node_lease_duration_seconds {
            None => 40,
            Some(n) if (1..=3600).contains(&n) => n as u32,
            Some(n) => return Err(Error::kubelet("nodeLeaseDurationSeconds", format!("{n} must be 1 to 3600"))),
        },
        tunnel: i.own.konnectivity.clone(),
        encrypted_pod_specs: i.own.mirror_encrypted_pod_specs.unwrap_or(false),
        bootstrap_kubeconfig,
        cert_dir: i.flags.get(Flag::CertDir).filter(|d| !d.is_empty()).map_or_else(|| root_dir.join("pki"), Into::into),
        rotate_certificates: i.flags.is_set(Flag::RotateCertificates) || cfg.rotate_certificates.unwrap_or(false),
        server_tls_bootstrap: i.flags.is_set(Flag::RotateServerCertificates)
            || cfg.server_tls_bootstrap.unwrap_or(false),
        api_pod_source,
    })
}

/// `--node-labels`: `key=value,key=value`.
fn parse_labels(text: &str) -> Result<BTreeMap<String, String>, Error> {
    let mut out = BTreeMap::new();
    for pair in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let bad = |reason: String| Error::flag(Flag::NodeLabels, reason);
        let (k, v) = pair.split_once('=').ok_or_else(|| bad(format!("{pair:?} is not key=value")))?;
        check_label(k, v).map_err(|e| bad(format!("{k}: {e}")))?;
        out.insert(k.to_string(), v.to_string());
    }
    Ok(out)
}

/// A node label, by the rules of pod labels.
fn check_label(key: &str, value: &str) -> Result<(), String> {
    crate::pod::validate::qualified_name(key)?;
    Ok(crate::pod::validate::label_value(value)?)
}

/// The machine's host name (kubelet's default node name).
pub fn hostname() -> String {
    rustix::system::uname().nodename().to_string_lossy().into_owned()
}
