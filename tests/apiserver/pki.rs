//! The test API server's certificates, made with openssl: its CA, its serving certificate
//! for 127.0.0.1, client certificates for nodes and users, and kubeconfigs that use them.

use super::*;

/// Certificates for one test: a CA, the server's certificate for 127.0.0.1, and a client
/// certificate for `system:node:<node>` (organisation system:nodes). Made with openssl.
pub struct Pki {
    pub dir: PathBuf,
    pub ca: PathBuf,
    pub client_cert: PathBuf,
    pub client_key: PathBuf,
}

fn openssl(dir: &Path, args: &[&str]) {
    let out = std::process::Command::new("openssl").args(args).current_dir(dir).output().expect("openssl runs");
    assert!(out.status.success(), "openssl {args:?}: {}", String::from_utf8_lossy(&out.stderr));
}

impl Pki {
    pub fn new(dir: &Path, node: &str) -> Pki {
        std::fs::create_dir_all(dir).unwrap();
        let ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"];
        openssl(
            dir,
            &[
                &["req", "-x509"][..],
                &ec,
                &["-keyout", "ca.key", "-out", "ca.crt", "-days", "2", "-subj", "/CN=test-apiserver-ca"],
            ]
            .concat(),
        );
        // X.509 v3 (extensions) for both: webpki takes nothing older.
        std::fs::write(
            dir.join("server.ext"),
            "subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\n",
        )
        .unwrap();
        std::fs::write(dir.join("client.ext"), "extendedKeyUsage=clientAuth\nkeyUsage=digitalSignature\n").unwrap();
        for (name, subj, ext) in [
            ("server", "/CN=kube-apiserver".to_string(), "server.ext"),
            ("client", format!("/O=system:nodes/CN=system:node:{node}"), "client.ext"),
            ("kubelet-client", "/O=system:masters/CN=kube-apiserver-kubelet-client".to_string(), "client.ext"),
        ] {
            openssl(
                dir,
                &[
                    &["req"][..],
                    &ec,
                    &["-keyout", &format!("{name}.key"), "-out", &format!("{name}.csr"), "-subj", &subj],
                ]
                .concat(),
            );
            let mut args = vec![
                "x509",
                "-req",
                "-in",
                &format!("{name}.csr"),
                "-CA",
                "ca.crt",
                "-CAkey",
                "ca.key",
                "-CAcreateserial",
                "-out",
                &format!("{name}.crt"),
                "-days",
                "2",
            ]
            .into_iter()
            .map(String::from)
            .collect::<Vec<_>>();
            args.extend(["-extfile".to_string(), ext.to_string()]);
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            openssl(dir, &args);
        }
        Pki {
            dir: dir.to_path_buf(),
            ca: dir.join("ca.crt"),
            client_cert: dir.join("client.crt"),
            client_key: dir.join("client.key"),
        }
    }

    /// A kubeconfig with the client certificate (files), or with `token` instead.
    /// A kubeconfig at `out` for a node with the bearer token in `token` (a fleet's nodes,
    /// one identity each).
    pub fn kubeconfig_for(&self, addr: SocketAddr, token: &Path, out: &Path) {
        std::fs::copy(self.kubeconfig(addr, Some(token)), out).unwrap();
    }

    pub fn kubeconfig(&self, addr: SocketAddr, token: Option<&Path>) -> PathBuf {
        let user = match token {
            Some(t) => format!("    tokenFile: {}\n", t.display()),
            None => format!(
                "    client-certificate: {}\n    client-key: {}\n",
                self.client_cert.display(),
                self.client_key.display()
            ),
        };
        let text = format!(
            "apiVersion: v1\nkind: Config\ncurrent-context: test\nclusters:\n- name: test\n  cluster:\n    server: https://{addr}\n    certificate-authority: {}\nusers:\n- name: node\n  user:\n{user}contexts:\n- name: test\n  context:\n    cluster: test\n    user: node\n",
            self.ca.display()
        );
        let path = self.dir.join(if token.is_some() { "kubeconfig-token" } else { "kubeconfig" });
        std::fs::write(&path, text).unwrap();
        path
    }
}
