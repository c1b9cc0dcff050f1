//! The API source end to end: pods the cluster binds to the node, created with the real
//! kubectl against the test API server (which holds every request to k8s.io/api's types) and
//! run by atoll on the real private containerd. `kubectl get -o wide` shows them Running with
//! their IP, `kubectl logs` and `exec` reach them, a graceful `kubectl delete` stops one within
//! its grace period and the object goes; then an offline reboot (atoll killed, containerd
//! restarted, no API server) brings the pods back from the kept copy without starting any twice,
//! and a pod deleted in the cluster meanwhile stops once the API server is back.

use crate::apiserver;
use crate::common;

use apiserver::{ApiServer, Pki};
use common::{eventually, testbed, Testbed};
use serde_json::Value;
use std::path::Path;
use std::time::{Duration, Instant};

fn start_agent(tb: &Testbed, dir: &Path, kubeconfig: &Path, pki: &Pki, port: u16) -> common::Agent {
    common::Agent::start(
        tb,
        dir,
        &format!(
            "address: 127.0.0.1\nport: {port}\nnodeStatusUpdateFrequency: 1s\nnodeLeaseDurationSeconds: 8\nauthentication:\n  x509: {{clientCAFile: {}}}\n",
            pki.ca.display()
        ),
        &[&format!("--kubeconfig={}", kubeconfig.display()), "--node-ip=127.0.0.1", "--v=2"],
        &[],
    )
}

/// A pod bound to `tb` as the DaemonSet controller makes them: node affinity to the node by
/// name, the DaemonSet's tolerations, an owner. It prints a line, then sleeps until TERM.
fn bound_pod(name: &str) -> String {
    format!(
        r#"apiVersion: v1
kind: Pod
metadata:
  name: {name}
  labels: {{app: {name}}}
spec:
  nodeName: tb
  automountServiceAccountToken: false
  terminationGracePeriodSeconds: 3
  affinity:
    nodeAffinity:
      requiredDuringSchedulingIgnoredDuringExecution:
        nodeSelectorTerms:
        - matchFields: [{{key: metadata.name, operator: In, values: [tb]}}]
  tolerations:
  - {{key: node.kubernetes.io/not-ready, operator: Exists, effect: NoExecute}}
  - {{key: node.kubernetes.io/unreachable, operator: Exists, effect: NoExecute}}
  - {{key: node.kubernetes.io/unschedulable, operator: Exists, effect: NoSchedule}}
  containers:
  - name: c
    image: docker.io/library/busybox:1.36
    command: [sh, -c, 'echo hello from {name}; trap "exit 0" TERM; while true; do sleep 0.2; done']
"#
    )
}

/// A pod that reads what the cluster gives it: a ConfigMap volume, a Secret in its
/// environment, and the projected volume the ServiceAccount admission plugin adds to every
/// pod (a token, `kube-root-ca.crt`, the namespace).
const READER: &str = r#"apiVersion: v1
kind: ConfigMap
metadata: {name: settings}
data: {greeting: hello}
---
apiVersion: v1
kind: Secret
metadata: {name: creds}
stringData: {password: hunter2}
---
apiVersion: v1
kind: ConfigMap
metadata: {name: kube-root-ca.crt}
data: {ca.crt: "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"}
---
apiVersion: v1
kind: Pod
metadata: {name: reader}
spec:
  nodeName: tb
  serviceAccountName: default
  terminationGracePeriodSeconds: 1
  volumes:
  - {name: settings, configMap: {name: settings}}
  - name: kube-api-access-7x2q
    projected:
      defaultMode: 420
      sources:
      - serviceAccountToken: {path: token, expirationSeconds: 3607}
      - configMap: {name: kube-root-ca.crt, items: [{key: ca.crt, path: ca.crt}]}
      - downwardAPI: {items: [{path: namespace, fieldRef: {apiVersion: v1, fieldPath: metadata.namespace}}]}
  containers:
  - name: c
    image: docker.io/library/busybox:1.36
    command: [sh, -c, 'trap "exit 0" TERM; while true; do sleep 0.2; done']
    env:
    - {name: PASSWORD, valueFrom: {secretKeyRef: {name: creds, key: password}}}
    volumeMounts:
    - {name: settings, mountPath: /etc/settings}
    - {name: kube-api-access-7x2q, mountPath: /var/run/secrets/kubernetes.io/serviceaccount, readOnly: true}
"#;

const TOKEN: &str = "/var/run/secrets/kubernetes.io/serviceaccount/token";

fn running(tb: &Testbed, name: &str) -> Option<String> {
    tb.running_in(name).first().map(|c| c.id.clone())
}

