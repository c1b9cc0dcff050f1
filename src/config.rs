//! Settings shared by the agent's parts, and the value formats kubelet's configuration uses.
//!
//! For now this holds the Go-style duration format (`fileCheckFrequency: 20s`,
//! `runtimeRequestTimeout: 2m`); the KubeletConfiguration subset joins it later.

use std::time::Duration;

/// Parses a Go `time.Duration` string as kubelet's config and flags accept it:
/// a sequence of decimal numbers with units `ns`, `us` (or `µs`), `ms`, `s`, `m`, `h`,
/// e.g. `20s`, `1m30s`, `1.5h`, `0`. Negative durations are refused.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let text = s.trim();
    if text == "0" {
        return Ok(Duration::ZERO);
    }
    if text.is_empty() {
        return Err("empty duration".into());
    }
    if text.starts_with('-') {
        return Err(format!("duration {s:?} is negative"));
    }
    let mut rest = text.strip_prefix('+').unwrap_or(text);
    let mut total = 0f64;
    while !rest.is_empty() {
        let num_len = rest.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(rest.len());
        let (num, after) = rest.split_at(num_len);
        if num.is_empty() || num == "." {
            return Err(format!("duration {s:?}: expected a number at {rest:?}"));
        }
        let value: f64 = num.parse().map_err(|_| format!("duration {s:?}: bad number {num:?}"))?;
        let unit_len = after.find(|c: char| c.is_ascii_digit() || c == '.').unwrap_or(after.len());
        let (unit, next) = after.split_at(unit_len);
        let scale = match unit {
            "ns" => 1e-9,
            "us" | "µs" | "μs" => 1e-6,
            "ms" => 1e-3,
            "s" => 1.0,
            "m" => 60.0,
            "h" => 3600.0,
            "" => return Err(format!("duration {s:?}: missing unit after {num} (use s, m, h, ms)")),
            other => return Err(format!("duration {s:?}: unknown unit {other:?}")),
        };
        total += value * scale;
        rest = next;
    }
    Duration::try_from_secs_f64(total).map_err(|_| format!("duration {s:?} is out of range"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn go_durations_parse_like_kubelet() {
        assert_eq!(parse_duration("20s").unwrap(), Duration::from_secs(20));
        assert_eq!(parse_duration("2m").unwrap(), Duration::from_secs(120));
        assert_eq!(parse_duration("1m30s").unwrap(), Duration::from_secs(90));
        assert_eq!(parse_duration("1.5h").unwrap(), Duration::from_secs(5400));
        assert_eq!(parse_duration("250ms").unwrap(), Duration::from_millis(250));
        assert_eq!(parse_duration("0").unwrap(), Duration::ZERO);
        assert_eq!(parse_duration("10us").unwrap(), Duration::from_micros(10));
    }

    #[test]
    fn bad_durations_say_what_is_wrong() {
        assert!(parse_duration("20").unwrap_err().contains("missing unit"));
        assert!(parse_duration("5d").unwrap_err().contains("unknown unit \"d\""));
        assert!(parse_duration("-1s").unwrap_err().contains("negative"));
        assert!(parse_duration("").is_err());
        assert!(parse_duration("s").unwrap_err().contains("expected a number"));
        assert!(parse_duration("1..2s").unwrap_err().contains("bad number"));
    }
}

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
    pub runtime_endpoint: crate::cri::Endpoint,
    pub runtime_request_timeout: Duration,
    pub root_dir: std::path::PathBuf,
    pub strict: bool,
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

/// The part of kubelet's `KubeletConfiguration` (kubelet.config.k8s.io/v1beta1) atoll acts
/// on. Field names are kubelet's.
#[derive(Debug, Default, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct KubeletConfiguration {
    #[serde(default)]
    pub api_version: String,
    #[serde(default)]
    pub kind: String,
    pub static_pod_path: Option<String>,
    #[serde(rename = "staticPodURL")]
    pub static_pod_url: Option<String>,
    #[serde(rename = "staticPodURLHeader")]
    pub static_pod_url_header: Option<std::collections::BTreeMap<String, Vec<String>>>,
    pub file_check_frequency: Option<String>,
    pub http_check_frequency: Option<String>,
    pub container_runtime_endpoint: Option<String>,
    pub runtime_request_timeout: Option<String>,
    pub pod_logs_dir: Option<String>,
    pub container_log_max_size: Option<crate::pod::quantity::Quantity>,
    pub container_log_max_files: Option<i64>,
    #[serde(rename = "clusterDNS")]
    pub cluster_dns: Option<Vec<String>>,
    pub cluster_domain: Option<String>,
    pub resolv_conf: Option<String>,
    pub healthz_port: Option<i64>,
    pub healthz_bind_address: Option<String>,
    pub read_only_port: Option<i64>,
    pub max_pods: Option<i64>,
    pub register_with_taints: Option<Vec<Taint>>,
    pub node_status_update_frequency: Option<String>,
    pub node_status_report_frequency: Option<String>,
    pub node_lease_duration_seconds: Option<i64>,
}

