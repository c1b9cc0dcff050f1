//! The node's local ConfigMaps and Secrets: each source's latest set (the agent hands in every
//! snapshot) merged into one view by kind, namespace and name; the workers read it when a
//! container starts and when they refresh a pod's volumes. A name several sources define goes
//! to the manifest directory, then `secretsDir`, then the URL, then the API server (the
//! objects the API source's pods need). An immutable object keeps its
//! data until it is gone from its source (as the API server refuses to change one); a changed
//! version is refused and said so.

use super::model::LocalObject;
use crate::pod::references::ObjectKind;
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

type Key = (ObjectKind, String, String);

/// The objects one pod may read (`Store::for_pod`).
pub struct ForPod<'a> {
    pub(super) store: &'a Store,
    pub(super) api: bool,
}

#[derive(Debug, Default)]
pub struct Store {
    inner: Mutex<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    /// Each source's latest objects, by rank and source name (`file`, `secrets`, `http`).
    by_source: BTreeMap<(u8, String), Vec<Arc<LocalObject>>>,
    merged: BTreeMap<Key, Arc<LocalObject>>,
}

/// What handing in a source's objects did.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Applied {
    /// Whether any object the workers may read changed (appeared, went, or changed data).
    pub changed: bool,
    /// Why an object was not taken (an immutable one changed; the same name in both sources).
    pub problems: Vec<String>,
}

impl Store {
    /// `source`'s complete current set of objects.
    pub fn set(&self, source: &str, objects: Vec<Arc<LocalObject>>) -> Applied {
        let mut inner = crate::locks::lock(&self.inner);
        inner.by_source.insert((rank(source), source.to_string()), objects);
        let mut problems = Vec::new();
        let mut merged: BTreeMap<Key, Arc<LocalObject>> = BTreeMap::new();
        for objects in inner.by_source.values() {
            for o in objects {
                let key = (o.kind, o.namespace.clone(), o.name.clone());
                if let Some(first) = merged.get(&key) {
                    if first.origin != o.origin {
                        problems.push(format!(
                            "{} {} is defined in {} and in {}; using {}",
                            o.kind.as_str(),
                            o.key(),
                            first.origin,
                            o.origin,
                            first.origin
                        ));
                    }
                    continue;
                }
                let taken = match inner.merged.get(&key) {
                    Some(old) if old.immutable && old.data != o.data => {
                        problems.push(format!(
                            "{} {} is immutable: the changed data in {} is not used (remove it, then add it again)",
                            o.kind.as_str(),
                            o.key(),
                            o.origin
                        ));
                        old.clone()
                    }
                    _ => o.clone(),
                };
                merged.insert(key, taken);
            }
        }
        let changed = merged.len() != inner.merged.len()
            || merged.iter().zip(inner.merged.iter()).any(|((k1, a), (k2, b))| k1 != k2 || a.data != b.data);
        inner.merged = merged;
        Applied { changed, problems }
    }

    /// The object of `kind` named `name` in `namespace`, if the box has one.
    pub fn get(&self, kind: ObjectKind, namespace: &str, name: &str) -> Option<Arc<LocalObject>> {
        let inner = crate::locks::lock(&self.inner);
        inner.merged.get(&(kind, namespace.to_string(), name.to_string())).cloned()
    }

    /// The objects `pod` may read: a pod from the API server only those the API source fetched
    /// for it (what the node authorizer let the node read), any other pod only the node's own.
    /// A pod from the cluster never sees a ConfigMap or Secret kept on the box.
    pub fn for_pod(&self, pod: &crate::pod::Pod) -> ForPod<'_> {
        let api = pod.metadata.annotations.get(crate::pod::identity::ANNOTATION_SOURCE).is_some_and(|s| s == "api");
        ForPod { store: self, api }
    }

    pub(super) fn scoped(&self, api: bool, kind: ObjectKind, namespace: &str, name: &str) -> Option<Arc<LocalObject>> {
        let inner = crate::locks::lock(&self.inner);
        if api {
            let fetched = inner.by_source.get(&(rank("api"), "api".to_string()))?;
            return fetched.iter().find(|o| o.kind == kind && o.namespace == namespace && o.name == name).cloned();
        }
        let o = inner.merged.get(&(kind, namespace.to_string(), name.to_string()))?;
        (o.origin != super::model::FROM_API).then(|| o.clone())
    }

    /// Every object, by kind, namespace and name.
    pub fn all(&self) -> Vec<Arc<LocalObject>> {
        crate::locks::lock(&self.inner).merged.values().cloned().collect()
    }
}

