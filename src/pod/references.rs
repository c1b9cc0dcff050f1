//! Every reference a pod makes to a local ConfigMap or Secret, with its field path
//! ([`object_refs`]): for `atoll validate` across files, `atoll describe` and the objects a
//! container start reads. Pure.

use super::types::Pod;

/// The two kinds of local object.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ObjectKind {
    ConfigMap,
    Secret,
}

impl ObjectKind {
    /// The API's kind (`ConfigMap`).
    pub fn as_str(self) -> &'static str {
        match self {
            ObjectKind::ConfigMap => "ConfigMap",
            ObjectKind::Secret => "Secret",
        }
    }

    /// The lower-case resource name kubelet's messages use (`configmap "x" not found`).
    pub fn resource(self) -> &'static str {
        match self {
            ObjectKind::ConfigMap => "configmap",
            ObjectKind::Secret => "secret",
        }
    }
}

/// One reference a pod makes to a local object.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ObjectRefAt {
    pub kind: ObjectKind,
    pub name: String,
    /// The key it needs (`configMapKeyRef`, or an `items[]` entry), if one.
    pub key: Option<String>,
    pub optional: bool,
    /// Its field path (`spec.volumes[0].configMap.name`).
    pub path: String,
}

/// The name a pod's service account token (its volume `volume`'s projection `j`) is held
/// under among the node's objects, as a Secret with the key `token`: a name no API object can
/// have (it has slashes), of this pod alone (its UID).
pub fn token_object(uid: &str, volume: &str, j: usize) -> String {
    format!("{uid}/{volume}/{j}")
}

/// The path a `serviceAccountToken` projection writes its token to (the API requires one).
pub fn token_path(projection: &serde_json::Value) -> &str {
    projection["path"].as_str().unwrap_or("")
}

/// Every reference `pod` makes to a ConfigMap or Secret, in field order (a service account
/// token projection is a Secret reference to its [`token_object`]); an `items` list
/// makes one reference per key.
pub fn object_refs(pod: &Pod) -> Vec<ObjectRefAt> {
    let mut out = Vec::new();
    let mut push = |kind, name: &str, key: Option<&str>, optional: Option<bool>, path: String| {
        out.push(ObjectRefAt {
            kind,
            name: name.to_string(),
            key: key.map(str::to_string),
            optional: optional.unwrap_or(false),
            path,
        })
    };
    for (i, v) in pod.spec.volumes.iter().enumerate() {
        let p = format!("spec.volumes[{i}]");
        let mut sources = Vec::new();
        if let Some(c) = &v.config_map {
            sources.push((ObjectKind::ConfigMap, &c.name, &c.items, c.optional, format!("{p}.configMap"), "name"));
        }
        if let Some(s) = &v.secret {
            sources.push((
                ObjectKind::Secret,
                &s.secret_name,
                &s.items,
                s.optional,
                format!("{p}.secret"),
                "secretName",
            ));
        }
        if let Some(pr) = &v.projected {
            for (j, src) in pr.sources.iter().enumerate() {
                let sp = format!("{p}.projected.sources[{j}]");
                if let Some(c) = &src.config_map {
                    sources.push((
                        ObjectKind::ConfigMap,
                        &c.name,
                        &c.items,
                        c.optional,
                        format!("{sp}.configMap"),
                        "name",
                    ));
                }
                if let Some(s) = &src.secret {
                    sources.push((ObjectKind::Secret, &s.name, &s.items, s.optional, format!("{sp}.secret"), "name"));
                }
                if src.service_account_token.is_some() {
                    let name = token_object(&pod.metadata.uid, &v.name, j);
                    push(ObjectKind::Secret, &name, Some("token"), Some(false), format!("{sp}.serviceAccountToken"));
                }
            }
        }
        for (kind, name, items, optional, at, field) in sources {
            if items.is_empty() {
                push(kind, name, None, optional, format!("{at}.{field}"));
            }
            for (k, item) in items.iter().enumerate() {
                push(kind, name, Some(&item.key), optional, format!("{at}.items[{k}].key"));
            }
        }
    }
    for (cp, c) in pod.all_containers() {
        for (i, ef) in c.env_from.iter().enumerate() {
            if let Some(r) = &ef.config_map_ref {
                push(ObjectKind::ConfigMap, &r.name, None, r.optional, format!("{cp}.envFrom[{i}].configMapRef.name"));
            }
            if let Some(r) = &ef.secret_ref {
                push(ObjectKind::Secret, &r.name, None, r.optional, format!("{cp}.envFrom[{i}].secretRef.name"));
            }
        }
        for (i, e) in c.env.iter().enumerate() {
            let Some(src) = &e.value_from else { continue };
            let ep = format!("{cp}.env[{i}].valueFrom");
            if let Some(r) = &src.config_map_key_ref {
                push(ObjectKind::ConfigMap, &r.name, Some(&r.key), r.optional, format!("{ep}.configMapKeyRef"));
            }
            if let Some(r) = &src.secret_key_ref {
                push(ObjectKind::Secret, &r.name, Some(&r.key), r.optional, format!("{ep}.secretKeyRef"));
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_reference_is_listed_with_its_field_path() {
        let pod: Pod = serde_json::from_str(
            r#"{"metadata":{"name":"p"},"spec":{
            "volumes":[{"name":"a","configMap":{"name":"cfg"}},
                       {"name":"b","secret":{"secretName":"db","items":[{"key":"password","path":"pw"}]}},
                       {"name":"c","projected":{"sources":[{"secret":{"name":"tls","optional":true}}]}}],
            "containers":[{"name":"c","image":"x",
                "envFrom":[{"configMapRef":{"name":"env"}}],
                "env":[{"name":"P","valueFrom":{"secretKeyRef":{"name":"db","key":"user"}}}]}]}}"#,
        )
        .unwrap();
        let refs: Vec<(ObjectKind, String, Option<String>, bool, String)> =
            object_refs(&pod).into_iter().map(|r| (r.kind, r.name, r.key, r.optional, r.path)).collect();
        use ObjectKind::*;
        assert_eq!(
            refs,
            vec![
                (ConfigMap, "cfg".into(), None, false, "spec.volumes[0].configMap.name".into()),
                (Secret, "db".into(), Some("password".into()), false, "spec.volumes[1].secret.items[0].key".into()),
                (Secret, "tls".into(), None, true, "spec.volumes[2].projected.sources[0].secret.name".into()),
                (ConfigMap, "env".into(), None, false, "spec.containers[0].envFrom[0].configMapRef.name".into()),
                (
                    Secret,
                    "db".into(),
                    Some("user".into()),
                    false,
                    "spec.containers[0].env[0].valueFrom.secretKeyRef".into()
                ),
            ]
        );
    }
}
