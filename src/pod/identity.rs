//! Static pod identity, as kubelet gives it: name `<name>-<node>`, `spec.nodeName`, a UID
//! that is a hash of the defaulted content plus the node and the source, and the
//! `kubernetes.io/config.*` annotations.
//!
//! The UID hash is FNV-128a (kubelet's current algorithm) over canonical JSON of the defaulted
//! pod (maps sorted, quantities canonical, `status` and `creationTimestamp` left out), so
//! reformatting a manifest keeps the UID and any semantic edit changes it. Its bytes differ
//! from kubelet's (Go's deep hash cannot be reproduced), its properties do not.

use super::types::{Pod, Toleration};
use std::fmt;
use std::path::PathBuf;

pub const ANNOTATION_HASH: &str = "kubernetes.io/config.hash";
pub const ANNOTATION_SOURCE: &str = "kubernetes.io/config.source";
pub const ANNOTATION_SEEN: &str = "kubernetes.io/config.seen";

/// Where a static pod came from.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Origin {
    /// A manifest file (absolute path).
    File(PathBuf),
    /// A manifest URL.
    Url(String),
    /// The API server: a pod bound to this node (`spec.nodeName`).
    Api,
}

impl Origin {
    /// The `kubernetes.io/config.source` value.
    pub fn source_name(&self) -> &'static str {
        match self {
            Origin::File(_) => "file",
            Origin::Url(_) => "http",
            Origin::Api => "api",
        }
    }
}

impl fmt::Display for Origin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Origin::File(p) => write!(f, "{}", p.display()),
            Origin::Url(u) => write!(f, "{u}"),
            Origin::Api => f.write_str("the API server"),
        }
    }
}

/// A pod ready to run: defaulted, named for this node, with its UID.
#[derive(Clone, Debug, PartialEq)]
pub struct StaticPod {
    pub pod: std::sync::Arc<Pod>,
    pub uid: PodUid,
    pub origin: Origin,
}

crate::text_id! {
    /// A static pod's UID: its manifest's `metadata.uid`, or a hash of its content, source and
    /// node (kubelet's). Checked by `paths::check_uid` before it names a directory.
    PodUid
}

crate::text_id! {
    /// A pod's full name, `namespace/name` (kubelet's `kubecontainer.GetPodFullName`, with a
    /// `/`): what the engine allows one worker of, and what rollback records are kept by.
    PodKey
}

impl StaticPod {
    /// The pod's `namespace/name`.
    pub fn key(&self) -> PodKey {
        self.pod.key().into()
    }
}

/// The node name as kubelet derives it: trimmed and lowercased.
pub fn node_name(raw: &str) -> String {
    raw.trim().to_lowercase()
}

