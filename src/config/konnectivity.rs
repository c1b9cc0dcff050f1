//! The `konnectivity` section of atoll's settings file: the tunnel to a konnectivity server,
//! with the upstream agent's option names (`proxy-server-host` → `proxyServerHost`), each
//! checked here and named in its error.

use super::error::Error;
use super::fields::Fields;
use crate::duration::parse_duration;
use crate::tunnel::TunnelSettings;
use std::path::PathBuf;
use std::time::Duration;

/// The agent port of the Kubernetes documentation's konnectivity set-up.
const DEFAULT_PORT: u16 = 8132;

/// Reads and checks the section; the fields it does not know go to `unknown`.
pub fn read(mut k: Fields, unknown: &mut Vec<String>) -> Result<TunnelSettings, Error> {
    let host: String = k.get("proxyServerHost")?.unwrap_or_default();
    if host.is_empty() {
        return Err(Error::field(
            "konnectivity.proxyServerHost",
            "missing field (the konnectivity server's agent address)".into(),
        ));
    }
    let port: i64 = k.get("proxyServerPort")?.unwrap_or(i64::from(DEFAULT_PORT));
    let port = u16::try_from(port)
        .ok()
        .filter(|p| *p > 0)
        .ok_or_else(|| Error::field("konnectivity.proxyServerPort", format!("{port} is not a port")))?;
    let path = |k: &mut Fields, key: &str| -> Result<Option<PathBuf>, Error> {
        Ok(k.get::<String>(key)?.filter(|p| !p.is_empty()).map(PathBuf::from))
    };
    let ca_cert = path(&mut k, "caCert")?.ok_or_else(|| {
        Error::field(
            "konnectivity.caCert",
            "missing field (the CA of the server's certificate; the link is always TLS)".into(),
        )
    })?;
    let agent_cert = match (path(&mut k, "agentCert")?, path(&mut k, "agentKey")?) {
        (Some(c), Some(key)) => Some((c, key)),
        (None, None) => None,
        _ => return Err(Error::field("konnectivity.agentCert and agentKey", "give both or neither".into())),
    };
    let token_file = path(&mut k, "serviceAccountTokenPath")?;
    let mut duration = |key: &str, default: Duration, min: Duration, max: Duration| -> Result<Duration, Error> {
        let Some(raw) = k.get::<String>(key)? else { return Ok(default) };
        let at = format!("konnectivity.{key}");
        let d = parse_duration(&raw).map_err(|e| Error::field(&at, e.to_string()))?;
        if d < min || d > max {
            return Err(Error::field(&at, format!("{d:?} is not between {min:?} and {max:?}")));
        }
        Ok(d)
    };
    let hour = Duration::from_secs(3600);
    let sync_interval = duration("syncInterval", Duration::from_secs(1), Duration::from_millis(100), hour)?;
    let sync_interval_cap = duration("syncIntervalCap", Duration::from_secs(30), Duration::from_millis(100), hour)?;
    // The server refuses PINGs more often than every 30 s (its keepalive enforcement).
    let keepalive = duration("keepaliveTime", Duration::from_secs(60), Duration::from_secs(30), 24 * hour)?;
    if sync_interval_cap < sync_interval {
        return Err(Error::field(
            "konnectivity.syncIntervalCap",
            format!("{sync_interval_cap:?} is less than syncInterval {sync_interval:?}"),
        ));
    }
    let settings = TunnelSettings {
        host,
        port,
        ca_cert,
        agent_cert,
        token_file,
        agent_id: k.get::<String>("agentID")?.filter(|s| !s.is_empty()),
        agent_identifiers: k.get::<String>("agentIdentifiers")?.filter(|s| !s.is_empty()),
        sync_interval,
        sync_interval_cap,
        keepalive,
    };
    k.rest(unknown);
    Ok(settings)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read_yaml(yaml: &str) -> Result<(TunnelSettings, Vec<String>), Error> {
        let value = crate::parse::document(yaml.as_bytes()).unwrap().value;
        let mut f = Fields::read_value(value).unwrap();
        let k = f.section("konnectivity").unwrap().unwrap();
        let mut unknown = Vec::new();
        read(k, &mut unknown).map(|s| (s, unknown))
    }

    #[test]
    fn the_upstream_agents_names_with_defaults() {
        let (s, unknown) = read_yaml(
            "konnectivity:\n  proxyServerHost: k.example\n  caCert: /ca.crt\n  serviceAccountTokenPath: /t\n  proxyServerPot: 1\n",
        )
        .unwrap();
        assert_eq!((s.host.as_str(), s.port), ("k.example", 8132));
        assert_eq!(s.token_file, Some(PathBuf::from("/t")));
        assert_eq!(s.agent_cert, None);
        assert_eq!((s.sync_interval, s.sync_interval_cap), (Duration::from_secs(1), Duration::from_secs(30)));
        assert_eq!(s.keepalive, Duration::from_secs(60));
        assert_eq!(unknown, ["konnectivity.proxyServerPot"]);
        let (s, _) = read_yaml("konnectivity:\n  proxyServerHost: fd00::1\n  proxyServerPort: 443\n  caCert: /c\n  agentCert: /a\n  agentKey: /k\n  agentID: n1\n  keepaliveTime: 5m\n").unwrap();
        assert_eq!(s.authority(), "[fd00::1]:443");
        assert_eq!(s.agent_cert, Some((PathBuf::from("/a"), PathBuf::from("/k"))));
        assert_eq!((s.agent_id.as_deref(), s.keepalive), (Some("n1"), Duration::from_secs(300)));
    }

    #[test]
    fn bad_values_name_their_field() {
        for (yaml, field) in [
            ("caCert: /c", "proxyServerHost: missing"),
            ("proxyServerHost: h", "caCert: missing"),
            ("proxyServerHost: h\n  caCert: /c\n  proxyServerPort: 70000", "proxyServerPort: 70000"),
            ("proxyServerHost: h\n  caCert: /c\n  agentCert: /a", "agentCert and agentKey"),
            ("proxyServerHost: h\n  caCert: /c\n  keepaliveTime: 5s", "keepaliveTime: 5s is not between"),
            ("proxyServerHost: h\n  caCert: /c\n  syncInterval: 1m\n  syncIntervalCap: 10s", "syncIntervalCap"),
            ("proxyServerHost: h\n  caCert: /c\n  syncInterval: soon", "konnectivity.syncInterval:"),
        ] {
            let e = read_yaml(&format!("konnectivity:\n  {yaml}\n")).err().unwrap().to_string();
            assert!(e.contains(field), "{yaml}: {e}");
        }
    }
}
