//! Bytes → typed Pods, with every problem named by its field path.
//!
//! YAML (1.1 booleans and legacy octal such as `0644`, as kubectl reads them; merge keys; alias
//! bombs limited by serde-saphyr's budget) and JSON both become a JSON value first, as kubelet
//! converts YAML to JSON. Then `apiVersion`/`kind` are checked and the typed decode runs, with
//! `schema` beside it: it names the field of a type error, and every field atoll does not
//! implement: an error when it would change what a container sees (`fields`), else a
//! warning; never silently dropped.
//! In: bytes. Out: pods plus [`Finding`]s (warnings), or an error list.

use super::finding::Finding;
use super::schema::{self, Unread};
use super::shape::kind_of;
use super::types::Pod;
use serde_json::Value;

/// Largest manifest atoll reads (kubelet's `maxConfigLength`).
pub const MAX_MANIFEST_BYTES: usize = 10 << 20;

/// What a payload may hold.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Shape {
    /// A manifest file: exactly one Pod (or one ConfigMap or Secret).
    SinglePod,
    /// A URL payload: a Pod, a PodList or a v1 List of Pods (a List may hold ConfigMaps and
    /// Secrets too).
    PodOrList,
}

/// The kinds a payload may hold besides Pods, left for `objects` to decode (local ConfigMaps
/// and Secrets), each as `(field path prefix, value)`.
pub const LOCAL_OBJECT_KINDS: &[&str] = &["ConfigMap", "Secret"];

/// What a payload held.
#[derive(Debug)]
pub struct Decoded {
    pub pods: Vec<Pod>,
    /// v1 ConfigMaps and Secrets, undecoded, with the field path prefix of each.
    pub others: Vec<(String, Value)>,
    pub warnings: Vec<Finding>,
    /// A PodList or List: field paths of its pods start with `items[i]`.
    pub list: bool,
}

