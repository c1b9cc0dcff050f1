//! Registry credentials for image pulls: a keyring built from atoll's own configuration and
//! from Docker `config.json` files, matched against image references with kubelet's rules
//! (pkg/credentialprovider): a key is `host[:port][/path]`, optionally with a scheme; hosts
//! match part by part with `*` globs (`*.example.com` matches `a.example.com`, not
//! `a.b.example.com`); ports must be equal; the key's path must be a prefix of the image's
//! repository path. Images without a registry host are Docker Hub's, which keys such as
//! `https://index.docker.io/v1/` name. Every matching credential is tried, most specific first.
//!
//! No secret ever appears in a log line or a `Debug` output (see `cri::api::AuthConfig`).

use crate::cri::api::AuthConfig;

/// Docker Hub's names, as keys and image references spell it.
const DOCKER_HUB: &str = "docker.io";
const DOCKER_HUB_ALIASES: &[&str] = &["index.docker.io", "registry-1.docker.io", "registry.hub.docker.com"];

/// One credential and the references it applies to.
#[derive(Clone)]
struct Entry {
    /// Where it came from, for log lines: `atoll config registryCredentials[0]`, a file name.
    origin: String,
    key: Key,
    auth: AuthConfig,
}

#[derive(Clone, Debug, PartialEq, Eq)]
struct Key {
    host_parts: Vec<String>,
    port: Option<String>,
    path: String,
}

/// Credentials by registry, matched against image references.
#[derive(Clone, Default)]
pub struct Keyring {
    entries: Vec<Entry>,
}

impl std::fmt::Debug for Keyring {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.entries.iter().map(|e| &e.origin)).finish()
    }
}

/// A credential that applies to an image: where it came from (never the secret) and the
/// CRI auth to send.
#[derive(Clone, Debug)]
pub struct Credential {
    pub origin: String,
    pub auth: AuthConfig,
}

/// Splits `[scheme://]host[:port][/path]` into a key; `None` when there is no host.
fn parse_key(text: &str) -> Option<Key> {
    let t = text.trim();
    let t = t.split_once("://").map_or(t, |(_, rest)| rest);
    let (hostport, path) = t.split_once('/').unwrap_or((t, ""));
    if hostport.is_empty() {
        return None;
    }
    let (host, port) = match hostport.rsplit_once(':') {
        Some((h, p)) if !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()) => (h, Some(p.to_string())),
        _ => (hostport, None),
    };
    let mut host = host.to_ascii_lowercase();
    if DOCKER_HUB_ALIASES.contains(&host.as_str()) {
        host = DOCKER_HUB.into();
    }
    let mut path = path.trim_end_matches('/').to_string();
    // Docker Hub's v1 index URL names the whole registry.
    if host == DOCKER_HUB && (path == "v1" || path == "v2") {
        path.clear();
    }
    Some(Key { host_parts: host.split('.').map(String::from).collect(), port, path })
}

/// The registry host and repository path of an image reference, Docker Hub's for a
/// reference without a host (`busybox` → `docker.io`, `library/busybox`).
fn image_key(image: &str) -> Key {
    let name = image.split('@').next().unwrap_or(image);
    // Drop the tag: a ':' after the last '/'.
    let name = match name.rsplit_once(':') {
        Some((repo, tag)) if !tag.contains('/') => repo,
        _ => name,
    };
    let (first, rest) = name.split_once('/').unwrap_or(("", name));
    let has_host = !first.is_empty() && (first.contains('.') || first.contains(':') || first == "localhost");
    if has_host {
        let mut key = parse_key(first).unwrap_or(Key { host_parts: vec![], port: None, path: String::new() });
        key.path = rest.to_string();
        key
    } else {
        let path = if name.contains('/') { name.to_string() } else { format!("library/{name}") };
        Key { host_parts: DOCKER_HUB.split('.').map(String::from).collect(), port: None, path }
    }
}

