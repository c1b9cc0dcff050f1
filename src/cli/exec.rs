//! `atoll exec` and `atoll attach`: kubectl's, from the box, through the local API socket
//! (root only): the agent splices the session onto the runtime's streaming server, and this
//! side speaks the streams kubectl speaks (SPDY/3.1, `v4.channel.k8s.io`): an error stream
//! carrying the exit status, stdin, stdout, stderr, and with `-t` a raw terminal and a resize
//! stream fed by SIGWINCH. The exit code is the command's, as kubectl's is.

use super::error::Error;
use super::local_api::{default_container, escape, get_json, pod_path, upgrade};
use super::render::str_of;
use super::spdy::{Collect, Session, Sink, EXEC_PROTOCOL};
use super::{Flag, Flags};
use serde_json::Value;
use std::io::{self, Read, Write};
use std::sync::{Arc, Mutex};

/// Writes a stream's data to stdout or stderr.
struct Out(bool);

impl Sink for Out {
    fn data(&mut self, bytes: &[u8]) -> io::Result<()> {
        if self.0 {
            let mut out = io::stdout().lock();
            out.write_all(bytes).and_then(|()| out.flush())
        } else {
            io::stderr().lock().write_all(bytes)
        }
    }
    fn end(&mut self, _: bool) {}
}

/// A stream only this side writes.
struct Ignore;

impl Sink for Ignore {
    fn data(&mut self, _: &[u8]) -> io::Result<()> {
        Ok(())
    }
    fn end(&mut self, _: bool) {}
}

/// The exit code in the error stream's `Status` (v4): 0 for none or Success, the
/// `ExitCode` cause's for NonZeroExitCode; any other failure is its message.
fn exit_code(status: &[u8]) -> Result<u8, Error> {
    if status.is_empty() {
        return Ok(0);
    }
    let v: Value = serde_json::from_slice(status).map_err(|e| Error::Protocol(e.to_string()))?;
    match (str_of(&v, &["status"]), str_of(&v, &["reason"])) {
        ("Success", _) => Ok(0),
        ("Failure", "NonZeroExitCode") => {
            let causes = v["details"]["causes"].as_array().into_iter().flatten();
            let code = causes.filter(|c| c["reason"] == "ExitCode").find_map(|c| c["message"].as_str());
            let code = code.ok_or_else(|| Error::Protocol("no ExitCode cause given".into()))?;
            code.parse().map_err(|_| Error::Protocol(format!("invalid exit code value {code:?}")))
        }
        ("Failure", _) => Err(Error::Refused(str_of(&v, &["message"]).to_string())),
        _ => Err(Error::Protocol("unknown error".into())),
    }
}

/// The terminal in raw mode while this lives; restored when it goes.
struct Raw(rustix::termios::Termios);

impl Raw {
    fn enter() -> Option<Raw> {
        let saved = rustix::termios::tcgetattr(io::stdin()).ok()?;
        let mut raw = saved.clone();
        raw.make_raw();
        rustix::termios::tcsetattr(io::stdin(), rustix::termios::OptionalActions::Now, &raw).ok()?;
        Some(Raw(saved))
    }
}

impl Drop for Raw {
    fn drop(&mut self) {
        let _ = rustix::termios::tcsetattr(io::stdin(), rustix::termios::OptionalActions::Now, &self.0);
    }
}

/// The terminal's size as kubectl's resize stream sends it.
fn size() -> Option<String> {
    let fd = if rustix::termios::isatty(io::stdout()) {
        rustix::termios::tcgetwinsize(io::stdout())
    } else {
        rustix::termios::tcgetwinsize(io::stdin())
    };
    let w = fd.ok().filter(|w| w.ws_col > 0)?;
    Some(format!("{{\"Width\":{},\"Height\":{}}}\n", w.ws_col, w.ws_row))
}

/// Runs `f` on a thread of its own (one instantiation for every caller).
pub(super) fn background(f: Box<dyn FnOnce() + Send>) {
    std::thread::spawn(f);
}

/// Calls `on` on a thread of its own with each of `signals` as it comes.
pub(super) fn on_signals(signals: &[async_signal::Signal], mut on: Box<dyn FnMut(async_signal::Signal) + Send>) {
    let Ok(mut signals) = async_signal::Signals::new(signals.iter().copied()) else { return };
    background(Box::new(move || {
        use smol::stream::StreamExt;
        while let Some(Ok(signal)) = smol::block_on(signals.next()) {
            on(signal);
        }
    }));
}

/// Sends the terminal's size now and at each SIGWINCH; SIGTERM, SIGHUP or SIGINT put the
/// terminal back and end the command (in raw mode the keyboard sends no signals).
fn watch_terminal(session: Arc<Session>, resize: u32, saved: rustix::termios::Termios) {
    use async_signal::Signal;
    let send_size = move || {
        if let Some(s) = size() {
            let _ = session.send(resize, s.as_bytes());
        }
    };
    send_size();
    let on = move |signal| {
        if signal != Signal::Winch {
            drop(Raw(saved.clone())); // the terminal back as it was
            std::process::exit(1);
        }
        send_size();
    };
    on_signals(&[Signal::Winch, Signal::Term, Signal::Hup, Signal::Int], Box::new(on));
}