/// A taint of `registerWithTaints`.
#[derive(Debug, Default, serde::Deserialize, serde::Serialize)]
pub struct Taint {
    pub key: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub value: String,
    pub effect: String,
}

/// atoll's own settings (`--atoll-config`, kind AtollConfiguration of apiVersion
/// atoll.io/v1alpha1): what kubelet has no field for, kept apart from the KubeletConfiguration
/// so that file stays kubelet's. Every field is optional; see `configs/atoll.yaml`.
#[derive(Debug, Default, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AtollConfiguration {
    #[serde(default)]
    pub api_version: String,
    #[serde(default)]
    pub kind: String,
    /// Like `--strict`: manifest fields atoll does not implement are errors.
    pub strict: Option<bool>,
    /// CrashLoopBackOff: kubelet's 10 s doubling to 300 s unless given.
    pub crash_loop_back_off: Option<BackOffConfig>,
    /// ImagePullBackOff: kubelet's 10 s doubling to 300 s unless given.
    pub image_pull_back_off: Option<BackOffConfig>,
    /// runtimeClassName → CRI runtime handler (kubelet reads RuntimeClass objects from the API
    /// server; here there is none).
    #[serde(default)]
    pub runtime_classes: std::collections::BTreeMap<String, String>,
    /// Credentials for image pulls (kubelet takes them from pull secrets; here there are none).
    #[serde(default)]
    pub registry_credentials: Vec<RegistryCredential>,
    /// Docker `config.json` files to read credentials from; by default `<root-dir>/config.json`
    /// when it exists (kubelet's first place to look).
    pub docker_config_files: Option<Vec<String>>,
    /// The local API's unix socket (default /run/atoll/atoll.sock; "" turns it off).
    pub api_socket: Option<String>,
    /// atoll's state directory (cached URL payloads, emptyDir volumes, hosts files), as
    /// `--root-dir` (the flag wins); default /var/lib/atoll.
    pub state_dir: Option<String>,
    /// The kubeconfig of the API server to mirror to (`--kubeconfig` wins).
    pub kubeconfig: Option<String>,
    /// Labels for the registered node (`--node-labels` wins).
    #[serde(default)]
    pub node_labels: std::collections::BTreeMap<String, String>,
}

#[derive(Debug, Default, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct BackOffConfig {
    pub initial_delay: Option<String>,
    pub max_delay: Option<String>,
}

#[derive(Default, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RegistryCredential {
    /// `host[:port][/path]`, `*` globs per host part (`*.example.com`).
    pub registry: String,
    #[serde(default)]
    pub username: String,
    #[serde(default)]
    pub password: String,
    /// A file holding the password (trailing newline dropped), instead of `password`.
    pub password_file: Option<String>,
    /// base64 of `username:password`, as in Docker's config.json.
    #[serde(default)]
    pub auth: String,
    #[serde(default)]
    pub identity_token: String,
}

