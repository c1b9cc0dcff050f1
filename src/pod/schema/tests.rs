use super::*;
use serde_json::json;

/// Every type the walk can reach from a Pod, each once.
fn reachable() -> Vec<&'static Type> {
    let mut seen: Vec<&'static Type> = vec![&POD];
    let mut i = 0;
    while i < seen.len() {
        for (_, child) in seen[i].children {
            if let One(t) | Many(t) = child {
                if !seen.iter().any(|s| std::ptr::eq(*s, *t)) {
                    seen.push(t);
                }
            }
        }
        i += 1;
    }
    seen
}

/// An object of `ty` holding every struct field (one list item each), free JSON with a key
/// inside, and one field no type has.
fn sample(ty: &Type) -> Value {
    let mut map = Map::new();
    for (name, child) in ty.children {
        let v = match child {
            One(t) => sample(t),
            Many(t) => Value::Array(vec![sample(t)]),
            // Free JSON as the field takes it: an object, or a list of them.
            Any(_) => {
                let object = json!({"insideFreeJson": 1});
                let alone = Value::Object(Map::from_iter([(name.to_string(), object.clone())]));
                if (ty.check)(alone).is_ok() {
                    object
                } else {
                    Value::Array(vec![object])
                }
            }
        };
        map.insert(name.to_string(), v);
    }
    map.insert("noSuchField".into(), json!(1));
    Value::Object(map)
}

/// What serde itself drops when a Pod is decoded from `value`: the wrapper the walk replaced,
/// kept as the test's reference.
fn dropped_by_serde(value: Value) -> Vec<String> {
    let mut dropped = Vec::new();
    let _: Pod = serde_ignored::deserialize(value, |p| dropped.push(p.to_string())).unwrap();
    // `?.` marks an Option on the way.
    dropped.iter().map(|p| p.replace("?.", "")).collect()
}

#[test]
fn the_walk_names_exactly_the_fields_serde_drops() {
    let value = sample(&POD);
    let mut walked = Vec::new();
    unknown(&POD, &value, "", &mut walked);
    let mut expected = dropped_by_serde(value);
    assert!(expected.len() > 40, "{expected:?}");
    // serde_ignored writes list items as `.0`; the walk as kubectl does, `[0]`.
    assert!(walked.iter().all(|(p, u)| !p.ends_with("noSuchField") || *u == Unread::Unknown(None)), "{walked:?}");
    // (A timestamp's free JSON holds an object here: malformed, and no dropped field.)
    walked.retain(|(_, u)| !matches!(u, Unread::Malformed(_)));
    let mut walked: Vec<String> = walked.iter().map(|(p, _)| p.replace('[', ".").replace(']', "")).collect();
    walked.sort();
    expected.sort();
    assert_eq!(walked, expected);
}

#[test]
fn a_kubernetes_field_atoll_leaves_out_is_told_from_a_key_kubernetes_does_not_have() {
    let pod = json!({
        "metadata": {"name": "x", "version": 3, "ownerReferences": []},
        "spec": {
            "ServeAccount": "a", "readinessGates": [],
            "securityContext": {"appArmorProfile": {"type": "Localhost", "localProfile": "web"}},
            "containers": [{"name": "c", "imagePullPolice": "Always", "ImagePullPolicy": "Always", "resizePolicy": []}],
            "volumes": [{"name": "v", "hostpath": {"path": "/x"}, "nfs": {}}]
        }
    });
    let mut found = Vec::new();
    unknown(&POD, &pod, "", &mut found);
    let mut found: Vec<(&str, Unread)> = found.iter().map(|(p, u)| (p.as_str(), u.clone())).collect();
    found.sort_by_key(|(p, _)| *p);
    let mut expected = [
        ("metadata.version", Unread::Unknown(None)),
        ("metadata.ownerReferences", Unread::NotImplemented),
        ("spec.ServeAccount", Unread::Unknown(Some("serviceAccountName"))),
        ("spec.readinessGates", Unread::NotImplemented),
        ("spec.securityContext.appArmorProfile.localProfile", Unread::Unknown(Some("localhostProfile"))),
        ("spec.containers[0].imagePullPolice", Unread::Unknown(Some("imagePullPolicy"))),
        ("spec.containers[0].ImagePullPolicy", Unread::Unknown(Some("imagePullPolicy"))),
        ("spec.containers[0].resizePolicy", Unread::NotImplemented),
        ("spec.volumes[0].hostpath", Unread::Unknown(Some("hostPath"))),
        ("spec.volumes[0].nfs", Unread::NotImplemented),
    ];
    expected.sort_by_key(|(p, _)| *p);
    assert_eq!(found, expected);
}

#[test]
fn the_kubernetes_lists_name_only_fields_the_types_do_not_read() {
    for ty in reachable() {
        for k in ty.kube.split(' ').filter_map(|k| k.split(':').next()).filter(|k| !k.is_empty()) {
            assert!(!ty.field_names().contains(&k), "{k} is read by atoll: take it out of the list");
        }
    }
}

