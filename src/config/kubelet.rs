//! The part of kubelet's `KubeletConfiguration` atoll reads (`--config`, for example
//! `/var/lib/kubelet/config.yaml`): field names are kubelet's; fields atoll does not act on are
//! named at start, as "not used yet" or "not supported", never silently dropped.

use super::error::{Error, Problem};
use super::fields::Fields;

/// The part of kubelet's `KubeletConfiguration` (kubelet.config.k8s.io/v1beta1) atoll acts
/// on. Field names are kubelet's.
#[derive(Debug, Default)]
pub struct KubeletConfiguration {
    pub api_version: String,
    pub kind: String,
    pub static_pod_path: Option<String>,
    pub static_pod_url: Option<String>,
    pub static_pod_url_header: Option<std::collections::BTreeMap<String, Vec<String>>>,
    pub file_check_frequency: Option<String>,
    pub http_check_frequency: Option<String>,
    pub sync_frequency: Option<String>,
    pub container_runtime_endpoint: Option<String>,
    pub runtime_request_timeout: Option<String>,
    pub pod_logs_dir: Option<String>,
    pub container_log_max_size: Option<crate::pod::quantity::Quantity>,
    pub container_log_max_files: Option<i64>,
    pub cluster_dns: Option<Vec<String>>,
    pub cluster_domain: Option<String>,
    pub resolv_conf: Option<String>,
    pub healthz_port: Option<i64>,
    pub healthz_bind_address: Option<String>,
    pub read_only_port: Option<i64>,
    pub max_pods: Option<i64>,
    pub kube_reserved: Option<std::collections::BTreeMap<String, crate::pod::quantity::Quantity>>,
    pub system_reserved: Option<std::collections::BTreeMap<String, crate::pod::quantity::Quantity>>,
    pub eviction_hard: Option<std::collections::BTreeMap<String, String>>,
    pub allowed_unsafe_sysctls: Option<Vec<String>>,
    pub register_with_taints: Option<Vec<Taint>>,
    pub node_status_update_frequency: Option<String>,
    pub node_status_report_frequency: Option<String>,
    pub node_lease_duration_seconds: Option<i64>,
    pub image_gc_high_threshold_percent: Option<i64>,
    pub image_gc_low_threshold_percent: Option<i64>,
    pub image_minimum_gc_age: Option<String>,
    pub image_maximum_gc_age: Option<String>,
    pub address: Option<String>,
    pub port: Option<i64>,
    pub tls_cert_file: Option<String>,
    pub tls_private_key_file: Option<String>,
    pub authentication: Option<Authentication>,
    pub authorization: Option<Authorization>,
    pub enable_debugging_handlers: Option<bool>,
    pub rotate_certificates: Option<bool>,
    pub server_tls_bootstrap: Option<bool>,
    pub streaming_connection_idle_timeout: Option<String>,
}

/// `authentication` (KubeletAuthentication).
#[derive(Debug, Default)]
pub struct Authentication {
    pub x509: Option<X509>,
    pub webhook: Option<AuthnWebhook>,
    pub anonymous: Option<Anonymous>,
}

#[derive(Debug, Default)]
pub struct X509 {
    pub client_ca_file: Option<String>,
}

#[derive(Debug, Default)]
pub struct AuthnWebhook {
    pub enabled: Option<bool>,
    pub cache_ttl: Option<String>,
}

#[derive(Debug, Default)]
pub struct Anonymous {
    pub enabled: Option<bool>,
}

/// `authorization` (KubeletAuthorization).
#[derive(Debug, Default)]
pub struct Authorization {
    pub mode: Option<String>,
    pub webhook: Option<AuthzWebhook>,
}

#[derive(Debug, Default)]
pub struct AuthzWebhook {
    pub cache_authorized_ttl: Option<String>,
    pub cache_unauthorized_ttl: Option<String>,
}

/// A taint of `registerWithTaints`.
#[derive(Debug, Default, serde::Serialize)]
pub struct Taint {
    pub key: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub value: String,
    pub effect: String,
}

