//! Process exits, for runtimes that send no container events (containerd 1.6): a pidfd on the
//! process of each running container and ready sandbox wakes its pod's worker when it ends.
//!
//! The pid comes from the runtime's verbose status (`info["info"]`, JSON with a `pid`, as
//! containerd and CRI-O report it), which also shows the container running: the sync's own
//! look asks the statuses of processes it wants pids of ([`Exits::wants_pid`]) verbose (a
//! start's follow-up reads its sandbox's and containers' statuses), so a watch mostly costs
//! no call; a process the look showed without its pid, or whose pid is no longer its own,
//! costs one. A pid is trusted only when the pidfd opened on it is a process in a cgroup
//! named after the container. A pidfd refers to one process for good; for it to be another
//! than the container's, that one's pid would have to be given again between the status and
//! the read of its cgroup (a moment, or the length of the sync that read it: the kernel's
//! pids going round meanwhile) to a process in the container's own cgroup. When the process
//! ends, the runtime records the exit a moment later (containerd 1.6: 10 to 40 ms, after it
//! has deleted the task); the worker is woken once it has, asked every 2 ms at first so a
//! restart waits for the runtime, not for a step of a back-off. A process atoll stops
//! itself ([`Exits::expect`]) wakes its worker at once: CRI's StopContainer and
//! StopPodSandbox answer only once the exit is recorded, so the worker's next sync, after
//! the stop, sees it without the runtime being asked meanwhile. Anything that cannot be
//! watched is left to the relist. At most [`MAX_WATCHED`] processes are watched (one
//! descriptor each).

use crate::cri::RuntimeService;
use crate::node::observed::{ContainerState, Observed};
use crate::runtime::observe::pid_of;
use smol::Async;
use std::collections::HashMap;
use std::os::fd::OwnedFd;
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::time::Duration;

/// The most processes watched at once; the rest are left to the relist.
pub const MAX_WATCHED: usize = 512;
/// How long the runtime may take to record an exit after the process has gone.
const RECORDED_WITHIN: Duration = Duration::from_secs(2);
/// How often the runtime is asked at first whether it has recorded an exit, and for how long.
const FIRST_STEP: Duration = Duration::from_millis(2);
const FIRST_STEPS_FOR: Duration = Duration::from_millis(100);

/// The pause before asking again, after `waited` in all and a last pause of `last`: every
/// [`FIRST_STEP`] while the runtime usually records an exit, then doubling up to 100 ms.
fn next_pause(waited: Duration, last: Duration) -> Duration {
    if waited < FIRST_STEPS_FOR {
        FIRST_STEP
    } else {
        (last * 2).min(Duration::from_millis(100))
    }
}

/// Wakes the worker of a pod UID.
pub type Wake = Box<dyn Fn(&str) + Send + Sync>;

/// The processes watched (or found unwatchable), by container or sandbox ID.
pub struct Exits {
    watched: Mutex<HashMap<String, Entry>>,
    /// Never sent on: when this goes, its receivers see it closed and their watches end.
    closing: (smol::channel::Sender<()>, smol::channel::Receiver<()>),
    wake: Wake,
}

impl Exits {
    /// Watches that call `wake` with a pod's UID when one of its processes has ended.
    pub fn new(wake: Wake) -> Arc<Exits> {
        Arc::new(Exits { watched: Mutex::new(HashMap::new()), closing: smol::channel::bounded(1), wake })
    }

    /// atoll is about to stop `id` (a container or a sandbox) itself: when its process ends,
    /// the worker is woken at once, not after asking the runtime (the stop's own answer comes
    /// once the runtime has recorded the exit, and the worker syncs after it).
    pub fn expect(&self, id: &str) {
        self.set_expected(id, true);
    }

    /// The stop of `id` failed: the runtime may not have recorded an exit, so when one comes
    /// it is waited for as a crash's is.
    pub fn not_stopped(&self, id: &str) {
        self.set_expected(id, false);
    }

    /// Whether a look at the runtime should ask the pid of process `id`: it is neither watched
    /// nor found unwatchable yet, and there is room to watch it.
    pub fn wants_pid(&self, id: &str) -> bool {
        let watched = crate::locks::lock(&self.watched);
        !watched.contains_key(id) && watched.len() < MAX_WATCHED
    }

    fn set_expected(&self, id: &str, expected: bool) {
        if let Some(e) = crate::locks::lock(&self.watched).get_mut(id) {
            e.expected = expected;
        }
    }
}

struct Entry {
    uid: String,
    watching: bool,
    /// atoll stops it itself (`expect`).
    expected: bool,
}

/// Whether this kernel has pidfds (Linux 5.3 and later).
pub fn supported() -> bool {
    static SUPPORTED: OnceLock<bool> = OnceLock::new();
    *SUPPORTED.get_or_init(|| {
        rustix::process::pidfd_open(rustix::process::getpid(), rustix::process::PidfdFlags::empty()).is_ok()
    })
}

/// A process to watch: its container's or sandbox's ID, whether a sandbox's, and its pid if
/// the look showed it.
struct Process {
    id: String,
    sandbox: bool,
    pid: Option<i32>,
}