#[test]
fn a_did_you_mean_is_offered_only_when_a_name_is_close() {
    let names = ["serviceAccount", "serviceAccountName"];
    let more = "nodeName hostNetwork";
    // A deprecated alias is offered as its current name.
    assert_eq!(nearest("serviceaccount", &names, more), Some("serviceAccountName"));
    assert_eq!(nearest("ServeAccount", &names, more), Some("serviceAccountName"));
    assert_eq!(nearest("serviceAccountNam", &names, more), Some("serviceAccountName"));
    assert_eq!(nearest("hostNetwrk", &names, more), Some("hostNetwork"));
    assert_eq!(nearest("node", &names, more), None);
    assert_eq!(nearest("version", &names, more), None);
    assert_eq!(nearest("", &names, more), None);
    assert_eq!(nearest("ü", &names, more), None);
    assert_eq!(nearest(&"x".repeat(100_000), &names, more), None);
    assert_eq!(edits("kitten", "sitting"), 3);
}

#[test]
fn fields_not_listed_as_structs_hold_no_struct() {
    // A field left out of `children` that holds a struct (or free JSON) would hide the unknown
    // fields under it: such a field accepts an object with any key; a plain one does not.
    for ty in reachable() {
        for name in ty.field_names() {
            if ty.child(name).is_some() {
                continue;
            }
            // (An object value inside: a map of quantities would take a number.)
            for probe in [json!({"x": {"noSuchField": {}}}), json!({"x": [{"noSuchField": {}}]})] {
                let Value::Object(mut one) = probe else { unreachable!() };
                let v = one.remove("x").unwrap();
                let alone = Value::Object(Map::from_iter([(name.to_string(), v)]));
                assert!((ty.check)(alone).is_err(), "{name} holds an object: list it in `children`");
            }
        }
    }
}

#[test]
fn every_listed_struct_field_is_a_field_of_its_type() {
    for ty in reachable() {
        for (name, _) in ty.children {
            assert!(ty.field_names().contains(name), "{name} is not a field of its type");
        }
    }
    assert!(reachable().len() > 40);
    assert!(POD.field_names().contains(&"apiVersion"));
}

#[test]
fn a_type_error_is_found_at_its_field() {
    let pod = json!({
        "metadata": {"name": "web"},
        "spec": {"containers": [
            {"name": "a", "image": "x"},
            {"name": "b", "ports": [{"containerPort": 80}, {"containerPort": "eighty"}]}
        ]}
    });
    let (path, message) = locate(&POD, &pod, "").unwrap();
    assert_eq!(path, "spec.containers[1].ports[1].containerPort");
    assert!(message.starts_with("invalid type: string \"eighty\""), "{message}");

    let wrong_shape = json!({"spec": {"volumes": [{"name": "v", "hostPath": "/x"}]}});
    let (path, message) = locate(&POD, &wrong_shape, "items[2]").unwrap();
    assert_eq!(path, "items[2].spec.volumes[0].hostPath");
    assert!(message.contains("expected struct HostPathVolumeSource"), "{message}");

    let not_an_item = json!({"spec": {"containers": ["c"]}});
    assert_eq!(locate(&POD, &not_an_item, "").unwrap().0, "spec.containers[0]");
    assert_eq!(locate(&POD, &json!({"spec": {"hostNetwork": true}}), ""), None);
}

/// An object of `ty` with every field it reads set to a value it accepts (two items in each
/// list of structs), for comparing serialisations.
fn full(ty: &Type) -> Value {
    let mut map = Map::new();
    for name in ty.fields {
        let v = match ty.child(name) {
            Some(One(t)) => full(t),
            Some(Many(t)) => Value::Array(vec![full(t), full(t)]),
            _ => {
                let candidates = [
                    json!("x1"),
                    json!(7),
                    json!(true),
                    json!({"k": "v", "a": "b"}),
                    json!({"memory": "64Mi", "cpu": "250m"}),
                    json!(["a", "b"]),
                    json!([1, 2]),
                    json!({"insideFreeJson": {"z": 1.5, "a": [null, "é\"\n"]}}),
                    json!([{"insideFreeJson": 1}]),
                ];
                let fits =
                    |c: &Value| (ty.check)(Value::Object(Map::from_iter([(name.to_string(), c.clone())]))).is_ok();
                candidates.into_iter().find(fits).unwrap_or_else(|| panic!("no value for {name}"))
            }
        };
        map.insert(name.to_string(), v);
    }
    Value::Object(map)
}

#[test]
fn the_ordered_writer_writes_what_serde_json_writes_for_the_typed_pod() {
    let pod: Pod = super::super::de::from_value(full(&POD)).unwrap();
    let mut ours = Vec::new();
    write_ordered(&POD, &serde_json::to_value(&pod).unwrap(), &mut ours);
    let theirs = serde_json::to_vec(&pod).unwrap();
    assert_eq!(String::from_utf8_lossy(&ours), String::from_utf8_lossy(&theirs));
    assert!(theirs.len() > 4000, "{}", theirs.len());
    // And for the lists and structs the container annotations hold.
    let c = &pod.spec.containers[0];
    assert_eq!(to_string_ordered(&PORT, &c.ports), serde_json::to_string(&c.ports).unwrap());
    let pre = c.lifecycle.as_ref().and_then(|l| l.pre_stop.as_ref()).unwrap();
    assert_eq!(to_string_ordered(&HANDLER, pre), serde_json::to_string(pre).unwrap());
    // The default pod too (every field left out).
    let empty = Pod::default();
    let mut ours = Vec::new();
    write_ordered(&POD, &serde_json::to_value(&empty).unwrap(), &mut ours);
    assert_eq!(ours, serde_json::to_vec(&empty).unwrap());
}
