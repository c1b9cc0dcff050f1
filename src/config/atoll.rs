//! atoll's own settings file (`--atoll-config`, kind AtollConfiguration of apiVersion
//! atoll.io/v1alpha1): back-off limits, runtime classes, registry credentials, the local API's
//! socket, the state directory, the mirror's kubeconfig and node labels. Kept apart from the
//! KubeletConfiguration so that file stays kubelet's.

use super::error::{Error, Problem};
use super::fields::Fields;
use crate::duration::parse_duration;
use std::time::Duration;

/// atoll's own settings (`--atoll-config`, kind AtollConfiguration of apiVersion
/// atoll.io/v1alpha1): what kubelet has no field for, kept apart from the KubeletConfiguration
/// so that file stays kubelet's. Every field is optional; see `configs/atoll.yaml`.
#[derive(Debug, Default)]
pub struct AtollConfiguration {
    pub api_version: String,
    pub kind: String,
    /// Like `--strict`: manifest fields atoll does not implement are errors.
    pub strict: Option<bool>,
    /// With imagePullPolicy Always and the registry unreachable, fail the pull as kubelet does
    /// instead of starting from the image already on disk (default false).
    pub strict_image_pull_policy: Option<bool>,
    /// Image tarballs (docker or OCI archives; plain, gzip or zstd) imported into the runtime
    /// at start and when they appear or change; default `<root-dir>/images`.
    pub images_dir: Option<String>,
    /// A directory of Secret (and ConfigMap) manifests kept apart from the pods: it must be
    /// a directory owned by root with mode 0700, or it is not read. Not set unless given.
    pub secrets_dir: Option<String>,
    /// An age identity file (`age-keygen`; root's, 0600): manifests ending in `.age` are
    /// decrypted with it, in memory only.
    pub decryption_key_file: Option<String>,
    /// containerd's `ctr`, which imports them, when it is not the first `ctr` on PATH.
    pub ctr_path: Option<String>,
    /// How often images are garbage-collected (kubelet's fixed 5m by default; 1s to 24h).
    pub image_gc_period: Option<String>,
    /// CrashLoopBackOff: kubelet's 10 s doubling to 300 s unless given.
    pub crash_loop_back_off: Option<BackOffConfig>,
    /// ImagePullBackOff: kubelet's 10 s doubling to 300 s unless given.
    pub image_pull_back_off: Option<BackOffConfig>,
    /// runtimeClassName → CRI runtime handler (kubelet reads RuntimeClass objects from the API
    /// server; here there is none).
    pub runtime_classes: std::collections::BTreeMap<String, String>,
    /// Credentials for image pulls (kubelet takes them from pull secrets; here there are none).
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
    /// How often the runtime is relisted while its container events (or, without them, the
    /// containers' process exits) are watched: the safety net for anything they miss. Default
    /// 10s; without either, atoll relists every second.
    pub relist_period: Option<String>,
    /// Health-gated rollback for every pod (a pod's `atoll.io/rollback-after` annotation wins):
    /// a changed pod must be Ready this long after it starts, or its previous version runs
    /// again. Off unless given (1s to 24h).
    pub rollback_after: Option<String>,
    /// Restarts a changed pod may have within that window (default 3).
    pub rollback_max_restarts: Option<u32>,
    /// Signed manifests: the minisign public keys trusted, and whether every manifest must be
    /// signed (see `docs/src/guides/fleet-updates.md`).
    pub manifest_trust: Option<ManifestTrust>,
    /// Labels for the registered node (`--node-labels` wins).
    pub node_labels: std::collections::BTreeMap<String, String>,
    /// Mirror pods from age-encrypted manifests with their values (env values, commands) as
    /// they are, for whoever can read pods on the API server (default false: redacted).
    pub mirror_encrypted_pod_specs: Option<bool>,
    /// Run the pods the cluster binds to the node (default true when there is a kubeconfig;
    /// `--api-pod-source` wins).
    pub api_pod_source: Option<bool>,
    /// The tunnel to a konnectivity server, for a node the API server cannot dial.
    pub konnectivity: Option<crate::tunnel::TunnelSettings>,
}

