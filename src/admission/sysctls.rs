//! kubelet's sysctl admit handler (`pkg/kubelet/sysctl`), the first of its handlers: a pod's
//! sysctls must be on the allowlist, kubelet's safe sysctls plus `allowedUnsafeSysctls`
//! (names, or prefixes ending in `*`), and one of the host's network or IPC namespace is not
//! for a pod that shares it. Names may be written with slashes (`net/ipv4/ip_forward`).

use crate::pod::types::Pod;

/// kubelet's rejection reason.
pub const REASON: &str = "SysctlForbidden";

/// kubelet's safe sysctls (1.36): namespaced, and of no effect on other pods.
const SAFE: &[&str] = &[
    "kernel.shm_rmid_forced",
    "net.ipv4.ip_local_port_range",
    "net.ipv4.tcp_syncookies",
    "net.ipv4.ping_group_range",
    "net.ipv4.ip_unprivileged_port_start",
    "net.ipv4.ip_local_reserved_ports",
    "net.ipv4.tcp_keepalive_time",
    "net.ipv4.tcp_fin_timeout",
    "net.ipv4.tcp_keepalive_intvl",
    "net.ipv4.tcp_keepalive_probes",
    "net.ipv4.tcp_rmem",
    "net.ipv4.tcp_wmem",
];

/// The kernel namespace a sysctl (or a prefix of sysctls) lives in, as kubelet knows them.
pub fn namespace(name: &str) -> Option<&'static str> {
    let ipc = name == "kernel.sem" || ["kernel.shm", "kernel.msg", "fs.mqueue."].iter().any(|p| name.starts_with(p));
    if ipc {
        Some("IPC")
    } else if name.starts_with("net.") {
        Some("Net")
    } else {
        None
    }
}

/// A name written with slashes (`net/ipv4/conf/eth0.100/forwarding`) in its dotted form
/// (`net.ipv4.conf.eth0/100.forwarding`): when the first separator is a slash, dots and
/// slashes swap.
pub fn dotted(name: &str) -> String {
    if name.find(['.', '/']).is_none_or(|i| name.as_bytes().get(i) != Some(&b'/')) {
        return name.to_string();
    }
    name.chars()
        .map(|c| match c {
            '/' => '.',
            '.' => '/',
            c => c,
        })
        .collect()
}

/// Why a pattern cannot be in `allowedUnsafeSysctls`, with the pattern.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum BadPattern {
    /// Neither a sysctl name nor a prefix ending in `*`.
    NotAName(String),
    /// A sysctl kubelet does not know to be namespaced (allowing it would touch the host).
    NotNamespaced(String),
}

impl std::fmt::Display for BadPattern {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            BadPattern::NotAName(p) => write!(f, "sysctl {p:?} is not a sysctl name or a prefix ending in *"),
            BadPattern::NotNamespaced(p) => write!(f, "the sysctl {p:?} is not known to be namespaced"),
        }
    }
}

impl std::error::Error for BadPattern {}

/// Why `pattern` cannot be in `allowedUnsafeSysctls`, if it cannot.
pub fn check_pattern(pattern: &str) -> Result<(), BadPattern> {
    let dots = dotted(pattern);
    let name = dots.strip_suffix('*').unwrap_or(&dots);
    let valid = !name.is_empty()
        && pattern.len() <= 253
        && name.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b"._-/".contains(&b));
    match (valid, namespace(name)) {
        (false, _) => Err(BadPattern::NotAName(pattern.to_string())),
        (true, None) => Err(BadPattern::NotNamespaced(pattern.to_string())),
        (true, Some(_)) => Ok(()),
    }
}

/// kubelet's message for the first sysctl of `pod` that is not allowed, with `allowed`
/// (`allowedUnsafeSysctls`) besides the safe ones.
pub fn refusal(pod: &Pod, allowed: &[String]) -> Option<String> {
    let sysctls = pod.spec.security_context.as_ref().map(|s| s.sysctls.as_slice()).unwrap_or_default();
    for s in sysctls {
        let name = dotted(&s.name);
        let listed = SAFE.contains(&name.as_str()) || allowed.contains(&name);
        let prefix = allowed.iter().filter_map(|a| a.strip_suffix('*')).find(|p| name.starts_with(p));
        let ns = match (listed, prefix) {
            (true, _) => namespace(&name),
            (false, Some(p)) => namespace(p),
            (false, None) => return Some(format!("forbidden sysctl: {name:?} not allowlisted")),
        };
        let shared = match ns {
            Some("Net") => pod.spec.host_network,
            Some("IPC") => pod.spec.host_ipc,
            _ => false,
        };
        if shared {
            return Some(format!(
                "forbidden sysctl: {name:?} not allowed with host {} enabled",
                ns.unwrap_or_default()
            ));
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(sysctls: &[&str], host_network: bool) -> Pod {
        let list: Vec<serde_json::Value> =
            sysctls.iter().map(|n| serde_json::json!({"name": n, "value": "1"})).collect();
        serde_json::from_value(serde_json::json!({"metadata": {"name": "p"}, "spec": {"hostNetwork": host_network,
            "securityContext": {"sysctls": list}, "containers": [{"name": "c", "image": "i"}]}}))
        .unwrap()
    }

    #[test]
    fn safe_and_allowed_sysctls_pass_and_others_are_refused_with_kubelets_words() {
        let allowed = vec!["net.ipv4.ip_nonlocal_bind".to_string(), "kernel.msg*".to_string()];
        for (sysctls, host, want) in [
            (&["net.ipv4.ip_local_port_range", "kernel.shm_rmid_forced"][..], false, None),
            (&["net/ipv4/tcp_syncookies"][..], false, None),
            (&["net.ipv4.ip_nonlocal_bind", "kernel.msgmax"][..], false, None),
            (&["net.core.somaxconn"][..], false, Some("forbidden sysctl: \"net.core.somaxconn\" not allowlisted")),
            (
                &["net.ipv4.ip_local_port_range"][..],
                true,
                Some("forbidden sysctl: \"net.ipv4.ip_local_port_range\" not allowed with host Net enabled"),
            ),
            (&["kernel.msgmax"][..], true, None),
        ] {
            assert_eq!(refusal(&pod(sysctls, host), &allowed).as_deref(), want, "{sysctls:?}");
        }
        assert_eq!(refusal(&pod(&[], true), &[]), None);
    }

    #[test]
    fn names_patterns_and_namespaces() {
        assert_eq!(dotted("net/ipv4/conf/eth0.100/forwarding"), "net.ipv4.conf.eth0/100.forwarding");
        assert_eq!(dotted("net.ipv4.conf.eth0/100.forwarding"), "net.ipv4.conf.eth0/100.forwarding");
        assert_eq!(namespace("kernel.sem"), Some("IPC"));
        assert_eq!(namespace("fs.mqueue.msg_max"), Some("IPC"));
        assert_eq!(namespace("vm.swappiness"), None);
        assert!(check_pattern("net.*").is_ok() && check_pattern("kernel.shmmax").is_ok());
        assert!(check_pattern("vm.swappiness").unwrap_err().to_string().contains("not known to be namespaced"));
        assert!(check_pattern("Net.X").is_err() && check_pattern("*").is_err());
    }
}
