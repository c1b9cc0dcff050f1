//! The attackers `manifestTrust` and the Secret protections are meant to stop, played in a row
//! against the real private containerd, with signatures made by the stock `minisign` and an
//! age-encrypted Secret made by the stock `age`: a directory writer without the key (copies,
//! replays, unsigned files), whoever answers the manifest URL (an unsigned empty body, an old
//! signed payload, one signed for another box), an unprivileged local user (uid 65534, also
//! through the read-only port), and someone with the disk (no plain text of an encrypted
//! Secret or pod anywhere under the state directory, rollback records included). Through it
//! all, the fleet's newest signed version runs, nothing unsigned runs, and no Secret byte is
//! readable by uid 65534.

use crate::common;
use crate::common::signing;

use common::{eventually, free_port, testbed, Agent, Testbed};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// What the URL answers: the body and the signature, or nothing (503).
type Served = Arc<Mutex<Option<(Vec<u8>, Option<Vec<u8>>)>>>;

/// A manifest server on 127.0.0.1: `/pods` and `/pods.minisig` as set, 503 when it has none.
struct Url {
    port: u16,
    files: Served,
}

impl Url {
    fn start() -> Url {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let files: Served = Arc::default();
        let shared = files.clone();
        std::thread::spawn(move || {
            for conn in listener.incoming().flatten() {
                let files = shared.clone();
                std::thread::spawn(move || answer(conn, &files));
            }
        });
        Url { port, files }
    }

    fn serve(&self, body: &str, signature: Option<Vec<u8>>) {
        *self.files.lock().unwrap() = Some((body.as_bytes().to_vec(), signature));
    }

    fn down(&self) {
        *self.files.lock().unwrap() = None;
    }
}

fn answer(conn: TcpStream, files: &Served) {
    let mut reader = BufReader::new(conn.try_clone().unwrap());
    let mut line = String::new();
    if reader.read_line(&mut line).unwrap_or(0) == 0 {
        return;
    }
    loop {
        let mut h = String::new();
        if reader.read_line(&mut h).unwrap_or(0) == 0 || h.trim_end().is_empty() {
            break;
        }
    }
    let path = line.split_whitespace().nth(1).unwrap_or("");
    let current = files.lock().unwrap().clone();
    let body = match (current, path) {
        (None, _) => None,
        (Some((body, _)), "/pods") => Some(body),
        (Some((_, sig)), "/pods.minisig") => sig,
        _ => None,
    };
    let response = match body {
        Some(b) => {
            let mut r =
                format!("HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n", b.len()).into_bytes();
            r.extend_from_slice(&b);
            r
        }
        None => b"HTTP/1.1 503 Unavailable\r\nContent-Length: 0\r\nConnection: close\r\n\r\n".to_vec(),
    };
    let _ = (&conn).write_all(&response);
}

/// The labels' `v` of the pod `name` as the local API shows it, with its UID.
fn version(agent: &Agent, name: &str) -> Option<(String, String)> {
    let p = agent.pod(name)?;
    let statuses = p["status"]["containerStatuses"].as_array()?;
    if statuses.is_empty() || !statuses.iter().all(|c| c["state"]["running"].is_object()) {
        return None;
    }
    let v = p["metadata"]["labels"]["v"].as_str().unwrap_or("").to_string();
    Some((v, p["metadata"]["uid"].as_str()?.to_string()))
}

