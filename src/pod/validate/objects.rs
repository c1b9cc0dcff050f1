//! Validation of what a pod asks of local ConfigMaps and Secrets: the volume sources
//! (names, `items` keys and paths, modes in 0..=0777, projected paths unique, projected
//! sources atoll cannot provide refused by name; downwardAPI ones are `downward.rs`'s), `configMapKeyRef`/`secretKeyRef` and
//! `envFrom`. Whether the objects exist is not checked here: that is known only on the box
//! (`objects`), and reported by `atoll validate` and at container start.

use super::names::dns1123_subdomain;
use super::validator::Validator;
use crate::pod::invalid::{Invalid, Kind};
use crate::pod::paths::check_descending;
use crate::pod::types::*;
use std::collections::BTreeSet;

/// The largest file mode a volume may ask for.
pub(super) const MAX_MODE: i64 = 0o777;

/// kubelet's rule for a ConfigMap or Secret key: 1 to 253 of `[-._a-zA-Z0-9]`, not `.` or
/// `..`, not starting with `..`.
pub fn config_key(key: &str) -> Result<(), Invalid> {
    let chars = key.chars().all(|c| c.is_ascii_alphanumeric() || "-._".contains(c));
    if key.is_empty() || key.len() > 253 || !chars || key == "." || key.starts_with("..") {
        return Err(Invalid::from(Kind::ConfigKey(key.to_string())));
    }
    Ok(())
}

/// An environment variable name (kubelet's relaxed rule): printable ASCII, no '='.
pub fn env_name(name: &str) -> bool {
    !name.is_empty() && name.bytes().all(|b| (0x20..0x7f).contains(&b) && b != b'=')
}

impl Validator {
    /// A configMap, secret or projected volume at `path` (`spec.volumes[i]`).
    pub(super) fn object_volume(&mut self, path: &str, v: &Volume) {
        if let Some(c) = &v.config_map {
            let p = format!("{path}.configMap");
            self.object_name(&format!("{p}.name"), &c.name);
            self.range(&format!("{p}.defaultMode"), c.default_mode, 0, MAX_MODE);
            self.items(&p, &c.items, &mut BTreeSet::new());
        }
        if let Some(s) = &v.secret {
            let p = format!("{path}.secret");
            self.object_name(&format!("{p}.secretName"), &s.secret_name);
            self.range(&format!("{p}.defaultMode"), s.default_mode, 0, MAX_MODE);
            self.items(&p, &s.items, &mut BTreeSet::new());
        }
        if let Some(pr) = &v.projected {
            let p = format!("{path}.projected");
            self.range(&format!("{p}.defaultMode"), pr.default_mode, 0, MAX_MODE);
            // Two sources may not write the same file.
            let mut paths = BTreeSet::new();
            for (j, src) in pr.sources.iter().enumerate() {
                let sp = format!("{p}.sources[{j}]");
                let mut count = 0;
                if let Some(d) = &src.downward_api {
                    count += 1;
                    self.downward_items(&format!("{sp}.downwardAPI"), &d.items, Some(&mut paths));
                }
                if let (Some(t), true) = (&src.service_account_token, self.bound) {
                    count += 1;
                    self.token(&format!("{sp}.serviceAccountToken"), t, &mut paths);
                }
                let bundle = match self.bound {
                    true => "clusterTrustBundles are not implemented by atoll",
                    false => "static pods may not reference clustertrustbundles",
                };
                for (set, field, why) in [
                    (
                        src.service_account_token.is_some() && !self.bound,
                        "serviceAccountToken",
                        "static pods may not reference serviceaccounts",
                    ),
                    (src.cluster_trust_bundle.is_some(), "clusterTrustBundle", bundle),
                    (
                        src.pod_certificate.is_some(),
                        "podCertificate",
                        "pod certificates need an API server; not implemented by atoll",
                    ),
                ] {
                    if set {
                        count += 1;
                        self.err(format!("{sp}.{field}"), why);
                    }
                }
                for (kind, o) in [("configMap", &src.config_map), ("secret", &src.secret)] {
                    let Some(o) = o else { continue };
                    count += 1;
                    self.object_name(&format!("{sp}.{kind}.name"), &o.name);
                    if o.items.is_empty() {
                        continue; // every key, known only when the object is read
                    }
                    self.items(&format!("{sp}.{kind}"), &o.items, &mut paths);
                }
                if count != 1 {
                    self.err(&sp, "a projection must have exactly one source");
                }
            }
        }
    }

