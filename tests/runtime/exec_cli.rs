//! `atoll exec`, `attach` and `port-forward` on a node with no cluster (no kubeconfig), through
//! the local API socket, against a real containerd: output, stdin and exit status exact, a
//! terminal with its size and resize, attach, 100 MiB forwarded with equal checksums, a port
//! nothing listens on, clear errors, and a local user who is not root kept out.

use crate::common;

use common::pods::{FILES, READER};
use common::{eventually, testbed, Agent};
use std::io::BufRead;
use std::process::{Command, Stdio};
use std::time::Duration;

/// `atoll ARGS` against `agent` with `stdin` fed: (exit code, stdout, stderr); killed after two
/// minutes.
fn atoll(agent: &Agent, args: &[&str], stdin: &[u8]) -> (i32, Vec<u8>, String) {
    let bin = common::atoll_command();
    let mut all: Vec<std::ffi::OsString> = bin.get_args().map(Into::into).collect();
    // The socket before any `--`.
    all.push(args[0].into());
    all.push(format!("--api-socket={}", agent.socket.display()).into());
    all.extend(args[1..].iter().map(|a| a.into()));
    common::run_fed(bin.get_program(), &all, stdin)
}

/// The shell words that run this build's `atoll` (under its runner when cross-built), up to
/// the command.
fn atoll_words() -> String {
    let bin = common::atoll_command();
    let mut words: Vec<String> = vec![bin.get_program().to_string_lossy().into_owned()];
    words.extend(bin.get_args().map(|a| a.to_string_lossy().into_owned()));
    words.join(" ")
}

/// A shell with a terminal of its own, for `attach -t`.
const TERM: &str = "apiVersion: v1\nkind: Pod\nmetadata: {name: term}\nspec:\n  restartPolicy: Never\n  containers:\n  - name: c\n    image: docker.io/library/busybox:1.36\n    stdin: true\n    tty: true\n    command: [sh]\n";

