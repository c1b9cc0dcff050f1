//! Local ConfigMaps and Secrets end to end, against the real private containerd: a pod reads
//! a config file and a password from objects in its manifest directory (volumes, env, envFrom);
//! the Secret is a tmpfs in the container and never on disk; a changed ConfigMap reaches the
//! running container without a restart (the atomic `..data` swap); a missing object keeps its
//! container waiting with kubelet's reason and it starts once the object appears; the Secret's
//! value never shows in the agent's log, its events or its API.

use crate::common;

use common::{eventually, testbed, Agent, Testbed};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

fn fresh_dir(name: &str) -> (crate::common::Scratch, PathBuf) {
    let dir = crate::common::Scratch::new(name);
    let manifests = dir.join("manifests");
    std::fs::create_dir_all(&manifests).unwrap();
    (dir, manifests)
}

/// Written beside and renamed into place, as an editor or a deploy tool does.
fn put(manifests: &Path, name: &str, text: &str) {
    let staged = manifests.join(format!(".{name}.tmp"));
    std::fs::write(&staged, text).unwrap();
    std::fs::rename(&staged, manifests.join(name)).unwrap();
}

fn config_map(greeting: &str) -> String {
    format!("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: app-config\ndata:\n  app.conf: |\n    greeting={greeting}\n  MODE: prod\n")
}

const APP: &str = "apiVersion: v1
kind: Pod
metadata: {name: app}
spec:
  hostNetwork: true
  terminationGracePeriodSeconds: 0
  containers:
  - name: c
    image: docker.io/library/busybox:1.36
    command: [sleep, '3600']
    env:
    - {name: MODE, valueFrom: {configMapKeyRef: {name: app-config, key: MODE}}}
    - {name: DB_PASSWORD, valueFrom: {secretKeyRef: {name: db, key: password}}}
    envFrom:
    - {prefix: CFG_, configMapRef: {name: app-config}}
    volumeMounts:
    - {name: config, mountPath: /etc/app}
    - {name: creds, mountPath: /etc/db}
  volumes:
  - {name: config, configMap: {name: app-config}}
  - {name: creds, secret: {secretName: db, defaultMode: 0400}}
";

/// Runs `script` in the container `id`: its stdout.
fn exec(tb: &Testbed, id: &str, script: &str) -> String {
    let cmd = vec!["sh".to_string(), "-c".to_string(), script.to_string()];
    let r = smol::block_on(tb.cri().exec_sync(id, cmd, Duration::from_secs(10))).expect("ExecSync");
    String::from_utf8_lossy(&r.stdout).into_owned()
}

fn running(tb: &Testbed, name: &str) -> Vec<String> {
    tb.running_in(name).into_iter().map(|c| c.id).collect()
}

/// Every regular file below `dir` that holds `needle`, not descending into mount points
/// (a tmpfs is memory, not disk).
fn files_holding(dir: &Path, needle: &[u8], mounts: &str) -> Vec<PathBuf> {
    let mut found = Vec::new();
    let Ok(entries) = std::fs::read_dir(dir) else { return found };
    for e in entries.flatten() {
        let p = e.path();
        let Ok(t) = e.file_type() else { continue };
        if t.is_dir() {
            if !mounts.lines().any(|l| l.split(' ').nth(4) == Some(p.to_str().unwrap_or(""))) {
                found.extend(files_holding(&p, needle, mounts));
            }
        } else if t.is_file() && std::fs::read(&p).is_ok_and(|b| b.windows(needle.len()).any(|w| w == needle)) {
            found.push(p);
        }
    }
    found
}