#[derive(Debug, Default)]
pub struct ManifestTrust {
    /// minisign public key files (`minisign -G` writes one); a signature by any of them is good.
    pub public_keys: Vec<String>,
    /// Refuse unsigned manifests (default false: only signatures that are there are checked).
    pub require: bool,
}

#[derive(Debug, Default)]
pub struct BackOffConfig {
    pub initial_delay: Option<String>,
    pub max_delay: Option<String>,
}

#[derive(Default)]
pub struct RegistryCredential {
    /// `host[:port][/path]`, `*` globs per host part (`*.example.com`).
    pub registry: String,
    pub username: String,
    pub password: String,
    /// A file holding the password (trailing newline dropped), instead of `password`.
    pub password_file: Option<String>,
    /// base64 of `username:password`, as in Docker's config.json.
    pub auth: String,
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

impl AtollConfiguration {
    /// Reads an AtollConfiguration file. Returns it and a note per field it does not know
    /// (a newer atoll's setting, or a typo), which the agent logs at start.
    pub fn load(path: &std::path::Path) -> Result<(AtollConfiguration, Vec<String>), Error> {
        let shown = path.display();
        let mut notes = Vec::new();
        let mut unknown = Vec::new();
        let cfg = Fields::read(path, &mut notes)
            .and_then(|f| AtollConfiguration::from_fields(f, &mut unknown))
            .map_err(|e| e.within(&shown.to_string()))?;
        let mut notes: Vec<String> = notes.into_iter().map(|n| format!("config {shown}: {n}")).collect();
        if cfg.kind != "AtollConfiguration" || !cfg.api_version.starts_with("atoll.io/") {
            let expected = "AtollConfiguration of apiVersion atoll.io/v1alpha1";
            return Err(Error::from(Problem::Kind { expected, kind: cfg.kind, api_version: cfg.api_version })
                .within(&shown.to_string()));
        }
        for field in unknown {
            notes.push(format!("config {shown}: {field}: unknown field; ignored"));
        }
        Ok((cfg, notes))
    }

    fn from_fields(mut f: Fields, unknown: &mut Vec<String>) -> Result<AtollConfiguration, Error> {
        let mut back_off = |f: &mut Fields, key: &str| -> Result<Option<BackOffConfig>, Error> {
            let Some(mut b) = f.section(key)? else { return Ok(None) };
            let read = BackOffConfig { initial_delay: b.get("initialDelay")?, max_delay: b.get("maxDelay")? };
            b.rest(unknown);
            Ok(Some(read))
        };
        let crash_loop_back_off = back_off(&mut f, "crashLoopBackOff")?;
        let image_pull_back_off = back_off(&mut f, "imagePullBackOff")?;
        let mut registry_credentials = Vec::new();
        for mut c in f.list("registryCredentials")? {
            registry_credentials.push(RegistryCredential {
                registry: c.get("registry")?.ok_or_else(|| {
                    let at = format!("registryCredentials[{}].registry", registry_credentials.len());
                    Error::field(&at, "missing field".into())
                })?,
                username: c.get("username")?.unwrap_or_default(),
                password: c.get("password")?.unwrap_or_default(),
                password_file: c.get("passwordFile")?,
                auth: c.get("auth")?.unwrap_or_default(),
                identity_token: c.get("identityToken")?.unwrap_or_default(),
            });
            c.rest(unknown);
        }
        let manifest_trust = match f.section("manifestTrust")? {
            None => None,
            Some(mut t) => {
                let read = ManifestTrust {
                    public_keys: t.get("publicKeys")?.unwrap_or_default(),
                    require: t.get("require")?.unwrap_or_default(),
                };
                t.rest(unknown);
                Some(read)
            }
        };
        let konnectivity = match f.section("konnectivity")? {
            None => None,
            Some(k) => Some(super::konnectivity::read(k, unknown)?),
        };
        let cfg = AtollConfiguration {
            konnectivity,
            api_version: f.get("apiVersion")?.unwrap_or_default(),
            kind: f.get("kind")?.unwrap_or_default(),
            strict: f.get("strict")?,
            strict_image_pull_policy: f.get("strictImagePullPolicy")?,
            images_dir: f.get("imagesDir")?,
            secrets_dir: f.get("secretsDir")?,
            decryption_key_file: f.get("decryptionKeyFile")?,
            ctr_path: f.get("ctrPath")?,
            image_gc_period: f.get("imageGCPeriod")?,
            crash_loop_back_off,
            image_pull_back_off,
            runtime_classes: f.get("runtimeClasses")?.unwrap_or_default(),
            registry_credentials,
            docker_config_files: f.get("dockerConfigFiles")?,
            api_socket: f.get("apiSocket")?,
            state_dir: f.get("stateDir")?,
            kubeconfig: f.get("kubeconfig")?,
            relist_period: f.get("relistPeriod")?,
            rollback_after: f.get("rollbackAfter")?,
            rollback_max_restarts: f.get("rollbackMaxRestarts")?,
            manifest_trust,
            node_labels: f.get("nodeLabels")?.unwrap_or_default(),
            mirror_encrypted_pod_specs: f.get("mirrorEncryptedPodSpecs")?,
            api_pod_source: f.get("apiPodSource")?,
        };
        f.rest(unknown);
        Ok(cfg)
    }

