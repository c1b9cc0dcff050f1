//! The kubelet server's memory of the API server's answers (kubelet's webhook caches): a
//! TokenReview is kept for `authentication.webhook.cacheTTL`, a SubjectAccessReview allow for
//! `authorization.webhook.cacheAuthorizedTTL` and a denial for `cacheUnauthorizedTTL`. Pure:
//! the caller passes the time. Bounded: a caller sending a new token each time cannot grow it
//! past [`MAX_ENTRIES`]; expired entries go first, then the oldest.
//!
//! Tokens are never keys: the caller keys by [`token_key`], a SHA-256 of the token, so the
//! cache holds nothing a memory dump could replay.

use std::collections::HashMap;
use std::hash::Hash;
use std::time::{Duration, Instant};

/// Entries one cache holds at most.
pub const MAX_ENTRIES: usize = 4096;

/// Answers by key until each expires.
pub struct Cache<K, V> {
    entries: HashMap<K, (V, Instant)>,
}

impl<K: Eq + Hash + Clone, V: Clone> Default for Cache<K, V> {
    fn default() -> Self {
        Cache { entries: HashMap::new() }
    }
}

impl<K: Eq + Hash + Clone, V: Clone> Cache<K, V> {
    /// The answer for `key` if it has not expired at `now`.
    pub fn get(&self, key: &K, now: Instant) -> Option<V> {
        self.entries.get(key).filter(|(_, until)| now < *until).map(|(v, _)| v.clone())
    }

    /// Keeps `value` for `ttl` from `now` (a zero TTL keeps nothing, as kubelet's).
    pub fn put(&mut self, key: K, value: V, ttl: Duration, now: Instant) {
        if ttl.is_zero() {
            return;
        }
        if self.entries.len() >= MAX_ENTRIES && !self.entries.contains_key(&key) {
            self.entries.retain(|_, (_, until)| now < *until);
            if self.entries.len() >= MAX_ENTRIES {
                let oldest = self.entries.iter().min_by_key(|(_, (_, until))| *until).map(|(k, _)| k.clone());
                if let Some(k) = oldest {
                    self.entries.remove(&k);
                }
            }
        }
        let until = now.checked_add(ttl).unwrap_or(now);
        self.entries.insert(key, (value, until));
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

/// The key a bearer token is cached under.
pub fn token_key(token: &str) -> [u8; 32] {
    let digest = ring::digest::digest(&ring::digest::SHA256, token.as_bytes());
    let mut key = [0u8; 32];
    key.copy_from_slice(digest.as_ref());
    key
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: Duration = Duration::from_secs(1);

    #[test]
    fn answers_last_their_ttl() {
        let t0 = Instant::now();
        let mut c = Cache::default();
        c.put("allow", true, 300 * S, t0);
        c.put("deny", false, 30 * S, t0);
        c.put("never", true, Duration::ZERO, t0);
        assert_eq!(c.get(&"allow", t0 + 299 * S), Some(true));
        assert_eq!(c.get(&"allow", t0 + 300 * S), None);
        assert_eq!(c.get(&"deny", t0 + 29 * S), Some(false));
        assert_eq!(c.get(&"deny", t0 + 30 * S), None);
        assert_eq!(c.get(&"never", t0), None, "a zero TTL caches nothing");
    }

    #[test]
    fn a_flood_of_keys_stays_bounded_and_keeps_the_freshest() {
        let t0 = Instant::now();
        let mut c = Cache::default();
        c.put(u64::MAX, "long-lived", 3600 * S, t0);
        for i in 0..(MAX_ENTRIES as u64 * 3) {
            c.put(i, "flood", 60 * S, t0 + Duration::from_millis(i));
        }
        assert_eq!(c.len(), MAX_ENTRIES);
        assert_eq!(c.get(&u64::MAX, t0 + S), Some("long-lived"), "the oldest expiry goes first");
        let last = MAX_ENTRIES as u64 * 3 - 1;
        assert_eq!(c.get(&last, t0 + S), Some("flood"));
        assert_eq!(c.get(&0, t0 + S), None);
    }

    #[test]
    fn tokens_are_keyed_by_their_digest() {
        let k = token_key("s3cret-token");
        assert_eq!(k, token_key("s3cret-token"));
        assert_ne!(k, token_key("s3cret-token2"));
        assert!(!k.windows(6).any(|w| w == b"s3cret"));
    }
}