    /// `configMapKeyRef`/`secretKeyRef` of `env[i]` at `ep` (`...env[i].valueFrom`) and the
    /// container's `envFrom`, under `cp`.
    pub(super) fn env_objects(&mut self, cp: &str, c: &Container) {
        for (i, e) in c.env.iter().enumerate() {
            let Some(src) = &e.value_from else { continue };
            let ep = format!("{cp}.env[{i}].valueFrom");
            for (field, r) in [("configMapKeyRef", &src.config_map_key_ref), ("secretKeyRef", &src.secret_key_ref)] {
                let Some(r) = r else { continue };
                self.object_name(&format!("{ep}.{field}.name"), &r.name);
                if let Err(e) = config_key(&r.key) {
                    self.err(format!("{ep}.{field}.key"), e);
                }
            }
        }
        for (i, ef) in c.env_from.iter().enumerate() {
            let p = format!("{cp}.envFrom[{i}]");
            match (&ef.config_map_ref, &ef.secret_ref) {
                (Some(r), None) => self.object_name(&format!("{p}.configMapRef.name"), &r.name),
                (None, Some(r)) => self.object_name(&format!("{p}.secretRef.name"), &r.name),
                _ => self.err(&p, "must have exactly one of configMapRef and secretRef"),
            }
            if let Some(prefix) = ef.prefix.as_deref().filter(|p| !p.is_empty()) {
                if !env_name(prefix) {
                    self.err(format!("{p}.prefix"), format!("{prefix:?} must be printable ASCII without '='"));
                }
            }
        }
    }

    fn object_name(&mut self, path: &str, name: &str) {
        if let Err(e) = dns1123_subdomain(name) {
            self.err(path, format!("{name:?} {e}"));
        }
    }

    /// `items` under `p`: keys, paths (each unique in `seen`) and modes.
    /// A bound pod's `serviceAccountToken` projection at `p`: a path below the volume, unique
    /// among its sources, and the API's 10 minutes to 2^32 seconds for its lifetime.
    fn token(&mut self, p: &str, t: &serde_json::Value, seen: &mut BTreeSet<String>) {
        let path = crate::pod::references::token_path(t);
        if let Err(e) = check_descending(path) {
            self.err(format!("{p}.path"), e);
        } else if !seen.insert(path.to_string()) {
            self.err(format!("{p}.path"), format!("duplicate path {path:?}"));
        }
        if let Some(v) = t.get("expirationSeconds") {
            self.range(&format!("{p}.expirationSeconds"), Some(v.as_i64().unwrap_or(-1)), 600, 1 << 32);
        }
        if t.get("audience").is_some_and(|a| !a.is_string()) {
            self.err(format!("{p}.audience"), "must be a string");
        }
    }

    fn items(&mut self, p: &str, items: &[KeyToPath], seen: &mut BTreeSet<String>) {
        for (k, item) in items.iter().enumerate() {
            let ip = format!("{p}.items[{k}]");
            if let Err(e) = config_key(&item.key) {
                self.err(format!("{ip}.key"), e);
            }
            if let Err(e) = check_descending(&item.path) {
                self.err(format!("{ip}.path"), e);
            } else if !seen.insert(item.path.clone()) {
                self.err(format!("{ip}.path"), format!("duplicate path {:?}", item.path));
            }
            self.range(&format!("{ip}.mode"), item.mode, 0, MAX_MODE);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_follow_kubelets_rule() {
        for good in ["a", "app.yaml", ".env", "A_B-c.d"] {
            assert!(config_key(good).is_ok(), "{good:?}");
        }
        for bad in ["", ".", "..", "..data", "a/b", "a b", &"k".repeat(254)] {
            assert!(config_key(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn environment_names_are_printable_without_equals() {
        assert!(env_name("DB_PASSWORD") && env_name("my.var-1"));
        assert!(!env_name("") && !env_name("A=B") && !env_name("A\nB"));
    }
}
