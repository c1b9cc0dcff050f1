//! kubelet's HTTPS server on a real atoll (real containerd), reached as the API server and
//! metrics-server reach a kubelet: TLS to the node's self-signed certificate, a client
//! certificate from the cluster's CA or a bearer token the API server reviews, each request
//! authorized by SubjectAccessReview. Each attacker it is meant to stop plays here: nobody, a
//! forged token, a token whose user holds no right, and a user whose `get nodes/proxy` must not
//! open a shell.

use crate::apiserver;
use crate::common;
use crate::summary;

use apiserver::{ApiServer, Pki};
use common::kubectl::run as kubectl;
use common::kubelet_client::{request, ws_session, As};
use common::pods::{FILES, READER};
use common::{eventually, testbed};
use std::time::Duration;

/// A node for one test: atoll (kubelet server on a free 127.0.0.1 port, the Pki's CA for client
/// certificates) mirroring to a test API server, with `pods` (file name, manifest) in its
/// manifest directory.
struct Node {
    pki: Pki,
    server: ApiServer,
    agent: common::Agent,
    port: u16,
    /// The node's self-signed serving certificate.
    ca: std::path::PathBuf,
    /// Last: removed (its mounts first) after the agent has been stopped.
    dir: common::Scratch,
}

fn node(tag: &str, pods: &[(&str, &str)]) -> Node {
    let tb = testbed();
    let dir = crate::common::Scratch::new(tag);
    let manifests = dir.join("manifests");
    std::fs::create_dir_all(&manifests).unwrap();
    let pki = Pki::new(&dir.join("pki"), "tb");
    let server = ApiServer::start(&pki, "tb");
    let kubeconfig = pki.kubeconfig(server.addr, None);
    for (name, manifest) in pods {
        std::fs::write(manifests.join(name), manifest).unwrap();
    }
    let port = common::free_port();
    let agent = common::Agent::start(
        tb,
        &dir,
        &format!(
            "address: 127.0.0.1\nport: {port}\nfileCheckFrequency: 1s\nnodeStatusUpdateFrequency: 1s\nauthentication:\n  x509: {{clientCAFile: {}}}\n",
            pki.ca.display()
        ),
        // The address the API server dials is the node's published one.
        &[&format!("--kubeconfig={}", kubeconfig.display()), "--node-ip=127.0.0.1", "--v=10"],
        &[],
    );
    let ca = dir.join("state/pki/kubelet.crt");
    // The node publishes this server, and its certificate names 127.0.0.1.
    eventually(Duration::from_secs(60), "the node publishes the kubelet port", || {
        let n = server.get("nodes", "", "tb")?;
        (n["status"]["daemonEndpoints"]["kubeletEndpoint"]["Port"] == port).then_some(())
    });
    Node { dir, pki, server, agent, port, ca }
}

const WEB: &str = "apiVersion: v1\nkind: Pod\nmetadata: {name: web}\nspec:\n  hostNetwork: true\n  terminationGracePeriodSeconds: 1\n  containers:\n  - name: c\n    image: docker.io/library/busybox:1.36\n    command: [sh, -c, 'trap \"exit 0\" TERM; i=0; while true; do echo line $i; i=$((i+1)); sleep 0.2; done']\n";

/// What metrics-server keeps of one `/metrics/resource` scrape, decoded by its rules
/// (`pkg/scraper/client/resource/decode.go`): names matched exactly, labels found by
/// substring; the node kept only with non-zero CPU and memory and a timestamp; a pod dropped
/// whole when any of its containers shows zero CPU or memory. CPU in core-seconds, the time in
/// ms.
#[derive(Debug, Default)]
struct MetricsServerView {
    node: Option<(f64, f64, i64)>,
    /// pod → (CPU, memory, time) summed over its containers.
    pods: std::collections::BTreeMap<String, (f64, f64, i64)>,
}

