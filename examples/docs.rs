//! The man page and the shell completions, generated from the one table of commands
//! (`atoll::cli::COMMANDS`) and the one table of flags (`atoll::config::flags::TABLE`) that the
//! binary's own parsing and help read, so that they never drift from what atoll accepts. Run
//! at packaging time (`cross/package.sh`); nothing of it is in the binary.
//!
//!   cargo run --example docs -- man VERSION DATE    the man page, section 8 (troff)
//!   cargo run --example docs -- config-man VERSION DATE    atoll-config(5): the settings files' keys
//!   cargo run --example docs -- bash|zsh|fish       a completion script

use atoll::cli::{takes, CommandSpec, COMMANDS};

#[path = "docs/config.rs"]
mod config;
#[cfg(test)]
#[path = "docs/links.rs"]
mod links;
use atoll::config::flags::{Kind, Spec, TABLE};

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let text = match args.iter().map(String::as_str).collect::<Vec<_>>().as_slice() {
        ["man", version, date] => man(version, date),
        ["config-man", version, date] => config::man(version, date),
        ["bash"] => bash(),
        ["zsh"] => zsh(),
        ["fish"] => fish(),
        _ => {
            eprintln!("usage: docs man VERSION DATE | config-man VERSION DATE | bash | zsh | fish");
            std::process::exit(2);
        }
    };
    print!("{text}");
}

/// The flags a command takes, in table order.
fn flags_of(c: &CommandSpec) -> impl Iterator<Item = &'static Spec> + '_ {
    TABLE.iter().filter(move |f| f.in_use && takes(c, f.group))
}

/// Commands that take the same flags, as (their names, one of them), in help order.
fn by_flags() -> Vec<(Vec<&'static str>, &'static CommandSpec)> {
    let mut out: Vec<(Vec<&'static str>, &'static CommandSpec)> = Vec::new();
    for c in COMMANDS.iter().filter(|c| c.flags.is_some()) {
        match out.iter_mut().find(|(_, first)| first.flags == c.flags) {
            Some((names, _)) => names.push(c.name),
            None => out.push((vec![c.name], c)),
        }
    }
    out
}

/// Text for a troff line: backslashes doubled as `\e`, dashes as `\-`, a leading dot or quote
/// kept literal.
fn roff(s: &str) -> String {
    let s = s.replace('\\', "\\e").replace('-', "\\-");
    if s.starts_with('.') || s.starts_with('\'') {
        format!("\\&{s}")
    } else {
        s
    }
}

fn man(version: &str, date: &str) -> String {
    let mut m = format!(".TH ATOLL 8 \"{date}\" \"atoll {version}\" \"System Administration\"\n");
    m += ".SH NAME\natoll \\- Kubernetes static pods on this machine through CRI, no cluster needed\n";
    m += ".SH SYNOPSIS\n.B atoll\n.I command\n[\\fIflags\\fR] [\\fIargs\\fR]\n";
    m += ".SH DESCRIPTION\n";
    m += "atoll runs the pods of a manifest directory and a manifest URL (kubelet's static pods, \
          \\fBstaticPodPath\\fR and \\fBstaticPodURL\\fR) through the container runtime's CRI \
          socket, with kubelet's flag and configuration names. \\fBatoll run\\fR is the agent \
          (\\fBatoll.service\\fR); the other commands talk to it through its local API socket, \
          or check a machine or manifests.\n";
    m += ".SH COMMANDS\n";
    for c in COMMANDS {
        let args = if c.args.is_empty() { String::new() } else { format!(" {}", roff(c.args)) };
        m += &format!(".TP\n\\fBatoll {}\\fR{args}\n{}.\n", c.name, roff(c.summary));
        m += &format!(".br\nExample: \\fB{}\\fR\n", roff(c.example));
    }
    m += ".SH FLAGS\nFlags are given as \\fB\\-\\-name=value\\fR or \\fB\\-\\-name value\\fR.\n";
    for (names, c) in by_flags() {
        m += &format!(".SS {}\n", names.join(", "));
        for f in flags_of(c) {
            let value = if f.kind == Kind::Bool { String::new() } else { "=\\fIVALUE\\fR".to_string() };
            let short = f.short.map(|s| format!("\\fB\\-{s}\\fR, ")).unwrap_or_default();
            m += &format!(".TP\n{short}\\fB\\-\\-{}\\fR{value}\n{}\n", roff(f.name), roff(f.help));
        }
    }
    m += ".SH FILES\n.TP\n/etc/atoll/atoll.yaml\natoll's own settings (\\fB\\-\\-atoll\\-config\\fR).\n";
    m += ".TP\n/var/lib/kubelet/config.yaml\nThe KubeletConfiguration (\\fB\\-\\-config\\fR).\n";
    m += ".TP\n/var/lib/atoll\natoll's state: the pods' volumes, the last good copy of the manifest URL, images to import.\n";
    m += ".TP\n/run/atoll/atoll.sock\nThe local API (root only).\n";
    m += ".SH SEE ALSO\n\\fBkubelet\\fR(8), \\fBcontainerd\\fR(8), \\fBsystemctl\\fR(1)\n";
    m
}

/// A string in single quotes for bash, zsh and fish.
fn quoted(s: &str) -> String {
    format!("'{}'", s.replace('\'', "'\\''"))
}

