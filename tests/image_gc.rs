//! Image garbage collection against the real private containerd (a test binary and test bed of
//! its own: the collector here is set to take every image it may, which the images other tests
//! need would not survive): with kubelet's thresholds set so that the disk is always "full", the agent removes the image nobody uses, and keeps the one a running
//! container uses, the ones pods that cannot start need (by tag, and by digest), the one
//! side-loaded from the images directory and the runtime's sandbox image; a tarball dropped in
//! then is refused rather than take the disk further. `atoll images` says why each stays;
//! `atoll images prune --dry-run` then finds nothing more to take. Then the runtime's pin on
//! the pods' images: set as the pods start, not a minute later.

mod common;

use common::archives::{drop_file, sh, Archives};
use common::{eventually, testbed, Agent, Testbed};
use std::path::{Path, PathBuf};
use std::time::Duration;

fn present(tb: &Testbed, image: &str) -> bool {
    smol::block_on(tb.cri().image_status(image)).unwrap().is_some()
}

fn pod(name: &str, image: &str, extra: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata: {{name: {name}}}\nspec:\n  hostNetwork: true\n  terminationGracePeriodSeconds: 0\n  containers:\n  - name: c\n    image: {image}\n    imagePullPolicy: IfNotPresent\n    command: [sleep, '3600']\n{extra}"
    )
}

/// One test at a time: the first one's collector takes every image nothing keeps.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn turn() -> std::sync::MutexGuard<'static, ()> {
    ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner())
}

/// The image's line in `ctr images ls` (its labels), empty when it is not there.
fn listed(tb: &Testbed, image: &str) -> String {
    let out = std::process::Command::new(tb.var("ATOLL_TB_CTR"))
        .args(["--address", tb.var("ATOLL_TB_SOCKET"), "-n", "k8s.io", "images", "ls"])
        .output()
        .unwrap();
    let listing = String::from_utf8_lossy(&out.stdout).into_owned();
    listing.lines().find(|l| l.starts_with(image)).unwrap_or_default().to_string()
}

/// An image of one layer holding `content`, imported into the runtime straight (not by atoll).
fn import(tb: &Testbed, archives: &Archives, dir: &Path, image: &str, content: &str) {
    let tarball = dir.join("import.tar");
    std::fs::write(&tarball, archives.docker_with_layer(image, content)).unwrap();
    let ctr = tb.var("ATOLL_TB_CTR");
    sh(&format!("{ctr} --address {} -n k8s.io images import {}", tb.var("ATOLL_TB_SOCKET"), tarball.display()));
}

fn pinned_for_pods(line: &str) -> bool {
    line.contains("io.cri-containerd.pinned=pinned") && line.contains("atoll.io/pinned-for-pods=true")
}

/// The pods of the collection test in `dir/manifests` (one running, one side-loaded, two that
/// cannot start, by tag and by digest) and an atoll config collecting every 2 s: its path.
fn manifests(tb: &Testbed, dir: &Path, side: &str, looping: &str, by_digest: &str) -> PathBuf {
    std::fs::write(dir.join("manifests/web.yaml"), pod("web", &tb.busybox, "")).unwrap();
    std::fs::write(dir.join("manifests/sider.yaml"), pod("sider", side, "")).unwrap();
    // The images run as root: the containers are never created (CreateContainerConfigError),
    // so no container uses the images and only the pods keep them.
    let blocked = |name: &str, image: &str| pod(name, image, "    securityContext: {runAsNonRoot: true}\n");
    std::fs::write(dir.join("manifests/blocked.yaml"), blocked("blocked", looping)).unwrap();
    std::fs::write(dir.join("manifests/pinned.yaml"), blocked("pinned", by_digest)).unwrap();
    let atoll_config = dir.join("atoll.yaml");
    std::fs::write(&atoll_config, "apiVersion: atoll.io/v1alpha1\nkind: AtollConfiguration\nimageGCPeriod: 2s\n")
        .unwrap();
    atoll_config
}

