//! The files on the host that a sync's container starts need, made on the blocking pool: the
//! pod's log directory, its volume directories and hostPath checks
//! (`volumes::poddir::prepare_volumes`), its managed hosts file, and each starting container's
//! log directory and fresh termination-log file.
//!
//! kubelet makes them on the pod's own goroutine. atoll's pod workers share one executor
//! thread, so on it a slow disk or a hung hostPath mount would stall every pod, and ten pods
//! starting at once would make their files one after another. When a sandbox is made, they
//! are made while RunPodSandbox runs, as none needs the sandbox. The exception is a
//! pod-network pod's hosts file, which names the pod's IP: it is written once the sandbox has
//! one ([`complete`]). The pod's log directory is made first, also while RunPodSandbox runs
//! (alone, [`log_directory`], if nothing starts). kubelet makes it just before RunPodSandbox,
//! but no runtime needs it before a container is created (CRI-O makes it itself, 0700), and a wait
//! for it sent RunPodSandbox through the blocking pool's queue (the pool adds a thread only
//! once five jobs wait for each idle one): ten pods at once, on a disk where an inode takes
//! most of a millisecond, sent theirs 2 to 70 ms after their lists. A container whose own
//! files cannot be made waits (kubelet's CreateContainerConfigError); the others go on.

use super::plan::Start;
use super::sandbox;
use super::volumes::poddir;
use crate::pod::paths::PodDir;
use crate::pod::types::Pod;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// What the starts of one sync have on the host.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HostFiles {
    /// The pod's directory, where its volumes are.
    pub pod_dir: PodDir,
    /// The managed hosts file, once written (a pod-network pod without an IP has the runtime's).
    pub hosts_file: Option<PathBuf>,
    /// Each starting container's own files, by name: its fresh termination-log file (`None`
    /// without a terminationMessagePath), or why its files could not be made.
    containers: BTreeMap<String, Result<Option<PathBuf>, String>>,
}

impl HostFiles {
    /// The termination-log file made for the container `name` (`None` if it has no
    /// terminationMessagePath), or why its log directory or that file could not be made.
    pub fn termination_log(&self, name: &str) -> Result<Option<&PathBuf>, String> {
        match self.containers.get(name) {
            Some(Ok(file)) => Ok(file.as_ref()),
            Some(Err(e)) => Err(e.clone()),
            None => Err("no files were made for it".into()),
        }
    }
}

/// What the files are made from, owned so that the blocking pool can have it.
struct Wanted {
    pod: Pod,
    dir: PodDir,
    log_directory: PathBuf,
    /// (container name, its new instance's restart count, whether it has a
    /// terminationMessagePath).
    starts: Vec<(String, u32, bool)>,
}

/// Makes the pod's log directory (`PodSandboxConfig.log_directory`) alone, on the blocking pool.
pub async fn log_directory(path: &str) -> Result<(), String> {
    let path = PathBuf::from(path);
    crate::task::unblock(move || make_dir(&path)).await
}

fn make_dir(path: &Path) -> Result<(), String> {
    std::fs::create_dir_all(path).map_err(|e| format!("creating {}: {e}", path.display()))
}

/// Makes the files the `starts` of `pod` need, on the blocking pool. `ip`: the sandbox's IP,
/// `None` while RunPodSandbox runs: then the pod's log directory is made first (a sandbox
/// whose log directory cannot be made fails the sync, as kubelet's does), and a pod-network
/// pod's hosts file waits for [`complete`]. Otherwise each container's log directory makes
/// the pod's if it is missing (a failure is that container's).
pub async fn make(
    pod: &Pod,
    dir: &PodDir,
    log_directory: &str,
    starts: &[Start],
    ip: Option<&str>,
) -> Result<HostFiles, String> {
    let wanted = Wanted {
        pod: pod.clone(),
        dir: dir.clone(),
        log_directory: PathBuf::from(log_directory),
        starts: starts
            .iter()
            .map(|s| {
                let path = s.container(pod).termination_message_path.as_deref();
                (s.name.clone(), s.restart_count, path.is_some_and(|p| !p.is_empty()))
            })
            .collect(),
    };
    let ip = ip.map(str::to_string);
    crate::task::unblock(move || make_now(&wanted, ip.as_deref())).await
}

