//! The profile each container runs with, kubelet's admission check and the host's flag, by
//! table.
use super::*;

const KEY: &str = "container.apparmor.security.beta.kubernetes.io/";

/// A pod with init container `a` and container `b`: the pod's security context `psc`, `b`'s
/// `csc` and the annotations `ann` (JSON object bodies).
fn pod(psc: &str, csc: &str, ann: &str) -> Pod {
    let json = format!(
        r#"{{"metadata":{{"name":"p","annotations":{{{ann}}}}},"spec":{{"securityContext":{{{psc}}},
        "initContainers":[{{"name":"a","image":"x"}}],
        "containers":[{{"name":"b","image":"x","securityContext":{{{csc}}}}}]}}}}"#
    );
    serde_json::from_str(&json).unwrap_or_else(|e| panic!("{e}: {json}"))
}

fn field(t: &str) -> String {
    match t.strip_prefix("Localhost:") {
        Some(name) => format!(r#""appArmorProfile":{{"type":"Localhost","localhostProfile":"{name}"}}"#),
        None => format!(r#""appArmorProfile":{{"type":"{t}"}}"#),
    }
}

fn local(name: &str) -> Option<Profile> {
    Some(Profile::Localhost(name.into()))
}

#[test]
fn the_container_field_wins_then_the_annotation_then_the_pod_field() {
    use Profile::*;
    let ann = |c: &str, v: &str| format!(r#""{KEY}{c}":"{v}""#);
    // (pod field, b's field, annotations, a's profile, b's profile)
    for (psc, csc, annotations, want_a, want_b) in [
        (String::new(), String::new(), String::new(), None, None),
        (field("RuntimeDefault"), String::new(), String::new(), Some(RuntimeDefault), Some(RuntimeDefault)),
        (field("RuntimeDefault"), field("Unconfined"), String::new(), Some(RuntimeDefault), Some(Unconfined)),
        (field("Unconfined"), field("Localhost:web"), String::new(), Some(Unconfined), local("web")),
        (String::new(), String::new(), ann("b", "runtime/default"), None, Some(RuntimeDefault)),
        (String::new(), String::new(), ann("a", "localhost/k8s/db"), local("k8s/db"), None),
        (String::new(), String::new(), ann("b", "unconfined"), None, Some(Unconfined)),
        // The annotation before the pod's field (static pods), the container's field before both.
        (field("RuntimeDefault"), String::new(), ann("b", "unconfined"), Some(RuntimeDefault), Some(Unconfined)),
        (String::new(), field("RuntimeDefault"), ann("b", "unconfined"), None, Some(RuntimeDefault)),
        // An annotation that names no profile is passed over.
        (field("RuntimeDefault"), String::new(), ann("b", "bogus"), Some(RuntimeDefault), Some(RuntimeDefault)),
        (String::new(), String::new(), ann("b", ""), None, None),
        // A type validation refuses gives none.
        (String::new(), field("Default"), String::new(), None, None),
    ] {
        let p = pod(&psc, &csc, &annotations);
        let at = format!("{psc} {csc} {annotations}");
        assert_eq!(profile(&p, &p.spec.init_containers[0]), want_a, "a: {at}");
        assert_eq!(profile(&p, &p.spec.containers[0]), want_b, "b: {at}");
    }
}

#[test]
fn the_annotation_form_of_each_profile() {
    for (value, profile) in [
        ("runtime/default", Profile::RuntimeDefault),
        ("unconfined", Profile::Unconfined),
        ("localhost/k8s-web", Profile::Localhost("k8s-web".into())),
        ("localhost/", Profile::Localhost(String::new())),
    ] {
        assert_eq!(Profile::of_annotation(value), Some(profile.clone()));
        assert_eq!(profile.annotation(), value);
    }
    for value in ["", "RuntimeDefault", "docker-default", "localhost"] {
        assert_eq!(Profile::of_annotation(value), None, "{value}");
    }
}

#[test]
fn a_pod_asking_for_apparmor_is_refused_on_a_host_without_it() {
    let no_host = Some("Cannot enforce AppArmor: AppArmor is not enabled on the host".to_string());
    let ann = |v: &str| format!(r#""{KEY}b":"{v}""#);
    // (pod field, b's field, annotations, refusal without AppArmor)
    for (psc, csc, annotations, want) in [
        (String::new(), String::new(), String::new(), None),
        (field("RuntimeDefault"), String::new(), String::new(), no_host.clone()),
        (String::new(), field("Localhost:web"), String::new(), no_host.clone()),
        (String::new(), String::new(), ann("runtime/default"), no_host.clone()),
        (String::new(), String::new(), ann("localhost/web"), no_host.clone()),
        // Unconfined needs no AppArmor, wherever it is said.
        (field("Unconfined"), field("Unconfined"), ann("unconfined"), None),
        // kubelet asks of the pod's field itself, even when every container overrides it.
        (field("RuntimeDefault"), field("Unconfined"), String::new(), no_host.clone()),
        // Any annotation of the prefix counts, for a container of the pod or not.
        (String::new(), String::new(), format!(r#""{KEY}zz":"runtime/default""#), no_host.clone()),
        (String::new(), String::new(), r#""other/b":"runtime/default""#.into(), None),
    ] {
        let p = pod(&psc, &csc, &annotations);
        assert_eq!(refusal(&p, false), want, "{psc} {csc} {annotations}");
        assert_eq!(refusal(&p, true), None, "{psc} {csc} {annotations}");
    }
    assert_eq!(REASON, "AppArmor");
}

#[test]
fn a_localhost_profile_of_no_name_is_refused_where_apparmor_is_enabled() {
    for value in ["localhost/", "localhost/  "] {
        let p = pod("", "", &format!(r#""{KEY}a":"{value}""#));
        let want = format!("Cannot enforce AppArmor: invalid empty AppArmor profile name: {value:?}");
        assert_eq!(refusal(&p, true), Some(want));
        assert_eq!(refusal(&p, false).as_deref(), Some("Cannot enforce AppArmor: AppArmor is not enabled on the host"));
    }
}

#[test]
fn the_host_flag_is_read_as_runc_reads_it() {
    for (securityfs, parameter, want) in [
        (true, &b"Y\n"[..], true),
        (true, b"Y", false), // runc wants more than one byte
        (true, b"N\n", false),
        (true, b"", false),
        (false, b"Y\n", false),
    ] {
        assert_eq!(enabled(securityfs, parameter), want, "{securityfs} {parameter:?}");
    }
}
