//! The downtime of a fleet update whose image must be pulled, next to the same update with the
//! image on the node, on the private containerd test bed. The new image (a layer of fresh random
//! bytes) is pulled from the test bed's registry through a proxy on 127.0.0.1 that serves at a
//! fixed rate, as a slow link would. Downtime: the old container's finishedAt -> the new
//! container's startedAt (the runtime's timestamps). With pull before swap the pull happens
//! while the old version runs, so both should be the same stop plus start. Prints figures;
//! asserts nothing about time.
//!
//!   cargo bench --bench updates     (ATOLL_BENCH_ROUNDS=3, ATOLL_BENCH_LAYER_MIB=16 at 4 MiB/s; under
//!                                    `cargo test` one round of 1 MiB)

#[path = "../tests/common/mod.rs"]
mod common;

use common::archives::Archives;
use common::eventually;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::time::{Duration, Instant};

/// A proxy on 127.0.0.1 to `to` that sends what comes back at most `rate` bytes a second.
fn slow_proxy(to: String, rate: usize) -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for client in listener.incoming().flatten() {
            let Ok(server) = TcpStream::connect(&to) else { continue };
            let (mut c_in, mut s_out) = (client.try_clone().unwrap(), server.try_clone().unwrap());
            std::thread::spawn(move || {
                let _ = std::io::copy(&mut c_in, &mut s_out);
            });
            let (mut s_in, mut c_out) = (server, client);
            std::thread::spawn(move || {
                let mut buf = vec![0u8; rate / 20];
                loop {
                    let t = Instant::now();
                    match s_in.read(&mut buf) {
                        Ok(0) | Err(_) => break,
                        Ok(n) => {
                            if c_out.write_all(&buf[..n]).is_err() {
                                break;
                            }
                        }
                    }
                    std::thread::sleep(Duration::from_millis(50).saturating_sub(t.elapsed()));
                }
                let _ = c_out.shutdown(std::net::Shutdown::Write);
            });
        }
    });
    port
}

/// The running container of pod `name`: its ID.
fn running(tb: &common::Testbed, name: &str) -> Option<String> {
    tb.running_in(name).into_iter().next().map(|c| c.id)
}