fn kubectl(config: &Path, args: &[&str], stdin: &str) -> (i32, String, String) {
    let (code, out, err) = common::kubectl::run(config, args, stdin.as_bytes());
    (code, String::from_utf8_lossy(&out).into_owned(), err)
}

#[test]
fn pods_bound_by_the_cluster_run_report_stop_and_come_back_offline() {
    let _room = common::room(module_path!());
    let _turn = common::one_agent_at_a_time();
    let tb = testbed();
    let dir = common::Scratch::new("api-pods");
    let pki = Pki::new(&dir.join("pki"), "tb");
    let server = ApiServer::start(&pki, "tb");
    let kubeconfig = pki.kubeconfig(server.addr, None);
    server.add_token("tok-kubectl", "admin");
    let kc = common::kubectl::config(&dir, server.addr, &pki.ca);
    let port = common::free_port();
    let agent = start_agent(tb, &dir, &kubeconfig, &pki, port);

    // The node registers without atoll's static-only taint: the cluster may schedule here.
    let node = eventually(Duration::from_secs(60), "the node registered and Ready", || {
        let n = server.get("nodes", "", "tb")?;
        let conditions = n["status"]["conditions"].as_array()?;
        conditions.iter().any(|c| c["type"] == "Ready" && c["status"] == "True").then_some(n)
    });
    let taints = node["spec"]["taints"].as_array().cloned().unwrap_or_default();
    assert!(!taints.iter().any(|t| t["key"] == "atoll.io/static-pods-only"), "{taints:?}");

    // kubectl apply: the pods run. (Client-side validation needs the OpenAPI document, which
    // the test API server does not serve; the server checks every body itself.)
    // The server caps tokens at 20 s (and says so in its answer): kubelet's rule asks again at
    // 80 % of that, less its jitter (6 to 11 s after each issue), not at once.
    server.token_lifetime(Some(20));
    // A pod atoll cannot run (a persistent volume claim) is reported Failed, as kubelet
    // reports a pod it rejects.
    let claimer = bound_pod("claimer").replace(
        "  containers:\n",
        "  volumes: [{name: data, persistentVolumeClaim: {claimName: data}}]\n  containers:\n",
    );
    let manifests = [bound_pod("daemon"), bound_pod("second"), bound_pod("third"), READER.into(), claimer, JOB.into()]
        .join("---\n");
    let (code, out, err) = kubectl(&kc, &["apply", "--validate=false", "-f", "-"], &manifests);
    assert_eq!(code, 0, "{out}{err}");
    let daemon_id = eventually(Duration::from_secs(90), "daemon running", || running(tb, "daemon"));
    eventually(Duration::from_secs(60), "second and third running", || running(tb, "second").and(running(tb, "third")));
    claimer_is_reported_failed(tb, &server);
    let uid = server.get("pods", "default", "daemon").unwrap()["metadata"]["uid"].as_str().unwrap().to_string();
    let sandbox = &tb.sandboxes_of("daemon")[0];
    assert_eq!(sandbox.metadata.as_ref().unwrap().uid, uid, "the cluster's UID, as kubelet runs it");

    status_as_kubelet_writes_it(&kc, &server);

    logs_and_exec_through_the_node(&kc, &server, &pki, &dir);

    reader_gets_what_the_cluster_gives(tb, &kc, &server, &agent, &dir);

    // atoll pods and describe name the source.
    let (_, table, _) = agent.cli(&["pods"]);
    let row = table.lines().find(|l| l.starts_with("daemon ")).unwrap_or_default();
    assert!(row.contains("Running") && row.trim_end().ends_with("api"), "{table}");
    let (_, described, _) = agent.cli(&["describe", "daemon"]);
    assert!(described.contains("Source:") && described.contains("bound to the node by the API server"), "{described}");

    // A graceful kubectl delete: stopped within its grace period (3 s), then the object goes.
    let asked = Instant::now();
    let (code, out, err) = kubectl(&kc, &["delete", "pod", "second", "--wait=false"], "");
    assert_eq!(code, 0, "{out}{err}");
    eventually(Duration::from_secs(30), "second stopped", || running(tb, "second").is_none().then_some(()));
    let stopped = asked.elapsed();
    eventually(Duration::from_secs(30), "second deleted from the API server", || {
        server.get("pods", "default", "second").is_none().then_some(())
    });
    assert!(stopped < Duration::from_secs(3 + 5), "stopped after {stopped:?}");
    let deleted_by_node = server.log().into_iter().any(|l| {
        l.method == "DELETE" && l.path.ends_with("/pods/second") && l.user == "system:node:tb" && l.status == 200
    });
    assert!(deleted_by_node, "the node deletes it for good once stopped");

    // The offline reboot: atoll killed, the API server gone, containerd restarted. Meanwhile the
    // cluster deletes third.
    drop(agent);
    server.down();
    tb.restart_containerd();
    let (code, _) = server.admin(
        "DELETE",
        "/api/v1/namespaces/default/pods/third",
        "application/json",
        Some(serde_json::json!({"gracePeriodSeconds": 0})),
    );
    assert_eq!(code, 200);
    let third_id = running(tb, "third").expect("third runs on through the reboot of atoll");
    let agent = start_agent(tb, &dir, &kubeconfig, &pki, port);
    eventually(Duration::from_secs(60), "daemon shown from the kept copy", || {
        let (_, table, _) = agent.cli(&["pods"]);
        table.lines().any(|l| l.starts_with("daemon ") && l.contains("api (kept)")).then_some(())
    });
    std::thread::sleep(Duration::from_secs(3));
    assert_eq!(running(tb, "daemon"), Some(daemon_id.clone()), "adopted, not started again");
    assert_eq!(running(tb, "third"), Some(third_id), "the kept copy still has third");
    assert!(agent.log().contains("from the kept copy"), "{}", agent.log());

    // The API server is back: third, deleted meanwhile, stops; daemon runs on, once.
    server.up();
    eventually(Duration::from_secs(60), "third stopped", || running(tb, "third").is_none().then_some(()));
    eventually(Duration::from_secs(30), "daemon reported from the API server again", || {
        let (_, table, _) = agent.cli(&["pods"]);
        table.lines().any(|l| l.starts_with("daemon ") && l.trim_end().ends_with(" api")).then_some(())
    });
    assert_eq!(running(tb, "daemon"), Some(daemon_id), "never started twice");
    assert!(running(tb, "job").is_none(), "a finished pod is never started again");
    assert_eq!(server.get("pods", "default", "job").unwrap()["status"]["phase"], "Succeeded");
    assert_eq!(tb.sandboxes_of("daemon").len(), 1);
    let on_server: Value = server.get("pods", "default", "daemon").unwrap();
    assert_eq!(on_server["status"]["phase"], "Running");
    assert!(server.refused().is_empty(), "every request held to k8s.io/api's types: {:?}", server.refused());
    let forbidden: Vec<String> =
        server.log().into_iter().filter(|l| l.status == 403).map(|l| format!("{} {}", l.method, l.path)).collect();
    assert!(forbidden.is_empty(), "the node asks only what the node authorizer allows: {forbidden:?}");
    drop(agent);
}

