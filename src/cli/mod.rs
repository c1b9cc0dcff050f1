//! The command line: `atoll <command> [flags] [args]`, with kubelet-style long flags and
//! kubectl's short ones, and the commands that do not run the agent.
//!
//! Flags are `--name=value` or `--name value`; boolean flags may stand alone (`--strict`) or
//! take `=true`/`=false`; `--` ends the flags. Every command answers `--help` and `-h` with its
//! own usage (flags from the one table in `config::flags`, arguments, an example). Every usage error is
//! a [`UsageError`] naming the flag or argument (exit 2); nothing here panics or exits.
//! `local_api` holds the commands that talk to a running agent, `validate` and `doctor` the
//! ones that read manifests and the machine.

pub mod describe;
pub mod doctor;
mod error;
pub mod exec;
pub mod images;
pub mod local_api;
pub mod port_forward;
pub mod render;
pub mod run;
pub mod spdy;
pub mod validate;

pub use crate::config::flags::{self, Flag, Flags};
use crate::config::flags::{Group, Kind, TABLE};
pub use error::Error;
use std::fmt;

/// What the user asked for.
#[derive(Debug, PartialEq, Eq)]
pub enum Command {
    Version,
    /// The overview, or one command's usage.
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

/// One command: what it takes and what it is for.
pub struct CommandSpec {
    pub name: &'static str,
    pub args: &'static str,
    pub summary: &'static str,
    /// Which flags it takes (`None`: none).
    pub flags: Option<Group>,
    pub example: &'static str,
}

/// Every command, in help order. With the flag table, the source of the help texts, the man
/// page and the shell completions (`examples/docs.rs`).
pub const COMMANDS: &[CommandSpec] = &[
    CommandSpec {
        name: "run",
        args: "",
        summary: "run the agent",
        flags: Some(Group::Agent),
        example: "atoll run --config=/var/lib/kubelet/config.yaml --atoll-config=/etc/atoll/atoll.yaml",
    },
    CommandSpec {
        name: "validate",
        args: "FILE|DIR|URL...",
        summary: "check manifest files, directories or URLs as `run` would read them",
        flags: Some(Group::Agent),
        example: "atoll validate /etc/kubernetes/manifests --hostname-override=edge-1",
    },
    CommandSpec {
        name: "pods",
        args: "",
        summary: "list the running agent's pods",
        flags: Some(Group::Client),
        example: "atoll pods -o wide",
    },
    CommandSpec {
        name: "describe",
        args: "[NAMESPACE/]POD",
        summary: "a pod's spec, container states, probes and recent events",
        flags: Some(Group::Client),
        example: "atoll describe hello-web",
    },
    CommandSpec {
        name: "logs",
        args: "[NAMESPACE/]POD",
        summary: "a container's logs",
        flags: Some(Group::Client),
        example: "atoll logs ticker -c tick -f --tail 20",
    },
    CommandSpec {
        name: "exec",
        args: "[NAMESPACE/]POD -- COMMAND [ARG...]",
        summary: "run a command in a container (-i stdin, -t terminal); exits with its status",
        flags: Some(Group::Client),
        example: "atoll exec -it hello-web -c web -- sh",
    },
    CommandSpec {
        name: "attach",
        args: "[NAMESPACE/]POD",
        summary: "attach to a container's main process (-i to send it stdin)",
        flags: Some(Group::Client),
        example: "atoll attach -i reader",
    },
    CommandSpec {
        name: "port-forward",
        args: "[NAMESPACE/]POD [LOCAL:]REMOTE...",
        summary: "forward local ports to ports in a pod's network (until Ctrl-C)",
        flags: Some(Group::Client),
        example: "atoll port-forward hello-web 8080:80 :9090",
    },
    CommandSpec {
        name: "restart",
        args: "[NAMESPACE/]POD",
        summary: "stop a pod's containers (preStop hooks run); they come back per restartPolicy",
        flags: Some(Group::Client),
        example: "atoll restart hello-web",
    },
    CommandSpec {
        name: "images",
        args: "[prune | import FILE]",
        summary: "the runtime's images (in use, pinned and why); prune the unused; import a tarball",
        flags: Some(Group::Client),
        example: "atoll images import /media/usb/app.tar.zst",
    },
    CommandSpec {
        name: "doctor",
        args: "",
        summary: "check this machine for what atoll needs, with a fix for each problem",
        flags: Some(Group::Agent),
        example: "atoll doctor --config=/var/lib/kubelet/config.yaml",
    },
    CommandSpec {
        name: "version",
        args: "",
        summary: "print version, target and git commit",
        flags: None,
        example: "atoll version",
    },
    CommandSpec {
        name: "help",
        args: "[COMMAND]",
        summary: "this text, or a command's",
        flags: None,
        example: "atoll help logs",
    },
];

fn command_spec(name: &str) -> Option<&'static CommandSpec> {
    COMMANDS.iter().find(|c| c.name == name)
}

