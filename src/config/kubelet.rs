//! The part of kubelet's `KubeletConfiguration` atoll reads (`--config`, for example
//! `/var/lib/kubelet/config.yaml`): field names are kubelet's; fields atoll does not act on are
//! named at start, as "not used yet" or "not supported", never silently dropped.

use super::file::load_settings_file;

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
    pub sync_frequency: Option<String>,
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
    #[serde(rename = "imageGCHighThresholdPercent")]
    pub image_gc_high_threshold_percent: Option<i64>,
    #[serde(rename = "imageGCLowThresholdPercent")]
    pub image_gc_low_threshold_percent: Option<i64>,
    #[serde(rename = "imageMinimumGCAge")]
    pub image_minimum_gc_age: Option<String>,
    #[serde(rename = "imageMaximumGCAge")]
    pub image_maximum_gc_age: Option<String>,
    pub address: Option<String>,
    pub port: Option<i64>,
    pub tls_cert_file: Option<String>,
    pub tls_private_key_file: Option<String>,
    pub authentication: Option<Authentication>,
    pub authorization: Option<Authorization>,
    pub enable_debugging_handlers: Option<bool>,
}

/// `authentication` (KubeletAuthentication).
#[derive(Debug, Default, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Authentication {
    pub x509: Option<X509>,
    pub webhook: Option<AuthnWebhook>,
    pub anonymous: Option<Anonymous>,
}

#[derive(Debug, Default, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct X509 {
    #[serde(rename = "clientCAFile")]
    pub client_ca_file: Option<String>,
}

#[derive(Debug, Default, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AuthnWebhook {
    pub enabled: Option<bool>,
    #[serde(rename = "cacheTTL")]
    pub cache_ttl: Option<String>,
}

#[derive(Debug, Default, serde::Deserialize)]
pub struct Anonymous {
    pub enabled: Option<bool>,
}

/// `authorization` (KubeletAuthorization).
#[derive(Debug, Default, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Authorization {
    pub mode: Option<String>,
    pub webhook: Option<AuthzWebhook>,
}

#[derive(Debug, Default, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AuthzWebhook {
    #[serde(rename = "cacheAuthorizedTTL")]
    pub cache_authorized_ttl: Option<String>,
    #[serde(rename = "cacheUnauthorizedTTL")]
    pub cache_unauthorized_ttl: Option<String>,
}

/// A taint of `registerWithTaints`.
#[derive(Debug, Default, serde::Deserialize, serde::Serialize)]
pub struct Taint {
    pub key: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub value: String,
    pub effect: String,
}

/// KubeletConfiguration fields atoll will act on in a later version (the design's
/// compatibility surface); reported as "not used yet" rather than "not supported".
const LATER_FIELDS: &[&str] = &[];

impl KubeletConfiguration {
    /// The image garbage collection settings, with kubelet's defaults and checks (percentages
    /// 0 to 100, low below high; 100 turns collection by disk use off; a zero maximum age is
    /// off).
    pub fn image_gc(&self) -> Result<crate::images::gc::Policy, String> {
        let mut p = crate::images::gc::Policy::default();
        let percent = |name: &str, v: Option<i64>, default: u8| match v {
            None => Ok(default),
            Some(n) if (0..=100).contains(&n) => Ok(n as u8),
            Some(n) => Err(format!("config field {name}: {n} must be 0 to 100")),
        };
        p.high_percent = percent("imageGCHighThresholdPercent", self.image_gc_high_threshold_percent, p.high_percent)?;
        p.low_percent = percent("imageGCLowThresholdPercent", self.image_gc_low_threshold_percent, p.low_percent)?;
        if p.low_percent >= p.high_percent && p.high_percent < 100 {
            return Err(format!(
                "config field imageGCLowThresholdPercent: {} must be less than imageGCHighThresholdPercent ({})",
                p.low_percent, p.high_percent
            ));
        }
        if let Some(raw) = &self.image_minimum_gc_age {
            p.min_age =
                crate::duration::parse_duration(raw).map_err(|e| format!("config field imageMinimumGCAge: {e}"))?;
        }
        if let Some(raw) = &self.image_maximum_gc_age {
            let max =
                crate::duration::parse_duration(raw).map_err(|e| format!("config field imageMaximumGCAge: {e}"))?;
            if !max.is_zero() && max <= p.min_age {
                return Err(format!(
                    "config field imageMaximumGCAge: {max:?} must be more than imageMinimumGCAge ({:?})",
                    p.min_age
                ));
            }
            p.max_age = Some(max).filter(|m| !m.is_zero());
        }
        Ok(p)
    }

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