/// Watches what `obs` shows running for pod `uid` and is not watched yet.
pub fn watch<R: RuntimeService>(exits: &Arc<Exits>, rt: &R, uid: &str, obs: &Observed) {
    let sandboxes = obs.sandboxes.iter().filter(|s| s.ready).map(|s| (s.id.clone(), true, s.pid));
    let containers = obs.containers.iter().filter(|c| c.state == ContainerState::Running);
    let running: Vec<Process> = sandboxes
        .chain(containers.map(|c| (c.id.to_string(), false, c.pid)))
        .map(|(id, sandbox, pid)| Process { id, sandbox, pid })
        .collect();
    let mut watched = crate::locks::lock(&exits.watched);
    // What could not be watched is looked at again once it is no longer running.
    watched.retain(|id, e| e.watching || e.uid != uid || running.iter().any(|r| &r.id == id));
    for p in running {
        if watched.contains_key(&p.id) || watched.len() >= MAX_WATCHED {
            continue;
        }
        watched.insert(p.id.clone(), Entry { uid: uid.to_string(), watching: true, expected: false });
        let task = one(rt.clone(), Arc::downgrade(exits), exits.closing.1.clone(), uid.to_string(), p);
        crate::task::spawn(task).detach();
    }
}

/// Watches one process until it ends (then wakes the worker) or the PLEG goes.
async fn one<R: RuntimeService>(
    rt: R,
    exits: Weak<Exits>,
    closed: smol::channel::Receiver<()>,
    uid: String,
    p: Process,
) {
    let (id, sandbox) = (p.id.as_str(), p.sandbox);
    let fd = match open(&rt, &p).await {
        Opened::Watch(fd) => fd,
        Opened::Gone => return recorded(&rt, &exits, &uid, id, sandbox).await,
        Opened::Unwatchable(why) => {
            log::debug!("not watching the process of {id}: {why}; the relist will see it end");
            if let Some(x) = exits.upgrade() {
                if let Some(e) = crate::locks::lock(&x.watched).get_mut(id) {
                    e.watching = false;
                }
            }
            return;
        }
    };
    let ended = smol::future::or(async { fd.readable().await.is_ok() }, async {
        let _ = closed.recv().await;
        false
    })
    .await;
    if ended {
        recorded(&rt, &exits, &uid, id, sandbox).await;
    }
}

/// The process of `id` has ended: waits (briefly) until the runtime has recorded it, unless
/// atoll stopped it itself, then wakes the pod's worker.
async fn recorded<R: RuntimeService>(rt: &R, exits: &Weak<Exits>, uid: &str, id: &str, sandbox: bool) {
    let expected = exits.upgrade().is_some_and(|x| crate::locks::lock(&x.watched).get(id).is_some_and(|e| e.expected));
    let mut pause = FIRST_STEP;
    let mut waited = Duration::ZERO;
    while !expected && waited < RECORDED_WITHIN && running(rt, id, sandbox).await.unwrap_or(false) {
        smol::Timer::after(pause).await;
        waited += pause;
        pause = next_pause(waited, pause);
    }
    if let Some(x) = exits.upgrade() {
        crate::locks::lock(&x.watched).remove(id);
        (x.wake)(uid);
    }
}

/// What opening a watch on a process came to.
enum Opened {
    Watch(Async<OwnedFd>),
    /// The process has ended already.
    Gone,
    Unwatchable(String),
}

/// A pidfd on the process of `p`: its pid as the look showed it, else (or if that pid is no
/// longer in the container's cgroup: the look may be as old as its sync) from one verbose
/// status call, which shows both whether it runs and its pid.
async fn open<R: RuntimeService>(rt: &R, p: &Process) -> Opened {
    let opened = p.pid.map(|pid| open_pid(&p.id, pid));
    if let Some(opened @ (Opened::Watch(_) | Opened::Gone)) = opened {
        return opened;
    }
    match pid_shown(rt, &p.id, p.sandbox).await {
        Ok(pid) => open_pid(&p.id, pid),
        Err(opened) => opened,
    }
}

/// A pidfd on `pid`, if it is the process of container (or sandbox) `id`.
fn open_pid(id: &str, pid: i32) -> Opened {
    use rustix::io::Errno;
    let Some(raw) = rustix::process::Pid::from_raw(pid) else { return Opened::Unwatchable("pid 0".into()) };
    let fd = match rustix::process::pidfd_open(raw, rustix::process::PidfdFlags::empty()) {
        Ok(fd) => fd,
        Err(Errno::SRCH) => return Opened::Gone,
        Err(e) => return Opened::Unwatchable(format!("pidfd_open({pid}): {e}")),
    };
    // The pidfd is the process that has the pid now: the container's, if it is in a cgroup
    // named after the container (another process would have had to be given the pid after
    // the container's ended and before this read, which takes the kernel's pids going round,
    // and be in its cgroup).
    match crate::bounded::read_file(std::path::Path::new(&format!("/proc/{pid}/cgroup")), 64 << 10) {
        Ok(cgroup) if in_cgroup_of(&cgroup, id) => match Async::new(fd) {
            Ok(fd) => Opened::Watch(fd),
            Err(e) => Opened::Unwatchable(e.to_string()),
        },
        Ok(_) => Opened::Unwatchable(format!("process {pid} is not in a cgroup of {id}")),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound || e.raw_os_error() == Some(Errno::SRCH.raw_os_error()) => {
            Opened::Gone // reaped meanwhile
        }
        Err(e) => Opened::Unwatchable(format!("/proc/{pid}/cgroup: {e}")),
    }
}