/// Parses the arguments after the program name.
pub fn parse<I: IntoIterator<Item = String>>(args: I) -> Result<Command, UsageError> {
    let mut args = args.into_iter();
    let Some(cmd) = args.next() else {
        return Err(UsageError("no command given".into()));
    };
    let rest: Vec<String> = args.collect();
    let cmd = match cmd.as_str() {
        "--version" => "version".to_string(),
        "--help" | "-h" => "help".to_string(),
        _ => cmd,
    };
    let Some(spec) = command_spec(&cmd) else {
        return Err(UsageError(if cmd.starts_with('-') {
            format!("expected a command before the flag {cmd:?}")
        } else {
            format!("unknown command {cmd:?}")
        }));
    };
    if spec.name == "help" {
        return Ok(Command::Help(rest.iter().find(|a| !a.starts_with('-')).cloned()));
    }
    // `--help` and `-h` anywhere before `--` ask for the command's usage.
    let flags_part = rest.iter().take_while(|a| *a != "--");
    if flags_part.clone().any(|a| a == "--help" || a == "-h") {
        return Ok(Command::Help(Some(spec.name.to_string())));
    }
    let (flags, positional) = parse_flags(spec, &rest)?;
    let no_args = |what: &str| match positional.first() {
        Some(p) => Err(UsageError(format!("`atoll {}` takes no arguments, got {p:?}{what}", spec.name))),
        None => Ok(()),
    };
    match spec.name {
        "version" => no_args("").map(|()| Command::Version),
        "run" => {
            let hint = positional.first().map(|p| format!(" (did you mean --pod-manifest-path={p}?)"));
            no_args(hint.as_deref().unwrap_or("")).map(|()| Command::Run(flags))
        }
        "doctor" => no_args("").map(|()| Command::Doctor(flags)),
        "validate" => {
            if positional.is_empty() {
                return Err(UsageError("`atoll validate` needs at least one manifest file, directory or URL".into()));
            }
            Ok(Command::Validate { flags, targets: positional })
        }
        "images" => match positional.iter().map(String::as_str).collect::<Vec<_>>()[..] {
            [] | ["prune"] | ["import", _] => Ok(Command::Client { command: "images".into(), flags, args: positional }),
            _ => Err(UsageError(format!("`atoll images` takes nothing, `prune` or `import FILE`, got {positional:?}"))),
        },
        "exec" | "attach" | "port-forward" => {
            // kubectl's shape: the pod, then (exec) `--` and the command.
            let after = rest.iter().position(|a| a == "--").map_or(0, |d| rest.len() - d - 1);
            let before = positional.len() - after;
            let usage = command_spec(spec.name).map_or("", |c| c.args);
            let ok = match spec.name {
                "exec" => before == 1 && after > 0,
                "attach" => positional.len() == 1,
                _ => positional.len() >= 2,
            };
            if !ok {
                let hint = if spec.name == "exec" && before > 1 { " (put `--` before the command)" } else { "" };
                return Err(UsageError(format!("`atoll {}` takes {usage}, got {positional:?}{hint}", spec.name)));
            }
            Ok(Command::Client { command: spec.name.to_string(), flags, args: positional })
        }
        name => {
            let want = if name == "pods" { 0 } else { 1 };
            if positional.len() != want {
                let usage = match name {
                    "pods" => "`atoll pods` takes no arguments".to_string(),
                    other => format!("`atoll {other}` takes one pod name ([NAMESPACE/]NAME)"),
                };
                return Err(UsageError(format!("{usage}, got {positional:?}")));
            }
            if let Some(o) = flags.get(Flag::Output) {
                if !matches!(o, "json" | "yaml" | "wide") {
                    return Err(UsageError(format!("flag --output takes json, yaml or wide, got {o:?}")));
                }
            }
            if let Some(t) = flags.get(Flag::Tail) {
                if t.parse::<i64>().is_err() {
                    return Err(UsageError(format!("flag --tail takes a number of lines, got {t:?}")));
                }
            }
            Ok(Command::Client { command: name.to_string(), flags, args: positional })
        }
    }
}

