//! AppArmor, as the API server's ValidatePodCreate checks it (kubelet runs it on static pods):
//! each `appArmorProfile` field (a type of the three, `localhostProfile` iff Localhost, not
//! padded, at most 4095 bytes), each annotation (a container of the pod, a value the
//! annotation can hold) and, for a container with both, the field (its own, else the pod's)
//! agreeing with the annotation.

use super::validator::Validator;
use crate::pod::apparmor::{container_field, ANNOTATION_PREFIX, LOCALHOST_PREFIX, RUNTIME_DEFAULT, UNCONFINED};
use crate::pod::types::{AppArmorProfile, Pod};

const TYPES: &[&str] = &["Localhost", "RuntimeDefault", "Unconfined"];
/// PATH_MAX - 1, the API's limit on a Localhost profile's name.
const MAX_NAME: usize = 4095;
const NAME_REQUIRED: &str = "must be set when AppArmor type is Localhost";

impl Validator {
    pub(super) fn apparmor(&mut self, pod: &Pod) {
        let s = &pod.spec;
        let pod_field = s.security_context.as_ref().and_then(|sc| sc.app_armor_profile.as_ref());
        if let Some(p) = pod_field {
            self.apparmor_field("spec.securityContext.appArmorProfile", p);
        }
        let init = s.init_containers.iter().enumerate().map(|(i, c)| (format!("spec.initContainers[{i}]"), c));
        let regular = s.containers.iter().enumerate().map(|(i, c)| (format!("spec.containers[{i}]"), c));
        for (path, c) in init.chain(regular) {
            let path = format!("{path}.securityContext.appArmorProfile");
            let own = container_field(c);
            if let Some(p) = own {
                self.apparmor_field(&path, p);
            }
            let annotation = pod.metadata.annotations.get(&format!("{ANNOTATION_PREFIX}{}", c.name));
            let (Some(field), Some(value)) = (own.or(pod_field), annotation) else { continue };
            let same_type = match field.type_.as_str() {
                "Unconfined" => value == UNCONFINED,
                "RuntimeDefault" => value == RUNTIME_DEFAULT,
                "Localhost" => value.starts_with(LOCALHOST_PREFIX),
                _ => true,
            };
            if !same_type {
                self.err(format!("{path}.type"), "apparmor type in annotation and field must match");
            } else if field.type_ == "Localhost"
                && field.localhost_profile.as_deref() != value.strip_prefix(LOCALHOST_PREFIX)
            {
                self.err(format!("{path}.localhostProfile"), "apparmor profile in annotation and field must match");
            }
        }
        for (key, value) in &pod.metadata.annotations {
            let Some(name) = key.strip_prefix(ANNOTATION_PREFIX) else { continue };
            let path = format!("metadata.annotations[{key}]");
            if !s.init_containers.iter().chain(&s.containers).any(|c| c.name == name) {
                self.err(&path, format!("{name:?}: container not found"));
            }
            let known = [RUNTIME_DEFAULT, UNCONFINED, ""].contains(&value.as_str());
            if !known && !value.starts_with(LOCALHOST_PREFIX) {
                self.err(&path, format!("invalid AppArmor profile name: {value:?}"));
            }
        }
    }

