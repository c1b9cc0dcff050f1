//! The command line's conventions, through the binary: every command answers `--help` and
//! `-h` with its own usage on stdout and exit 0; `--` ends the flags; a usage error goes to
//! stderr with exit 2.

use std::process::Command;

fn atoll(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_atoll")).args(args).output().expect("run atoll");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn every_command_answers_help_with_its_own_usage() {
    for cmd in ["run", "validate", "pods", "describe", "logs", "restart", "doctor", "version", "help"] {
        for h in ["--help", "-h"] {
            let (code, out, err) = atoll(&[cmd, h]);
            assert_eq!(code, 0, "atoll {cmd} {h}: {err}");
            assert!(err.is_empty(), "atoll {cmd} {h}: {err}");
            let want = if cmd == "help" { "Usage: atoll <command>".to_string() } else { format!("Usage: atoll {cmd}") };
            assert!(out.contains(&want), "atoll {cmd} {h}:\n{out}");
            if cmd != "help" {
                assert!(out.contains("Example:\n  atoll "), "atoll {cmd} {h}:\n{out}");
            }
        }
    }
    let (_, logs, _) = atoll(&["logs", "-h"]);
    assert!(logs.contains("-f, --follow") && logs.contains("-c, --container=VALUE"), "{logs}");
    let (_, pods, _) = atoll(&["help", "pods"]);
    assert!(pods.contains("-o, --output=VALUE"), "{pods}");
}

#[test]
fn usage_errors_go_to_stderr_with_exit_2() {
    let (code, out, err) = atoll(&["pods", "--strict"]);
    assert_eq!((code, out.as_str()), (2, ""));
    assert!(err.contains("unknown flag --strict for `atoll pods`"), "{err}");
    let (code, _, err) = atoll(&["frobnicate"]);
    assert_eq!(code, 2);
    assert!(err.contains("unknown command \"frobnicate\""), "{err}");
    let (code, _, err) = atoll(&["help", "frobnicate"]);
    assert_eq!(code, 2);
    assert!(err.contains("unknown command"), "{err}");
}

#[test]
fn double_dash_ends_the_flags() {
    // After `--`, `-h` is a file name (which does not exist), not a request for help.
    let (code, out, _) = atoll(&["validate", "--", "-h"]);
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("-h: error: path does not exist"), "{out}");
}