fn metrics_server_decode(text: &str) -> MetricsServerView {
    // The text must be valid for Prometheus' own parser too.
    prometheus_parse::Scrape::parse(text.lines().map(|l| Ok(l.to_string()))).expect("valid text format");
    let label = |labels: &str, key: &str| -> String {
        let after = labels.split_once(&format!("{key}=\"")).map(|(_, after)| after);
        after.and_then(|a| a.split('"').next()).unwrap_or_default().to_string()
    };
    let (mut node_cpu, mut node_mem) = (None, None);
    // (pod, container) → (CPU, memory), each with its time.
    type Seen = (Option<(f64, i64)>, Option<(f64, i64)>);
    let mut containers: std::collections::BTreeMap<(String, String), Seen> = Default::default();
    for line in text.lines().filter(|l| !l.starts_with('#') && !l.is_empty()) {
        let (series, rest) = match line.find('}') {
            Some(i) => line.split_at(i + 1),
            None => line.split_once(' ').unwrap(),
        };
        let (name, labels) = series.split_once('{').unwrap_or((series, ""));
        let mut fields = rest.split_whitespace();
        let value: f64 = fields.next().unwrap().parse().unwrap();
        let Some(at) = fields.next().and_then(|t| t.parse::<i64>().ok()) else { continue };
        match name {
            "node_cpu_usage_seconds_total" => node_cpu = Some((value, at)),
            "node_memory_working_set_bytes" => node_mem = Some((value, at)),
            "container_cpu_usage_seconds_total" | "container_memory_working_set_bytes" => {
                let key =
                    (format!("{}/{}", label(labels, "namespace"), label(labels, "pod")), label(labels, "container"));
                let e = containers.entry(key).or_default();
                if name.starts_with("container_cpu") {
                    e.0 = Some((value, at));
                } else {
                    e.1 = Some((value, at));
                }
            }
            _ => {}
        }
    }
    let mut view = MetricsServerView::default();
    if let (Some((c, t)), Some((m, _))) = (node_cpu, node_mem) {
        if c > 0.0 && m > 0.0 {
            view.node = Some((c, m, t));
        }
    }
    let mut dropped = std::collections::BTreeSet::new();
    for ((pod, _), (cpu, mem)) in &containers {
        match (cpu, mem) {
            (Some((c, t)), Some((m, _))) if *c > 0.0 && *m > 0.0 => {
                let e = view.pods.entry(pod.clone()).or_insert((0.0, 0.0, *t));
                e.0 += c;
                e.1 += m;
                e.2 = e.2.max(*t);
            }
            _ => {
                dropped.insert(pod.clone());
            }
        }
    }
    for pod in dropped {
        view.pods.remove(&pod);
    }
    view
}

/// The value of the sample `series` (name and labels, as written) in a scrape.
fn sample(text: &str, series: &str) -> Option<f64> {
    text.lines().find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
}

type Get<'a> = &'a dyn Fn(&str) -> Option<(u16, String)>;

/// `/metrics/probes` and `/metrics/slis` as kube-prometheus scrapes them (`get nodes/metrics`,
/// which `get nodes/proxy` is not), and the certificates' lifetimes on `/metrics`. Only this
/// test's requests reach `/healthz` (the agent has no healthz port).
fn kubelets_other_metrics_paths(metrics: Get, proxy: Get) {
    for path in ["/metrics/probes", "/metrics/slis"] {
        assert_eq!(proxy(path).map(|r| r.0), Some(403), "{path}");
    }
    let counted = "prober_probe_total{probe_type=\"Readiness\",result=\"successful\",container=\"c\",pod=\"web-tb\",namespace=\"default\",pod_uid=\"";
    let probes = eventually(Duration::from_secs(30), "web's readiness probe counted", || {
        let (status, text) = metrics("/metrics/probes")?;
        (status == 200 && text.lines().any(|l| l.starts_with(counted))).then_some(text)
    });
    let timed = "prober_probe_duration_seconds_count{probe_type=\"Readiness\",container=\"c\",pod=\"web-tb\",namespace=\"default\"}";
    assert!(sample(&probes, timed).is_some_and(|n| n >= 1.0), "{probes}");
    assert!(probes.contains(",le=\"10\"} ") && probes.contains("\nprocess_start_time_seconds "), "{probes}");
    assert!(!probes.contains("atoll_") && !probes.contains("kubelet_"), "only kubelet's probe series: {probes}");

    // Each whole /healthz runs ping and syncloop, counted; a part alone is not.
    let checks = |status: &str| {
        let (_, slis) = metrics("/metrics/slis").unwrap();
        let total = format!("kubernetes_healthchecks_total{{name=\"syncloop\",status=\"{status}\",type=\"healthz\"}}");
        (sample(&slis, "kubernetes_healthcheck{name=\"syncloop\",type=\"healthz\"}"), sample(&slis, &total), slis)
    };
    let (healthy, before, slis) = checks("success");
    assert_eq!((healthy, before), (Some(1.0), Some(1.0)), "the one /healthz so far: {slis}");
    assert!(slis.contains("kubernetes_healthcheck{name=\"ping\",type=\"healthz\"} 1\n"), "{slis}");
    for path in ["/healthz/ping", "/healthz/syncloop"] {
        assert_eq!(proxy(path), Some((200, "ok".into())), "{path}");
    }
    assert_eq!(checks("success").1, Some(1.0), "a part alone is not counted");
    assert_eq!(proxy("/healthz"), Some((200, "ok".into())));
    assert_eq!(checks("success").1, Some(2.0));
    assert_eq!(checks("error").1, None, "never failed");

    // Certificates: the self-signed serving one is valid for a year from the agent's start,
    // the kubeconfig's client certificate for two days; neither is renewed yet.
    let (_, main) = metrics("/metrics").unwrap();
    let year = 365.0 * 86400.0;
    let server = sample(&main, "kubelet_certificate_manager_server_ttl_seconds").unwrap_or_default();
    assert!(server > year - 600.0 && server <= year, "{server}");
    let client = sample(&main, "kubelet_certificate_manager_client_ttl_seconds").unwrap_or_default();
    assert!(client > 2.0 * 86400.0 - 3600.0 && client <= 2.0 * 86400.0, "{client}");
    for zero in [
        "kubelet_server_expiration_renew_errors",
        "kubelet_certificate_manager_client_expiration_renew_errors",
        "kubelet_node_config_error",
    ] {
        assert_eq!(sample(&main, zero), Some(0.0), "{zero}");
    }
    let elsewhere = |l: &str| l.starts_with("prober_probe_") || l.starts_with("kubernetes_healthcheck");
    assert!(!main.lines().any(elsewhere), "kubelet serves these on their own paths: {main}");
}

