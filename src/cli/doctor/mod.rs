//! `atoll doctor`: preflight checks of this machine for what atoll needs, each with a line
//! saying how to fix what is wrong. Exit code 1 when any check fails (warnings do not fail).

use crate::config::Settings;

pub mod certs;
mod check;

use check::{bad, ok};
pub use check::{Check, Level};
use std::path::Path;
use std::time::{Duration, SystemTime};

/// The runtime: reachable, its version, and its own readiness conditions.
pub fn runtime(s: &Settings) -> Vec<Check> {
    let cri = crate::cri::Cri::new(&s.runtime.endpoint).with_request_timeout(Duration::from_secs(5));
    smol::block_on(async {
        match cri.version().await {
            Err(e) => vec![bad(
                Level::Fail,
                "runtime",
                format!("cannot reach the container runtime at {}: {e}", s.runtime.endpoint),
                "start it (systemctl start containerd) or point --container-runtime-endpoint / containerRuntimeEndpoint at its socket",
            )],
            Ok(v) => {
                let mut checks = vec![ok(
                    "runtime",
                    format!("{} {} (CRI {}) at {}", v.runtime_name, v.runtime_version, v.runtime_api_version, s.runtime.endpoint),
                )];
                if let Ok(st) = cri.status(false).await {
                    for c in st.status.map(|s| s.conditions).unwrap_or_default() {
                        if c.status {
                            checks.push(ok("runtime", format!("{} is true", c.r#type)));
                        } else {
                            let fix = if c.r#type == "NetworkReady" {
                                "install a CNI network config (e.g. /etc/cni/net.d/10-bridge.conflist) and the CNI plugins; hostNetwork pods run without one"
                            } else {
                                "see the runtime's own log (journalctl -u containerd)"
                            };
                            checks.push(bad(
                                if c.r#type == "NetworkReady" { Level::Warn } else { Level::Fail },
                                "runtime",
                                format!("{} is false: {} {}", c.r#type, c.reason, c.message),
                                fix,
                            ));
                        }
                    }
                }
                checks
            }
        }
    })
}

/// cgroup v1 or v2, and the controllers pods need (memory is off by default on some ARM boards).
pub fn cgroups(root: &Path) -> Vec<Check> {
    let mut checks = vec![];
    let v2 = root.join("cgroup.controllers");
    let (version, controllers): (&str, Vec<String>) = if v2.exists() {
        let text = std::fs::read_to_string(&v2).unwrap_or_default();
        ("v2", text.split_whitespace().map(String::from).collect())
    } else if root.join("memory").exists() || root.join("cpu").exists() || root.join("unified").exists() {
        let found = ["cpu", "cpuacct", "memory", "pids"]
            .iter()
            .filter(|c| root.join(c).exists())
            .map(|c| c.to_string())
            .collect();
        ("v1", found)
    } else {
        return vec![bad(
            Level::Fail,
            "cgroups",
            format!("no cgroup file system at {}", root.display()),
            "mount cgroup2 on /sys/fs/cgroup (systemd does this at boot)",
        )];
    };
    checks.push(ok("cgroups", format!("{version} with {}", controllers.join(" "))));
    for need in ["cpu", "memory", "pids"] {
        if !controllers.iter().any(|c| c == need) {
            let fix = if need == "memory" {
                "enable it on the kernel command line: cgroup_enable=memory cgroup_memory=1 (Raspberry Pi: /boot/firmware/cmdline.txt), then reboot"
            } else {
                "enable the controller in the kernel configuration or on the kernel command line"
            };
            checks.push(bad(
                Level::Fail,
                "cgroups",
                format!("the {need} controller is missing: limits and metrics need it"),
                fix,
            ));
        }
    }
    checks
}

/// A CNI configuration and plugins (needed only by pods off the host network).
pub fn cni(conf_dirs: &[&Path], bin_dirs: &[&Path]) -> Vec<Check> {
    let conf = conf_dirs.iter().find_map(|d| {
        let mut names: Vec<String> = std::fs::read_dir(d)
            .ok()?
            .flatten()
            .filter_map(|e| e.file_name().to_str().map(String::from))
            .filter(|n| n.ends_with(".conf") || n.ends_with(".conflist") || n.ends_with(".json"))
            .collect();
        names.sort();
        names.first().map(|n| d.join(n))
    });
    let bin = bin_dirs.iter().find(|d| d.join("bridge").exists() || d.join("loopback").exists());
    match (conf, bin) {
        (Some(c), Some(b)) => vec![ok("cni", format!("config {} and plugins in {}", c.display(), b.display()))],
        (None, _) => vec![bad(
            Level::Warn,
            "cni",
            format!("no CNI network config in {}", conf_dirs.iter().map(|d| d.display().to_string()).collect::<Vec<_>>().join(" or ")),
            "pods need hostNetwork: true, or install a CNI config (apt install containernetworking-plugins, then a conflist in /etc/cni/net.d)",
        )],
        (Some(c), None) => vec![bad(
            Level::Warn,
            "cni",
            format!("config {} but no CNI plugins", c.display()),
            "install the plugins (apt install containernetworking-plugins) where the runtime looks (containerd: bin_dir)",
        )],
    }
}

/// The manifest directory: present, a directory or file, not writable by others.
pub fn manifests(path: Option<&Path>) -> Vec<Check> {
    use std::os::unix::fs::PermissionsExt;
    let Some(path) = path else {
        return vec![ok("manifests", "no manifest directory configured (staticPodPath / --pod-manifest-path)")];
    };
    match std::fs::metadata(path) {
        Err(e) => vec![bad(
            Level::Warn,
            "manifests",
            format!("{}: {e}", path.display()),
            format!("create it: mkdir -p {} (atoll waits for it and starts its pods when it appears)", path.display()),
        )],
        Ok(m) if m.permissions().mode() & 0o002 != 0 => vec![bad(
            Level::Fail,
            "manifests",
            format!("{} is writable by every user: anyone could run privileged pods", path.display()),
            format!("chmod o-w {}", path.display()),
        )],
        Ok(_) => vec![ok("manifests", format!("{} is readable and not writable by others", path.display()))],
    }
}

/// A directory atoll writes to: present or creatable, and writable.
pub fn writable(name: &'static str, dir: &Path) -> Vec<Check> {
    let mut probe_dir = dir.to_path_buf();
    while !probe_dir.exists() {
        match probe_dir.parent() {
            Some(p) => probe_dir = p.to_path_buf(),
            None => break,
        }
    }
    let test = probe_dir.join(format!(".atoll-doctor-{}", std::process::id()));
    match std::fs::write(&test, b"") {
        Ok(()) => {
            let _ = std::fs::remove_file(&test);
            vec![ok(name, format!("{} is writable", dir.display()))]
        }
        Err(e) => vec![bad(
            Level::Fail,
            name,
            format!("cannot write in {}: {e}", probe_dir.display()),
            "run atoll as root, or point it at a writable directory (--root-dir, podLogsDir)",
        )],
    }
}

/// Free space where atoll keeps state and logs.
pub fn disk(name: &'static str, dir: &Path) -> Vec<Check> {
    let mut at = dir.to_path_buf();
    while !at.exists() {
        match at.parent() {
            Some(p) => at = p.to_path_buf(),
            None => break,
        }
    }
    match rustix::fs::statvfs(&at) {
        Err(e) => {
            vec![bad(Level::Warn, name, format!("cannot read free space of {}: {e}", at.display()), "check the mount")]
        }
        Ok(st) => {
            let free = st.f_bavail.saturating_mul(st.f_frsize);
            let total = st.f_blocks.saturating_mul(st.f_frsize).max(1);
            let pct = free as f64 * 100.0 / total as f64;
            let shown = format!("{} MiB free ({pct:.0}%) on {}", free >> 20, at.display());
            if free < 100 << 20 || pct < 5.0 {
                vec![bad(
                    Level::Fail,
                    name,
                    shown,
                    "free space: old images (crictl rmi --prune), logs, or lower containerLogMaxSize",
                )]
            } else if free < 1 << 30 || pct < 10.0 {
                vec![bad(Level::Warn, name, shown, "space is getting low: containerd's image store and pod logs grow")]
            } else {
                vec![ok(name, shown)]
            }
        }
    }
}

/// The clock: a box that booted without network may think it is 1970, which breaks TLS.
pub fn clock(now: SystemTime) -> Vec<Check> {
    // Built in 2026: any earlier date is certainly wrong.
    let floor = SystemTime::UNIX_EPOCH + Duration::from_secs(1_767_225_600); // 2026-01-01
    if now < floor {
        vec![bad(
            Level::Fail,
            "clock",
            format!("the clock says {}", crate::rfc3339::format_seconds(now)),
            "set the time (timedatectl set-ntp true, or an RTC); TLS to manifest URLs and registries fails with a wrong clock",
        )]
    } else {
        vec![ok("clock", crate::rfc3339::format_seconds(now))]
    }
}

/// The node as admission sees it: its labels and allocatable resources (what pods' node
/// selectors match and their requests fit in), and AppArmor.
pub fn node(f: &crate::node::Facts) -> Check {
    let labels: Vec<String> = f.labels.iter().map(|(k, v)| format!("{k}={v}")).collect();
    let a = &f.allocatable;
    let armor = if f.apparmor { "enforced" } else { "not enabled (pods asking for a profile are rejected)" };
    ok(
        "node",
        format!(
            "{}: allocatable cpu {}m, memory {} MiB, ephemeral-storage {} MiB, pods {}; AppArmor {armor}; labels {}",
            f.name,
            a.cpu_millis,
            a.memory_bytes >> 20,
            a.ephemeral_bytes >> 20,
            a.pods,
            labels.join(", ")
        ),
    )
}

/// `atoll doctor`: every check with the agent's settings, printed; whether none failed.
pub fn run(flags: &super::Flags) -> Result<bool, super::error::Error> {
    let s = Settings::load(flags)?;
    let checks = all(&s);
    print!("{}", report(&checks));
    Ok(!checks.iter().any(|c| c.level == Level::Fail))
}

pub fn all(s: &Settings) -> Vec<Check> {
    let mut checks = runtime(s);
    checks.extend(cgroups(Path::new("/sys/fs/cgroup")));
    // The runtime's own NetworkReady says more than the files (it may read another directory).
    let network_ready = checks.iter().any(|c| c.level == Level::Ok && c.detail == "NetworkReady is true");
    if !network_ready {
        checks.extend(cni(
            &[Path::new("/etc/cni/net.d")],
            &[Path::new("/opt/cni/bin"), Path::new("/usr/lib/cni"), Path::new("/usr/libexec/cni")],
        ));
    }
    checks.extend(manifests(s.sources.manifest_path.as_deref()));
    checks.extend(secrets(s));
    checks.extend(writable("state", &s.node.root_dir));
    if let Some(problem) = crate::root_dir::problem(&s.node.root_dir) {
        let fix = format!("restart atoll, or chown root: {0}; chmod 700 {0}", s.node.root_dir.display());
        checks.push(bad(Level::Warn, "state", problem, fix));
    }
    checks.extend(writable("logs", &s.node.pod_logs_dir));
    checks.extend(disk("disk", &s.node.root_dir));
    checks.extend(disk("disk", &s.node.pod_logs_dir));
    checks.extend(clock(SystemTime::now()));
    checks.push(node(&crate::agent::node_facts(s)));
    if let Some(k) = &s.mirror.kubeconfig {
        checks.push(api_server(k, &s.node.name));
    }
    checks.extend(certs::certificates(s, SystemTime::now()));
    checks.extend(kubelet_server(s));
    checks.extend(tunnel(s));
    checks
}

/// The konnectivity tunnel: its files usable and the server's agent port taking the node's TLS.
/// The call itself is left to the running agent (a second link under the node's name would
/// draw dials away from it); `atoll_tunnel_servers` says whether it holds.
pub fn tunnel(s: &Settings) -> Vec<Check> {
    let name = "konnectivity";
    let Some(t) = &s.mirror.tunnel else { return Vec::new() };
    if s.listeners.kubelet.is_none() || s.mirror.kubeconfig.is_none() {
        let fix = "give atoll a kubeconfig and a kubelet port, or remove the konnectivity section";
        return vec![bad(Level::Warn, name, "configured, but the kubelet server it leads to does not run", fix)];
    }
    use crate::tunnel::link;
    let config = match link::tls_config(t).and_then(|c| link::token(t).map(|_| c)) {
        Ok(c) => c,
        Err(e) => {
            let fix = "give readable PEM files (the CA; the certificate with its key) and token";
            return vec![bad(Level::Fail, name, e.into_message(), fix)];
        }
    };
    let reached = smol::block_on(crate::deadline::with_deadline(Duration::from_secs(10), link::secure(t, config)));
    vec![match reached {
        Some(Ok(_)) => ok(name, format!("{}: the agent port takes the node's TLS", t.authority())),
        Some(Err(e)) => bad(
            Level::Warn,
            name,
            format!("{} cannot be reached: {}", t.authority(), e.into_message()),
            "kubectl logs and exec need it; check the address, the CA and the agent certificate",
        ),
        None => bad(Level::Warn, name, format!("{}: no answer within 10s", t.authority()), "check the network path"),
    }]
}

/// kubelet's HTTPS server: whether it will serve, its certificate and client CA usable, and
/// the address the API server will dial it at.
pub fn kubelet_server(s: &Settings) -> Vec<Check> {
    let name = "kubelet server";
    let Some(ks) = &s.listeners.kubelet else { return vec![ok(name, "off (port 0)")] };
    if s.mirror.kubeconfig.is_none() {
        return vec![ok(name, "not served: atoll serves it only when it mirrors to an API server (a kubeconfig)")];
    }
    let mut out = Vec::new();
    // A throwaway certificate stands in for the self-signed one, so the client CA is checked too.
    let stand_in = match &ks.tls {
        Some(_) => None,
        None => crate::kubelet_server::cert::make(std::slice::from_ref(&s.node.name), SystemTime::now()).ok(),
    };
    out.push(match crate::kubelet_server::serve::tls_config(ks, stand_in, &Default::default()) {
        Ok(_) => ok(
            name,
            format!(
                "https://{} with {}",
                ks.address,
                match &ks.tls {
                    Some((cert, _)) => cert.display().to_string(),
                    None => format!("a self-signed certificate in {}", s.node.root_dir.join("pki").display()),
                }
            ),
        ),
        Err(e) => bad(
            Level::Fail,
            name,
            e.to_string(),
            "give readable PEM files (the certificate with its key; the client CA)",
        ),
    });
    let ip = ks.address.ip();
    if let Some(node_ip) = s.node.ip.as_deref().filter(|n| !ip.is_unspecified() && ip.to_string() != *n) {
        out.push(bad(
            Level::Warn,
            name,
            format!("it listens on {ip} but the node publishes {node_ip}, where the API server will dial it"),
            "set address to the node IP (or 0.0.0.0), or --node-ip to the address it listens on",
        ));
    }
    out
}

/// Where Secrets live: `secretsDir` root's alone, and no Secret manifest others may read.
pub fn secrets(s: &Settings) -> Vec<Check> {
    let mut out = Vec::new();
    if let Some(dir) = &s.sources.secrets_dir {
        out.push(match crate::source::scan::private_dir_problem(dir) {
            None => ok("secrets", format!("{} is root's alone (0700)", dir.display())),
            Some(problem) => {
                bad(Level::Fail, "secrets", problem, format!("chown root: {0}; chmod 700 {0}", dir.display()))
            }
        });
    }
    let mut dirs: Vec<&Path> = s.sources.manifest_path.iter().map(|p| p.as_path()).collect();
    dirs.extend(s.sources.secrets_dir.as_deref());
    for dir in dirs {
        // Encrypted files may be readable: they are not opened here (no key, no trust).
        let intake = crate::source::payload::Intake { node: s.node.name.clone(), ..Default::default() };
        let scan = crate::source::scan::scan(dir, &intake);
        for (file, good) in &scan.good {
            use std::os::unix::fs::PermissionsExt;
            let secret = good.opened.manifests.objects.iter().any(|o| o.kind == crate::objects::ObjectKind::Secret);
            let mode = std::fs::metadata(file).map(|m| m.permissions().mode() & 0o777).unwrap_or(0);
            if secret && mode & 0o077 != 0 {
                out.push(bad(
                    Level::Warn,
                    "secrets",
                    format!("{} holds a Secret and has mode {mode:04o}: others on the box can read it", file.display()),
                    format!("chmod 600 {}, or keep Secrets in secretsDir", file.display()),
                ));
            }
        }
    }
    out
}

/// The API server of `--kubeconfig`: the file usable, the server answering, the node known.
/// Unreachable is a warning only: pods run without it.
pub fn api_server(kubeconfig: &Path, node: &str) -> Check {
    let name = "api server";
    let client = match crate::mirror::apiserver::Client::from_kubeconfig(kubeconfig) {
        Ok(c) => c,
        Err(e) => {
            return bad(
                Level::Fail,
                name,
                e.to_string(),
                "fix the kubeconfig (atoll reads it again every minute while running)",
            )
        }
    };
    match client.call("GET", &format!("/api/v1/nodes/{node}"), "application/json", None) {
        Err(e) => bad(
            Level::Warn,
            name,
            format!("{} cannot be reached: {e}", client.server()),
            "pods run regardless; check the network path and the server URL in the kubeconfig",
        ),
        Ok(r) if r.status == 200 => ok(name, format!("{}: node {node} registered", client.server())),
        Ok(r) if r.status == 404 => ok(name, format!("{}: reachable; node {node} not registered yet", client.server())),
        Ok(r) if r.status == 401 || r.status == 403 => bad(
            Level::Fail,
            name,
            format!("{} refuses atoll's credentials: {}", client.server(), r.describe()),
            format!("give the kubeconfig a certificate or token of user system:node:{node} (group system:nodes)"),
        ),
        Ok(r) => bad(Level::Warn, name, format!("{}: {}", client.server(), r.describe()), "see the API server's logs"),
    }
}

/// Wraps at 80 columns (a serial console), continuation lines indented by `indent`.
fn wrap(text: &str, indent: usize) -> String {
    let mut out = String::new();
    let body = text.trim_start_matches(' ');
    let mut line = " ".repeat(text.len() - body.len());
    for word in body.split(' ') {
        if !line.trim().is_empty() && line.len() + 1 + word.len() > 80 {
            out.push_str(line.trim_end());
            out.push('\n');
            line = " ".repeat(indent);
        } else if !line.trim().is_empty() {
            line.push(' ');
        }
        line.push_str(word);
    }
    out.push_str(line.trim_end());
    out.push('\n');
    out
}

/// The report, a line per check and a `fix:` line under each problem.
pub fn report(checks: &[Check]) -> String {
    let mut out = String::new();
    for c in checks {
        let tag = match c.level {
            Level::Ok => "ok  ",
            Level::Warn => "WARN",
            Level::Fail => "FAIL",
        };
        out.push_str(&wrap(&format!("{tag} {:<10} {}", c.name, c.detail), 16));
        if let Some(f) = &c.fix {
            out.push_str(&wrap(&format!("{:<16}fix: {f}", ""), 21));
        }
    }
    let fails = checks.iter().filter(|c| c.level == Level::Fail).count();
    let warns = checks.iter().filter(|c| c.level == Level::Warn).count();
    out.push_str(&format!("{fails} failed, {warns} warning(s), {} ok\n", checks.len() - fails - warns));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_kubelet_server_check_reads_its_files_and_its_address() {
        let d = dir("kubelet-server");
        let args = ["run", "--hostname-override=edge-1", "--node-ip=192.0.2.10"].map(String::from).to_vec();
        let crate::cli::Command::Run(flags) = crate::cli::parse(args).unwrap() else { unreachable!() };
        let mut s = Settings::load(&flags).unwrap();
        assert!(kubelet_server(&s)[0].detail.starts_with("not served"), "no kubeconfig");
        s.mirror.kubeconfig = Some(d.join("kubeconfig"));
        let mut ks = crate::kubelet_server::ServerSettings {
            address: "127.0.0.1:10250".parse().unwrap(),
            tls: None,
            client_ca_file: Some(d.join("missing-ca.crt")),
            auth: crate::kubelet_server::auth::AuthSettings::kubelet_defaults("edge-1"),
            debugging_handlers: true,
            idle_timeout: Duration::from_secs(60),
        };
        s.listeners.kubelet = Some(ks.clone());
        let checks = kubelet_server(&s);
        assert_eq!(checks[0].level, Level::Fail, "{checks:?}");
        assert!(checks[0].detail.contains("clientCAFile"), "{checks:?}");
        assert_eq!(checks[1].level, Level::Warn);
        assert!(checks[1].detail.contains("192.0.2.10"), "{checks:?}");
        ks.client_ca_file = None;
        ks.address = "0.0.0.0:10250".parse().unwrap();
        s.listeners.kubelet = Some(ks);
        let checks = kubelet_server(&s);
        assert_eq!(checks.len(), 1);
        assert_eq!(checks[0].level, Level::Ok, "{checks:?}");
        s.listeners.kubelet = None;
        assert_eq!(kubelet_server(&s)[0].detail, "off (port 0)");
        let _ = std::fs::remove_dir_all(&d);
    }

    fn dir(name: &str) -> crate::testdir::TestDir {
        crate::testdir::TestDir::new(&format!("doctor-{name}"))
    }

    #[test]
    fn a_broken_or_unreachable_api_server_is_named() {
        let d = dir("kubeconfig");
        let missing = api_server(&d.join("none"), "n");
        assert_eq!(missing.level, Level::Fail);
        assert!(missing.detail.contains("none"), "{missing:?}");
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let k = d.join("kubeconfig");
        std::fs::write(
            &k,
            format!("apiVersion: v1\nkind: Config\ncurrent-context: c\nclusters:\n- name: x\n  cluster: {{server: \"https://127.0.0.1:{port}\", insecure-skip-tls-verify: true}}\nusers:\n- name: u\n  user: {{token: t}}\ncontexts:\n- name: c\n  context: {{cluster: x, user: u}}\n"),
        )
        .unwrap();
        let down = api_server(&k, "n");
        assert_eq!(down.level, Level::Warn, "{down:?}");
        assert!(down.detail.contains("cannot be reached"), "{down:?}");
    }

    #[test]
    fn cgroup_controllers_are_checked_for_v1_and_v2() {
        let v2 = dir("v2");
        std::fs::write(v2.join("cgroup.controllers"), "cpuset cpu io pids\n").unwrap();
        let c = cgroups(&v2);
        assert_eq!(c[0].detail, "v2 with cpuset cpu io pids");
        let mem = c.iter().find(|c| c.level == Level::Fail).expect("memory is missing");
        assert!(mem.detail.contains("memory") && mem.fix.as_ref().unwrap().contains("cgroup_enable=memory"));
        let v1 = dir("v1");
        for d in ["cpu", "memory", "pids"] {
            std::fs::create_dir_all(v1.join(d)).unwrap();
        }
        assert!(cgroups(&v1).iter().all(|c| c.level == Level::Ok));
        assert_eq!(cgroups(&dir("none"))[0].level, Level::Fail);
    }

    #[test]
    fn a_world_writable_manifest_dir_fails() {
        use std::os::unix::fs::PermissionsExt;
        let d = dir("manifests");
        assert_eq!(manifests(Some(&d))[0].level, Level::Ok);
        std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o777)).unwrap();
        let c = &manifests(Some(&d))[0];
        assert_eq!(c.level, Level::Fail);
        assert!(c.fix.as_ref().unwrap().starts_with("chmod o-w"));
        assert_eq!(manifests(Some(&d.join("absent")))[0].level, Level::Warn);
    }

    #[test]
    fn cni_and_clock_and_report() {
        let conf = dir("cni-conf");
        let bin = dir("cni-bin");
        assert_eq!(cni(&[&conf], &[&bin])[0].level, Level::Warn);
        std::fs::write(conf.join("10-net.conflist"), "{}").unwrap();
        std::fs::write(bin.join("bridge"), "").unwrap();
        assert_eq!(cni(&[&conf], &[&bin])[0].level, Level::Ok);
        let c = clock(SystemTime::UNIX_EPOCH);
        assert_eq!(c[0].level, Level::Fail);
        assert!(c[0].detail.contains("1970"));
        let text = report(&c);
        assert!(
            text.starts_with("FAIL clock      the clock says 1970-01-01T00:00:00Z\n                fix: set"),
            "{text}"
        );
        assert!(text.ends_with("1 failed, 0 warning(s), 0 ok\n"), "{text}");
        assert!(text.lines().all(|l| l.len() <= 80), "{text}");
    }
}