#[test]
fn collection_takes_only_images_that_are_neither_used_nor_pinned() {
    let _room = common::room(module_path!());
    let _turn = turn();
    let tb = testbed();
    let run = std::process::id();
    let dir = crate::common::Scratch::new("image-gc");
    let images = dir.join("state/images");
    std::fs::create_dir_all(&images).unwrap();
    std::fs::create_dir_all(dir.join("manifests")).unwrap();
    let archives = Archives::new(tb, "gc");
    // Four images of distinct content: side-loaded, needed by a pod that cannot start, needed
    // by one by digest, unused.
    let side = format!("atoll.test/side:{run}");
    drop_file(&images, "side.tar", &archives.docker_with_layer(&side, "side\n"));
    let looping = format!("atoll.test/blocked:{run}");
    let unused = format!("atoll.test/unused:{run}");
    let ctr = tb.var("ATOLL_TB_CTR");
    for (image, content) in [(&looping, "blocked\n"), (&unused, "unused\n")] {
        import(tb, &archives, &dir, image, content);
    }
    smol::block_on(tb.cri().pull_image(&tb.pullable, None, None)).expect("pull the image named by digest");
    let by_digest = smol::block_on(tb.cri().image_status(&tb.pullable)).unwrap().unwrap().repo_digests[0].clone();
    assert!(present(tb, &by_digest) && present(tb, &looping) && present(tb, &unused));

    let atoll_config = manifests(tb, &dir, &side, &looping, &by_digest);
    let bin = Path::new(ctr).parent().unwrap().to_path_buf();
    let path = PathBuf::from(format!("{}:/usr/sbin:/usr/bin:/sbin:/bin", bin.display()));
    let config = format!("--atoll-config={}", atoll_config.display());
    // First with kubelet's thresholds: the side-loaded image is imported (the disk has room).
    let agent = Agent::start(tb, &dir, "", &[&config], &[("PATH", &path)]);
    eventually(Duration::from_secs(60), "side.tar imported and remembered", || {
        let record = std::fs::read_to_string(dir.join("state/image-imports.json")).unwrap_or_default();
        (present(tb, &side) && record.contains("side.tar")).then_some(())
    });
    drop(agent);
    // Then with the disk always "full": collection takes what it may, and no import fits.
    let gc = "imageGCHighThresholdPercent: 1\nimageGCLowThresholdPercent: 0\nimageMinimumGCAge: 0s\n";
    let agent = Agent::start(tb, &dir, gc, &[&config], &[("PATH", &path)]);
    eventually(Duration::from_secs(60), "web running", || {
        agent.pod("web-tb").filter(|p| p["status"]["phase"] == "Running")
    });
    eventually(Duration::from_secs(60), "the unused image collected", || (!present(tb, &unused)).then_some(()));
    // A few more collections: what must stay, stays.
    std::thread::sleep(Duration::from_secs(5));
    for image in [&tb.busybox, &looping, &side, &tb.pause, &by_digest] {
        assert!(present(tb, image), "{image} was taken\n{}", agent.log());
    }
    assert!(agent.log().contains("images: removed"), "{}", agent.log());
    // An image dropped in now would take the image filesystem further above the threshold: it
    // is refused as it streams, and nothing of it is named.
    let late = format!("atoll.test/late:{run}");
    drop_file(&images, "late.tar", &archives.docker_with_layer(&late, "late\n"));
    let failed = eventually(Duration::from_secs(60), "late.tar refused", || {
        let (_, out, _) = agent.cli(&["images", "-o", "json"]);
        let v: serde_json::Value = serde_json::from_str(&out).ok()?;
        let files = v["files"].as_array()?.clone();
        files.into_iter().find(|f| f["file"] == "late.tar" && f["state"] == "Failed")
    });
    let error = failed["error"].as_str().unwrap_or_default();
    assert!(error.starts_with("too large for the image filesystem"), "{failed}");
    assert!(!present(tb, &late), "a refused import left an image");

    let (code, out, err) = agent.cli(&["images", "-o", "json"]);
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let why = |image: &str| {
        let items = v["items"].as_array().unwrap();
        let item = items.iter().find(|i| i["names"].as_array().unwrap().iter().any(|n| n == image));
        item.map(|i| (i["inUse"].as_bool().unwrap(), i["pinned"].as_str().unwrap_or("").to_string()))
    };
    assert_eq!(why(&tb.busybox).map(|w| w.0), Some(true), "{v}");
    assert!(why(&looping).is_some_and(|w| !w.0 && w.1.contains("used by pod default/blocked")), "{v}");
    assert!(why(&tb.pullable).is_some_and(|w| !w.0 && w.1.contains("used by pod default/pinned")), "{v}");
    assert!(why(&side).is_some_and(|w| w.1 == "imported from side.tar"), "{v}");
    assert!(why(&tb.pause).is_some_and(|w| !w.1.is_empty()), "the sandbox image is kept: {v}");
    assert!(why(&unused).is_none(), "{v}");
    let metrics = {
        use std::io::{Read, Write};
        let mut s = std::os::unix::net::UnixStream::connect(&agent.socket).unwrap();
        s.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").unwrap();
        let mut text = String::new();
        s.read_to_string(&mut text).unwrap();
        text
    };
    for line in [
        "atoll_images{state=\"in_use\"}",
        "atoll_images{state=\"kept\"}",
        "atoll_image_garbage_collected_total{result=\"removed\"}",
        "atoll_image_imports_total{result=\"failed\"} 1",
    ] {
        assert!(metrics.contains(line), "{line} in\n{metrics}");
    }
    let (code, out, _) = agent.cli(&["images"]);
    assert!(code == 0 && out.contains("KEPT BECAUSE") && out.contains("side.tar"), "{out}");
    let (code, out, err) = agent.cli(&["images", "prune", "--dry-run"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("0 image(s) would remove"), "{out}");

    // The runtime's own pin on what the pods need, for the box's other collectors.
    let labels = |image: &str| listed(tb, image);
    for image in [&tb.busybox, &looping, &side] {
        eventually(Duration::from_secs(30), "the pods' images pinned", || {
            pinned_for_pods(&labels(image)).then_some(())
        });
    }
    for name in ["web", "blocked", "sider", "pinned"] {
        std::fs::remove_file(dir.join(format!("manifests/{name}.yaml"))).unwrap();
    }
    eventually(Duration::from_secs(60), "the pods gone", || {
        ["web-tb", "blocked-tb", "sider-tb", "pinned-tb"].iter().all(|p| agent.pod(p).is_none()).then_some(())
    });
    // No pod needs it: atoll's pin for the pods comes off; the side-loaded image keeps its own
    // (and so stays through the collections).
    eventually(Duration::from_secs(30), "the pods' pin taken off", || {
        let line = labels(&side);
        (line.contains("io.cri-containerd.pinned=pinned") && !line.contains("atoll.io/pinned-for-pods")).then_some(())
    });
}

/// With the default periods (a pass a minute), the images of the pods found at start, and of a
/// pod added later, carry the runtime's pin within seconds: another collector on the box (the
/// runtime's, a cron `crictl rmi --prune`) has no minute to take an image a pod has yet to use.
#[test]
fn the_pods_images_are_pinned_as_they_start_not_a_minute_later() {
    let _room = common::room(module_path!());
    let _turn = turn();
    let tb = testbed();
    let run = std::process::id();
    let dir = crate::common::Scratch::new("image-pins");
    std::fs::create_dir_all(dir.join("manifests")).unwrap();
    let archives = Archives::new(tb, "pins");
    let at_start = format!("atoll.test/pinned-at-start:{run}");
    let later = format!("atoll.test/pinned-later:{run}");
    for (image, content) in [(&at_start, "at start\n"), (&later, "later\n")] {
        import(tb, &archives, &dir, image, content);
        assert!(!pinned_for_pods(&listed(tb, image)), "not pinned before atoll runs");
    }
    // Pods that never create their container (runAsNonRoot, images that run as root): only the
    // pods need the images, nothing uses them.
    let blocked = |name: &str, image: &str| pod(name, image, "    securityContext: {runAsNonRoot: true}\n");
    std::fs::write(dir.join("manifests/first.yaml"), blocked("first", &at_start)).unwrap();
    let agent = Agent::start(tb, &dir, "", &[], &[]);
    // Well under the minute of the periodic pass (the first comes a minute after start).
    eventually(Duration::from_secs(20), "the image of the pod found at start pinned", || {
        pinned_for_pods(&listed(tb, &at_start)).then_some(())
    });
    std::fs::write(dir.join("manifests/second.yaml"), blocked("second", &later)).unwrap();
    eventually(Duration::from_secs(20), "the image of the pod added later pinned", || {
        pinned_for_pods(&listed(tb, &later)).then_some(())
    });
    drop(agent);
    for image in [&at_start, &later] {
        let ctr = tb.var("ATOLL_TB_CTR");
        sh(&format!("{ctr} --address {} -n k8s.io images rm {image}", tb.var("ATOLL_TB_SOCKET")));
    }
    let _ = std::fs::remove_dir_all(&dir);
}