fn bash() -> String {
    let names: Vec<&str> = COMMANDS.iter().map(|c| c.name).collect();
    let mut s = String::from("# bash completion for atoll (generated from its flag table)\n_atoll() {\n");
    s += "  local cur=${COMP_WORDS[COMP_CWORD]} prev=${COMP_WORDS[COMP_CWORD-1]} flags=\n";
    s += &format!(
        "  if [ \"$COMP_CWORD\" -eq 1 ]; then\n    COMPREPLY=($(compgen -W {} -- \"$cur\"))\n    return\n  fi\n",
        quoted(&names.join(" "))
    );
    s += "  # --flag=value: bash splits the word at '='; the value is a file more often than not.\n";
    s += "  if [ \"$cur\" = = ] || [ \"$prev\" = = ]; then\n    [ \"$cur\" = = ] && cur=\n    COMPREPLY=($(compgen -f -- \"$cur\"))\n    return\n  fi\n";
    s += "  case ${COMP_WORDS[1]} in\n";
    for (names, c) in by_flags() {
        let flags: Vec<String> = flags_of(c)
            .map(|f| if f.kind == Kind::Bool { format!("--{}", f.name) } else { format!("--{}=", f.name) })
            .collect();
        s += &format!("    {}) flags={} ;;\n", names.join("|"), quoted(&flags.join(" ")));
    }
    s += "  esac\n  case $cur in\n";
    s += "    -*) COMPREPLY=($(compgen -W \"$flags --help\" -- \"$cur\"))\n";
    s += "        [[ ${COMPREPLY[0]-} == *= ]] && compopt -o nospace ;;\n";
    s += "    *) COMPREPLY=($(compgen -f -- \"$cur\")) ;;\n  esac\n}\ncomplete -F _atoll atoll\n";
    s
}

/// Text for a zsh `_arguments` description: brackets and colons escaped.
fn zsh_text(s: &str) -> String {
    s.replace('\\', "\\\\").replace('[', "\\[").replace(']', "\\]").replace(':', "\\:")
}

fn zsh() -> String {
    let mut s =
        String::from("#compdef atoll\n# zsh completion for atoll (generated from its flag table)\n_atoll() {\n");
    s += "  local -a commands\n  commands=(\n";
    for c in COMMANDS {
        s += &format!("    {}\n", quoted(&format!("{}:{}", c.name, c.summary.replace(':', "\\:"))));
    }
    s += "  )\n  if (( CURRENT == 2 )); then\n    _describe command commands\n    return\n  fi\n";
    s += "  case $words[2] in\n";
    for (names, c) in by_flags() {
        s += &format!("    {})\n      _arguments \\\n", names.join("|"));
        for f in flags_of(c) {
            let help = zsh_text(f.help);
            let repeat = if f.kind == Kind::Repeated { "*" } else { "" };
            let (eq, value) = if f.kind == Kind::Bool { ("", "") } else { ("=", ":value:_files") };
            s += &format!("        {} \\\n", quoted(&format!("{repeat}--{}{eq}[{help}]{value}", f.name)));
            if let Some(short) = f.short {
                s += &format!("        {} \\\n", quoted(&format!("{repeat}-{short}[{help}]{value}")));
            }
        }
        s += "        '*:file:_files'\n      ;;\n";
    }
    s += "    *) _files ;;\n  esac\n}\n_atoll \"$@\"\n";
    s
}

fn fish() -> String {
    let mut s = String::from("# fish completion for atoll (generated from its flag table)\ncomplete -c atoll -f\n");
    for c in COMMANDS {
        s += &format!("complete -c atoll -n __fish_use_subcommand -a {} -d {}\n", c.name, quoted(c.summary));
    }
    for (names, c) in by_flags() {
        let when = quoted(&format!("__fish_seen_subcommand_from {}", names.join(" ")));
        for f in flags_of(c) {
            let short = f.short.map(|x| format!(" -s {x}")).unwrap_or_default();
            let value = if f.kind == Kind::Bool { "" } else { " -r -F" };
            s += &format!("complete -c atoll -n {when}{short} -l {}{value} -d {}\n", f.name, quoted(f.help));
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_command_and_flag_is_in_the_man_page_and_each_completion() {
        let (man, bash, zsh, fish) = (man("1.2.3", "2026-11-27"), bash(), zsh(), fish());
        for c in COMMANDS {
            assert!(man.contains(&format!("\\fBatoll {}\\fR", c.name)), "man: {}", c.name);
            assert!(bash.contains(c.name) && zsh.contains(&format!("'{}:", c.name)), "{}", c.name);
            assert!(fish.contains(&format!("-a {} -d", c.name)), "fish: {}", c.name);
        }
        for f in TABLE.iter().filter(|f| f.in_use) {
            let dashed = format!("\\fB\\-\\-{}\\fR", roff(f.name));
            assert!(man.contains(&dashed), "man: --{}", f.name);
            let bash_form = if f.kind == Kind::Bool { format!("--{} ", f.name) } else { format!("--{}=", f.name) };
            assert!(bash.contains(&bash_form) || bash.contains(&format!("--{}'", f.name)), "bash: --{}", f.name);
            assert!(zsh.contains(&format!("--{}", f.name)), "zsh: --{}", f.name);
            assert!(fish.contains(&format!(" -l {} ", f.name)), "fish: --{}", f.name);
        }
        // A flag the table keeps but atoll does not act on is offered nowhere.
        for f in TABLE.iter().filter(|f| !f.in_use) {
            assert!(!fish.contains(&format!(" -l {} ", f.name)), "fish offers --{}", f.name);
        }
    }

    #[test]
    fn text_is_escaped_for_each_format() {
        assert_eq!(roff(".starts with a dot, has a \\ and a -"), "\\&.starts with a dot, has a \\e and a \\-");
        assert_eq!(quoted("it's"), "'it'\\''s'");
        assert_eq!(zsh_text("a [b]: c"), "a \\[b\\]\\: c");
    }
}