#[test]
fn a_pod_reads_its_config_and_password_from_local_objects_and_sees_config_changes_without_a_restart() {
    let _room = common::room(module_path!());
    let _turn = common::one_agent_at_a_time();
    let tb = testbed();
    let (dir, manifests) = fresh_dir("objects");
    let password = format!("pw-{}-Zq9x", std::process::id());
    put(&manifests, "app-config.yaml", &config_map("hello"));
    let secret = format!("apiVersion: v1\nkind: Secret\nmetadata:\n  name: db\nstringData:\n  password: {password}\n");
    put(&manifests, "db-secret.yaml", &secret);
    put(&manifests, "app.yaml", APP);
    let agent = Agent::start(tb, &dir, "", &[], &[]);
    let id = eventually(Duration::from_secs(60), "the app running", || running(tb, "app-tb").pop());

    assert_eq!(exec(tb, &id, "cat /etc/app/app.conf"), "greeting=hello\n");
    assert_eq!(exec(tb, &id, "echo \"$MODE $CFG_MODE $DB_PASSWORD\""), format!("prod prod {password}\n"));
    assert_eq!(exec(tb, &id, "cat /etc/db/password"), password);
    assert_eq!(exec(tb, &id, "stat -L -c %a /etc/db/password"), "400\n");
    // The Secret is a tmpfs, read-only, in the container; the ConfigMap read-only too.
    let mounts = exec(tb, &id, "cat /proc/mounts");
    let line = |at: &str| mounts.lines().find(|l| l.split(' ').nth(1) == Some(at)).unwrap_or("").to_string();
    assert!(line("/etc/db").starts_with("tmpfs /etc/db tmpfs ro"), "{mounts}");
    assert!(line("/etc/app").contains(" ro"), "{mounts}");
    assert_ne!(exec(tb, &id, "echo x > /etc/app/new 2>/dev/null && echo written"), "written\n");

    // Never on disk: no file under atoll's state holds the password (its volume is a tmpfs).
    let host_mounts = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    let state = dir.join("state");
    assert!(host_mounts.lines().any(|l| l.contains(" tmpfs ") && l.contains("kubernetes.io~secret/creds")));
    assert_eq!(files_holding(&state, password.as_bytes(), &host_mounts), Vec::<PathBuf>::new());

    // The ConfigMap changes: the running container sees the new file, whole, with no restart.
    put(&manifests, "app-config.yaml", &config_map("bye"));
    eventually(Duration::from_secs(30), "the new config in the container", || {
        (exec(tb, &id, "cat /etc/app/app.conf") == "greeting=bye\n").then_some(())
    });
    assert_eq!(running(tb, "app-tb"), vec![id.clone()], "the container was restarted");
    assert!(exec(tb, &id, "readlink /etc/app/..data").starts_with(".."));

    // The value never leaves the agent: not in its log, the events, describe or the API.
    let (_, describe, _) = agent.cli(&["describe", "app"]);
    assert!(describe.contains("Secret db") && describe.contains("password"), "{describe}");
    assert!(describe.contains("ConfigMap app-config"), "{describe}");
    let (_, pods, _) = agent.cli(&["pods", "-o", "json"]);
    for (what, text) in [("log", agent.log()), ("describe", describe), ("pods", pods)] {
        assert!(!text.contains(&password), "the password is in the {what}");
    }

    std::fs::remove_file(manifests.join("app.yaml")).unwrap();
    eventually(Duration::from_secs(60), "the pod gone", || tb.sandboxes_of("app-tb").is_empty().then_some(()));
    // The sandbox goes first, then the pod's directory with its mounts.
    eventually(Duration::from_secs(30), "the removed pod's volumes unmounted", || {
        let after = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
        (!after.contains(&state.display().to_string())).then_some(())
    });
    drop(agent);
    let _ = std::fs::remove_dir_all(&dir);
}

const LATE: &str = "apiVersion: v1
kind: Pod
metadata: {name: late}
spec:
  hostNetwork: true
  terminationGracePeriodSeconds: 0
  containers:
  - name: c
    image: docker.io/library/busybox:1.36
    command: [sleep, '3600']
    env:
    - {name: TOKEN, valueFrom: {secretKeyRef: {name: late-secret, key: token}}}
";

