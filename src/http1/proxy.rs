//! The proxy the environment names for atoll's HTTP/1.1 client, and the hosts it is not for.
//! The first of `ALL_PROXY`, `HTTPS_PROXY`, `HTTP_PROXY` (upper case, then lower, each) that
//! is set; an `http://` proxy (a bare `host:port` is one) is asked to `CONNECT`, its
//! `user:pass@` sent as Basic; any other scheme (`https://`, `socks5://`) is refused by name
//! at each request it would carry, never silently gone around. `NO_PROXY` (else `no_proxy`):
//! `*`; a host, which also covers the hosts under it (as Go and curl read it); `.domain` or
//! `*domain` for what ends so; `prefix*` or `prefix.` for what starts so (ureq's); an address
//! range (`10.0.0.0/8`, `fd00::/8`) for IP addresses.

use super::url::Url;
use std::net::IpAddr;

/// The proxy and its exceptions.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Proxy {
    /// The proxy, or why it cannot be used.
    pub url: Result<Url, String>,
    pub no_proxy: Vec<String>,
}

impl Proxy {
    /// The proxy the environment names.
    pub fn from_env() -> Option<Proxy> {
        Proxy::from_vars(&|k| std::env::var(k).ok())
    }

    /// The proxy the variables `get` reads name.
    pub fn from_vars(get: &dyn Fn(&str) -> Option<String>) -> Option<Proxy> {
        let names = ["ALL_PROXY", "all_proxy", "HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy"];
        let value = names.iter().filter_map(|k| get(k)).map(|v| v.trim().to_string()).find(|v| !v.is_empty())?;
        let url = match value.split_once("://") {
            None => Url::parse(&format!("http://{value}")),
            Some((scheme, _)) if scheme.eq_ignore_ascii_case("http") => Url::parse(&value),
            Some((scheme, _)) => Err(format!("a {scheme}:// proxy is not supported (http:// proxies are)")),
        };
        let no_proxy = get("NO_PROXY").or_else(|| get("no_proxy")).unwrap_or_default();
        let no_proxy = no_proxy.split(',').map(|e| e.trim().to_ascii_lowercase()).filter(|e| !e.is_empty()).collect();
        Some(Proxy { url, no_proxy })
    }

    /// Whether `host` (bare: no IPv6 brackets) goes through the proxy.
    pub fn serves(&self, host: &str) -> bool {
        let host = host.to_ascii_lowercase();
        !self.no_proxy.iter().any(|e| excepted(e, &host))
    }
}

/// Whether the `NO_PROXY` entry `e` (lower case) covers `host`.
fn excepted(e: &str, host: &str) -> bool {
    if e == "*" {
        return true;
    }
    if let Some((net, bits)) = e.split_once('/') {
        return match (net.parse::<IpAddr>(), bits.parse::<u32>(), host.parse::<IpAddr>()) {
            (Ok(net), Ok(bits), Ok(ip)) => in_range(ip, net, bits),
            _ => false,
        };
    }
    if let Some(suffix) = e.strip_prefix('*') {
        return host.ends_with(suffix);
    }
    if e.starts_with('.') {
        return host.ends_with(e);
    }
    if let Some(prefix) = e.strip_suffix('*').or_else(|| e.ends_with('.').then_some(e)) {
        return host.starts_with(prefix);
    }
    let e = e.trim_start_matches('[').trim_end_matches(']');
    host == e || host.strip_suffix(e).is_some_and(|rest| rest.ends_with('.'))
}

/// Whether `ip` is in `net`/`bits`.
fn in_range(ip: IpAddr, net: IpAddr, bits: u32) -> bool {
    let (ip, net, width) = match (ip.to_canonical(), net.to_canonical()) {
        (IpAddr::V4(a), IpAddr::V4(b)) => (u128::from(a.to_bits()), u128::from(b.to_bits()), 32),
        (IpAddr::V6(a), IpAddr::V6(b)) => (a.to_bits(), b.to_bits(), 128),
        _ => return false,
    };
    if bits > width {
        return false;
    }
    let mask = if bits == 0 { 0 } else { (u128::MAX << (128 - bits)) >> (128 - width) };
    ip & mask == net & mask
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(vars: &[(&'static str, &'static str)]) -> Option<Proxy> {
        let vars = vars.to_vec();
        Proxy::from_vars(&move |k| vars.iter().find(|(n, _)| *n == k).map(|(_, v)| v.to_string()))
    }

    #[test]
    fn the_first_proxy_variable_is_taken_and_an_unsupported_one_refused_by_name() {
        assert_eq!(p(&[]), None);
        let chosen = p(&[("HTTP_PROXY", "http://second:1"), ("ALL_PROXY", "first:3128")]).unwrap();
        let url = chosen.url.unwrap();
        assert_eq!((url.host.as_str(), url.port), ("first", 3128), "ALL_PROXY first");
        let socks = p(&[("HTTPS_PROXY", "socks5://h:1080")]).unwrap();
        assert!(socks.url.unwrap_err().contains("socks5:// proxy is not supported"));
        let empty_wins = p(&[("http_proxy", "http://h:1"), ("NO_PROXY", ""), ("no_proxy", "*")]).unwrap();
        assert!(empty_wins.serves("x"), "NO_PROXY set, even empty, is the one read");
    }

    #[test]
    fn no_proxy_entries_cover_hosts_as_go_curl_and_ureq_read_them() {
        let with = p(&[
            ("https_proxy", "http://h:1"),
            ("NO_PROXY", " .corp.example, exact.example ,*.wild.example,10.0.0.0/8,fd00::/8,192.168.,intra*"),
        ])
        .unwrap();
        for (host, through) in [
            ("a.corp.example", false),
            ("corp.example", true),
            ("exact.example", false),
            ("sub.exact.example", false),
            ("notexact.example", true),
            ("x.wild.example", false),
            ("10.1.2.3", false),
            ("11.1.2.3", true),
            ("fd00::1", false),
            ("fe80::1", true),
            ("192.168.4.5", false),
            ("intranet", false),
            ("elsewhere", true),
        ] {
            assert_eq!(with.serves(host), through, "{host}");
        }
        assert!(!p(&[("http_proxy", "http://h:1"), ("no_proxy", "*")]).unwrap().serves("anything"));
        assert!(in_range("1.2.3.4".parse().unwrap(), "0.0.0.0".parse().unwrap(), 0));
        assert!(!in_range("1.2.3.4".parse().unwrap(), "1.2.3.0".parse().unwrap(), 33), "a width past the family");
    }
}
