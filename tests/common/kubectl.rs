//! The real kubectl (1.37, the test bed's) against the test API server: its config, a run of
//! it, and the port-forward check the kubelet-server and tunnel tests share.

use std::path::{Path, PathBuf};
use std::time::Duration;

/// A kubeconfig in `dir` for the API server at `api` (its CA `ca`), as user `admin` with the
/// token `tok-kubectl` (the caller registers it with the server).
pub fn config(dir: &Path, api: std::net::SocketAddr, ca: &Path) -> PathBuf {
    let path = dir.join("kubectl.conf");
    let text = format!(
        "apiVersion: v1\nkind: Config\ncurrent-context: t\nclusters:\n- name: t\n  cluster:\n    server: https://{api}\n    certificate-authority: {}\nusers:\n- name: admin\n  user:\n    token: tok-kubectl\ncontexts:\n- name: t\n  context: {{cluster: t, user: admin, namespace: default}}\n",
        ca.display()
    );
    std::fs::write(&path, text).unwrap();
    path
}

/// kubectl's exit status, stdout and stderr (given `stdin`); killed after two minutes.
pub fn run(config: &Path, args: &[&str], stdin: &[u8]) -> (i32, Vec<u8>, String) {
    let mut all = vec![format!("--kubeconfig={}", config.display()).into(), "--request-timeout=60s".into()];
    all.extend(args.iter().map(|a| a.into()));
    super::run_fed(super::testbed().var("ATOLL_TB_KUBECTL").as_ref(), &all, stdin)
}

/// `kubectl port-forward pod/files-tb :8080` (`pods::FILES`): its 100 MiB `/blob` fetched
/// through the forwarded port, every byte (the same SHA-256 as in the pod).
pub fn port_forward_blob(config: &Path) {
    let (_, sum, _) = super::eventually(Duration::from_secs(90), "the 100 MiB file in the pod", || {
        let r = run(config, &["exec", "files-tb", "--", "sha256sum", "/www/blob"], b"");
        (r.0 == 0).then_some(r)
    });
    let expected = String::from_utf8_lossy(&sum).split(' ').next().unwrap().to_string();
    let mut forward = std::process::Command::new(super::testbed().var("ATOLL_TB_KUBECTL"))
        .arg(format!("--kubeconfig={}", config.display()))
        .args(["port-forward", "pod/files-tb", ":8080"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut first = String::new();
    // Kept open: kubectl writes a line per connection there, and a closed pipe would end it.
    let mut said = std::io::BufReader::new(forward.stdout.take().unwrap());
    std::io::BufRead::read_line(&mut said, &mut first).unwrap();
    let body = super::pods::http_get(super::pods::forwarded_port(&first), "/blob");
    let _ = forward.kill();
    let _ = forward.wait();
    drop(said);
    assert_eq!(body.len(), 100 << 20);
    assert_eq!(super::pods::sha256_hex(&body), expected, "the same bytes");
}
