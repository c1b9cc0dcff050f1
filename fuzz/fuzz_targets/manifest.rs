//! Fuzzes the whole intake pipeline with arbitrary bytes, as a file and as a URL payload, and
//! as a pod from the API server (`load_api`, and the objects and tokens it would need):
//! decode, defaults, identity and validation, and for every pod that loads, what atoll then
//! builds from it before touching the runtime: its directories (which must stay under the
//! root), the plan for a fresh pod, the sandbox config and every container's config, probe
//! timings, grace periods, and the stop a restart would rebuild from the annotations. Nothing
//! may panic (release builds abort on panic: that is every pod's supervisor gone) or overflow.
#![no_main]

use atoll::cri::api::ContainerStatus;
use atoll::node::observed::Observed;
use atoll::pod::types::Pod;
use atoll::pod::{self, Origin, Policy, Shape};
use atoll::runtime::volumes::poddir;
use atoll::runtime::{backoff, container, orphan, plan, sandbox, stop};
use libfuzzer_sys::fuzz_target;
use std::path::Path;
use std::time::{Duration, SystemTime};

fuzz_target!(|data: &[u8]| {
    let file = Origin::File("/etc/kubernetes/manifests/fuzz.yaml".into());
    let url = Origin::Url("http://127.0.0.1/pods".into());
    for strict in [false, true] {
        let policy = Policy { strict };
        if let Ok(loaded) = pod::load(data, Shape::SinglePod, &file, "fuzz-node", policy) {
            for sp in loaded.pods {
                // A pod that loads must serialise back to JSON.
                let _ = serde_json::to_vec(&*sp.pod).expect("a loaded pod serialises");
                after_intake(&sp.pod);
            }
        }
        if let Ok(loaded) = pod::load(data, Shape::PodOrList, &url, "fuzz-node", policy) {
            for sp in loaded.pods {
                after_intake(&sp.pod);
            }
        }
    }
    // As a pod the API server binds to the node (a watch event's object), and what the API
    // source then asks of the server for it (its objects and tokens).
    if let Ok(value) = serde_json::from_slice::<serde_json::Value>(data) {
        let _ = atoll::mirror::bound::runs_here(&value, "fuzz-node");
        if let Ok(sp) = pod::load::load_api(value) {
            let _ = atoll::mirror::needs::wanted(std::slice::from_ref(&sp));
            after_intake(&sp.pod);
        }
    }
});

/// What the engine computes from a valid pod before its first CRI call.
fn after_intake(pod: &Pod) {
    let root = Path::new("/var/lib/atoll");
    let node = atoll::node::Facts {
        name: "fuzz-node".into(),
        pod_logs_dir: "/var/log/pods".into(),
        root_dir: root.into(),
        host_resolv_conf: "nameserver 192.0.2.53\n".into(),
        ..Default::default()
    };
    let uid = &pod.metadata.uid;
    // Every directory built from the pod's names stays below its base.
    let dir = poddir::pod_dir(root, uid).expect("a validated UID is a directory name");
    assert!(dir.path().starts_with(root.join("pods")) && dir.path() != root.join("pods"));
    let logs = sandbox::log_directory(&node, pod).expect("validated names are directory names");
    assert!(logs.starts_with("/var/log/pods") && logs.parent() == Some(Path::new("/var/log/pods")));
    for v in &pod.spec.volumes {
        if let Some(p) = poddir::volume_path(&dir, v).expect("volume paths") {
            assert!(v.host_path.is_some() || p.starts_with(dir.path()));
        }
    }
    let _ = sandbox::sandbox_config(pod, 0, &node);
    // Admission never panics on a valid pod (quantities, selectors, ports), beside itself.
    let info = atoll::admission::NodeInfo { name: "fuzz-node".into(), ..Default::default() };
    let _ = atoll::admission::admit(pod, true, &[pod, pod], &info);
    let _ = atoll::admission::admit(pod, false, &[], &info);
    let backoff = backoff::Backoff::new(Duration::from_secs(10), Duration::from_secs(300));
    let now = SystemTime::now();
    let _ = plan::plan(pod, &Observed::default(), &Default::default(), &backoff, now, false);
    let _ = plan::plan(pod, &Observed::default(), &Default::default(), &backoff, now, true);
    let _ = stop::grace_of(pod);
    for (_, c) in pod.all_containers() {
        for probe in [&c.liveness_probe, &c.readiness_probe, &c.startup_probe].into_iter().flatten() {
            let _ = atoll::probe::Timing::of(probe);
            let _ = atoll::handlers::timeout_of(probe);
        }
        let mut ctx = container::InstanceContext {
            pod_dir: dir.clone(),
            pod_ip: "10.0.0.2".into(),
            host_ip: "192.0.2.1".into(),
            allocatable: atoll::pod::fieldpath::Allocatable { cpu_millis: 4000, memory_bytes: 8 << 30 },
            node_memory_bytes: 8 << 30,
            termination_log: None,
            hosts_file: None,
            subpaths: Default::default(),
            image_volumes: Default::default(),
            objects: Default::default(),
        };
        for (i, m) in c.volume_mounts.iter().enumerate() {
            if m.sub_path.as_deref().is_some_and(|s| !s.is_empty()) {
                let target = poddir::subpath_target(&dir, &m.name, &c.name, i).expect("subPath targets");
                assert!(target.starts_with(dir.path()));
                ctx.subpaths.insert(i, target);
            }
        }
        if let Ok(config) = container::container_config(pod, c, 3, "sha256:x", &ctx) {
            // What a restart of atoll rebuilds from the annotations written here.
            let st = ContainerStatus { labels: config.labels, annotations: config.annotations, ..Default::default() };
            let _ = orphan::restore(uid, &[st]);
        }
    }
}
