//! Discovery as kube-apiserver serves it to clients that do not ask for the aggregated form
//! (kubectl falls back to these): `/api`, `/apis`, and the resource lists of `v1` and
//! `coordination.k8s.io/v1` and `certificates.k8s.io/v1`, naming only what this server serves.

use serde_json::{json, Value};

fn resource(name: &str, kind: &str, namespaced: bool, verbs: &[&str]) -> Value {
    json!({"name": name, "singularName": "", "namespaced": namespaced, "kind": kind, "verbs": verbs})
}

/// The discovery document at `path` (without its query), if it is one.
pub(super) fn document(path: &str, addr: std::net::SocketAddr) -> Option<Value> {
    let all = ["create", "delete", "get", "list", "patch", "update", "watch"];
    let group = json!({"groupVersion": "coordination.k8s.io/v1", "version": "v1"});
    let certs = json!({"groupVersion": "certificates.k8s.io/v1", "version": "v1"});
    Some(match path.trim_end_matches('/') {
        "/api" => json!({
            "kind": "APIVersions", "versions": ["v1"],
            "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": addr.to_string()}]
        }),
        "/apis" => json!({
            "kind": "APIGroupList", "apiVersion": "v1",
            "groups": [
                {"name": "coordination.k8s.io", "versions": [group], "preferredVersion": group},
                {"name": "certificates.k8s.io", "versions": [certs], "preferredVersion": certs},
            ]
        }),
        "/api/v1" => json!({
            "kind": "APIResourceList", "groupVersion": "v1",
            "resources": [
                resource("pods", "Pod", true, &all),
                resource("pods/status", "Pod", true, &["get", "patch", "update"]),
                resource("pods/log", "Pod", true, &["get"]),
                resource("pods/exec", "PodExecOptions", true, &["create", "get"]),
                resource("pods/attach", "PodAttachOptions", true, &["create", "get"]),
                resource("pods/portforward", "PodPortForwardOptions", true, &["create", "get"]),
                resource("nodes", "Node", false, &all),
                resource("nodes/status", "Node", false, &["get", "patch", "update"]),
                resource("nodes/proxy", "NodeProxyOptions", false, &["create", "delete", "get", "patch", "update"]),
                resource("configmaps", "ConfigMap", true, &all),
                resource("secrets", "Secret", true, &all),
                resource("serviceaccounts", "ServiceAccount", true, &all),
                resource("serviceaccounts/token", "TokenRequest", true, &["create"]),
            ]
        }),
        "/apis/coordination.k8s.io/v1" => json!({
            "kind": "APIResourceList", "groupVersion": "coordination.k8s.io/v1",
            "resources": [resource("leases", "Lease", true, &all)]
        }),
        "/apis/certificates.k8s.io/v1" => json!({
            "kind": "APIResourceList", "groupVersion": "certificates.k8s.io/v1",
            "resources": [
                {"name": "certificatesigningrequests", "singularName": "certificatesigningrequest", "namespaced": false,
                 "kind": "CertificateSigningRequest", "verbs": all, "shortNames": ["csr"]},
                resource("certificatesigningrequests/approval", "CertificateSigningRequest", false, &["get", "patch", "update"]),
                resource("certificatesigningrequests/status", "CertificateSigningRequest", false, &["get", "patch", "update"]),
            ]
        }),
        _ => return None,
    })
}
