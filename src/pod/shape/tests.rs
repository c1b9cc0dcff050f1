use super::*;
use crate::pod::decode::{decode, Shape};
use crate::pod::schema::{Child, Type, POD};
use serde_json::json;

/// Decodes a Pod whose spec holds one container and `spec` merged in, and `top` beside spec.
fn verdict(spec: Value, top: Value) -> Result<Vec<String>, Vec<String>> {
    let mut pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"},
        "spec": {"containers": [{"name": "c", "image": "busybox"}]}});
    if let (Some(Value::Object(s)), Value::Object(more)) = (pod.get_mut("spec"), spec) {
        s.extend(more);
    }
    if let (Value::Object(p), Value::Object(more)) = (&mut pod, top) {
        for (k, v) in more {
            match (p.get_mut(&k), v) {
                (Some(Value::Object(old)), Value::Object(v)) => old.extend(v),
                (_, v) => drop(p.insert(k, v)),
            }
        }
    }
    let shown = |f: Vec<crate::pod::Finding>| f.iter().map(ToString::to_string).collect();
    match decode(pod.to_string().as_bytes(), Shape::SinglePod) {
        Ok(d) => Ok(shown(d.warnings)),
        Err(e) => Err(shown(e)),
    }
}

#[test]
fn fields_atoll_ignores_that_kubelet_cannot_decode_are_refused_at_their_path() {
    let c = |more: Value| {
        let mut c = json!({"name": "c", "image": "busybox"});
        if let (Value::Object(c), Value::Object(more)) = (&mut c, more) {
            c.extend(more);
        }
        json!({"containers": [c]})
    };
    let spec_cases = [
        (json!({"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [{"nodeSelectorTerms": []}]}}}),
            "spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution: expected an object, found a list"),
        (json!({"affinity": {"podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [{"weight": "high", "podAffinityTerm": {}}]}}}),
            "spec.affinity.podAntiAffinity.preferredDuringSchedulingIgnoredDuringExecution[0].weight: expected a 32-bit integer, found \"high\""),
        (json!({"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [{"matchExpressions": [{"key": "a", "operator": "In", "values": "x"}]}]}}}}),
            "spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[0].matchExpressions[0].values: invalid type: string \"x\", expected a sequence"),
        (json!({"tolerations": {"key": "a"}}), "spec.tolerations: expected a list, found an object"),
        (json!({"priority": "high"}), "spec.priority: invalid type: string \"high\""),
        (json!({"topologySpreadConstraints": {"maxSkew": 1}}), "spec.topologySpreadConstraints: expected a list, found an object"),
        (json!({"topologySpreadConstraints": [{"maxSkew": 1.5}]}), "spec.topologySpreadConstraints[0].maxSkew: expected a 32-bit integer, found 1.5"),
        (json!({"topologySpreadConstraints": [{"labelSelector": {"matchLabels": {"a": 1}}}]}),
            "spec.topologySpreadConstraints[0].labelSelector.matchLabels.a: expected a string, found 1"),
        (json!({"nodeSelector": ["a"]}), "spec.nodeSelector: invalid type: sequence, expected a map"),
        (json!({"readinessGates": [{"conditionType": true}]}), "spec.readinessGates[0].conditionType: expected a string, found a boolean"),
        (json!({"overhead": {"cpu": "lots"}}), "spec.overhead: quantity \"lots\""),
        (json!({"os": "linux"}), "spec.os: expected an object, found \"linux\""),
        (json!({"schedulingGates": ["a"]}), "spec.schedulingGates[0]: expected an object, found \"a\""),
        (json!({"resourceClaims": [{"name": 3}]}), "spec.resourceClaims[0].name: expected a string, found 3"),
        (json!({"imagePullSecrets": [{"name": ["x"]}]}), "spec.imagePullSecrets[0].name: expected a string, found a list"),
        (json!({"ephemeralContainers": [{"name": "e", "command": "sh"}]}), "spec.ephemeralContainers[0].command: expected a list"),
        (json!({"hostUsers": "no"}), "spec.hostUsers: expected true or false, found \"no\""),
        (json!({"preemptionPolicy": 1}), "spec.preemptionPolicy: expected a string, found 1"),
        (json!({"evictionResponders": [{"name": "a", "priority": 3000000000u64}]}),
            "spec.evictionResponders[0].priority: expected a 32-bit integer, found 3000000000"),
        (json!({"securityContext": {"windowsOptions": {"hostProcess": "yes"}}}),
            "spec.securityContext.windowsOptions.hostProcess: expected true or false"),
        (json!({"volumes": [{"name": "v", "persistentVolumeClaim": {"claimName": 1}}]}),
            "spec.volumes[0].persistentVolumeClaim.claimName: expected a string, found 1"),
        (json!({"volumes": [{"name": "v", "csi": {"driver": "d", "volumeAttributes": {"a": false}}}]}),
            "spec.volumes[0].csi.volumeAttributes.a: expected a string, found a boolean"),
        (json!({"volumes": [{"name": "v", "ephemeral": {"volumeClaimTemplate": {"spec": {"resources": {"requests": {"storage": "1Gb"}}}}}}]}),
            "spec.volumes[0].ephemeral.volumeClaimTemplate.spec.resources.requests.storage: quantity \"1Gb\""),
        (json!({"volumes": [{"name": "v", "projected": {"sources": [{"serviceAccountToken": {"expirationSeconds": "1h"}}]}}]}),
            "spec.volumes[0].projected.sources[0].serviceAccountToken.expirationSeconds: expected an integer, found \"1h\""),
        (json!({"volumes": [{"name": "v", "nfs": "server:/x"}]}), "spec.volumes[0].nfs: expected an object"),
        (c(json!({"resizePolicy": [{"resourceName": "cpu", "restartPolicy": 0}]})),
            "spec.containers[0].resizePolicy[0].restartPolicy: expected a string, found 0"),
        (c(json!({"restartPolicyRules": [{"action": "Restart", "exitCodes": {"operator": "In", "values": ["1"]}}]})),
            "spec.containers[0].restartPolicyRules[0].exitCodes.values[0]: expected a 32-bit integer, found \"1\""),
        (c(json!({"resources": {"claims": {"name": "gpu"}}})), "spec.containers[0].resources.claims: expected a list"),
        (c(json!({"volumeMounts": [{"name": "v", "mountPath": "/v", "subPathExpr": 5}]})),
            "spec.containers[0].volumeMounts[0].subPathExpr: expected a string, found 5"),
        (c(json!({"livenessProbe": {"httpGet": {"port": 80, "protocol": 2}}})),
            "spec.containers[0].livenessProbe.httpGet.protocol: expected a string, found 2"),
    ];
    for (spec, expected) in spec_cases {
        let errors = verdict(spec.clone(), json!({})).expect_err(expected);
        assert!(errors.iter().any(|e| e.starts_with(expected)), "{spec}: {errors:?}, not {expected}");
    }
    let top_cases = [
        (
            json!({"metadata": {"ownerReferences": {"name": "x"}}}),
            "metadata.ownerReferences: expected a list, found an object",
        ),
        (json!({"metadata": {"finalizers": [1]}}), "metadata.finalizers[0]: expected a string, found 1"),
        (json!({"metadata": {"generation": "1"}}), "metadata.generation: expected an integer, found \"1\""),
        (
            json!({"metadata": {"creationTimestamp": "yesterday"}}),
            "metadata.creationTimestamp: expected an RFC 3339 time such as 2024-05-01T12:00:00Z, found \"yesterday\"",
        ),
        (
            json!({"metadata": {"managedFields": [{"time": 5}]}}),
            "metadata.managedFields[0].time: expected an RFC 3339 time",
        ),
        (json!({"status": {"phase": 1}}), "status.phase: expected a string, found 1"),
        (
            json!({"status": {"containerStatuses": [{"state": {"terminated": {"exitCode": "1"}}}]}}),
            "status.containerStatuses[0].state.terminated.exitCode: expected a 32-bit integer",
        ),
    ];
    for (top, expected) in top_cases {
        let errors = verdict(json!({}), top.clone()).expect_err(expected);
        assert!(errors.iter().any(|e| e.starts_with(expected)), "{top}: {errors:?}, not {expected}");
    }
}

#[test]
fn what_kubelet_decodes_passes_with_its_warnings() {
    let spec = json!({
        "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
            {"matchExpressions": [{"key": "a", "operator": "In", "values": ["x"]}]}]},
            "preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 1, "preference": {"matchFields": []}}]},
            "podAffinity": null, "podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
                {"labelSelector": {"matchLabels": {"app": "a"}}, "topologyKey": "k", "noSuchKey": 1}]}},
        "tolerations": [{"key": "a", "operator": "Exists", "tolerationSeconds": 30}],
        "priority": 1000, "nodeSelector": {"kubernetes.io/os": "linux"}, "overhead": {"cpu": 0.25, "memory": "64Mi"},
        "topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": "k", "whenUnsatisfiable": "DoNotSchedule", "minDomains": null}],
        "readinessGates": [{"conditionType": "x"}], "os": {"name": "linux"}, "imagePullSecrets": [{"name": "r"}, {}],
        "workloadRef": 7,
    });
    let top = json!({
        "metadata": {"creationTimestamp": "2024-05-01T12:00:00Z", "generation": 3, "finalizers": ["a"],
            "ownerReferences": [{"apiVersion": "v1", "kind": "Node", "name": "n", "uid": "u", "controller": true}],
            "managedFields": [{"manager": "m", "time": "2024-05-01T12:00:00+02:00", "fieldsV1": {"f:spec": {}}}]},
        "status": {"phase": "Running", "startTime": null, "containerStatuses": [{"restartCount": 2, "state": {"running": {}}}]},
    });
    let warnings = verdict(spec, top).unwrap();
    assert!(!warnings.iter().any(|w| w.starts_with("spec.affinity")), "read by admission: {warnings:?}");
    assert!(
        warnings.contains(&"metadata.ownerReferences: not implemented by atoll; ignored".to_string()),
        "{warnings:?}"
    );
    assert!(verdict(json!({}), json!({"metadata": {"creationTimestamp": null}, "status": {}})).unwrap().is_empty());
}

