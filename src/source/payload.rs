//! One payload (a manifest file's bytes, or the URL's body, with its signature) and the one way
//! it becomes pods and objects, [`Intake::open`]: the signature and its node binding are
//! checked before a byte is parsed or decrypted, a `.age` file is decrypted in memory, then
//! the intake pipeline runs (`objects::load`). The sources open what they read with it, and so
//! do their kept copies, the URL's cache and the rollback stage's records whenever they are
//! loaded again, under the trust settings of the moment: nothing comes back unverified.
//! [`claim`] is what a payload asks of anti-rollback: its items and its version.

use crate::age::Identity;
use crate::objects::{self, Manifests};
use crate::pod::{Finding, ManifestError, Origin, Policy, Shape};
use crate::trust::{Claim, Trust, Verified};
use std::sync::Arc;

/// What one manifest file or one URL answer held, as it was read (an `.age` file encrypted).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Payload {
    pub origin: Origin,
    pub bytes: Vec<u8>,
    /// Its signature file's bytes (`<file>.minisig`, `<url>.minisig`), when there is one.
    pub signature: Option<Vec<u8>>,
}

impl Payload {
    /// How errors name it: the file, or the URL without credentials or query values.
    pub fn shown(&self) -> String {
        match &self.origin {
            Origin::File(p) => p.display().to_string(),
            Origin::Url(u) => super::fetch::redact_url(u),
            Origin::Api => Origin::Api.to_string(),
        }
    }

    /// Whether it holds nothing but white space (from the URL: no pods, kubelet's rule).
    pub fn blank(&self) -> bool {
        self.bytes.iter().all(u8::is_ascii_whitespace)
    }

    /// Whether it is an age-encrypted file (decrypted in memory, never kept in plain text).
    pub fn encrypted(&self) -> bool {
        matches!(&self.origin, Origin::File(p) if p.to_string_lossy().ends_with(crate::age::SUFFIX))
    }

    /// Its signature's name in errors: `web.yaml.minisig`, or the signature's URL.
    fn signature_shown(&self) -> String {
        match &self.origin {
            Origin::File(p) => {
                let name = p.file_name().unwrap_or_default().to_string_lossy();
                format!("{name}{}", crate::trust::SIGNATURE_SUFFIX)
            }
            Origin::Url(_) | Origin::Api => super::fetch::signature_url(&self.shown()),
        }
    }
}

/// How payloads are opened: the signatures trusted, the decryption identity, the node (which
/// names pods and may be named by a signature) and how strictly manifests are read.
#[derive(Clone, Debug, Default)]
pub struct Intake {
    pub trust: Option<Trust>,
    pub key: Option<Arc<Identity>>,
    pub node: String,
    pub policy: Policy,
}

/// A payload opened: its pods, objects and warnings, and what its signature says.
#[derive(Clone, Debug)]
pub struct Opened {
    pub manifests: Manifests,
    pub signed: Option<Verified>,
}

impl Intake {
    /// The payload's pods and objects, or why it may not be used. A file holds one Pod,
    /// ConfigMap or Secret; the URL a Pod, PodList or List, and an empty (or whitespace) body
    /// means none, once its signature checks out.
    pub fn open(&self, p: &Payload) -> Result<Opened, ManifestError> {
        let fail = |path: &str, message: String| ManifestError {
            origin: p.shown(),
            problems: vec![Finding::new(path, message)],
        };
        let signed = match &self.trust {
            Some(t) => t.check(&p.bytes, p.signature.as_deref(), &p.signature_shown(), &self.node).map_err(|e| {
                let source = p.origin.source_name();
                crate::metrics::add(&crate::metrics::SIGNATURE_REFUSALS, &[("source", source)], 1.0);
                fail("signature", e)
            })?,
            None => None,
        };
        let plain;
        let bytes = if p.encrypted() {
            let key = self
                .key
                .as_ref()
                .ok_or_else(|| fail("", "encrypted (age), and no decryptionKeyFile is configured".into()))?;
            plain = key.decrypt(&p.bytes).map_err(|e| fail("", format!("cannot decrypt: {e}")))?;
            &plain[..]
        } else {
            &p.bytes[..]
        };
        let shape = match p.origin {
            Origin::File(_) => Shape::SinglePod,
            // A URL's body is never decrypted: `bytes` are the payload's own.
            Origin::Url(_) if p.blank() => {
                return Ok(Opened { manifests: Manifests::default(), signed });
            }
            Origin::Url(_) | Origin::Api => Shape::PodOrList,
        };
        match objects::load(bytes, shape, &p.origin, &self.node, self.policy) {
            Ok(mut manifests) => {
                // The pod carries where it came from: unprivileged views redact it.
                if p.encrypted() {
                    for sp in &mut manifests.pods {
                        Arc::make_mut(&mut sp.pod).from_encrypted_file = true;
                    }
                }
                Ok(Opened { manifests, signed })
            }
            Err(e) => Err(ManifestError { origin: p.shown(), ..e }),
        }
    }
}