    /// `imageGCPeriod`, checked: from 1s to 24h.
    pub(super) fn image_gc_period(&self, shown: &str) -> Result<Duration, Error> {
        let Some(raw) = &self.image_gc_period else { return Ok(crate::images::gc::PERIOD) };
        within(shown, "imageGCPeriod", raw, "24h")
    }

    /// `manifestTrust`, its key files read and checked.
    pub(super) fn manifest_trust(&self, shown: &str) -> Result<Option<crate::trust::Trust>, Error> {
        let Some(t) = &self.manifest_trust else { return Ok(None) };
        if t.public_keys.is_empty() {
            return Err(Error::in_file(shown, "manifestTrust.publicKeys", "at least one key file is needed".into()));
        }
        let mut keys = Vec::new();
        for (i, file) in t.public_keys.iter().enumerate() {
            let bad =
                |e: String| Error::in_file(shown, &format!("manifestTrust.publicKeys[{i}]"), format!("{file}: {e}"));
            let bytes =
                crate::bounded::read_following(std::path::Path::new(file), 4096).map_err(|e| bad(e.to_string()))?;
            let text = String::from_utf8(bytes).map_err(|_| bad("not text".into()))?;
            keys.push(crate::trust::PublicKey::parse(&text).map_err(|e| bad(e.to_string()))?);
        }
        Ok(Some(crate::trust::Trust { keys, require: t.require }))
    }

    /// `decryptionKeyFile`, read and checked (root's alone).
    pub(super) fn decryption(&self, shown: &str) -> Result<Option<std::sync::Arc<crate::age::Identity>>, Error> {
        let Some(file) = self.decryption_key_file.as_deref().filter(|f| !f.is_empty()) else { return Ok(None) };
        let id = crate::age::Identity::from_file(std::path::Path::new(file))
            .map_err(|e| Error::in_file(shown, "decryptionKeyFile", e.to_string()))?;
        Ok(Some(std::sync::Arc::new(id)))
    }

    /// `rollbackAfter` and `rollbackMaxRestarts`, checked.
    pub(super) fn rollback(&self, shown: &str) -> Result<Option<crate::pod::rollback_policy::Policy>, Error> {
        let Some(raw) = &self.rollback_after else { return Ok(None) };
        let window = within(shown, "rollbackAfter", raw, "24h")?;
        let max_restarts = self.rollback_max_restarts.unwrap_or(crate::pod::rollback_policy::DEFAULT_MAX_RESTARTS);
        Ok(Some(crate::pod::rollback_policy::Policy { window, max_restarts }))
    }

    /// `relistPeriod`, checked: from 1s to 1h.
    pub(super) fn relist_period(&self, shown: &str) -> Result<Duration, Error> {
        let Some(raw) = &self.relist_period else { return Ok(crate::runtime::pleg::RELIST_SAFETY_NET) };
        within(shown, "relistPeriod", raw, "1h")
    }