#[test]
fn atoll_exec_attach_and_port_forward_reach_pods_with_no_cluster() {
    let _room = common::room(module_path!());
    let tb = testbed();
    let dir = crate::common::Scratch::new("exec-cli");
    std::fs::create_dir_all(dir.join("manifests")).unwrap();
    std::fs::write(dir.join("manifests/files.yaml"), FILES).unwrap();
    std::fs::write(dir.join("manifests/reader.yaml"), READER).unwrap();
    std::fs::write(dir.join("manifests/term.yaml"), TERM).unwrap();
    let agent = Agent::start(tb, &dir, "fileCheckFrequency: 1s\n", &[], &[]);
    eventually(Duration::from_secs(90), "the blob served and the reader running", || {
        let running = |p: &str| agent.pod(p).is_some_and(|p| p["status"]["phase"] == "Running");
        let (code, _, _) = atoll(&agent, &["exec", "files-tb", "--", "test", "-f", "/www/blob"], b"");
        (code == 0 && running("reader-tb") && running("term-tb")).then_some(())
    });

    // Every byte and the exit status, with kubectl's line for it.
    let (code, out, err) =
        atoll(&agent, &["exec", "files-tb", "--", "sh", "-c", "head -c 10485760 /dev/zero; exit 7"], b"");
    assert_eq!((code, err.as_str()), (7, "command terminated with exit code 7\n"));
    assert_eq!(out.len(), 10 << 20, "exactly 10 MiB");
    assert!(out.iter().all(|b| *b == 0));
    // stdin through and closed: 4 MiB in, its checksum out; stderr apart.
    let input: Vec<u8> = (0..4u32 << 20).map(|i| (i.wrapping_mul(2654435761) >> 13) as u8).collect();
    let (code, out, err) =
        atoll(&agent, &["exec", "-i", "files-tb", "--", "sh", "-c", "sha256sum; echo done >&2"], &input);
    assert_eq!(code, 0, "{err}");
    assert_eq!(String::from_utf8_lossy(&out).split(' ').next(), Some(common::pods::sha256_hex(&input).as_str()));
    assert_eq!(err, "done\n");
    // -t asks for a terminal it does not have: said, and run without.
    let (code, out, err) = atoll(&agent, &["exec", "-it", "files-tb", "--", "echo", "plain"], b"");
    assert_eq!((code, out.as_slice()), (0, &b"plain\n"[..]));
    assert!(err.contains("Unable to use a TTY - input is not a terminal"), "{err}");

    // A terminal (script(1) gives atoll one): a pseudo-terminal in the container, the size
    // atoll's terminal had at the start, then the size it was changed to (SIGWINCH).
    let command = format!(
        "stty cols 123 rows 45; (sleep 3; stty cols 99 rows 33 </dev/tty) & exec {} exec --api-socket={} -it files-tb -- sh",
        atoll_words(),
        agent.socket.display()
    );
    let (code, text) = common::in_terminal(&command, b"stty size; sleep 6; stty size; tty; exit 3\n");
    assert!(text.contains("45 123") && text.contains("33 99") && text.contains("/dev/pts/"), "{text}");
    assert_eq!(code, Some(3), "{text}");

    // attach -t to a container with a terminal: its shell answers, and its exit ends the session.
    let command = format!("{} attach --api-socket={} -it term-tb", atoll_words(), agent.socket.display());
    let (code, text) = common::in_terminal(&command, b"\necho $((6*7)); tty; exit 0\n");
    assert!(text.contains("42") && text.contains("/dev/pts/"), "{text}");
    assert!(text.contains("If you don't see a command prompt, try pressing enter."), "kubectl's hint: {text}");
    assert_eq!(code, Some(0), "{text}");

    // attach: stdin to the main process, its answers back; stdinOnce ends it with the session.
    let (code, out, err) = atoll(&agent, &["attach", "-i", "reader-tb"], b"hello\nworld\n");
    assert_eq!(code, 0, "{err}");
    let out = String::from_utf8_lossy(&out);
    assert!(out.contains("got hello") && out.contains("got world"), "{out}");

    // Errors say what is wrong, and the usage is kubectl's.
    let (code, _, err) = atoll(&agent, &["exec", "nope", "--", "true"], b"");
    assert_eq!(code, 1);
    assert!(err.contains("pods \"nope\" not found"), "{err}");
    let (code, _, err) = atoll(&agent, &["exec", "files-tb", "-c", "nope", "--", "true"], b"");
    assert_eq!(code, 1);
    assert!(err.contains("container \"nope\" is not running"), "{err}");
    let (code, _, err) = atoll(&agent, &["exec", "files-tb", "true"], b"");
    assert_eq!(code, 2, "{err}");
    // A local user who is not root gets no session.
    let (code, out, err) = atoll(&agent, &["exec", "files-tb", "--", "sh", "-c", "echo ran; touch /tmp/ran"], b"");
    assert_eq!((code, out.as_slice()), (0, &b"ran\n"[..]), "{err}");
    let bin = common::atoll_command();
    let nobody = Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
        .arg(bin.get_program())
        .args(bin.get_args())
        .args(["exec", &format!("--api-socket={}", agent.socket.display()), "files-tb", "--", "rm", "/tmp/ran"])
        .output()
        .unwrap();
    assert_eq!(nobody.status.code(), Some(1), "{nobody:?}");
    assert_eq!(atoll(&agent, &["exec", "files-tb", "--", "test", "-f", "/tmp/ran"], b"").0, 0, "nothing ran");

    // port-forward: 100 MiB from the pod's own network, every byte; a port nothing listens on
    // fails that connection only.
    let (_, sum, _) = atoll(&agent, &["exec", "files-tb", "--", "sha256sum", "/www/blob"], b"");
    let expected = String::from_utf8_lossy(&sum).split(' ').next().unwrap().to_string();
    let bin = common::atoll_command();
    let mut forward = Command::new(bin.get_program())
        .args(bin.get_args())
        .args(["port-forward", "pod/files-tb", ":8080", ":9"])
        .arg(format!("--api-socket={}", agent.socket.display()))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut said = std::io::BufReader::new(forward.stdout.take().unwrap());
    let mut lines = vec![];
    while lines.len() < 4 {
        let mut line = String::new();
        assert!(said.read_line(&mut line).unwrap() > 0, "port-forward said {lines:?}");
        lines.push(line);
    }
    assert!(lines[1].starts_with("Forwarding from [::1]:") && lines[1].ends_with(" -> 8080\n"), "{lines:?}");
    let (blob_port, closed_port) = (common::pods::forwarded_port(&lines[0]), common::pods::forwarded_port(&lines[2]));
    let body = common::pods::http_get(blob_port, "/blob");
    assert_eq!(body.len(), 100 << 20);
    assert_eq!(common::pods::sha256_hex(&body), expected, "the same bytes");
    let mut refused = std::net::TcpStream::connect(("127.0.0.1", closed_port)).unwrap();
    refused.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let mut got = vec![];
    assert_eq!(std::io::Read::read_to_end(&mut refused, &mut got).ok(), Some(0), "closed, nothing sent");
    let missing = common::pods::http_get(blob_port, "/nope");
    assert!(String::from_utf8_lossy(&missing).contains("404"), "the session goes on");
    interrupt(forward.id());
    let status = forward.wait().unwrap();
    let mut err = String::new();
    std::io::Read::read_to_string(&mut forward.stderr.take().unwrap(), &mut err).unwrap();
    assert_eq!(status.code(), Some(0), "interrupted is done: {err}");
    assert!(err.contains(&format!("an error occurred forwarding {closed_port} -> 9")), "{err}");
    drop(agent);
    let _ = std::fs::remove_dir_all(&dir);
}

/// SIGINT, as Ctrl-C sends it.
fn interrupt(pid: u32) {
    Command::new("kill").args(["-INT", &pid.to_string()]).status().unwrap();
}