/// The files for a sandbox with `ip`: those `made` while it was made, with a pod-network pod's
/// hosts file added, or all of them made now if there were none.
pub async fn complete(
    made: Option<Result<HostFiles, String>>,
    pod: &Pod,
    dir: &PodDir,
    log_directory: &str,
    starts: &[Start],
    ip: &str,
) -> Result<HostFiles, String> {
    let mut files = match made {
        Some(made) => made?,
        None => return make(pod, dir, log_directory, starts, Some(ip)).await,
    };
    if files.hosts_file.is_none() && !ip.is_empty() {
        let (pod, dir, ip) = (pod.clone(), dir.clone(), ip.to_string());
        files.hosts_file = crate::task::unblock(move || hosts(&pod, &dir, Some(&ip))).await?;
    }
    Ok(files)
}

fn make_now(w: &Wanted, ip: Option<&str>) -> Result<HostFiles, String> {
    if ip.is_none() {
        make_dir(&w.log_directory)?;
    }
    poddir::prepare_volumes(&w.pod, &w.dir)?;
    let hosts_file = hosts(&w.pod, &w.dir, ip)?;
    let containers =
        w.starts.iter().map(|(name, restart, tlog)| (name.clone(), own(w, name, *restart, *tlog))).collect();
    Ok(HostFiles { pod_dir: w.dir.clone(), hosts_file, containers })
}

/// One container's log directory, and its termination-log file if `tlog`.
fn own(w: &Wanted, name: &str, restart_count: u32, tlog: bool) -> Result<Option<PathBuf>, String> {
    make_dir(&w.log_directory.join(name))?;
    tlog.then(|| poddir::termination_log_file(&w.dir, name, restart_count)).transpose()
}

