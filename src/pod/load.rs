//! The whole intake pipeline for one file or URL payload, in kubelet's order: decode, require
//! a name, API defaults, static pod identity (the UID over the defaulted content), validation
//! and the static-pod restrictions; and the same pipeline for a pod the API server bound to
//! the node ([`load_api`]), without the static pods' naming and restrictions.

use super::decode::{self, Shape};
use super::finding::{Finding, ManifestError};
use super::identity::{self, Origin, StaticPod};
use super::{defaults, validate};

/// How strictly manifests are read.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Policy {
    /// Fields atoll does not implement are errors instead of warnings.
    pub strict: bool,
}

/// Pods read from one payload, ready for the sources: identity applied, plus the warnings.
#[derive(Clone, Debug)]
pub struct Loaded {
    pub pods: Vec<StaticPod>,
    /// ConfigMaps and Secrets the payload held, undecoded (`objects` reads them), each with
    /// its field path prefix.
    pub others: Vec<(String, serde_json::Value)>,
    pub warnings: Vec<Finding>,
}

/// The whole intake pipeline for one file or URL payload, in kubelet's order: decode,
/// require a name, API defaults, static pod identity (UID over the defaulted content),
/// validation and static-pod restrictions. `node` is the node name (lowercased here).
pub fn load(bytes: &[u8], shape: Shape, origin: &Origin, node: &str, policy: Policy) -> Result<Loaded, ManifestError> {
    let fail = |problems| ManifestError { origin: origin.to_string(), problems };
    let decode::Decoded { pods, others, warnings, list } = decode::decode(bytes, shape).map_err(fail)?;
    if policy.strict && !warnings.is_empty() {
        return Err(fail(warnings.into_iter().map(Finding::strict).collect()));
    }
    let mut out = Vec::with_capacity(pods.len());
    let mut problems = Vec::new();
    for (i, mut pod) in pods.into_iter().enumerate() {
        let prefix = if list { format!("items[{i}].") } else { String::new() };
        if pod.metadata.name.is_empty() {
            problems.push(Finding::new(&format!("{prefix}metadata.name"), "a name is required"));
            continue;
        }
        defaults::apply(&mut pod);
        let sp = identity::make_static(pod, origin, node);
        let errs = validate::validate(&sp.pod);
        if errs.is_empty() {
            out.push(sp);
        } else {
            problems.extend(errs.into_iter().map(|f| Finding { path: format!("{prefix}{}", f.path), ..f }));
        }
    }
    // Two pods of one payload with the same namespace/name: kubelet drops the second.
    let mut seen = std::collections::BTreeSet::new();
    for (i, sp) in out.iter().enumerate() {
        if !seen.insert(sp.pod.key()) {
            problems
                .push(Finding::new(&format!("items[{i}].metadata.name"), format!("duplicate pod {}", sp.pod.key())));
        }
    }
    if problems.is_empty() {
        Ok(Loaded { pods: out, others, warnings })
    } else {
        Err(fail(problems))
    }
}