/// Whether a command takes the flags of `group`.
pub fn takes(spec: &CommandSpec, group: Group) -> bool {
    match (spec.flags, group) {
        (None, _) => false,
        (Some(_), Group::Both) => true,
        (Some(g), other) => g == other,
    }
}

fn parse_flags(spec: &CommandSpec, args: &[String]) -> Result<(Flags, Vec<String>), UsageError> {
    let cmd = spec.name;
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
        let is_short = |b: &str| TABLE.iter().any(|f| f.short == Some(b) && takes(spec, f.group));
        let Some(body) =
            arg.strip_prefix("--").or_else(|| arg.strip_prefix('-').filter(|b| b.len() > 1 || is_short(b)))
        else {
            positional.push(arg.clone());
            continue;
        };
        // Short boolean flags together, as kubectl takes them: `-it` is `-i -t`.
        let bools = |b: &str| {
            let short = |c: char| {
                TABLE
                    .iter()
                    .find(|f| f.kind == Kind::Bool && f.short == Some(c.to_string().as_str()) && takes(spec, f.group))
            };
            b.chars().map(short).collect::<Option<Vec<_>>>()
        };
        if let (false, Some(each)) = (arg.starts_with("--") || body.len() < 2, bools(body)) {
            each.iter().for_each(|f| flags.push(f.flag, "true".into()));
            continue;
        }
        let (name, inline) = match body.split_once('=') {
            Some((n, v)) => (n, Some(v.to_string())),
            None => (body, None),
        };
        let found = TABLE.iter().find(|f| (f.name == name || f.short == Some(name)) && takes(spec, f.group));
        let Some(f) = found else {
            return Err(UsageError(format!("unknown flag --{name} for `atoll {cmd}`")));
        };
        let name = f.name;
        let value = match (f.kind, inline) {
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
        if f.kind != Kind::Bool && value.is_empty() {
            return Err(UsageError(format!("flag --{name} needs a non-empty value")));
        }
        flags.push(f.flag, value);
    }
    Ok((flags, positional))
}

/// The flag lines of `group`, for a help text.
fn flag_lines(out: &mut String, spec: &CommandSpec) {
    for f in TABLE.iter().filter(|f| takes(spec, f.group)) {
        let arg = if f.kind == Kind::Bool { String::new() } else { "=VALUE".to_string() };
        let short = f.short.map(|s| format!("-{s}, ")).unwrap_or_default();
        let left = format!("{short}--{}{arg}", f.name);
        out.push_str(&format!("  {left:<34} {}\n", f.help));
    }
}

