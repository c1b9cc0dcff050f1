//! AppArmor against the real private containerd: where the host's kernel enforces it, a
//! container asked for `runtime/default` (by the annotation, or by the pod's
//! `appArmorProfile` field) runs under the runtime's default profile, and one asked for
//! Unconfined runs unconfined, as the kernel reports for the container's first process
//! (`/proc/1/attr/current`). Where the kernel has no AppArmor the test says so and skips: the
//! pods would be refused at admission there, as kubelet refuses them.

use crate::common;

use atoll::cri::api::{ContainerFilter, ContainerState};
use atoll::pod::{self, Change, Origin, Policy, Shape};
use common::{eventually, testbed, unique};
use std::collections::HashMap;
use std::path::PathBuf;
use std::time::Duration;

/// Why this host cannot show a profile applied, if it cannot.
fn cannot_enforce() -> Option<&'static str> {
    if !atoll::pod::apparmor::host_enabled() {
        return Some("the kernel has no AppArmor enabled (/sys/module/apparmor/parameters/enabled is not Y)");
    }
    let parser = ["/sbin/apparmor_parser", "/usr/sbin/apparmor_parser"];
    if !parser.iter().any(|p| std::path::Path::new(p).exists()) {
        return Some("apparmor_parser is missing, so containerd cannot load its default profile");
    }
    None
}

#[test]
fn the_profile_asked_for_is_the_one_the_kernel_enforces() {
    let _room = common::room(module_path!());
    if let Some(why) = cannot_enforce() {
        eprintln!("tests/apparmor: skipped: {why}");
        return;
    }
    let tb = testbed();
    let cri = tb.cri();
    let sh = common::engine_env(tb, "apparmor", Duration::from_secs(30), Default::default());
    let mut engine = sh.engine();
    let by_annotation = unique("aa-annotation");
    let by_field = unique("aa-field");
    let container = |name: &str| format!("  - name: {name}\n    image: {}\n    command: [sleep, '3600']\n", tb.busybox);
    let manifests = [
        format!(
            "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {by_annotation}\n  annotations:\n    container.apparmor.security.beta.kubernetes.io/confined: runtime/default\nspec:\n  hostNetwork: true\n  terminationGracePeriodSeconds: 0\n  containers:\n{}{}    securityContext: {{appArmorProfile: {{type: Unconfined}}}}\n",
            container("confined"),
            container("free"),
        ),
        format!(
            "apiVersion: v1\nkind: Pod\nmetadata: {{name: {by_field}}}\nspec:\n  hostNetwork: true\n  terminationGracePeriodSeconds: 0\n  securityContext: {{appArmorProfile: {{type: RuntimeDefault}}}}\n  containers:\n{}",
            container("confined"),
        ),
    ];
    let mut pods = Vec::new();
    for yaml in &manifests {
        let origin = Origin::File(PathBuf::from(format!("/manifests/{}.yaml", pods.len())));
        let sp = pod::load(yaml.as_bytes(), Shape::SinglePod, &origin, "tb", Policy { strict: true })
            .unwrap_or_else(|e| panic!("{e}\n{yaml}"))
            .pods
            .remove(0);
        assert_eq!(pod::apparmor::refusal(&sp.pod, true), None, "admitted where AppArmor is enabled");
        engine.apply(Change::Add(sp.clone()));
        pods.push(sp);
    }
    // What the kernel says of the container's first process, by pod and container.
    let current = |uid: &str, name: &str| -> String {
        let labels = HashMap::from([
            ("io.kubernetes.pod.uid".to_string(), uid.to_string()),
            ("io.kubernetes.container.name".to_string(), name.to_string()),
        ]);
        let id = eventually(Duration::from_secs(60), &format!("{name} running"), || {
            smol::block_on(
                cri.list_containers(Some(ContainerFilter { label_selector: labels.clone(), ..Default::default() })),
            )
            .unwrap()
            .into_iter()
            .find(|c| c.state == ContainerState::ContainerRunning as i32)
            .map(|c| c.id)
        });
        let read = smol::block_on(cri.exec_sync(
            &id,
            vec!["cat".into(), "/proc/1/attr/current".into()],
            Duration::from_secs(10),
        ))
        .unwrap();
        assert_eq!(read.exit_code, 0, "{read:?}");
        String::from_utf8_lossy(&read.stdout).trim().to_string()
    };
    let default = "cri-containerd.apparmor.d";
    let annotated = current(&pods[0].uid, "confined");
    assert!(annotated.starts_with(default), "runtime/default by the annotation: {annotated}");
    assert_eq!(current(&pods[0].uid, "free"), "unconfined", "Unconfined by the container's field");
    let fielded = current(&pods[1].uid, "confined");
    assert!(fielded.starts_with(default), "RuntimeDefault by the pod's field: {fielded}");
    for sp in pods {
        let uid = sp.uid.clone();
        engine.apply(Change::Remove(sp));
        eventually(Duration::from_secs(30), "the pod removed", || {
            let filter = ContainerFilter {
                label_selector: HashMap::from([("io.kubernetes.pod.uid".to_string(), uid.to_string())]),
                ..Default::default()
            };
            smol::block_on(cri.list_containers(Some(filter))).unwrap().is_empty().then_some(())
        });
    }
}
