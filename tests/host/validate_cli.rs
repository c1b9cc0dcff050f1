//! `atoll validate` as a manifest repository's CI would run it.

use std::process::Command;

fn validate(args: &[&str]) -> (i32, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_atoll"))
        .arg("validate")
        .args(args)
        .arg("--hostname-override=ci-node")
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("run atoll validate");
    (out.status.code().unwrap_or(-1), String::from_utf8_lossy(&out.stdout).into_owned())
}

#[test]
fn the_example_manifests_are_valid() {
    let (code, out) = validate(&["configs/examples"]);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("configs/examples/hello-web.yaml: ok: pod default/hello-web-ci-node uid "), "{out}");
    assert!(out.contains("configs/examples/ticker.yaml: ok: pod default/ticker-ci-node uid "), "{out}");
    // The greeter's ConfigMap and Secret are beside it; values never printed.
    assert!(
        out.contains("configs/examples/greeter-config.yaml: ok: configmap default/greeter-config (2 keys, 31 bytes)"),
        "{out}"
    );
    assert!(out.contains("configs/examples/greeter-db.yaml: ok: secret default/greeter-db (1 key, 18 bytes)"), "{out}");
    assert!(!out.contains("demo-only-password"), "{out}");
    assert!(!out.contains("error"), "{out}");
}

#[test]
fn bad_manifests_fail_with_file_and_field_named() {
    let (code, out) = validate(&["configs/bad-examples"]);
    assert_eq!(code, 1, "{out}");
    assert!(
        out.contains("configs/bad-examples/no-image.yaml: error: spec.containers[0].image: an image is required"),
        "{out}"
    );
    assert!(
        out.contains("configs/bad-examples/uses-secret.yaml: error: spec.containers[0].env[0].valueFrom.secretKeyRef: Secret default/api-token not found (not among the manifests given)"),
        "{out}"
    );
    // A file with an error has no `ok` line, whichever check found the error.
    assert!(!out.contains(": ok:"), "{out}");
}

#[test]
fn strict_mode_turns_unimplemented_fields_into_errors() {
    let dir = crate::common::Scratch::new("validate-strict");
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("p.yaml");
    std::fs::write(
        &file,
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: p\n  version: 2\nspec:\n  preemptionPolicy: Never\n  ServeAccount: a\n  containers:\n  - name: c\n    image: x:1\n    imagePullPolice: Always\n",
    )
    .unwrap();
    let path = file.to_str().unwrap();
    let (code, out) = validate(&[path]);
    assert_eq!(code, 0, "{out}");
    // A Kubernetes field atoll leaves out, and keys Kubernetes does not have (typos with the
    // field they are closest to).
    for line in [
        "warning: spec.preemptionPolicy: not implemented by atoll; ignored",
        "warning: metadata.version: unknown field; ignored",
        "warning: spec.ServeAccount: unknown field (did you mean serviceAccountName?); ignored",
        "warning: spec.containers[0].imagePullPolice: unknown field (did you mean imagePullPolicy?); ignored",
    ] {
        assert!(out.contains(line), "{line} in {out}");
    }
    let (code, out) = validate(&[path, "--strict"]);
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("error: spec.preemptionPolicy: not implemented by atoll (--strict)"), "{out}");
    assert!(
        out.contains(
            "error: spec.containers[0].imagePullPolice: unknown field (did you mean imagePullPolicy?) (--strict)"
        ),
        "{out}"
    );
    assert!(!out.contains("ignored"), "--strict ignores nothing: {out}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_missing_path_and_a_usage_error_are_reported() {
    let (code, out) = validate(&["/nonexistent/manifests"]);
    assert_eq!(code, 1);
    assert!(out.contains("/nonexistent/manifests: error: path does not exist"), "{out}");
    let out = Command::new(env!("CARGO_BIN_EXE_atoll")).arg("validate").output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("needs at least one manifest"));
}