impl KubeletConfiguration {
    /// The image garbage collection settings, with kubelet's defaults and checks (percentages
    /// 0 to 100, low below high; 100 turns collection by disk use off; a zero maximum age is
    /// off).
    pub fn image_gc(&self) -> Result<crate::images::gc::Policy, Error> {
        let mut p = crate::images::gc::Policy::default();
        let percent = |name: &str, v: Option<i64>, default: u8| match v {
            None => Ok(default),
            Some(n) if (0..=100).contains(&n) => Ok(n as u8),
            Some(n) => Err(Error::kubelet(name, format!("{n} must be 0 to 100"))),
        };
        p.high_percent = percent("imageGCHighThresholdPercent", self.image_gc_high_threshold_percent, p.high_percent)?;
        p.low_percent = percent("imageGCLowThresholdPercent", self.image_gc_low_threshold_percent, p.low_percent)?;
        if p.low_percent >= p.high_percent && p.high_percent < 100 {
            return Err(Error::kubelet(
                "imageGCLowThresholdPercent",
                format!("{} must be less than imageGCHighThresholdPercent ({})", p.low_percent, p.high_percent),
            ));
        }
        if let Some(raw) = &self.image_minimum_gc_age {
            p.min_age =
                crate::duration::parse_duration(raw).map_err(|e| Error::kubelet("imageMinimumGCAge", e.to_string()))?;
        }
        if let Some(raw) = &self.image_maximum_gc_age {
            let max =
                crate::duration::parse_duration(raw).map_err(|e| Error::kubelet("imageMaximumGCAge", e.to_string()))?;
            if !max.is_zero() && max <= p.min_age {
                return Err(Error::kubelet(
                    "imageMaximumGCAge",
                    format!("{max:?} must be more than imageMinimumGCAge ({:?})", p.min_age),
                ));
            }
            p.max_age = Some(max).filter(|m| !m.is_zero());
        }
        Ok(p)
    }

    /// Reads a KubeletConfiguration file (YAML or JSON). Returns it and a note per field that
    /// this version does not act on.
    pub fn load(path: &std::path::Path) -> Result<(KubeletConfiguration, Vec<String>), Error> {
        let shown = path.display();
        let mut notes = Vec::new();
        let mut unknown = Vec::new();
        let cfg = Fields::read(path, &mut notes)
            .and_then(|f| KubeletConfiguration::from_fields(f, &mut unknown))
            .map_err(|e| e.within(&shown.to_string()))?;
        if cfg.kind != "KubeletConfiguration" || !cfg.api_version.starts_with("kubelet.config.k8s.io/") {
            let expected = "KubeletConfiguration of apiVersion kubelet.config.k8s.io/v1beta1";
            return Err(Error::from(Problem::Kind { expected, kind: cfg.kind, api_version: cfg.api_version })
                .within(&shown.to_string()));
        }
        let mut notes: Vec<String> = notes.into_iter().map(|n| format!("config {shown}: {n}")).collect();
        for field in unknown {
            notes.push(format!("config {shown}: {field}: not supported by atoll; ignored"));
        }
        Ok((cfg, notes))
    }

