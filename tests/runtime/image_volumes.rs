//! Image volumes (`spec.volumes[].image`, as kops' etcd-manager uses them) against the real
//! private containerd: where the runtime mounts them (containerd 2.1 and later), the
//! container sees the image's files, read only; where it cannot (1.6, 1.7), the pod fails
//! with the reason and nothing of it runs. Either way the outcome is asserted for the runtime
//! the test bed runs (`ATOLL_CONTAINERD`).

use crate::common;

use atoll::cri::api::{ContainerFilter, ContainerState, PodSandboxFilter};
use atoll::pod::{self, Change, Origin, Policy, Shape};
use common::{eventually, testbed, unique};
use std::collections::HashMap;
use std::path::PathBuf;
use std::time::Duration;

fn by_uid(uid: &str) -> HashMap<String, String> {
    HashMap::from([("io.kubernetes.pod.uid".to_string(), uid.to_string())])
}

#[test]
fn an_image_volume_is_mounted_where_the_runtime_can_and_fails_the_pod_where_it_cannot() {
    let _room = common::room(module_path!());
    let tb = testbed();
    let cri = tb.cri();
    let version = smol::block_on(cri.version()).expect("Version");
    let mounts = atoll::cri::features::mounts_image_volumes(&version.runtime_name, &version.runtime_version);
    let sh = common::engine_env(tb, "imagevol", Duration::from_secs(30), Default::default());
    let mut engine = sh.engine();
    let name = unique("imagevol");
    let yaml = format!(
        "apiVersion: v1\nkind: Pod\nmetadata: {{name: {name}}}\nspec:\n  hostNetwork: true\n  terminationGracePeriodSeconds: 0\n  volumes:\n  - name: site\n    image: {{reference: {image}, pullPolicy: IfNotPresent}}\n  containers:\n  - name: c\n    image: {busybox}\n    command: [sleep, '3600']\n    volumeMounts: [{{name: site, mountPath: /site}}]\n",
        image = tb.pullable,
        busybox = tb.busybox,
    );
    let origin = Origin::File(PathBuf::from(format!("/manifests/{name}.yaml")));
    let sp = pod::load(yaml.as_bytes(), Shape::SinglePod, &origin, "tb", Policy::default()).unwrap().pods.remove(0);
    let uid = sp.uid.clone();
    engine.apply(Change::Add(sp.clone()));
    let sandboxes = || {
        smol::block_on(
            cri.list_pod_sandbox(Some(PodSandboxFilter { label_selector: by_uid(&uid), ..Default::default() })),
        )
        .unwrap()
    };
    if mounts {
        let id = eventually(Duration::from_secs(60), "the container running", || {
            smol::block_on(
                cri.list_containers(Some(ContainerFilter { label_selector: by_uid(&uid), ..Default::default() })),
            )
            .unwrap()
            .into_iter()
            .find(|c| c.state == ContainerState::ContainerRunning as i32)
            .map(|c| c.id)
        });
        let read = smol::block_on(cri.exec_sync(
            &id,
            vec!["cat".into(), "/site/var/www/index.html".into()],
            Duration::from_secs(10),
        ))
        .unwrap();
        assert_eq!(String::from_utf8_lossy(&read.stdout), "hello from atoll's test image\n", "{read:?}");
        let write = smol::block_on(cri.exec_sync(&id, vec!["touch".into(), "/site/x".into()], Duration::from_secs(10)))
            .unwrap();
        assert_ne!(write.exit_code, 0, "an image volume is read only");
    } else {
        let status = eventually(Duration::from_secs(30), "the pod failed", || {
            sh.statuses().get(&uid).filter(|s| s.phase == "Failed")
        });
        assert_eq!(status.reason.as_deref(), Some("ImageVolumesNotSupported"), "{status:?}");
        let message = status.message.unwrap_or_default();
        assert!(message.contains("\"site\"") && message.contains(&version.runtime_version), "{message}");
        assert!(sandboxes().is_empty(), "nothing of the pod runs without its volume");
    }
    engine.apply(Change::Remove(sp));
    eventually(Duration::from_secs(30), "the pod removed", || sandboxes().is_empty().then_some(()));
}