#[test]
fn shapes_read_as_go_decodes() {
    let fits = |code: &str, v: Value| check(code, &v, "f").is_ok();
    assert!(fits("q", json!(1.5)) && fits("q", json!("100m")) && !fits("q", json!("1 cpu")) && !fits("q", json!(true)));
    assert!(
        fits("n", json!(8080)) && fits("n", json!("http")) && !fits("n", json!(1.5)) && !fits("n", json!(1u64 << 40))
    );
    assert!(fits("I", json!(1u64 << 40)) && !fits("I", json!(u64::MAX)) && !fits("i", json!(-3_000_000_000i64)));
    assert!(fits("[s]", json!(["a", null])) && fits("{s}", json!({"a": null})) && fits("@sel", json!({"x": 1})));
    assert!(fits("*", json!([1])) && fits("o", json!({})) && !fits("o", json!([])));
    for code in ["s", "b", "i", "I", "q", "n", "t", "o", "[s]", "{q}", "@status"] {
        assert!(fits(code, Value::Null), "{code}");
    }
}

/// Every code in every table and in the schema's lists names only tables that exist.
#[test]
fn every_table_named_exists() {
    let mut codes: Vec<String> = TABLES.iter().flat_map(|(_, l)| l.split(' ')).map(String::from).collect();
    let mut seen: Vec<&'static Type> = vec![&POD];
    let mut i = 0;
    while i < seen.len() {
        let ty = seen[i];
        codes.extend(ty.kube_list().split(' ').map(String::from));
        for (_, child) in ty.children() {
            match child {
                Child::One(t) | Child::Many(t) if !seen.iter().any(|s| std::ptr::eq(*s, *t)) => seen.push(*t),
                Child::Any(code) => codes.push(format!(":{code}")),
                _ => {}
            }
        }
        i += 1;
    }
    for entry in &codes {
        let code = entry.split_once(':').map_or("", |(_, c)| c);
        let name = code.trim_start_matches(['[', '{']).trim_end_matches([']', '}']);
        if let Some(table) = name.strip_prefix('@') {
            assert!(TABLES.iter().any(|(n, _)| *n == table), "no table {table} ({entry})");
        } else {
            assert!(matches!(name, "" | "s" | "b" | "i" | "I" | "q" | "n" | "t" | "o" | "*"), "{entry}");
        }
    }
}
