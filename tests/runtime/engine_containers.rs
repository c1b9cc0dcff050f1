//! The pod engine's containers against the real private containerd, one setting each: logs
//! rotated under the runtime, runAsNonRoot, a memory-backed emptyDir (a sized tmpfs, unmounted
//! with the pod) and termination messages from the file or the log.

use super::engine::{containers, remove, running, shared, shared_with, static_pod, SLEEPER};
use crate::common;
use atoll::pod::Change;
use common::{eventually, testbed, unique};
use std::time::Duration;

#[test]
fn container_logs_are_rotated_and_the_runtime_writes_to_the_new_file() {
    let _room = common::room(module_path!());
    let tb = testbed();
    let rotation = atoll::runtime::logs::Rotation { max_size: 4096, max_files: 3 };
    let mut engine = shared_with(tb, "logrotate", rotation).engine();
    let yaml = SLEEPER.replace(
        "command: [\"sleep\", \"3600\"]",
        "command: [\"sh\", \"-c\", \"i=0; while :; do i=$((i+1)); echo line-$i-xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx; sleep 0.01; done\"]",
    );
    let sp = static_pod(&yaml, &unique("logs"));
    let (uid, name) = (sp.uid.clone(), sp.pod.metadata.name.clone());
    engine.apply(Change::Add(sp.clone()));
    let log = tb.logs.join(format!("default_{name}_{uid}")).join("main/0.log");
    eventually(Duration::from_secs(40), "two rotations", || {
        (atoll::runtime::logs::rotated(&log).len() >= 2).then_some(())
    });
    std::thread::sleep(Duration::from_secs(3));
    let rotated = atoll::runtime::logs::rotated(&log);
    assert!(rotated.len() <= 2, "at most max_files - 1 rotated files: {rotated:?}");
    let before = std::fs::metadata(&log).map(|m| m.len()).unwrap_or(0);
    eventually(Duration::from_secs(10), "the runtime writing to the current file", || {
        let now = std::fs::metadata(&log).map(|m| m.len()).unwrap_or(0);
        (now != before).then_some(())
    });
    let last = std::fs::read_to_string(&rotated[rotated.len() - 1]).unwrap();
    assert!(last.lines().all(|l| l.contains(" stdout ")), "rotated files hold CRI log lines");
    remove(&mut engine, tb, sp);
}

#[test]
fn run_as_non_root_refuses_a_root_image_and_allows_a_user() {
    let _room = common::room(module_path!());
    let tb = testbed();
    let sh = shared(tb, "nonroot");
    let mut engine = sh.engine();
    let as_root = static_pod(
        &SLEEPER.replace("  containers:\n", "  securityContext:\n    runAsNonRoot: true\n  containers:\n"),
        &unique("root"),
    );
    let as_user = static_pod(
        &SLEEPER.replace(
            "  containers:\n",
            "  securityContext:\n    runAsNonRoot: true\n    runAsUser: 1000\n  containers:\n",
        ),
        &unique("user"),
    );
    engine.apply(Change::Add(as_root.clone()));
    engine.apply(Change::Add(as_user.clone()));
    eventually(Duration::from_secs(30), "the user pod running", || running(tb, &as_user.uid, "main"));
    let status = eventually(Duration::from_secs(20), "the root pod's reason", || {
        sh.statuses().get(&as_root.uid).filter(|s| {
            s.container_statuses[0].state.waiting.as_ref().is_some_and(|w| w.reason == "CreateContainerConfigError")
        })
    });
    let message = &status.container_statuses[0].state.waiting.as_ref().unwrap().message;
    assert!(message.contains("will run as root"), "{message}");
    assert!(containers(tb, &as_root.uid).is_empty());
    remove(&mut engine, tb, as_root);
    remove(&mut engine, tb, as_user);
}

#[test]
fn a_memory_empty_dir_is_a_sized_tmpfs_unmounted_with_the_pod() {
    let _room = common::room(module_path!());
    let tb = testbed();
    let sh = shared(tb, "tmpfs");
    let mut engine = sh.engine();
    let yaml = SLEEPER
        .replace("command: [\"sleep\", \"3600\"]", "command: [\"sh\", \"-c\", \"grep ' /scratch ' /proc/mounts; sleep 3600\"]\n    volumeMounts: [{name: scratch, mountPath: /scratch}]")
        + "  volumes:\n  - name: scratch\n    emptyDir: {medium: Memory, sizeLimit: 16Mi}\n";
    let sp = static_pod(&yaml, &unique("tmpfs"));
    let (uid, name) = (sp.uid.clone(), sp.pod.metadata.name.clone());
    engine.apply(Change::Add(sp.clone()));
    let log = tb.logs.join(format!("default_{name}_{uid}")).join("main/0.log");
    let line = eventually(Duration::from_secs(30), "the container's view of /scratch", || {
        std::fs::read_to_string(&log).ok().filter(|t| t.contains("/scratch"))
    });
    assert!(line.contains("tmpfs /scratch tmpfs") && line.contains("size=16384k"), "{line}");
    let pod_dir = sh.node.facts().root_dir.join("pods").join(uid.as_str());
    assert!(std::fs::read_to_string("/proc/self/mountinfo").unwrap().contains(pod_dir.to_str().unwrap()));
    remove(&mut engine, tb, sp);
    assert!(
        !std::fs::read_to_string("/proc/self/mountinfo").unwrap().contains(pod_dir.to_str().unwrap()),
        "the tmpfs is unmounted"
    );
    assert!(!pod_dir.exists());
}

#[test]
fn termination_messages_come_from_the_file_or_the_log() {
    let _room = common::room(module_path!());
    let tb = testbed();
    let sh = shared(tb, "termmsg");
    let mut engine = sh.engine();
    let from_file = SLEEPER
        .replace("  terminationGracePeriodSeconds: 1\n", "  terminationGracePeriodSeconds: 1\n  restartPolicy: Never\n")
        .replace(
            "command: [\"sleep\", \"3600\"]",
            "command: [\"sh\", \"-c\", \"echo disk full > /dev/termination-log; exit 2\"]",
        );
    let from_log = from_file
        .replace("echo disk full > /dev/termination-log; exit 2", "echo last words; exit 3")
        .replace("    command:", "    terminationMessagePolicy: FallbackToLogsOnError\n    command:");
    let a = static_pod(&from_file, &unique("msgfile"));
    let b = static_pod(&from_log, &unique("msglog"));
    engine.apply(Change::Add(a.clone()));
    engine.apply(Change::Add(b.clone()));
    for (sp, exit, text) in [(&a, 2, "disk full"), (&b, 3, "last words")] {
        let st = eventually(Duration::from_secs(30), "a terminated container", || {
            sh.statuses().get(&sp.uid).and_then(|s| s.container_statuses[0].state.terminated.clone())
        });
        assert_eq!(st.exit_code, exit);
        assert!(st.message.contains(text), "{st:?}");
        assert_eq!(sh.statuses().get(&sp.uid).unwrap().phase, "Failed");
    }
    remove(&mut engine, tb, a);
    remove(&mut engine, tb, b);
}