/// filepath.Match for one host part: `*` matches any run of characters, `?` one character.
fn glob(pattern: &str, text: &str) -> bool {
    let (p, t): (Vec<char>, Vec<char>) = (pattern.chars().collect(), text.chars().collect());
    let (mut pi, mut ti, mut star, mut mark) = (0, 0, None, 0);
    while ti < t.len() {
        if pi < p.len() && (p[pi] == '?' || p[pi] == t[ti]) {
            pi += 1;
            ti += 1;
        } else if pi < p.len() && p[pi] == '*' {
            star = Some(pi);
            mark = ti;
            pi += 1;
        } else if let Some(s) = star {
            pi = s + 1;
            mark += 1;
            ti = mark;
        } else {
            return false;
        }
    }
    p[pi..].iter().all(|c| *c == '*')
}

fn matches(key: &Key, target: &Key) -> bool {
    key.host_parts.len() == target.host_parts.len()
        && key.host_parts.iter().zip(&target.host_parts).all(|(k, t)| glob(k, t))
        && key.port == target.port
        && (key.path.is_empty()
            || target.path == key.path
            || target.path.strip_prefix(&key.path).is_some_and(|r| r.starts_with('/')))
}

impl Keyring {
    /// Adds a credential for `registry` (`host[:port][/path]`); an error names what is wrong.
    pub fn add(&mut self, origin: &str, registry: &str, auth: AuthConfig) -> Result<(), String> {
        let key = parse_key(registry).ok_or_else(|| format!("{origin}: registry {registry:?} has no host"))?;
        if auth.username.is_empty() && auth.auth.is_empty() && auth.identity_token.is_empty() {
            return Err(format!("{origin}: registry {registry:?} has no username, auth or identity token"));
        }
        let auth = AuthConfig { server_address: registry.to_string(), ..auth };
        self.entries.push(Entry { origin: origin.into(), key, auth });
        Ok(())
    }

