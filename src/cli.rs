//! Command-line parsing: `atoll <command> [flags] [args]`, with kubelet-style long flags.
//!
//! Flags are `--name=value` or `--name value`; boolean flags may stand alone (`--strict`) or
//! take `=true`/`=false`. Every usage error is a [`UsageError`] with a message that names the
//! flag or argument; nothing here panics or exits. In: the process arguments. Out: a [`Command`].

use std::fmt;

/// What the user asked for.
#[derive(Debug, PartialEq, Eq)]
pub enum Command {
    Version,
    Help(Option<String>),
    Run(Flags),
    Validate {
        flags: Flags,
        targets: Vec<String>,
    },
    /// `pods`, `describe`, `logs`, `restart`: talk to a running agent's local API.
    Client {
        command: String,
        flags: Flags,
        args: Vec<String>,
    },
    /// Preflight checks, with the agent's settings.
    Doctor(Flags),
}

/// A usage error: printed with a hint and exit code 2.
#[derive(Debug, PartialEq, Eq)]
pub struct UsageError(pub String);

impl fmt::Display for UsageError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// How a flag takes its value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Value,
    Repeated,
    Bool,
}

/// One flag atoll understands, named as kubelet names it where kubelet has it.
struct FlagSpec {
    name: &'static str,
    kind: Kind,
    help: &'static str,
}

const RUN_FLAGS: &[FlagSpec] = &[
    FlagSpec { name: "config", kind: Kind::Value, help: "KubeletConfiguration file (kubelet.config.k8s.io/v1beta1)" },
    FlagSpec {
        name: "atoll-config",
        kind: Kind::Value,
        help: "atoll's own settings file (AtollConfiguration: back-off, runtime classes, registry credentials)",
    },
    FlagSpec {
        name: "pod-manifest-path",
        kind: Kind::Value,
        help: "directory or file of static pod manifests (staticPodPath)",
    },
    FlagSpec { name: "manifest-url", kind: Kind::Value, help: "URL of static pod manifests (staticPodURL)" },
    FlagSpec {
        name: "manifest-url-header",
        kind: Kind::Repeated,
        help: "'Name:value,Name:value' headers for --manifest-url (repeatable)",
    },
    FlagSpec {
        name: "container-runtime-endpoint",
        kind: Kind::Value,
        help: "CRI socket, default unix:///run/containerd/containerd.sock",
    },
    FlagSpec {
        name: "manifest-url-ca-file",
        kind: Kind::Value,
        help: "extra CA certificates (PEM) for an https --manifest-url",
    },
    FlagSpec {
        name: "file-check-frequency",
        kind: Kind::Value,
        help: "full rescan of --pod-manifest-path, default 20s",
    },
    FlagSpec { name: "http-check-frequency", kind: Kind::Value, help: "poll period of --manifest-url, default 20s" },
    FlagSpec { name: "hostname-override", kind: Kind::Value, help: "node name instead of the host name" },
    FlagSpec { name: "root-dir", kind: Kind::Value, help: "atoll's state directory, default /var/lib/atoll" },
    FlagSpec { name: "kubeconfig", kind: Kind::Value, help: "API server to mirror pods to, when reachable" },
    FlagSpec { name: "node-ip", kind: Kind::Value, help: "the node's IP address" },
    FlagSpec {
        name: "node-labels",
        kind: Kind::Value,
        help: "labels for the registered node: key=value,key=value (with --kubeconfig)",
    },
    FlagSpec {
        name: "node-status-update-frequency",
        kind: Kind::Value,
        help: "how often the node status is checked for changes, default 10s",
    },
    FlagSpec {
        name: "node-status-report-frequency",
        kind: Kind::Value,
        help: "how often the node status is sent when unchanged, default 5m",
    },
    FlagSpec { name: "runtime-request-timeout", kind: Kind::Value, help: "deadline of CRI calls, e.g. 2m (default)" },
    FlagSpec {
        name: "api-socket",
        kind: Kind::Value,
        help: "the local API's unix socket (default /run/atoll/atoll.sock; none for none)",
    },
    FlagSpec {
        name: "drain-on-exit",
        kind: Kind::Bool,
        help: "on SIGTERM stop every pod before exiting (by default pods keep running, as under kubelet)",
    },
    FlagSpec { name: "strict", kind: Kind::Bool, help: "treat manifest fields atoll does not implement as errors" },
    FlagSpec { name: "v", kind: Kind::Value, help: "log verbosity: 0 info, 2 debug, 4 trace" },
];

