//! Images on a box without a registry, against the real private containerd: a pod whose pull
//! policy is Always starts from the image on disk when the registry cannot be reached (with a
//! warning event), and keeps kubelet's failure with `strictImagePullPolicy`.

use crate::common;

use atoll::cri::api::{ContainerFilter, ContainerState};
use atoll::cri::Cri;
use atoll::node::observed::WaitReason;
use atoll::pod::{self, Change, Origin, Policy, Shape};
use atoll::runtime::Engine;
use common::archives::{drop_file, header_of, sh, Archives};
use common::{eventually, testbed, unique, Testbed};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

fn pod_with(name: &str, image: &str) -> atoll::pod::StaticPod {
    let yaml = format!(
        "apiVersion: v1\nkind: Pod\nmetadata: {{name: {name}}}\nspec:\n  hostNetwork: true\n  terminationGracePeriodSeconds: 0\n  containers:\n  - name: c\n    image: {image}\n    imagePullPolicy: Always\n    command: [sleep, '3600']\n"
    );
    let origin = Origin::File(PathBuf::from(format!("/manifests/{name}.yaml")));
    pod::load(yaml.as_bytes(), Shape::SinglePod, &origin, "tb", Policy::default()).unwrap().pods.remove(0)
}

fn running(tb: &Testbed, uid: &str) -> bool {
    let filter = ContainerFilter {
        label_selector: HashMap::from([("io.kubernetes.pod.uid".to_string(), uid.to_string())]),
        ..Default::default()
    };
    smol::block_on(tb.cri().list_containers(Some(filter)))
        .unwrap()
        .iter()
        .any(|c| c.state == ContainerState::ContainerRunning as i32)
}

#[test]
fn offline_a_pull_policy_always_pod_starts_from_the_image_on_disk_unless_strict() {
    let _room = common::room(module_path!());
    let _alone = common::alone();
    let tb = testbed();
    // The test bed's busybox under the name of a registry nobody answers for (port 1).
    let image = format!("127.0.0.1:1/atoll/offline:{}", std::process::id());
    tb.ctr(&["images", "tag", "--force", &tb.busybox, &image]);

    let sh = common::engine_env(tb, "offline", Duration::from_secs(30), Default::default());
    let mut engine = sh.engine();
    let sp = pod_with(&unique("offline"), &image);
    engine.apply(Change::Add(sp.clone()));
    eventually(Duration::from_secs(60), "the container running from the local image", || {
        running(tb, &sp.uid).then_some(())
    });
    let events = sh.node.events().all();
    let warning = events.iter().find(|e| e.reason == "UsingLocalImage" && e.uid == sp.uid).expect("a warning");
    assert_eq!(warning.type_, "Warning");
    assert!(warning.message.contains(&image) && warning.message.contains("sha256:"), "{warning:?}");

    let mut strict = common::engine_env(tb, "offline-strict", Duration::from_secs(30), Default::default());
    strict.config.strict_image_pull_policy = true;
    let mut strict_engine = strict.engine();
    let kept = pod_with(&unique("offline-strict"), &image);
    strict_engine.apply(Change::Add(kept.clone()));
    let waiting = eventually(Duration::from_secs(60), "the pull failed", || {
        let status = strict.statuses().get(&kept.uid)?;
        let c = status.container_statuses.first()?;
        let reason = c.state.waiting.as_ref()?.reason.clone();
        (reason == WaitReason::ErrImagePull.as_str() || reason == WaitReason::ImagePullBackOff.as_str())
            .then_some(reason)
    });
    assert!(!running(tb, &kept.uid), "strict: nothing runs ({waiting})");

    engine.apply(Change::Remove(sp.clone()));
    strict_engine.apply(Change::Remove(kept.clone()));
    eventually(Duration::from_secs(30), "both pods removed", || {
        (!running(tb, &sp.uid) && !running(tb, &kept.uid)).then_some(())
    });
    tb.ctr(&["images", "rm", &image]);
}

/// A `ctr` that notes each call in `calls` and takes `delay` seconds before doing it.
fn slow_ctr(tb: &Testbed, dir: &Path, delay: &str) -> (PathBuf, PathBuf) {
    let script = dir.join("ctr");
    let calls = dir.join("ctr-calls");
    let text = format!(
        "#!/bin/sh\necho \"$*\" >> {}\nsleep {delay}\nexec {} \"$@\"\n",
        calls.display(),
        tb.var("ATOLL_TB_CTR")
    );
    std::fs::write(&script, text).unwrap();
    std::os::unix::fs::PermissionsExt::set_mode(&mut std::fs::metadata(&script).unwrap().permissions(), 0o755);
    sh(&format!("chmod 755 {}", script.display()));
    (script, calls)
}

