//! atoll against the raw CRI floor on the private containerd test bed. Prints a table of
//! figures; asserts nothing about time.
//!
//! 1. pod start: manifest written (atomic rename) -> container RUNNING seen through CRI, host
//!    network and bridge, next to the same CRI calls made directly (the floor);
//! 2. teardown: manifest removed -> sandbox gone (grace 0), next to its floor;
//! 3. crash-to-restart: the container exits -> the new one RUNNING (first restart, no back-off);
//! 4. batch: 10 and 50 manifests at once -> all RUNNING, next to the same calls made
//!    concurrently;
//! 5. footprint: the `atoll` binary's RSS and CPU with 0, 10 and 50 pods, each with an HTTP
//!    liveness and a readiness probe at 1 s, over a window, from /proc.
//!
//!   cargo bench --bench suite        (ATOLL_BENCH_ROUNDS=20, ATOLL_BENCH_WINDOW=60 by default;
//!                                     under `cargo test` a short smoke run)

#[path = "../tests/common/mod.rs"]
mod common;

use atoll::agent::{self, Command};
use atoll::config::Settings;
use atoll::cri::api::{
    ContainerConfig, ContainerFilter, ContainerMetadata, ContainerState, ImageSpec, PodSandboxFilter,
};
use atoll::cri::Cri;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime};

fn pct(v: &[Duration], p: usize) -> Duration {
    let mut v = v.to_vec();
    v.sort();
    v[(v.len() * p / 100).min(v.len() - 1)]
}

fn ms(d: Duration) -> String {
    format!("{:.0} ms", d.as_secs_f64() * 1e3)
}

fn by_name(name: &str) -> HashMap<String, String> {
    HashMap::from([("io.kubernetes.pod.name".to_string(), name.to_string())])
}

fn running(cri: &Cri, pod: &str) -> Vec<atoll::cri::api::Container> {
    smol::block_on(cri.list_containers(Some(ContainerFilter { label_selector: by_name(pod), ..Default::default() })))
        .unwrap()
        .into_iter()
        .filter(|c| c.state == ContainerState::ContainerRunning as i32)
        .collect()
}

fn sandboxes(cri: &Cri, pod: &str) -> usize {
    smol::block_on(cri.list_pod_sandbox(Some(PodSandboxFilter { label_selector: by_name(pod), ..Default::default() })))
        .unwrap()
        .len()
}