    /// Adds every entry of a Docker `config.json` (`{"auths": {"registry": {...}}}`) or of a
    /// legacy `.dockercfg` (the same map at the top level).
    pub fn add_docker_config(&mut self, path: &std::path::Path, bytes: &[u8]) -> Result<usize, String> {
        #[derive(serde::Deserialize)]
        struct Cred {
            #[serde(default)]
            auth: String,
            #[serde(default)]
            username: String,
            #[serde(default)]
            password: String,
            #[serde(default, rename = "identitytoken")]
            identity_token: String,
            #[serde(default, rename = "registrytoken")]
            registry_token: String,
        }
        let shown = path.display();
        let value: serde_json::Value = serde_json::from_slice(bytes).map_err(|e| format!("{shown}: {e}"))?;
        let auths = match value.get("auths") {
            Some(a) => a.clone(),
            None if value.get("credsStore").is_some() || value.get("credHelpers").is_some() => {
                return Err(format!("{shown}: credential helpers are not supported; put the credentials in \"auths\""))
            }
            None => value,
        };
        let map: std::collections::BTreeMap<String, Cred> =
            serde_json::from_value(auths).map_err(|e| format!("{shown}: auths: {e}"))?;
        let mut added = 0;
        for (registry, c) in map {
            let origin = format!("{shown} auths[{registry:?}]");
            let auth = AuthConfig {
                username: c.username,
                password: c.password,
                auth: c.auth,
                identity_token: c.identity_token,
                registry_token: c.registry_token,
                server_address: String::new(),
            };
            self.add(&origin, &registry, auth)?;
            added += 1;
        }
        Ok(added)
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The keyring of a pod's `imagePullSecrets`, as kubelet makes it: each Secret of type
    /// `kubernetes.io/dockerconfigjson` (its `.dockerconfigjson`) or `kubernetes.io/dockercfg`
    /// (its `.dockercfg`) that `lookup` has, in order (another type is passed over); one missing or unreadable is logged and
    /// passed over (the pull goes on with the others and the node's).
    pub fn of_pull_secrets(pod: &crate::pod::Pod, lookup: &dyn crate::objects::resolve::Lookup) -> Keyring {
        let mut keyring = Keyring::default();
        let ns = &pod.metadata.namespace;
        for name in pod.spec.image_pull_secrets.iter().filter_map(|s| s["name"].as_str()) {
            let Some(secret) = lookup.object(crate::objects::ObjectKind::Secret, ns, name) else {
                log::warn!("pod {}: pull secret {ns}/{name} not found; pulling without it", pod.key());
                continue;
            };
            let key = match secret.secret_type.as_str() {
                "kubernetes.io/dockerconfigjson" => ".dockerconfigjson",
                "kubernetes.io/dockercfg" => ".dockercfg",
                _ => "",
            };
            let Some(bytes) = secret.data.get(key) else {
                log::warn!("pod {}: pull secret {ns}/{name} is not a Docker config Secret", pod.key());
                continue;
            };
            let shown = std::path::PathBuf::from(format!("pull secret {ns}/{name}"));
            // The parser's message may quote the value: not logged.
            if keyring.add_docker_config(&shown, bytes).is_err() {
                log::warn!("pod {}: pull secret {ns}/{name} does not read as a Docker config", pod.key());
            }
        }
        keyring
    }

    /// The credentials that apply to `image`, most specific first (longer path, then fewer
    /// globs, then the order they were added in).
    pub fn lookup(&self, image: &str) -> Vec<Credential> {
        let target = image_key(image);
        let mut found: Vec<(usize, &Entry)> =
            self.entries.iter().enumerate().filter(|(_, e)| matches(&e.key, &target)).collect();
        found.sort_by_key(|(i, e)| {
            let globs = e.key.host_parts.iter().filter(|p| p.contains(['*', '?'])).count();
            (std::cmp::Reverse(e.key.path.len()), globs, *i)
        });
        found.into_iter().map(|(_, e)| Credential { origin: e.origin.clone(), auth: e.auth.clone() }).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn user(name: &str) -> AuthConfig {
        AuthConfig { username: name.into(), password: "pw".into(), ..Default::default() }
    }

    fn users(k: &Keyring, image: &str) -> Vec<String> {
        k.lookup(image).into_iter().map(|c| c.auth.username).collect()
    }

    #[test]
    fn image_references_split_like_kubelet() {
        let k = image_key("busybox:1.36");
        assert_eq!((k.host_parts.join("."), k.port, k.path.as_str()), ("docker.io".into(), None, "library/busybox"));
        let k = image_key("me/app@sha256:abcd");
        assert_eq!((k.host_parts.join("."), k.path.as_str()), ("docker.io".into(), "me/app"));
        let k = image_key("127.0.0.1:5000/team/app:1");
        assert_eq!(
            (k.host_parts.join("."), k.port.as_deref(), k.path.as_str()),
            ("127.0.0.1".into(), Some("5000"), "team/app")
        );
        let k = image_key("localhost/app");
        assert_eq!((k.host_parts.join("."), k.path.as_str()), ("localhost".into(), "app"));
    }

    #[test]
    fn hosts_ports_and_paths_match_as_kubelet_does() {
        let mut k = Keyring::default();
        k.add("a", "registry.example.com", user("host")).unwrap();
        k.add("b", "registry.example.com/team", user("team")).unwrap();
        k.add("c", "*.example.com", user("glob")).unwrap();
        k.add("d", "https://registry.example.com:5000/", user("port")).unwrap();
        assert_eq!(users(&k, "registry.example.com/team/app:1"), ["team", "host", "glob"]);
        assert_eq!(users(&k, "registry.example.com/other/app"), ["host", "glob"]);
        // A path prefix must end at a '/'.
        assert_eq!(users(&k, "registry.example.com/teamx/app"), ["host", "glob"]);
        assert_eq!(users(&k, "registry.example.com:5000/x"), ["port"]);
        // A glob matches one host part only.
        assert_eq!(users(&k, "a.b.example.com/x"), Vec::<String>::new());
        assert_eq!(users(&k, "mirror.example.com/x"), ["glob"]);
        assert_eq!(users(&k, "example.com/x"), Vec::<String>::new());
        assert_eq!(users(&k, "busybox"), Vec::<String>::new());
    }

    #[test]
    fn docker_hub_keys_cover_images_without_a_host() {
        let mut k = Keyring::default();
        k.add_docker_config(
            std::path::Path::new("/x/config.json"),
            br#"{"auths":{"https://index.docker.io/v1/":{"auth":"dTpw"},"quay.io":{"username":"q","password":"p"}}}"#,
        )
        .unwrap();
        let found = k.lookup("busybox");
        assert_eq!(found.len(), 1);
        assert_eq!(found[0].auth.auth, "dTpw");
        assert_eq!(found[0].origin, "/x/config.json auths[\"https://index.docker.io/v1/\"]");
        assert_eq!(k.lookup("docker.io/library/busybox:1").len(), 1);
        assert_eq!(users(&k, "quay.io/org/app"), ["q"]);
    }

    #[test]
    fn bad_credentials_are_named() {
        let mut k = Keyring::default();
        let e = k.add("atoll config registryCredentials[0]", "", user("x")).unwrap_err();
        assert!(e.contains("registryCredentials[0]") && e.contains("no host"), "{e}");
        let e = k.add("cfg", "r.example.com", AuthConfig::default()).unwrap_err();
        assert!(e.contains("no username"), "{e}");
        let e = k.add_docker_config(std::path::Path::new("/c.json"), br#"{"credsStore":"pass"}"#).unwrap_err();
        assert!(e.contains("/c.json") && e.contains("credential helpers"), "{e}");
        let e = k.add_docker_config(std::path::Path::new("/c.json"), b"{").unwrap_err();
        assert!(e.starts_with("/c.json: "), "{e}");
    }

    #[test]
    fn secrets_stay_out_of_debug_output() {
        let mut k = Keyring::default();
        k.add(
            "cfg",
            "r.example.com",
            AuthConfig { username: "u".into(), password: "hunter2".into(), ..Default::default() },
        )
        .unwrap();
        let shown = format!("{k:?} {:?}", k.lookup("r.example.com/a"));
        assert!(!shown.contains("hunter2"), "{shown}");
    }

    #[test]
    fn globs_follow_filepath_match() {
        assert!(glob("*", "abc"));
        assert!(glob("a*c", "abbbc"));
        assert!(glob("a?c", "abc"));
        assert!(!glob("a?c", "ac"));
        assert!(!glob("abc", "abd"));
    }

    #[test]
    fn a_pods_pull_secrets_make_its_keyring_and_a_missing_one_is_passed_over() {
        use crate::objects::{LocalObject, ObjectKind};
        let secret = |name: &str, key: &str, json: &str| LocalObject {
            secret_type: match key {
                ".dockercfg" => "kubernetes.io/dockercfg".into(),
                ".dockerconfigjson" => "kubernetes.io/dockerconfigjson".into(),
                _ => "Opaque".into(),
            },
            kind: ObjectKind::Secret,
            namespace: "shop".into(),
            name: name.into(),
            data: std::collections::BTreeMap::from([(key.to_string(), json.as_bytes().to_vec())]),
            immutable: false,
            origin: "the API server".into(),
        };
        let mut objects = crate::objects::resolve::Snapshot::new();
        for o in [
            secret("reg", ".dockerconfigjson", r#"{"auths":{"registry.example.com":{"username":"u","password":"p"}}}"#),
            secret("old", ".dockercfg", r#"{"legacy.example.com":{"auth":"dTpw"}}"#),
            secret("opaque", "token", "x"),
        ] {
            objects.insert((o.kind, o.namespace.clone(), o.name.clone()), std::sync::Arc::new(o));
        }
        let pod: crate::pod::Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "p", "namespace": "shop"},
            "spec": {"imagePullSecrets": [{"name": "gone"}, {"name": "opaque"}, {"name": "reg"}, {"name": "old"}]}
        }))
        .unwrap();
        let keyring = Keyring::of_pull_secrets(&pod, &objects);
        let found = keyring.lookup("registry.example.com/app:1");
        assert_eq!(found.len(), 1);
        assert_eq!(found[0].auth.username, "u");
        assert_eq!(found[0].origin, "pull secret shop/reg auths[\"registry.example.com\"]");
        assert_eq!(keyring.lookup("legacy.example.com/app:1")[0].auth.auth, "dTpw");
        assert!(keyring.lookup("docker.io/library/busybox:1.36").is_empty());
    }
}