/// The flags of the commands that talk to a running agent.
const CLIENT_FLAGS: &[FlagSpec] = &[
    FlagSpec {
        name: "api-socket",
        kind: Kind::Value,
        help: "the agent's local API socket (default /run/atoll/atoll.sock)",
    },
    FlagSpec { name: "output", kind: Kind::Value, help: "pods: json, yaml or wide (-o)" },
    FlagSpec { name: "namespace", kind: Kind::Value, help: "the pod's namespace (-n; default: default)" },
    FlagSpec { name: "container", kind: Kind::Value, help: "logs: the container (-c; default: the only one)" },
    FlagSpec { name: "follow", kind: Kind::Bool, help: "logs: stream until the container stops (-f)" },
    FlagSpec { name: "previous", kind: Kind::Bool, help: "logs: the previous instance (-p)" },
    FlagSpec { name: "tail", kind: Kind::Value, help: "logs: only the last N lines" },
];

/// kubectl's short flags.
const CLIENT_SHORT: &[(&str, &str)] =
    &[("o", "output"), ("n", "namespace"), ("c", "container"), ("f", "follow"), ("p", "previous")];

/// Flags as given, in order; lookups take the last value, as pflag does.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Flags {
    given: Vec<(&'static str, String)>,
}

impl Flags {
    /// The last value given for `name`.
    pub fn get(&self, name: &str) -> Option<&str> {
        self.given.iter().rev().find(|(n, _)| *n == name).map(|(_, v)| v.as_str())
    }

    /// Every value given for a repeatable flag, in order.
    pub fn all(&self, name: &str) -> Vec<&str> {
        self.given.iter().filter(|(n, _)| *n == name).map(|(_, v)| v.as_str()).collect()
    }

    pub fn is_set(&self, name: &str) -> bool {
        self.get(name).is_some_and(|v| v == "true")
    }

    /// The distinct flag names given, in first-seen order.
    pub fn names(&self) -> Vec<&'static str> {
        let mut names: Vec<&'static str> = Vec::new();
        for (n, _) in &self.given {
            if !names.contains(n) {
                names.push(n);
            }
        }
        names
    }
}

/// Parses the arguments after the program name.
pub fn parse<I: IntoIterator<Item = String>>(args: I) -> Result<Command, UsageError> {
    let mut args = args.into_iter();
    let Some(cmd) = args.next() else {
        return Err(UsageError("no command given".into()));
    };
    let rest: Vec<String> = args.collect();
    match cmd.as_str() {
        "version" | "--version" => {
            if let Some(extra) = rest.first() {
                return Err(UsageError(format!("`atoll version` takes no arguments, got {extra:?}")));
            }
            Ok(Command::Version)
        }
        "help" | "--help" | "-h" => Ok(Command::Help(rest.into_iter().next())),
        "run" => {
            let (flags, positional) = parse_flags("run", &rest)?;
            if let Some(p) = positional.first() {
                return Err(UsageError(format!(
                    "`atoll run` takes no arguments, got {p:?} (did you mean --pod-manifest-path={p}?)"
                )));
            }
            Ok(Command::Run(flags))
        }
        "pods" | "describe" | "logs" | "restart" => {
            let (flags, args) = parse_flags_from(cmd.as_str(), &rest, CLIENT_FLAGS)?;
            let want = if cmd == "pods" { 0 } else { 1 };
            if args.len() != want {
                let usage = match cmd.as_str() {
                    "pods" => "`atoll pods` takes no arguments".to_string(),
                    other => format!("`atoll {other}` takes one pod name ([NAMESPACE/]NAME)"),
                };
                return Err(UsageError(format!("{usage}, got {args:?}")));
            }
            if let Some(o) = flags.get("output") {
                if !matches!(o, "json" | "yaml" | "wide") {
                    return Err(UsageError(format!("flag --output takes json, yaml or wide, got {o:?}")));
                }
            }
            if let Some(t) = flags.get("tail") {
                if t.parse::<i64>().is_err() {
                    return Err(UsageError(format!("flag --tail takes a number of lines, got {t:?}")));
                }
            }
            Ok(Command::Client { command: cmd, flags, args })
        }
        "doctor" => {
            let (flags, args) = parse_flags("doctor", &rest)?;
            if let Some(a) = args.first() {
                return Err(UsageError(format!("`atoll doctor` takes no arguments, got {a:?}")));
            }
            Ok(Command::Doctor(flags))
        }
        "validate" => {
            let (flags, targets) = parse_flags("validate", &rest)?;
            if targets.is_empty() {
                return Err(UsageError("`atoll validate` needs at least one manifest file, directory or URL".into()));
            }
            Ok(Command::Validate { flags, targets })
        }
        other if other.starts_with('-') => Err(UsageError(format!("expected a command before the flag {other:?}"))),
        other => Err(UsageError(format!("unknown command {other:?}"))),
    }
}