fn wait(what: &str, mut ok: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(120);
    while !ok() {
        assert!(Instant::now() < deadline, "timed out: {what}");
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// A container that exits on SIGTERM: teardown then measures atoll, not kubelet's 2 s minimum
/// grace (which atoll keeps, and which a PID 1 that ignores SIGTERM would wait out).
const STOPS_ON_TERM: &str = "trap \"exit 0\" TERM; sleep 3600 & wait";

fn pod_yaml(name: &str, host: bool, command: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\nspec:\n  hostNetwork: {host}\n  terminationGracePeriodSeconds: 0\n  containers:\n  - name: c\n    image: docker.io/library/busybox:1.36\n    command: [sh, -c, '{command}']\n"
    )
}

/// Writes a manifest as editors and config tools do: a temporary file renamed into place.
fn drop_manifest(dir: &Path, name: &str, yaml: &str) {
    let tmp = dir.join(format!(".{name}.tmp"));
    std::fs::write(&tmp, yaml).unwrap();
    std::fs::rename(&tmp, dir.join(format!("{name}.yaml"))).unwrap();
}

/// The agent in this process: `atoll run`'s own runner, on the manifests directory. Dropping
/// the sender stops it (pods keep running, as under kubelet).
fn start_agent(
    tb: &common::Testbed,
    manifests: &Path,
) -> (smol::Task<Result<(), String>>, smol::channel::Sender<Command>) {
    let dir = manifests.parent().expect("manifests in a bench dir").join("agent");
    std::fs::create_dir_all(&dir).unwrap();
    let config = dir.join("kubelet.yaml");
    let text = format!(
        "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\nstaticPodPath: {}\npodLogsDir: {}\nhealthzPort: 0\n",
        manifests.display(),
        tb.logs.display()
    );
    std::fs::write(&config, text).unwrap();
    let args = [
        "run".to_string(),
        format!("--config={}", config.display()),
        format!("--container-runtime-endpoint={}", tb.endpoint),
        format!("--root-dir={}", dir.join("state").display()),
        "--api-socket=none".to_string(),
        "--hostname-override=bench".to_string(),
    ];
    let atoll::cli::Command::Run(flags) = atoll::cli::parse(args).expect("run flags") else { unreachable!() };
    let settings = Settings::load(&flags).expect("settings");
    let (tx, rx) = smol::channel::bounded(1);
    (smol::spawn(agent::run(settings, rx)), tx)
}

/// The floor of a start: RunPodSandbox, its status, ImageStatus, CreateContainer,
/// StartContainer, ContainerStatus. Returns the sandbox's and container's IDs.
async fn floor_start(cri: &Cri, tb: &common::Testbed, name: &str, host: bool) -> (String, String) {
    let config = common::sandbox_config(tb, name, host);
    let sb = cri.run_pod_sandbox(config.clone(), "").await.unwrap();
    cri.pod_sandbox_status(&sb, false).await.unwrap();
    let _ = cri.image_status(&tb.busybox).await.unwrap();
    std::fs::create_dir_all(Path::new(&config.log_directory).join("c")).unwrap();
    let c = ContainerConfig {
        metadata: Some(ContainerMetadata { name: "c".into(), attempt: 0 }),
        image: Some(ImageSpec { image: tb.busybox.clone(), ..Default::default() }),
        command: vec!["sleep".into(), "3600".into()],
        log_path: "c/0.log".into(),
        ..Default::default()
    };
    let id = cri.create_container(&sb, c, config).await.unwrap();
    cri.start_container(&id).await.unwrap();
    cri.container_status(&id, false).await.unwrap();
    (sb, id)
}

/// The floor of a teardown with grace 0: StopContainer, StopPodSandbox, RemovePodSandbox.
async fn floor_teardown(cri: &Cri, sb: &str, id: &str) {
    cri.stop_container(id, Duration::ZERO).await.unwrap();
    cri.stop_pod_sandbox(sb).await.unwrap();
    cri.remove_pod_sandbox(sb).await.unwrap();
}

/// A boxed future, for running a batch of calls concurrently.
type Fut<'a, T> = std::pin::Pin<Box<dyn std::future::Future<Output = T> + 'a>>;

/// Awaits all futures concurrently.
async fn join_all<T>(futures: Vec<Fut<'_, T>>) -> Vec<T> {
    let mut slots: Vec<Option<T>> = futures.iter().map(|_| None).collect();
    let mut pending: Vec<(usize, Fut<'_, T>)> = futures.into_iter().enumerate().collect();
    std::future::poll_fn(|cx| {
        pending.retain_mut(|(i, f)| match f.as_mut().poll(cx) {
            std::task::Poll::Ready(v) => {
                slots[*i] = Some(v);
                false
            }
            std::task::Poll::Pending => true,
        });
        if pending.is_empty() {
            std::task::Poll::Ready(())
        } else {
            std::task::Poll::Pending
        }
    })
    .await;
    slots.into_iter().map(|s| s.expect("every future finished")).collect()
}

struct Row {
    what: String,
    atoll: String,
    floor: String,
    ratio: String,
}

fn row(what: &str, agent: &[Duration], floor: Option<&[Duration]>) -> Row {
    let (am, a90) = (pct(agent, 50), pct(agent, 90));
    let (floor_text, ratio) = match floor {
        Some(f) => {
            let (fm, f90) = (pct(f, 50), pct(f, 90));
            (format!("{} / {}", ms(fm), ms(f90)), format!("{:.2}", am.as_secs_f64() / fm.as_secs_f64()))
        }
        None => ("-".into(), "-".into()),
    };
    Row { what: what.into(), atoll: format!("{} / {}", ms(am), ms(a90)), floor: floor_text, ratio }
}

/// /proc/PID: (CPU seconds, RSS KiB).
fn usage(pid: u32) -> (f64, u64) {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let after: Vec<&str> = stat.get(stat.rfind(')').map_or(0, |i| i + 2)..).unwrap_or("").split_whitespace().collect();
    let ticks: f64 = after.get(11).and_then(|v| v.parse().ok()).unwrap_or(0.0)
        + after.get(12).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
    let rss = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines().find(|l| l.starts_with("VmRSS:")).and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
        })
        .unwrap_or(0);
    (ticks / 100.0, rss)
}

