//! The agent's settings, one checked value ([`Settings`]) from the command line's flags, over
//! the kubelet config file (`kubelet`), with atoll's own file (`atoll`) for what kubelet has no
//! field for, over kubelet's defaults. Values are checked here, with the flag or the file and
//! field named, so the parts get only valid settings.

pub mod atoll;
mod file;
pub mod flags;
pub mod kubelet;

pub use crate::duration::parse_duration;
pub use atoll::AtollConfiguration;
pub use kubelet::KubeletConfiguration;

pub use flags::{Flag, Flags};
use std::time::Duration;

/// The agent's settings: a flag wins over the `--config` file (a kubelet
/// `KubeletConfiguration`), which wins over kubelet's defaults. Every value is checked here,
/// so the parts get only valid settings.
#[derive(Clone, Debug)]
pub struct Settings {
    pub node_name: String,
    pub pod_manifest_path: Option<std::path::PathBuf>,
    pub manifest_url: Option<String>,
    pub manifest_url_headers: Vec<(String, String)>,
    pub manifest_url_ca_file: Option<std::path::PathBuf>,
    pub file_check_frequency: Duration,
    pub http_check_frequency: Duration,
    /// How often a pod whose runtime state did not change is synced anyway (kubelet's
    /// `syncFrequency`): never unless given (and not zero).
    pub sync_frequency: Option<Duration>,
    /// The relist's period while container events or process exits are watched (atoll's
    /// `relistPeriod`).
    pub relist_period: Duration,
    pub runtime_endpoint: crate::cri::Endpoint,
    pub runtime_request_timeout: Duration,
    pub root_dir: std::path::PathBuf,
    /// `imagesDir`: image tarballs imported into the runtime (default `<root-dir>/images`).
    pub images_dir: std::path::PathBuf,
    /// `secretsDir`: Secrets and ConfigMaps apart from the pods (root-owned, 0700).
    pub secrets_dir: Option<std::path::PathBuf>,
    /// `ctrPath`: containerd's `ctr`, when not the first on PATH.
    pub ctr_path: Option<std::path::PathBuf>,
    /// imageGCHighThresholdPercent, imageGCLowThresholdPercent, imageMinimumGCAge,
    /// imageMaximumGCAge.
    pub image_gc: crate::images::gc::Policy,
    /// atoll's `imageGCPeriod` (kubelet's fixed 5 minutes by default).
    pub image_gc_period: Duration,
    pub strict: bool,
    /// `rollbackAfter`, `rollbackMaxRestarts`: health-gated rollback for every pod.
    pub rollback: Option<crate::pod::rollback_policy::Policy>,
    /// `manifestTrust`: the keys that sign manifests, and whether a signature is required.
    pub manifest_trust: Option<crate::trust::Trust>,
    /// `decryptionKeyFile`: the identity `.age` manifests are decrypted with.
    pub decryption: Option<std::sync::Arc<crate::age::Identity>>,
    /// `strictImagePullPolicy`: with policy Always and the registry unreachable, fail the pull
    /// (kubelet's rule) instead of starting from the image on disk.
    pub strict_image_pull_policy: bool,
    pub pod_logs_dir: std::path::PathBuf,
    pub log_rotation: crate::runtime::logs::Rotation,
    pub cluster_dns: Vec<String>,
    pub cluster_domain: String,
    /// The resolver configuration pods with dnsPolicy Default inherit ("" for none).
    pub resolv_conf: String,
    pub node_ip: Option<String>,
    /// What the config files held that this version does not act on, one line each.
    pub config_notes: Vec<String>,
    /// CrashLoopBackOff and ImagePullBackOff: (initial, max).
    pub crash_loop_back_off: (Duration, Duration),
    pub image_pull_back_off: (Duration, Duration),
    /// runtimeClassName → CRI runtime handler.
    pub runtime_handlers: std::collections::BTreeMap<String, String>,
    pub keyring: crate::runtime::credentials::Keyring,
    /// The local API's socket, if any.
    pub api_socket: Option<std::path::PathBuf>,
    /// `healthzBindAddress:healthzPort` (none when the port is 0).
    pub healthz: Option<String>,
    /// The read-only API on loopback (`readOnlyPort`; none when 0, kubelet's default).
    pub read_only: Option<String>,
    /// Stop every pod before exiting on SIGTERM (kubelet leaves them running).
    pub drain_on_exit: bool,
    /// Mirror to the API server this kubeconfig names (`--kubeconfig`, or `kubeconfig` in the
    /// AtollConfiguration).
    pub kubeconfig: Option<std::path::PathBuf>,
    /// `--node-labels` (over `nodeLabels` of the AtollConfiguration).
    pub node_labels: std::collections::BTreeMap<String, String>,
    /// registerWithTaints, as API taint objects.
    pub register_with_taints: Vec<serde_json::Value>,
    /// maxPods (the node's `pods` capacity).
    pub max_pods: i64,
    pub node_status_update_frequency: Duration,
    pub node_status_report_frequency: Duration,
    pub node_lease_duration_seconds: u32,
}