fn image_present(tb: &Testbed, image: &str) -> bool {
    smol::block_on(tb.cri().image_status(image)).unwrap().is_some()
}

fn pod_if_not_present(name: &str, image: &str) -> atoll::pod::StaticPod {
    let yaml = format!(
        "apiVersion: v1\nkind: Pod\nmetadata: {{name: {name}}}\nspec:\n  hostNetwork: true\n  terminationGracePeriodSeconds: 0\n  containers:\n  - name: c\n    image: {image}\n    command: [sleep, '3600']\n"
    );
    let origin = Origin::File(PathBuf::from(format!("/manifests/{name}.yaml")));
    pod::load(yaml.as_bytes(), Shape::SinglePod, &origin, "tb", Policy::default()).unwrap().pods.remove(0)
}

/// An engine on the test bed with the images directory `root/images` imported by `ctr`: the
/// scratch dir, the engine's world, the engine, the directory and the importer's task. Bound
/// in this order, the importer and the engine go before their world and the scratch dir.
#[allow(clippy::type_complexity)]
fn side_loading(
    tb: &Testbed,
    name: &str,
    ctr: PathBuf,
) -> (common::Scratch, common::EngineEnv, Engine<Cri>, PathBuf, smol::Task<()>) {
    let env = common::engine_env(tb, name, Duration::from_secs(30), Default::default());
    let root = crate::common::Scratch::new(name);
    let images = root.join("images");
    std::fs::create_dir_all(&images).unwrap();
    let engine = env.engine();
    let control = engine.control();
    let cfg = atoll::images::dir::DirConfig {
        dir: images.clone(),
        record: root.join("image-imports.json"),
        ctr: Some(ctr),
        address: PathBuf::from(tb.var("ATOLL_TB_SOCKET")),
        high_percent: 100,
    };
    let wake = std::sync::Arc::new(move || control.wake_all());
    let task = smol::block_on(atoll::images::dir::start(cfg, env.node.clone(), tb.cri(), wake));
    (root, env, engine, images, task)
}

fn waiting_reason(sh: &common::EngineEnv, uid: &str) -> Option<String> {
    let status = sh.statuses().get(uid)?;
    Some(status.container_statuses.first()?.state.waiting.as_ref()?.reason.clone())
}

#[test]
fn tarballs_of_every_form_are_imported_once_and_start_the_pods_waiting_for_them() {
    let _room = common::room(module_path!());
    let _alone = common::alone();
    let tb = testbed();
    let run = std::process::id();
    let root = crate::common::Scratch::new("sideload-ctr");
    std::fs::create_dir_all(&root).unwrap();
    let (slow, calls) = slow_ctr(tb, &root, "1");
    let (_root, env, mut engine, images, _task) = side_loading(tb, "sideload", slow);
    let archives = Archives::new(tb, "forms");
    let forms: Vec<(String, String, Vec<u8>)> =
        [("tar", "", false), ("tar.gz", "gzip", false), ("tar.zst", "zstd", false), ("oci.tar.zst", "zstd", true)]
            .iter()
            .map(|(ext, tool, oci)| {
                let image = format!("atoll.test/side-{}:{run}", ext.replace('.', "-"));
                let bytes = if *oci { archives.oci(&image, tool) } else { archives.docker(&image, tool) };
                (format!("app-{}.{ext}", ext.replace('.', "-")), image, bytes)
            })
            .collect();
    let pods: Vec<_> = forms.iter().map(|(_, image, _)| pod_if_not_present(&unique("side"), image)).collect();
    for p in &pods {
        engine.apply(Change::Add(p.clone()));
    }
    // Nothing to import yet: the pods cannot get their images.
    eventually(Duration::from_secs(30), "the pods waiting for their images", || {
        pods.iter().all(|p| waiting_reason(&env, &p.uid).is_some_and(|r| r.contains("Image"))).then_some(())
    });
    for (file, _, bytes) in &forms {
        drop_file(&images, file, bytes);
    }
    // While the (slow) imports run, a pod whose image is not there waits for them.
    eventually(Duration::from_secs(30), "a pod waiting for the import", || {
        pods.iter().any(|p| waiting_reason(&env, &p.uid).as_deref() == Some("ImageImporting")).then_some(())
    });
    for p in &pods {
        eventually(Duration::from_secs(120), "every pod running from its side-loaded image", || {
            running(tb, &p.uid).then_some(())
        });
    }
    for (file, image, _) in &forms {
        let state = env.node.imports().all().into_iter().find(|(f, _)| f == file).map(|(_, s)| s);
        match state {
            Some(atoll::node::imports::FileState::Imported { digest, images }) => {
                assert!(digest.starts_with("sha256:") && images == [image.clone()], "{file}: {digest} {images:?}");
            }
            other => panic!("{file}: {other:?}"),
        }
    }
    // Pinned for containerd's collectors.
    let out = std::process::Command::new(tb.var("ATOLL_TB_CTR"))
        .args(["--address", tb.var("ATOLL_TB_SOCKET"), "--namespace", "k8s.io", "images", "ls"])
        .output()
        .unwrap();
    let listing = String::from_utf8_lossy(&out.stdout);
    for (file, image, _) in &forms {
        let line =
            listing.lines().find(|l| l.starts_with(image.as_str())).unwrap_or_else(|| panic!("{image} in {listing}"));
        assert!(
            line.contains("io.cri-containerd.pinned=pinned") && line.contains(&format!("atoll.io/imported={file}")),
            "{line}"
        );
    }
    // Touched, and copied under another name: no second import of the same content.
    let imports =
        || std::fs::read_to_string(&calls).unwrap_or_default().lines().filter(|l| l.contains("images import")).count();
    assert_eq!(imports(), forms.len());
    let first = images.join(&forms[0].0);
    sh(&format!("touch {}", first.display()));
    drop_file(&images, "copy-of-first.tar", &forms[0].2);
    eventually(Duration::from_secs(30), "the copy seen", || {
        env.node
            .imports()
            .all()
            .iter()
            .any(|(f, s)| f == "copy-of-first.tar" && matches!(s, atoll::node::imports::FileState::Imported { .. }))
            .then_some(())
    });
    assert_eq!(imports(), forms.len(), "the same content is not imported again");

    for p in &pods {
        engine.apply(Change::Remove(p.clone()));
    }
    eventually(Duration::from_secs(60), "the pods removed", || pods.iter().all(|p| !running(tb, &p.uid)).then_some(()));
    for (_, image, _) in &forms {
        tb.ctr(&["images", "rm", image]);
    }
    let _ = std::fs::remove_dir_all(&root);
    let _ = std::fs::remove_dir_all(images.parent().unwrap());
}

