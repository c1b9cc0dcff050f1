use super::resolve::{self, Snapshot};
use super::*;
use crate::pod::types::{Pod, Volume};
use crate::pod::{ManifestError, Origin, Policy, Shape};

fn origin() -> Origin {
    Origin::File("/etc/kubernetes/manifests/x.yaml".into())
}

fn one(yaml: &str) -> Result<Manifests, ManifestError> {
    load(yaml.as_bytes(), Shape::SinglePod, &origin(), "n1", Policy::default())
}

fn problems(r: Result<Manifests, ManifestError>) -> Vec<String> {
    r.expect_err("should fail").problems.iter().map(ToString::to_string).collect()
}

const SECRET: &str = "apiVersion: v1\nkind: Secret\nmetadata:\n  name: db\n  namespace: apps\ndata:\n  password: aHVudGVyMg==\nstringData:\n  user: admin\n";

#[test]
fn configmaps_and_secrets_decode_with_their_data() {
    let cm = one("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: app\ndata:\n  app.yaml: |\n    port: 80\nbinaryData:\n  blob: AAEC\nimmutable: true\n").unwrap();
    assert!(cm.pods.is_empty());
    let o = &cm.objects[0];
    assert_eq!((o.kind, o.key().as_str(), o.immutable), (ObjectKind::ConfigMap, "default/app", true));
    assert_eq!(o.data["app.yaml"], b"port: 80\n");
    assert_eq!(o.data["blob"], [0u8, 1, 2]);
    let s = one(SECRET).unwrap();
    let o = &s.objects[0];
    assert_eq!((o.kind, o.key().as_str(), o.secret_type.as_str()), (ObjectKind::Secret, "apps/db", "Opaque"));
    assert_eq!(o.data["password"], b"hunter2");
    assert_eq!(o.data["user"], b"admin");
}

#[test]
fn a_secrets_values_never_show_in_debug_output_or_errors() {
    let s = one(SECRET).unwrap();
    let shown = format!("{:?} {:?}", s, s.objects);
    // Neither as text nor as the byte list a derived Debug would print.
    let as_bytes = format!("{:?}", b"hunter2".to_vec());
    let as_bytes = as_bytes.trim_matches(|c| c == '[' || c == ']');
    assert!(!shown.contains("hunter2") && !shown.contains("aHVudGVyMg") && !shown.contains("admin"), "{shown}");
    assert!(!shown.contains(as_bytes), "{shown}");
    assert!(shown.contains("password (7 bytes)"), "{shown}");
    // Not base64: the error names the key, never the value.
    let bad = problems(one("apiVersion: v1\nkind: Secret\nmetadata:\n  name: db\ndata:\n  password: hunter2!\n"));
    assert_eq!(bad, vec!["data[password]: is not valid base64"]);
    let file = resolve::File { path: "pw".into(), data: b"hunter2".to_vec(), mode: 0o400 };
    assert_eq!(format!("{file:?}"), "File(pw, 7 bytes, 400)");
}

#[test]
fn bad_objects_are_refused_naming_the_field() {
    let p = problems(one("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: Bad_Name\ndata:\n  ../x: a\n  k: 1\n"));
    assert!(p[0].starts_with("metadata.name: \"Bad_Name\""), "{p:?}");
    assert!(p[1].starts_with("data[../x]: invalid key"), "{p:?}");
    assert_eq!(p[2], "data[k]: expected a string");
    let p =
        problems(one("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: a\ndata:\n  k: a\nbinaryData:\n  k: YQ==\n"));
    assert_eq!(p, vec!["binaryData[k]: key \"k\" is given twice (data and binaryData)"]);
    let big = format!(
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: a\ndata:\n  k: {}\n",
        "x".repeat(MAX_OBJECT_BYTES + 1)
    );
    assert!(problems(one(&big))[0].contains("over the 1048576 byte limit"));
    // Unknown fields are warnings; under --strict, errors.
    let extra = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: a\n  uid: x\nfoo: 1\n";
    let w: Vec<String> = one(extra).unwrap().warnings.iter().map(ToString::to_string).collect();
    assert_eq!(w, vec!["foo: unknown field; ignored", "metadata.uid: not implemented by atoll; ignored"]);
    let strict = load(extra.as_bytes(), Shape::SinglePod, &origin(), "n1", Policy { strict: true });
    assert_eq!(strict.unwrap_err().problems.len(), 2);
}

#[test]
fn a_list_mixes_pods_and_objects_and_paths_name_the_item() {
    let list = r#"{"apiVersion":"v1","kind":"List","items":[
        {"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"app"},"data":{"k":"v"}},
        {"apiVersion":"v1","kind":"Pod","metadata":{"name":"web"},"spec":{"containers":[{"name":"c","image":"x"}]}},
        {"apiVersion":"v1","kind":"Secret","metadata":{"name":"db"},"stringData":{"k":"v"}}]}"#;
    let m = load(list.as_bytes(), Shape::PodOrList, &Origin::Url("http://x".into()), "n1", Policy::default()).unwrap();
    assert_eq!((m.pods.len(), m.objects.len()), (1, 2));
    let bad = list.replace(r#""name":"db""#, r#""name":"DB""#);
    let e = load(bad.as_bytes(), Shape::PodOrList, &Origin::Url("http://x".into()), "n1", Policy::default());
    assert!(e.unwrap_err().problems[0].path == "items[2].metadata.name");
    // A file holds one object, not a list.
    assert!(load(list.as_bytes(), Shape::SinglePod, &origin(), "n1", Policy::default()).is_err());
}