impl std::fmt::Debug for RegistryCredential {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RegistryCredential")
            .field("registry", &self.registry)
            .field("username", &self.username)
            .finish()
    }
}

/// Reads a YAML or JSON settings file into `T`; returns it and the paths of fields `T` does not
/// have. Errors name the file and the field.
fn load_settings_file<T: serde::de::DeserializeOwned>(
    path: &std::path::Path,
) -> Result<(T, Vec<String>, Vec<String>), String> {
    let shown = path.display();
    let bytes = std::fs::read(path).map_err(|e| format!("config {shown}: {e}"))?;
    let mut warnings = Vec::new();
    let value = crate::pod::decode::to_value(&bytes, &mut warnings).map_err(|e| format!("config {shown}: {e}"))?;
    let mut ignored = Vec::new();
    let mut note = |p: serde_ignored::Path<'_>| ignored.push(crate::pod::decode::render(&p));
    let cfg: T = serde_path_to_error::deserialize(serde_ignored::Deserializer::new(value, &mut note))
        .map_err(|e| format!("config {shown}: {}: {}", e.path(), e.inner()))?;
    let warnings = warnings.iter().map(|w| format!("config {shown}: {w}")).collect();
    Ok((cfg, warnings, ignored))
}

impl AtollConfiguration {
    /// Reads an AtollConfiguration file. Returns it and a note per field it does not know
    /// (a newer atoll's setting, or a typo), which the agent logs at start.
    pub fn load(path: &std::path::Path) -> Result<(AtollConfiguration, Vec<String>), String> {
        let shown = path.display();
        let (cfg, mut notes, ignored): (AtollConfiguration, _, _) = load_settings_file(path)?;
        if cfg.kind != "AtollConfiguration" || !cfg.api_version.starts_with("atoll.io/") {
            return Err(format!(
                "config {shown}: expected kind AtollConfiguration of apiVersion atoll.io/v1alpha1, found kind {:?} of {:?}",
                cfg.kind, cfg.api_version
            ));
        }
        for field in ignored {
            notes.push(format!("config {shown}: {field}: unknown field; ignored"));
        }
        Ok((cfg, notes))
    }

    /// The back-off the config names for `field`, over kubelet's default.
    fn back_off(shown: &str, field: &str, given: &Option<BackOffConfig>) -> Result<(Duration, Duration), String> {
        let get = |name: &str, v: &Option<String>, default: Duration| match v {
            None => Ok(default),
            Some(raw) => match parse_duration(raw) {
                Ok(d) if d.is_zero() => Err(format!("config {shown}: {field}.{name}: must be more than zero")),
                Ok(d) => Ok(d),
                Err(e) => Err(format!("config {shown}: {field}.{name}: {e}")),
            },
        };
        let Some(b) = given else {
            return Ok((crate::runtime::backoff::DEFAULT_INITIAL, crate::runtime::backoff::DEFAULT_MAX));
        };
        let initial = get("initialDelay", &b.initial_delay, crate::runtime::backoff::DEFAULT_INITIAL)?;
        let max = get("maxDelay", &b.max_delay, crate::runtime::backoff::DEFAULT_MAX.max(initial))?;
        if max < initial {
            return Err(format!("config {shown}: {field}.maxDelay: {max:?} is less than initialDelay {initial:?}"));
        }
        Ok((initial, max))
    }