/// Which source wins a name several define: the box's own directories before the URL.
fn rank(source: &str) -> u8 {
    match source {
        "file" => 0,
        "secrets" => 1,
        "api" => 3,
        _ => 2,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cm(name: &str, value: &str, origin: &str, immutable: bool) -> Arc<LocalObject> {
        Arc::new(LocalObject {
            kind: ObjectKind::ConfigMap,
            namespace: "default".into(),
            name: name.into(),
            data: [("k".to_string(), value.as_bytes().to_vec())].into(),
            immutable,
            secret_type: String::new(),
            origin: origin.into(),
        })
    }

    #[test]
    fn sources_merge_the_file_source_first_and_changes_are_seen() {
        let s = Store::default();
        assert!(s.set("http", vec![cm("a", "from-url", "url", false)]).changed);
        let both = s.set("file", vec![cm("a", "from-file", "a.yaml", false)]);
        assert!(both.changed);
        assert_eq!(both.problems, vec!["ConfigMap default/a is defined in a.yaml and in url; using a.yaml"]);
        assert_eq!(s.get(ObjectKind::ConfigMap, "default", "a").unwrap().data["k"], b"from-file");
        assert!(s.get(ObjectKind::Secret, "default", "a").is_none());
        // The same again changes nothing the workers read.
        assert!(!s.set("file", vec![cm("a", "from-file", "a.yaml", false)]).changed);
        // secretsDir comes before the URL.
        s.set("secrets", vec![cm("a", "from-secrets-dir", "s/a.yaml", false)]);
        assert_eq!(s.get(ObjectKind::ConfigMap, "default", "a").unwrap().data["k"], b"from-file");
        assert!(s.set("file", vec![]).changed);
        assert_eq!(s.get(ObjectKind::ConfigMap, "default", "a").unwrap().data["k"], b"from-secrets-dir");
        assert!(s.set("secrets", vec![]).changed);
        assert_eq!(s.get(ObjectKind::ConfigMap, "default", "a").unwrap().data["k"], b"from-url");
    }

    #[test]
    fn an_immutable_object_keeps_its_data_until_it_is_gone() {
        let s = Store::default();
        s.set("file", vec![cm("a", "v1", "a.yaml", true)]);
        let refused = s.set("file", vec![cm("a", "v2", "a.yaml", true)]);
        assert!(!refused.changed);
        assert!(refused.problems[0].contains("immutable"), "{:?}", refused.problems);
        assert_eq!(s.get(ObjectKind::ConfigMap, "default", "a").unwrap().data["k"], b"v1");
        s.set("file", vec![]);
        s.set("file", vec![cm("a", "v2", "a.yaml", true)]);
        assert_eq!(s.get(ObjectKind::ConfigMap, "default", "a").unwrap().data["k"], b"v2");
    }

    #[test]
    fn a_pod_from_the_cluster_reads_only_the_apis_objects_and_a_static_pod_only_the_boxs() {
        use crate::objects::resolve::Lookup;
        let store = Store::default();
        store.set("file", vec![cm("local", "box", "/m/local.yaml", false), cm("both", "box", "/m/both.yaml", false)]);
        store.set(
            "api",
            vec![
                cm("both", "api", super::super::model::FROM_API, false),
                cm("fetched", "api", super::super::model::FROM_API, false),
            ],
        );
        let pod = |source: &str| {
            let mut p = crate::pod::Pod::default();
            p.metadata.annotations.insert(crate::pod::identity::ANNOTATION_SOURCE.into(), source.into());
            p
        };
        let (api, file) = (pod("api"), pod("file"));
        let read = |p: &crate::pod::Pod, name: &str| {
            store
                .for_pod(p)
                .object(ObjectKind::ConfigMap, "default", name)
                .map(|o| String::from_utf8_lossy(&o.data["k"]).into_owned())
        };
        assert_eq!(read(&api, "local"), None, "a bound pod never sees the box's own Secrets");
        assert_eq!(read(&api, "both").as_deref(), Some("api"));
        assert_eq!(read(&api, "fetched").as_deref(), Some("api"));
        assert_eq!(read(&file, "local").as_deref(), Some("box"));
        assert_eq!(read(&file, "both").as_deref(), Some("box"));
        assert_eq!(read(&file, "fetched"), None, "a static pod does not read what was fetched for another");
    }
}
