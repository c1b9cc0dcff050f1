//! Side-loading an image: atoll's import (read, hash, decompress, check the tar, pipe into
//! `ctr images import -`) next to `ctr images import FILE` for the same tarball, on the private
//! containerd test bed; and the disk the import needs beyond the unpacked image (sampled from
//! the test bed's filesystem while it runs). Each round's image has a layer of fresh random
//! bytes, so every import unpacks (containerd skips a layer it already has). Prints figures;
//! asserts nothing about time.
//!
//!   cargo bench --bench images     (ATOLL_BENCH_ROUNDS=5, a 64 MiB layer; under `cargo test`
//!                                   one round of 4 MiB)

#[path = "../tests/common/mod.rs"]
mod common;

use common::archives::{sh, Archives};
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

fn median(v: &mut [Duration]) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn used_bytes(path: &Path) -> u64 {
    let st = rustix::fs::statvfs(path).unwrap();
    (st.f_blocks - st.f_bfree) * st.f_frsize
}

/// Runs `f` while sampling the filesystem of `path`: (what `f` returned, the most it used above
/// the start).
fn peak_during<T>(path: &Path, f: impl FnOnce() -> T) -> (T, u64) {
    let start = used_bytes(path);
    let (stop, peak) = (Arc::new(AtomicBool::new(false)), Arc::new(AtomicU64::new(0)));
    let sampler = {
        let (stop, peak, path) = (stop.clone(), peak.clone(), path.to_path_buf());
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                peak.fetch_max(used_bytes(&path).saturating_sub(start), Ordering::Relaxed);
                std::thread::sleep(Duration::from_millis(5));
            }
        })
    };
    let out = f();
    stop.store(true, Ordering::Relaxed);
    let _ = sampler.join();
    (out, peak.load(Ordering::Relaxed))
}

fn main() {
    let bench = std::env::args().any(|a| a == "--bench");
    let rounds: usize =
        std::env::var("ATOLL_BENCH_ROUNDS").ok().and_then(|v| v.parse().ok()).unwrap_or(if bench { 5 } else { 1 });
    let layer_mib: usize = if bench { 64 } else { 4 };
    let tb = common::testbed();
    let socket = tb.var("ATOLL_TB_SOCKET").to_string();
    let ctr = tb.var("ATOLL_TB_CTR").to_string();
    let root = Path::new(tb.var("ATOLL_TB_DIR")).to_path_buf();
    let archives = Archives::new(tb, "bench");
    let target = atoll::images::import::Containerd { ctr: ctr.clone().into(), address: socket.clone().into() };
    let work = std::env::temp_dir().join(format!("atoll-bench-images-{}", std::process::id()));
    std::fs::create_dir_all(&work).unwrap();
    let random = |n: usize| {
        let mut bytes = vec![0u8; n];
        std::fs::File::open("/dev/urandom").and_then(|mut f| std::io::Read::read_exact(&mut f, &mut bytes)).unwrap();
        bytes
    };
    let (mut theirs, mut ours, mut ours_zst) = (vec![], vec![], vec![]);
    let (mut peak_theirs, mut peak_ours, mut unpacked) = (0u64, 0u64, 0u64);
    let mut size = 0u64;
    for round in 0..rounds {
        for who in ["ctr", "atoll", "atoll-zstd"] {
            let image = format!("atoll.test/bench-{who}:{round}");
            let text =
                String::from_utf8_lossy(&random(layer_mib << 20).iter().map(|b| b'a' + b % 26).collect::<Vec<_>>())
                    .into_owned();
            let compress = if who == "atoll-zstd" { "zstd" } else { "" };
            let file = work.join(format!("{who}.tar"));
            let bytes = if compress.is_empty() {
                archives.docker_with_layer(&image, &text)
            } else {
                let plain = work.join("plain.tar");
                std::fs::write(&plain, archives.docker_with_layer(&image, &text)).unwrap();
                let out = std::process::Command::new("zstd").args(["-q", "-c", "-3"]).arg(&plain).output().unwrap();
                out.stdout
            };
            std::fs::write(&file, &bytes).unwrap();
            size = size.max(bytes.len() as u64);
            sh("sync");
            let present = std::collections::BTreeSet::new();
            let start = Instant::now();
            let ((), peak) = peak_during(&root, || match who {
                "ctr" => sh(&format!("{ctr} --address {socket} -n k8s.io images import {} >/dev/null", file.display())),
                _ => {
                    atoll::images::import::import_file(&file, &target, &present, None, &mut |_, _| {}).expect("import");
                }
            });
            let took = start.elapsed();
            match who {
                "ctr" => {
                    theirs.push(took);
                    peak_theirs = peak_theirs.max(peak);
                }
                "atoll" => {
                    ours.push(took);
                    peak_ours = peak_ours.max(peak);
                }
                _ => ours_zst.push(took),
            }
            unpacked = unpacked.max((layer_mib as u64) << 20);
            sh(&format!("{ctr} --address {socket} -n k8s.io images rm {image} >/dev/null"));
            let _ = std::fs::remove_file(&file);
        }
    }
    let (t, o, z) = (median(&mut theirs), median(&mut ours), median(&mut ours_zst));
    println!("image import into containerd, a {layer_mib} MiB layer of fresh bytes, {rounds} rounds, median:");
    println!("| import | time | ratio to ctr |");
    println!("|---|---|---|");
    println!(
        "| `ctr images import FILE` (plain tar, {:.1} MB) | {:.0} ms | 1.00 |",
        size as f64 / 1e6,
        t.as_secs_f64() * 1e3
    );
    println!(
        "| atoll, the same plain tar | {:.0} ms | {:.2} |",
        o.as_secs_f64() * 1e3,
        o.as_secs_f64() / t.as_secs_f64()
    );
    println!("| atoll, zstd -3 of it | {:.0} ms | {:.2} |", z.as_secs_f64() * 1e3, z.as_secs_f64() / t.as_secs_f64());
    println!();
    println!(
        "disk used above the start during the import, at most: ctr {:.1} MiB, atoll {:.1} MiB (the layer unpacked: {:.1} MiB, plus its blob in containerd's content store)",
        peak_theirs as f64 / (1 << 20) as f64,
        peak_ours as f64 / (1 << 20) as f64,
        unpacked as f64 / (1 << 20) as f64
    );
    let _ = std::fs::remove_dir_all(&work);
}