fn parse_flags(cmd: &str, args: &[String]) -> Result<(Flags, Vec<String>), UsageError> {
    parse_flags_from(cmd, args, RUN_FLAGS)
}

fn parse_flags_from(cmd: &str, args: &[String], table: &[FlagSpec]) -> Result<(Flags, Vec<String>), UsageError> {
    let mut flags = Flags::default();
    let mut positional = Vec::new();
    let mut i = 0;
    while i < args.len() {
        let arg = &args[i];
        i += 1;
        if arg == "--" {
            positional.extend(args[i..].iter().cloned());
            break;
        }
        let Some(body) = arg
            .strip_prefix("--")
            .or_else(|| arg.strip_prefix('-').filter(|b| b.len() > 1 || CLIENT_SHORT.iter().any(|(s, _)| s == b)))
        else {
            positional.push(arg.clone());
            continue;
        };
        let (name, inline) = match body.split_once('=') {
            Some((n, v)) => (n, Some(v.to_string())),
            None => (body, None),
        };
        let name = CLIENT_SHORT.iter().find(|(short, _)| *short == name).map_or(name, |(_, long)| *long);
        let Some(spec) = table.iter().find(|f| f.name == name) else {
            return Err(UsageError(format!("unknown flag --{name} for `atoll {cmd}`")));
        };
        let value = match (spec.kind, inline) {
            (Kind::Bool, None) => "true".to_string(),
            (Kind::Bool, Some(v)) => match v.as_str() {
                "true" | "false" => v,
                _ => return Err(UsageError(format!("flag --{name} takes true or false, got {v:?}"))),
            },
            (_, Some(v)) => v,
            (_, None) => {
                let Some(v) = args.get(i) else {
                    return Err(UsageError(format!("flag --{name} needs a value")));
                };
                i += 1;
                v.clone()
            }
        };
        if spec.kind != Kind::Bool && value.is_empty() {
            return Err(UsageError(format!("flag --{name} needs a non-empty value")));
        }
        flags.given.push((spec.name, value));
    }
    Ok((flags, positional))
}