fn pod(image: &str, round: usize) -> String {
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata: {{name: upd, labels: {{round: \"{round}\"}}}}\nspec:\n  hostNetwork: true\n  terminationGracePeriodSeconds: 0\n  containers:\n  - name: c\n    image: {image}\n    imagePullPolicy: IfNotPresent\n    command: [sleep, '3600']\n"
    )
}

/// Writes the new version and waits for it: (downtime, manifest -> new container started).
fn update(tb: &common::Testbed, manifests: &Path, text: &str) -> (Duration, Duration) {
    let old = running(tb, "upd-tb").expect("the old version running");
    // atoll removes the old container right after it stops: its finishedAt is read while it
    // is there (a status call every 10 ms, the same in both kinds of update).
    let watcher = {
        let (cri, old) = (tb.cri(), old.clone());
        std::thread::spawn(move || {
            let mut finished = 0;
            while let Ok(st) = smol::block_on(cri.container_status(&old, false)) {
                finished = st.status.map_or(finished, |s| if s.finished_at > 0 { s.finished_at } else { finished });
                std::thread::sleep(Duration::from_millis(10));
            }
            finished
        })
    };
    let t0 = Instant::now();
    std::fs::write(manifests.join(".upd.tmp"), text).unwrap();
    std::fs::rename(manifests.join(".upd.tmp"), manifests.join("upd.yaml")).unwrap();
    let new =
        eventually(Duration::from_secs(300), "the new version running", || running(tb, "upd-tb").filter(|c| *c != old));
    let took = t0.elapsed();
    let finished = watcher.join().unwrap();
    let started = smol::block_on(tb.cri().container_status(&new, false)).unwrap().status.unwrap().started_at;
    (Duration::from_nanos(started.saturating_sub(finished).max(0) as u64), took)
}

/// `ctr images push`, tried again after a failure (a push right after an import has been
/// seen to end with "unexpected EOF" reading the new content once).
fn push(tb: &common::Testbed, image: &str) {
    for _ in 0..2 {
        let out = std::process::Command::new(tb.var("ATOLL_TB_CTR"))
            .args([
                "--address",
                tb.var("ATOLL_TB_SOCKET"),
                "--namespace",
                "k8s.io",
                "images",
                "push",
                "--plain-http",
                image,
            ])
            .output()
            .expect("run ctr");
        if out.status.success() {
            return;
        }
        eprintln!("ctr images push {image}: {}; trying again", String::from_utf8_lossy(&out.stderr).trim());
        std::thread::sleep(Duration::from_secs(1));
    }
    tb.ctr(&["images", "push", "--plain-http", image]);
}

fn median(v: &mut [Duration]) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn main() {
    let bench = std::env::args().any(|a| a == "--bench");
    let rounds: usize =
        std::env::var("ATOLL_BENCH_ROUNDS").ok().and_then(|v| v.parse().ok()).unwrap_or(if bench { 3 } else { 1 });
    let layer_mib: usize =
        std::env::var("ATOLL_BENCH_LAYER_MIB").ok().and_then(|v| v.parse().ok()).unwrap_or(if bench { 16 } else { 1 });
    let rate = 4 << 20;
    let tb = common::testbed();
    let registry = tb.var("ATOLL_TB_REGISTRY").to_string();
    let proxy = slow_proxy(registry.clone(), rate);
    // containerd reads a registry's hosts.toml when it pulls: the proxy speaks plain HTTP too.
    let hosts = Path::new(tb.var("ATOLL_TB_DIR")).join(format!("certs.d/127.0.0.1:{proxy}"));
    std::fs::create_dir_all(&hosts).unwrap();
    std::fs::write(
        hosts.join("hosts.toml"),
        format!("server = \"http://127.0.0.1:{proxy}\"\n\n[host.\"http://127.0.0.1:{proxy}\"]\n  capabilities = [\"pull\", \"resolve\"]\n"),
    )
    .unwrap();
    let work = std::env::temp_dir().join(format!("atoll-bench-updates-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&work);
    let manifests = work.join("manifests");
    std::fs::create_dir_all(&manifests).unwrap();
    let archives = Archives::new(tb, "updates");
    std::fs::write(manifests.join("upd.yaml"), pod(&tb.busybox, 0)).unwrap();
    let agent = common::Agent::start(tb, &work, "", &[], &[]);
    eventually(Duration::from_secs(60), "the first version running", || running(tb, "upd-tb"));
    let (mut present, mut pulled, mut pulled_total) = (vec![], vec![], vec![]);
    for round in 0..rounds {
        // The image on the node: only the command's round changes.
        present.push(update(tb, &manifests, &pod(&tb.busybox, 3 * round + 1)).0);
        // A new image, in the registry only, pulled through the slow proxy.
        let pushed = format!("{registry}/atoll/update:{round}-{}", std::process::id());
        let mut bytes = vec![0u8; layer_mib << 20];
        std::fs::File::open("/dev/urandom").and_then(|mut f| f.read_exact(&mut bytes)).unwrap();
        let text: String = bytes.iter().map(|b| char::from(b'a' + b % 26)).collect();
        let file = work.join("image.tar");
        std::fs::write(&file, archives.docker_with_layer(&pushed, &text)).unwrap();
        tb.ctr(&["images", "import", file.to_str().unwrap()]);
        push(tb, &pushed);
        // Through CRI: every name of the image goes (the CRI plugin keeps one by its id), and
        // with the last its layer, so the pull fetches it all.
        smol::block_on(tb.cri().remove_image(&pushed)).unwrap();
        let through_proxy = pushed.replacen(&registry, &format!("127.0.0.1:{proxy}"), 1);
        let (down, total) = update(tb, &manifests, &pod(&through_proxy, 3 * round + 2));
        pulled.push(down);
        pulled_total.push(total);
        std::fs::write(manifests.join("upd.yaml"), pod(&tb.busybox, 3 * round + 3)).unwrap();
        eventually(Duration::from_secs(60), "back on busybox", || {
            let c = running(tb, "upd-tb")?;
            let st = smol::block_on(tb.cri().container_status(&c, false)).ok()?.status?;
            (st.image.map(|i| i.image).unwrap_or_default().contains("busybox")).then_some(())
        });
        smol::block_on(tb.cri().remove_image(&through_proxy)).unwrap();
    }
    let ms = |d: Duration| format!("{:.0} ms", d.as_secs_f64() * 1e3);
    let (p, d) = (median(&mut present), median(&mut pulled));
    println!(
        "update downtime (old container finished -> new one started, runtime timestamps), {rounds} rounds, median:"
    );
    println!("| update | downtime | manifest -> new container started |");
    println!("|---|---|---|");
    println!("| the new image already on the node | {} | - |", ms(p));
    println!(
        "| a new {layer_mib} MiB image pulled at {} MiB/s | {} ({:.2}x) | {} |",
        rate >> 20,
        ms(d),
        d.as_secs_f64() / p.as_secs_f64().max(1e-6),
        ms(median(&mut pulled_total))
    );
    std::fs::remove_file(manifests.join("upd.yaml")).unwrap();
    eventually(Duration::from_secs(60), "the pod gone", || running(tb, "upd-tb").is_none().then_some(()));
    drop(agent);
    let _ = std::fs::remove_dir_all(&work);
    let _ = std::fs::remove_dir_all(&hosts);
}
