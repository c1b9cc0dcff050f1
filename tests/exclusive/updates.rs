//! Fleet updates against the real private containerd: pull before swap (a changed manifest
//! whose image cannot be pulled leaves the old version running, an event on it saying why;
//! once the image is on the node the old version stops and the new one starts), and start
//! ordering at boot (`atoll.io/depends-on`).

use crate::common;

use common::{eventually, testbed, Testbed};
use std::time::Duration;

/// An empty directory for one test's agent, and its manifest directory inside.
fn fresh_dir(name: &str) -> (crate::common::Scratch, std::path::PathBuf) {
    let dir = crate::common::Scratch::new(name);
    let manifests = dir.join("manifests");
    std::fs::create_dir_all(&manifests).unwrap();
    (dir, manifests)
}

/// The running containers of pod `name`: (ID, image).
fn running(tb: &Testbed, name: &str) -> Vec<(String, String)> {
    tb.running_in(name).into_iter().map(|c| (c.id, c.image.map(|i| i.image).unwrap_or_default())).collect()
}

fn pod(image: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata: {{name: upd}}\nspec:\n  hostNetwork: true\n  terminationGracePeriodSeconds: 0\n  containers:\n  - name: c\n    image: {image}\n    imagePullPolicy: IfNotPresent\n    command: [sleep, '3600']\n"
    )
}

#[test]
fn an_update_whose_image_cannot_be_pulled_leaves_the_old_version_running_until_it_can() {
    let _room = common::room(module_path!());
    let _alone = common::alone();
    let tb = testbed();
    let _turn = common::one_agent_at_a_time();
    let (dir, manifests) = fresh_dir("updates");
    std::fs::write(manifests.join("upd.yaml"), pod(&tb.busybox)).unwrap();
    // Short back-offs so the retries come within the test.
    let own = dir.join("atoll.yaml");
    std::fs::write(
        &own,
        "apiVersion: atoll.io/v1alpha1\nkind: AtollConfiguration\nimagePullBackOff: {initialDelay: 1s, maxDelay: 2s}\n",
    )
    .unwrap();
    let agent = common::Agent::start(tb, &dir, "", &[&format!("--atoll-config={}", own.display())], &[]);
    let (old, _) = eventually(Duration::from_secs(60), "the old version running", || running(tb, "upd-tb").pop());

    // The new version's image is on a registry nobody answers for (port 1).
    let image = format!("127.0.0.1:1/atoll/update:{}", std::process::id());
    std::fs::write(dir.join("next.yaml"), pod(&image)).unwrap();
    std::fs::rename(dir.join("next.yaml"), manifests.join("upd.yaml")).unwrap();
    eventually(Duration::from_secs(60), "the reason shown on the old version", || {
        let (_, out, _) = agent.cli(&["describe", "upd-tb"]);
        (out.contains("UpdateWaitingForImage") && out.contains(&image)).then_some(())
    });
    std::thread::sleep(Duration::from_secs(3)); // past a few more pull attempts
    assert_eq!(running(tb, "upd-tb").into_iter().map(|c| c.0).collect::<Vec<_>>(), vec![old.clone()]);

    // The image arrives (side-loaded under that name): the swap happens.
    tb.ctr(&["images", "tag", "--force", &tb.busybox, &image]);
    eventually(Duration::from_secs(60), "the new version running", || {
        running(tb, "upd-tb").into_iter().find(|c| c.0 != old)
    });
    assert_eq!(running(tb, "upd-tb").len(), 1, "never two versions at once");
    assert!(agent.log().contains("the new version's images are on the node; terminating"), "{}", agent.log());
    std::fs::remove_file(manifests.join("upd.yaml")).unwrap();
    eventually(Duration::from_secs(60), "the pod gone", || running(tb, "upd-tb").is_empty().then_some(()));
    tb.ctr(&["images", "rm", &image]);
    drop(agent);
    let _ = std::fs::remove_dir_all(&dir);
}

/// When pod `name`'s first sandbox was created (ns since the epoch).
fn sandbox_created(tb: &Testbed, name: &str) -> Option<i64> {
    tb.sandboxes_of(name).iter().map(|s| s.created_at).min()
}