/// The help text: commands, then flags.
pub fn usage() -> String {
    let mut s = String::from(
        "atoll: runs Kubernetes static pods on this machine through CRI, no cluster needed\n\n\
         Usage: atoll <command> [flags]\n\n\
         Commands:\n\
         \x20 run        run the agent\n\
         \x20 validate   check manifest files, directories or URLs as `run` would read them\n\
         \x20 pods       list the running agent's pods (-o json|yaml|wide)\n\
         \x20 describe   a pod's spec, container states, probes and recent events\n\
         \x20 logs       a container's logs (-c C, -f, --previous, --tail N)\n\
         \x20 restart    stop a pod's containers; they come back per restartPolicy\n\
         \x20 doctor     check this machine for what atoll needs, with a fix for each problem\n\
         \x20 version    print version, target and git commit\n\
         \x20 help       this text\n\nFlags (run, validate):\n",
    );
    for f in RUN_FLAGS {
        let arg = match f.kind {
            Kind::Bool => String::new(),
            _ => "=VALUE".to_string(),
        };
        let left = format!("--{}{arg}", f.name);
        s.push_str(&format!("  {left:<34} {}\n", f.help));
    }
    s.push_str("\nFlags (pods, describe, logs, restart):\n");
    for f in CLIENT_FLAGS {
        let arg = if f.kind == Kind::Bool { String::new() } else { "=VALUE".to_string() };
        let left = format!("--{}{arg}", f.name);
        s.push_str(&format!("  {left:<34} {}\n", f.help));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(s: &str) -> Vec<String> {
        s.split_whitespace().map(String::from).collect()
    }

    #[test]
    fn client_commands_take_kubectls_short_flags() {
        let Command::Client { command, flags, args: rest } =
            parse(args("logs web -c app -f --tail 5 -n kube-system")).unwrap()
        else {
            panic!("expected a client command")
        };
        assert_eq!((command.as_str(), rest), ("logs", vec!["web".to_string()]));
        assert_eq!(flags.get("container"), Some("app"));
        assert!(flags.is_set("follow"));
        assert_eq!(flags.get("tail"), Some("5"));
        assert_eq!(flags.get("namespace"), Some("kube-system"));
        let Command::Client { flags, .. } = parse(args("pods -o json")).unwrap() else { panic!() };
        assert_eq!(flags.get("output"), Some("json"));
        let e = |s: &str| parse(args(s)).unwrap_err().0;
        assert_eq!(e("pods -o xml"), "flag --output takes json, yaml or wide, got \"xml\"");
        assert_eq!(e("logs"), "`atoll logs` takes one pod name ([NAMESPACE/]NAME), got []");
        assert_eq!(e("logs a --tail x"), "flag --tail takes a number of lines, got \"x\"");
        assert_eq!(e("pods --strict"), "unknown flag --strict for `atoll pods`");
        assert!(matches!(parse(args("doctor --container-runtime-endpoint=unix:///x.sock")), Ok(Command::Doctor(_))));
    }

    #[test]
    fn kubelet_style_flags_parse_in_both_forms() {
        let Command::Run(f) = parse(args(
            "run --pod-manifest-path=/etc/kubernetes/manifests --container-runtime-endpoint unix:///run/c.sock --strict",
        ))
        .unwrap() else {
            panic!("expected run")
        };
        assert_eq!(f.get("pod-manifest-path"), Some("/etc/kubernetes/manifests"));
        assert_eq!(f.get("container-runtime-endpoint"), Some("unix:///run/c.sock"));
        assert!(f.is_set("strict"));
        assert!(!f.is_set("kubeconfig"));
    }

    #[test]
    fn repeated_flags_keep_every_value_and_last_wins_for_single_ones() {
        let Command::Run(f) =
            parse(args("run --manifest-url-header=a:b --manifest-url-header c:d,e:f --root-dir=/a --root-dir=/b"))
                .unwrap()
        else {
            panic!("expected run")
        };
        assert_eq!(f.all("manifest-url-header"), vec!["a:b", "c:d,e:f"]);
        assert_eq!(f.get("root-dir"), Some("/b"));
    }

    #[test]
    fn usage_errors_name_the_offending_flag_or_argument() {
        let e = |s: &str| parse(args(s)).unwrap_err().0;
        assert_eq!(e("run --pod-manifest-paht=/x"), "unknown flag --pod-manifest-paht for `atoll run`");
        assert_eq!(e("run --pod-manifest-path"), "flag --pod-manifest-path needs a value");
        assert_eq!(e("run --root-dir="), "flag --root-dir needs a non-empty value");
        assert_eq!(e("run --strict=yes"), "flag --strict takes true or false, got \"yes\"");
        assert!(e("run /etc/manifests").contains("did you mean --pod-manifest-path=/etc/manifests"));
        assert_eq!(e("frobnicate"), "unknown command \"frobnicate\"");
        assert_eq!(e("--pod-manifest-path=/x"), "expected a command before the flag \"--pod-manifest-path=/x\"");
        assert_eq!(e("validate"), "`atoll validate` needs at least one manifest file, directory or URL");
        assert_eq!(e("version extra"), "`atoll version` takes no arguments, got \"extra\"");
        assert_eq!(parse(Vec::<String>::new()).unwrap_err().0, "no command given");
    }

    #[test]
    fn validate_takes_targets_and_flags_in_any_order() {
        let cmd = parse(args("validate a.yaml --strict dir/ -- --odd-name.yaml")).unwrap();
        let Command::Validate { flags, targets } = cmd else { panic!("expected validate") };
        assert!(flags.is_set("strict"));
        assert_eq!(targets, vec!["a.yaml", "dir/", "--odd-name.yaml"]);
    }

    #[test]
    fn help_lists_every_flag() {
        let u = usage();
        for f in RUN_FLAGS {
            assert!(u.contains(&format!("--{}", f.name)), "{} missing from help", f.name);
        }
    }
}
