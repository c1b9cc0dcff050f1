//! Who a verified client certificate names, as kubelet's x509 authenticator reads it: the
//! subject's common name is the user, each organization a group. The certificate has been
//! verified against `clientCAFile` before it gets here, but its bytes are still read with
//! every length checked (`tls::der_element`): a certificate this cannot read names nobody.

use super::reviews::User;
use crate::tls::der_element as element;

/// The user a DER certificate's subject names, `None` when it has no common name or cannot be
/// read.
pub fn user(cert: &[u8]) -> Option<User> {
    let (tag, certificate, _) = element(cert)?;
    let (_, tbs, _) = expect(tag, 0x30, certificate).and_then(element)?;
    let mut rest = tbs;
    // version [0] (optional), serialNumber, signature, issuer, validity, then subject.
    let (first, _, after) = element(rest)?;
    if first == 0xa0 {
        rest = after;
    }
    for _ in 0..4 {
        rest = element(rest)?.2;
    }
    let (tag, subject, _) = element(rest)?;
    let subject = expect(tag, 0x30, subject)?;
    let (mut name, mut groups) = (None, Vec::new());
    let mut sets = subject;
    while !sets.is_empty() {
        let (tag, set, next) = element(sets)?;
        let mut attrs = expect(tag, 0x31, set)?;
        while !attrs.is_empty() {
            let (tag, attr, more) = element(attrs)?;
            let (tag, oid, value) = expect(tag, 0x30, attr).and_then(element)?;
            let oid = expect(tag, 0x06, oid)?;
            let (vtag, text, _) = element(value)?;
            // UTF8String, PrintableString, IA5String, T61String as Latin-1 is not accepted.
            let text = matches!(vtag, 0x0c | 0x13 | 0x16).then(|| std::str::from_utf8(text).ok()).flatten()?;
            match oid {
                [0x55, 0x04, 0x03] => name = Some(text.to_string()),
                [0x55, 0x04, 0x0a] => groups.push(text.to_string()),
                _ => {}
            }
            attrs = more;
        }
        sets = next;
    }
    let name = name.filter(|n| !n.is_empty())?;
    Some(User { name, groups, ..Default::default() })
}

fn expect(tag: u8, want: u8, content: &[u8]) -> Option<&[u8]> {
    (tag == want).then_some(content)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A client certificate as kubeadm makes one for the API server, by openssl's rules.
    fn openssl_cert(subject: &str) -> Option<Vec<u8>> {
        let dir = std::env::temp_dir().join(format!("atoll-peer-{}-{}", std::process::id(), subject.len()));
        std::fs::create_dir_all(&dir).ok()?;
        let status = std::process::Command::new("openssl")
            .args(["req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-days", "1"])
            .args(["-subj", subject, "-outform", "DER", "-keyout"])
            .arg(dir.join("key.pem"))
            .arg("-out")
            .arg(dir.join("cert.der"))
            .stderr(std::process::Stdio::null())
            .status()
            .ok()?;
        let der = status.success().then(|| std::fs::read(dir.join("cert.der")).ok()).flatten();
        let _ = std::fs::remove_dir_all(&dir);
        der
    }

    #[test]
    fn the_common_name_is_the_user_and_each_organization_a_group() {
        let Some(der) = openssl_cert("/O=system:masters/O=ops/CN=kube-apiserver-kubelet-client") else {
            panic!("openssl is needed (tests/run.sh installs it)");
        };
        let u = user(&der).expect("a user");
        assert_eq!(u.name, "kube-apiserver-kubelet-client");
        assert_eq!(u.groups, ["system:masters", "ops"]);
        let no_cn = openssl_cert("/O=ops").unwrap();
        assert_eq!(user(&no_cn), None, "no common name: nobody");
    }

    #[test]
    fn the_self_made_serving_certificate_reads_too() {
        let s = super::super::cert::make(&["gw-1".to_string()], std::time::SystemTime::now()).unwrap();
        let u = user(&s.cert).unwrap();
        assert!(u.name.starts_with("gw-1@"), "{u:?}");
    }

    /// Any cut, any flipped length: nobody, never a panic.
    #[test]
    fn damaged_certificates_name_nobody() {
        let der = super::super::cert::make(&["gw-1".to_string()], std::time::SystemTime::now()).unwrap().cert;
        for end in 0..der.len() {
            let _ = user(&der[..end]);
        }
        for i in 0..der.len() {
            let mut bad = der.clone();
            bad[i] ^= 0xff;
            let _ = user(&bad);
        }
        assert_eq!(user(&[]), None);
        assert_eq!(user(&[0x30, 0x84, 0xff, 0xff, 0xff, 0xff]), None);
    }
}