/// A pod the API server bound to this node (a list item or a watch event's object), through
/// the same pipeline as a manifest: decode (the fields only the server writes, `status`
/// among them, are passed over), API defaults (the server applied them; again they change
/// nothing), its identity as the server gave it (`identity::make_api`) and validation without
/// the static pods' restrictions. The caller has checked that it is bound to this node.
pub fn load_api(mut value: serde_json::Value) -> Result<StaticPod, ManifestError> {
    let meta = &value["metadata"];
    let origin = format!(
        "pod {}/{} from the API server",
        meta["namespace"].as_str().unwrap_or("default"),
        meta["name"].as_str().unwrap_or("")
    );
    let fail = |problems| ManifestError { origin: origin.clone(), problems };
    let Some(obj) = value.as_object_mut() else { return Err(fail(vec![Finding::root("not an object")])) };
    // List items come without their kind; the status is the server's and the node's to write.
    obj.insert("apiVersion".into(), "v1".into());
    obj.insert("kind".into(), "Pod".into());
    obj.remove("status");
    let bytes = serde_json::to_vec(&value).unwrap_or_default();
    let decoded = decode::decode(&bytes, Shape::SinglePod).map_err(fail)?;
    let Some(mut pod) = decoded.pods.into_iter().next() else { return Err(fail(vec![Finding::root("not a Pod")])) };
    if pod.metadata.name.is_empty() || pod.metadata.uid.is_empty() {
        return Err(fail(vec![Finding::new("metadata", "a name and a uid are required")]));
    }
    defaults::apply(&mut pod);
    let sp = identity::make_api(pod);
    let problems = validate::validate_bound(&sp.pod);
    if problems.is_empty() {
        Ok(sp)
    } else {
        Err(fail(problems))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// A pod as the API server holds it: its own metadata, defaults and status.
    fn served() -> serde_json::Value {
        json!({
            "metadata": {"name": "web", "namespace": "shop", "uid": "0f1e", "resourceVersion": "7",
                         "creationTimestamp": "2026-11-28T10:00:00Z", "generation": 1,
                         "ownerReferences": [{"apiVersion": "apps/v1", "kind": "DaemonSet", "name": "web",
                                              "uid": "d1", "controller": true}],
                         "managedFields": [{"manager": "kube-controller-manager", "operation": "Update"}]},
            "spec": {"nodeName": "edge-1", "serviceAccountName": "default", "serviceAccount": "default",
                     "imagePullSecrets": [{"name": "registry"}], "enableServiceLinks": true,
                     "containers": [{"name": "c", "image": "busybox:1.36"}]},
            "status": {"phase": "Pending", "qosClass": "BestEffort"}
        })
    }

    #[test]
    fn a_bound_pod_keeps_its_identity_and_may_name_what_static_pods_may_not() {
        let sp = load_api(served()).unwrap();
        assert_eq!((sp.pod.metadata.name.as_str(), sp.pod.metadata.namespace.as_str()), ("web", "shop"));
        assert_eq!(sp.uid, "0f1e");
        assert_eq!(sp.origin, Origin::Api);
        assert_eq!(sp.pod.metadata.annotations[identity::ANNOTATION_SOURCE], "api");
        assert!(!sp.pod.metadata.annotations.contains_key(identity::ANNOTATION_HASH));
        assert!(sp.pod.spec.tolerations.is_empty(), "no toleration added: that is for file pods");
        // The same spec as a manifest file is refused: it names a service account and secrets.
        let mut manifest = served();
        manifest["apiVersion"] = json!("v1");
        manifest["kind"] = json!("Pod");
        manifest.as_object_mut().unwrap().remove("status");
        let bytes = serde_json::to_vec(&manifest).unwrap();
        let e = load(&bytes, Shape::SinglePod, &Origin::File("/m/web.json".into()), "edge-1", Policy::default());
        let e = e.unwrap_err().to_string();
        assert!(e.contains("static pods may not reference serviceaccounts"), "{e}");
    }

    #[test]
    fn what_atoll_cannot_give_a_bound_pod_is_refused_by_name() {
        let mut pvc = served();
        pvc["spec"]["volumes"] = json!([{"name": "data", "persistentVolumeClaim": {"claimName": "d"}}]);
        let e = load_api(pvc).unwrap_err().to_string();
        assert!(e.contains("pod shop/web from the API server"), "{e}");
        assert!(e.contains("spec.volumes[0].persistentVolumeClaim: persistentvolumeclaims are not implemented"), "{e}");
        // A service account token projection is the cluster's to give; its path and lifetime
        // are held to the API's rules.
        let token = |t: serde_json::Value| {
            let mut p = served();
            p["spec"]["volumes"] =
                json!([{"name": "kube-api-access", "projected": {"sources": [{"serviceAccountToken": t}]}}]);
            load_api(p).map(drop).map_err(|e| e.to_string())
        };
        assert_eq!(token(json!({"path": "token", "expirationSeconds": 3607})), Ok(()));
        let e = token(json!({"path": "../token"})).unwrap_err();
        assert!(e.contains("serviceAccountToken.path"), "{e}");
        let e = token(json!({"path": "token", "expirationSeconds": 60})).unwrap_err();
        assert!(e.contains("serviceAccountToken.expirationSeconds: 60 must be between 600"), "{e}");
        let mut cluster_bundle = served();
        cluster_bundle["spec"]["volumes"] =
            json!([{"name": "b", "projected": {"sources": [{"clusterTrustBundle": {"path": "b"}}]}}]);
        let e = load_api(cluster_bundle).unwrap_err().to_string();
        assert!(e.contains("clusterTrustBundles are not implemented by atoll"), "{e}");
        let mut no_uid = served();
        no_uid["metadata"]["uid"] = json!("");
        assert!(load_api(no_uid).is_err());
        assert!(load_api(json!([1])).is_err());
    }
}
