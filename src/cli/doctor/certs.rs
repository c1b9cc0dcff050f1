//! `atoll doctor`'s certificate checks: when the node's client certificate (the one
//! `--kubeconfig` presents) and the kubelet server's (its files, or the one issued through a
//! CSR with `serverTLSBootstrap`) expire, and whether something renews them. [`judge`] is the
//! pure verdict: failed once expired with nothing to replace it, a warning at 80 % of the
//! lifetime when nothing renews it, and a warning past 90 % when rotation should have renewed
//! it (it renews between 70 and 90 %) and has not.

use super::check::{bad, ok, Check, Level};
use crate::config::Settings;
use std::time::SystemTime;

/// What keeps a certificate in date.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Renewal {
    /// Rotation through CSRs renews it at 70-90 % of its lifetime.
    pub rotates: bool,
    /// What replaces it once expired, when something does (TLS bootstrap; a new CSR).
    pub after_expiry: Option<&'static str>,
}

/// The verdict on certificate `what` (`from`, `until`) at `now`.
pub fn judge(what: &'static str, (from, until): (SystemTime, SystemTime), now: SystemTime, renewal: Renewal) -> Check {
    let end = crate::rfc3339::format_seconds(until);
    let total = until.duration_since(from).unwrap_or_default().as_secs_f64();
    let spent = now.duration_since(from).unwrap_or_default().as_secs_f64();
    let share = if total > 0.0 { spent / total } else { 1.0 };
    let days = until.duration_since(now).unwrap_or_default().as_secs() / 86_400;
    if now > until {
        return match renewal.after_expiry {
            Some(then) => bad(Level::Warn, what, format!("expired at {end}"), then),
            None => bad(
                Level::Fail,
                what,
                format!("expired at {end}, and nothing replaces it"),
                "issue a new one (kubeadm certs renew, or a CSR), or give --bootstrap-kubeconfig",
            ),
        };
    }
    if now < from {
        let start = crate::rfc3339::format_seconds(from);
        return bad(Level::Warn, what, format!("not valid before {start}"), "check the clock (timedatectl)");
    }
    if renewal.rotates && share > 0.9 {
        return bad(
            Level::Warn,
            what,
            format!("expires at {end} ({days} days left); rotation renews at 70-90 % of its lifetime and has not"),
            "see atoll's log, and the *_expiration_renew_errors counters on /metrics",
        );
    }
    if !renewal.rotates && share >= 0.8 {
        return bad(
            Level::Warn,
            what,
            format!("expires at {end} ({days} days left), past 80 % of its lifetime, and nothing renews it"),
            "turn on rotateCertificates (client) or serverTLSBootstrap (serving), or renew it before then",
        );
    }
    ok(what, format!("valid until {end} ({days} days left)"))
}

