//! The `atoll` binary: parses the command line and runs the command.
//! Exit codes: 0 success, 1 failure, 2 usage error.

use atoll::cli::{self, Command, Flags};
use atoll::config::parse_duration;
use atoll::cri::{Cri, Endpoint};
use std::process::ExitCode;

/// The `run` flags this version acts on; the others are parsed (so kubelet command lines and
/// unit files keep working) and reported as unused, never silently ignored.
const RUN_FLAGS_IN_USE: &[&str] = &["container-runtime-endpoint", "runtime-request-timeout", "v"];

const DEFAULT_RUNTIME_ENDPOINT: &str = "unix:///run/containerd/containerd.sock";

fn main() -> ExitCode {
    match cli::parse(std::env::args().skip(1)) {
        Ok(Command::Version) => {
            print!("{}", atoll::version_text());
            ExitCode::SUCCESS
        }
        Ok(Command::Help(_)) => {
            print!("{}", cli::usage());
            ExitCode::SUCCESS
        }
        Ok(Command::Run(flags)) => match run(&flags) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("atoll: {e}");
                ExitCode::FAILURE
            }
        },
        Ok(Command::Validate { .. }) => {
            eprintln!("atoll validate: manifest validation is not built yet; nothing was checked");
            ExitCode::FAILURE
        }
        Err(e) => {
            eprintln!("atoll: {e}\nRun `atoll help` for usage.");
            ExitCode::from(2)
        }
    }
}

fn init_logging(flags: &Flags) -> Result<(), String> {
    let level = match flags.get("v").unwrap_or("0") {
        "0" | "1" => log::LevelFilter::Info,
        "2" | "3" => log::LevelFilter::Debug,
        v if v.parse::<u8>().is_ok() => log::LevelFilter::Trace,
        v => return Err(format!("flag --v takes a number, got {v:?}")),
    };
    simple_logger::SimpleLogger::new().with_level(level).init().map_err(|e| format!("cannot start logging: {e}"))
}

/// Connects to the runtime and reports what it is. The pod engine is not built yet, so this
/// stops there rather than pretend to run pods.
fn run(flags: &Flags) -> Result<(), String> {
    init_logging(flags)?;
    for name in flags.names() {
        if !RUN_FLAGS_IN_USE.contains(&name) {
            log::warn!("flag --{name} is accepted but not used by this version of atoll yet");
        }
    }
    let endpoint = Endpoint::parse(flags.get("container-runtime-endpoint").unwrap_or(DEFAULT_RUNTIME_ENDPOINT))?;
    let timeout = match flags.get("runtime-request-timeout") {
        Some(t) => parse_duration(t).map_err(|e| format!("flag --runtime-request-timeout: {e}"))?,
        None => atoll::cri::client::DEFAULT_REQUEST_TIMEOUT,
    };
    let cri = Cri::new(&endpoint).with_request_timeout(timeout);
    smol::block_on(async {
        let v = cri.version().await.map_err(|e| format!("cannot reach the container runtime at {endpoint}: {e}"))?;
        log::info!(
            "connected to {} {} (CRI {}) at {endpoint}",
            v.runtime_name,
            v.runtime_version,
            v.runtime_api_version
        );
        let status = cri.status(false).await.map_err(|e| e.to_string())?;
        for c in status.status.map(|s| s.conditions).unwrap_or_default() {
            log::info!(
                "runtime condition {}={}{}",
                c.r#type,
                c.status,
                if c.reason.is_empty() { String::new() } else { format!(" ({}: {})", c.reason, c.message) }
            );
        }
        log::info!("nothing to run yet: the pod engine is not built in this version of atoll");
        Ok(())
    })
}