/// The unit tests' pod: `metadata` and `spec` (JSON) defaulted and given their static identity
/// on `node`, from the file `/m/web.yaml`, as a manifest is loaded.
#[cfg(test)]
pub fn test_pod(metadata: &str, spec: &str, node: &str) -> Pod {
    let mut p: Pod = serde_json::from_str(&format!(r#"{{"metadata":{metadata},"spec":{spec}}}"#)).unwrap();
    super::defaults::apply(&mut p);
    std::sync::Arc::unwrap_or_clone(make_static(p, &Origin::File("/m/web.yaml".into()), node).pod)
}

/// Gives a defaulted pod its static identity on `node`.
pub fn make_static(mut pod: Pod, origin: &Origin, node: &str) -> StaticPod {
    let node = node_name(node);
    if pod.metadata.namespace.is_empty() {
        pod.metadata.namespace = "default".into();
    }
    let uid = if pod.metadata.uid.is_empty() { content_uid(&pod, origin, &node) } else { pod.metadata.uid.clone() };
    pod.metadata.uid = uid.clone();
    pod.metadata.name = format!("{}-{node}", pod.metadata.name);
    pod.spec.node_name = Some(node);
    pod.metadata.annotations.insert(ANNOTATION_HASH.into(), uid.clone());
    pod.metadata.annotations.insert(ANNOTATION_SOURCE.into(), origin.source_name().into());
    if matches!(origin, Origin::File(_)) {
        // File pods tolerate every NoExecute taint (kubelet adds this; URL pods do not get it).
        let t = Toleration { operator: Some("Exists".into()), effect: Some("NoExecute".into()), ..Default::default() };
        if !pod.spec.tolerations.contains(&t) {
            pod.spec.tolerations.push(t);
        }
    }
    StaticPod { pod: std::sync::Arc::new(pod), uid: uid.into(), origin: origin.clone() }
}

/// Gives a defaulted pod from the API server its identity on the node: the server's name,
/// namespace and UID as they are (kubelet renames only static pods), and
/// `kubernetes.io/config.source: api`. The caller has checked that it is bound to this node.
pub fn make_api(mut pod: Pod) -> StaticPod {
    if pod.metadata.namespace.is_empty() {
        pod.metadata.namespace = "default".into();
    }
    pod.metadata.annotations.insert(ANNOTATION_SOURCE.into(), Origin::Api.source_name().into());
    let uid = pod.metadata.uid.clone();
    StaticPod { pod: std::sync::Arc::new(pod), uid: uid.into(), origin: Origin::Api }
}

/// The UID of a pod without `metadata.uid`: a hash of its canonical content, the node (file
/// pods only, as kubelet) and the source.
fn content_uid(pod: &Pod, origin: &Origin, node: &str) -> String {
    let mut canonical = pod.clone();
    canonical.status = None;
    canonical.metadata.creation_timestamp = None;
    // `serde_json::to_vec(&canonical)`'s bytes, from the value the API and the mirror use too.
    let mut bytes = Vec::new();
    super::schema::write_ordered(
        &super::schema::POD,
        &serde_json::to_value(&canonical).unwrap_or_default(),
        &mut bytes,
    );
    match origin {
        Origin::File(path) => {
            bytes.extend_from_slice(format!("\nhost:{node}\nfile:{}", path.display()).as_bytes());
        }
        Origin::Url(url) => bytes.extend_from_slice(format!("\nurl:{url}").as_bytes()),
        Origin::Api => bytes.extend_from_slice(b"\napi"),
    }
    format!("{:032x}", crate::fnv::fnv1a_128(&bytes))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pod::defaults;

    #[test]
    fn copies_of_a_static_pod_share_its_spec_and_a_plain_container_is_small() {
        // The sources, the merge, the engine, the worker and the status store each hold the
        // pod: a copy must not copy the spec (50 pods held 8 copies each, 0.8 MB of containers).
        let sp = make_static(
            pod(r#"{"metadata":{"name":"web"},"spec":{"containers":[]}}"#),
            &Origin::File("/m/w.yaml".into()),
            "n",
        );
        let copy = sp.clone();
        assert!(std::sync::Arc::ptr_eq(&sp.pod, &copy.pod));
        // Probes, hooks and the security context are boxed: inline they made a Container 2 KB.
        let size = std::mem::size_of::<crate::pod::types::Container>();
        assert!(size <= 512, "a Container is {size} bytes");
    }

    fn pod(yaml_json: &str) -> Pod {
        let mut p: Pod = serde_json::from_str(yaml_json).unwrap();
        defaults::apply(&mut p);
        p
    }

    const WEB: &str =
        r#"{"metadata":{"name":"web","labels":{"a":"1","b":"2"}},"spec":{"containers":[{"name":"c","image":"x:1"}]}}"#;

    fn file(p: &str) -> Origin {
        Origin::File(PathBuf::from(p))
    }

    #[test]
    fn name_node_namespace_and_annotations_follow_kubelet() {
        let sp = make_static(pod(WEB), &file("/etc/kubernetes/manifests/web.yaml"), " Edge-1 ");
        assert_eq!(sp.pod.metadata.name, "web-edge-1");
        assert_eq!(sp.pod.metadata.namespace, "default");
        assert_eq!(sp.pod.spec.node_name.as_deref(), Some("edge-1"));
        assert_eq!(sp.uid.len(), 32);
        assert_eq!(sp.pod.metadata.uid, sp.uid);
        assert_eq!(sp.pod.metadata.annotations[ANNOTATION_HASH], sp.uid);
        assert_eq!(sp.pod.metadata.annotations[ANNOTATION_SOURCE], "file");
        assert!(sp
            .pod
            .spec
            .tolerations
            .iter()
            .any(|t| t.operator.as_deref() == Some("Exists") && t.effect.as_deref() == Some("NoExecute")));

        let url = make_static(pod(WEB), &Origin::Url("http://127.0.0.1/pods".into()), "edge-1");
        assert_eq!(url.pod.metadata.annotations[ANNOTATION_SOURCE], "http");
        assert!(url.pod.spec.tolerations.is_empty(), "URL pods get no NoExecute toleration");
    }

    #[test]
    fn uid_is_stable_for_equal_content_and_changes_with_meaning_or_place() {
        let f = file("/m/web.yaml");
        let base = make_static(pod(WEB), &f, "edge-1").uid;
        // Same meaning, other spelling: key order, explicit defaults, namespace spelt out.
        let respelt = r#"{"spec":{"restartPolicy":"Always","containers":[{"image":"x:1","name":"c","imagePullPolicy":"IfNotPresent"}]},"metadata":{"namespace":"default","labels":{"b":"2","a":"1"},"name":"web"}}"#;
        assert_eq!(make_static(pod(respelt), &f, "edge-1").uid, base);
        // A label changes the pod.
        assert_ne!(make_static(pod(&WEB.replace(r#""b":"2""#, r#""b":"3""#)), &f, "edge-1").uid, base);
        // So does moving the file, or another node.
        assert_ne!(make_static(pod(WEB), &file("/m/web2.yaml"), "edge-1").uid, base);
        assert_ne!(make_static(pod(WEB), &f, "edge-2").uid, base);
        // URL pods do not hash the node: every node gets the same UID.
        let u = Origin::Url("http://127.0.0.1/p".into());
        assert_eq!(make_static(pod(WEB), &u, "edge-1").uid, make_static(pod(WEB), &u, "edge-2").uid);
    }

    #[test]
    fn a_uid_in_the_manifest_is_kept() {
        let sp = make_static(pod(&WEB.replace(r#""name":"web","#, r#""name":"web","uid":"abc","#)), &file("/m/w"), "n");
        assert_eq!(sp.uid, "abc");
        assert_eq!(sp.pod.metadata.annotations[ANNOTATION_HASH], "abc");
    }
}