/// The help text: the commands, or one command's usage (`None` for an unknown command).
pub fn usage(command: Option<&str>) -> Option<String> {
    let Some(name) = command else {
        let mut s = String::from(
            "atoll: runs Kubernetes static pods on this machine through CRI, no cluster needed\n\n\
             Usage: atoll <command> [flags] [args]\n\nCommands:\n",
        );
        for c in COMMANDS {
            s.push_str(&format!("  {:<10} {}\n", c.name, c.summary));
        }
        s.push_str("\nRun `atoll <command> --help` for a command's flags and an example.\n");
        return Some(s);
    };
    let c = command_spec(name)?;
    let args = if c.args.is_empty() { String::new() } else { format!(" {}", c.args) };
    let flags = if c.flags.is_some() { " [flags]" } else { "" };
    let mut s = format!("atoll {}: {}\n\nUsage: atoll {}{flags}{args}\n", c.name, c.summary, c.name);
    if c.flags.is_some() {
        s.push_str("\nFlags:\n");
        flag_lines(&mut s, c);
        s.push_str("  -h, --help                         this text\n");
    }
    s.push_str(&format!("\nExample:\n  {}\n", c.example));
    Some(s)
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
        assert_eq!(flags.get(Flag::Container), Some("app"));
        assert!(flags.is_set(Flag::Follow));
        assert_eq!(flags.get(Flag::Tail), Some("5"));
        assert_eq!(flags.get(Flag::Namespace), Some("kube-system"));
        let Command::Client { flags, .. } = parse(args("pods -o json")).unwrap() else { panic!() };
        assert_eq!(flags.get(Flag::Output), Some("json"));
        let e = |s: &str| parse(args(s)).unwrap_err().0;
        assert_eq!(e("pods -o xml"), "flag --output takes json, yaml or wide, got \"xml\"");
        assert_eq!(e("logs"), "`atoll logs` takes one pod name ([NAMESPACE/]NAME), got []");
        assert_eq!(e("logs a --tail x"), "flag --tail takes a number of lines, got \"x\"");
        assert_eq!(e("pods --strict"), "unknown flag --strict for `atoll pods`");
        assert!(matches!(parse(args("doctor --container-runtime-endpoint=unix:///x.sock")), Ok(Command::Doctor(_))));
    }

    #[test]
    fn exec_takes_kubectls_shape() {
        let Command::Client { command, flags, args: rest } = parse(args("exec -it web -c app -- sh -c -i")).unwrap()
        else {
            panic!("expected a client command")
        };
        assert_eq!((command.as_str(), rest), ("exec", args("web sh -c -i")));
        assert!(flags.is_set(Flag::Stdin) && flags.is_set(Flag::Tty) && !flags.is_set(Flag::Quiet));
        assert_eq!(flags.get(Flag::Container), Some("app"), "after --, -c and -i are the command's");
        let e = |s: &str| parse(args(s)).unwrap_err().0;
        assert!(e("exec web ls").contains("(put `--` before the command)"));
        assert!(e("exec web --").starts_with("`atoll exec` takes [NAMESPACE/]POD -- COMMAND"));
        assert_eq!(e("exec -ix web -- sh"), "unknown flag --ix for `atoll exec`");
        assert!(e("attach web sh").contains("`atoll attach` takes [NAMESPACE/]POD"));
        assert!(e("port-forward web").contains("[LOCAL:]REMOTE"));
        assert!(matches!(
            parse(args("port-forward pod/web 8080:80 :9090 --address 0.0.0.0")),
            Ok(Command::Client { .. })
        ));
    }

    #[test]
    fn kubelet_style_flags_parse_in_both_forms() {
        let Command::Run(f) = parse(args(
            "run --pod-manifest-path=/etc/kubernetes/manifests --container-runtime-endpoint unix:///run/c.sock --strict",
        ))
        .unwrap() else {
            panic!("expected run")
        };
        assert_eq!(f.get(Flag::PodManifestPath), Some("/etc/kubernetes/manifests"));
        assert_eq!(f.get(Flag::ContainerRuntimeEndpoint), Some("unix:///run/c.sock"));
        assert!(f.is_set(Flag::Strict));
        assert!(!f.is_set(Flag::Kubeconfig));
    }

    #[test]
    fn repeated_flags_keep_every_value_and_last_wins_for_single_ones() {
        let Command::Run(f) =
            parse(args("run --manifest-url-header=a:b --manifest-url-header c:d,e:f --root-dir=/a --root-dir=/b"))
                .unwrap()
        else {
            panic!("expected run")
        };
        assert_eq!(f.all(Flag::ManifestUrlHeader), vec!["a:b", "c:d,e:f"]);
        assert_eq!(f.get(Flag::RootDir), Some("/b"));
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
        let cmd = parse(args("validate a.yaml --strict dir/ -- --odd-name.yaml -h")).unwrap();
        let Command::Validate { flags, targets } = cmd else { panic!("expected validate") };
        assert!(flags.is_set(Flag::Strict));
        assert_eq!(targets, vec!["a.yaml", "dir/", "--odd-name.yaml", "-h"], "after --, -h is a file name");
    }

    #[test]
    fn every_command_answers_help_with_its_own_usage() {
        for c in COMMANDS {
            for h in ["--help", "-h"] {
                let got = parse(args(&format!("{} {h}", c.name))).unwrap();
                let want = if c.name == "help" { Command::Help(None) } else { Command::Help(Some(c.name.into())) };
                assert_eq!(got, want, "{} {h}", c.name);
            }
            let text = usage(Some(c.name)).unwrap();
            assert!(text.starts_with(&format!("atoll {}: ", c.name)) && text.contains(c.example), "{text}");
        }
        assert_eq!(parse(args("logs -h")).unwrap(), Command::Help(Some("logs".into())), "not a pod named -h");
        let logs = usage(Some("logs")).unwrap();
        assert!(logs.contains("-f, --follow") && logs.contains("--tail=VALUE") && !logs.contains("--strict"), "{logs}");
        let run = usage(Some("run")).unwrap();
        for f in TABLE.iter().filter(|f| f.group != Group::Client) {
            assert!(run.contains(&format!("--{}", f.name)), "{} missing from run's help", f.name);
        }
        assert!(usage(None).unwrap().contains("validate"));
        assert_eq!(usage(Some("nope")), None);
    }
}