#[test]
fn a_truncated_or_corrupt_tarball_is_refused_names_why_and_leaves_no_image() {
    let _room = common::room(module_path!());
    let _alone = common::alone();
    let tb = testbed();
    let run = std::process::id();
    let (_root, env, _engine, images, _task) = side_loading(tb, "sideload-bad", PathBuf::from(tb.var("ATOLL_TB_CTR")));
    let archives = Archives::new(tb, "bad");
    let (cut_image, bad_image, broken_image) =
        (format!("atoll.test/cut:{run}"), format!("atoll.test/bad:{run}"), format!("atoll.test/broken:{run}"));
    let whole = archives.docker(&cut_image, "zstd");
    let cut = &whole[..whole.len() / 2];
    // A layer of its own (containerd skips unpacking a layer it already has), changed after its
    // diff ID was taken: containerd's own check refuses it.
    let mut bad = archives.docker_with_layer(&bad_image, &format!("made for run {run}\n").repeat(2000));
    let layer = header_of(&bad, b"extra.tar\0");
    bad[layer + 512 + 1000] ^= 0x01;
    // A tar header changed: atoll's own check, before containerd has the whole stream.
    let mut broken = archives.docker(&broken_image, "");
    let config = header_of(&broken, archives.config.as_bytes());
    broken[config + 100] ^= 0x01; // the mode field
    drop_file(&images, "cut.tar.zst", cut);
    drop_file(&images, "bad.tar", &bad);
    drop_file(&images, "broken.tar", &broken);
    let failed = |file: &str| {
        env.node.imports().all().into_iter().find_map(|(f, s)| match s {
            atoll::node::imports::FileState::Failed(why) if f == file => Some(why),
            _ => None,
        })
    };
    let why = eventually(Duration::from_secs(60), "the cut archive refused", || failed("cut.tar.zst"));
    assert!(why.contains("zstd") || why.contains("truncated"), "{why}");
    let why = eventually(Duration::from_secs(60), "the changed layer refused", || failed("bad.tar"));
    assert!(why.contains("ctr images import failed"), "{why}");
    let why = eventually(Duration::from_secs(60), "the broken header refused", || failed("broken.tar"));
    assert!(why.contains("checksum"), "{why}");
    assert!(!why.contains("ctr"), "refused by atoll before ctr saw the end: {why}");
    for image in [&cut_image, &bad_image, &broken_image] {
        assert!(!image_present(tb, image), "nothing half-imported is named: {image}");
    }
    // The whole file in place of the cut one: imported.
    drop_file(&images, "cut.tar.zst", &whole);
    eventually(Duration::from_secs(60), "the whole archive imported", || image_present(tb, &cut_image).then_some(()));
    tb.ctr(&["images", "rm", &cut_image]);
    let _ = std::fs::remove_dir_all(images.parent().unwrap());
}