/// A pod that runs as uid 1000 and reads the Secret `db` from a volume and the environment.
fn web(v: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata: {{name: web, labels: {{v: \"{v}\"}}}}\nspec:\n  hostNetwork: true\n  terminationGracePeriodSeconds: 0\n  securityContext: {{runAsUser: 1000, runAsGroup: 1000}}\n  containers:\n  - name: c\n    image: docker.io/library/busybox:1.36\n    command: [sleep, '3600']\n    env: [{{name: PW, valueFrom: {{secretKeyRef: {{name: db, key: password}}}}}}]\n    volumeMounts: [{{name: db, mountPath: /etc/db}}]\n  volumes: [{{name: db, secret: {{secretName: db}}}}]\n"
    )
}

fn edge(v: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata: {{name: edge, labels: {{v: \"{v}\"}}}}\nspec:\n  hostNetwork: true\n  terminationGracePeriodSeconds: 0\n  containers:\n  - {{name: c, image: docker.io/library/busybox:1.36, command: [sleep, '3600']}}\n"
    )
}

/// The box: keys, a manifest directory, a URL, atoll's config.
struct Box {
    keys: PathBuf,
    manifests: PathBuf,
    config: String,
    kubelet: String,
    url: Url,
    /// Last: removed (its mounts first) when the rest is gone.
    dir: crate::common::Scratch,
}

impl Box {
    fn new(name: &str) -> Box {
        let dir = crate::common::Scratch::new(&format!("adversary-{name}"));
        let (keys, manifests) = (dir.join("keys"), dir.join("manifests"));
        std::fs::create_dir_all(&keys).unwrap();
        std::fs::create_dir_all(&manifests).unwrap();
        signing::key(&keys, "fleet");
        let age_key = keys.join("age.key");
        stock("age-keygen", &["-o", age_key.to_str().unwrap()]);
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&age_key, std::fs::Permissions::from_mode(0o600)).unwrap();
        let own = dir.join("atoll.yaml");
        std::fs::write(
            &own,
            format!(
                "apiVersion: atoll.io/v1alpha1\nkind: AtollConfiguration\ndecryptionKeyFile: {}\nmanifestTrust:\n  publicKeys: [{}]\n  require: true\n",
                age_key.display(),
                keys.join("fleet.pub").display()
            ),
        )
        .unwrap();
        let url = Url::start();
        Box {
            kubelet: format!("staticPodURL: http://127.0.0.1:{}/pods\nhttpCheckFrequency: 1s\n", url.port),
            config: format!("--atoll-config={}", own.display()),
            dir,
            keys,
            manifests,
            url,
        }
    }

    fn start(&self, tb: &Testbed, extra: &str) -> Agent {
        Agent::start(tb, &self.dir, &format!("{}{extra}", self.kubelet), &[&self.config], &[])
    }

    fn sign(&self, text: &[u8], comment: &str) -> Vec<u8> {
        let staged = self.keys.join("staged.bin");
        std::fs::write(&staged, text).unwrap();
        signing::minisign(&self.keys, &["-S", "-W", "-s", "fleet.key", "-m", "staged.bin", "-t", comment]);
        std::fs::read(self.keys.join("staged.bin.minisig")).unwrap()
    }

    /// The fleet's release: the signature first, then the file, each renamed into place.
    fn release(&self, name: &str, bytes: &[u8], serial: u32) {
        let sig = self.sign(bytes, &format!("serial={serial}"));
        self.put(&format!("{name}.minisig"), &sig);
        self.put(name, bytes);
    }

    fn put(&self, name: &str, bytes: &[u8]) {
        let staged = self.keys.join("put");
        std::fs::write(&staged, bytes).unwrap();
        std::fs::rename(&staged, self.manifests.join(name)).unwrap();
    }

    /// A file encrypted to the box's age key.
    fn seal(&self, text: &str) -> Vec<u8> {
        let recipient = stock("age-keygen", &["-y", self.keys.join("age.key").to_str().unwrap()]);
        let (plain, sealed) = (self.keys.join("plain"), self.keys.join("sealed"));
        std::fs::write(&plain, text).unwrap();
        let _ = std::fs::remove_file(&sealed);
        stock("age", &["-r", recipient.trim(), "-o", sealed.to_str().unwrap(), plain.to_str().unwrap()]);
        std::fs::remove_file(&plain).unwrap();
        std::fs::read(&sealed).unwrap()
    }
}

fn stock(cmd: &str, args: &[&str]) -> String {
    let out = Command::new(cmd).args(args).output().unwrap_or_else(|e| panic!("{cmd}: {e} (the test bed installs it)"));
    assert!(out.status.success(), "{cmd} {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// `cmd` run as uid and gid 65534 with no groups: (success, what it printed).
fn as_nobody(cmd: &str) -> (bool, String) {
    let out = Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups", "sh", "-c", cmd])
        .output()
        .expect("setpriv");
    (out.status.success(), String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Every regular file below `dir` that holds `needle`, not descending into mount points (a
/// tmpfs is memory, not disk).
fn files_holding(dir: &Path, needle: &[u8]) -> Vec<PathBuf> {
    let mounts = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    let mut found = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let (p, Ok(t)) = (e.path(), e.file_type()) else { continue };
            if t.is_dir() && !mounts.lines().any(|l| l.split(' ').nth(4) == p.to_str()) {
                stack.push(p);
            } else if t.is_file() && std::fs::read(&p).is_ok_and(|b| b.windows(needle.len()).any(|w| w == needle)) {
                found.push(p);
            }
        }
    }
    found
}

fn get(port: u16, path: &str) -> (u16, String) {
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    write!(s, "GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").unwrap();
    let mut text = String::new();
    s.read_to_string(&mut text).unwrap();
    let code = text.split_whitespace().nth(1).and_then(|c| c.parse().ok()).unwrap_or(0);
    (code, text)
}

#[test]
fn a_directory_writer_a_url_server_and_a_local_user_cannot_get_around_trust_or_secrets() {
    let _room = common::room(module_path!());
    let _turn = common::one_agent_at_a_time();
    let tb = testbed();
    let b = Box::new("three");
    let password = format!("s3aled-{}-Qx", std::process::id());
    let secret =
        format!("apiVersion: v1\nkind: Secret\nmetadata: {{name: db}}\nstringData: {{password: {password}}}\n");
    b.release("db.yaml.age", &b.seal(&secret), 1);
    b.release("web.yaml", web("6").as_bytes(), 6);
    b.url.serve(&edge("5"), Some(b.sign(edge("5").as_bytes(), "serial=5")));
    let port = free_port();
    let mut agent = b.start(tb, &format!("readOnlyPort: {port}\n"));
    let (_, web6) = eventually(Duration::from_secs(90), "web 6 running", || version(&agent, "web-tb"));
    eventually(Duration::from_secs(60), "edge 5 running", || version(&agent, "edge-tb"));
    // A container running as uid 1000 reads its Secret, from the volume and the environment.
    let id = tb.running_in("web-tb").pop().expect("web's container").id;
    let exec = |script: &str| {
        let cmd = vec!["sh".to_string(), "-c".to_string(), script.to_string()];
        let r = smol::block_on(tb.cri().exec_sync(&id, cmd, Duration::from_secs(10))).expect("ExecSync");
        String::from_utf8_lossy(&r.stdout).into_owned()
    };
    assert_eq!(exec("id -u; cat /etc/db/password; echo; echo $PW"), format!("1000\n{password}\n{password}\n"));

    // 1. A directory writer without the key. The fleet's current file copied under a name that
    // sorts later, and a pod nobody signed.
    for suffix in ["", ".minisig"] {
        let bytes = std::fs::read(b.manifests.join(format!("web.yaml{suffix}"))).unwrap();
        b.put(&format!("zz-web.yaml{suffix}"), &bytes);
    }
    b.put("plain.yaml", edge("x").replace("name: edge", "name: plain").as_bytes());
    // The fleet pushes version 7: it runs, and the copy cannot hold it back.
    b.release("web.yaml", web("7").as_bytes(), 7);
    let (_, web7) = eventually(Duration::from_secs(90), "web 7 running", || {
        version(&agent, "web-tb").filter(|(v, uid)| v == "7" && *uid != web6)
    });
    // Version 6 put back, with its own good signature: refused; 7 keeps running.
    let old = b.sign(web("6").as_bytes(), "serial=6");
    b.put("web.yaml.minisig", &old);
    b.put("web.yaml", web("6").as_bytes());
    eventually(Duration::from_secs(30), "the replay refused", || {
        agent
            .log()
            .contains("web.yaml: signature: version serial=6 of pod default/web-tb is older than serial=7")
            .then_some(())
    });

    // 2. Whoever answers the URL: an unsigned empty body, an old signed payload, an empty body
    // signed long ago, one signed for another box. None of them changes the URL's pod.
    for (body, sig) in [
        (String::new(), None),
        (edge("4"), Some(b.sign(edge("4").as_bytes(), "serial=4"))),
        ("\n".to_string(), Some(b.sign(b"\n", "serial=3"))),
        (edge("9"), Some(b.sign(edge("9").as_bytes(), "serial=9 node=gw-2"))),
    ] {
        b.url.serve(&body, sig);
        std::thread::sleep(Duration::from_millis(2500));
        assert_eq!(version(&agent, "edge-tb").map(|v| v.0).as_deref(), Some("5"), "after {body:?}");
    }
    assert_eq!(version(&agent, "web-tb").map(|v| v.1), Some(web7.clone()));
    assert!(tb.sandboxes_of("plain-tb").is_empty(), "an unsigned pod ran");
    assert!(agent.log().contains("signed for node gw-2, not for this node (tb)"), "{}", agent.log());

    // kill -9 and a start with the URL down: the same versions come back (from the kept
    // copies and the URL's cache, checked again), not the copy, not the replay.
    agent.signal("KILL");
    let _ = agent.child.wait();
    b.url.down();
    let agent = b.start(tb, &format!("readOnlyPort: {port}\n"));
    eventually(Duration::from_secs(60), "the first full sync after the restart", || {
        agent.log().contains("first full sync done").then_some(())
    });
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(version(&agent, "web-tb").map(|v| v.1), Some(web7), "{}", agent.log());
    assert_eq!(version(&agent, "edge-tb").map(|v| v.0).as_deref(), Some("5"));
    assert!(tb.sandboxes_of("plain-tb").is_empty(), "an unsigned pod ran");

    // 3. An unprivileged local user: not through the files, not through the read-only port.
    let uid = agent.pod("web-tb").unwrap()["metadata"]["uid"].as_str().unwrap().to_string();
    let state = b.dir.join("state");
    let volume = state.join(format!("pods/{uid}/volumes/kubernetes.io~secret/db"));
    assert!(std::fs::read_to_string(volume.join("password")).is_ok_and(|p| p == password), "the volume, as root");
    let everything = format!(
        "cat {0}/password; grep -rl {password} {1} {2} 2>/dev/null",
        volume.display(),
        b.dir.display(),
        state.display()
    );
    let (_, seen) = as_nobody(&everything);
    assert!(!seen.contains(&password) && seen.trim().is_empty(), "uid 65534 read: {seen}");
    // The state directory opened up by mistake: the Secret volumes' own directory still holds.
    use std::os::unix::fs::PermissionsExt;
    for d in [state.clone(), state.join("pods"), state.join(format!("pods/{uid}"))] {
        std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    let (ok, seen) = as_nobody(&format!("cat {}/password", volume.display()));
    assert!(!ok && !seen.contains(&password), "uid 65534 read the Secret through an opened state directory");
    for path in ["/objects", "/pods/default/web-tb/objects", "/logs/default/web-tb/c"] {
        assert_eq!(get(port, path).0, 403, "{path} on the read-only port");
    }
    let (code, pods) = get(port, "/pods");
    assert!(code == 200 && pods.contains("web-tb") && !pods.contains(&password), "{pods}");

    // 4. Someone with the disk: no plain text of the encrypted Secret anywhere under the state.
    assert_eq!(files_holding(&state, password.as_bytes()), Vec::<PathBuf>::new());
    drop(agent);
    // The next start makes the state directory private again.
    let agent = b.start(tb, "");
    eventually(Duration::from_secs(30), "atoll started", || agent.log().contains("first full sync").then_some(()));
    assert_eq!(std::fs::metadata(&state).unwrap().permissions().mode() & 0o777, 0o700);
    assert!(agent.log().contains("making it private"), "{}", agent.log());
    for f in ["web.yaml", "zz-web.yaml", "db.yaml.age", "plain.yaml"] {
        let _ = std::fs::remove_file(b.manifests.join(f));
    }
    eventually(Duration::from_secs(60), "web gone", || tb.sandboxes_of("web-tb").is_empty().then_some(()));
}

#[test]
fn a_rollback_of_an_encrypted_pod_writes_no_plain_text() {
    let _room = common::room(module_path!());
    let _turn = common::one_agent_at_a_time();
    let tb = testbed();
    let b = Box::new("rollback");
    let token = format!("t0ken-{}-Wv", std::process::id());
    let pod = |probe: &str| {
        format!(
            "apiVersion: v1\nkind: Pod\nmetadata:\n  name: sealed\n  annotations: {{atoll.io/rollback-after: 3s}}\nspec:\n  hostNetwork: true\n  terminationGracePeriodSeconds: 0\n  containers:\n  - name: c\n    image: docker.io/library/busybox:1.36\n    command: [sleep, '3600']\n    env: [{{name: TOKEN, value: {token}}}]\n    readinessProbe: {{exec: {{command: [{probe}]}}, periodSeconds: 1}}\n"
        )
    };
    b.release("sealed.yaml.age", &b.seal(&pod("'true'")), 1);
    b.url.serve("", Some(b.sign(b"", "serial=1")));
    let agent = b.start(tb, "");
    let ready = |agent: &Agent| {
        agent.pod("sealed-tb").filter(|p| {
            let conditions = p["status"]["conditions"].as_array().cloned().unwrap_or_default();
            conditions.iter().any(|c| c["type"] == "Ready" && c["status"] == "True")
        })
    };
    let v1 = eventually(Duration::from_secs(60), "version 1 Ready", || ready(&agent))["metadata"]["uid"].clone();
    std::thread::sleep(Duration::from_secs(2)); // known good
    b.release("sealed.yaml.age", &b.seal(&pod("'false'")), 2);
    let back = eventually(Duration::from_secs(60), "rolled back to version 1", || {
        ready(&agent).filter(|p| p["metadata"]["uid"] == v1 && p["status"]["message"].is_string())
    });
    assert!(back["status"]["message"].as_str().unwrap().starts_with("rolled back from"), "{back}");
    let state = b.dir.join("state");
    assert!(std::fs::read_dir(state.join("rollback")).unwrap().count() > 0, "no rollback record");
    assert_eq!(files_holding(&state, token.as_bytes()), Vec::<PathBuf>::new(), "plain text on disk");
    std::fs::remove_file(b.manifests.join("sealed.yaml.age")).unwrap();
    eventually(Duration::from_secs(60), "the pod gone", || tb.sandboxes_of("sealed-tb").is_empty().then_some(()));
    drop(agent);
}

/// GET /healthz within `limit`: whether it answered 200 in time.
fn healthz(port: u16, limit: Duration) -> Result<Duration, String> {
    let started = std::time::Instant::now();
    let addr = std::net::SocketAddr::from(([127, 0, 0, 1], port));
    let mut s = TcpStream::connect_timeout(&addr, limit).map_err(|e| e.to_string())?;
    s.set_read_timeout(Some(limit)).map_err(|e| e.to_string())?;
    s.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").map_err(|e| e.to_string())?;
    let mut text = String::new();
    s.read_to_string(&mut text).map_err(|e| format!("{e} after {:?}", started.elapsed()))?;
    match text.starts_with("HTTP/1.1 200") && started.elapsed() < limit {
        true => Ok(started.elapsed()),
        false => Err(format!("{text:?} after {:?}", started.elapsed())),
    }
}

#[test]
fn a_fifo_swapped_into_the_manifest_or_images_directory_never_stalls_the_agent() {
    let _room = common::room(module_path!());
    let _turn = common::one_agent_at_a_time();
    let tb = testbed();
    let dir = crate::common::Scratch::new("adversary-fifo");
    let manifests = dir.join("manifests");
    std::fs::create_dir_all(&manifests).unwrap();
    std::fs::write(manifests.join("good.yaml"), edge("1").replace("name: edge", "name: good")).unwrap();
    let port = free_port();
    let mut agent = Agent::start(tb, &dir, &format!("healthzPort: {port}\nfileCheckFrequency: 1s\n"), &[], &[]);
    let good = eventually(Duration::from_secs(60), "the good pod running", || version(&agent, "good-tb"));
    let fifo = |at: &Path| {
        rustix::fs::mkfifoat(rustix::fs::CWD, at, rustix::fs::Mode::from_raw_mode(0o644)).expect("mkfifo");
    };
    // One sits in the images directory; another is swapped with a manifest, again and again,
    // so that one is there between the scan's look at the name and its open.
    fifo(&dir.join("state/images/stuck.tar"));
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let swapper = {
        let (stop, manifests) = (stop.clone(), manifests.clone());
        let pod = edge("1").replace("name: edge", "name: swapped");
        std::thread::spawn(move || {
            let mut swaps = 0u32;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                std::fs::write(manifests.join(".regular"), &pod).unwrap();
                std::fs::rename(manifests.join(".regular"), manifests.join("swap.yaml")).unwrap();
                let _ = std::fs::remove_file(manifests.join(".fifo"));
                rustix::fs::mkfifoat(rustix::fs::CWD, manifests.join(".fifo"), rustix::fs::Mode::from_raw_mode(0o644))
                    .unwrap();
                std::fs::rename(manifests.join(".fifo"), manifests.join("swap.yaml")).unwrap();
                swaps += 1;
            }
            swaps
        })
    };
    let mut slowest = Duration::ZERO;
    for _ in 0..60 {
        let took = healthz(port, Duration::from_secs(1));
        if took.is_err() {
            stop.store(true, std::sync::atomic::Ordering::Relaxed);
        }
        slowest = slowest.max(took.unwrap_or_else(|e| panic!("healthz did not answer within 1 s: {e}")));
        std::thread::sleep(Duration::from_millis(100));
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let swaps = swapper.join().unwrap();
    eprintln!("{swaps} swaps; healthz answered within {slowest:?} every time");
    assert!(swaps > 100, "the FIFO was swapped in only {swaps} times");
    std::fs::remove_file(manifests.join("swap.yaml")).unwrap();
    assert!(agent.alive());
    assert_eq!(version(&agent, "good-tb"), Some(good), "the good pod was disturbed");
    let (code, out, _) = agent.cli(&["images", "-o", "json"]);
    assert_eq!(code, 0, "the images directory's task answers");
    assert!(!out.contains("stuck.tar") || out.contains("not a regular file"), "{out}");
    std::fs::remove_file(manifests.join("good.yaml")).unwrap();
    eventually(Duration::from_secs(60), "the pods gone", || {
        (tb.sandboxes_of("good-tb").is_empty() && tb.sandboxes_of("swapped-tb").is_empty()).then_some(())
    });
    drop(agent);
    let _ = std::fs::remove_dir_all(&dir);
}
