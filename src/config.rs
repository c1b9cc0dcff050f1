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
    /// What the config file held that this version does not act on, one line each.
    pub config_notes: Vec<String>,
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
}

/// KubeletConfiguration fields atoll will act on in a later version (the design's
/// compatibility surface); reported as "not used yet" rather than "not supported".
const LATER_FIELDS: &[&str] = &[
    "healthzPort",
    "healthzBindAddress",
    "readOnlyPort",
    "nodeStatusUpdateFrequency",
    "nodeStatusReportFrequency",
    "maxPods",
    "syncFrequency",
];

impl KubeletConfiguration {
    /// Reads a KubeletConfiguration file (YAML or JSON). Returns it and a note per field that
    /// this version does not act on.
    pub fn load(path: &std::path::Path) -> Result<(KubeletConfiguration, Vec<String>), String> {
        let shown = path.display();
        let bytes = std::fs::read(path).map_err(|e| format!("config {shown}: {e}"))?;
        let mut warnings = Vec::new();
        let value = crate::pod::decode::to_value(&bytes, &mut warnings).map_err(|e| format!("config {shown}: {e}"))?;
        let mut ignored = Vec::new();
        let mut note = |p: serde_ignored::Path<'_>| ignored.push(crate::pod::decode::render(&p));
        let cfg: KubeletConfiguration =
            serde_path_to_error::deserialize(serde_ignored::Deserializer::new(value, &mut note))
                .map_err(|e| format!("config {shown}: {}: {}", e.path(), e.inner()))?;
        if cfg.kind != "KubeletConfiguration" || !cfg.api_version.starts_with("kubelet.config.k8s.io/") {
            return Err(format!(
                "config {shown}: expected kind KubeletConfiguration of apiVersion kubelet.config.k8s.io/v1beta1, found kind {:?} of {:?}",
                cfg.kind, cfg.api_version
            ));
        }
        let mut notes: Vec<String> = warnings.iter().map(|w| format!("config {shown}: {w}")).collect();
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
        let (cfg, config_notes) = match flags.get("config") {
            Some(path) => KubeletConfiguration::load(std::path::Path::new(path))?,
            None => (KubeletConfiguration::default(), Vec::new()),
        };
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
            root_dir: flags.get("root-dir").unwrap_or(DEFAULT_ROOT_DIR).into(),
            strict: flags.is_set("strict"),
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
        })
    }
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
        assert!(notes.contains("maxPods: not used by this version of atoll yet"), "{notes}");
        assert_eq!(s.log_rotation, crate::runtime::logs::Rotation { max_size: 1 << 20, max_files: 3 });
        assert!(!notes.contains("podLogsDir"), "{notes}");
        assert_eq!(s.pod_logs_dir, std::path::Path::new("/var/log/pods"));
        assert!(notes.contains("cgroupDriver: not supported by atoll; ignored"), "{notes}");
        assert!(notes.contains("authentication: not supported by atoll; ignored"), "{notes}");
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
