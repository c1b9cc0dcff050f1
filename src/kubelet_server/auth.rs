//! kubelet's authentication and authorization of one request (cmd/kubelet/app/auth.go): a
//! verified client certificate names the user; otherwise a bearer token is reviewed by the API
//! server (TokenReview) when the token webhook is on; otherwise the request is anonymous when
//! that is enabled, or refused 401. The user's request is then authorized: always
//! (`AlwaysAllow`) or by a SubjectAccessReview (`Webhook`). Reviews are cached for kubelet's
//! TTLs; a review that could not be made is not cached (401 for a token, 500 for access).
//!
//! The API server is reached through a [`Reviewer`] (the mirror's connection in the agent, a
//! fake in tests). Tokens are never logged, never kept: only their digest is a cache key.

use super::authz::{self, Attributes};
use super::cache::{token_key, Cache};
use super::error::Error;
use super::reviews::{self, User};
use serde_json::Value;
use std::future::Future;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Sends a review to the API server: POST `path` with `body`, the reply's body when 2xx.
pub trait Reviewer: Send + Sync {
    fn review(&self, path: &'static str, body: Value) -> impl Future<Output = Result<Vec<u8>, Error>> + Send;
}

/// kubelet's default TTLs: a TokenReview, an allow, a denial.
pub const TOKEN_TTL: Duration = Duration::from_secs(120);
pub const ALLOWED_TTL: Duration = Duration::from_secs(300);
pub const DENIED_TTL: Duration = Duration::from_secs(30);

/// `authorization.mode`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    AlwaysAllow,
    Webhook { allowed_ttl: Duration, denied_ttl: Duration },
}

/// kubelet's `authentication` and `authorization` settings.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AuthSettings {
    pub anonymous: bool,
    /// `authentication.webhook.enabled`.
    pub token_webhook: bool,
    /// `authentication.webhook.cacheTTL`.
    pub token_ttl: Duration,
    pub mode: Mode,
    /// The node's name: the `nodes/<name>` every review is about.
    pub node: String,
}

impl AuthSettings {
    /// KubeletConfiguration v1beta1's defaults.
    pub fn kubelet_defaults(node: &str) -> AuthSettings {
        AuthSettings {
            anonymous: false,
            token_webhook: true,
            token_ttl: TOKEN_TTL,
            mode: Mode::Webhook { allowed_ttl: ALLOWED_TTL, denied_ttl: DENIED_TTL },
            node: node.to_string(),
        }
    }
}

/// What a request brings to prove who sent it.
pub enum Credentials<'a> {
    /// A client certificate verified against `clientCAFile` (DER).
    Certificate(&'a [u8]),
    /// `Authorization: Bearer <token>`.
    Bearer(&'a str),
    None,
}

/// The outcome, with kubelet's answers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Decision {
    Allowed(User),
    /// 401 `Unauthorized`.
    Unauthorized,
    /// 403 with kubelet's message.
    Forbidden(String),
    /// 500 with kubelet's message (the authorizer could not be asked).
    Error(String),
}

const AUTHENTICATED: &str = "system:authenticated";

pub struct Auth<R> {
    settings: AuthSettings,
    reviewer: R,
    tokens: Mutex<Cache<[u8; 32], Option<User>>>,
    decisions: Mutex<Cache<(User, Attributes), bool>>,
}

impl<R: Reviewer> Auth<R> {
    pub fn new(settings: AuthSettings, reviewer: R) -> Auth<R> {
        Auth { settings, reviewer, tokens: Mutex::default(), decisions: Mutex::default() }
    }

    /// Authenticates and authorizes a request with these attributes.
    pub async fn check(&self, credentials: Credentials<'_>, a: &Attributes) -> Decision {
        let Some(user) = self.authenticate(credentials).await else { return Decision::Unauthorized };
        match self.authorize(&user, a).await {
            Ok(true) => Decision::Allowed(user),
            Ok(false) => Decision::Forbidden(authz::forbidden(&user.name, a)),
            Err(_) => Decision::Error(authz::authorization_error(&user.name, a)),
        }
    }

    /// The user, with `system:authenticated` among the groups of one who proved who they are
    /// (kubelet's authenticated-group adder).
    async fn authenticate(&self, credentials: Credentials<'_>) -> Option<User> {
        let mut user = self.identify(credentials).await?;
        if user != User::anonymous() && !user.groups.iter().any(|g| g == AUTHENTICATED) {
            user.groups.push(AUTHENTICATED.to_string());
        }
        Some(user)
    }

    async fn identify(&self, credentials: Credentials<'_>) -> Option<User> {
        match credentials {
            Credentials::Certificate(der) => super::peer::user(der),
            Credentials::Bearer(token) if self.settings.token_webhook && !token.is_empty() => {
                let key = token_key(token);
                if let Some(known) = crate::locks::lock(&self.tokens).get(&key, Instant::now()) {
                    return known;
                }
                let reply = self.reviewer.review(reviews::TOKEN_REVIEWS, reviews::token_review(token)).await.ok()?;
                let user = reviews::token_review_result(&reply).ok()?;
                crate::locks::lock(&self.tokens).put(key, user.clone(), self.settings.token_ttl, Instant::now());
                user
            }
            Credentials::Bearer(_) | Credentials::None => self.settings.anonymous.then(User::anonymous),
        }
    }

    async fn authorize(&self, user: &User, a: &Attributes) -> Result<bool, Error> {
        let Mode::Webhook { allowed_ttl, denied_ttl } = self.settings.mode else { return Ok(true) };
        let key = (user.clone(), a.clone());
        if let Some(known) = crate::locks::lock(&self.decisions).get(&key, Instant::now()) {
            return Ok(known);
        }
        let body = reviews::access_review(user, a, &self.settings.node);
        let allowed = reviews::access_review_result(&self.reviewer.review(reviews::ACCESS_REVIEWS, body).await?)?;
        let ttl = if allowed { allowed_ttl } else { denied_ttl };
        crate::locks::lock(&self.decisions).put(key, allowed, ttl, Instant::now());
        Ok(allowed)
    }
}

#[cfg(test)]
#[path = "auth_tests.rs"]
mod tests;
