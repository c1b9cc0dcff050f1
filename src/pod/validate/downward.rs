//! Validation of `downwardAPI` volumes and projections (the API server's
//! validateDownwardAPIVolumeFile): each item a relative path that does not climb out or start
//! with `..`, exactly one of `fieldRef` (a volume's fields: the pod's name, namespace, UID,
//! its labels and annotations whole or one of them) and `resourceFieldRef` (naming its
//! container, as a volume belongs to no container), a mode in 0..=0777. A projected volume's
//! paths are unique across its sources (`seen`).

use super::container::{subscript_ok, RESOURCE_REFS};
use super::objects::MAX_MODE;
use super::validator::Validator;
use crate::pod::paths::check_descending;
use crate::pod::types::DownwardAPIVolumeFile;
use std::collections::BTreeSet;

/// The fields a file of the downward API may hold, besides one label or annotation.
const VOLUME_FIELDS: &[&str] =
    &["metadata.name", "metadata.namespace", "metadata.uid", "metadata.labels", "metadata.annotations"];

impl Validator {
    /// The `items` of a downwardAPI volume or projection at `p`.
    pub(super) fn downward_items(
        &mut self,
        p: &str,
        items: &[DownwardAPIVolumeFile],
        mut seen: Option<&mut BTreeSet<String>>,
    ) {
        for (k, item) in items.iter().enumerate() {
            let ip = format!("{p}.items[{k}]");
            if let Err(e) = check_descending(&item.path) {
                self.err(format!("{ip}.path"), e);
            } else if seen.as_mut().is_some_and(|s| !s.insert(item.path.clone())) {
                self.err(format!("{ip}.path"), format!("conflicting duplicate path {:?}", item.path));
            }
            match (&item.field_ref, &item.resource_field_ref) {
                (Some(f), None) => {
                    if !VOLUME_FIELDS.contains(&f.field_path.as_str()) && !subscript_ok(&f.field_path) {
                        self.err(
                            format!("{ip}.fieldRef.fieldPath"),
                            format!(
                                "{:?} is not supported: use one of {}, metadata.labels['KEY'] or metadata.annotations['KEY']",
                                f.field_path,
                                VOLUME_FIELDS.join(", ")
                            ),
                        );
                    }
                }
                (None, Some(r)) => {
                    let rp = format!("{ip}.resourceFieldRef");
                    if r.container_name.as_deref().is_none_or(str::is_empty) {
                        self.err(format!("{rp}.containerName"), "is required in a volume");
                    }
                    if !RESOURCE_REFS.contains(&r.resource.as_str()) {
                        self.err(
                            format!("{rp}.resource"),
                            format!("{:?} is not supported: use one of {}", r.resource, RESOURCE_REFS.join(", ")),
                        );
                    }
                    if r.divisor.is_some_and(|d| d.is_zero() || d.is_negative()) {
                        self.err(format!("{rp}.divisor"), "must be positive");
                    }
                }
                _ => self.err(&ip, "must have exactly one of fieldRef and resourceFieldRef"),
            }
            self.range(&format!("{ip}.mode"), item.mode, 0, MAX_MODE);
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::pod::types::Pod;

    fn problems(volumes: &str) -> Vec<String> {
        let json = format!(
            r#"{{"metadata":{{"name":"p","namespace":"default","uid":"u1"}},"spec":{{"volumes":{volumes},
            "containers":[{{"name":"c","image":"x:1"}}]}}}}"#
        );
        let mut pod: Pod = serde_json::from_str(&json).unwrap();
        crate::pod::defaults::apply(&mut pod);
        super::super::validate(&pod).into_iter().map(|f| f.to_string()).collect()
    }

    #[test]
    fn kubelets_volume_fields_and_named_resources_are_accepted() {
        let ok = r#"[{"name":"info","downwardAPI":{"defaultMode":288,"items":[
            {"path":"labels","fieldRef":{"fieldPath":"metadata.labels"}},
            {"path":"a/annotations","fieldRef":{"fieldPath":"metadata.annotations"},"mode":420},
            {"path":"name","fieldRef":{"fieldPath":"metadata.name"}},
            {"path":"uid","fieldRef":{"fieldPath":"metadata.uid"}},
            {"path":"tier","fieldRef":{"fieldPath":"metadata.labels['app.kubernetes.io/tier']"}},
            {"path":"mem","resourceFieldRef":{"containerName":"c","resource":"limits.memory","divisor":"1Mi"}},
            {"path":"name","fieldRef":{"fieldPath":"metadata.namespace"}}]}},
            {"name":"all","projected":{"sources":[{"downwardAPI":{"items":[
            {"path":"ns","fieldRef":{"fieldPath":"metadata.namespace"}}]}}]}}]"#;
        assert_eq!(problems(ok), Vec::<String>::new());
    }

    #[test]
    fn what_the_api_server_refuses_is_named() {
        for (items, want) in [
            (r#"{"path":"/abs","fieldRef":{"fieldPath":"metadata.name"}}"#, "items[0].path"),
            (r#"{"path":"a/../../b","fieldRef":{"fieldPath":"metadata.name"}}"#, "items[0].path"),
            (r#"{"path":"..data","fieldRef":{"fieldPath":"metadata.name"}}"#, "items[0].path"),
            (r#"{"path":"","fieldRef":{"fieldPath":"metadata.name"}}"#, "items[0].path"),
            (r#"{"path":"x","fieldRef":{"fieldPath":"spec.nodeName"}}"#, "items[0].fieldRef.fieldPath"),
            (r#"{"path":"x","fieldRef":{"fieldPath":"status.podIP"}}"#, "items[0].fieldRef.fieldPath"),
            (r#"{"path":"x","fieldRef":{"fieldPath":"metadata.labels['bad key']"}}"#, "fieldRef.fieldPath"),
            (r#"{"path":"x","resourceFieldRef":{"resource":"limits.cpu"}}"#, "resourceFieldRef.containerName"),
            (r#"{"path":"x","resourceFieldRef":{"containerName":"c","resource":"limits.gpu"}}"#, "resource"),
            (
                r#"{"path":"x","resourceFieldRef":{"containerName":"c","resource":"limits.cpu","divisor":"0"}}"#,
                "divisor",
            ),
            (r#"{"path":"x"}"#, "exactly one of fieldRef and resourceFieldRef"),
            (
                r#"{"path":"x","fieldRef":{"fieldPath":"metadata.name"},"resourceFieldRef":{"containerName":"c","resource":"limits.cpu"}}"#,
                "exactly one of",
            ),
            (r#"{"path":"x","fieldRef":{"fieldPath":"metadata.name"},"mode":512}"#, "items[0].mode"),
        ] {
            let got = problems(&format!(r#"[{{"name":"d","downwardAPI":{{"items":[{items}]}}}}]"#));
            assert!(
                got.iter().any(|p| p.contains("spec.volumes[0].downwardAPI") && p.contains(want)),
                "{items}: {got:?}"
            );
        }
        let got = problems(r#"[{"name":"d","downwardAPI":{"defaultMode":1000}}]"#);
        assert!(got.iter().any(|p| p.contains("downwardAPI.defaultMode")), "{got:?}");
        // A projected volume's paths are unique across its sources.
        let got = problems(
            r#"[{"name":"d","projected":{"sources":[{"downwardAPI":{"items":[{"path":"n","fieldRef":{"fieldPath":"metadata.name"}}]}},
            {"configMap":{"name":"cm","items":[{"key":"k","path":"n"}]}}]}}]"#,
        );
        assert!(got.iter().any(|p| p.contains("sources[1].configMap.items[0].path")), "{got:?}");
    }
}