const LATE_VOLUME: &str = "apiVersion: v1
kind: Pod
metadata: {name: late-volume}
spec:
  hostNetwork: true
  terminationGracePeriodSeconds: 0
  containers:
  - name: c
    image: docker.io/library/busybox:1.36
    command: [sleep, '3600']
    volumeMounts: [{name: cfg, mountPath: /cfg}]
  volumes:
  - {name: cfg, configMap: {name: late-cm}}
";

/// The waiting reason and message of pod `name`'s first container.
fn waiting(agent: &Agent, name: &str) -> Option<(String, String)> {
    let p = agent.pod(name)?;
    let w = &p["status"]["containerStatuses"][0]["state"]["waiting"];
    Some((w["reason"].as_str()?.to_string(), w["message"].as_str().unwrap_or("").to_string()))
}

#[test]
fn a_missing_object_keeps_the_container_waiting_with_kubelets_reason_until_it_appears() {
    let _room = common::room(module_path!());
    let _turn = common::one_agent_at_a_time();
    let tb = testbed();
    let (dir, manifests) = fresh_dir("objects-late");
    put(&manifests, "late.yaml", LATE);
    put(&manifests, "late-volume.yaml", LATE_VOLUME);
    let agent = Agent::start(tb, &dir, "", &[], &[]);
    eventually(Duration::from_secs(60), "CreateContainerConfigError", || {
        let w = waiting(&agent, "late-tb")?;
        (w == ("CreateContainerConfigError".to_string(), "secret \"late-secret\" not found".to_string())).then_some(())
    });
    eventually(Duration::from_secs(60), "ContainerCreating with FailedMount's message", || {
        let (reason, message) = waiting(&agent, "late-volume-tb")?;
        let want = "MountVolume.SetUp failed for volume \"cfg\" : configmap \"late-cm\" not found";
        (reason == "ContainerCreating" && message == want).then_some(())
    });
    assert!(running(tb, "late-tb").is_empty() && running(tb, "late-volume-tb").is_empty());
    let (_, describe, _) = agent.cli(&["describe", "late"]);
    assert!(describe.contains("Secret late-secret") && describe.contains("not found"), "{describe}");

    // A Secret without the key: still waiting, the key named.
    put(
        &manifests,
        "late-secret.yaml",
        "apiVersion: v1\nkind: Secret\nmetadata: {name: late-secret}\nstringData: {other: x}\n",
    );
    eventually(Duration::from_secs(30), "the missing key named", || {
        let (_, message) = waiting(&agent, "late-tb")?;
        (message == "couldn't find key token in Secret default/late-secret").then_some(())
    });
    // The objects appear: both start.
    put(
        &manifests,
        "late-secret.yaml",
        "apiVersion: v1\nkind: Secret\nmetadata: {name: late-secret}\nstringData: {token: t0k}\n",
    );
    put(&manifests, "late-cm.yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: late-cm}\ndata: {a: b}\n");
    let id = eventually(Duration::from_secs(60), "late running", || running(tb, "late-tb").pop());
    assert_eq!(exec(tb, &id, "echo $TOKEN"), "t0k\n");
    let id = eventually(Duration::from_secs(60), "late-volume running", || running(tb, "late-volume-tb").pop());
    assert_eq!(exec(tb, &id, "cat /cfg/a"), "b");
    for f in ["late.yaml", "late-volume.yaml"] {
        std::fs::remove_file(manifests.join(f)).unwrap();
    }
    eventually(Duration::from_secs(60), "the pods gone", || {
        (tb.sandboxes_of("late-tb").is_empty() && tb.sandboxes_of("late-volume-tb").is_empty()).then_some(())
    });
    drop(agent);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_secrets_dir_is_read_only_while_it_is_roots_alone_and_holds_no_pods() {
    let _room = common::room(module_path!());
    use std::os::unix::fs::PermissionsExt;
    let _turn = common::one_agent_at_a_time();
    let tb = testbed();
    let (dir, manifests) = fresh_dir("objects-private");
    let secrets = dir.join("secrets");
    std::fs::create_dir_all(&secrets).unwrap();
    std::fs::set_permissions(&secrets, std::fs::Permissions::from_mode(0o755)).unwrap();
    put(
        &secrets,
        "late-secret.yaml",
        "apiVersion: v1\nkind: Secret\nmetadata: {name: late-secret}\nstringData: {token: fr0m-private}\n",
    );
    put(&secrets, "stray-pod.yaml", &LATE.replace("name: late}", "name: stray}"));
    let own = dir.join("atoll.yaml");
    let config =
        format!("apiVersion: atoll.io/v1alpha1\nkind: AtollConfiguration\nsecretsDir: {}\n", secrets.display());
    std::fs::write(&own, config).unwrap();
    put(&manifests, "late.yaml", LATE);
    // The directory's mode is looked at by the rescans (every 2 s here).
    let agent =
        Agent::start(tb, &dir, "fileCheckFrequency: 2s\n", &[&format!("--atoll-config={}", own.display())], &[]);
    eventually(Duration::from_secs(30), "the open directory refused", || {
        agent.log().contains("with mode 0755: it must be owned by root with mode 0700").then_some(())
    });
    eventually(Duration::from_secs(60), "late waiting for its Secret", || {
        let (reason, _) = waiting(&agent, "late-tb")?;
        (reason == "CreateContainerConfigError").then_some(())
    });
    let doctor = Command::new(env!("CARGO_BIN_EXE_atoll"))
        .args(["doctor", &format!("--atoll-config={}", own.display())])
        .output()
        .unwrap();
    let doctor = String::from_utf8_lossy(&doctor.stdout).into_owned();
    assert!(doctor.contains("must be owned by root with mode 0700"), "{doctor}");
    // Closed: its Secret is read; its pod is not run, and said so.
    std::fs::set_permissions(&secrets, std::fs::Permissions::from_mode(0o700)).unwrap();
    let id = eventually(Duration::from_secs(60), "late running", || running(tb, "late-tb").pop());
    assert_eq!(exec(tb, &id, "echo $TOKEN"), "fr0m-private\n");
    eventually(Duration::from_secs(10), "the stray pod refused", || {
        agent
            .log()
            .contains(
                "stray-pod.yaml: kind: secretsDir holds Secrets and ConfigMaps; a Pod goes in the manifest directory",
            )
            .then_some(())
    });
    assert!(tb.sandboxes_of("stray-tb").is_empty());
    assert!(!agent.log().contains("fr0m-private"));
    std::fs::remove_file(manifests.join("late.yaml")).unwrap();
    eventually(Duration::from_secs(60), "the pod gone", || tb.sandboxes_of("late-tb").is_empty().then_some(()));
    drop(agent);
    let _ = std::fs::remove_dir_all(&dir);
}

/// Runs a stock CLI (age, age-keygen), which the test bed installs.
fn stock(cmd: &str, args: &[&str]) -> String {
    let out = Command::new(cmd).args(args).output().unwrap_or_else(|e| panic!("{cmd}: {e} (the test bed installs it)"));
    assert!(out.status.success(), "{cmd} {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn an_encrypted_secret_is_decrypted_in_memory_only() {
    let _room = common::room(module_path!());
    use std::os::unix::fs::PermissionsExt;
    let _turn = common::one_agent_at_a_time();
    let tb = testbed();
    let (dir, manifests) = fresh_dir("objects-age");
    let key = dir.join("age.key");
    stock("age-keygen", &["-o", key.to_str().unwrap()]);
    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o600)).unwrap();
    let recipient = stock("age-keygen", &["-y", key.to_str().unwrap()]);
    let password = format!("s3aled-{}", std::process::id());
    let plain = dir.join("db.yaml");
    std::fs::write(
        &plain,
        format!("apiVersion: v1\nkind: Secret\nmetadata: {{name: db}}\nstringData: {{password: {password}}}\n"),
    )
    .unwrap();
    let sealed = manifests.join("db.yaml.age");
    stock("age", &["-r", recipient.trim(), "-o", sealed.to_str().unwrap(), plain.to_str().unwrap()]);
    std::fs::remove_file(&plain).unwrap();
    let own = dir.join("atoll.yaml");
    let config =
        format!("apiVersion: atoll.io/v1alpha1\nkind: AtollConfiguration\ndecryptionKeyFile: {}\n", key.display());
    std::fs::write(&own, config).unwrap();
    put(&manifests, "late.yaml", &LATE.replace("late-secret", "db").replace("key: token", "key: password"));
    let agent = Agent::start(tb, &dir, "", &[&format!("--atoll-config={}", own.display())], &[]);
    let id = eventually(Duration::from_secs(60), "the pod running", || running(tb, "late-tb").pop());
    assert_eq!(exec(tb, &id, "echo $TOKEN"), format!("{password}\n"));
    // The plaintext is nowhere on disk, in the log or the validate output.
    let mounts = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    assert_eq!(files_holding(&dir, password.as_bytes(), &mounts), Vec::<PathBuf>::new());
    assert!(!agent.log().contains(&password));
    let validate = |config: &Path| {
        let out = Command::new(env!("CARGO_BIN_EXE_atoll"))
            .args(["validate", &format!("--atoll-config={}", config.display()), manifests.to_str().unwrap()])
            .output()
            .unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let (code, out, _) = validate(&own);
    assert_eq!(code, Some(0), "{out}");
    assert!(out.contains("db.yaml.age: ok: secret default/db (1 key,") && !out.contains(&password), "{out}");
    // A key file others can read is refused, the field named.
    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o644)).unwrap();
    let (code, _, err) = validate(&own);
    assert_ne!(code, Some(0));
    assert!(
        err.contains("decryptionKeyFile:") && err.contains("a key file must be owned by root with mode 0600"),
        "{err}"
    );
    std::fs::remove_file(manifests.join("late.yaml")).unwrap();
    eventually(Duration::from_secs(60), "the pod gone", || tb.sandboxes_of("late-tb").is_empty().then_some(()));
    drop(agent);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn age_files_of_several_chunks_made_by_the_stock_cli_decrypt_and_any_cut_is_refused() {
    let _room = common::room(module_path!());
    let dir = crate::common::Scratch::new("age-chunks");
    std::fs::create_dir_all(&dir).unwrap();
    let key = dir.join("age.key");
    stock("age-keygen", &["-o", key.to_str().unwrap()]);
    let recipient = stock("age-keygen", &["-y", key.to_str().unwrap()]);
    let id = atoll::age::Identity::from_file(&key).unwrap();
    assert_eq!(id.recipient(), recipient.trim());
    // Exactly two chunks, a partial third, and an empty file.
    for size in [2 * 65536, 200_000, 0] {
        let data: Vec<u8> = (0..size).map(|i: usize| (i * 7 % 251) as u8).collect();
        std::fs::write(dir.join("plain"), &data).unwrap();
        let sealed = dir.join("sealed");
        let _ = std::fs::remove_file(&sealed);
        stock("age", &["-r", recipient.trim(), "-o", sealed.to_str().unwrap(), dir.join("plain").to_str().unwrap()]);
        let bytes = std::fs::read(&sealed).unwrap();
        assert_eq!(id.decrypt(&bytes).unwrap(), data, "{size} bytes");
        // Cut at a chunk boundary (the last chunk dropped), or a byte short: refused.
        if size > 65536 {
            let header_and_first = bytes.len() - (size - 65536) - 16;
            assert!(id.decrypt(&bytes[..header_and_first]).is_err(), "a truncated file decrypted");
        }
        assert!(id.decrypt(&bytes[..bytes.len() - 1]).is_err());
    }
    let _ = std::fs::remove_dir_all(&dir);
}