/// Copies stdin to the stream `id` until it ends, then half-closes the stream.
fn pump_stdin(session: Arc<Session>, id: u32) {
    background(Box::new(move || {
        let mut buf = vec![0u8; 32 << 10];
        let mut stdin = io::stdin().lock();
        loop {
            match stdin.read(&mut buf) {
                Ok(0) => break,
                Ok(n) if session.send(id, &buf[..n]).is_ok() => {}
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                _ => break,
            }
        }
        let _ = session.finish(id);
    }));
}

/// `atoll exec POD -- CMD...` (`args` = the pod, then the command) or `atoll attach POD`.
pub fn run(command: &str, flags: &Flags, args: &[String]) -> Result<u8, Error> {
    let path = pod_path(flags, &args[0]);
    let pod = get_json(flags, "GET", &format!("/pods/{path}"))?;
    let phase = str_of(&pod, &["status", "phase"]);
    if matches!(phase, "Succeeded" | "Failed") {
        return Err(format!("cannot {command} into a container in a completed pod; current phase is {phase}").into());
    }
    let container = match flags.get(Flag::Container) {
        Some(c) => c.to_string(),
        None => default_container(flags, &pod)?,
    };
    let quiet = flags.is_set(Flag::Quiet);
    let stdin = flags.is_set(Flag::Stdin);
    let mut tty = flags.is_set(Flag::Tty);
    if command == "attach" {
        // kubectl's attach follows the container: a terminal only if it has one, and then always.
        let spec = pod["spec"]["containers"].as_array().into_iter().flatten().find(|c| c["name"] == container.as_str());
        let has_tty = spec.is_some_and(|c| c["tty"] == true);
        if tty && !has_tty && !quiet {
            eprintln!("error: Unable to use a TTY - container {container} did not allocate one");
        }
        tty = has_tty;
    }
    if !stdin {
        tty = false; // as kubectl: no input, no terminal
    } else if tty && !rustix::termios::isatty(io::stdin()) {
        tty = false;
        if !quiet {
            eprintln!("Unable to use a TTY - input is not a terminal or the right kind of file");
        }
    }
    let mut query = vec!["output=1".to_string()];
    query.push(if tty { "tty=1" } else { "error=1" }.to_string());
    if stdin {
        query.push("input=1".into());
    }
    query.extend(args[1..].iter().map(|c| format!("command={}", escape(c))));
    let url = format!("/{command}/{path}/{}?{}", escape(&container), query.join("&"));
    let (reader, writer) = upgrade(flags, &url, EXEC_PROTOCOL)?;
    let session = Session::new(Box::new(writer));
    let status = Arc::new(Mutex::new((Vec::new(), None)));
    let open = |kind: &str, sink: Box<dyn Sink>| session.open(&[("streamtype", kind)], sink);
    open("error", Box::new(Collect(status.clone())))?;
    let stdin_id = if stdin { Some(open("stdin", Box::new(Ignore))?) } else { None };
    open("stdout", Box::new(Out(true)))?;
    let mut raw = None;
    if tty {
        let resize = open("resize", Box::new(Ignore))?;
        raw = Raw::enter();
        if let Some(Raw(saved)) = &raw {
            watch_terminal(session.clone(), resize, saved.clone());
        }
        if command == "attach" && !quiet {
            eprint!("If you don't see a command prompt, try pressing enter.\r\n");
        }
    } else {
        open("stderr", Box::new(Out(false)))?;
    }
    if let Some(id) = stdin_id {
        pump_stdin(session.clone(), id);
    }
    let read = session.run(reader);
    drop(raw);
    let (message, ended) = status.lock().map(|s| s.clone()).unwrap_or_default();
    read.map_err(|source| Error::Session { what: "the session broke", source })?;
    if ended != Some(true) && message.is_empty() {
        let why = "the session ended without an exit status (the agent or the runtime went away)";
        return Err(Error::Failed(why.into()));
    }
    let code = exit_code(&message)?;
    if code != 0 {
        eprintln!("command terminated with exit code {code}");
    }
    Ok(code)
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_exit_status_is_read_as_kubectl_reads_it() {
        let exit_code = |status: &[u8]| super::exit_code(status).map_err(|e| e.to_string());
        assert_eq!(exit_code(b""), Ok(0));
        assert_eq!(exit_code(br#"{"metadata":{},"status":"Success"}"#), Ok(0));
        let failed = br#"{"metadata":{},"status":"Failure","message":"command terminated with non-zero exit code: error executing command [sh -c exit 7], exit code 7","reason":"NonZeroExitCode","details":{"causes":[{"reason":"ExitCode","message":"7"}]}}"#;
        assert_eq!(exit_code(failed), Ok(7));
        let no_cause = br#"{"status":"Failure","reason":"NonZeroExitCode","details":{"causes":[]}}"#;
        assert_eq!(exit_code(no_cause), Err("error stream protocol error: no ExitCode cause given".into()));
        let big = br#"{"status":"Failure","reason":"NonZeroExitCode","details":{"causes":[{"reason":"ExitCode","message":"256"}]}}"#;
        assert!(exit_code(big).unwrap_err().contains("invalid exit code value \"256\""));
        let other = br#"{"status":"Failure","message":"container not found (\"c\")"}"#;
        assert_eq!(exit_code(other), Err("container not found (\"c\")".into()));
        assert!(exit_code(b"not json").is_err());
    }
}