    /// The keyring of registryCredentials and the Docker config files.
    fn keyring(&self, shown: &str, root_dir: &std::path::Path) -> Result<crate::runtime::credentials::Keyring, String> {
        use crate::cri::api::AuthConfig;
        let mut keyring = crate::runtime::credentials::Keyring::default();
        for (i, c) in self.registry_credentials.iter().enumerate() {
            let origin = format!("config {shown}: registryCredentials[{i}]");
            let mut password = c.password.clone();
            if let Some(file) = &c.password_file {
                if !password.is_empty() {
                    return Err(format!("{origin}: give password or passwordFile, not both"));
                }
                let text = std::fs::read_to_string(file).map_err(|e| format!("{origin}.passwordFile: {file}: {e}"))?;
                password = text.trim_end_matches(['\n', '\r']).to_string();
            }
            let auth = AuthConfig {
                username: c.username.clone(),
                password,
                auth: c.auth.clone(),
                identity_token: c.identity_token.clone(),
                ..Default::default()
            };
            keyring.add(&origin, &c.registry, auth)?;
        }
        let (files, explicit) = match &self.docker_config_files {
            Some(f) => (f.iter().map(std::path::PathBuf::from).collect(), true),
            None => (vec![root_dir.join("config.json")], false),
        };
        for f in files {
            match std::fs::read(&f) {
                Ok(bytes) => {
                    keyring
                        .add_docker_config(&f, &bytes)
                        .map_err(|e| format!("config {shown}: dockerConfigFiles: {e}"))?;
                }
                Err(e) if !explicit && e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(format!("config {shown}: dockerConfigFiles: {}: {e}", f.display())),
            }
        }
        Ok(keyring)
    }
}

/// KubeletConfiguration fields atoll will act on in a later version (the design's
/// compatibility surface); reported as "not used yet" rather than "not supported".
const LATER_FIELDS: &[&str] = &["syncFrequency"];

impl KubeletConfiguration {
    /// Reads a KubeletConfiguration file (YAML or JSON). Returns it and a note per field that
    /// this version does not act on.
    pub fn load(path: &std::path::Path) -> Result<(KubeletConfiguration, Vec<String>), String> {
        let shown = path.display();
        let (cfg, mut notes, ignored): (KubeletConfiguration, _, _) = load_settings_file(path)?;
        if cfg.kind != "KubeletConfiguration" || !cfg.api_version.starts_with("kubelet.config.k8s.io/") {
            return Err(format!(
                "config {shown}: expected kind KubeletConfiguration of apiVersion kubelet.config.k8s.io/v1beta1, found kind {:?} of {:?}",
                cfg.kind, cfg.api_version
            ));
        }
        for field in ignored {
            let top = field.split(['.', '[']).next().unwrap_or("");
            if LATER_FIELDS.contains(&top) {
                notes.push(format!("config {shown}: {field}: not used by this version of atoll yet"));
            } else {
                notes.push(format!("config {shown}: {field}: not supported by atoll; ignored"));
            }
        }
        Ok((cfg, notes))
    }
}

