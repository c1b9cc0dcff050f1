//! The `atoll` binary: parses the command line and runs the command (`cli` holds them all;
//! `agent` is `atoll run`'s agent). Exit codes: 0 success, 1 failure, 2 usage error.

#![forbid(unsafe_code)]

use atoll::cli::{self, Command};
use std::process::ExitCode;

fn main() -> ExitCode {
    match cli::parse(std::env::args().skip(1)) {
        Ok(Command::Version) => {
            print!("{}", atoll::version_text());
            ExitCode::SUCCESS
        }
        Ok(Command::Help(command)) => match cli::usage(command.as_deref()) {
            Some(text) => {
                print!("{text}");
                ExitCode::SUCCESS
            }
            None => usage_error(&format!("unknown command {:?}", command.unwrap_or_default())),
        },
        Ok(Command::Run(flags)) => failure("atoll", cli::run::run(&flags).map(|()| 0)),
        Ok(Command::Client { command, flags, args }) if command == "images" => {
            failure("atoll images", cli::images::run(&flags, &args))
        }
        Ok(Command::Client { command, flags, args }) if command == "exec" || command == "attach" => {
            failure(&format!("atoll {command}"), cli::exec::run(&command, &flags, &args))
        }
        Ok(Command::Client { command, flags, args }) if command == "port-forward" => {
            failure("atoll port-forward", cli::port_forward::run(&flags, &args))
        }
        Ok(Command::Client { command, flags, args }) => {
            failure(&format!("atoll {command}"), cli::local_api::run(&command, &flags, &args))
        }
        Ok(Command::Doctor(flags)) => verdict("atoll doctor", cli::doctor::run(&flags)),
        Ok(Command::Validate { flags, targets }) => verdict("atoll validate", cli::validate::run(&flags, &targets)),
        Err(e) => usage_error(&e.to_string()),
    }
}

/// Usage errors: stderr, exit 2.
fn usage_error(message: &str) -> ExitCode {
    eprintln!("atoll: {message}\nRun `atoll help` for usage.");
    ExitCode::from(2)
}

/// A check's verdict: 0 when all is well, 1 when not, 2 when the settings did not load.
fn verdict(what: &str, result: Result<bool, cli::Error>) -> ExitCode {
    match result {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(e) => {
            eprintln!("{what}: {e}");
            ExitCode::from(2)
        }
    }
}

/// A command's exit code, or its error on stderr with exit 1.
fn failure(what: &str, result: Result<u8, cli::Error>) -> ExitCode {
    match result {
        Ok(code) => ExitCode::from(code),
        Err(e) => {
            eprintln!("{what}: {e}");
            ExitCode::FAILURE
        }
    }
}