pub const DEFAULT_RUNTIME_ENDPOINT: &str = "unix:///run/containerd/containerd.sock";
pub const DEFAULT_ROOT_DIR: &str = "/var/lib/atoll";
pub const DEFAULT_CHECK_FREQUENCY: Duration = Duration::from_secs(20);

impl Settings {
    /// Flags, over the `--config` file, over defaults.
    pub fn load(flags: &Flags) -> Result<Settings, String> {
        let (cfg, mut config_notes) = match flags.get(Flag::Config) {
            Some(path) => KubeletConfiguration::load(std::path::Path::new(path))?,
            None => (KubeletConfiguration::default(), Vec::new()),
        };
        let (own, own_notes) = match flags.get(Flag::AtollConfig) {
            Some(path) => AtollConfiguration::load(std::path::Path::new(path))?,
            None => (AtollConfiguration::default(), Vec::new()),
        };
        config_notes.extend(own_notes);
        let own_shown = flags.get(Flag::AtollConfig).unwrap_or("(none)");
        for (class, handler) in &own.runtime_classes {
            if crate::pod::validate::dns1123_subdomain(class).is_err() || handler.is_empty() {
                return Err(format!(
                    "config {own_shown}: runtimeClasses.{class}: needs a DNS subdomain name and a non-empty handler"
                ));
            }
        }
        let root_dir: std::path::PathBuf = flags
            .get(Flag::RootDir)
            .map(String::from)
            .or(own.state_dir.clone().filter(|d| !d.is_empty()))
            .unwrap_or_else(|| DEFAULT_ROOT_DIR.into())
            .into();
        let duration = |flag: Flag, field: &str, from_config: &Option<String>, default: Duration| {
            let (raw, whence) = match (flags.get(flag), from_config) {
                (Some(v), _) => (v.to_string(), format!("flag --{}", flag.name())),
                (None, Some(v)) => (v.clone(), format!("config field {field}")),
                (None, None) => return Ok(default),
            };
            let d = parse_duration(&raw).map_err(|e| format!("{whence}: {e}"))?;
            if d.is_zero() {
                return Err(format!("{whence}: must be more than zero"));
            }
            Ok(d)
        };
        let mut headers = Vec::new();
        let header_flags = flags.all(Flag::ManifestUrlHeader);
        if header_flags.is_empty() {
            for (name, values) in cfg.static_pod_url_header.iter().flatten() {
                for v in values {
                    let parsed = crate::source::http::parse_header_flag(&format!("{name}:{v}"))
                        .map_err(|e| format!("config field staticPodURLHeader: {e}"))?;
                    headers.extend(parsed);
                }
            }
        }
        for v in header_flags {
            headers.extend(
                crate::source::http::parse_header_flag(v).map_err(|e| format!("flag --manifest-url-header: {e}"))?,
            );
        }
        let node_name = match flags.get(Flag::HostnameOverride) {
            Some(h) => h.to_string(),
            None => hostname(),
        };
        let node_name = crate::pod::identity::node_name(&node_name);
        crate::pod::validate::dns1123_subdomain(&node_name).map_err(|e| format!("node name {node_name:?} {e}"))?;
        let manifest_path = flags.get(Flag::PodManifestPath).map(String::from).or(cfg.static_pod_path.clone());
        let endpoint = flags
            .get(Flag::ContainerRuntimeEndpoint)
            .map(String::from)
            .or(cfg.container_runtime_endpoint.clone())
            .unwrap_or_else(|| DEFAULT_RUNTIME_ENDPOINT.into());
        Ok(Settings {
            node_name,
            // kubelet strips trailing separators.
            pod_manifest_path: manifest_path.filter(|p| !p.is_empty()).map(|p| {
                let t = p.trim_end_matches('/');
                if t.is_empty() {
                    "/".into()
                } else {
                    t.into()
                }
            }),
            manifest_url: flags
                .get(Flag::ManifestUrl)
                .map(String::from)
                .or(cfg.static_pod_url.clone())
                .filter(|u| !u.is_empty()),
            manifest_url_headers: headers,
            manifest_url_ca_file: flags.get(Flag::ManifestUrlCaFile).map(Into::into),
            file_check_frequency: duration(
                Flag::FileCheckFrequency,
                "fileCheckFrequency",
                &cfg.file_check_frequency,
                DEFAULT_CHECK_FREQUENCY,
            )?,
            http_check_frequency: duration(
                Flag::HttpCheckFrequency,
                "httpCheckFrequency",
                &cfg.http_check_frequency,
                DEFAULT_CHECK_FREQUENCY,
            )?,
            sync_frequency: Some(duration(Flag::SyncFrequency, "syncFrequency", &cfg.sync_frequency, Duration::ZERO)?)
                .filter(|d| !d.is_zero()),
            relist_period: own.relist_period(own_shown)?,
            manifest_trust: own.manifest_trust(own_shown)?,
            decryption: own.decryption(own_shown)?,
            rollback: own.rollback(own_shown)?,
            strict_image_pull_policy: own.strict_image_pull_policy.unwrap_or(false),
            runtime_endpoint: crate::cri::Endpoint::parse(&endpoint)?,
            runtime_request_timeout: duration(
                Flag::RuntimeRequestTimeout,
                "runtimeRequestTimeout",
                &cfg.runtime_request_timeout,
                crate::cri::client::DEFAULT_REQUEST_TIMEOUT,
            )?,
            keyring: own.keyring(own_shown, &root_dir)?,
            images_dir: own.images_dir.as_ref().map_or_else(|| root_dir.join("images"), std::path::PathBuf::from),
            ctr_path: own.ctr_path.as_ref().map(std::path::PathBuf::from),
            secrets_dir: own.secrets_dir.as_ref().filter(|d| !d.is_empty()).map(std::path::PathBuf::from),
            image_gc: cfg.image_gc()?,
            image_gc_period: own.image_gc_period(own_shown)?,
            root_dir,
            strict: match flags.get(Flag::Strict) {
                Some(v) => v == "true",
                None => own.strict.unwrap_or(false),
            },
            pod_logs_dir: cfg.pod_logs_dir.clone().unwrap_or_else(|| "/var/log/pods".into()).into(),
            log_rotation: {
                let max_size = match cfg.container_log_max_size {
                    Some(q) if q.value() > 0 => q.value() as u64,
                    Some(q) => return Err(format!("config field containerLogMaxSize: {q} must be positive")),
                    None => crate::runtime::logs::DEFAULT_MAX_SIZE,
                };
                let max_files = match cfg.container_log_max_files {
                    Some(n) if n >= 2 => n as usize,
                    Some(n) => return Err(format!("config field containerLogMaxFiles: {n} must be at least 2")),
                    None => crate::runtime::logs::DEFAULT_MAX_FILES,
                };
                crate::runtime::logs::Rotation { max_size, max_files }
            },
            cluster_dns: cfg.cluster_dns.clone().unwrap_or_default(),
            cluster_domain: cfg.cluster_domain.clone().unwrap_or_default(),
            resolv_conf: cfg.resolv_conf.clone().unwrap_or_else(|| "/etc/resolv.conf".into()),
            node_ip: flags.get(Flag::NodeIp).map(String::from),
            config_notes,
            crash_loop_back_off: AtollConfiguration::back_off(own_shown, "crashLoopBackOff", &own.crash_loop_back_off)?,
            image_pull_back_off: AtollConfiguration::back_off(own_shown, "imagePullBackOff", &own.image_pull_back_off)?,
            runtime_handlers: own.runtime_classes,
            api_socket: match flags.get(Flag::ApiSocket).map(String::from).or(own.api_socket) {
                None => Some(crate::api::DEFAULT_SOCKET.into()),
                Some(p) if p.is_empty() || p == "none" => None,
                Some(p) => Some(p.into()),
            },
            healthz: {
                let port = cfg.healthz_port.unwrap_or(10248);
                if !(0..=65535).contains(&port) {
                    return Err(format!("config field healthzPort: {port} is not a port number"));
                }
                let addr = cfg.healthz_bind_address.clone().unwrap_or_else(|| "127.0.0.1".into());
                (port > 0)
                    .then(|| if addr.contains(':') { format!("[{addr}]:{port}") } else { format!("{addr}:{port}") })
            },
            read_only: match cfg.read_only_port.unwrap_or(0) {
                0 => None,
                p if (1..=65535).contains(&p) => Some(format!("127.0.0.1:{p}")),
                p => return Err(format!("config field readOnlyPort: {p} is not a port number")),
            },
            drain_on_exit: flags.is_set(Flag::DrainOnExit),
            kubeconfig: flags
                .get(Flag::Kubeconfig)
                .map(String::from)
                .or(own.kubeconfig.clone())
                .filter(|k| !k.is_empty())
                .map(Into::into),
            node_labels: match flags.get(Flag::NodeLabels) {
                Some(v) => parse_labels(v).map_err(|e| format!("flag --node-labels: {e}"))?,
                None => {
                    for (k, v) in &own.node_labels {
                        check_label(k, v).map_err(|e| format!("config {own_shown}: nodeLabels.{k}: {e}"))?;
                    }
                    own.node_labels.clone()
                }
            },
            register_with_taints: {
                let mut taints = Vec::new();
                for (i, t) in cfg.register_with_taints.iter().flatten().enumerate() {
                    if t.key.is_empty() || !["NoSchedule", "PreferNoSchedule", "NoExecute"].contains(&t.effect.as_str())
                    {
                        return Err(format!(
                            "config field registerWithTaints[{i}]: needs a key and an effect of NoSchedule, PreferNoSchedule or NoExecute"
                        ));
                    }
                    taints.push(serde_json::to_value(t).unwrap_or_default());
                }
                taints
            },
            max_pods: match cfg.max_pods {
                None => 110,
                Some(n) if n > 0 => n,
                Some(n) => return Err(format!("config field maxPods: {n} must be positive")),
            },
            node_status_update_frequency: duration(
                Flag::NodeStatusUpdateFrequency,
                "nodeStatusUpdateFrequency",
                &cfg.node_status_update_frequency,
                Duration::from_secs(10),
            )?,
            node_status_report_frequency: duration(
                Flag::NodeStatusReportFrequency,
                "nodeStatusReportFrequency",
                &cfg.node_status_report_frequency,
                Duration::from_secs(300),
            )?,
            node_lease_duration_seconds: match cfg.node_lease_duration_seconds {
                None => 40,
                Some(n) if (1..=3600).contains(&n) => n as u32,
                Some(n) => return Err(format!("config field nodeLeaseDurationSeconds: {n} must be 1 to 3600")),
            },
        })
    }
}