/// The client and serving certificates' checks (none when atoll does not mirror).
pub fn certificates(s: &Settings, now: SystemTime) -> Vec<Check> {
    let m = &s.mirror;
    let Some(kubeconfig) = &m.kubeconfig else { return Vec::new() };
    let mut out = Vec::new();
    let client = "client certificate";
    let bootstrap = "atoll bootstraps a new one at start through the bootstrap kubeconfig (its token must be valid)";
    let renewal =
        Renewal { rotates: m.rotate_certificates, after_expiry: m.bootstrap_kubeconfig.as_ref().map(|_| bootstrap) };
    match crate::mirror::certs::bootstrap::leaf_validity(kubeconfig) {
        Some(validity) => out.push(judge(client, validity, now, renewal)),
        None if m.bootstrap_kubeconfig.is_some() => {
            out.push(ok(client, "none yet: atoll asks for one at start through the bootstrap kubeconfig"))
        }
        None => {} // a token, or an unusable kubeconfig (the API server check says which)
    }
    let serving = "serving certificate";
    let Some(ks) = &s.listeners.kubelet else { return out };
    let (leaf, renewal) = match &ks.tls {
        Some((cert, _)) => {
            let pem = crate::bounded::read_file(cert, 1 << 20).unwrap_or_default();
            (
                crate::tls::pem_chain(&pem).into_iter().next().map(|c| c.to_vec()),
                Renewal { rotates: false, after_expiry: None },
            )
        }
        None if m.server_tls_bootstrap => {
            let store = crate::mirror::certs::store::Store::new(&m.cert_dir, "kubelet-server");
            out.push(match store.current() {
                Ok(Some(pair)) => {
                    let again = "atoll asks for a new one at start, for an operator to approve";
                    let renewal = Renewal { rotates: true, after_expiry: Some(again) };
                    judge(serving, (pair.not_before, pair.not_after), now, renewal)
                }
                Ok(None) => ok(serving, "none issued yet: atoll asks for one through a CSR for an operator to approve"),
                Err(e) => bad(
                    Level::Warn,
                    serving,
                    e,
                    "atoll serves its own until a new one, asked for at start, is approved",
                ),
            });
            return out;
        }
        None => return out, // self-signed, made again at every start
    };
    if let Some(validity) = leaf.as_deref().and_then(crate::x509::validity) {
        out.push(judge(serving, validity, now, renewal));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    const DAY: u64 = 86_400;

    fn at(days: u64) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(days * DAY)
    }

    #[test]
    fn expiry_is_judged_by_the_share_of_the_lifetime_and_what_renews_it() {
        let off = Renewal { rotates: false, after_expiry: None };
        let rotation = Renewal { rotates: true, after_expiry: None };
        let bootstrap = Renewal { rotates: false, after_expiry: Some("bootstraps") };
        type Case = (&'static str, u64, Renewal, Level, &'static str);
        // A certificate valid from day 100 to day 200, judged on day `now`.
        let cases: &[Case] = &[
            ("young, no renewal", 150, off, Level::Ok, "valid until 1970-07-20T00:00:00Z (50 days left)"),
            ("79 %, no renewal", 179, off, Level::Ok, "(21 days left)"),
            ("80 %, no renewal: a warning", 180, off, Level::Warn, "past 80 % of its lifetime, and nothing renews it"),
            ("80 %, rotating: rotation is due", 180, rotation, Level::Ok, "(20 days left)"),
            ("91 %, rotating: it has not", 191, rotation, Level::Warn, "rotation renews at 70-90 % of its lifetime"),
            ("91 %, bootstrap only", 191, bootstrap, Level::Warn, "nothing renews it"),
            (
                "expired, nothing replaces it",
                201,
                rotation,
                Level::Fail,
                "expired at 1970-07-20T00:00:00Z, and nothing",
            ),
            ("expired, bootstrap replaces it", 201, bootstrap, Level::Warn, "expired at"),
            ("not yet valid", 99, off, Level::Warn, "not valid before 1970-04-11T00:00:00Z"),
        ];
        for (what, now, renewal, level, says) in cases {
            let c = judge("client certificate", (at(100), at(200)), at(*now), *renewal);
            assert_eq!(c.level, *level, "{what}: {c:?}");
            assert!(c.detail.contains(says), "{what}: {:?} lacks {says:?}", c.detail);
            assert_eq!(c.fix.is_some(), *level != Level::Ok, "{what}: a fix with every warning");
        }
        let instant = judge("x", (at(5), at(5)), at(5), off);
        assert_eq!(instant.level, Level::Warn, "a zero lifetime is all spent");
    }

    #[test]
    fn the_kubeconfigs_certificate_the_servers_files_and_an_issued_one_are_read() {
        let d = crate::testdir::TestDir::new("doctor-certs");
        let now = SystemTime::now();
        let made = |ago: u64| crate::kubelet_server::cert::make(&["n1".into()], now - Duration::from_secs(ago * DAY));
        let pem = |der: &[u8]| crate::x509::der::pem("CERTIFICATE", der);
        let args = ["run", "--hostname-override=n1"].map(String::from).to_vec();
        let crate::cli::Command::Run(flags) = crate::cli::parse(args).unwrap() else { unreachable!() };
        let mut s = Settings::load(&flags).unwrap();
        assert_eq!(certificates(&s, now), [], "no kubeconfig: no mirror, no certificates");

        // The kubeconfig presents a certificate made today; the server's files one 300 days old.
        let client = made(0).unwrap();
        let kubeconfig = d.join("kubeconfig");
        let data = crate::base64::encode(pem(&client.cert).as_bytes());
        std::fs::write(&kubeconfig, format!("apiVersion: v1\nkind: Config\ncurrent-context: c\nclusters:\n- name: x\n  cluster: {{server: \"https://127.0.0.1:1\"}}\nusers:\n- name: u\n  user: {{client-certificate-data: {data}, client-key-data: {data}}}\ncontexts:\n- name: c\n  context: {{cluster: x, user: u}}\n")).unwrap();
        s.mirror.kubeconfig = Some(kubeconfig);
        let old = made(300).unwrap();
        std::fs::write(d.join("server.crt"), pem(&old.cert)).unwrap();
        s.listeners.kubelet = Some(crate::kubelet_server::ServerSettings {
            address: "127.0.0.1:10250".parse().unwrap(),
            tls: Some((d.join("server.crt"), d.join("server.key"))),
            client_ca_file: None,
            auth: crate::kubelet_server::auth::AuthSettings::kubelet_defaults("n1"),
            debugging_handlers: true,
            idle_timeout: Duration::from_secs(60),
        });
        let checks = certificates(&s, now);
        assert_eq!(checks.len(), 2, "{checks:?}");
        assert_eq!((checks[0].name, checks[0].level), ("client certificate", Level::Ok), "{checks:?}");
        assert!(checks[0].detail.contains("(365 days left)") || checks[0].detail.contains("(364 days left)"));
        assert_eq!((checks[1].name, checks[1].level), ("serving certificate", Level::Warn), "{checks:?}");
        assert!(checks[1].detail.contains("past 80 %"), "{checks:?}");

        // serverTLSBootstrap: none issued yet, then the issued one, rotated.
        s.mirror.server_tls_bootstrap = true;
        s.mirror.cert_dir = d.join("pki");
        s.listeners.kubelet.as_mut().unwrap().tls = None;
        assert!(certificates(&s, now)[1].detail.starts_with("none issued yet"));
        let store = crate::mirror::certs::store::Store::new(&s.mirror.cert_dir, "kubelet-server");
        store.update(pem(&old.cert).as_bytes(), &old.key, now).unwrap();
        let checks = certificates(&s, now);
        assert_eq!(checks[1].level, Level::Ok, "rotation renews it at 70-90 %: {checks:?}");
    }
}