/// The `atoll` binary with `pods` probed pods: (RSS KiB at the end, CPU % of one core over the
/// window, probe attempts per second).
fn footprint(tb: &common::Testbed, base: &Path, pods: usize, window: Duration) -> (u64, f64, f64) {
    let dir = base.join(format!("footprint-{pods}"));
    let manifests = dir.join("manifests");
    std::fs::create_dir_all(&manifests).unwrap();
    let ports: Vec<u16> =
        (0..pods).map(|_| std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()).collect();
    for (i, port) in ports.iter().enumerate() {
        let yaml = format!(
            "apiVersion: v1\nkind: Pod\nmetadata:\n  name: fp{i}\nspec:\n  hostNetwork: true\n  terminationGracePeriodSeconds: 0\n  containers:\n  - name: web\n    image: docker.io/library/busybox:1.36\n    command: [httpd, -f, -p, '127.0.0.1:{port}', -h, /var/www]\n    livenessProbe: {{httpGet: {{host: 127.0.0.1, port: {port}, path: /index.html}}, periodSeconds: 1}}\n    readinessProbe: {{httpGet: {{host: 127.0.0.1, port: {port}, path: /index.html}}, periodSeconds: 1}}\n"
        );
        std::fs::write(manifests.join(format!("fp{i}.yaml")), yaml).unwrap();
    }
    let config = common::kubelet_config(tb, &dir, "");
    let mut child = common::atoll_run(tb, &dir, &config, &dir.join("api.sock"), "bench").spawn().expect("start atoll");
    let cri = tb.cri();
    wait("the footprint pods running", || (0..pods).all(|i| !running(&cri, &format!("fp{i}-bench")).is_empty()));
    std::thread::sleep(Duration::from_secs(3)); // let start-up work settle
    let (cpu0, _) = usage(child.id());
    let probes0 = probe_attempts(&dir);
    std::thread::sleep(window);
    let (cpu1, rss) = usage(child.id());
    let probes1 = probe_attempts(&dir);
    for i in 0..pods {
        std::fs::remove_file(manifests.join(format!("fp{i}.yaml"))).unwrap();
    }
    wait("the footprint pods gone", || (0..pods).all(|i| sandboxes(&cri, &format!("fp{i}-bench")) == 0));
    let _ = child.kill();
    let _ = child.wait();
    let secs = window.as_secs_f64();
    (rss, 100.0 * (cpu1 - cpu0) / secs, (probes1 - probes0) / secs)
}