    fn from_fields(mut f: Fields, unknown: &mut Vec<String>) -> Result<KubeletConfiguration, Error> {
        let mut cfg = KubeletConfiguration {
            api_version: f.get("apiVersion")?.unwrap_or_default(),
            kind: f.get("kind")?.unwrap_or_default(),
            static_pod_path: f.get("staticPodPath")?,
            static_pod_url: f.get("staticPodURL")?,
            static_pod_url_header: f.get("staticPodURLHeader")?,
            file_check_frequency: f.get("fileCheckFrequency")?,
            http_check_frequency: f.get("httpCheckFrequency")?,
            sync_frequency: f.get("syncFrequency")?,
            container_runtime_endpoint: f.get("containerRuntimeEndpoint")?,
            runtime_request_timeout: f.get("runtimeRequestTimeout")?,
            pod_logs_dir: f.get("podLogsDir")?,
            container_log_max_size: f.get("containerLogMaxSize")?,
            container_log_max_files: f.get("containerLogMaxFiles")?,
            cluster_dns: f.get("clusterDNS")?,
            cluster_domain: f.get("clusterDomain")?,
            resolv_conf: f.get("resolvConf")?,
            healthz_port: f.get("healthzPort")?,
            healthz_bind_address: f.get("healthzBindAddress")?,
            read_only_port: f.get("readOnlyPort")?,
            max_pods: f.get("maxPods")?,
            kube_reserved: f.get("kubeReserved")?,
            system_reserved: f.get("systemReserved")?,
            eviction_hard: f.get("evictionHard")?,
            allowed_unsafe_sysctls: f.get("allowedUnsafeSysctls")?,
            register_with_taints: None,
            node_status_update_frequency: f.get("nodeStatusUpdateFrequency")?,
            node_status_report_frequency: f.get("nodeStatusReportFrequency")?,
            node_lease_duration_seconds: f.get("nodeLeaseDurationSeconds")?,
            image_gc_high_threshold_percent: f.get("imageGCHighThresholdPercent")?,
            image_gc_low_threshold_percent: f.get("imageGCLowThresholdPercent")?,
            image_minimum_gc_age: f.get("imageMinimumGCAge")?,
            image_maximum_gc_age: f.get("imageMaximumGCAge")?,
            address: f.get("address")?,
            port: f.get("port")?,
            tls_cert_file: f.get("tlsCertFile")?,
            tls_private_key_file: f.get("tlsPrivateKeyFile")?,
            authentication: None,
            authorization: None,
            enable_debugging_handlers: f.get("enableDebuggingHandlers")?,
            rotate_certificates: f.get("rotateCertificates")?,
            server_tls_bootstrap: f.get("serverTLSBootstrap")?,
            streaming_connection_idle_timeout: f.get("streamingConnectionIdleTimeout")?,
        };
        let taints = f.list("registerWithTaints")?;
        if !taints.is_empty() {
            let mut list = Vec::new();
            for mut t in taints {
                list.push(Taint {
                    key: t.get("key")?.unwrap_or_default(),
                    value: t.get("value")?.unwrap_or_default(),
                    effect: t.get("effect")?.unwrap_or_default(),
                });
                t.rest(unknown);
            }
            cfg.register_with_taints = Some(list);
        }
        if let Some(mut a) = f.section("authentication")? {
            let mut x509 = a.section("x509")?;
            let mut webhook = a.section("webhook")?;
            let mut anonymous = a.section("anonymous")?;
            cfg.authentication = Some(Authentication {
                x509: x509
                    .as_mut()
                    .map(|x| Ok::<_, Error>(X509 { client_ca_file: x.get("clientCAFile")? }))
                    .transpose()?,
                webhook: webhook
                    .as_mut()
                    .map(|w| Ok::<_, Error>(AuthnWebhook { enabled: w.get("enabled")?, cache_ttl: w.get("cacheTTL")? }))
                    .transpose()?,
                anonymous: anonymous
                    .as_mut()
                    .map(|x| Ok::<_, Error>(Anonymous { enabled: x.get("enabled")? }))
                    .transpose()?,
            });
            for part in [x509, webhook, anonymous].into_iter().flatten() {
                part.rest(unknown);
            }
            a.rest(unknown);
        }
        if let Some(mut a) = f.section("authorization")? {
            let mut webhook = a.section("webhook")?;
            cfg.authorization = Some(Authorization {
                mode: a.get("mode")?,
                webhook: webhook
                    .as_mut()
                    .map(|w| {
                        Ok::<_, Error>(AuthzWebhook {
                            cache_authorized_ttl: w.get("cacheAuthorizedTTL")?,
                            cache_unauthorized_ttl: w.get("cacheUnauthorizedTTL")?,
                        })
                    })
                    .transpose()?,
            });
            if let Some(w) = webhook {
                w.rest(unknown);
            }
            a.rest(unknown);
        }
        f.rest(unknown);
        Ok(cfg)
    }
}