#[test]
fn kubectl_s_way_in_is_authenticated_and_authorized_as_kubelet_s() {
    let _room = common::room(module_path!());
    let _turn = common::one_agent_at_a_time();
    // web with a readiness probe, for /metrics/probes.
    let probed = format!("{WEB}    readinessProbe:\n      exec: {{command: ['true']}}\n      periodSeconds: 1\n");
    let disk = summary::disk_pod(testbed().var("ATOLL_TB_GATEWAY"));
    let Node { dir, pki, server, agent, port, ca } =
        node("atoll-kubelet-server", &[("web.yaml", &probed), ("disk.yaml", &disk)]);
    server.add_reviewed_token("tok-viewer", "viewer", &["viewers"]);
    server.add_reviewed_token(
        "tok-ms",
        "system:serviceaccount:kube-system:metrics-server",
        &["system:serviceaccounts"],
    );
    server.grant("viewers", "get", "proxy");
    server.grant("system:nodes", "get", "proxy");
    server.add_reviewed_token("tok-admin", "admin", &[]);
    server.grant("admin", "create", "proxy");
    use std::os::unix::fs::PermissionsExt;
    let key_mode = std::fs::metadata(dir.join("state/pki/kubelet.key")).unwrap().permissions().mode();
    assert_eq!(key_mode & 0o077, 0, "the serving key is the agent's alone");
    let get = |who: &As, path: &str| request(port, &ca, who, "GET", path);
    let logs = eventually(Duration::from_secs(60), "web's log through the server", || {
        let (status, body) = get(&As::Token("tok-viewer"), "/containerLogs/default/web-tb/c?tailLines=2")?;
        (status == 200 && body.lines().count() == 2).then_some(body)
    });
    assert!(logs.lines().all(|l| l.starts_with("line ")), "{logs}");

    // Nobody, and a forged token: 401, as kubelet.
    assert_eq!(get(&As::Nobody, "/pods"), Some((401, "Unauthorized".into())));
    assert_eq!(get(&As::Token("forged"), "/pods"), Some((401, "Unauthorized".into())));
    // A reviewed token with no right: 403 with kubelet's message.
    assert_eq!(
        get(&As::Token("tok-ms"), "/pods"),
        Some((403, "Forbidden (user=system:serviceaccount:kube-system:metrics-server, verb=get, resource=nodes, subresource=proxy)".into()))
    );
    // get nodes/proxy reads pods, health and logs; it cannot exec, attach or forward, even as
    // a GET (the way a WebSocket upgrade arrives).
    let (status, pods) = get(&As::Token("tok-viewer"), "/pods").unwrap();
    assert_eq!(status, 200, "{pods}");
    let pods: serde_json::Value = serde_json::from_str(&pods).unwrap();
    assert!(pods["items"].as_array().unwrap().iter().any(|p| p["metadata"]["name"] == "web-tb"), "{pods}");
    assert_eq!(get(&As::Token("tok-viewer"), "/healthz"), Some((200, "ok".into())));
    for path in [
        "/exec/default/web-tb/c?command=sh&input=1&output=1",
        "/attach/default/web-tb/c",
        "/portForward/default/web-tb",
        "/run/default/web-tb/c",
    ] {
        assert_eq!(
            get(&As::Token("tok-viewer"), path),
            Some((403, "Forbidden (user=viewer, verb=create, resource=nodes, subresource=proxy)".into())),
            "{path}"
        );
    }
    // A path that is not in normal form is refused before anyone is asked.
    assert_eq!(get(&As::Token("tok-viewer"), "/pods/../exec/default/web-tb/c").map(|r| r.0), Some(400));
    // kubelet's log options: timestamps to the nanosecond, a byte limit cut mid-line, since.
    let (status, body) =
        get(&As::Token("tok-viewer"), "/containerLogs/default/web-tb/c?tailLines=1&timestamps=true").unwrap();
    assert_eq!(status, 200);
    let (time, text) = body.trim_end().split_once(' ').unwrap();
    assert!(time.len() == 30 && time.ends_with('Z') && time.as_bytes()[19] == b'.', "{body}");
    assert!(text.starts_with("line "), "{body}");
    assert_eq!(
        get(&As::Token("tok-viewer"), "/containerLogs/default/web-tb/c?limitBytes=7"),
        Some((200, "line 0\n".into()))
    );
    assert_eq!(
        get(&As::Token("tok-viewer"), "/containerLogs/default/web-tb/c?limitBytes=3"),
        Some((200, "lin".into()))
    );
    eventually(Duration::from_secs(30), "two seconds of web's log", || {
        let (_, all) = get(&As::Token("tok-viewer"), "/containerLogs/default/web-tb/c")?;
        (all.lines().count() > 12).then_some(())
    });
    let (_, recent) = get(&As::Token("tok-viewer"), "/containerLogs/default/web-tb/c?sinceSeconds=1").unwrap();
    assert!(!recent.contains("line 0\n") && !recent.is_empty(), "{recent}");
    assert_eq!(get(&As::Token("tok-viewer"), "/containerLogs/default/web-tb/c?sinceSeconds=0").map(|r| r.0), Some(422));
    let both = "/containerLogs/default/web-tb/c?sinceSeconds=5&sinceTime=2026-01-01T00:00:00Z";
    assert_eq!(get(&As::Token("tok-viewer"), both).map(|r| r.0), Some(422));
    assert_eq!(get(&As::Token("tok-viewer"), "/containerLogs/default/web-tb/c?stream=Stderr").map(|r| r.0), Some(400));
    // A container or a pod the node does not have: kubelet's 404s.
    assert_eq!(
        get(&As::Token("tok-viewer"), "/containerLogs/default/web-tb/nope"),
        Some((404, "container \"nope\" not found in pod \"web-tb\"".into()))
    );
    assert_eq!(
        get(&As::Token("tok-viewer"), "/containerLogs/default/gone/c"),
        Some((404, "pod \"gone\" does not exist".into()))
    );

    // The cluster CA's client certificate names its user: no TokenReview for it.
    let reviews_before = server.log().iter().filter(|l| l.path.ends_with("/tokenreviews")).count();
    let (status, _) = request(port, &ca, &As::Certificate(&pki.client_cert, &pki.client_key), "GET", "/pods").unwrap();
    assert_eq!(status, 200);
    assert_eq!(
        request(port, &ca, &As::Certificate(&pki.client_cert, &pki.client_key), "POST", "/exec/default/web-tb/c"),
        Some((403, "Forbidden (user=system:node:tb, verb=create, resource=nodes, subresource=proxy)".into()))
    );
    let log = server.log();
    assert_eq!(log.iter().filter(|l| l.path.ends_with("/tokenreviews")).count(), reviews_before);
    // Each token was reviewed once and each decision asked once, within kubelet's TTLs.
    let token_reviews = log.iter().filter(|l| l.path.ends_with("/tokenreviews")).count();
    assert_eq!(token_reviews, 3, "tok-viewer, tok-ms and forged, once each");
    for _ in 0..3 {
        assert_eq!(get(&As::Token("tok-viewer"), "/pods").map(|r| r.0), Some(200));
    }
    assert_eq!(server.log().iter().filter(|l| l.path.ends_with("/tokenreviews")).count(), token_reviews);

    // exec through the runtime's streaming server: every byte and the exit status arrive.
    let exec = |command: &str| {
        let q: String = ["sh", "-c", command]
            .iter()
            .map(|a| {
                format!(
                    "command={}&",
                    a.replace(' ', "%20").replace(';', "%3B").replace('>', "%3E").replace('&', "%26")
                )
            })
            .collect();
        ws_session(port, &ca, "tok-admin", &format!("/exec/default/web-tb/c?{q}output=1&error=1"))
            .expect("an exec session")
    };
    let (status, out) = exec("echo hi; echo oops >&2; exit 7");
    assert_eq!(status, 101);
    assert_eq!(out.get(&1).map(Vec::as_slice), Some(&b"hi\n"[..]));
    assert_eq!(out.get(&2).map(Vec::as_slice), Some(&b"oops\n"[..]));
    let exit = String::from_utf8_lossy(out.get(&3).map(Vec::as_slice).unwrap_or_default()).into_owned();
    assert!(exit.contains("NonZeroExitCode") && exit.contains("\"7\""), "{exit}");
    let (_, out) = exec("head -c 10485760 /dev/zero; exit 7");
    assert_eq!(out.get(&1).map_or(0, Vec::len), 10 << 20, "exactly 10 MiB");
    assert!(String::from_utf8_lossy(&out[&3]).contains("\"7\""));
    let (status, _) = ws_session(port, &ca, "tok-admin", "/exec/default/web-tb/nope?command=true&output=1").unwrap();
    assert_eq!(status, 404, "no such container");
    let (status, _) = ws_session(port, &ca, "tok-admin", "/exec/default/web-tb/c?output=1").unwrap();
    assert_eq!(status, 400, "no command");
    assert_eq!(
        ws_session(port, &ca, "tok-viewer", "/exec/default/web-tb/c?command=true&output=1").map(|r| r.0),
        Some(403),
        "get nodes/proxy cannot open a WebSocket exec"
    );

    // kubectl top's way: metrics-server reads /metrics/resource twice for a CPU rate, with
    // `get nodes/metrics`; the summary with `get nodes/stats`.
    assert_eq!(
        get(&As::Token("tok-viewer"), "/metrics/resource").map(|r| r.0),
        Some(403),
        "get nodes/proxy is not metrics"
    );
    server.grant("system:serviceaccounts", "get", "metrics");
    server.grant("system:serviceaccounts", "get", "stats");
    let first = metrics_server_decode(&get(&As::Token("tok-ms"), "/metrics/resource").unwrap().1);
    std::thread::sleep(Duration::from_secs(2));
    let (status, text) = get(&As::Token("tok-ms"), "/metrics/resource").unwrap();
    assert_eq!(status, 200, "{text}");
    let second = metrics_server_decode(&text);
    let (n1, n2) = (first.node.expect("the node"), second.node.expect("the node"));
    assert!(n2.2 > n1.2 && n2.0 > n1.0, "the node's CPU rate: {n1:?} then {n2:?}");
    let (p1, p2) = (first.pods["default/web-tb"], second.pods["default/web-tb"]);
    let rate = (p2.0 - p1.0) / ((p2.2 - p1.2) as f64 / 1000.0);
    assert!(rate > 0.0 && rate < 2.0, "web's CPU rate {rate} from {p1:?} and {p2:?}");
    assert!(p2.1 > 0.0, "web's working set");
    assert!(
        text.lines()
            .any(|l| l
                .starts_with("container_start_time_seconds{container=\"c\",namespace=\"default\",pod=\"web-tb\"} ")),
        "{text}"
    );
    let (status, summary) = get(&As::Token("tok-ms"), "/stats/summary?only_cpu_and_memory=true").unwrap();
    assert_eq!(status, 200, "{summary}");
    let summary: serde_json::Value = serde_json::from_str(&summary).unwrap();
    assert_eq!(summary["node"]["nodeName"], "tb");
    let web = summary["pods"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["podRef"]["name"] == "web-tb")
        .expect("web in the summary");
    assert!(web["containers"][0]["cpu"]["usageCoreNanoSeconds"].as_u64().unwrap() > 0, "{web}");
    summary::check(&|path| get(&As::Token("tok-ms"), path));
    assert_eq!(get(&As::Token("tok-ms"), "/pods").map(|r| r.0), Some(403), "metrics and stats are not proxy");
    kubelets_other_metrics_paths(&|path| get(&As::Token("tok-ms"), path), &|path| get(&As::Token("tok-viewer"), path));

    // /run: the command's output, as kubelet's RunInContainer; a failure names its exit.
    let run =
        |cmd: &str| request(port, &ca, &As::Token("tok-admin"), "POST", &format!("/run/default/web-tb/c?cmd={cmd}"));
    assert_eq!(run("echo%20hello"), Some((200, "hello\n".into())));
    let (status, body) = run("false").unwrap();
    assert!(status == 500 && body.contains("exited with 1"), "{status} {body}");
    assert_eq!(
        request(port, &ca, &As::Token("tok-admin"), "GET", "/run/default/web-tb/c?cmd=true").map(|r| r.0),
        Some(405)
    );

    // The API server unreachable: a new token cannot be reviewed (401); cached answers hold.
    server.add_reviewed_token("tok-late", "viewer", &["viewers"]);
    server.down();
    assert_eq!(get(&As::Token("tok-late"), "/pods").map(|r| r.0), Some(401));
    assert_eq!(get(&As::Token("tok-viewer"), "/pods").map(|r| r.0), Some(200));
    server.up();
    // Bearer tokens never reach the agent's log, at any verbosity.
    let log = agent.log();
    assert!(log.contains("kubelet server on https://127.0.0.1:"), "{log}");
    for token in ["tok-viewer", "tok-ms", "tok-late", "tok-admin", "forged"] {
        assert!(!log.contains(token), "{token} in the log");
    }
    drop(agent);
    let _ = std::fs::remove_dir_all(&dir);
}