#[test]
fn at_boot_pods_start_in_their_dependency_order() {
    let _room = common::room(module_path!());
    let _alone = common::alone();
    let tb = testbed();
    let _turn = common::one_agent_at_a_time();
    let (dir, manifests) = fresh_dir("order");
    // db is Ready 2 s after it starts (its readiness probe); api waits for db, web for api.
    let pod = |name: &str, deps: &str, command: &str, probe: &str| {
        format!(
            "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\n  annotations: {{atoll.io/depends-on: \"{deps}\"}}\nspec:\n  hostNetwork: true\n  terminationGracePeriodSeconds: 0\n  containers:\n  - name: c\n    image: docker.io/library/busybox:1.36\n    command: [sh, -c, '{command}']\n{probe}"
        )
    };
    let probe = "    readinessProbe: {exec: {command: [cat, /tmp/ready]}, periodSeconds: 1}\n";
    std::fs::write(manifests.join("db.yaml"), pod("db", "", "sleep 2; touch /tmp/ready; exec sleep 3600", probe))
        .unwrap();
    std::fs::write(manifests.join("api.yaml"), pod("api", "db", "exec sleep 3600", "")).unwrap();
    std::fs::write(manifests.join("web.yaml"), pod("web", "api", "exec sleep 3600", "")).unwrap();
    let agent = common::Agent::start(tb, &dir, "", &[], &[]);
    eventually(Duration::from_secs(60), "web waiting for api, visibly", || {
        let (_, out, _) = agent.cli(&["describe", "web-tb"]);
        out.contains("DependencyNotReady").then_some(())
    });
    eventually(Duration::from_secs(60), "all three running", || {
        ["db-tb", "api-tb", "web-tb"].iter().all(|p| !running(tb, p).is_empty()).then_some(())
    });
    let (db, api, web) = (
        sandbox_created(tb, "db-tb").unwrap(),
        sandbox_created(tb, "api-tb").unwrap(),
        sandbox_created(tb, "web-tb").unwrap(),
    );
    assert!(api - db >= 2_000_000_000, "api started {} ms after db, before db was Ready", (api - db) / 1_000_000);
    assert!(web > api, "web before api");
    for name in ["db", "api", "web"] {
        std::fs::remove_file(manifests.join(format!("{name}.yaml"))).unwrap();
    }
    eventually(Duration::from_secs(60), "the pods gone", || {
        ["db-tb", "api-tb", "web-tb"].iter().all(|p| sandbox_created(tb, p).is_none()).then_some(())
    });
    drop(agent);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn an_update_never_ready_in_its_window_is_rolled_back_across_a_kill_of_atoll_and_stays_so() {
    let _room = common::room(module_path!());
    let _alone = common::alone();
    let tb = testbed();
    let _turn = common::one_agent_at_a_time();
    let (dir, manifests) = fresh_dir("rollback");
    let pod = |probe: &str| {
        format!(
            "apiVersion: v1\nkind: Pod\nmetadata:\n  name: rb\n  annotations: {{atoll.io/rollback-after: 4s}}\nspec:\n  hostNetwork: true\n  terminationGracePeriodSeconds: 0\n  containers:\n  - name: c\n    image: docker.io/library/busybox:1.36\n    command: [sleep, '3600']\n    readinessProbe: {{exec: {{command: [{probe}]}}, periodSeconds: 1}}\n"
        )
    };
    std::fs::write(manifests.join("rb.yaml"), pod("'true'")).unwrap();
    let mut agent = common::Agent::start(tb, &dir, "", &[], &[]);
    let ready = |agent: &common::Agent| {
        agent.pod("rb-tb").filter(|p| {
            p["status"]["conditions"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|c| c["type"] == "Ready" && c["status"] == "True")
        })
    };
    let v1 = eventually(Duration::from_secs(60), "version 1 Ready", || ready(&agent))["metadata"]["uid"].clone();
    std::thread::sleep(Duration::from_secs(2)); // v1 is known good (looked at every second)

    // Version 2 never becomes Ready: after its 4 s window, version 1 runs again.
    let bad = pod("'false'");
    std::fs::write(dir.join("next.yaml"), &bad).unwrap();
    std::fs::rename(dir.join("next.yaml"), manifests.join("rb.yaml")).unwrap();
    eventually(Duration::from_secs(60), "version 2 on trial", || {
        agent.pod("rb-tb").filter(|p| p["metadata"]["uid"] != v1).map(|_| ())
    });
    // kill -9 in the middle of the trial: the restarted agent carries it on and rolls back.
    agent.signal("KILL");
    let _ = agent.child.wait();
    let mut agent = common::Agent::start(tb, &dir, "", &[], &[]);
    let back = eventually(Duration::from_secs(60), "version 1 back and Ready", || {
        ready(&agent).filter(|p| p["metadata"]["uid"] == v1)
    });
    let message = back["status"]["message"].as_str().unwrap_or_default().to_string();
    assert!(message.starts_with("rolled back from ") && message.contains("not Ready within 4s"), "{message}");
    let (_, listed, _) = agent.cli(&["pods"]);
    assert!(listed.contains(&format!("rb-tb: {message}")), "{listed}");
    let (_, described, _) = agent.cli(&["describe", "rb-tb"]);
    assert!(described.contains("RolledBack"), "{described}");
    assert_eq!(std::fs::read_to_string(manifests.join("rb.yaml")).unwrap(), bad, "the manifest is never rewritten");

    // kill -9 and start again: the bad version is not tried again; version 1 keeps running.
    let before = eventually(Duration::from_secs(60), "version 2 gone", || {
        let now = running(tb, "rb-tb");
        (now.len() == 1).then_some(now)
    });
    agent.signal("KILL");
    let _ = agent.child.wait();
    let agent = common::Agent::start(tb, &dir, "", &[], &[]);
    eventually(Duration::from_secs(60), "the restarted agent reports version 1", || {
        ready(&agent).filter(|p| p["metadata"]["uid"] == v1).map(|_| ())
    });
    std::thread::sleep(Duration::from_secs(3));
    assert_eq!(running(tb, "rb-tb"), before, "version 1 was replaced after the restart");
    std::fs::remove_file(manifests.join("rb.yaml")).unwrap();
    eventually(Duration::from_secs(60), "the pod gone", || running(tb, "rb-tb").is_empty().then_some(()));
    drop(agent);
    let _ = std::fs::remove_dir_all(&dir);
}