impl Settings {
    /// Flags, over the `--config` file, over defaults.
    pub fn load(flags: &crate::cli::Flags) -> Result<Settings, String> {
        let (cfg, mut config_notes) = match flags.get("config") {
            Some(path) => KubeletConfiguration::load(std::path::Path::new(path))?,
            None => (KubeletConfiguration::default(), Vec::new()),
        };
        let (own, own_notes) = match flags.get("atoll-config") {
            Some(path) => AtollConfiguration::load(std::path::Path::new(path))?,
            None => (AtollConfiguration::default(), Vec::new()),
        };
        config_notes.extend(own_notes);
        let own_shown = flags.get("atoll-config").unwrap_or("(none)");
        for (class, handler) in &own.runtime_classes {
            if crate::pod::validate::dns1123_subdomain(class).is_err() || handler.is_empty() {
                return Err(format!(
                    "config {own_shown}: runtimeClasses.{class}: needs a DNS subdomain name and a non-empty handler"
                ));
            }
        }
        let root_dir: std::path::PathBuf = flags
            .get("root-dir")
            .map(String::from)
            .or(own.state_dir.clone().filter(|d| !d.is_empty()))
            .unwrap_or_else(|| DEFAULT_ROOT_DIR.into())
            .into();
        let duration = |flag: &str, field: &str, from_config: &Option<String>, default: Duration| {
            let (raw, whence) = match (flags.get(flag), from_config) {
                (Some(v), _) => (v.to_string(), format!("flag --{flag}")),
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
        let header_flags = flags.all("manifest-url-header");
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
        let node_name = match flags.get("hostname-override") {
            Some(h) => h.to_string(),
            None => hostname(),
        };
        let node_name = crate::pod::identity::node_name(&node_name);
        crate::pod::validate::dns1123_subdomain(&node_name).map_err(|e| format!("node name {node_name:?} {e}"))?;
        let manifest_path = flags.get("pod-manifest-path").map(String::from).or(cfg.static_pod_path.clone());
        let endpoint = flags
            .get("container-runtime-endpoint")
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
                .get("manifest-url")
                .map(String::from)
                .or(cfg.static_pod_url.clone())
                .filter(|u| !u.is_empty()),
            manifest_url_headers: headers,
            manifest_url_ca_file: flags.get("manifest-url-ca-file").map(Into::into),
            file_check_frequency: duration(
                "file-check-frequency",
                "fileCheckFrequency",
                &cfg.file_check_frequency,
                DEFAULT_CHECK_FREQUENCY,
            )?,
            http_check_frequency: duration(
                "http-check-frequency",
                "httpCheckFrequency",
                &cfg.http_check_frequency,
                DEFAULT_CHECK_FREQUENCY,
            )?,
            runtime_endpoint: crate::cri::Endpoint::parse(&endpoint)?,
            runtime_request_timeout: duration(
                "runtime-request-timeout",
                "runtimeRequestTimeout",
                &cfg.runtime_request_timeout,
                crate::cri::client::DEFAULT_REQUEST_TIMEOUT,
            )?,
            keyring: own.keyring(own_shown, &root_dir)?,
            root_dir,
            strict: match flags.get("strict") {
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
            node_ip: flags.get("node-ip").map(String::from),
            config_notes,
            crash_loop_back_off: AtollConfiguration::back_off(own_shown, "crashLoopBackOff", &own.crash_loop_back_off)?,
            image_pull_back_off: AtollConfiguration::back_off(own_shown, "imagePullBackOff", &own.image_pull_back_off)?,
            runtime_handlers: own.runtime_classes,
            api_socket: match flags.get("api-socket").map(String::from).or(own.api_socket) {
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
            drain_on_exit: flags.is_set("drain-on-exit"),
            kubeconfig: flags
                .get("kubeconfig")
                .map(String::from)
                .or(own.kubeconfig.clone())
                .filter(|k| !k.is_empty())
                .map(Into::into),
            node_labels: match flags.get("node-labels") {
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
                "node-status-update-frequency",
                "nodeStatusUpdateFrequency",
                &cfg.node_status_update_frequency,
                Duration::from_secs(10),
            )?,
            node_status_report_frequency: duration(
                "node-status-report-frequency",
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
mod settings_tests {
    use super::*;
    use crate::cli::{parse, Command};

    fn flags(args: &[&str]) -> crate::cli::Flags {
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
syncFrequency: 1m
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
        assert!(notes.contains("syncFrequency: not used by this version of atoll yet"), "{notes}");
        assert!(!notes.contains("maxPods"), "{notes}");
        assert_eq!(s.max_pods, 20);
        assert_eq!(
            s.register_with_taints,
            vec![serde_json::json!({"key": "site", "value": "north", "effect": "NoSchedule"})]
        );
        assert_eq!(s.node_lease_duration_seconds, 40);
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
                "apiVersion: atoll.io/v1alpha1\nkind: AtollConfiguration\nstrict: true\ncrashLoopBackOff: {{initialDelay: 1s, maxDelay: 30s}}\nimagePullBackOff: {{maxDelay: 1m}}\nruntimeClasses: {{gvisor: runsc}}\nregistryCredentials:\n- {{registry: q.example.com, username: u, passwordFile: {}}}\nfuture: 1\n",
                dir.join("pw").display()
            ),
        );
        let root = format!("--root-dir={}", dir.display());
        let s = Settings::load(&flags(&[&format!("--atoll-config={path}"), "--hostname-override=n", &root])).unwrap();
        assert!(s.strict);
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
        assert!(s.keyring.is_empty() && s.runtime_handlers.is_empty() && !s.strict);
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