/// What `opened` asks of anti-rollback: every item it defines (`pod ns/name`, `configmap
/// ns/name`, `secret ns/name`, and `extra`) at its signed version.
pub fn claim(opened: &Opened, extra: Option<String>) -> Claim {
    let m = &opened.manifests;
    let pods = m.pods.iter().map(|sp| format!("pod {}", sp.pod.key()));
    let objects = m.objects.iter().map(|o| format!("{} {}", o.kind.resource(), o.key()));
    Claim { items: pods.chain(objects).chain(extra).collect(), version: opened.signed.as_ref().and_then(|v| v.version) }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::trust::{test_key, Version};

    const POD: &[u8] =
        b"apiVersion: v1\nkind: Pod\nmetadata: {name: web}\nspec:\n  containers: [{name: c, image: x:1}]\n";

    fn intake(require: bool) -> Intake {
        let trust = Trust { keys: vec![test_key::key(1)], require };
        Intake { trust: Some(trust), node: "gw-1".into(), ..Default::default() }
    }

    fn url(bytes: &[u8], signature: Option<Vec<u8>>) -> Payload {
        Payload { origin: Origin::Url("https://u:pw@h/pods?t=s3cret".into()), bytes: bytes.to_vec(), signature }
    }

    #[test]
    fn a_url_body_is_verified_before_it_is_read_even_when_empty() {
        // An unsigned empty body does not remove anything under `require`...
        let e = intake(true).open(&url(b"\n", None)).unwrap_err();
        assert_eq!(e.problems[0].path, "signature");
        assert!(e.problems[0].message.contains("https://<redacted>@h/pods.minisig?<redacted>"), "{e}");
        assert!(!e.to_string().contains("s3cret"), "{e}");
        // ...a signed one does, and says its version.
        let signed = intake(true).open(&url(b"\n", Some(test_key::sign(1, b"\n", "serial=4")))).unwrap();
        assert!(signed.manifests.pods.is_empty());
        assert_eq!(claim(&signed, Some("payload u".into())).version, Some(Version::serial(4)));
        // Junk that is not signed is never parsed: the error is the signature's, not YAML's.
        let e = intake(true).open(&url(b"{{{ not yaml", None)).unwrap_err();
        assert_eq!(e.problems[0].path, "signature");
        // Without trust, the kubelet rule: empty is no pods.
        assert!(Intake::default().open(&url(b"  ", None)).unwrap().manifests.pods.is_empty());
    }

    #[test]
    fn a_claim_names_every_item_of_the_payload() {
        let list = b"apiVersion: v1\nkind: List\nitems:\n- {apiVersion: v1, kind: Pod, metadata: {name: web}, spec: {containers: [{name: c, image: x:1}]}}\n- {apiVersion: v1, kind: Secret, metadata: {name: db}, stringData: {p: x}}\n- {apiVersion: v1, kind: ConfigMap, metadata: {name: cfg, namespace: k}, data: {a: b}}\n";
        let opened = intake(true).open(&url(list, Some(test_key::sign(1, list, "serial=9 node=gw-1")))).unwrap();
        let c = claim(&opened, Some("payload u".into()));
        assert_eq!(c.items, ["pod default/web-gw-1", "secret default/db", "configmap k/cfg", "payload u"]);
        assert_eq!(c.version, Some(Version::serial(9)));
        // Signed for another box: refused whole.
        let other = intake(true).open(&url(list, Some(test_key::sign(1, list, "serial=9 node=gw-2"))));
        assert!(other.unwrap_err().to_string().contains("signed for node gw-2, not for this node (gw-1)"));
    }

    #[test]
    fn a_file_names_its_signature_beside_it() {
        let p = Payload { origin: Origin::File("/m/web.yaml".into()), bytes: POD.to_vec(), signature: None };
        let e = intake(true).open(&p).unwrap_err();
        assert_eq!(e.origin, "/m/web.yaml");
        assert_eq!(e.problems[0].message, "unsigned: no web.yaml.minisig, and manifestTrust requires a signature");
        let ok = Payload { signature: Some(test_key::sign(1, POD, "timestamp:1795459492")), ..p };
        let opened = intake(true).open(&ok).unwrap();
        assert_eq!(opened.manifests.pods[0].pod.metadata.name, "web-gw-1");
        assert_eq!(claim(&opened, None).version, Some(Version::timestamp(1795459492)));
    }
}