/// A kubeconfig for kubectl: the test API server, its CA, and a token it knows as `admin`.
fn kubectl_config(n: &Node) -> std::path::PathBuf {
    n.server.add_token("tok-kubectl", "admin");
    common::kubectl::config(&n.dir, n.server.addr, &n.pki.ca)
}

/// Its first instance exits 1; the second (counted in an emptyDir, which outlives restarts)
/// runs on.
const RESTARTER: &str = "apiVersion: v1\nkind: Pod\nmetadata: {name: restarter}\nspec:\n  terminationGracePeriodSeconds: 1\n  volumes: [{name: state, emptyDir: {}}]\n  containers:\n  - name: c\n    image: docker.io/library/busybox:1.36\n    volumeMounts: [{name: state, mountPath: /state}]\n    command: [sh, -c, 'n=$(cat /state/n 2>/dev/null || echo 0); echo instance $n; echo $((n+1)) > /state/n; [ $n -gt 0 ] && exec sleep 3600; exit 1']\n";
const COUNTER: &str = "apiVersion: v1\nkind: Pod\nmetadata: {name: counter}\nspec:\n  restartPolicy: Never\n  containers:\n  - name: c\n    image: docker.io/library/busybox:1.36\n    command: [sh, -c, 'sleep 2; for i in $(seq 0 29); do echo count $i; sleep 0.2; done']\n";