#[test]
fn start_order_cycles_and_unknown_pods_are_errors_across_the_files_given() {
    let dir = crate::common::Scratch::new("validate-order");
    std::fs::create_dir_all(&dir).unwrap();
    let pod = |name: &str, deps: &str| {
        format!("apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\n  annotations: {{atoll.io/depends-on: \"{deps}\"}}\nspec:\n  containers:\n  - {{name: c, image: busybox:1.36}}\n")
    };
    for (name, deps) in [("a", "b"), ("b", "a"), ("c", "x"), ("d", "Bad_Name"), ("e", "a")] {
        std::fs::write(dir.join(format!("{name}.yaml")), pod(name, deps)).unwrap();
    }
    let (code, out) = validate(&[dir.to_str().unwrap()]);
    assert_eq!(code, 1, "{out}");
    let shown = |file: &str| format!("{}/{file}: error: metadata.annotations[atoll.io/depends-on]: ", dir.display());
    assert!(
        out.contains(&format!("{}the dependencies form a cycle: default/a -> default/b -> default/a", shown("a.yaml"))),
        "{out}"
    );
    assert!(out.contains(&format!("{}pod default/x is not defined in the manifests given", shown("c.yaml"))), "{out}");
    assert!(out.contains(&format!("{}\"Bad_Name\": name \"Bad_Name\"", shown("d.yaml"))), "{out}");
    assert!(!out.contains(&shown("e.yaml")), "e only waits for a: {out}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn references_to_configmaps_and_secrets_are_checked_across_the_files_given() {
    let dir = crate::common::Scratch::new("validate-objects");
    let (pods, objects) = (dir.join("pods"), dir.join("objects"));
    std::fs::create_dir_all(&pods).unwrap();
    std::fs::create_dir_all(&objects).unwrap();
    std::fs::write(
        pods.join("app.yaml"),
        "apiVersion: v1\nkind: Pod\nmetadata: {name: app}\nspec:\n  containers:\n  - name: c\n    image: busybox:1.36\n    env:\n    - {name: A, valueFrom: {configMapKeyRef: {name: cfg, key: nope}}}\n    - {name: B, valueFrom: {secretKeyRef: {name: gone, key: k, optional: true}}}\n    envFrom: [{secretRef: {name: creds}}]\n    volumeMounts: [{name: v, mountPath: /v}]\n  volumes:\n  - {name: v, configMap: {name: cfg, items: [{key: a, path: a}]}}\n",
    )
    .unwrap();
    std::fs::write(objects.join("cfg.yaml"), "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: cfg}\ndata: {a: x}\n")
        .unwrap();
    // The pods alone: every object is missing but the optional one.
    let (code, out) = validate(&[pods.to_str().unwrap()]);
    assert_eq!(code, 1, "{out}");
    let file = pods.join("app.yaml").display().to_string();
    for want in [
        format!("{file}: error: spec.volumes[0].configMap.items[0].key: ConfigMap default/cfg not found (not among the manifests given)"),
        format!("{file}: error: spec.containers[0].envFrom[0].secretRef.name: Secret default/creds not found"),
    ] {
        assert!(out.contains(&want), "{want:?} not in {out}");
    }
    assert!(!out.contains("gone"), "an optional reference reported: {out}");
    assert!(!out.contains(&format!("{file}: ok")), "a file with errors said ok: {out}");
    // With the objects given too: the ConfigMap resolves, its missing key and the Secret do not.
    let (code, out) = validate(&[pods.to_str().unwrap(), objects.to_str().unwrap()]);
    assert_eq!(code, 1, "{out}");
    assert!(!out.contains("items[0].key"), "{out}");
    assert!(
        out.contains("spec.containers[0].env[0].valueFrom.configMapKeyRef: ConfigMap default/cfg has no key \"nope\""),
        "{out}"
    );
    assert!(out.contains("secretRef.name: Secret default/creds not found"), "{out}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// One answer for every request on a fresh port of 127.0.0.1 (status 200, `body`; 404 for
/// `<path>.minisig`): the URL.
fn serve_once(body: &'static str) -> String {
    use std::io::{BufRead, BufReader, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://127.0.0.1:{}/pods", listener.local_addr().unwrap().port());
    std::thread::spawn(move || {
        for conn in listener.incoming().flatten() {
            let mut line = String::new();
            let mut reader = BufReader::new(conn.try_clone().unwrap());
            let _ = reader.read_line(&mut line);
            loop {
                let mut h = String::new();
                if reader.read_line(&mut h).unwrap_or(0) == 0 || h.trim().is_empty() {
                    break;
                }
            }
            let answer = match line.contains(".minisig") {
                true => "HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n".to_string(),
                false => {
                    format!("HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}", body.len())
                }
            };
            let _ = (&conn).write_all(answer.as_bytes());
        }
    });
    url
}

#[test]
fn an_unsigned_empty_body_is_an_error_when_signatures_are_required() {
    let dir = crate::common::Scratch::new("validate-empty");
    std::fs::create_dir_all(&dir).unwrap();
    let key = dir.join("fleet.pub");
    std::fs::write(&key, "untrusted comment: k\nRWSZQ6c1ilZml5y6wD4PC2h11yUzhxyBXiiDjnUr2taaDCOxlw8edujl\n").unwrap();
    let config = dir.join("atoll.yaml");
    let trust = format!("manifestTrust: {{publicKeys: [{}], require: true}}\n", key.display());
    std::fs::write(&config, format!("apiVersion: atoll.io/v1alpha1\nkind: AtollConfiguration\n{trust}")).unwrap();
    let url = serve_once("\n");
    let (code, out) = validate(&[&url]);
    assert_eq!((code, out.trim()), (0, format!("{url}: ok: empty body (no pods)").as_str()), "without trust");
    let (code, out) = validate(&[&format!("--atoll-config={}", config.display()), &url]);
    assert_eq!(code, 1, "{out}");
    assert!(out.contains(&format!("{url}: error: signature: unsigned: no {url}.minisig")), "{out}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn admission_gives_this_node_s_verdicts() {
    let dir = crate::common::Scratch::new("validate-admission");
    std::fs::create_dir_all(&dir).unwrap();
    let pod = |name: &str, spec: &str| {
        format!("apiVersion: v1\nkind: Pod\nmetadata: {{name: {name}}}\nspec:\n{spec}  containers:\n  - {{name: c, image: busybox}}\n")
    };
    std::fs::write(dir.join("here.yaml"), pod("here", "  nodeSelector: {site: north}\n")).unwrap();
    std::fs::write(dir.join("there.yaml"), pod("there", "  nodeSelector: {site: south}\n")).unwrap();
    let shown = dir.display().to_string();
    let (code, out) = validate(&[&shown, "--node-labels=site=north"]);
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("here.yaml: ok: pod default/here-ci-node"), "{out}");
    assert!(
        out.contains("there.yaml: error: pod default/there-ci-node rejected by admission on node ci-node: NodeAffinity: Predicate NodeAffinity failed: node(s) didn't match Pod's node affinity/selector"),
        "{out}"
    );
    assert!(!out.contains("there.yaml: ok"), "{out}");
    let _ = std::fs::remove_dir_all(&dir);
}