/// The pid of `id` from one verbose status, which also shows it running (else what to make of
/// the watch instead).
async fn pid_shown<R: RuntimeService>(rt: &R, id: &str, sandbox: bool) -> Result<i32, Opened> {
    use crate::cri::api::{ContainerState as Cri, PodSandboxState};
    let shown = if sandbox {
        let r = rt.pod_sandbox_status(id, true).await;
        r.map(|r| (r.status.is_some_and(|s| s.state == PodSandboxState::SandboxReady as i32), r.info))
    } else {
        let r = rt.container_status(id, true).await;
        r.map(|r| (r.status.is_some_and(|s| s.state == Cri::ContainerRunning as i32), r.info))
    };
    match shown {
        Ok((true, info)) => {
            pid_of(&info).ok_or_else(|| Opened::Unwatchable("the runtime's verbose status shows no pid".into()))
        }
        Ok((false, _)) => Err(Opened::Gone),
        Err(e) if e.is_not_found() => Err(Opened::Gone),
        Err(e) => Err(Opened::Unwatchable(e.to_string())),
    }
}

/// Whether the runtime shows `id` running (a sandbox: ready).
async fn running<R: RuntimeService>(rt: &R, id: &str, sandbox: bool) -> Result<bool, crate::cri::Status> {
    use crate::cri::api::{ContainerState as Cri, PodSandboxState};
    if sandbox {
        let st = rt.pod_sandbox_status(id, false).await?;
        Ok(st.status.is_some_and(|s| s.state == PodSandboxState::SandboxReady as i32))
    } else {
        let st = rt.container_status(id, false).await?;
        Ok(st.status.is_some_and(|s| s.state == Cri::ContainerRunning as i32))
    }
}

/// Whether `/proc/PID/cgroup` text puts the process in a cgroup named after container `id`.
fn in_cgroup_of(cgroup: &[u8], id: &str) -> bool {
    !id.is_empty()
        && String::from_utf8_lossy(cgroup).lines().any(|l| l.rsplit(':').next().is_some_and(|p| p.contains(id)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_process_belongs_to_a_container_by_its_cgroup() {
        let id = "0123456789abcdef";
        assert!(in_cgroup_of(b"0::/k8s.io/0123456789abcdef\n", id));
        assert!(in_cgroup_of(b"12:memory:/kubepods/pod1/0123456789abcdef\n1:name=systemd:/x\n", id));
        assert!(in_cgroup_of(b"0::/system.slice/cri-containerd-0123456789abcdef.scope\n", id));
        assert!(!in_cgroup_of(b"0::/user.slice/session-1.scope\n", id));
        assert!(!in_cgroup_of(b"0::/k8s.io/0123456789abcdef\n", ""));
    }

    #[test]
    fn a_stop_marks_the_exit_expected_and_a_failed_stop_takes_it_back() {
        let x = Exits::new(Box::new(|_| {}));
        let entry = Entry { uid: "u".into(), watching: true, expected: false };
        crate::locks::lock(&x.watched).insert("c1".into(), entry);
        let expected = |id: &str| crate::locks::lock(&x.watched).get(id).map(|e| e.expected);
        x.expect("c1");
        assert_eq!(expected("c1"), Some(true));
        x.not_stopped("c1");
        assert_eq!(expected("c1"), Some(false), "a failed stop: the exit is waited for as a crash's");
        x.expect("gone");
        assert_eq!(expected("gone"), None, "nothing watched, nothing marked");
    }

    #[test]
    fn an_exit_is_looked_for_every_2_ms_at_first_then_less_often() {
        let ms = Duration::from_millis;
        for (waited, last, next) in
            [(0, 2, 2), (50, 2, 2), (98, 2, 2), (100, 2, 4), (108, 4, 8), (200, 64, 100), (1900, 100, 100)]
        {
            assert_eq!(next_pause(ms(waited), ms(last)), ms(next), "after {waited} ms, the last pause {last} ms");
        }
        // Within the 2 s the runtime has, it is asked about 50 times in the first 100 ms, then
        // about 25 times more.
        let (mut waited, mut pause, mut asked) = (Duration::ZERO, FIRST_STEP, 0);
        while waited < RECORDED_WITHIN {
            waited += pause;
            pause = next_pause(waited, pause);
            asked += 1;
        }
        assert!((60..=90).contains(&asked), "{asked}");
    }

    #[test]
    fn this_kernel_has_pidfds() {
        // The test machines run Linux 5.3 or later; an older kernel falls back to the relist.
        assert!(supported());
    }
}