fn pod(json: &str) -> Pod {
    let mut p: Pod = serde_json::from_str(json).unwrap();
    p.metadata.namespace = "default".into();
    crate::pod::defaults::apply(&mut p);
    p
}

fn objects() -> Snapshot {
    let m = one("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: app\ndata:\n  a.yaml: A\n  b.yaml: B\n").unwrap();
    let s = load(SECRET.replace("apps", "default").as_bytes(), Shape::SinglePod, &origin(), "n1", Policy::default());
    m.objects
        .into_iter()
        .chain(s.unwrap().objects)
        .map(|o| ((o.kind, o.namespace.clone(), o.name.clone()), o))
        .collect()
}

fn files(v: &str) -> Result<Vec<(String, Vec<u8>, u32)>, Missing> {
    let v: Volume = serde_json::from_str(v).unwrap();
    let mut p = pod(r#"{"metadata":{"name":"p"},"spec":{"containers":[]}}"#);
    p.spec.volumes.push(v);
    crate::pod::defaults::apply(&mut p);
    let got = resolve::volume_files("default", "u1", &p.spec.volumes[0], &objects()).expect("an object volume");
    got.map(|f| f.into_iter().map(|f| (f.path, f.data, f.mode)).collect())
}

#[test]
fn volume_files_follow_kubelets_payload_rules() {
    assert_eq!(
        files(r#"{"name":"v","configMap":{"name":"app"}}"#).unwrap(),
        vec![("a.yaml".into(), b"A".to_vec(), 0o644), ("b.yaml".into(), b"B".to_vec(), 0o644)]
    );
    assert_eq!(
        files(r#"{"name":"v","secret":{"secretName":"db","defaultMode":256,"items":[{"key":"password","path":"p/pw"},{"key":"user","path":"u","mode":288}]}}"#).unwrap(),
        vec![("p/pw".into(), b"hunter2".to_vec(), 0o400), ("u".into(), b"admin".to_vec(), 0o440)]
    );
    assert_eq!(
        files(r#"{"name":"v","configMap":{"name":"nope"}}"#).unwrap_err().to_string(),
        "configmap \"nope\" not found"
    );
    assert_eq!(files(r#"{"name":"v","configMap":{"name":"nope","optional":true}}"#).unwrap(), vec![]);
    assert_eq!(
        files(r#"{"name":"v","secret":{"secretName":"db","items":[{"key":"x","path":"x"}]}}"#).unwrap_err().to_string(),
        "secret \"db\" references non-existent secret key: x"
    );
    let projected = files(
        r#"{"name":"v","projected":{"sources":[{"configMap":{"name":"app","items":[{"key":"a.yaml","path":"a"}]}},
            {"secret":{"name":"db","items":[{"key":"password","path":"pw"}]}},{"secret":{"name":"gone","optional":true}}]}}"#,
    )
    .unwrap();
    assert_eq!(projected, vec![("a".into(), b"A".to_vec(), 0o644), ("pw".into(), b"hunter2".to_vec(), 0o644)]);
}

#[test]
fn environment_from_objects_follows_kubelet() {
    let snap = objects();
    let ef = |j: &str| serde_json::from_str::<crate::pod::refs::EnvFromSource>(j).unwrap();
    let vars = resolve::env_from("default", &ef(r#"{"prefix":"APP_","configMapRef":{"name":"app"}}"#), &snap).unwrap();
    assert_eq!(vars, vec![("APP_a.yaml".to_string(), "A".to_string()), ("APP_b.yaml".into(), "B".into())]);
    assert_eq!(
        resolve::env_from("default", &ef(r#"{"secretRef":{"name":"x"}}"#), &snap).unwrap_err().to_string(),
        "secret \"x\" not found"
    );
    assert!(resolve::env_from("default", &ef(r#"{"secretRef":{"name":"x","optional":true}}"#), &snap)
        .unwrap()
        .is_empty());
    let sel = |j: &str| serde_json::from_str::<crate::pod::refs::KeySelector>(j).unwrap();
    assert_eq!(
        resolve::key_ref("default", ObjectKind::Secret, &sel(r#"{"name":"db","key":"password"}"#), &snap).unwrap(),
        Some("hunter2".into())
    );
    assert_eq!(
        resolve::key_ref("default", ObjectKind::Secret, &sel(r#"{"name":"db","key":"nope"}"#), &snap)
            .unwrap_err()
            .to_string(),
        "couldn't find key nope in Secret default/db"
    );
    assert_eq!(
        resolve::key_ref("default", ObjectKind::ConfigMap, &sel(r#"{"name":"db","key":"k","optional":true}"#), &snap)
            .unwrap(),
        None
    );
}