/// A real kubectl 1.37 against the test API server, which sends pods/log, pods/exec and
/// pods/portforward on to the node as kube-apiserver does (its kubelet client certificate,
/// the node's published endpoint); kubectl's WebSocket attempts are refused there, so it
/// falls back to SPDY, the protocol every API server speaks to a node that declares no
/// WebSocket support.
#[test]
fn kubectl_logs_exec_and_port_forward_reach_pods_through_the_api_server() {
    let _room = common::room(module_path!());
    let _turn = common::one_agent_at_a_time();
    let pods = [
        ("web.yaml", WEB),
        ("files.yaml", FILES),
        ("counter.yaml", COUNTER),
        ("restarter.yaml", RESTARTER),
        ("reader.yaml", READER),
    ];
    let n = node("atoll-kubectl", &pods);
    n.server.kubelet_client(&n.pki, &n.ca);
    n.server.add_reviewed_token("unused", "nobody", &[]);
    n.server.grant("kube-apiserver-kubelet-client", "get", "proxy");
    n.server.grant("kube-apiserver-kubelet-client", "create", "proxy");
    let config = kubectl_config(&n);
    for pod in ["web-tb", "counter-tb", "reader-tb"] {
        eventually(Duration::from_secs(90), &format!("{pod} running in the API server"), || {
            (n.server.get("pods", "default", pod)?["status"]["phase"] == "Running").then_some(())
        });
    }

    // logs -f follows the growing log and ends when the container does.
    let started = std::time::Instant::now();
    let (code, out, err) = kubectl(&config, &["logs", "-f", "counter-tb"], b"");
    let out = String::from_utf8_lossy(&out).into_owned();
    assert_eq!(code, 0, "{err}");
    assert_eq!(out.lines().count(), 30, "{out}");
    assert_eq!(out.lines().last(), Some("count 29"));
    assert!(started.elapsed() > Duration::from_secs(2), "it followed a running container");
    let logs = |args: &[&str]| {
        let (code, out, err) = kubectl(&config, &[&["logs", "web-tb", "-c", "c"][..], args].concat(), b"");
        assert_eq!(code, 0, "{args:?}: {err}");
        String::from_utf8_lossy(&out).into_owned()
    };
    // The tail of a log that no longer grows (a growing one may gain a line between finding
    // the tail and reading it, with kubelet as with atoll).
    let (code, out, err) = kubectl(&config, &["logs", "counter-tb", "--tail=2"], b"");
    assert_eq!((code, String::from_utf8_lossy(&out).as_ref()), (0, "count 28\ncount 29\n"), "{err}");
    let out = logs(&["--tail=1", "--timestamps"]);
    let (time, text) = out.trim_end().split_once(' ').unwrap();
    assert!(time.len() == 30 && text.starts_with("line "), "{out}");
    assert_eq!(logs(&["--limit-bytes=10"]), "line 0\nlin");
    assert!(logs(&["--since=1h"]).starts_with("line 0\n"));
    assert!(!logs(&["--since=1s"]).contains("line 0\n"));
    assert_eq!(logs(&["--since-time=2099-01-01T00:00:00Z"]), "");
    // --previous: the log of the instance before the last restart.
    eventually(Duration::from_secs(90), "restarter restarted and running", || {
        let p = n.server.get("pods", "default", "restarter-tb")?;
        let c = &p["status"]["containerStatuses"][0];
        (c["restartCount"] == 1 && c["state"]["running"].is_object()).then_some(())
    });
    let (code, out, err) = kubectl(&config, &["logs", "--previous", "restarter-tb"], b"");
    assert_eq!((code, String::from_utf8_lossy(&out).as_ref()), (0, "instance 0\n"), "{err}");
    let (code, out, err) = kubectl(&config, &["logs", "restarter-tb"], b"");
    assert_eq!((code, String::from_utf8_lossy(&out).as_ref()), (0, "instance 1\n"), "{err}");

    // exec: every byte and the exit status; stdin through and closed.
    let (code, out, err) =
        kubectl(&config, &["exec", "web-tb", "--", "sh", "-c", "head -c 10485760 /dev/zero; exit 7"], b"");
    assert_eq!(code, 7, "{err}");
    // The line `atoll exec` prints too (tests/runtime/exec_cli.rs).
    assert!(err.contains("command terminated with exit code 7"), "{err}");
    assert_eq!(out.len(), 10 << 20, "exactly 10 MiB");
    assert!(out.iter().all(|b| *b == 0));
    let (code, out, err) =
        kubectl(&config, &["exec", "-i", "web-tb", "--", "sh", "-c", "cat; echo done >&2"], b"round trip\n");
    assert_eq!((code, out.as_slice()), (0, &b"round trip\n"[..]), "{err}");
    assert!(err.contains("done"), "{err}");

    // A terminal: kubectl in a pseudo-terminal (script(1)) asks for a TTY and a resize stream.
    let command =
        format!("{} --kubeconfig={} exec -it web-tb -- sh", testbed().var("ATOLL_TB_KUBECTL"), config.display());
    let (code, text) = common::in_terminal(&command, b"tty; echo $((6*7)); exit 3\n");
    assert!(text.contains("/dev/pts/") && text.contains("42"), "{text}");
    assert_eq!(code, Some(3), "{text}");
    // attach: stdin to the container's main process, its output back; stdinOnce closes its
    // stdin when the session does, and the container ends.
    let (code, out, err) = kubectl(&config, &["attach", "-i", "reader-tb"], b"hello\nworld\n");
    assert_eq!(code, 0, "{err}");
    let out = String::from_utf8_lossy(&out);
    assert!(out.contains("got hello") && out.contains("got world"), "{out}");

    // 50 sessions at once, each with its own answer.
    let sessions: Vec<_> = (0..50)
        .map(|i| {
            let config = config.clone();
            std::thread::spawn(move || {
                kubectl(&config, &["exec", "web-tb", "--", "echo", &format!("session {i}")], b"")
            })
        })
        .collect();
    for (i, s) in sessions.into_iter().enumerate() {
        let (code, out, err) = s.join().unwrap();
        assert_eq!((code, String::from_utf8_lossy(&out).trim()), (0, format!("session {i}").as_str()), "{err}");
    }

    // port-forward: 100 MiB from the pod's own network namespace, every byte.
    common::kubectl::port_forward_blob(&config);

    // The API server reached the node as its kubelet client, and kubectl fell back to SPDY.
    let log = n.server.log();
    assert!(log.iter().any(|l| l.path.contains("/pods/web-tb/exec") && l.status == 400), "the WebSocket try");
    assert!(log.iter().any(|l| l.path.contains("/pods/web-tb/exec") && l.status == 101), "then SPDY");
    drop(n.agent);
    let _ = std::fs::remove_dir_all(&n.dir);
}

