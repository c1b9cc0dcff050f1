//! Validation by example: each rule with a manifest that breaks it and the message naming the
//! field.
use super::*;
use crate::pod::{defaults, identity};

pub(super) fn check(json: &str) -> Vec<String> {
    let mut pod: Pod = serde_json::from_str(json).unwrap_or_else(|e| panic!("{e}: {json}"));
    defaults::apply(&mut pod);
    let sp = identity::make_static(pod, &identity::Origin::File("/m/p.yaml".into()), "node-1");
    validate(&sp.pod).into_iter().map(|f| f.to_string()).collect()
}

fn with_container(extra: &str) -> String {
    format!(r#"{{"metadata":{{"name":"p"}},"spec":{{"containers":[{{"name":"c","image":"x:1"{extra}}}]}}}}"#)
}

fn has(problems: &[String], needle: &str) {
    assert!(problems.iter().any(|p| p.contains(needle)), "expected {needle:?} in {problems:#?}");
}

#[test]
fn a_plain_pod_is_valid() {
    assert_eq!(check(&with_container("")), Vec::<String>::new());
}

#[test]
fn names_must_be_dns_1123() {
    has(
        &check(r#"{"metadata":{"name":"Web_1"},"spec":{"containers":[{"name":"c","image":"x"}]}}"#),
        "metadata.name: \"Web_1-node-1\"",
    );
    has(
        &check(&with_container("").replace(r#""name":"c""#, r#""name":"C""#)),
        "spec.containers[0].name: \"C\" must consist of lowercase",
    );
    has(
        &check(r#"{"metadata":{"name":"p","namespace":"a.b"},"spec":{"containers":[{"name":"c","image":"x"}]}}"#),
        "metadata.namespace",
    );
}

#[test]
fn container_names_are_unique_across_init_and_regular() {
    let p = check(
        r#"{"metadata":{"name":"p"},"spec":{"initContainers":[{"name":"c","image":"x"}],"containers":[{"name":"c","image":"x"}]}}"#,
    );
    has(&p, "spec.containers[0].name: duplicate container name \"c\"");
    has(&check(r#"{"metadata":{"name":"p"},"spec":{}}"#), "spec.containers: at least one container is required");
    has(
        &check(&with_container("").replace(r#""image":"x:1""#, r#""image":" x""#)),
        "spec.containers[0].image: must not have leading",
    );
}

#[test]
fn ports_are_checked() {
    has(
        &check(&with_container(r#","ports":[{"containerPort":0}]"#)),
        "spec.containers[0].ports[0].containerPort: 0 must be between 1 and 65535",
    );
    has(
        &check(&with_container(r#","ports":[{"containerPort":80,"protocol":"ICMP"}]"#)),
        "ports[0].protocol: unsupported value \"ICMP\"",
    );
    has(&check(&with_container(r#","ports":[{"containerPort":80,"name":"HTTP"}]"#)), "ports[0].name: \"HTTP\"");
    has(
        &check(&with_container(r#","ports":[{"containerPort":80,"name":"web"},{"containerPort":81,"name":"web"}]"#)),
        "duplicate port name \"web\"",
    );
    let two = r#"{"metadata":{"name":"p"},"spec":{"containers":[{"name":"a","image":"x","ports":[{"containerPort":80,"hostPort":8080}]},{"name":"b","image":"x","ports":[{"containerPort":81,"hostPort":8080}]}]}}"#;
    has(&check(two), "spec.containers[1].ports[0].hostPort: host port 8080/TCP is already used by spec.containers[0].ports[0].hostPort");
    let hn = r#"{"metadata":{"name":"p"},"spec":{"hostNetwork":true,"containers":[{"name":"a","image":"x","ports":[{"containerPort":80,"hostPort":81}]}]}}"#;
    has(&check(hn), "must equal containerPort 80 with hostNetwork");
}

#[test]
fn probes_need_exactly_one_handler_and_sane_numbers() {
    has(
        &check(&with_container(r#","livenessProbe":{"periodSeconds":5}"#)),
        "spec.containers[0].livenessProbe: must have exactly one handler",
    );
    has(
        &check(&with_container(r#","readinessProbe":{"exec":{"command":["true"]},"tcpSocket":{"port":1}}"#)),
        "readinessProbe: must have exactly one handler",
    );
    has(
        &check(&with_container(r#","livenessProbe":{"exec":{"command":["true"]},"successThreshold":2}"#)),
        "must be 1 for liveness",
    );
    has(
        &check(&with_container(r#","livenessProbe":{"httpGet":{"port":"web"}}"#)),
        "livenessProbe.httpGet.port: no port named \"web\"",
    );
    has(
        &check(&with_container(r#","startupProbe":{"tcpSocket":{"port":70000}}"#)),
        "startupProbe.tcpSocket.port: 70000 must be between",
    );
    has(
        &check(&with_container(r#","readinessProbe":{"exec":{"command":["true"]},"periodSeconds":0}"#)),
        "readinessProbe.periodSeconds: 0 must be between 1 and 2147483647",
    );
    assert!(check(&with_container(
        r#","ports":[{"name":"web","containerPort":80}],"livenessProbe":{"httpGet":{"port":"web"}}"#
    ))
    .is_empty());
}

#[test]
fn numbers_from_the_manifest_are_range_checked_with_the_field_named() {
    let p = check(&with_container(
        r#","livenessProbe":{"exec":{"command":["true"]},"periodSeconds":36028797018963968,"timeoutSeconds":9223372036854775807},
        "securityContext":{"runAsUser":-1},"lifecycle":{"preStop":{"sleep":{"seconds":31}}}"#,
    ));
    has(&p, "spec.containers[0].livenessProbe.periodSeconds: 36028797018963968 must be between 1 and 2147483647");
    has(&p, "spec.containers[0].livenessProbe.timeoutSeconds: 9223372036854775807 must be between 1 and 2147483647");
    has(&p, "spec.containers[0].securityContext.runAsUser: -1 must be between 0 and 2147483647");
    has(&p, "spec.containers[0].lifecycle.preStop.sleep.seconds: 31 must be between 0 and terminationGracePeriodSeconds (30)");
    let d = check(
        r#"{"metadata":{"name":"p"},"spec":{"activeDeadlineSeconds":4294967296,"containers":[{"name":"c","image":"x"}]}}"#,
    );
    has(&d, "spec.activeDeadlineSeconds: 4294967296 must be between 1 and 2147483647");
    // A grace period is int64 in the API: the largest is valid (its use saturates).
    let g = r#"{"metadata":{"name":"p"},"spec":{"terminationGracePeriodSeconds":9223372036854775807,"containers":[{"name":"c","image":"x"}]}}"#;
    assert!(check(g).is_empty(), "{:?}", check(g));
}

#[test]
fn a_uid_must_be_a_safe_directory_name() {
    for bad in ["/", "..", "../../x", "a/b", ".x"] {
        let json = format!(
            r#"{{"metadata":{{"name":"p","uid":"{bad}"}},"spec":{{"containers":[{{"name":"c","image":"x"}}]}}}}"#
        );
        has(&check(&json), &format!("metadata.uid: \"{bad}\" must be 1 to 128 letters"));
    }
    let ok = r#"{"metadata":{"name":"p","uid":"8f1c8d8e-6a4b-4c55-9d2c-0d7b0b0b3c1e"},"spec":{"containers":[{"name":"c","image":"x"}]}}"#;
    assert!(check(ok).is_empty());
}

#[test]
fn policies_must_be_known_values() {
    has(
        &check(
            r#"{"metadata":{"name":"p"},"spec":{"restartPolicy":"Sometimes","containers":[{"name":"c","image":"x"}]}}"#,
        ),
        "spec.restartPolicy: unsupported value \"Sometimes\"",
    );
    has(&check(&with_container(r#","imagePullPolicy":"Maybe""#)), "imagePullPolicy: unsupported value");
    has(
        &check(r#"{"metadata":{"name":"p"},"spec":{"dnsPolicy":"None","containers":[{"name":"c","image":"x"}]}}"#),
        "dnsPolicy None needs at least one nameserver",
    );
    has(
        &check(&with_container(r#","restartPolicy":"Always""#)),
        "spec.containers[0].restartPolicy: only init containers",
    );
    let init = r#"{"metadata":{"name":"p"},"spec":{"initContainers":[{"name":"i","image":"x","livenessProbe":{"exec":{"command":["true"]}}}],"containers":[{"name":"c","image":"x"}]}}"#;
    has(&check(init), "spec.initContainers[0].livenessProbe: not allowed on an init container");
    let sidecar = init.replace(r#""name":"i","#, r#""name":"i","restartPolicy":"Always","#);
    assert!(check(&sidecar).is_empty(), "{:?}", check(&sidecar));
}

#[test]
fn static_pods_may_not_reference_api_objects() {
    let p = check(
        r#"{"metadata":{"name":"p"},"spec":{"serviceAccountName":"sa","imagePullSecrets":[{"name":"s"}],
        "volumes":[{"name":"a","secret":{"secretName":"s"}},{"name":"b","configMap":{"name":"c"}},{"name":"c","persistentVolumeClaim":{"claimName":"x"}}],
        "containers":[{"name":"c","image":"x","env":[{"name":"A","valueFrom":{"secretKeyRef":{"name":"s","key":"k"}}}],"envFrom":[{"configMapRef":{"name":"c"}}]}],
        "ephemeralContainers":[{"name":"e"}],"schedulingGates":[{"name":"g"}]}}"#,
    );
    for needle in [
        "spec.serviceAccountName: static pods may not reference serviceaccounts",
        "spec.imagePullSecrets: static pods may not reference secrets",
        "spec.volumes[2].persistentVolumeClaim: static pods may not reference persistentvolumeclaims",
        "spec.ephemeralContainers: ephemeral containers cannot be set on create",
        "spec.schedulingGates: static pods may not have scheduling gates",
    ] {
        has(&p, needle);
    }
    // ConfigMaps and Secrets are atoll's local objects: referencing them is no error.
    assert!(!p.iter().any(|f| f.contains("volumes[0]") || f.contains("volumes[1]") || f.contains("env")), "{p:?}");
}

#[test]
fn object_references_are_checked_by_field() {
    let p = check(
        r#"{"metadata":{"name":"p"},"spec":{
        "volumes":[{"name":"a","secret":{"secretName":"","defaultMode":4096}},
                   {"name":"b","configMap":{"name":"c","items":[{"key":"..x","path":"../etc/passwd"},{"key":"k","path":"p","mode":-1}]}},
                   {"name":"d","projected":{"sources":[{"serviceAccountToken":{"path":"t"}},
                       {"configMap":{"name":"c","items":[{"key":"a","path":"same"}]}},{"secret":{"name":"s","items":[{"key":"b","path":"same"}]}}]}}],
        "containers":[{"name":"c","image":"x","env":[{"name":"A","valueFrom":{"secretKeyRef":{"name":"s","key":"a/b"}}}],
            "envFrom":[{"configMapRef":{"name":"c"},"secretRef":{"name":"s"}},{"prefix":"A=","configMapRef":{"name":"c"}}]}]}}"#,
    );
    for needle in [
        "spec.volumes[0].secret.secretName: \"\" ",
        "spec.volumes[0].secret.defaultMode: 4096 must be between 0 and 511",
        "spec.volumes[1].configMap.items[0].key: \"..x\" must be",
        "spec.volumes[1].configMap.items[0].path: \"../etc/passwd\" must be a relative path",
        "spec.volumes[1].configMap.items[1].mode: -1 must be between 0 and 511",
        "spec.volumes[2].projected.sources[0].serviceAccountToken: static pods may not reference serviceaccounts",
        "spec.volumes[2].projected.sources[2].secret.items[0].path: duplicate path \"same\"",
        "spec.containers[0].env[0].valueFrom.secretKeyRef.key: \"a/b\" must be",
        "spec.containers[0].envFrom[0]: must have exactly one of configMapRef and secretRef",
        "spec.containers[0].envFrom[1].prefix: \"A=\" must be printable ASCII without '='",
    ] {
        has(&p, needle);
    }
}

#[test]
fn volumes_and_mounts_must_agree() {
    let p = check(
        r#"{"metadata":{"name":"p"},"spec":{"volumes":[{"name":"data","hostPath":{"path":"rel","type":"Folder"}}],
        "containers":[{"name":"c","image":"x","volumeMounts":[{"name":"nope","mountPath":"/a"},{"name":"data","mountPath":"/a","subPath":"../x"}]}]}}"#,
    );
    has(&p, "spec.volumes[0].hostPath.path: \"rel\" must be an absolute path");
    has(&p, "spec.volumes[0].hostPath.type: unsupported value \"Folder\"");
    has(&p, "spec.containers[0].volumeMounts[0].name: no volume named \"nope\"");
    has(&p, "spec.containers[0].volumeMounts[1].mountPath: \"/a\" is mounted twice");
    has(&p, "volumeMounts[1].subPath: \"../x\" must be a relative path");
}

#[test]
fn env_sources_and_resources_are_checked() {
    has(
        &check(&with_container(r#","env":[{"name":"A","valueFrom":{"fieldRef":{"fieldPath":"spec.nodeSelector"}}}]"#)),
        "fieldRef.fieldPath: \"spec.nodeSelector\" is not supported",
    );
    assert!(check(&with_container(
        r#","env":[{"name":"A","valueFrom":{"fieldRef":{"fieldPath":"metadata.labels['app']"}}}]"#
    ))
    .is_empty());
    has(&check(&with_container(r#","env":[{"name":"A=B","value":"x"}]"#)), "env[0].name: \"A=B\"");
    has(
        &check(&with_container(r#","resources":{"limits":{"cpu":"1"},"requests":{"cpu":"2"}}"#)),
        "resources.requests.cpu: 2 must not be more than the limit 1",
    );
    // Extended resources (a device plugin's) are whole numbers, never overcommitted.
    assert!(check(&with_container(r#","resources":{"limits":{"nvidia.com/gpu":"1"}}"#)).is_empty());
    has(
        &check(&with_container(r#","resources":{"limits":{"nvidia.com/gpu":"500m"}}"#)),
        "a qualified name with a whole number",
    );
    has(
        &check(&with_container(r#","resources":{"limits":{"example.com/d":"2"},"requests":{"example.com/d":"1"}}"#)),
        "request must equal its limit",
    );
    has(&check(&with_container(r#","resources":{"limits":{"gpu":"1"}}"#)), "resource \"gpu\" is not supported");
}

#[test]
fn every_problem_is_reported_not_only_the_first() {
    let p = check(
        r#"{"metadata":{"name":"p"},"spec":{"restartPolicy":"x","containers":[{"name":"c","image":"","ports":[{"containerPort":0}]}]}}"#,
    );
    assert!(p.len() >= 3, "{p:?}");
}