/// `kubectl get`: daemon Running on tb with its IP; its status as kubelet's status manager
/// writes it.
fn status_as_kubelet_writes_it(kc: &Path, server: &ApiServer) {
    // kubectl get -o wide (the server prints the Table, as kube-apiserver does): 1/1 Running
    // on tb with its IP; the status as kubelet's status manager writes it.
    let wide = eventually(Duration::from_secs(60), "daemon Running in kubectl get -o wide", || {
        let (code, out, _) = kubectl(kc, &["get", "pod", "daemon", "-o", "wide"], "");
        let row = out.lines().find(|l| l.starts_with("daemon "))?.split_whitespace().collect::<Vec<_>>().join(" ");
        (code == 0 && row.starts_with("daemon 1/1 Running 0 ") && row.contains(" tb ")).then_some(out)
    });
    assert!(wide.lines().next().is_some_and(|h| h.contains("IP") && h.contains("NODE")), "{wide}");
    let on_server = server.get("pods", "default", "daemon").unwrap();
    let ip = on_server["status"]["podIP"].as_str().unwrap_or_default().to_string();
    assert!(ip.starts_with("10.") && wide.contains(&format!(" {ip} ")), "{wide}\n{}", on_server["status"]);
    assert_eq!(on_server["status"]["qosClass"], "BestEffort");
    assert!(on_server["status"]["startTime"].is_string());
    let ready = on_server["status"]["conditions"].as_array().unwrap();
    assert!(ready.iter().any(|c| c["type"] == "Ready" && c["status"] == "True"), "{ready:?}");
}