    /// The back-off the config names for `field`, over kubelet's default.
    pub(super) fn back_off(
        shown: &str,
        field: &str,
        given: &Option<BackOffConfig>,
    ) -> Result<(Duration, Duration), Error> {
        let get = |name: &str, v: &Option<String>, default: Duration| match v {
            None => Ok(default),
            Some(raw) => match parse_duration(raw) {
                Ok(d) if d.is_zero() => {
                    Err(Error::in_file(shown, &format!("{field}.{name}"), "must be more than zero".into()))
                }
                Ok(d) => Ok(d),
                Err(e) => Err(Error::in_file(shown, &format!("{field}.{name}"), e.to_string())),
            },
        };
        let Some(b) = given else {
            return Ok((crate::runtime::backoff::DEFAULT_INITIAL, crate::runtime::backoff::DEFAULT_MAX));
        };
        let initial = get("initialDelay", &b.initial_delay, crate::runtime::backoff::DEFAULT_INITIAL)?;
        let max = get("maxDelay", &b.max_delay, crate::runtime::backoff::DEFAULT_MAX.max(initial))?;
        if max < initial {
            let reason = format!("{max:?} is less than initialDelay {initial:?}");
            return Err(Error::in_file(shown, &format!("{field}.maxDelay"), reason));
        }
        Ok((initial, max))
    }

    /// The keyring of registryCredentials and the Docker config files.
    pub(super) fn keyring(
        &self,
        shown: &str,
        root_dir: &std::path::Path,
    ) -> Result<crate::runtime::credentials::Keyring, Error> {
        use crate::cri::api::AuthConfig;
        let mut keyring = crate::runtime::credentials::Keyring::default();
        for (i, c) in self.registry_credentials.iter().enumerate() {
            let at = format!("registryCredentials[{i}]");
            let mut password = c.password.clone();
            if let Some(file) = &c.password_file {
                if !password.is_empty() {
                    return Err(Error::in_file(shown, &at, "give password or passwordFile, not both".into()));
                }
                let bad = |e: String| Error::in_file(shown, &format!("{at}.passwordFile"), format!("{file}: {e}"));
                let bytes = crate::bounded::read_following(std::path::Path::new(file), 64 << 10)
                    .map_err(|e| bad(e.to_string()))?;
                let text = String::from_utf8(bytes).map_err(|_| bad("not text".into()))?;
                password = text.trim_end_matches(['\n', '\r']).to_string();
            }
            let auth = AuthConfig {
                username: c.username.clone(),
                password,
                auth: c.auth.clone(),
                identity_token: c.identity_token.clone(),
                ..Default::default()
            };
            keyring.add(&format!("config {shown}: {at}"), &c.registry, auth).map_err(Error::invalid)?;
        }
        let (files, explicit) = match &self.docker_config_files {
            Some(f) => (f.iter().map(std::path::PathBuf::from).collect(), true),
            None => (vec![root_dir.join("config.json")], false),
        };
        for f in files {
            match crate::bounded::read_following(&f, 4 << 20) {
                Ok(bytes) => {
                    keyring.add_docker_config(&f, &bytes).map_err(|e| Error::in_file(shown, "dockerConfigFiles", e))?;
                }
                Err(e) if !explicit && e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(Error::in_file(shown, "dockerConfigFiles", format!("{}: {e}", f.display()))),
            }
        }
        Ok(keyring)
    }
}

/// The duration `raw` of the field `field` of the file shown as `shown`, from 1s to `max`.
fn within(shown: &str, field: &str, raw: &str, max: &'static str) -> Result<Duration, Error> {
    let bad = |reason: String| Error::in_file(shown, field, reason);
    let d = parse_duration(raw).map_err(|e| bad(e.to_string()))?;
    let top = parse_duration(max).unwrap_or(Duration::MAX);
    if d < Duration::from_secs(1) || d > top {
        return Err(bad(format!("{d:?} is not between 1s and {max}")));
    }
    Ok(d)
}