/// The hosts file, when it can be written: a host-network pod's at once, a pod-network pod's
/// once its sandbox has an IP.
fn hosts(pod: &Pod, dir: &PodDir, ip: Option<&str>) -> Result<Option<PathBuf>, String> {
    match ip {
        _ if pod.spec.host_network => poddir::write_hosts(pod, dir, "", &sandbox::hostname(pod)).map(Some),
        Some(ip) if !ip.is_empty() => poddir::write_hosts(pod, dir, ip, &sandbox::hostname(pod)).map(Some),
        _ => Ok(None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pod::identity;
    use crate::runtime::plan::SpecRef;
    use crate::testdir::TestDir;
    use std::os::unix::fs::PermissionsExt;
    use std::path::Path;

    fn pod(spec: &str) -> Pod {
        identity::test_pod(r#"{"name":"web"}"#, spec, "n1")
    }

    fn start(which: SpecRef, name: &str, restart_count: u32) -> Start {
        Start { which, name: name.into(), restart_count, backoff: None }
    }

    /// Two containers, one without a terminationMessagePath, and an emptyDir.
    const TWO: &str = r#""containers":[{"name":"app","image":"i"},
        {"name":"side","image":"i","terminationMessagePath":""}],
        "volumes":[{"name":"scratch","emptyDir":{}}]"#;

    fn read(p: &Path) -> String {
        std::fs::read_to_string(p).unwrap()
    }

    #[test]
    fn a_host_network_pod_has_every_file_before_its_sandbox() {
        let d = TestDir::new("host-files-hostnet");
        let p = pod(&format!(r#"{{"hostNetwork":true,{TWO}}}"#));
        let dir = PodDir::new(&d, &p.metadata.uid).unwrap();
        let logs = d.join("logs/web");
        let starts = [start(SpecRef::Regular(0), "app", 0), start(SpecRef::Regular(1), "side", 3)];
        let files = smol::block_on(make(&p, &dir, logs.to_str().unwrap(), &starts, None)).unwrap();
        assert!(logs.is_dir(), "the pod's log directory, made first");
        let hosts = files.hosts_file.clone().expect("a host-network pod's hosts file needs no IP");
        assert!(read(&hosts).starts_with("# Kubernetes-managed hosts file (host network).\n"));
        assert!(logs.join("app").is_dir() && logs.join("side").is_dir());
        let tlog = files.termination_log("app").unwrap().expect("app's termination log").clone();
        assert_eq!(tlog, dir.under(&["containers", "app", "00000000"]).unwrap());
        assert_eq!(
            (read(&tlog), std::fs::metadata(&tlog).unwrap().permissions().mode() & 0o777),
            (String::new(), 0o666)
        );
        assert_eq!(files.termination_log("side"), Ok(None), "side has no terminationMessagePath");
        assert!(files.termination_log("other").is_err(), "nothing was made for a container not starting");
        assert!(dir.under(&["volumes", "kubernetes.io~empty-dir", "scratch"]).unwrap().is_dir());
        // complete() has nothing to add for it.
        let again = smol::block_on(complete(Some(Ok(files.clone())), &p, &dir, "", &starts, "")).unwrap();
        assert_eq!(again, files);
    }

    #[test]
    fn a_pod_network_pods_hosts_file_waits_for_its_ip() {
        let d = TestDir::new("host-files-podnet");
        let p = pod(&format!("{{{TWO}}}"));
        let dir = PodDir::new(&d, &p.metadata.uid).unwrap();
        let logs = d.join("logs/web");
        let logs = logs.to_str().unwrap();
        let starts = [start(SpecRef::Regular(0), "app", 2)];
        let made = smol::block_on(make(&p, &dir, logs, &starts, None)).unwrap();
        assert_eq!(made.hosts_file, None);
        assert!(!dir.path().join("etc-hosts").exists());
        assert!(made.termination_log("app").unwrap().is_some_and(|t| t.ends_with("containers/app/00000002")));
        let files = smol::block_on(complete(Some(Ok(made.clone())), &p, &dir, logs, &starts, "10.0.0.7")).unwrap();
        let hosts = files.hosts_file.clone().expect("written once the IP is known");
        assert!(read(&hosts).ends_with("10.0.0.7\tweb-n1\n"), "{}", read(&hosts));
        assert_eq!(files.containers, made.containers);
        // No IP from the runtime: the runtime's own hosts file, as before.
        let none = smol::block_on(complete(Some(Ok(made.clone())), &p, &dir, logs, &starts, "")).unwrap();
        assert_eq!(none.hosts_file, None);
        // Nothing made while a sandbox was made (it was there already): all of it now.
        std::fs::remove_dir_all(d.join("logs")).unwrap();
        let now = smol::block_on(complete(None, &p, &dir, logs, &starts, "10.0.0.8")).unwrap();
        assert!(read(now.hosts_file.as_ref().unwrap()).ends_with("10.0.0.8\tweb-n1\n"));
        assert!(Path::new(logs).join("app").is_dir());
    }

    #[test]
    fn a_file_that_cannot_be_made_is_the_syncs_error() {
        let d = TestDir::new("host-files-fail");
        std::fs::write(d.join("plain"), "").unwrap();
        let spec = format!(
            r#"{{"containers":[{{"name":"app","image":"i"}}],
            "volumes":[{{"name":"conf","hostPath":{{"path":"{}","type":"Directory"}}}}]}}"#,
            d.join("plain").display()
        );
        let p = pod(&spec);
        let dir = PodDir::new(&d, &p.metadata.uid).unwrap();
        let starts = [start(SpecRef::Regular(0), "app", 0)];
        let e = smol::block_on(make(&p, &dir, d.join("logs").to_str().unwrap(), &starts, None)).unwrap_err();
        assert!(e.contains("hostPath volume \"conf\"") && e.contains("is not a directory"), "{e}");
        // An error from while the sandbox was made is the sync's, not overwritten.
        let e = smol::block_on(complete(Some(Err("made: no".into())), &p, &dir, "", &starts, "10.0.0.9")).unwrap_err();
        assert_eq!(e, "made: no");
        // One container's log directory that cannot be made (a file is in the way) is that
        // container's error; the other's files are made.
        let p = pod(&format!("{{{TWO}}}"));
        let dir = PodDir::new(&d, &p.metadata.uid).unwrap();
        std::fs::create_dir_all(d.join("logs")).unwrap();
        std::fs::write(d.join("logs/app"), "").unwrap();
        let starts = [start(SpecRef::Regular(0), "app", 0), start(SpecRef::Regular(1), "side", 0)];
        let files = smol::block_on(make(&p, &dir, d.join("logs").to_str().unwrap(), &starts, None)).unwrap();
        let e = files.termination_log("app").unwrap_err();
        assert!(e.starts_with(&format!("creating {}", d.join("logs/app").display())), "{e}");
        assert_eq!(files.termination_log("side"), Ok(None));
        assert!(d.join("logs/side").is_dir());
        // The pod's log directory that cannot be made names it, alone or made with the rest
        // for a new sandbox. For a sandbox that is there, each container's is its own error.
        let (bad, starts) = (d.join("plain/sub"), [start(SpecRef::Regular(0), "app", 0)]);
        let e = smol::block_on(log_directory(bad.to_str().unwrap())).unwrap_err();
        assert!(e.starts_with(&format!("creating {}", bad.display())), "{e}");
        let e = smol::block_on(make(&p, &dir, bad.to_str().unwrap(), &starts, None)).unwrap_err();
        assert!(e.starts_with(&format!("creating {}", bad.display())), "{e}");
        let files = smol::block_on(make(&p, &dir, bad.to_str().unwrap(), &starts, Some(""))).unwrap();
        assert!(files.termination_log("app").unwrap_err().starts_with(&format!("creating {}", bad.display())));
    }
}
