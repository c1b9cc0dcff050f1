//! atoll-config(5): the keys of the two settings files, each with its flag, type, default and
//! meaning, beside the flag table that makes atoll(8). A test holds it to the keys the code
//! reads (`src/config/kubelet.rs`, `atoll.rs`, `konnectivity.rs`).

/// One key: its path in the file, the flag that overrides it (or ""), its type, its default, what it does.
type Key = (&'static str, &'static str, &'static str, &'static str, &'static str);

/// kubelet's `KubeletConfiguration` (`--config`): the fields atoll acts on.
const KUBELET: &[Key] = &[
    ("staticPodPath", "--pod-manifest-path", "path", "none", "the manifest directory, watched with inotify"),
    ("staticPodURL", "--manifest-url", "URL", "none", "a manifest URL, polled; its last good copy kept on disk"),
    ("staticPodURLHeader", "--manifest-url-header", "map of lists", "none", "headers sent with the URL's requests"),
    ("fileCheckFrequency", "--file-check-frequency", "duration", "20s", "how often the directory is rescanned"),
    ("httpCheckFrequency", "--http-check-frequency", "duration", "20s", "how often the URL is polled"),
    ("syncFrequency", "", "duration", "off", "a periodic sync of every pod, only when given"),
    (
        "containerRuntimeEndpoint",
        "--container-runtime-endpoint",
        "URL",
        "unix:///run/containerd/containerd.sock",
        "the CRI socket",
    ),
    ("runtimeRequestTimeout", "--runtime-request-timeout", "duration", "2m", "the timeout of a CRI call"),
    ("podLogsDir", "", "path", "/var/log/pods", "where containers' logs are written"),
    ("containerLogMaxSize", "", "quantity", "10Mi", "a log file's size before it is rotated"),
    ("containerLogMaxFiles", "", "integer", "5", "log files kept per container"),
    ("clusterDNS", "", "list of IPs", "none", "the pods' name servers"),
    ("clusterDomain", "", "string", "none", "the pods' search domain"),
    ("resolvConf", "", "path", "/etc/resolv.conf", "the host's resolver file given to pods"),
    ("healthzPort", "", "integer", "10248", "the /healthz port; 0 turns it off"),
    ("healthzBindAddress", "", "IP", "127.0.0.1", "the /healthz address"),
    ("readOnlyPort", "", "integer", "0", "the read-only API's port on 127.0.0.1; 0 is off"),
    ("maxPods", "", "integer", "110", "admission: the most pods"),
    ("kubeReserved", "", "map", "none", "admission: resources kept for kubernetes daemons"),
    ("systemReserved", "", "map", "none", "admission: resources kept for the system"),
    ("evictionHard", "", "map", "none", "admission: the hard eviction thresholds taken off allocatable"),
    ("allowedUnsafeSysctls", "", "list", "none", "admission: unsafe sysctls a pod may set"),
    ("registerWithTaints", "", "list of taints", "none", "the mirror: the node's taints (key, value, effect)"),
    (
        "nodeStatusUpdateFrequency",
        "--node-status-update-frequency",
        "duration",
        "10s",
        "the mirror: how often the node status is computed",
    ),
    (
        "nodeStatusReportFrequency",
        "--node-status-report-frequency",
        "duration",
        "5m",
        "the mirror: the longest time between status reports",
    ),
    ("nodeLeaseDurationSeconds", "", "integer", "40", "the mirror: the node lease's duration"),
    ("imageGCHighThresholdPercent", "", "integer", "85", "image GC starts at this disk use"),
    ("imageGCLowThresholdPercent", "", "integer", "80", "image GC frees down to this disk use"),
    ("imageMinimumGCAge", "", "duration", "2m", "an unused image's minimum age before it is collected"),
    ("imageMaximumGCAge", "", "duration", "off", "an unused image older than this is collected"),
    ("address", "", "IP", "0.0.0.0", "the kubelet server's address"),
    ("port", "", "integer", "10250", "the kubelet server's port; 0 turns it off"),
    ("tlsCertFile", "", "path", "self-signed", "the kubelet server's certificate"),
    (
        "rotateCertificates",
        "--rotate-certificates",
        "bool",
        "false",
        "the mirror: renew the client certificate through the certificates API before it expires",
    ),
    (
        "serverTLSBootstrap",
        "--rotate-server-certificates",
        "bool",
        "false",
        "the kubelet server's certificate issued and renewed through the certificates API",
    ),
    ("tlsPrivateKeyFile", "", "path", "self-signed", "the kubelet server's key"),
    ("authentication.x509.clientCAFile", "", "path", "none", "the CA of accepted client certificates"),
    ("authentication.webhook.enabled", "", "bool", "true", "bearer tokens reviewed by the API server"),
    ("authentication.webhook.cacheTTL", "", "duration", "2m", "how long a token review is cached"),
    ("authentication.anonymous.enabled", "", "bool", "false", "anonymous requests allowed"),
    ("authorization.mode", "", "Webhook or AlwaysAllow", "Webhook", "how requests are authorized"),
    ("authorization.webhook.cacheAuthorizedTTL", "", "duration", "5m", "how long an allow is cached"),
    ("authorization.webhook.cacheUnauthorizedTTL", "", "duration", "30s", "how long a denial is cached"),
    ("enableDebuggingHandlers", "", "bool", "true", "logs, exec, attach, port-forward and run on the kubelet server"),
    ("streamingConnectionIdleTimeout", "", "duration", "4h", "a stream's idle time before it is closed"),
];

/// atoll's `AtollConfiguration` (`--atoll-config`, apiVersion atoll.io/v1alpha1).
const ATOLL: &[Key] = &[
    ("strict", "--strict", "bool", "false", "manifest fields atoll does not implement are errors"),
    ("strictImagePullPolicy", "", "bool", "false", "true keeps kubelet's rule when a registry is out of reach"),
    ("imagesDir", "", "path", "<root-dir>/images", "image tarballs imported into the runtime"),
    ("secretsDir", "", "path", "none", "a root-only directory of Secrets and ConfigMaps"),
    ("decryptionKeyFile", "", "path", "none", "the age identity that decrypts .age manifests"),
    ("ctrPath", "", "path", "ctr on PATH", "containerd's ctr, which imports images"),
    ("imageGCPeriod", "", "duration", "5m", "how often images are garbage-collected"),
    ("rollbackAfter", "", "duration", "off", "a changed pod must be Ready this long after it starts"),
    ("rollbackMaxRestarts", "", "integer", "off", "the restarts a changed pod may make on trial"),
    ("manifestTrust.publicKeys", "", "list of paths", "none", "minisign public keys of trusted signers"),
    ("manifestTrust.require", "", "bool", "false", "every manifest must be signed"),
    ("konnectivity.proxyServerHost", "", "host", "none", "the konnectivity server's agent address"),
    ("konnectivity.proxyServerPort", "", "integer", "8132", "its port"),
    ("konnectivity.caCert", "", "path", "none", "the CA of the server's certificate"),
    ("konnectivity.agentCert", "", "path", "none", "the agent's client certificate"),
    ("konnectivity.agentKey", "", "path", "none", "its key"),
    ("konnectivity.serviceAccountTokenPath", "", "path", "none", "a service account token to present"),
    ("konnectivity.agentID", "", "string", "the node's name", "the agent's ID"),
    ("konnectivity.agentIdentifiers", "", "string", "the node's host and IP", "the identifiers the server routes by"),
    ("konnectivity.syncInterval", "", "duration", "1s", "the first wait between connection attempts"),
    ("konnectivity.syncIntervalCap", "", "duration", "30s", "the longest wait between them"),
    ("konnectivity.keepaliveTime", "", "duration", "60s", "the link's keepalive"),
    ("stateDir", "--root-dir", "path", "/var/lib/atoll", "atoll's state"),
    ("apiSocket", "--api-socket", "path", "/run/atoll/atoll.sock", "the local API's socket; none turns it off"),
    ("kubeconfig", "--kubeconfig", "path", "none", "the API server to mirror to"),
    ("nodeLabels", "--node-labels", "map", "none", "the node's labels"),
    ("mirrorEncryptedPodSpecs", "", "bool", "false", "mirror pods from encrypted files with their spec"),
    ("apiPodSource", "--api-pod-source", "bool", "true", "run the pods the cluster binds to the node"),
    ("crashLoopBackOff.initialDelay", "", "duration", "10s", "the first restart delay after a crash"),
    ("crashLoopBackOff.maxDelay", "", "duration", "5m", "the longest"),
    ("imagePullBackOff.initialDelay", "", "duration", "10s", "the first delay after a failed pull"),
    ("imagePullBackOff.maxDelay", "", "duration", "5m", "the longest"),
    ("relistPeriod", "", "duration", "10s", "how often the runtime is relisted"),
    ("runtimeClasses", "", "map", "runc: runc", "runtimeClassName to CRI runtime handler"),
    ("registryCredentials", "", "list", "none", "credentials for registries, the most specific entry first"),
    ("registryCredentials[].registry", "", "string", "none", "host[:port][/path], * globs per host part"),
    ("registryCredentials[].username", "", "string", "none", "the user name"),
    ("registryCredentials[].password", "", "string", "none", "its password"),
    ("registryCredentials[].passwordFile", "", "path", "none", "or a file holding it"),
    ("registryCredentials[].auth", "", "string", "none", "or base64 user:pass"),
    ("registryCredentials[].identityToken", "", "string", "none", "or an identity token"),
    (
        "dockerConfigFiles",
        "",
        "list of paths",
        "<root-dir>/config.json",
        "Docker config.json files whose auths are read",
    ),
];

fn section(m: &mut String, title: &str, keys: &[Key]) {
    *m += &format!(".SS {title}\n");
    for (key, flag, kind, default, meaning) in keys {
        let flag = if flag.is_empty() { String::new() } else { format!(" (flag \\fB{}\\fR)", super::roff(flag)) };
        *m += &format!(
            ".TP\n\\fB{}\\fR{flag}\n{}, default {}: {}.\n",
            super::roff(key),
            super::roff(kind),
            super::roff(default),
            super::roff(meaning)
        );
    }
}

/// The man page, section 5 (troff).
pub fn man(version: &str, date: &str) -> String {
    let mut m = format!(".TH ATOLL-CONFIG 5 \"{date}\" \"atoll {version}\" \"File Formats\"\n");
    m += ".SH NAME\natoll\\-config \\- the settings files of atoll\n";
    m += ".SH DESCRIPTION\nThe agent reads two YAML (or JSON) files: kubelet's \\fBKubeletConfiguration\\fR \
          (\\fB\\-\\-config\\fR, for example /etc/atoll/kubelet.yaml), of which it acts on the keys below and \
          names every other one at start, and its own \\fBAtollConfiguration\\fR (\\fB\\-\\-atoll\\-config\\fR, \
          /etc/atoll/atoll.yaml). A flag wins over a file. An unknown key is reported once and ignored; \
          a bad value stops atoll with the file and key named. SIGHUP re-reads both files.\n";
    m += ".SH KEYS\n";
    section(&mut m, "KubeletConfiguration (kubelet.config.k8s.io/v1beta1)", KUBELET);
    section(&mut m, "AtollConfiguration (atoll.io/v1alpha1)", ATOLL);
    m += ".SH FILES\n.TP\n/etc/atoll/kubelet.yaml\n.TP\n/etc/atoll/atoll.yaml\nas installed, every key with its default in a comment\n";
    m += ".SH SEE ALSO\n\\fBatoll\\fR(8)\n";
    m
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The keys a settings reader takes: `.get("k")`, `.section("k")`, `.list("k")`, `(&mut f, "k")`.
    fn keys_read(file: &str) -> Vec<String> {
        let text = std::fs::read_to_string(format!("{}/src/config/{file}", env!("CARGO_MANIFEST_DIR"))).unwrap();
        let mut out = Vec::new();
        for open in [".get(\"", ">(\"", ".section(\"", ".list(\"", "(&mut k, \"", "(&mut f, \""] {
            for piece in text.split(open).skip(1) {
                if let Some((key, _)) = piece.split_once('"') {
                    out.push(key.to_string());
                }
            }
        }
        out.retain(|k| !["apiVersion", "kind", "key", "value", "effect"].contains(&k.as_str()));
        out
    }

    #[test]
    fn every_key_the_code_reads_is_in_the_page() {
        let page = man("1.2.3", "2026-11-28");
        for file in ["kubelet.rs", "atoll.rs", "konnectivity.rs"] {
            let keys = keys_read(file);
            assert!(keys.len() > 10 || file == "konnectivity.rs", "{file}: {keys:?}");
            for k in keys {
                let named = [format!("\\fB{k}\\fR"), format!(".{k}."), format!(".{k}\\fR"), format!("\\fB{k}.")];
                assert!(named.iter().any(|n| page.contains(n)), "atoll-config(5) lacks {k} ({file})");
            }
        }
    }
}
