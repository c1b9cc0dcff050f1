//! A URL as atoll's HTTP/1.1 client takes it apart: scheme (http or https), user info, host,
//! port and the request target; nothing with a space or a control character in it.

/// A URL taken apart.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Url {
    pub https: bool,
    /// As in the URL (an IPv6 address in brackets).
    pub host: String,
    pub port: u16,
    /// Path and query (`/` when empty), without the fragment.
    pub target: String,
    pub userinfo: Option<String>,
}

impl Url {
    pub fn parse(url: &str) -> Result<Url, String> {
        if url.bytes().any(|b| b.is_ascii_whitespace() || b.is_ascii_control()) {
            return Err("a space or a control character in the URL".into());
        }
        let (scheme, rest) = url.split_once("://").ok_or("no scheme")?;
        let https = match scheme.to_ascii_lowercase().as_str() {
            "https" => true,
            "http" => false,
            _ => return Err(format!("the scheme {scheme:?} is not http or https")),
        };
        let rest = rest.split('#').next().unwrap_or_default();
        let end = rest.find(['/', '?']).unwrap_or(rest.len());
        let (authority, target) = rest.split_at_checked(end).ok_or("a URL that does not split")?;
        let (userinfo, hostport) = match authority.rsplit_once('@') {
            Some((u, h)) => (Some(u.to_string()), h),
            None => (None, authority),
        };
        let (host, port) = match hostport.rsplit_once(':').filter(|(h, p)| !p.contains(']') && !h.is_empty()) {
            Some((h, p)) => (h, p.parse().map_err(|_| format!("the port {p:?}"))?),
            None => (hostport, if https { 443 } else { 80 }),
        };
        if host.is_empty() {
            return Err("no host".into());
        }
        let target = if target.starts_with('/') { target.to_string() } else { format!("/{target}") };
        Ok(Url { https, host: host.to_string(), port, target, userinfo })
    }

    /// `host:port`, `CONNECT`'s authority.
    pub fn authority(&self) -> String {
        format!("{}:{}", self.host, self.port)
    }

    /// The `Host` header: the port only when it is not the scheme's.
    pub fn host_header(&self) -> String {
        if self.port == if self.https { 443 } else { 80 } {
            self.host.clone()
        } else {
            self.authority()
        }
    }

    /// The host without IPv6 brackets: what is resolved and what TLS names.
    pub fn bare_host(&self) -> &str {
        self.host.strip_prefix('[').and_then(|h| h.strip_suffix(']')).unwrap_or(&self.host)
    }
}
