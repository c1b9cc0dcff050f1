//! The two questions the kubelet server asks the API server, as kubelet's webhook
//! authenticator and authorizer ask them: a TokenReview ("who holds this bearer token?") and a
//! SubjectAccessReview ("may this user do this to `nodes/<name>`?"). Pure: request bodies
//! out, replies in (parsed under the shared budget); the caller sends them over the mirror's
//! connection and caches the answers (`cache`).

use super::authz::Attributes;
use super::{Error, ErrorKind as Kind};
use serde::Deserialize;
use serde_json::{json, Value};
use std::collections::BTreeMap;

pub const TOKEN_REVIEWS: &str = "/apis/authentication.k8s.io/v1/tokenreviews";
pub const ACCESS_REVIEWS: &str = "/apis/authorization.k8s.io/v1/subjectaccessreviews";

/// Who made a request.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, Deserialize)]
#[serde(default)]
pub struct User {
    #[serde(rename = "username")]
    pub name: String,
    pub uid: String,
    pub groups: Vec<String>,
    pub extra: BTreeMap<String, Vec<String>>,
}

impl User {
    /// The user kubelet gives a request with no credentials when anonymous access is on.
    pub fn anonymous() -> User {
        User { name: "system:anonymous".into(), groups: vec!["system:unauthenticated".into()], ..Default::default() }
    }
}

/// The TokenReview that asks who holds `token`.
pub fn token_review(token: &str) -> Value {
    json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview", "spec": {"token": token}})
}

/// The user a TokenReview reply names, `None` when the token is not authenticated.
pub fn token_review_result(body: &[u8]) -> Result<Option<User>, Error> {
    #[derive(Deserialize, Default)]
    #[serde(default)]
    struct Status {
        authenticated: bool,
        user: User,
    }
    #[derive(Deserialize)]
    struct Reply {
        #[serde(default)]
        status: Status,
    }
    let reply: Reply = crate::parse::json_as(body)
        .map_err(|e| Error::from(Kind::Reply { review: "TokenReview", why: e.to_string() }))?;
    Ok(reply.status.authenticated.then_some(reply.status.user).filter(|u| !u.name.is_empty()))
}

/// The SubjectAccessReview that asks whether `user` may do `a` to this node.
pub fn access_review(user: &User, a: &Attributes, node: &str) -> Value {
    json!({
        "apiVersion": "authorization.k8s.io/v1",
        "kind": "SubjectAccessReview",
        "spec": {
            "user": user.name,
            "uid": user.uid,
            "groups": user.groups,
            "extra": user.extra,
            "resourceAttributes": {
                "verb": a.verb,
                "group": "",
                "version": "v1",
                "resource": "nodes",
                "subresource": a.subresource,
                "name": node,
                "namespace": "",
            },
        },
    })
}

/// Whether a SubjectAccessReview reply allows (an explicit `denied` wins).
pub fn access_review_result(body: &[u8]) -> Result<bool, Error> {
    #[derive(Deserialize, Default)]
    #[serde(default)]
    struct Status {
        allowed: bool,
        denied: bool,
    }
    #[derive(Deserialize)]
    struct Reply {
        #[serde(default)]
        status: Status,
    }
    let reply: Reply = crate::parse::json_as(body)
        .map_err(|e| Error::from(Kind::Reply { review: "SubjectAccessReview", why: e.to_string() }))?;
    Ok(reply.status.allowed && !reply.status.denied)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_token_review_names_the_user_or_nobody() {
        assert_eq!(token_review("t0k")["spec"]["token"], "t0k");
        let yes = br#"{"status":{"authenticated":true,"user":{"username":"system:serviceaccount:kube-system:metrics-server","uid":"42","groups":["system:serviceaccounts"],"extra":{"authentication.kubernetes.io/pod-name":["ms-1"]}}}}"#;
        let user = token_review_result(yes).unwrap().unwrap();
        assert_eq!(user.name, "system:serviceaccount:kube-system:metrics-server");
        assert_eq!((user.uid.as_str(), user.groups.len(), user.extra.len()), ("42", 1, 1));
        for no in [
            &br#"{"status":{"authenticated":false,"error":"token expired"}}"#[..],
            br#"{"status":{}}"#,
            br#"{"kind":"TokenReview"}"#,
            br#"{"status":{"authenticated":true,"user":{}}}"#,
        ] {
            assert_eq!(token_review_result(no).unwrap(), None, "{}", String::from_utf8_lossy(no));
        }
        assert!(token_review_result(b"<html>").unwrap_err().to_string().starts_with("TokenReview reply:"));
    }

    #[test]
    fn an_access_review_carries_the_user_and_the_node() {
        let user = User { name: "bob".into(), groups: vec!["ops".into()], ..Default::default() };
        let a = Attributes { verb: "create", subresource: "proxy" };
        let r = access_review(&user, &a, "gw-1");
        assert_eq!(r["spec"]["user"], "bob");
        assert_eq!(r["spec"]["groups"][0], "ops");
        let ra = &r["spec"]["resourceAttributes"];
        assert_eq!(
            (&ra["verb"], &ra["resource"], &ra["subresource"], &ra["name"], &ra["version"]),
            (&json!("create"), &json!("nodes"), &json!("proxy"), &json!("gw-1"), &json!("v1"))
        );
        assert!(access_review_result(br#"{"status":{"allowed":true}}"#).unwrap());
        assert!(!access_review_result(br#"{"status":{"allowed":true,"denied":true}}"#).unwrap());
        assert!(!access_review_result(br#"{"status":{"allowed":false,"reason":"no RBAC"}}"#).unwrap());
        assert!(!access_review_result(b"{}").unwrap());
        assert!(access_review_result(b"[").is_err());
    }
}
