//! kubeconfig files (`--kubeconfig`), as client-go reads them for one connection: the
//! current context (or a named one) picks a cluster (server URL, CA from a file or inline
//! data, insecure-skip-tls-verify) and a user (client certificate and key from files or inline
//! data, a bearer token or a token file). Relative file paths are relative to the kubeconfig's
//! own directory, as client-go resolves them. Errors name the file and the field.

use super::error::{Error, Kind, Problem};
use std::path::{Path, PathBuf};

/// Where a credential's bytes come from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Source {
    File(PathBuf),
    Data(Vec<u8>),
}

impl Source {
    /// The bytes, read now (token files are re-read on each use, so a rotated token applies).
    pub fn read(&self) -> Result<Vec<u8>, Error> {
        match self {
            Source::Data(d) => Ok(d.clone()),
            Source::File(p) => crate::bounded::read_following(p, MAX_BYTES)
                .map_err(|e| Error::from(Kind::Read { path: p.clone(), why: e.to_string() })),
        }
    }
}

/// What connecting to the API server needs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Connection {
    pub server: String,
    pub ca: Option<Source>,
    pub insecure_skip_tls_verify: bool,
    pub client_certificate: Option<Source>,
    pub client_key: Option<Source>,
    pub token: Option<Source>,
    /// The context it came from, for log lines.
    pub context: String,
}

#[derive(serde::Deserialize, Default)]
#[serde(rename_all = "kebab-case")]
struct File {
    #[serde(default)]
    clusters: Vec<Named<Cluster>>,
    #[serde(default)]
    users: Vec<Named<User>>,
    #[serde(default)]
    contexts: Vec<Named<Context>>,
    #[serde(default)]
    current_context: String,
}

#[derive(serde::Deserialize)]
struct Named<T> {
    name: String,
    #[serde(alias = "cluster", alias = "user", alias = "context")]
    value: Option<T>,
}

#[derive(serde::Deserialize, Default)]
#[serde(rename_all = "kebab-case")]
struct Cluster {
    #[serde(default)]
    server: String,
    certificate_authority: Option<String>,
    certificate_authority_data: Option<String>,
    #[serde(default)]
    insecure_skip_tls_verify: bool,
}

#[derive(serde::Deserialize, Default)]
#[serde(rename_all = "kebab-case")]
struct User {
    client_certificate: Option<String>,
    client_certificate_data: Option<String>,
    client_key: Option<String>,
    client_key_data: Option<String>,
    token: Option<String>,
    /// client-go spells this one in camelCase (`tokenFile`), unlike its neighbours.
    #[serde(rename = "tokenFile", alias = "token-file")]
    token_file: Option<String>,
}

#[derive(serde::Deserialize, Default)]
struct Context {
    #[serde(default)]
    cluster: String,
    #[serde(default)]
    user: String,
}

fn source(
    dir: &Path,
    shown: &str,
    field: &'static str,
    file: &Option<String>,
    data: &Option<String>,
) -> Result<Option<Source>, Error> {
    let bad = |bad_data| Error::from(Kind::Credential { file: shown.to_string(), field, bad_data });
    match (file.as_deref().filter(|f| !f.is_empty()), data.as_deref().filter(|d| !d.is_empty())) {
        (Some(_), Some(_)) => Err(bad(None)),
        (Some(f), None) => Ok(Some(Source::File(dir.join(f)))),
        (None, Some(d)) => {
            crate::base64::decode(d).map(|b| Some(Source::Data(b))).map_err(|e| bad(Some(e.to_string())))
        }
        (None, None) => Ok(None),
    }
}

/// A kubeconfig larger than this is refused (kubectl's are a few KiB; inline certificates
/// make them tens).
const MAX_BYTES: usize = 4 << 20;

