//! What a request to the kubelet server asks to do, in the API server's terms, and the answers
//! kubelet gives when it may not (pkg/kubelet/server/auth.go): the verb comes from the HTTP
//! method, the resource is always `nodes` named after this node, the subresource from the
//! path. One rule is stricter than kubelet's: the streaming paths (`/exec`, `/attach`, `/run`,
//! `/portForward`) ask for `create` whatever the method, so a WebSocket GET allowed by
//! `get nodes/proxy` cannot open a shell (kubernetes/kubernetes#136550 proposed the same).

/// The resource attributes of one request, as a SubjectAccessReview carries them.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Attributes {
    /// `get`, `create`, `update`, `patch`, `delete`, or empty for another method (which no
    /// authorizer allows).
    pub verb: &'static str,
    /// `stats`, `metrics`, `log`, `checkpoint` or `proxy`.
    pub subresource: &'static str,
}

/// Paths whose requests start a session in a container: always `create`.
const STREAMING: [&str; 4] = ["/exec", "/attach", "/run", "/portForward"];

/// The attributes of `method path`, or `None` when the path is not in normal form (empty
/// segments, `.` or `..`, no leading `/`): such a request is refused before it is authorized,
/// so the path that was authorized is always the path that is served.
pub fn attributes(method: &str, path: &str) -> Option<Attributes> {
    if !normal(path) {
        return None;
    }
    let verb = if STREAMING.iter().any(|p| under(path, p)) {
        "create"
    } else {
        match method {
            "POST" => "create",
            "GET" | "HEAD" => "get",
            "PUT" => "update",
            "PATCH" => "patch",
            "DELETE" => "delete",
            _ => "",
        }
    };
    let subresource = [("/stats", "stats"), ("/metrics", "metrics"), ("/logs", "log"), ("/checkpoint", "checkpoint")]
        .iter()
        .find(|(prefix, _)| under(path, prefix))
        .map_or("proxy", |(_, s)| s);
    Some(Attributes { verb, subresource })
}

/// kubelet's `isSubpath`: `path` is `prefix` or below it.
fn under(path: &str, prefix: &str) -> bool {
    path.strip_prefix(prefix).is_some_and(|rest| rest.is_empty() || rest.starts_with('/'))
}

/// An absolute path without empty, `.` or `..` segments (a trailing `/` is allowed).
fn normal(path: &str) -> bool {
    let Some(rest) = path.strip_prefix('/') else { return false };
    let rest = rest.strip_suffix('/').unwrap_or(rest);
    rest.is_empty() || rest.split('/').all(|s| !s.is_empty() && s != "." && s != "..")
}

/// The body of kubelet's 403.
pub fn forbidden(user: &str, a: &Attributes) -> String {
    format!("Forbidden (user={user}, verb={}, resource=nodes, subresource={})", a.verb, a.subresource)
}

/// The body of kubelet's 500 when the authorizer could not be asked.
pub fn authorization_error(user: &str, a: &Attributes) -> String {
    format!("Authorization error (user={user}, verb={}, resource=nodes, subresource={})", a.verb, a.subresource)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn attrs(method: &str, path: &str) -> (&'static str, &'static str) {
        let a = attributes(method, path).unwrap_or_else(|| panic!("{method} {path} refused"));
        (a.verb, a.subresource)
    }

    #[test]
    fn verbs_come_from_the_method_and_subresources_from_the_path() {
        for (method, path, want) in [
            ("GET", "/containerLogs/ns/p/c", ("get", "proxy")),
            ("HEAD", "/pods", ("get", "proxy")),
            ("GET", "/healthz", ("get", "proxy")),
            ("GET", "/stats/summary", ("get", "stats")),
            ("POST", "/stats/summary", ("create", "stats")),
            ("GET", "/stats", ("get", "stats")),
            ("GET", "/statsx", ("get", "proxy")),
            ("GET", "/metrics", ("get", "metrics")),
            ("GET", "/metrics/resource", ("get", "metrics")),
            ("GET", "/metrics/cadvisor", ("get", "metrics")),
            ("GET", "/metrics/probes", ("get", "metrics")),
            ("GET", "/metrics/slis", ("get", "metrics")),
            ("GET", "/metricsfoo", ("get", "proxy")),
            ("GET", "/logs/syslog", ("get", "log")),
            ("POST", "/checkpoint/ns/p/c", ("create", "checkpoint")),
            ("PUT", "/configz", ("update", "proxy")),
            ("PATCH", "/configz", ("patch", "proxy")),
            ("DELETE", "/pods", ("delete", "proxy")),
            ("OPTIONS", "/pods", ("", "proxy")),
        ] {
            assert_eq!(attrs(method, path), want, "{method} {path}");
        }
    }

    /// A WebSocket upgrade is a GET: `get nodes/proxy` must not be enough to exec.
    #[test]
    fn streaming_paths_are_create_whatever_the_method() {
        for path in ["/exec/ns/p/c", "/exec/ns/p/uid/c", "/attach/ns/p/c", "/run/ns/p/c", "/portForward/ns/p", "/exec"]
        {
            for method in ["GET", "POST", "HEAD", "PUT", "OPTIONS"] {
                assert_eq!(attrs(method, path), ("create", "proxy"), "{method} {path}");
            }
        }
        assert_eq!(attrs("GET", "/executor"), ("get", "proxy"), "only the path itself and below");
    }

    #[test]
    fn paths_not_in_normal_form_are_refused() {
        for path in ["", "stats", "//exec/ns/p/c", "/stats/../exec/ns/p/c", "/./exec", "/a//b", "/stats/.."] {
            assert_eq!(attributes("GET", path), None, "{path:?}");
        }
        assert!(attributes("GET", "/").is_some());
        assert!(attributes("GET", "/pods/").is_some());
    }

    #[test]
    fn answers_are_kubelets() {
        let a = attributes("GET", "/exec/ns/p/c").unwrap();
        assert_eq!(forbidden("bob", &a), "Forbidden (user=bob, verb=create, resource=nodes, subresource=proxy)");
        assert_eq!(
            authorization_error("bob", &a),
            "Authorization error (user=bob, verb=create, resource=nodes, subresource=proxy)"
        );
    }
}
