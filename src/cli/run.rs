//! `atoll run` as a process: logging at `--v`'s level, the settings from flags and files,
//! the signals turned into the agent's commands (SIGTERM and SIGINT stop it, SIGHUP re-reads
//! the settings and hands them over), then [`crate::agent::run`].

use super::{Flag, Flags};
use crate::agent::{self, Command};
use crate::config::Settings;

pub fn run(flags: &Flags) -> Result<(), super::error::Error> {
    init_logging(flags)?;
    for flag in flags.given().into_iter().filter(|f| !f.spec().in_use) {
        log::warn!("flag --{} is accepted but not used by this version of atoll yet", flag.name());
    }
    let settings = Settings::load(flags)?;
    crate::metrics::config_read(true);
    for note in &settings.config_notes {
        log::warn!("{note}");
    }
    let mut signals =
        async_signal::Signals::new([async_signal::Signal::Term, async_signal::Signal::Int, async_signal::Signal::Hup])
            .map_err(|e| format!("cannot handle signals: {e}"))?;
    let flags = flags.clone();
    smol::block_on(async {
        let (tx, rx) = smol::channel::bounded(4);
        let _signals = crate::task::spawn(async move {
            use smol::stream::StreamExt;
            while let Some(Ok(sig)) = signals.next().await {
                let command = match sig {
                    // kubelet_node_config_error: 1 while a reload could not read the config.
                    async_signal::Signal::Hup => match Settings::load(&flags) {
                        Ok(s) => {
                            crate::metrics::config_read(true);
                            Command::Reload(Box::new(s))
                        }
                        Err(e) => {
                            crate::metrics::config_read(false);
                            log::error!("SIGHUP: config not reloaded, keeping the current settings: {e}");
                            continue;
                        }
                    },
                    other => Command::Stop(format!("{other:?}")),
                };
                if tx.send(command).await.is_err() {
                    return;
                }
            }
        });
        agent::run(settings, rx).await.map_err(Into::into)
    })
}

/// Logging at `--v`'s level: 0-1 info, 2-3 debug, 4 and up trace.
fn init_logging(flags: &Flags) -> Result<(), super::error::Error> {
    let level = match flags.get(Flag::Verbosity).unwrap_or("0") {
        "0" | "1" => log::LevelFilter::Info,
        "2" | "3" => log::LevelFilter::Debug,
        v if v.parse::<u8>().is_ok() => log::LevelFilter::Trace,
        v => return Err(format!("flag --v takes a number, got {v:?}").into()),
    };
    // Verbosity is atoll's own. The HTTP and TLS libraries' debug and trace lines print
    // request headers (the mirror's bearer token, --manifest-url-header values), so they never
    // pass, at any verbosity.
    let mut logger = simple_logger::SimpleLogger::new().with_level(level);
    for module in ["rustls", "h2", "futures_rustls"] {
        logger = logger.with_module_level(module, log::LevelFilter::Info);
    }
    logger.init().map_err(|e| format!("cannot start logging: {e}").into())
}