/// Decodes a payload into pods (not yet defaulted or validated) and warnings.
pub fn decode(bytes: &[u8], shape: Shape) -> Result<Decoded, Vec<Finding>> {
    let mut warnings = Vec::new();
    if bytes.len() > MAX_MANIFEST_BYTES {
        return Err(vec![Finding::root(format!(
            "{} bytes is over the {} byte limit for a manifest",
            bytes.len(),
            MAX_MANIFEST_BYTES
        ))]);
    }
    let value = to_value(bytes, &mut warnings).map_err(|e| vec![e])?;
    let obj = match &value {
        Value::Object(o) => o,
        Value::Null => return Err(vec![Finding::root("empty manifest")]),
        other => return Err(vec![Finding::root(format!("expected an object, found {}", kind_of(other)))]),
    };
    let api_version = obj.get("apiVersion").and_then(Value::as_str).unwrap_or("").to_string();
    let kind = obj.get("kind").and_then(Value::as_str).unwrap_or("").to_string();
    if api_version.is_empty() || kind.is_empty() {
        return Err(vec![Finding::root(
            "apiVersion and kind are required (expected apiVersion: v1 and kind: Pod)".to_string(),
        )]);
    }
    match (api_version.as_str(), kind.as_str(), shape) {
        ("v1", "Pod", _) => {
            let pod = typed_pod(value, "", &mut warnings)?;
            Ok(Decoded { pods: vec![pod], others: Vec::new(), warnings, list: false })
        }
        ("v1", k, _) if LOCAL_OBJECT_KINDS.contains(&k) => {
            Ok(Decoded { pods: Vec::new(), others: vec![(String::new(), value)], warnings, list: false })
        }
        ("v1", "PodList" | "List", Shape::PodOrList) => {
            let Some(Value::Object(mut obj)) = Some(value) else { unreachable!() };
            let items = match obj.remove("items") {
                Some(Value::Array(items)) => items,
                None | Some(Value::Null) => Vec::new(),
                Some(other) => {
                    return Err(vec![Finding::new("items", format!("expected a list, found {}", kind_of(&other)))]);
                }
            };
            // A list's own fields are these four (items taken above).
            const LIST_FIELDS: [&str; 4] = ["apiVersion", "kind", "metadata", "items"];
            for key in obj.keys().filter(|k| !LIST_FIELDS.contains(&k.as_str())) {
                let near = schema::nearest(key, &LIST_FIELDS, "");
                warnings.push(Finding::new(key, format!("{}; {IGNORED}", schema::unknown_field(near))));
            }
            let mut pods = Vec::with_capacity(items.len());
            let mut others = Vec::new();
            let mut errors = Vec::new();
            for (i, item) in items.into_iter().enumerate() {
                let prefix = format!("items[{i}]");
                let item_kind = item.get("kind").and_then(Value::as_str).unwrap_or("");
                let item_api = item.get("apiVersion").and_then(Value::as_str).unwrap_or("");
                // A List may carry the pods' ConfigMaps and Secrets along.
                if kind == "List" && item_api == "v1" && LOCAL_OBJECT_KINDS.contains(&item_kind) {
                    others.push((prefix, item));
                    continue;
                }
                // Items of a PodList may leave apiVersion/kind out; a List's must say Pod.
                let acceptable = match kind.as_str() {
                    "PodList" => {
                        (item_kind.is_empty() || item_kind == "Pod") && (item_api.is_empty() || item_api == "v1")
                    }
                    _ => item_kind == "Pod" && item_api == "v1",
                };
                if !acceptable {
                    errors.push(Finding::new(
                        &prefix,
                        format!("expected a v1 Pod, ConfigMap or Secret, found apiVersion {item_api:?} kind {item_kind:?}"),
                    ));
                    continue;
                }
                match typed_pod(item, &prefix, &mut warnings) {
                    Ok(p) => pods.push(p),
                    Err(mut e) => errors.append(&mut e),
                }
            }
            if errors.is_empty() {
                Ok(Decoded { pods, others, warnings, list: true })
            } else {
                Err(errors)
            }
        }
        ("v1", "PodList" | "List", Shape::SinglePod) => Err(vec![Finding::root(format!(
            "a manifest file holds exactly one Pod, ConfigMap or Secret; found a {kind} (lists are accepted only from a manifest URL)"
        ))]),
        _ => Err(vec![Finding::root(format!(
            "expected apiVersion: v1 and kind: Pod, ConfigMap or Secret, found apiVersion: {api_version} and kind: {kind}"
        ))]),
    }
}

/// Parses JSON or YAML into a JSON value, under the parser's budget (`crate::parse`). A YAML
/// stream with several documents yields the first (as kubelet) with a warning naming how many
/// were left out.
pub(crate) fn to_value(bytes: &[u8], warnings: &mut Vec<Finding>) -> Result<Value, Finding> {
    let doc = crate::parse::document(bytes).map_err(Finding::root)?;
    if doc.more_documents > 0 {
        warnings.push(Finding::root(format!(
            "the file holds {} YAML documents; only the first is used (one Pod per manifest)",
            doc.more_documents + 1
        )));
    }
    Ok(doc.value)
}

/// How a warning about a field atoll leaves out ends (`--strict` drops it: it refuses instead).
pub const IGNORED: &str = "ignored";