/// Probe attempts so far, from the agent's own /metrics on its socket.
fn probe_attempts(dir: &Path) -> f64 {
    use std::io::{Read, Write};
    let Ok(mut s) = std::os::unix::net::UnixStream::connect(dir.join("api.sock")) else { return 0.0 };
    let _ = s.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n");
    let mut text = String::new();
    let _ = s.read_to_string(&mut text);
    text.lines()
        .filter(|l| l.starts_with("atoll_prober_probe_total{"))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

fn main() {
    let bench = std::env::args().any(|a| a == "--bench");
    let env = |k: &str, d: u64| std::env::var(k).ok().and_then(|v| v.parse().ok()).unwrap_or(d);
    let rounds = env("ATOLL_BENCH_ROUNDS", if bench { 20 } else { 2 }) as usize;
    let window = Duration::from_secs(env("ATOLL_BENCH_WINDOW", if bench { 60 } else { 3 }));
    let batches: Vec<usize> = if bench { vec![10, 50] } else { vec![3] };
    let footprints: Vec<usize> = if bench { vec![0, 10, 50] } else { vec![0, 2] };

    let tb = common::testbed();
    let cri = tb.cri();
    let base: PathBuf = std::env::temp_dir().join(format!("atoll-bench-suite-{}", std::process::id()));
    let manifests = base.join("manifests");
    std::fs::create_dir_all(&manifests).unwrap();
    let agent = start_agent(tb, &manifests);
    let mut rows = Vec::new();

    // 1 and 2: start and teardown, host network and bridge.
    for host in [true, false] {
        let (mut start, mut stop, mut fstart, mut fstop) = (vec![], vec![], vec![], vec![]);
        for i in 0..rounds {
            let name = format!("s{}{i}", if host { "h" } else { "b" });
            let pod = format!("{name}-bench");
            let t0 = Instant::now();
            drop_manifest(&manifests, &name, &pod_yaml(&name, host, STOPS_ON_TERM));
            wait("start", || !running(&cri, &pod).is_empty());
            start.push(t0.elapsed());
            let t0 = Instant::now();
            std::fs::remove_file(manifests.join(format!("{name}.yaml"))).unwrap();
            wait("teardown", || sandboxes(&cri, &pod) == 0);
            stop.push(t0.elapsed());

            let fname = format!("f{name}");
            let t0 = Instant::now();
            let (sb, id) = smol::block_on(floor_start(&cri, tb, &fname, host));
            fstart.push(t0.elapsed());
            let t0 = Instant::now();
            smol::block_on(floor_teardown(&cri, &sb, &id));
            fstop.push(t0.elapsed());
        }
        let net = if host { "host network" } else { "bridge (CNI)" };
        rows.push(row(&format!("pod start, {net}"), &start, Some(&fstart)));
        rows.push(row(&format!("teardown, {net}"), &stop, Some(&fstop)));
    }

    // 3: crash-to-restart, from the runtime's finishedAt to the new instance RUNNING.
    let mut restart = vec![];
    for i in 0..rounds {
        let name = format!("crash{i}");
        let pod = format!("{name}-bench");
        drop_manifest(&manifests, &name, &pod_yaml(&name, true, "sleep 1; exit 3"));
        wait("the first instance running", || !running(&cri, &pod).is_empty());
        let first = running(&cri, &pod)[0].id.clone();
        wait("the restart", || running(&cri, &pod).iter().any(|c| c.id != first));
        let seen = SystemTime::now();
        let st = smol::block_on(cri.container_status(&first, false)).unwrap().status.unwrap();
        let exited = SystemTime::UNIX_EPOCH + Duration::from_nanos(st.finished_at as u64);
        restart.push(seen.duration_since(exited).unwrap_or_default());
        std::fs::remove_file(manifests.join(format!("{name}.yaml"))).unwrap();
        wait("crash pod gone", || sandboxes(&cri, &pod) == 0);
    }
    rows.push(row("crash -> restarted (first restart)", &restart, None));

    // 4: batches, next to the same calls made concurrently.
    for n in &batches {
        let t0 = Instant::now();
        for i in 0..*n {
            drop_manifest(&manifests, &format!("b{n}x{i}"), &pod_yaml(&format!("b{n}x{i}"), true, STOPS_ON_TERM));
        }
        wait("the batch running", || (0..*n).all(|i| !running(&cri, &format!("b{n}x{i}-bench")).is_empty()));
        let batch = t0.elapsed();
        for i in 0..*n {
            std::fs::remove_file(manifests.join(format!("b{n}x{i}.yaml"))).unwrap();
        }
        wait("the batch gone", || (0..*n).all(|i| sandboxes(&cri, &format!("b{n}x{i}-bench")) == 0));
        let t0 = Instant::now();
        let names: Vec<String> = (0..*n).map(|i| format!("fb{n}x{i}")).collect();
        let starts: Vec<Fut<'_, (String, String)>> =
            names.iter().map(|nm| Box::pin(floor_start(&cri, tb, nm, true)) as Fut<'_, (String, String)>).collect();
        let made = smol::block_on(join_all(starts));
        let floor = t0.elapsed();
        let stops: Vec<Fut<'_, ()>> =
            made.iter().map(|(sb, id)| Box::pin(floor_teardown(&cri, sb, id)) as Fut<'_, ()>).collect();
        smol::block_on(join_all(stops));
        rows.push(row(&format!("batch of {n} pods -> all RUNNING"), &[batch], Some(&[floor])));
    }
    drop(agent);

    let version =
        smol::block_on(cri.version()).map(|v| format!("{} {}", v.runtime_name, v.runtime_version)).unwrap_or_default();
    println!("atoll vs the CRI floor ({version}, private test bed), {rounds} rounds, median / p90:");
    println!("| measurement | atoll | CRI floor | ratio |");
    println!("|---|---|---|---|");
    for r in &rows {
        println!("| {} | {} | {} | {} |", r.what, r.atoll, r.floor, r.ratio);
    }

    // 5: footprint of the real binary.
    println!();
    println!("footprint of `atoll run` (each pod: HTTP liveness + readiness at 1 s), over {window:?}:");
    println!("| pods | RSS | CPU (% of one core) | probe attempts/s | probes/s per 1% of a core |");
    println!("|---|---|---|---|---|");
    for n in &footprints {
        let (rss, cpu, probes) = footprint(tb, &base, *n, window);
        let per = if cpu > 0.0 && probes > 0.0 { format!("{:.0}", probes / cpu) } else { "-".into() };
        println!("| {n} | {:.1} MiB | {cpu:.2}% | {probes:.0} | {per} |", rss as f64 / 1024.0);
    }
    let _ = std::fs::remove_dir_all(&base);
}