/// Reads `path` and resolves `context` (the current context when `None`).
pub fn load(path: &Path, context: Option<&str>) -> Result<Connection, Error> {
    let shown = path.display().to_string();
    let fail = |problem| Error::from(Kind::Kubeconfig { file: shown.clone(), problem });
    let unreadable = |why: String| fail(Problem::Unreadable(why));
    let bytes = crate::bounded::read_following(path, MAX_BYTES).map_err(|e| unreadable(e.to_string()))?;
    // The parser every other document goes through (its budget), then the shape.
    let doc = crate::parse::document(&bytes).map_err(|e| unreadable(e.to_string()))?;
    let file: File = serde_json::from_value(doc.value).map_err(|e| unreadable(e.to_string()))?;
    let dir = path.parent().unwrap_or(Path::new("."));
    let name = context.map(String::from).unwrap_or(file.current_context.clone());
    if name.is_empty() {
        return Err(fail(Problem::NoCurrentContext));
    }
    let ctx = file
        .contexts
        .iter()
        .find(|c| c.name == name)
        .and_then(|c| c.value.as_ref())
        .ok_or_else(|| fail(Problem::NoContext(name.clone())))?;
    let cluster = file
        .clusters
        .iter()
        .find(|c| c.name == ctx.cluster)
        .and_then(|c| c.value.as_ref())
        .ok_or_else(|| fail(Problem::NoCluster { cluster: ctx.cluster.clone(), context: name.clone() }))?;
    let default_user = User::default();
    let user = match file.users.iter().find(|u| u.name == ctx.user) {
        Some(u) => u.value.as_ref().unwrap_or(&default_user),
        None if ctx.user.is_empty() => &default_user,
        None => return Err(fail(Problem::NoUser { user: ctx.user.clone(), context: name })),
    };
    let server = cluster.server.trim_end_matches('/').to_string();
    if !(server.starts_with("https://") || server.starts_with("http://")) {
        return Err(fail(Problem::NotHttp { cluster: ctx.cluster.clone(), server }));
    }
    let token = match (&user.token, &user.token_file) {
        (Some(t), _) if !t.is_empty() => Some(Source::Data(t.trim().as_bytes().to_vec())),
        (_, Some(f)) if !f.is_empty() => Some(Source::File(dir.join(f))),
        _ => None,
    };
    let conn = Connection {
        server,
        ca: source(
            dir,
            &shown,
            "certificate-authority",
            &cluster.certificate_authority,
            &cluster.certificate_authority_data,
        )?,
        insecure_skip_tls_verify: cluster.insecure_skip_tls_verify,
        client_certificate: source(
            dir,
            &shown,
            "client-certificate",
            &user.client_certificate,
            &user.client_certificate_data,
        )?,
        client_key: source(dir, &shown, "client-key", &user.client_key, &user.client_key_data)?,
        token,
        context: name,
    };
    if conn.client_certificate.is_some() != conn.client_key.is_some() {
        return Err(fail(Problem::HalfPair { user: ctx.user.clone() }));
    }
    Ok(conn)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(name: &str, text: &str) -> crate::testdir::TestFile {
        crate::testdir::TestFile::new("kubeconfig", name, text)
    }

    const CONFIG: &str = "apiVersion: v1
kind: Config
current-context: edge
clusters:
- name: prod
  cluster:
    server: https://10.0.0.1:6443/
    certificate-authority-data: aGVsbG8=
- name: lab
  cluster:
    server: https://lab:6443
    certificate-authority: certs/ca.pem
    insecure-skip-tls-verify: true
users:
- name: node
  user:
    client-certificate: node.crt
    client-key-data: a2V5
- name: bot
  user:
    tokenFile: /var/run/token
contexts:
- name: edge
  context: {cluster: prod, user: node}
- name: lab
  context: {cluster: lab, user: bot}
";

    #[test]
    fn the_current_context_picks_cluster_and_user() {
        let p = write("config", CONFIG);
        let c = load(&p, None).unwrap();
        assert_eq!(c.server, "https://10.0.0.1:6443");
        assert_eq!(c.ca, Some(Source::Data(b"hello".to_vec())));
        assert_eq!(c.client_certificate, Some(Source::File(p.parent().unwrap().join("node.crt"))));
        assert_eq!(c.client_key, Some(Source::Data(b"key".to_vec())));
        assert_eq!((c.token, c.context.as_str(), c.insecure_skip_tls_verify), (None, "edge", false));
        let lab = load(&p, Some("lab")).unwrap();
        assert_eq!(lab.ca, Some(Source::File(p.parent().unwrap().join("certs/ca.pem"))));
        assert_eq!(lab.token, Some(Source::File("/var/run/token".into())));
        assert!(lab.insecure_skip_tls_verify);
    }

    #[test]
    fn problems_name_the_file_and_field() {
        let p = write("bad-context", &CONFIG.replace("current-context: edge", "current-context: nope"));
        let e = load(&p, None).unwrap_err().to_string();
        assert!(e.contains("bad-context") && e.contains("no context named \"nope\""), "{e}");
        let p = write("bad-data", &CONFIG.replace("aGVsbG8=", "a*b"));
        let e = load(&p, None).unwrap_err().to_string();
        assert!(e.contains("certificate-authority-data: not base64"), "{e}");
        let p = write("bad-server", &CONFIG.replace("https://10.0.0.1:6443/", "10.0.0.1"));
        assert!(load(&p, None).unwrap_err().to_string().contains("server: \"10.0.0.1\" is not an http(s) URL"));
        let p = write("half-cert", &CONFIG.replace("    client-key-data: a2V5\n", ""));
        assert!(load(&p, None).unwrap_err().to_string().contains("needs its key"));
        assert!(load(Path::new("/nonexistent/kubeconfig"), None)
            .unwrap_err()
            .to_string()
            .contains("/nonexistent/kubeconfig"));
    }

    /// A kubeconfig is read as every other document is: bounded, and parsed under the budget.
    #[test]
    fn a_huge_or_deep_kubeconfig_is_refused() {
        let p = write("huge", &format!("{CONFIG}# {}\n", "x".repeat(MAX_BYTES)));
        let e = load(&p, None).unwrap_err().to_string();
        assert!(e.contains("huge") && e.contains("limit"), "{e}");
        let deep = format!("{CONFIG}extensions: {}{}\n", "[".repeat(1000), "]".repeat(1000));
        let e = load(&write("deep", &deep), None).unwrap_err().to_string();
        assert!(e.contains("deep") && e.contains("recursion limit"), "{e}");
        let token = write("token", &"t".repeat(MAX_BYTES + 1));
        assert!(Source::File(token.to_path_buf()).read().unwrap_err().to_string().contains("limit"));
        for big in [p, token] {
            let _ = std::fs::remove_file(big); // 4 MiB each: not left behind in /tmp
        }
    }

    /// kubeadm's kubelet.conf names `kubelet-client-current.pem`, a symlink to the rotated
    /// certificate; kubeconfigs themselves are often links.
    #[test]
    fn linked_kubeconfigs_and_certificates_are_followed() {
        let cert = write("client-2026.pem", "PEM");
        let link = cert.with_file_name("client-current.pem");
        let _ = std::fs::remove_file(&link);
        std::os::unix::fs::symlink(&cert, &link).unwrap();
        assert_eq!(Source::File(link).read().unwrap(), b"PEM");
        let config = write("linked-target", CONFIG);
        let config_link = config.with_file_name("linked-config");
        let _ = std::fs::remove_file(&config_link);
        std::os::unix::fs::symlink(&config, &config_link).unwrap();
        assert_eq!(load(&config_link, None).unwrap().server, "https://10.0.0.1:6443");
    }
}
