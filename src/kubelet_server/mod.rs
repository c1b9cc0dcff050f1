//! kubelet's HTTPS server (`:10250`), through which the API server, metrics-server and
//! kubectl reach a node: logs, exec, attach, port-forward, stats and resource metrics, each
//! request authenticated (client certificate, bearer token by TokenReview, anonymous only when
//! enabled) and authorized (SubjectAccessReview of `nodes/<subresource>`, or AlwaysAllow) with
//! kubelet's rules and answers. `shared/reference/kubelet-server.md` holds kubelet's behaviour.
//!
//! Built so far, each piece pure or self-contained and tested; the listener that puts them
//! together comes next (issue 28):
//! - `authz`: a request's attributes (verb from the method, subresource from the path; the
//!   streaming paths always `create`), and kubelet's 403 and 500 answers;
//! - `reviews`: the TokenReview and SubjectAccessReview bodies and replies;
//! - `cache`: the answers kept for their TTLs, bounded, tokens keyed by digest;
//! - `cert`: the self-signed serving certificate, made again when the node's names change;
//! - `peer`: the user and groups a verified client certificate names;
//! - `auth`: one request's authentication and authorization, with kubelet's chain, caches
//!   and answers, asking the API server through a `Reviewer`.

pub mod auth;
pub mod authz;
pub mod cache;
pub mod cert;
pub mod peer;
pub mod reviews;
