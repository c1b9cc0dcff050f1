//! `atoll run` with an AtollConfiguration (`--atoll-config`) against the test bed: registry
//! credentials (tried most specific first, the password from a file), the runtime class
//! table, a short CrashLoopBackOff, and hostPort through the test bed's CNI portmap plugin.
//! (Its own test binary: atoll removes every atoll-made sandbox it was not told to run.)

use crate::common;

use atoll::cri::api::{ContainerFilter, ContainerState, PodSandboxFilter, PodSandboxState};
use common::{eventually, free_port, testbed, unique, Testbed};
use std::collections::HashMap;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::Duration;

struct Agent {
    child: Child,
    log: PathBuf,
}

impl Agent {
    fn start(tb: &Testbed, dir: &Path, atoll_config: &str) -> Agent {
        let kubelet = common::kubelet_config(tb, dir, "fileCheckFrequency: 1s\n");
        let own = dir.join("atoll.yaml");
        std::fs::write(&own, atoll_config).unwrap();
        let log = dir.join("atoll.log");
        let child = common::atoll_run(tb, dir, &kubelet, &dir.join("api.sock"), "tb")
            .arg(format!("--atoll-config={}", own.display()))
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .expect("start atoll");
        Agent { child, log }
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for Agent {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn selector(pod: &str) -> HashMap<String, String> {
    HashMap::from([("io.kubernetes.pod.name".to_string(), format!("{pod}-tb"))])
}

/// The pod's containers named `name`: (running, highest attempt).
fn container(tb: &Testbed, pod: &str, name: &str) -> (bool, u32) {
    let cs = smol::block_on(
        tb.cri().list_containers(Some(ContainerFilter { label_selector: selector(pod), ..Default::default() })),
    )
    .unwrap();
    let mine: Vec<_> = cs.iter().filter(|c| c.metadata.as_ref().is_some_and(|m| m.name == name)).collect();
    let running = mine.iter().any(|c| c.state == ContainerState::ContainerRunning as i32);
    let attempt = mine.iter().filter_map(|c| c.metadata.as_ref()).map(|m| m.attempt).max().unwrap_or(0);
    (running, attempt)
}

fn sandboxes(tb: &Testbed, pod: &str) -> usize {
    smol::block_on(
        tb.cri().list_pod_sandbox(Some(PodSandboxFilter { label_selector: selector(pod), ..Default::default() })),
    )
    .unwrap()
    .iter()
    .filter(|s| s.state == PodSandboxState::SandboxReady as i32)
    .count()
}

fn http_get(port: u16) -> Option<String> {
    let mut s = std::net::TcpStream::connect_timeout(&([127, 0, 0, 1], port).into(), Duration::from_secs(1)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
    s.write_all(b"GET /index.html HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n").ok()?;
    let mut body = String::new();
    s.read_to_string(&mut body).ok()?;
    Some(body)
}

/// The five pods of the test, by manifest file: the private image, a known and an unknown
/// runtime class, a crasher, and a bridge pod with a hostPort.
fn pods(id: &str, private_image: &str, host_port: u16) -> [(&'static str, String); 5] {
    [
    (
        "private",
        format!(
            "metadata: {{name: private{id}}}\nspec:\n  hostNetwork: true\n  terminationGracePeriodSeconds: 1\n  containers:\n  - name: c\n    image: {private_image}\n    imagePullPolicy: Always\n"
        ),
    ),
    (
        "classy",
        format!(
            "metadata: {{name: classy{id}}}\nspec:\n  hostNetwork: true\n  runtimeClassName: fast\n  terminationGracePeriodSeconds: 1\n  containers:\n  - name: c\n    image: docker.io/library/busybox:1.36\n    command: [sleep, \"3600\"]\n"
        ),
    ),
    (
        "unknown",
        format!(
            "metadata: {{name: unknown{id}}}\nspec:\n  hostNetwork: true\n  runtimeClassName: gvisor\n  containers:\n  - name: c\n    image: docker.io/library/busybox:1.36\n    command: [sleep, \"3600\"]\n"
        ),
    ),
    (
        "crasher",
        format!(
            "metadata: {{name: crasher{id}}}\nspec:\n  hostNetwork: true\n  terminationGracePeriodSeconds: 1\n  containers:\n  - name: c\n    image: docker.io/library/busybox:1.36\n    command: [sh, -c, \"exit 1\"]\n"
        ),
    ),
    (
        "ports",
        format!(
            "metadata: {{name: ports{id}}}\nspec:\n  terminationGracePeriodSeconds: 1\n  containers:\n  - name: web\n    image: docker.io/library/busybox:1.36\n    command: [httpd, -f, -p, \"8080\", -h, /var/www]\n    ports:\n    - containerPort: 8080\n      hostPort: {host_port}\n"
        ),
    ),
]
}

#[test]
fn the_atoll_config_drives_credentials_runtime_classes_back_off_and_host_ports() {
    let _room = common::room(module_path!());
    let tb = testbed();
    let private_image = tb.var("ATOLL_TB_PRIVATE_IMAGE").to_string();
    let private_registry = tb.var("ATOLL_TB_PRIVATE_REGISTRY").to_string();

    // The test bed's private registry really refuses an anonymous pull.
    let anonymous = smol::block_on(tb.cri().pull_image(&private_image, None, None));
    assert!(anonymous.is_err(), "the private registry must refuse an anonymous pull");

    let dir = crate::common::Scratch::new("agent-config");
    std::fs::create_dir_all(&dir).unwrap();
    let password_file = dir.join("registry-password");
    std::fs::write(&password_file, format!("{}\n", tb.var("ATOLL_TB_PRIVATE_PASSWORD"))).unwrap();
    let config = format!(
        "apiVersion: atoll.io/v1alpha1
kind: AtollConfiguration
crashLoopBackOff:
  initialDelay: 1s
  maxDelay: 2s
runtimeClasses:
  fast: runc
registryCredentials:
# The more specific entry is tried first and is wrong; the registry-wide one works.
- registry: {private_registry}/atoll/private
  username: robot
  password: wrong
- registry: http://{private_registry}
  username: {user}
  passwordFile: {file}
",
        user = tb.var("ATOLL_TB_PRIVATE_USER"),
        file = password_file.display()
    );
    let agent = Agent::start(tb, &dir, &config);
    let id = unique("cfg").replace('-', "x");
    let host_port = free_port();
    let pods = pods(&id, &private_image, host_port);
    for (file, yaml) in &pods {
        std::fs::write(
            dir.join("manifests").join(format!("{file}.yaml")),
            format!("apiVersion: v1\nkind: Pod\n{yaml}"),
        )
        .unwrap();
    }

    // Credentials: the wrong, more specific entry first, then the working one.
    eventually(Duration::from_secs(60), "the private image's container running", || {
        container(tb, &format!("private{id}"), "c").0.then_some(())
    });
    let log = agent.log();
    assert!(
        log.contains("with the credentials of") && log.contains("registryCredentials[0]"),
        "the more specific (wrong) credential is tried first:\n{log}"
    );
    assert!(!log.contains(tb.var("ATOLL_TB_PRIVATE_PASSWORD")), "the password must never be logged");

    // Runtime classes: a known class runs; an unknown one fails the pod without a sandbox.
    eventually(Duration::from_secs(30), "the runtime-classed pod running", || {
        container(tb, &format!("classy{id}"), "c").0.then_some(())
    });
    eventually(Duration::from_secs(10), "the unknown class reported", || {
        agent.log().contains(&format!("pod default/unknown{id}-tb: Failed: RuntimeClass \"gvisor\"")).then_some(())
    });
    assert_eq!(sandboxes(tb, &format!("unknown{id}")), 0, "no sandbox for an unknown runtime class");

    // Back-off 1 s doubling to 2 s: in 12 s the crasher restarts many times (kubelet's 10 s
    // default would allow at most two).
    let started = std::time::Instant::now();
    eventually(Duration::from_secs(30), "the crasher restarted four times", || {
        (container(tb, &format!("crasher{id}"), "c").1 >= 4).then_some(())
    });
    assert!(started.elapsed() < Duration::from_secs(25), "back-off was longer than configured");

    // hostPort: the bridge pod's httpd answers on 127.0.0.1:<hostPort>.
    let body = eventually(Duration::from_secs(30), "the hostPort answering", || {
        http_get(host_port).filter(|b| b.contains("hello from atoll's test image"))
    });
    assert!(body.lines().next().is_some_and(|l| l.starts_with("HTTP/1.") && l.contains(" 200 ")), "{body}");

    // Removing the manifests removes the pods, and with them the port mapping.
    for (file, _) in &pods {
        std::fs::remove_file(dir.join("manifests").join(format!("{file}.yaml"))).unwrap();
    }
    eventually(Duration::from_secs(60), "the pods removed", || {
        ["private", "classy", "crasher", "ports"].iter().all(|p| sandboxes(tb, &format!("{p}{id}")) == 0).then_some(())
    });
    eventually(Duration::from_secs(10), "the hostPort closed", || http_get(host_port).is_none().then_some(()));
    drop(agent);
}

#[test]
fn a_bad_atoll_config_names_the_file_and_field() {
    let _room = common::room(module_path!());
    let dir = crate::common::Scratch::new("bad-config");
    std::fs::create_dir_all(&dir).unwrap();
    let cases = [
        ("crashLoopBackOff:\n  initialDelay: soon\n", "crashLoopBackOff.initialDelay"),
        ("crashLoopBackOff:\n  initialDelay: 20s\n  maxDelay: 10s\n", "crashLoopBackOff.maxDelay"),
        (
            "registryCredentials:\n- registry: r.example.com\n  username: u\n  passwordFile: /nonexistent/pw\n",
            "registryCredentials[0].passwordFile",
        ),
        ("registryCredentials:\n- registry: \"\"\n  username: u\n", "registryCredentials[0]"),
        ("runtimeClasses:\n  Bad_Name: runc\n", "runtimeClasses.Bad_Name"),
        ("dockerConfigFiles: [/nonexistent/config.json]\n", "dockerConfigFiles"),
        ("strict: maybe\n", "strict"),
    ];
    for (i, (body, field)) in cases.iter().enumerate() {
        let path = dir.join(format!("bad{i}.yaml"));
        std::fs::write(&path, format!("apiVersion: atoll.io/v1alpha1\nkind: AtollConfiguration\n{body}")).unwrap();
        let out = Command::new(env!("CARGO_BIN_EXE_atoll"))
            .args([
                "run",
                "--hostname-override=tb",
                "--container-runtime-endpoint=unix:///nonexistent.sock",
                "--api-socket=none",
            ])
            .arg(format!("--atoll-config={}", path.display()))
            .arg(format!("--root-dir={}", dir.display()))
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{body}: atoll must refuse to start");
        assert!(err.contains(&path.display().to_string()) && err.contains(field), "{body}: {err}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}
