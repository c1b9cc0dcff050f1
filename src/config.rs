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

/// The agent's settings, from flags (the KubeletConfiguration file joins later; a flag will
/// override it). Every value is checked here, so the parts get only valid settings.
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
}

pub const DEFAULT_RUNTIME_ENDPOINT: &str = "unix:///run/containerd/containerd.sock";
pub const DEFAULT_ROOT_DIR: &str = "/var/lib/atoll";
pub const DEFAULT_CHECK_FREQUENCY: Duration = Duration::from_secs(20);

impl Settings {
    pub fn from_flags(flags: &crate::cli::Flags) -> Result<Settings, String> {
        let duration = |name: &str, default: Duration| -> Result<Duration, String> {
            match flags.get(name) {
                Some(v) => {
                    let d = parse_duration(v).map_err(|e| format!("flag --{name}: {e}"))?;
                    if d.is_zero() {
                        return Err(format!("flag --{name}: must be more than zero"));
                    }
                    Ok(d)
                }
                None => Ok(default),
            }
        };
        let mut headers = Vec::new();
        for v in flags.all("manifest-url-header") {
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
        Ok(Settings {
            node_name,
            pod_manifest_path: flags.get("pod-manifest-path").map(|p| p.trim_end_matches('/').to_string()).map(|p| {
                if p.is_empty() {
                    "/".into()
                } else {
                    p.into()
                }
            }),
            manifest_url: flags.get("manifest-url").map(String::from),
            manifest_url_headers: headers,
            manifest_url_ca_file: flags.get("manifest-url-ca-file").map(Into::into),
            file_check_frequency: duration("file-check-frequency", DEFAULT_CHECK_FREQUENCY)?,
            http_check_frequency: duration("http-check-frequency", DEFAULT_CHECK_FREQUENCY)?,
            runtime_endpoint: crate::cri::Endpoint::parse(
                flags.get("container-runtime-endpoint").unwrap_or(DEFAULT_RUNTIME_ENDPOINT),
            )?,
            runtime_request_timeout: duration("runtime-request-timeout", crate::cri::client::DEFAULT_REQUEST_TIMEOUT)?,
            root_dir: flags.get("root-dir").unwrap_or(DEFAULT_ROOT_DIR).into(),
            strict: flags.is_set("strict"),
        })
    }
}

/// The machine's host name (kubelet's default node name).
pub fn hostname() -> String {
    rustix::system::uname().nodename().to_string_lossy().into_owned()
}