/// Decodes one Pod object; the fields the types do not read (`schema::unknown`) are errors
/// when a container would run differently without them, else warnings, under `prefix`: a
/// Kubernetes field atoll does not implement says so, a key Kubernetes does not have is an
/// unknown field, with the real one it is closest to.
fn typed_pod(value: Value, prefix: &str, warnings: &mut Vec<Finding>) -> Result<Pod, Vec<Finding>> {
    let mut ignored = Vec::new();
    schema::unknown(&schema::POD, &value, "", &mut ignored);
    // Cloned so that a failed decode can still be searched for the field it choked on.
    let pod = match super::de::from_value(value.clone()) {
        Ok(pod) => pod,
        Err(e) => {
            // A field of the wrong JSON type the walk named says so in Go's words.
            let shape = ignored.iter().find_map(|(f, u)| match u {
                Unread::Malformed(why) => Some((schema::join(prefix, f), why.clone())),
                _ => None,
            });
            let (path, message) = shape
                .or_else(|| schema::locate(&schema::POD, &value, prefix))
                .unwrap_or((prefix.to_string(), e.to_string()));
            return Err(vec![Finding::new(&path, message)]);
        }
    };
    let mut errors = Vec::new();
    for (field, unread) in ignored {
        let path = schema::join(prefix, &field);
        match (unread, super::fields::runtime_visible(&field)) {
            // A volume with no source atoll reads would be another volume (an emptyDir).
            (Unread::Unknown(near), Some(_)) => errors.push(Finding::new(&path, schema::unknown_field(near))),
            (Unread::Unknown(near), None) => {
                warnings.push(Finding::new(&path, format!("{}; {IGNORED}", schema::unknown_field(near))))
            }
            (Unread::NotImplemented, Some(why)) | (Unread::Malformed(why), _) => errors.push(Finding::new(&path, why)),
            (Unread::NotImplemented, None) => {
                warnings.push(Finding::new(&path, format!("not implemented by atoll; {IGNORED}")))
            }
        }
    }
    if errors.is_empty() {
        Ok(pod)
    } else {
        Err(errors)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ok(src: &str) -> (Vec<Pod>, Vec<String>) {
        let d = decode(src.as_bytes(), Shape::PodOrList).unwrap_or_else(|e| panic!("{e:?}"));
        (d.pods, d.warnings.iter().map(|f| f.to_string()).collect())
    }

    fn err(src: &str, shape: Shape) -> String {
        let e = decode(src.as_bytes(), shape).unwrap_err();
        e.iter().map(|f| f.to_string()).collect::<Vec<_>>().join("\n")
    }

    const MIN: &str =
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: web\nspec:\n  containers:\n  - name: c\n    image: busybox\n";

    #[test]
    fn yaml_and_json_give_the_same_pod() {
        let (y, _) = ok(MIN);
        let (j, _) = ok(
            r#"{"apiVersion":"v1","kind":"Pod","metadata":{"name":"web"},"spec":{"containers":[{"name":"c","image":"busybox"}]}}"#,
        );
        assert_eq!(y, j);
        assert_eq!(y[0].spec.containers[0].image, "busybox");
    }

    #[test]
    fn unknown_fields_are_reported_with_their_path() {
        let src = format!("{MIN}    resizePolicy:\n    - resourceName: cpu\n  preemptionPolicy: Never\n");
        let (_, w) = ok(&src);
        assert!(w.contains(&"spec.containers[0].resizePolicy: not implemented by atoll; ignored".to_string()), "{w:?}");
        assert!(w.contains(&"spec.preemptionPolicy: not implemented by atoll; ignored".to_string()), "{w:?}");
    }

    #[test]
    fn an_unknown_field_that_would_change_a_container_is_an_error() {
        let src = format!(
            "{MIN}    volumeDevices:\n    - name: d\n      devicePath: /dev/x\n  volumes:\n  - name: share\n    nfs: {{server: x, path: /}}\n"
        );
        let e = err(&src, Shape::SinglePod);
        assert!(e.contains("spec.containers[0].volumeDevices: raw block devices are not implemented by atoll"), "{e}");
        assert!(e.contains("spec.volumes[0].nfs: nfs volumes are not implemented by atoll"), "{e}");
        // In a list, the path starts at the item.
        let list = "apiVersion: v1\nkind: List\nitems:\n- apiVersion: v1\n  kind: Pod\n  metadata: {name: a}\n  spec:\n    hostUsers: false\n    containers: [{name: c, image: x}]\n";
        assert!(
            err(list, Shape::PodOrList).contains("items[0].spec.hostUsers: user namespaces"),
            "{}",
            err(list, Shape::PodOrList)
        );
    }

    #[test]
    fn api_field_names_with_acronyms_are_read() {
        let src = "apiVersion: v1\nkind: Pod\nmetadata:\n  name: w\nspec:\n  hostPID: true\n  hostIPC: true\n  setHostnameAsFQDN: true\n  volumes:\n  - name: d\n    downwardAPI: {}\n  containers:\n  - name: c\n    image: x\n    ports:\n    - containerPort: 80\n      hostIP: 127.0.0.1\n";
        let (pods, w) = ok(src);
        assert!(w.is_empty(), "{w:?}");
        let s = &pods[0].spec;
        assert!(s.host_pid && s.host_ipc);
        assert_eq!(s.set_hostname_as_fqdn, Some(true));
        assert!(s.volumes[0].downward_api.is_some());
        assert_eq!(s.containers[0].ports[0].host_ip.as_deref(), Some("127.0.0.1"));
        let back = serde_json::to_string(&pods[0]).unwrap();
        for name in ["\"hostPID\"", "\"hostIPC\"", "\"setHostnameAsFQDN\"", "\"downwardAPI\"", "\"hostIP\""] {
            assert!(back.contains(name), "{name} missing from {back}");
        }
    }

    #[test]
    fn kubeadm_style_status_and_creation_timestamp_are_quiet() {
        let src = "apiVersion: v1\nkind: Pod\nmetadata:\n  creationTimestamp: null\n  name: etcd\nspec:\n  containers:\n  - name: c\n    image: x:1\nstatus: {}\n";
        let (pods, w) = ok(src);
        assert!(w.is_empty(), "{w:?}");
        assert_eq!(pods[0].metadata.name, "etcd");
    }

    #[test]
    fn type_errors_name_the_field() {
        let src = format!("{MIN}    ports:\n    - containerPort: eighty\n");
        let e = err(&src, Shape::SinglePod);
        assert!(e.starts_with("spec.containers[0].ports[0].containerPort: invalid type: string \"eighty\""), "{e}");
        let e = err("apiVersion: v1\nkind: Pod\nmetadata:\n  name: [1]\n", Shape::SinglePod);
        assert!(e.starts_with("metadata.name: invalid type: sequence"), "{e}");
    }

    #[test]
    fn kind_and_api_version_are_required_and_checked() {
        assert!(err("metadata:\n  name: x\n", Shape::SinglePod).contains("apiVersion and kind are required"));
        let e = err("apiVersion: apps/v1\nkind: Deployment\n", Shape::SinglePod);
        assert!(e.contains("found apiVersion: apps/v1 and kind: Deployment"), "{e}");
        let e = err("apiVersion: v1\nkind: PodList\nitems: []\n", Shape::SinglePod);
        assert!(e.contains("exactly one Pod, ConfigMap or Secret; found a PodList"), "{e}");
    }

    #[test]
    fn garbage_and_empty_input_are_errors_not_panics() {
        assert!(err("", Shape::SinglePod).contains("empty manifest"));
        assert!(err("# only a comment\n", Shape::SinglePod).contains("empty manifest"));
        assert!(err("{{{{", Shape::SinglePod).contains("not valid YAML or JSON"));
        assert!(err("- a\n- b\n", Shape::SinglePod).contains("expected an object, found a list"));
        assert!(err("key: [unclosed\n", Shape::SinglePod).contains("not valid YAML"));
        let e = decode(&[0xff, 0xfe, 0x00], Shape::SinglePod).unwrap_err();
        assert!(e[0].to_string().contains("not UTF-8"));
    }

    #[test]
    fn oversize_input_is_refused_before_parsing() {
        let big = vec![b' '; MAX_MANIFEST_BYTES + 1];
        assert!(err(std::str::from_utf8(&big).unwrap(), Shape::SinglePod).contains("over the 10485760 byte limit"));
    }

    #[test]
    fn json_over_the_budget_is_refused_before_it_is_built() {
        // A 10 MiB JSON array of tiny numbers: millions of values if parsed.
        let mut big = String::from(r#"{"apiVersion":"v1","kind":"Pod","metadata":{"name":"x"},"spec":{"a":["#);
        while big.len() < MAX_MANIFEST_BYTES - 16 {
            big.push_str("0,");
        }
        big.push_str("0]}}");
        let e = err(&big, Shape::SinglePod);
        assert!(e.contains("over the parser's budget: more than 100000 values"), "{e}");
        let deep = format!("{{\"a\":{}{}}}", "[".repeat(100), "]".repeat(100));
        assert!(err(&deep, Shape::SinglePod).contains("nested deeper than 64 levels"));
    }

    #[test]
    fn multi_document_files_use_the_first_with_a_warning() {
        let src = format!("---\n{MIN}---\n{}", MIN.replace("web", "other"));
        let (pods, w) = ok(&src);
        assert_eq!(pods.len(), 1);
        assert_eq!(pods[0].metadata.name, "web");
        assert!(w[0].contains("holds 2 YAML documents; only the first is used"), "{w:?}");
    }

    #[test]
    fn yaml_1_1_octal_and_merge_keys_read_like_kubectl() {
        let src = "apiVersion: v1\nkind: Pod\nmetadata:\n  name: w\n  labels: &l\n    a: b\n  annotations:\n    <<: *l\n    c: d\nspec:\n  securityContext:\n    runAsUser: 0644\n  containers:\n  - name: c\n    image: x\n";
        let (pods, _) = ok(src);
        assert_eq!(pods[0].spec.security_context.as_ref().unwrap().run_as_user, Some(420));
        assert_eq!(pods[0].metadata.annotations.get("a").map(String::as_str), Some("b"));
    }

    #[test]
    fn alias_bombs_are_refused() {
        // Ten levels of ten-fold aliases: 10^10 nodes if expanded.
        let mut src = String::from(
            "apiVersion: v1\nkind: Pod\nmetadata:\n  name: bomb\nx:\n  a: &a [x, x, x, x, x, x, x, x, x, x]\n",
        );
        let mut prev = 'a';
        for name in "bcdefghij".chars() {
            let refs = vec![format!("*{prev}"); 10].join(", ");
            src.push_str(&format!("  {name}: &{name} [{refs}]\n"));
            prev = name;
        }
        let e = err(&src, Shape::SinglePod);
        assert!(e.contains("not valid YAML"), "{e}");
        assert!(e.to_lowercase().contains("alias") || e.to_lowercase().contains("budget"), "{e}");
    }

    #[test]
    fn lists_from_urls_hold_pods_and_one_bad_item_rejects_all() {
        let list = r#"{"apiVersion":"v1","kind":"PodList","items":[
            {"metadata":{"name":"a"},"spec":{"containers":[{"name":"c","image":"x"}]}},
            {"apiVersion":"v1","kind":"Pod","metadata":{"name":"b"},"spec":{"containers":[{"name":"c","image":"x"}]}}]}"#;
        let (pods, _) = ok(list);
        assert_eq!(pods.iter().map(|p| p.metadata.name.as_str()).collect::<Vec<_>>(), vec!["a", "b"]);

        let generic =
            r#"{"apiVersion":"v1","kind":"List","items":[{"apiVersion":"v1","kind":"Pod","metadata":{"name":"a"}}]}"#;
        assert_eq!(ok(generic).0.len(), 1);
        let wrong = r#"{"apiVersion":"v1","kind":"List","items":[{"apiVersion":"v1","kind":"Service","metadata":{"name":"a"}}]}"#;
        assert!(err(wrong, Shape::PodOrList).contains("items[0]: expected a v1 Pod"));
        let bad_item =
            r#"{"apiVersion":"v1","kind":"PodList","items":[{"metadata":{"name":"a"}},{"metadata":{"name":7}}]}"#;
        assert!(err(bad_item, Shape::PodOrList).starts_with("items[1].metadata.name: invalid type"));
    }
}