/// `--node-labels`: `key=value,key=value`.
fn parse_labels(text: &str) -> Result<std::collections::BTreeMap<String, String>, String> {
    let mut out = std::collections::BTreeMap::new();
    for pair in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let (k, v) = pair.split_once('=').ok_or_else(|| format!("{pair:?} is not key=value"))?;
        check_label(k, v).map_err(|e| format!("{k}: {e}"))?;
        out.insert(k.to_string(), v.to_string());
    }
    Ok(out)
}

/// A node label, by the rules of pod labels.
fn check_label(key: &str, value: &str) -> Result<(), String> {
    crate::pod::validate::qualified_name(key)?;
    crate::pod::validate::label_value(value)
}

/// The machine's host name (kubelet's default node name).
pub fn hostname() -> String {
    rustix::system::uname().nodename().to_string_lossy().into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::{parse, Command};

    fn flags(args: &[&str]) -> Flags {
        let mut all = vec!["run".to_string()];
        all.extend(args.iter().map(|s| s.to_string()));
        match parse(all).unwrap() {
            Command::Run(f) => f,
            _ => unreachable!(),
        }
    }

    fn config_file(name: &str, text: &str) -> String {
        let dir = std::env::temp_dir().join(format!("atoll-config-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join(name);
        std::fs::write(&p, text).unwrap();
        p.to_string_lossy().into_owned()
    }

    const KUBELET: &str = "apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
staticPodPath: /etc/kubernetes/manifests/
staticPodURL: http://127.0.0.1:8080/pods
staticPodURLHeader:
  Authorization: [\"Bearer t\"]
  X-A: [\"1\", \"2\"]
fileCheckFrequency: 5s
containerRuntimeEndpoint: unix:///run/crio/crio.sock
podLogsDir: /var/log/pods
containerLogMaxSize: 1Mi
containerLogMaxFiles: 3
maxPods: 20
syncFrequency: 90s
imageGCHighThresholdPercent: 90
imageMaximumGCAge: 168h
registerWithTaints:
- key: site
  value: north
  effect: NoSchedule
cgroupDriver: systemd
authentication:
  anonymous:
    enabled: false
";

    #[test]
    fn an_existing_kubelet_config_file_drives_the_sources() {
        let path = config_file("kubelet.yaml", KUBELET);
        let s = Settings::load(&flags(&[&format!("--config={path}"), "--hostname-override=Edge-1"])).unwrap();
        assert_eq!(s.pod_manifest_path.as_deref(), Some(std::path::Path::new("/etc/kubernetes/manifests")));
        assert_eq!(s.manifest_url.as_deref(), Some("http://127.0.0.1:8080/pods"));
        assert_eq!(
            s.manifest_url_headers,
            vec![("Authorization".into(), "Bearer t".into()), ("X-A".into(), "1".into()), ("X-A".into(), "2".into())]
        );
        assert_eq!(s.file_check_frequency, Duration::from_secs(5));
        assert_eq!(s.http_check_frequency, DEFAULT_CHECK_FREQUENCY);
        assert_eq!(s.runtime_endpoint.to_string(), "unix:///run/crio/crio.sock");
        assert_eq!(s.node_name, "edge-1");
        let notes = s.config_notes.join("\n");
        assert!(!notes.contains("syncFrequency"), "{notes}");
        assert_eq!(s.sync_frequency, Some(Duration::from_secs(90)));
        assert!(!notes.contains("maxPods"), "{notes}");
        assert_eq!(s.max_pods, 20);
        assert_eq!(
            s.register_with_taints,
            vec![serde_json::json!({"key": "site", "value": "north", "effect": "NoSchedule"})]
        );
        assert_eq!(s.node_lease_duration_seconds, 40);
        assert!(!notes.contains("imageGC") && !notes.contains("imageMaximumGCAge"), "{notes}");
        let gc = crate::images::gc::Policy {
            high_percent: 90,
            low_percent: 80,
            min_age: Duration::from_secs(120),
            max_age: Some(Duration::from_secs(168 * 3600)),
        };
        assert_eq!(s.image_gc, gc);
        for (bad, field) in [
            ("imageGCHighThresholdPercent: 101", "imageGCHighThresholdPercent: 101 must be 0 to 100"),
            ("imageGCLowThresholdPercent: 85", "imageGCLowThresholdPercent: 85 must be less than"),
            ("imageMinimumGCAge: soon", "imageMinimumGCAge"),
        ] {
            let path =
                config_file("gc.yaml", &format!("{}{bad}\n", KUBELET.replace("imageGCHighThresholdPercent: 90\n", "")));
            let e = Settings::load(&flags(&[&format!("--config={path}")])).err().unwrap_or_default();
            assert!(e.contains(field), "{bad}: {e}");
        }
        assert_eq!(s.node_status_report_frequency, Duration::from_secs(300));
        assert_eq!(s.log_rotation, crate::runtime::logs::Rotation { max_size: 1 << 20, max_files: 3 });
        assert!(!notes.contains("podLogsDir"), "{notes}");
        assert_eq!(s.pod_logs_dir, std::path::Path::new("/var/log/pods"));
        assert!(notes.contains("cgroupDriver: not supported by atoll; ignored"), "{notes}");
        assert!(notes.contains("authentication: not supported by atoll; ignored"), "{notes}");
    }

    #[test]
    fn node_labels_are_checked_and_named() {
        let s = Settings::load(&flags(&["--node-labels=site=north, example.com/tier=edge,empty="])).unwrap();
        assert_eq!(s.node_labels["site"], "north");
        assert_eq!(s.node_labels["example.com/tier"], "edge");
        assert_eq!(s.node_labels["empty"], "");
        for bad in ["site", "-x=1", "a/b/c=1", "k=-v", "Bad_Prefix./k=v"] {
            let e = Settings::load(&flags(&[&format!("--node-labels={bad}")])).unwrap_err();
            assert!(e.starts_with("flag --node-labels: "), "{bad}: {e}");
        }
        assert_eq!(Settings::load(&flags(&[])).unwrap().kubeconfig, None);
        let s = Settings::load(&flags(&["--kubeconfig=/etc/atoll/kubeconfig"])).unwrap();
        assert_eq!(s.kubeconfig.as_deref(), Some(std::path::Path::new("/etc/atoll/kubeconfig")));
    }

    #[test]
    fn flags_win_over_the_config_file() {
        let path = config_file("kubelet2.yaml", KUBELET);
        let s = Settings::load(&flags(&[
            &format!("--config={path}"),
            "--pod-manifest-path=/srv/pods",
            "--file-check-frequency=1m",
            "--manifest-url-header=X-B:3",
            "--hostname-override=n",
        ]))
        .unwrap();
        assert_eq!(s.pod_manifest_path.as_deref(), Some(std::path::Path::new("/srv/pods")));
        assert_eq!(s.file_check_frequency, Duration::from_secs(60));
        assert_eq!(s.manifest_url_headers, vec![("X-B".into(), "3".into())]);
    }

    #[test]
    fn the_atoll_config_sets_back_off_classes_strictness_and_credentials() {
        let dir = std::env::temp_dir().join(format!("atoll-own-config-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("config.json"), r#"{"auths":{"r.example.com":{"auth":"dTpw"}}}"#).unwrap();
        std::fs::write(dir.join("pw"), "s3cret\n").unwrap();
        let path = config_file(
            "atoll.yaml",
            &format!(
                "apiVersion: atoll.io/v1alpha1\nkind: AtollConfiguration\nstrict: true\nstrictImagePullPolicy: true\ncrashLoopBackOff: {{initialDelay: 1s, maxDelay: 30s}}\nimagePullBackOff: {{maxDelay: 1m}}\nruntimeClasses: {{gvisor: runsc}}\nregistryCredentials:\n- {{registry: q.example.com, username: u, passwordFile: {}}}\nfuture: 1\n",
                dir.join("pw").display()
            ),
        );
        let root = format!("--root-dir={}", dir.display());
        let s = Settings::load(&flags(&[&format!("--atoll-config={path}"), "--hostname-override=n", &root])).unwrap();
        assert!(s.strict && s.strict_image_pull_policy);
        assert_eq!(s.crash_loop_back_off, (Duration::from_secs(1), Duration::from_secs(30)));
        assert_eq!(s.image_pull_back_off, (Duration::from_secs(10), Duration::from_secs(60)));
        assert_eq!(s.runtime_handlers.get("gvisor").map(String::as_str), Some("runsc"));
        let q = s.keyring.lookup("q.example.com/app:1");
        assert_eq!((q.len(), q[0].auth.password.as_str()), (1, "s3cret"), "password from the file, newline dropped");
        assert_eq!(s.keyring.lookup("r.example.com/app")[0].auth.auth, "dTpw", "<root-dir>/config.json is read");
        assert!(s.config_notes.iter().any(|n| n.contains("future: unknown field; ignored")), "{:?}", s.config_notes);
        assert_eq!(s.root_dir, dir, "--root-dir wins over stateDir");
        // The flag wins over the file.
        let s = Settings::load(&flags(&[
            &format!("--atoll-config={path}"),
            "--strict=false",
            "--hostname-override=n",
            &root,
        ]))
        .unwrap();
        assert!(!s.strict);
        // Without the file: kubelet's defaults, no credentials.
        let s = Settings::load(&flags(&["--hostname-override=n", "--root-dir=/nonexistent"])).unwrap();
        assert_eq!(s.crash_loop_back_off, (Duration::from_secs(10), Duration::from_secs(300)));
        assert!(s.keyring.is_empty() && s.runtime_handlers.is_empty() && !s.strict && !s.strict_image_pull_policy);
    }

    #[test]
    fn the_example_atoll_config_is_valid() {
        let example = concat!(env!("CARGO_MANIFEST_DIR"), "/configs/atoll.yaml");
        let s = Settings::load(&flags(&[
            &format!("--atoll-config={example}"),
            "--hostname-override=n",
            "--root-dir=/nonexistent",
        ]))
        .unwrap();
        assert!(s.config_notes.is_empty(), "{:?}", s.config_notes);
        assert_eq!(s.crash_loop_back_off, (Duration::from_secs(10), Duration::from_secs(300)));
        assert_eq!((s.kubeconfig, s.node_labels.len()), (None, 0));
        assert_eq!((s.relist_period, s.sync_frequency), (Duration::from_secs(10), None));
        for (value, error) in [("0s", "is not between 1s and 1h"), ("2h", "is not between 1s and 1h"), ("soon", "")] {
            let own = config_file(
                "relist.yaml",
                &format!("apiVersion: atoll.io/v1alpha1\nkind: AtollConfiguration\nrelistPeriod: {value}\n"),
            );
            let e = Settings::load(&flags(&[&format!("--atoll-config={own}"), "--hostname-override=n"])).unwrap_err();
            assert!(e.contains("relist.yaml: relistPeriod: ") && e.contains(error), "{e}");
        }
        let wrong =
            config_file("wrong-own.yaml", "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n");
        let e = Settings::load(&flags(&[&format!("--atoll-config={wrong}"), "--hostname-override=n"])).unwrap_err();
        assert!(e.contains("wrong-own.yaml") && e.contains("expected kind AtollConfiguration"), "{e}");
    }

    #[test]
    fn bad_config_files_are_named_with_the_field() {
        let wrong_kind = config_file("wrong.yaml", "apiVersion: v1\nkind: Pod\n");
        let e = Settings::load(&flags(&[&format!("--config={wrong_kind}"), "--hostname-override=n"])).unwrap_err();
        assert!(e.contains("wrong.yaml") && e.contains("expected kind KubeletConfiguration"), "{e}");
        let bad_duration = config_file(
            "dur.yaml",
            "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\nfileCheckFrequency: soon\n",
        );
        let e = Settings::load(&flags(&[&format!("--config={bad_duration}"), "--hostname-override=n"])).unwrap_err();
        assert!(e.starts_with("config field fileCheckFrequency:"), "{e}");
        let bad_type = config_file(
            "type.yaml",
            "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\nstaticPodPath: [a]\n",
        );
        let e = Settings::load(&flags(&[&format!("--config={bad_type}"), "--hostname-override=n"])).unwrap_err();
        assert!(e.contains("type.yaml: staticPodPath: invalid type"), "{e}");
        let e = Settings::load(&flags(&["--config=/nonexistent/kubelet.yaml"])).unwrap_err();
        assert!(e.contains("/nonexistent/kubelet.yaml"), "{e}");
    }
}