    fn apparmor_field(&mut self, path: &str, p: &AppArmorProfile) {
        let name_path = format!("{path}.localhostProfile");
        match (p.type_.as_str(), p.localhost_profile.as_deref()) {
            ("Localhost", None) => self.err(name_path, NAME_REQUIRED),
            ("Localhost", Some(name)) => {
                if name.trim() != name {
                    self.err(&name_path, "must not be padded with whitespace");
                } else if name.is_empty() {
                    self.err(&name_path, NAME_REQUIRED);
                }
                if name.len() > MAX_NAME {
                    self.err(&name_path, format!("must have at most {MAX_NAME} bytes"));
                }
            }
            ("RuntimeDefault" | "Unconfined", Some(_)) => {
                self.err(name_path, "can only be set when AppArmor type is Localhost");
            }
            ("", _) => self.err(format!("{path}.type"), "type is required when appArmorProfile is set"),
            (t, _) => self.one_of(&format!("{path}.type"), Some(t), TYPES),
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::pod::validate::tests::check;

    /// A pod with containers `a` (init) and `b`, the pod's security context `psc`, `b`'s
    /// security context `csc` and the annotations `ann` (JSON object bodies).
    fn pod(psc: &str, csc: &str, ann: &str) -> String {
        format!(
            r#"{{"metadata":{{"name":"p","annotations":{{{ann}}}}},"spec":{{"securityContext":{{{psc}}},
            "initContainers":[{{"name":"a","image":"x:1"}}],
            "containers":[{{"name":"b","image":"x:1","securityContext":{{{csc}}}}}]}}}}"#
        )
    }

    const KEY: &str = "container.apparmor.security.beta.kubernetes.io/";
    const C: &str = "spec.containers[0].securityContext.appArmorProfile";
    const P: &str = "spec.securityContext.appArmorProfile";

    #[test]
    fn valid_profiles_pass() {
        for (psc, csc, ann) in [
            (r#""appArmorProfile":{"type":"RuntimeDefault"}"#, "", ""),
            ("", r#""appArmorProfile":{"type":"Unconfined"}"#, ""),
            ("", r#""appArmorProfile":{"type":"Localhost","localhostProfile":"k8s-web"}"#, ""),
            ("", "", &format!(r#""{KEY}a":"runtime/default","{KEY}b":"localhost/web""#)),
            ("", "", &format!(r#""{KEY}b":"unconfined""#)),
            ("", "", &format!(r#""{KEY}b":"""#)),
            // Field and annotation agreeing: the container's own, or the pod's.
            (r#""appArmorProfile":{"type":"RuntimeDefault"}"#, "", &format!(r#""{KEY}a":"runtime/default""#)),
            (
                r#""appArmorProfile":{"type":"Unconfined"}"#,
                r#""appArmorProfile":{"type":"Localhost","localhostProfile":"web"}"#,
                &format!(r#""{KEY}b":"localhost/web","{KEY}a":"unconfined""#),
            ),
        ] {
            assert_eq!(check(&pod(psc, csc, ann)), Vec::<String>::new(), "{psc} {csc} {ann}");
        }
    }

    #[test]
    fn each_rule_names_its_field() {
        let long = "x".repeat(4096);
        for (psc, csc, ann, want) in [
            ("", r#""appArmorProfile":{}"#, "", format!("{C}.type: type is required when appArmorProfile is set")),
            (
                r#""appArmorProfile":{"type":"Default"}"#,
                "",
                "",
                format!(r#"{P}.type: unsupported value "Default": must be one of Localhost, RuntimeDefault, Unconfined"#),
            ),
            (
                "",
                r#""appArmorProfile":{"type":"Localhost"}"#,
                "",
                format!("{C}.localhostProfile: must be set when AppArmor type is Localhost"),
            ),
            (
                "",
                r#""appArmorProfile":{"type":"Localhost","localhostProfile":""}"#,
                "",
                format!("{C}.localhostProfile: must be set when AppArmor type is Localhost"),
            ),
            (
                "",
                r#""appArmorProfile":{"type":"Localhost","localhostProfile":" web"}"#,
                "",
                format!("{C}.localhostProfile: must not be padded with whitespace"),
            ),
            (
                "",
                &format!(r#""appArmorProfile":{{"type":"Localhost","localhostProfile":"{long}"}}"#),
                "",
                format!("{C}.localhostProfile: must have at most 4095 bytes"),
            ),
            (
                r#""appArmorProfile":{"type":"RuntimeDefault","localhostProfile":"web"}"#,
                "",
                "",
                format!("{P}.localhostProfile: can only be set when AppArmor type is Localhost"),
            ),
            (
                "",
                "",
                &format!(r#""{KEY}c":"runtime/default""#),
                format!(r#"metadata.annotations[{KEY}c]: "c": container not found"#),
            ),
            (
                "",
                "",
                &format!(r#""{KEY}b":"RuntimeDefault""#),
                format!(r#"metadata.annotations[{KEY}b]: invalid AppArmor profile name: "RuntimeDefault""#),
            ),
            (
                "",
                r#""appArmorProfile":{"type":"RuntimeDefault"}"#,
                &format!(r#""{KEY}b":"unconfined""#),
                format!("{C}.type: apparmor type in annotation and field must match"),
            ),
            (
                r#""appArmorProfile":{"type":"Unconfined"}"#,
                "",
                &format!(r#""{KEY}a":"runtime/default""#),
                "spec.initContainers[0].securityContext.appArmorProfile.type: apparmor type in annotation and field must match".into(),
            ),
            (
                "",
                r#""appArmorProfile":{"type":"Localhost","localhostProfile":"web"}"#,
                &format!(r#""{KEY}b":"runtime/default""#),
                format!("{C}.type: apparmor type in annotation and field must match"),
            ),
            (
                "",
                r#""appArmorProfile":{"type":"Localhost","localhostProfile":"web"}"#,
                &format!(r#""{KEY}b":"localhost/db""#),
                format!("{C}.localhostProfile: apparmor profile in annotation and field must match"),
            ),
        ] {
            assert_eq!(check(&pod(psc, csc, ann)), vec![want], "{psc} {csc} {ann}");
        }
    }
}
