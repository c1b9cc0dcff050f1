//! How fast a manifest change reaches atoll: a manifest written atomically into a watched
//! directory → the file source's snapshot with the new pod. Prints figures; asserts nothing.
//!
//!   cargo bench --bench intake

use atoll::pod::Policy;
use atoll::source::file::{self, FileSourceConfig};
use atoll::source::payload::Intake;
use std::time::{Duration, Instant};

fn main() {
    let rounds = 50;
    let dir = std::env::temp_dir().join(format!("atoll-bench-intake-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let (tx, rx) = smol::channel::bounded(64);
    // A long rescan period: every update measured here comes from inotify.
    let cfg = FileSourceConfig {
        path: dir.clone(),
        check_frequency: Duration::from_secs(3600),
        intake: Intake { node: "bench".into(), policy: Policy::default(), ..Default::default() },
        kept_dir: None,
        versions: None,
        secrets: false,
    };
    let _task = smol::spawn(file::run(cfg, tx));
    smol::block_on(rx.recv()).unwrap(); // the first, empty snapshot

    let mut samples = Vec::with_capacity(rounds);
    for i in 0..rounds {
        let text = format!(
            "apiVersion: v1\nkind: Pod\nmetadata:\n  name: bench\n  labels:\n    round: \"{i}\"\nspec:\n  containers:\n  - name: c\n    image: busybox:1.36\n"
        );
        let tmp = dir.join(".bench.yaml.tmp");
        let start = Instant::now();
        std::fs::write(&tmp, text).unwrap();
        std::fs::rename(&tmp, dir.join("bench.yaml")).unwrap();
        let update = smol::block_on(rx.recv()).unwrap();
        samples.push(start.elapsed());
        assert_eq!(update.pods.len(), 1);
        std::thread::sleep(Duration::from_millis(50));
    }
    samples.sort();
    let pct = |p: usize| samples[(samples.len() * p / 100).min(samples.len() - 1)];
    println!("manifest written (atomic rename) -> file source snapshot, {rounds} rounds, inotify:");
    println!("  min {:?}  median {:?}  p90 {:?}  max {:?}", samples[0], pct(50), pct(90), samples[samples.len() - 1]);
    println!("  a delete waits for quiet (a re-create may follow): {:?}", atoll::dirwatch::FOLD);
    verify_signature(&dir);
    let _ = std::fs::remove_dir_all(&dir);
}

/// A 10 KiB manifest signed with the stock minisign CLI (prehashed, its default), checked
/// as the sources check it.
fn verify_signature(dir: &std::path::Path) {
    let run = |args: &[&str]| {
        let ok = std::process::Command::new("minisign")
            .args(args)
            .current_dir(dir)
            .output()
            .is_ok_and(|o| o.status.success());
        assert!(ok, "minisign {args:?} (the test bed installs it)");
    };
    let mut text = String::from("apiVersion: v1\nkind: Pod\nmetadata:\n  name: signed\n  annotations:\n");
    let mut i = 0;
    while text.len() < 10 * 1024 {
        text.push_str(&format!("    note-{i}: \"{}\"\n", "x".repeat(60)));
        i += 1;
    }
    text.push_str("spec:\n  containers:\n  - {name: c, image: busybox:1.36}\n");
    std::fs::write(dir.join("signed.yaml"), &text).unwrap();
    run(&["-G", "-W", "-f", "-p", "k.pub", "-s", "k.key"]);
    run(&["-S", "-W", "-s", "k.key", "-m", "signed.yaml"]);
    let key = atoll::trust::PublicKey::parse(&std::fs::read_to_string(dir.join("k.pub")).unwrap()).unwrap();
    let trust = atoll::trust::Trust { keys: vec![key], require: true };
    let sig = std::fs::read(dir.join("signed.yaml.minisig")).unwrap();
    let mut samples: Vec<Duration> = (0..200)
        .map(|_| {
            let t = Instant::now();
            trust.check(text.as_bytes(), Some(&sig), "signed.yaml.minisig", "bench").expect("a good signature");
            t.elapsed()
        })
        .collect();
    samples.sort();
    println!(
        "signature check of a {} byte manifest (minisign, prehashed): median {:?}  p90 {:?}",
        text.len(),
        samples[100],
        samples[180]
    );
}