/// Without a kubeconfig the server listens only when configured as a standalone kubelet's:
/// its certificate, clientCAFile and AlwaysAllow. A certificate from that CA reads the node; no
/// certificate, a token (nobody to review it) or another CA's certificate gets nothing. With
/// nothing configured there is no listener.
#[test]
fn a_standalone_server_takes_only_its_ca_s_certificates() {
    let _room = common::room(module_path!());
    let _turn = common::one_agent_at_a_time();
    let tb = testbed();
    let dir = crate::common::Scratch::new("kubelet-standalone");
    let pki = Pki::new(&dir.join("pki"), "tb");
    let stranger = Pki::new(&dir.join("other-pki"), "tb");
    let (port, quiet_port) = (common::free_port(), common::free_port());
    let config = format!(
        "address: 127.0.0.1\nport: {port}\ntlsCertFile: {}\ntlsPrivateKeyFile: {}\nauthentication:\n  x509: {{clientCAFile: {}}}\nauthorization: {{mode: AlwaysAllow}}\n",
        pki.dir.join("server.crt").display(),
        pki.dir.join("server.key").display(),
        pki.ca.display()
    );
    let agent = common::Agent::start(tb, &dir.join("standalone"), &config, &[], &[]);
    let quiet =
        common::Agent::start(tb, &dir.join("quiet"), &format!("address: 127.0.0.1\nport: {quiet_port}\n"), &[], &[]);
    let client = As::Certificate(&pki.client_cert, &pki.client_key);
    let (status, pods) = eventually(Duration::from_secs(60), "the standalone server answers", || {
        request(port, &pki.ca, &client, "GET", "/pods")
    });
    assert_eq!(status, 200, "{pods}");
    assert_eq!(serde_json::from_str::<serde_json::Value>(&pods).unwrap()["kind"], "PodList", "{pods}");
    assert_eq!(request(port, &pki.ca, &client, "GET", "/healthz"), Some((200, "ok".into())));
    assert_eq!(request(port, &pki.ca, &As::Nobody, "GET", "/pods"), Some((401, "Unauthorized".into())));
    assert_eq!(request(port, &pki.ca, &As::Token("any"), "GET", "/pods"), Some((401, "Unauthorized".into())));
    let other = As::Certificate(&stranger.client_cert, &stranger.client_key);
    assert_eq!(request(port, &pki.ca, &other, "GET", "/pods").map(|r| r.0), None, "another CA's certificate");
    // The agent with nothing configured has run its first sync, and listens nowhere on its port.
    eventually(Duration::from_secs(60), "the quiet agent's first sync", || {
        quiet.log().contains("first full sync done").then_some(())
    });
    assert!(std::net::TcpStream::connect(("127.0.0.1", quiet_port)).is_err(), "{}", quiet.log());
    drop((agent, quiet));
    let _ = std::fs::remove_dir_all(&dir);
}