#[test]
fn an_app_tarball_and_its_manifest_are_all_a_box_without_a_registry_needs() {
    let _room = common::room(module_path!());
    let _alone = common::alone();
    let tb = testbed();
    let run = std::process::id();
    let dir = crate::common::Scratch::new("sideload-agent");
    let images = dir.join("state/images");
    std::fs::create_dir_all(&images).unwrap();
    std::fs::create_dir_all(dir.join("manifests")).unwrap();
    // The registry in the name answers nothing; the runtime's own ctr is on PATH, as on a box.
    let image = format!("registry.invalid/acme/app:{run}");
    let archives = Archives::new(tb, "agent");
    drop_file(&images, "app.tar.zst", &archives.docker(&image, "zstd"));
    let app = format!(
        "apiVersion: v1\nkind: Pod\nmetadata: {{name: app}}\nspec:\n  hostNetwork: true\n  terminationGracePeriodSeconds: 0\n  containers:\n  - name: app\n    image: {image}\n    imagePullPolicy: Never\n    command: [sleep, '3600']\n"
    );
    drop_file(&dir.join("manifests"), "app.yaml", app.as_bytes());
    let bin = Path::new(tb.var("ATOLL_TB_CTR")).parent().unwrap().to_path_buf();
    let path = PathBuf::from(format!("{}:/usr/sbin:/usr/bin:/sbin:/bin", bin.display()));
    let mut agent = common::Agent::start(tb, &dir, "", &[], &[("PATH", &path)]);
    let pod = eventually(Duration::from_secs(90), "the app running", || {
        agent.pod("app-tb").filter(|p| p["status"]["phase"] == "Running")
    });
    assert_eq!(pod["status"]["containerStatuses"][0]["ready"], true, "{pod}");
    let log = agent.log();
    assert!(log.contains("images: imported app.tar.zst") && log.contains(&image), "{log}");
    let record = std::fs::read_to_string(dir.join("state/image-imports.json")).unwrap();
    assert!(record.contains("app.tar.zst") && record.contains("sha256:"), "{record}");
    // Once imported, a restart of the agent does not import it again.
    agent.signal("TERM");
    let _ = agent.child.wait();
    let mut agent = common::Agent::start(tb, &dir, "", &[], &[("PATH", &path)]);
    eventually(Duration::from_secs(30), "the agent back", || agent.pod("app-tb"));
    std::thread::sleep(Duration::from_secs(2));
    assert!(!agent.log().contains("images: imported"), "{}", agent.log());
    assert!(agent.alive());
    std::fs::remove_file(dir.join("manifests/app.yaml")).unwrap();
    eventually(Duration::from_secs(60), "the app gone", || agent.pod("app-tb").is_none().then_some(()));
    tb.ctr(&["images", "rm", &image]);
}

#[test]
fn atoll_images_import_streams_a_tarball_into_the_runtime_by_the_same_code() {
    let _room = common::room(module_path!());
    let _alone = common::alone();
    let tb = testbed();
    let run = std::process::id();
    let archives = Archives::new(tb, "cli");
    let image = format!("atoll.test/cli:{run}");
    let scratch = crate::common::Scratch::new("cli-import");
    let file = scratch.join(format!("{run}.tar.gz"));
    std::fs::write(&file, archives.docker(&image, "gzip")).unwrap();
    let bin = Path::new(tb.var("ATOLL_TB_CTR")).parent().unwrap().to_path_buf();
    let import = || {
        std::process::Command::new(env!("CARGO_BIN_EXE_atoll"))
            .args(["images", "import"])
            .arg(&file)
            .arg(format!("--container-runtime-endpoint={}", tb.endpoint))
            .env("PATH", format!("{}:/usr/sbin:/usr/bin:/sbin:/bin", bin.display()))
            .output()
            .unwrap()
    };
    let out = import();
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "{stdout}{stderr}");
    assert!(stdout.contains("imported") && stdout.contains(&image) && stdout.contains("sha256:"), "{stdout}");
    assert!(image_present(tb, &image));
    // A file that is not an image archive: refused, with the reason, exit 1.
    std::fs::write(&file, b"not an archive").unwrap();
    let out = import();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("not a tar archive"), "{stderr}");
    let _ = std::fs::remove_file(&file);
    tb.ctr(&["images", "rm", &image]);
}