/// What the cluster gives a pod: its ConfigMap, its Secret, its token, the cluster's CA and its
/// namespace; a ConfigMap edit reaches the volume; the token is asked again before it ends,
/// bound to the pod; the kept copy seals the Secret and the tokens.
fn reader_gets_what_the_cluster_gives(tb: &Testbed, kc: &Path, server: &ApiServer, agent: &common::Agent, dir: &Path) {
    // What the cluster gives a pod: its ConfigMap, its Secret, its token, the cluster's CA and
    // its namespace; a ConfigMap edit reaches the volume; the token is asked again before it
    // ends, bound to the pod.
    let exec = |cmd: &str| {
        let (code, out, err) = kubectl(kc, &["exec", "reader", "--", "sh", "-c", cmd], "");
        (code == 0).then_some(out).ok_or(err)
    };
    eventually(Duration::from_secs(60), "reader running", || running(tb, "reader"));
    assert_eq!(exec("cat /etc/settings/greeting").unwrap(), "hello");
    assert_eq!(exec("echo $PASSWORD").unwrap().trim(), "hunter2");
    let sa = "/var/run/secrets/kubernetes.io/serviceaccount";
    assert_eq!(exec(&format!("cat {sa}/namespace")).unwrap(), "default");
    assert!(exec(&format!("cat {sa}/ca.crt")).unwrap().starts_with("-----BEGIN CERTIFICATE-----"));
    let first = exec(&format!("cat {TOKEN}")).unwrap();
    let issued = server.issued_tokens();
    assert!(issued.iter().any(|(pod, t)| pod == "reader" && *t == first), "{first} not in {issued:?}");
    let (code, out, err) =
        kubectl(kc, &["patch", "configmap", "settings", "-p", r#"{"data":{"greeting":"bonjour"}}"#], "");
    assert_eq!(code, 0, "{out}{err}");
    eventually(Duration::from_secs(60), "the edited ConfigMap in the volume", || {
        (exec("cat /etc/settings/greeting").ok()? == "bonjour").then_some(())
    });
    let second = eventually(Duration::from_secs(30), "the token asked again", || {
        exec(&format!("cat {TOKEN}")).ok().filter(|t| *t != first)
    });
    let issued: Vec<String> =
        server.issued_tokens().into_iter().filter(|(pod, _)| pod == "reader").map(|(_, t)| t).collect();
    assert!(issued.contains(&second));
    // Asked again when due, not at every turn of the loop (a capped lifetime read right).
    assert!(issued.len() <= 4, "{} tokens asked for reader so far", issued.len());
    // The kept copy holds the pods and the ConfigMaps as they are, the Secret and the tokens
    // sealed: neither the password nor a token is readable in it.
    let kept = std::fs::read_to_string(dir.join("state/sources/api/pods.json")).unwrap();
    assert!(kept.contains("kube-root-ca.crt") && kept.contains("\"sealed\""), "{kept}");
    for secret in ["hunter2", "aHVudGVyMg", &first, &second] {
        assert!(!kept.contains(secret), "{secret} in the kept copy");
    }
    assert!(!agent.log().contains("hunter2") && !agent.log().contains(&second), "a secret in the log");
}

/// kubectl logs and exec reach daemon through the node's kubelet server; the Job's pod
/// succeeds.
fn logs_and_exec_through_the_node(kc: &Path, server: &ApiServer, pki: &Pki, dir: &Path) {
    let ca = dir.join("state/pki/kubelet.crt");
    server.kubelet_client(pki, &ca);
    server.grant("kube-apiserver-kubelet-client", "get", "proxy");
    server.grant("kube-apiserver-kubelet-client", "create", "proxy");
    let (code, out, err) = kubectl(kc, &["logs", "daemon"], "");
    assert!(code == 0 && out.contains("hello from daemon"), "{out}{err}");
    let (code, out, err) = kubectl(kc, &["exec", "daemon", "--", "echo", "inside"], "");
    assert!(code == 0 && out.trim() == "inside", "{out}{err}");
    job_succeeds(server);
}

/// A pod as the Job controller makes them: it runs once.
const JOB: &str = r#"apiVersion: v1
kind: Pod
metadata: {name: job, labels: {job-name: job}}
spec:
  nodeName: tb
  restartPolicy: Never
  automountServiceAccountToken: false
  containers:
  - name: c
    image: docker.io/library/busybox:1.36
    command: [sh, -c, 'echo job done']
"#;

/// The Job's pod runs once and is reported Succeeded.
fn job_succeeds(server: &ApiServer) {
    eventually(Duration::from_secs(60), "job Succeeded", || {
        server.get("pods", "default", "job").filter(|p| p["status"]["phase"] == "Succeeded")
    });
}

/// A pod atoll cannot run: Failed, with kubelet's wording for a rejected pod, never started.
fn claimer_is_reported_failed(tb: &Testbed, server: &ApiServer) {
    let failed = eventually(Duration::from_secs(30), "claimer reported Failed", || {
        server.get("pods", "default", "claimer").filter(|p| p["status"]["phase"] == "Failed")
    });
    assert_eq!(failed["status"]["reason"], "UnsupportedPodSpec");
    let message = failed["status"]["message"].as_str().unwrap_or_default();
    assert!(
        message.starts_with("Pod was rejected: ") && message.contains("persistentvolumeclaims are not implemented")
    );
    assert!(tb.sandboxes_of("claimer").is_empty(), "never started");
}
