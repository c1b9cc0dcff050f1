//! The settings, from flags and files, as each part gets them.

use super::*;
use crate::cli::{parse, Command};
use std::time::Duration;

fn flags(args: &[&str]) -> Flags {
    let mut all = vec!["run".to_string()];
    all.extend(args.iter().map(|s| s.to_string()));
    match parse(all).unwrap() {
        Command::Run(f) => f,
        _ => unreachable!(),
    }
}

fn config_file(name: &str, text: &str) -> crate::testdir::TestFile {
    crate::testdir::TestFile::new("config-test", name, text)
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
syncFrequency: 90s
imageGCHighThresholdPercent: 90
imageMaximumGCAge: 168h
registerWithTaints:
- key: site
  value: north
  effect: NoSchedule
cgroupDriver: systemd
authentication:
  anonymous:
    enabled: false
";

#[test]
fn an_existing_kubelet_config_file_drives_the_sources() {
    let path = config_file("kubelet.yaml", KUBELET);
    let s = Settings::load(&flags(&[&format!("--config={path}"), "--hostname-override=Edge-1"])).unwrap();
    assert_eq!(s.sources.manifest_path.as_deref(), Some(std::path::Path::new("/etc/kubernetes/manifests")));
    assert_eq!(s.sources.url.url.as_deref(), Some("http://127.0.0.1:8080/pods"));
    assert_eq!(
        s.sources.url.headers,
        vec![("Authorization".into(), "Bearer t".into()), ("X-A".into(), "1".into()), ("X-A".into(), "2".into())]
    );
    assert_eq!(s.sources.file_check_frequency, Duration::from_secs(5));
    assert_eq!(s.sources.url.check_frequency, DEFAULT_CHECK_FREQUENCY);
    assert_eq!(s.runtime.endpoint.to_string(), "unix:///run/crio/crio.sock");
    assert_eq!(s.node.name, "edge-1");
    let notes = s.config_notes.join("\n");
    assert!(!notes.contains("syncFrequency"), "{notes}");
    assert_eq!(s.runtime.engine.resync, Some(Duration::from_secs(90)));
    assert!(!notes.contains("maxPods"), "{notes}");
    assert_eq!(s.mirror.max_pods, 20);
    assert_eq!(s.mirror.taints, vec![serde_json::json!({"key": "site", "value": "north", "effect": "NoSchedule"})]);
    assert_eq!(s.mirror.lease_duration_seconds, 40);
    assert!(!notes.contains("imageGC") && !notes.contains("imageMaximumGCAge"), "{notes}");
    let gc = crate::images::gc::Policy {
        high_percent: 90,
        low_percent: 80,
        min_age: Duration::from_secs(120),
        max_age: Some(Duration::from_secs(168 * 3600)),
    };
    assert_eq!(s.images.gc, gc);
    for (bad, field) in [
        ("imageGCHighThresholdPercent: 101", "imageGCHighThresholdPercent: 101 must be 0 to 100"),
        ("imageGCLowThresholdPercent: 85", "imageGCLowThresholdPercent: 85 must be less than"),
        ("imageMinimumGCAge: soon", "imageMinimumGCAge"),
    ] {
        let path =
            config_file("gc.yaml", &format!("{}{bad}\n", KUBELET.replace("imageGCHighThresholdPercent: 90\n", "")));
        let e = Settings::load(&flags(&[&format!("--config={path}")])).err().map(|e| e.to_string()).unwrap_or_default();
        assert!(e.contains(field), "{bad}: {e}");
    }
    assert_eq!(s.mirror.status_report_frequency, Duration::from_secs(300));
    assert_eq!(s.runtime.engine.log_rotation, crate::runtime::logs::Rotation { max_size: 1 << 20, max_files: 3 });
    assert!(!notes.contains("podLogsDir"), "{notes}");
    assert_eq!(s.node.pod_logs_dir, std::path::Path::new("/var/log/pods"));
    assert!(notes.contains("cgroupDriver: not supported by atoll; ignored"), "{notes}");
    assert!(!notes.contains("authentication"), "{notes}");
    let server = s.listeners.kubelet.expect("kubelet's server, with kubelet's defaults");
    assert_eq!(server.address, "0.0.0.0:10250".parse().unwrap());
    assert_eq!(server.auth, crate::kubelet_server::auth::AuthSettings::kubelet_defaults("edge-1"));
    assert!(server.debugging_handlers && server.tls.is_none() && server.client_ca_file.is_none());
    assert_eq!(server.idle_timeout, Duration::from_secs(4 * 3600));
}

#[test]
fn kubelets_server_settings_are_read_with_its_names_and_checked() {
    use crate::kubelet_server::auth::Mode;
    let load = |extra: &str| {
        let path = config_file("server.yaml", &format!("{KUBELET}{extra}"));
        Settings::load(&flags(&[&format!("--config={path}")]))
    };
    let s = load(
        "address: 127.0.0.1\nport: 11250\ntlsCertFile: /etc/atoll/tls.crt\ntlsPrivateKeyFile: /etc/atoll/tls.key
authorization:\n  mode: Webhook\n  webhook: {cacheAuthorizedTTL: 1m, cacheUnauthorizedTTL: 5s}
enableDebuggingHandlers: false\nstreamingConnectionIdleTimeout: 5m\n"
            .replace("authentication:\n  anonymous:\n    enabled: false\n", "")
            .as_str(),
    )
    .unwrap();
    let k = s.listeners.kubelet.unwrap();
    assert_eq!(k.address, "127.0.0.1:11250".parse().unwrap());
    assert_eq!(k.tls, Some(("/etc/atoll/tls.crt".into(), "/etc/atoll/tls.key".into())));
    assert_eq!(k.auth.mode, Mode::Webhook { allowed_ttl: Duration::from_secs(60), denied_ttl: Duration::from_secs(5) });
    assert!(!k.debugging_handlers);
    assert_eq!(k.idle_timeout, Duration::from_secs(300));
    let path = config_file(
        "authn.yaml",
        &KUBELET.replace(
            "authentication:\n  anonymous:\n    enabled: false\n",
            "authentication:\n  anonymous: {enabled: true}\n  webhook: {enabled: false, cacheTTL: 10s}\n  x509: {clientCAFile: /etc/kubernetes/pki/ca.crt}\nauthorization: {mode: AlwaysAllow}\n",
        ),
    );
    let k = Settings::load(&flags(&[&format!("--config={path}")])).unwrap().listeners.kubelet.unwrap();
    assert!(k.auth.anonymous && !k.auth.token_webhook && k.auth.mode == Mode::AlwaysAllow);
    assert_eq!(k.auth.token_ttl, Duration::from_secs(10));
    assert_eq!(k.client_ca_file.as_deref(), Some(std::path::Path::new("/etc/kubernetes/pki/ca.crt")));
    assert_eq!(load("port: 0\n").unwrap().listeners.kubelet, None, "port 0: no server");
    for (bad, field) in [
        ("port: 70000\n", "config field port: 70000"),
        ("address: somewhere\n", "config field address"),
        ("tlsCertFile: /a.crt\n", "tlsCertFile and tlsPrivateKeyFile"),
        ("authorization: {mode: RBAC}\n", "authorization.mode: \"RBAC\""),
        ("authorization: {webhook: {cacheAuthorizedTTL: soon}}\n", "authorization.webhook.cacheAuthorizedTTL"),
    ] {
        let e = load(bad).err().map(|e| e.to_string()).unwrap_or_default();
        assert!(e.contains(field), "{bad}: {e}");
    }
}

#[test]
fn node_labels_are_checked_and_named() {
    let s = Settings::load(&flags(&["--node-labels=site=north, example.com/tier=edge,empty="])).unwrap();
    assert_eq!(s.mirror.node_labels["site"], "north");
    assert_eq!(s.mirror.node_labels["example.com/tier"], "edge");
    assert_eq!(s.mirror.node_labels["empty"], "");
    for bad in ["site", "-x=1", "a/b/c=1", "k=-v", "Bad_Prefix./k=v"] {
        let e = Settings::load(&flags(&[&format!("--node-labels={bad}")])).unwrap_err().to_string();
        assert!(e.starts_with("flag --node-labels: "), "{bad}: {e}");
    }
    assert_eq!(Settings::load(&flags(&[])).unwrap().mirror.kubeconfig, None);
    let s = Settings::load(&flags(&["--kubeconfig=/etc/atoll/kubeconfig"])).unwrap();
    assert_eq!(s.mirror.kubeconfig.as_deref(), Some(std::path::Path::new("/etc/atoll/kubeconfig")));
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
    assert_eq!(s.sources.manifest_path.as_deref(), Some(std::path::Path::new("/srv/pods")));
    assert_eq!(s.sources.file_check_frequency, Duration::from_secs(60));
    assert_eq!(s.sources.url.headers, vec![("X-B".into(), "3".into())]);
}

#[test]
fn the_atoll_config_sets_back_off_classes_strictness_and_credentials() {
    let dir = crate::testdir::TestDir::new("own-config");
    std::fs::write(dir.join("config.json"), r#"{"auths":{"r.example.com":{"auth":"dTpw"}}}"#).unwrap();
    std::fs::write(dir.join("pw"), "s3cret\n").unwrap();
    let path = config_file(
            "atoll.yaml",
            &format!(
                "apiVersion: atoll.io/v1alpha1\nkind: AtollConfiguration\nstrict: true\nstrictImagePullPolicy: true\ncrashLoopBackOff: {{initialDelay: 1s, maxDelay: 30s}}\nimagePullBackOff: {{maxDelay: 1m}}\nruntimeClasses: {{gvisor: runsc}}\nregistryCredentials:\n- {{registry: q.example.com, username: u, passwordFile: {}}}\nfuture: 1\n",
                dir.join("pw").display()
            ),
        );
    let root = format!("--root-dir={}", dir.display());
    let s = Settings::load(&flags(&[&format!("--atoll-config={path}"), "--hostname-override=n", &root])).unwrap();
    assert!(s.sources.strict && s.runtime.engine.strict_image_pull_policy);
    assert_eq!(s.runtime.tuning.crash_loop_back_off, (Duration::from_secs(1), Duration::from_secs(30)));
    assert_eq!(s.runtime.tuning.image_pull_back_off, (Duration::from_secs(10), Duration::from_secs(60)));
    assert_eq!(s.runtime.tuning.runtime_handlers.get("gvisor").map(String::as_str), Some("runsc"));
    let q = s.runtime.tuning.keyring.lookup("q.example.com/app:1");
    assert_eq!((q.len(), q[0].auth.password.as_str()), (1, "s3cret"), "password from the file, newline dropped");
    assert_eq!(
        s.runtime.tuning.keyring.lookup("r.example.com/app")[0].auth.auth,
        "dTpw",
        "<root-dir>/config.json is read"
    );
    assert!(s.config_notes.iter().any(|n| n.contains("future: unknown field; ignored")), "{:?}", s.config_notes);
    assert_eq!(s.node.root_dir, dir.to_path_buf(), "--root-dir wins over stateDir");
    // The flag wins over the file.
    let s =
        Settings::load(&flags(&[&format!("--atoll-config={path}"), "--strict=false", "--hostname-override=n", &root]))
            .unwrap();
    assert!(!s.sources.strict);
    // Without the file: kubelet's defaults, no credentials.
    let s = Settings::load(&flags(&["--hostname-override=n", "--root-dir=/nonexistent"])).unwrap();
    assert_eq!(s.runtime.tuning.crash_loop_back_off, (Duration::from_secs(10), Duration::from_secs(300)));
    assert!(
        s.runtime.tuning.keyring.is_empty()
            && s.runtime.tuning.runtime_handlers.is_empty()
            && !s.sources.strict
            && !s.runtime.engine.strict_image_pull_policy
    );
}

#[test]
fn the_example_atoll_config_is_valid() {
    let example = concat!(env!("CARGO_MANIFEST_DIR"), "/configs/atoll.yaml");
    let s = Settings::load(&flags(&[
        &format!("--atoll-config={example}"),
        "--hostname-override=n",
        "--root-dir=/nonexistent",
    ]))
    .unwrap();
    assert!(s.config_notes.is_empty(), "{:?}", s.config_notes);
    assert_eq!(s.runtime.tuning.crash_loop_back_off, (Duration::from_secs(10), Duration::from_secs(300)));
    assert_eq!((s.mirror.kubeconfig, s.mirror.node_labels.len()), (None, 0));
    assert_eq!((s.runtime.engine.relist, s.runtime.engine.resync), (Duration::from_secs(10), None));
    for (value, error) in [("0s", "is not between 1s and 1h"), ("2h", "is not between 1s and 1h"), ("soon", "")] {
        let own = config_file(
            "relist.yaml",
            &format!("apiVersion: atoll.io/v1alpha1\nkind: AtollConfiguration\nrelistPeriod: {value}\n"),
        );
        let e = Settings::load(&flags(&[&format!("--atoll-config={own}"), "--hostname-override=n"]))
            .unwrap_err()
            .to_string();
        assert!(e.contains("relist.yaml: relistPeriod: ") && e.contains(error), "{e}");
    }
    let wrong =
        config_file("wrong-own.yaml", "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n");
    let e =
        Settings::load(&flags(&[&format!("--atoll-config={wrong}"), "--hostname-override=n"])).unwrap_err().to_string();
    assert!(e.contains("wrong-own.yaml") && e.contains("expected kind AtollConfiguration"), "{e}");
}

#[test]
fn bad_config_files_are_named_with_the_field() {
    let wrong_kind = config_file("wrong.yaml", "apiVersion: v1\nkind: Pod\n");
    let e =
        Settings::load(&flags(&[&format!("--config={wrong_kind}"), "--hostname-override=n"])).unwrap_err().to_string();
    assert!(e.contains("wrong.yaml") && e.contains("expected kind KubeletConfiguration"), "{e}");
    let bad_duration = config_file(
        "dur.yaml",
        "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\nfileCheckFrequency: soon\n",
    );
    let e = Settings::load(&flags(&[&format!("--config={bad_duration}"), "--hostname-override=n"]))
        .unwrap_err()
        .to_string();
    assert!(e.starts_with("config field fileCheckFrequency:"), "{e}");
    let bad_type = config_file(
        "type.yaml",
        "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\nstaticPodPath: [a]\n",
    );
    let e =
        Settings::load(&flags(&[&format!("--config={bad_type}"), "--hostname-override=n"])).unwrap_err().to_string();
    assert!(e.contains("type.yaml: staticPodPath: invalid type"), "{e}");
    let e = Settings::load(&flags(&["--config=/nonexistent/kubelet.yaml"])).unwrap_err().to_string();
    assert!(e.contains("/nonexistent/kubelet.yaml"), "{e}");
    let nested = config_file(
        "nested.yaml",
        "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\nauthentication: {webhook: {cacheTTL: [1]}}\n",
    );
    let e = Settings::load(&flags(&[&format!("--config={nested}"), "--hostname-override=n"])).unwrap_err().to_string();
    assert!(e.contains("nested.yaml: authentication.webhook.cacheTTL: invalid type"), "{e}");
}

#[test]
fn settings_files_the_operator_links_are_followed() {
    // kubeadm's and config managers' files are often symlinks; none is container-writable.
    let path = config_file("linked-target.yaml", KUBELET);
    let link = path.with_file_name("linked.yaml");
    let _ = std::fs::remove_file(&link);
    std::os::unix::fs::symlink(&path, &link).unwrap();
    let s = Settings::load(&flags(&[&format!("--config={}", link.display()), "--hostname-override=n"])).unwrap();
    assert_eq!(s.mirror.max_pods, 20);
    let secret = config_file("password-target", "hunter2\n");
    let secret_link = secret.with_file_name("password-link");
    let _ = std::fs::remove_file(&secret_link);
    std::os::unix::fs::symlink(&secret, &secret_link).unwrap();
    let own = format!(
        "apiVersion: atoll.io/v1alpha1\nkind: AtollConfiguration\nregistryCredentials:\n- {{registry: q.example.com, username: u, passwordFile: {}}}\n",
        secret_link.display()
    );
    let own_target = config_file("own-target.yaml", &own);
    let own_link = own_target.with_file_name("own-link.yaml");
    let _ = std::fs::remove_file(&own_link);
    std::os::unix::fs::symlink(own_link.with_file_name("own-target.yaml"), &own_link).unwrap();
    let s = Settings::load(&flags(&[&format!("--atoll-config={}", own_link.display()), "--hostname-override=n"]));
    assert!(s.is_ok(), "{:?}", s.err());
}

fn with_own(atoll_yaml: &str, more: &[&str]) -> Settings {
    let path = config_file(
        &format!("{:x}.yaml", crate::fnv::fnv1a_64(atoll_yaml.as_bytes())),
        &format!("apiVersion: atoll.io/v1alpha1\nkind: AtollConfiguration\n{atoll_yaml}"),
    );
    let mut args = vec![format!("--atoll-config={path}"), "--hostname-override=n".to_string()];
    args.extend(more.iter().map(|s| s.to_string()));
    Settings::load(&flags(&args.iter().map(String::as_str).collect::<Vec<_>>())).unwrap()
}

#[test]
fn a_reload_names_a_change_of_manifest_trust_as_needing_a_restart() {
    let dir = crate::testdir::TestDir::new("config-reload-keys");
    let key = dir.join("fleet.pub");
    std::fs::write(&key, "untrusted comment: k\nRWSZQ6c1ilZml5y6wD4PC2h11yUzhxyBXiiDjnUr2taaDCOxlw8edujl\n").unwrap();
    let trust = |require| format!("manifestTrust: {{publicKeys: [{}], require: {require}}}\n", key.display());
    let (none, lax, strict) = (with_own("", &[]), with_own(&trust(false), &[]), with_own(&trust(true), &[]));
    assert!(needs_restart(&none, &none).is_empty());
    assert_eq!(needs_restart(&none, &lax), ["manifestTrust"]);
    assert_eq!(needs_restart(&lax, &strict), ["manifestTrust"], "turning require on");
    assert_eq!(needs_restart(&strict, &none), ["manifestTrust"]);
    let back_off = with_own("crashLoopBackOff: {maxDelay: 1m}\nruntimeClasses: {gvisor: runsc}\n", &[]);
    assert!(needs_restart(&none, &back_off).is_empty(), "applied at once");
}

#[test]
fn every_part_changed_is_named_by_a_reload() {
    let base = with_own("", &[]);
    for (yaml, flag, named) in [
        ("", "--node-ip=10.0.0.9", "the node"),
        ("", "--pod-manifest-path=/srv/pods", "the manifest directory"),
        ("", "--manifest-url=http://127.0.0.1:1/pods", "the manifest URL"),
        ("secretsDir: /etc/atoll/secrets\n", "", "secretsDir"),
        ("strict: true\n", "", "strictness"),
        ("", "--container-runtime-endpoint=unix:///run/crio/crio.sock", "the runtime endpoint"),
        ("relistPeriod: 30s\n", "", "the engine"),
        ("strictImagePullPolicy: true\n", "", "the engine"),
        ("imageGCPeriod: 1m\n", "", "images"),
        ("", "--api-socket=none", "the API listeners"),
        ("", "--kubeconfig=/etc/atoll/kubeconfig", "the mirror"),
        ("", "--node-labels=site=north", "the mirror"),
        ("rollbackAfter: 2m\n", "", "rollbackAfter"),
        ("", "--drain-on-exit", "--drain-on-exit"),
    ] {
        let more: Vec<&str> = [flag].into_iter().filter(|f| !f.is_empty()).collect();
        let changed = with_own(yaml, &more);
        let said = needs_restart(&base, &changed);
        assert!(said.len() == 1 && said[0].starts_with(named), "{yaml}{flag}: {said:?}");
        assert_eq!(needs_restart(&changed, &base), said, "and back");
    }
}

#[test]
fn reservations_eviction_thresholds_and_unsafe_sysctls_are_read_as_kubelet_reads_them() {
    use crate::node::machine::Threshold;
    let extra = "kubeReserved: {cpu: 500m, memory: 256Mi}\nsystemReserved: {memory: 256Mi, pid: '100'}\nevictionHard: {memory.available: 5%, nodefs.available: 0%, imagefs.available: 15%}\nallowedUnsafeSysctls: [net.ipv4.ip_nonlocal_bind, 'kernel/msg*']\n";
    let path = config_file("reserved.yaml", &format!("{KUBELET}{extra}"));
    let s = Settings::load(&flags(&[&format!("--config={path}")])).unwrap();
    let r = &s.node.reserved;
    assert_eq!((r.cpu_millis, r.memory_bytes), (500, 512 << 20));
    assert_eq!(r.memory_available, Some(Threshold::Share(0.05f32.to_bits())));
    assert_eq!(r.nodefs_available, None, "0% sets no threshold, and a given evictionHard replaces the defaults");
    assert_eq!(s.node.allowed_unsafe_sysctls, vec!["net.ipv4.ip_nonlocal_bind".to_string(), "kernel.msg*".into()]);
    assert!(!s.config_notes.join("\n").contains("Reserved"), "{:?}", s.config_notes);
    for (bad, field) in [
        ("kubeReserved: {gpu: '1'}\n", "kubeReserved.gpu"),
        ("evictionHard: {memory.free: 1Gi}\n", "evictionHard.memory.free: not an eviction signal"),
        ("evictionHard: {memory.available: '0'}\n", "not a positive quantity"),
        ("evictionHard: {memory.available: 10 %}\n", "not a percentage"),
        ("allowedUnsafeSysctls: [vm.swappiness]\n", "not known to be namespaced"),
    ] {
        let path = config_file("bad-reserved.yaml", &format!("{KUBELET}{bad}"));
        let e = Settings::load(&flags(&[&format!("--config={path}")])).err().map(|e| e.to_string()).unwrap_or_default();
        assert!(e.contains(field), "{bad}: {e}");
    }
}
