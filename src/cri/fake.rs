//! A runtime in memory, for the engine's unit tests (kubelet's fake_runtime.go): sandboxes and
//! containers with CRI's states, labels and annotations, images that are present or can be
//! pulled, every call recorded in order, and failures on demand. It follows CRI's rules where
//! the engine depends on them: stopping a sandbox stops its containers, removing it removes
//! them, removals of what is gone succeed, statuses of what is gone are NotFound. Container
//! events are sent as containerd 1.7+ sends them, when asked for ([`FakeRuntime::with_events`]);
//! otherwise the event stream is Unimplemented, as on containerd 1.6. Images are listed by the
//! name they were pulled or imported as (1 MiB each) and can be removed; container stats count
//! each running container's seconds since it started.

use crate::cri::api::{
    AttachRequest, AuthConfig, Container, ContainerAttributes, ContainerConfig, ContainerEventResponse,
    ContainerEventType, ContainerFilter, ContainerMetadata, ContainerState, ContainerStats, ContainerStatus,
    ContainerStatusResponse, CpuUsage, ExecRequest, ExecSyncRequest, ExecSyncResponse, Image, ImageFsInfoResponse,
    ImageSpec, LinuxPodSandboxStatus, MemoryUsage, Mount, Namespace, NamespaceMode, PodSandbox, PodSandboxConfig,
    PodSandboxFilter, PodSandboxNetworkStatus, PodSandboxState, PodSandboxStatus, PodSandboxStatusResponse,
    PortForwardRequest, StatusResponse, UInt64Value, VersionResponse,
};
use crate::cri::{Code, RuntimeService, Status};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

mod events;
mod hold;
pub use events::FakeEvents;

struct FakeSandbox {
    config: PodSandboxConfig,
    ready: bool,
    created_at: i64,
    ip: String,
}

struct FakeContainer {
    sandbox_id: String,
    config: ContainerConfig,
    state: ContainerState,
    created_at: i64,
    started_at: i64,
    finished_at: i64,
    exit_code: i32,
    image_ref: String,
}

#[derive(Default)]
struct State {
    /// The last timestamp given (nanoseconds since the epoch; strictly increasing).
    clock: i64,
    seq: u64,
    sandboxes: BTreeMap<String, FakeSandbox>,
    containers: BTreeMap<String, FakeContainer>,
    images: BTreeSet<String>,
    unpullable: BTreeSet<String>,
    /// No registry can be reached: every pull fails as containerd's does offline.
    offline: bool,
    /// The runtime drives cgroups through systemd (RuntimeConfig).
    systemd: bool,
    calls: Vec<String>,
    /// The next call of a method fails with this.
    failures: HashMap<&'static str, Status>,
    /// Subscribers to container events; `None`: the runtime has no events.
    events: Option<Vec<smol::channel::Sender<ContainerEventResponse>>>,
    /// Events go to another reader (containerd 1.7 with a second client).
    events_stolen: bool,
    /// What Version reports (as containerd).
    version: String,
    /// The exit code every ExecSync reports (0 unless set).
    exec_exit: i32,
    /// The sandbox image the verbose Status names (containerd's `sandboxImage`), if any.
    sandbox_image: Option<String>,
    /// RunPodSandbox waits for this file (`hold`).
    hold_sandbox: Option<std::path::PathBuf>,
}

/// Each fake image's size.
pub const IMAGE_SIZE: u64 = 1 << 20;

#[derive(Clone, Default)]
pub struct FakeRuntime(Arc<Mutex<State>>);

impl FakeRuntime {
    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        crate::locks::lock(&self.0)
    }

    /// Records a call (`method`, or `method id`); returns the injected failure, if any.
    fn call(&self, method: &'static str) -> Result<(), Status> {
        self.call_on(method, "")
    }

    fn call_on(&self, method: &'static str, id: &str) -> Result<(), Status> {
        let mut st = self.state();
        st.calls.push(if id.is_empty() { method.to_string() } else { format!("{method} {id}") });
        st.failures.remove(method).map_or(Ok(()), Err)
    }

    /// An image the runtime has.
    pub fn with_image(self, image: &str) -> FakeRuntime {
        self.state().images.insert(image.to_string());
        self
    }

    /// Every command run in a container from now on exits with `code`.
    pub fn exec_exits(&self, code: i32) {
        self.state().exec_exit = code;
    }

    /// An image arrives without a pull (imported from a tarball).
    pub fn import(&self, image: &str) {
        self.state().images.insert(image.to_string());
    }

    /// Names `image` as the runtime's sandbox image (which image GC keeps).
    pub fn with_sandbox_image(self, image: &str) -> FakeRuntime {
        self.state().sandbox_image = Some(image.to_string());
        self
    }

    /// The images present, by name.
    pub fn images(&self) -> Vec<String> {
        self.state().images.iter().cloned().collect()
    }

    /// A runtime that sends container events (containerd 1.7 and later).
    pub fn with_events(self) -> FakeRuntime {
        self.state().events = Some(Vec::new());
        self
    }

    /// A runtime that reports this version (its name is "containerd"; by default "0.0").
    pub fn with_version(self, version: &str) -> FakeRuntime {
        self.state().version = version.to_string();
        self
    }

    /// From now on, events go to another reader.
    pub fn steal_events(&self) {
        self.state().events_stolen = true;
    }

    /// An image no registry serves.
    pub fn unpullable(&self, image: &str) {
        self.state().unpullable.insert(image.to_string());
    }

    /// A registry serves `image` again.
    pub fn pullable(&self, image: &str) {
        self.state().unpullable.remove(image);
    }

    /// The runtime drives cgroups through systemd (or not), as RuntimeConfig says.
    pub fn set_systemd_cgroups(&self, systemd: bool) {
        self.state().systemd = systemd;
    }

    /// Every registry unreachable (or reachable again).
    pub fn set_offline(&self, offline: bool) {
        self.state().offline = offline;
    }

    /// The next call of `method` fails.
    pub fn fail_next(&self, method: &'static str, code: Code) {
        self.state().failures.insert(method, Status::new(code, format!("injected {method} failure")));
    }

    /// The calls so far, in order (method names).
    pub fn calls(&self) -> Vec<String> {
        self.state().calls.clone()
    }

    /// How many times `method` was called.
    pub fn count(&self, method: &str) -> usize {
        self.state().calls.iter().filter(|c| c.split(' ').next() == Some(method)).count()
    }

    pub fn forget_calls(&self) {
        self.state().calls.clear();
    }

    /// The container `id` exits with `code` (as a crash does).
    pub fn exit(&self, id: &str, code: i32) {
        let mut st = self.state();
        let now = Self::now(&mut st);
        if let Some(c) = st.containers.get_mut(id) {
            c.state = ContainerState::ContainerExited;
            c.exit_code = code;
            c.finished_at = now;
        }
        Self::emit(&mut st, id, ContainerEventType::ContainerStoppedEvent);
    }

    /// (container name, state, restart-count annotation, id) of every container, oldest first.
    pub fn containers(&self) -> Vec<(String, ContainerState, String, String)> {
        let st = self.state();
        let mut all: Vec<_> = st.containers.iter().collect();
        all.sort_by_key(|(_, c)| c.created_at);
        all.into_iter()
            .map(|(id, c)| {
                let name = c.config.metadata.as_ref().map(|m| m.name.clone()).unwrap_or_default();
                let rc = c.config.annotations.get("io.kubernetes.container.restartCount").cloned().unwrap_or_default();
                (name, c.state, rc, id.clone())
            })
            .collect()
    }

    /// (id, ready) of every sandbox.
    pub fn sandboxes(&self) -> Vec<(String, bool)> {
        self.state().sandboxes.iter().map(|(id, s)| (id.clone(), s.ready)).collect()
    }

    /// The wall clock in nanoseconds, strictly increasing from call to call (the engine's
    /// back-off and ordering read the runtime's timestamps).
    fn now(st: &mut State) -> i64 {
        let wall = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| i64::try_from(d.as_nanos()).unwrap_or(i64::MAX));
        st.clock = wall.max(st.clock + 1);
        st.clock
    }

    fn next_id(st: &mut State, prefix: &str) -> (String, i64) {
        st.seq += 1;
        let id = format!("{prefix}{:04}", st.seq);
        (id, Self::now(st))
    }
}

fn not_found(what: &str, id: &str) -> Status {
    Status::new(Code::NotFound, format!("{what} {id:?} not found"))
}

/// What a verbose status adds: an `info` with a pid, as containerd's. It is this process's:
/// a watch on it finds it in no container's cgroup and leaves the container to the relist.
fn verbose_info(verbose: bool) -> HashMap<String, String> {
    let info =
        if verbose { vec![("info".to_string(), format!(r#"{{"pid": {}}}"#, std::process::id()))] } else { vec![] };
    info.into_iter().collect()
}

fn selected(labels: &HashMap<String, String>, selector: &HashMap<String, String>) -> bool {
    selector.iter().all(|(k, v)| labels.get(k) == Some(v))
}

impl RuntimeService for FakeRuntime {
    type Events = FakeEvents;

    async fn version(&self) -> Result<VersionResponse, Status> {
        let st = self.state();
        Ok(VersionResponse {
            runtime_name: "containerd".into(),
            runtime_version: if st.version.is_empty() { "0.0".into() } else { st.version.clone() },
            runtime_api_version: "v1".into(),
            ..Default::default()
        })
    }

    async fn container_events(&self) -> Result<FakeEvents, Status> {
        let mut st = self.state();
        Ok(FakeEvents(st.events.as_mut().map(|subscribers| {
            let (tx, rx) = smol::channel::bounded(1024);
            subscribers.push(tx);
            rx
        })))
    }

    async fn run_pod_sandbox(&self, config: PodSandboxConfig, _handler: &str) -> Result<String, Status> {
        self.call("RunPodSandbox")?;
        self.held().await?;
        let mut st = self.state();
        let (id, created_at) = Self::next_id(&mut st, "sb");
        let host = config
            .linux
            .as_ref()
            .and_then(|l| l.security_context.as_ref())
            .and_then(|s| s.namespace_options.as_ref())
            .is_some_and(|o| o.network == NamespaceMode::Node as i32);
        let ip = if host { String::new() } else { format!("10.0.0.{}", st.seq % 250 + 2) };
        st.sandboxes.insert(id.clone(), FakeSandbox { config, ready: true, created_at, ip });
        Ok(id)
    }

    async fn stop_pod_sandbox(&self, id: &str) -> Result<(), Status> {
        self.call_on("StopPodSandbox", id)?;
        let mut st = self.state();
        let now = Self::now(&mut st);
        if let Some(s) = st.sandboxes.get_mut(id) {
            s.ready = false;
        }
        for c in st.containers.values_mut().filter(|c| c.sandbox_id == id) {
            if c.state != ContainerState::ContainerExited {
                c.state = ContainerState::ContainerExited;
                c.exit_code = 137;
                c.finished_at = now;
            }
        }
        Self::emit(&mut st, id, ContainerEventType::ContainerStoppedEvent);
        Ok(())
    }

    async fn remove_pod_sandbox(&self, id: &str) -> Result<(), Status> {
        self.call_on("RemovePodSandbox", id)?;
        let mut st = self.state();
        st.sandboxes.remove(id);
        st.containers.retain(|_, c| c.sandbox_id != id);
        Ok(())
    }

    async fn pod_sandbox_status(&self, id: &str, verbose: bool) -> Result<PodSandboxStatusResponse, Status> {
        self.call_on("PodSandboxStatus", if verbose { "verbose" } else { "" })?;
        let st = self.state();
        let s = st.sandboxes.get(id).ok_or_else(|| not_found("sandbox", id))?;
        let options = s.config.linux.as_ref().and_then(|l| l.security_context.as_ref()?.namespace_options.clone());
        Ok(PodSandboxStatusResponse {
            status: Some(PodSandboxStatus {
                id: id.to_string(),
                metadata: s.config.metadata.clone(),
                state: if s.ready { PodSandboxState::SandboxReady } else { PodSandboxState::SandboxNotready } as i32,
                created_at: s.created_at,
                network: Some(PodSandboxNetworkStatus { ip: s.ip.clone(), ..Default::default() }),
                linux: Some(LinuxPodSandboxStatus { namespaces: Some(Namespace { options }) }),
                labels: s.config.labels.clone(),
                annotations: s.config.annotations.clone(),
                ..Default::default()
            }),
            info: verbose_info(verbose),
            ..Default::default()
        })
    }

    async fn list_pod_sandbox(&self, filter: Option<PodSandboxFilter>) -> Result<Vec<PodSandbox>, Status> {
        self.call("ListPodSandbox")?;
        let filter = filter.unwrap_or_default();
        let st = self.state();
        Ok(st
            .sandboxes
            .iter()
            .filter(|(_, s)| selected(&s.config.labels, &filter.label_selector))
            .map(|(id, s)| PodSandbox {
                id: id.clone(),
                metadata: s.config.metadata.clone(),
                state: if s.ready { PodSandboxState::SandboxReady } else { PodSandboxState::SandboxNotready } as i32,
                created_at: s.created_at,
                labels: s.config.labels.clone(),
                annotations: s.config.annotations.clone(),
                ..Default::default()
            })
            .collect())
    }

    async fn create_container(
        &self,
        pod_sandbox_id: &str,
        config: ContainerConfig,
        _sandbox_config: PodSandboxConfig,
    ) -> Result<String, Status> {
        self.call("CreateContainer")?;
        let mut st = self.state();
        if !st.sandboxes.contains_key(pod_sandbox_id) {
            return Err(not_found("sandbox", pod_sandbox_id));
        }
        let (id, created_at) = Self::next_id(&mut st, "c");
        let image_ref = config.image.as_ref().map(|i| i.image.clone()).unwrap_or_default();
        st.containers.insert(
            id.clone(),
            FakeContainer {
                sandbox_id: pod_sandbox_id.to_string(),
                config,
                state: ContainerState::ContainerCreated,
                created_at,
                started_at: 0,
                finished_at: 0,
                exit_code: 0,
                image_ref,
            },
        );
        Ok(id)
    }

    async fn start_container(&self, id: &str) -> Result<(), Status> {
        self.call_on("StartContainer", id)?;
        let mut st = self.state();
        let now = Self::now(&mut st);
        let c = st.containers.get_mut(id).ok_or_else(|| not_found("container", id))?;
        c.state = ContainerState::ContainerRunning;
        c.started_at = now;
        Self::emit(&mut st, id, ContainerEventType::ContainerStartedEvent);
        Ok(())
    }

    async fn stop_container(&self, id: &str, _grace: Duration) -> Result<(), Status> {
        self.call_on("StopContainer", id)?;
        let mut st = self.state();
        let now = Self::now(&mut st);
        if let Some(c) = st.containers.get_mut(id) {
            if c.state == ContainerState::ContainerRunning {
                c.state = ContainerState::ContainerExited;
                c.exit_code = 143;
                c.finished_at = now;
            }
        }
        Self::emit(&mut st, id, ContainerEventType::ContainerStoppedEvent);
        Ok(())
    }

    async fn remove_container(&self, id: &str) -> Result<(), Status> {
        self.call_on("RemoveContainer", id)?;
        self.state().containers.remove(id);
        Ok(())
    }

    async fn list_containers(&self, filter: Option<ContainerFilter>) -> Result<Vec<Container>, Status> {
        self.call("ListContainers")?;
        let filter = filter.unwrap_or_default();
        let st = self.state();
        Ok(st
            .containers
            .iter()
            .filter(|(_, c)| selected(&c.config.labels, &filter.label_selector))
            .map(|(id, c)| Container {
                id: id.clone(),
                pod_sandbox_id: c.sandbox_id.clone(),
                metadata: c.config.metadata.clone(),
                image: c.config.image.clone(),
                image_ref: c.image_ref.clone(),
                state: c.state as i32,
                created_at: c.created_at,
                labels: c.config.labels.clone(),
                annotations: c.config.annotations.clone(),
                ..Default::default()
            })
            .collect())
    }

    async fn container_status(&self, id: &str, verbose: bool) -> Result<ContainerStatusResponse, Status> {
        self.call_on("ContainerStatus", if verbose { "verbose" } else { "" })?;
        let st = self.state();
        let c = st.containers.get(id).ok_or_else(|| not_found("container", id))?;
        let metadata = c.config.metadata.clone().unwrap_or(ContainerMetadata::default());
        Ok(ContainerStatusResponse {
            status: Some(ContainerStatus {
                id: id.to_string(),
                metadata: Some(metadata),
                state: c.state as i32,
                created_at: c.created_at,
                started_at: c.started_at,
                finished_at: c.finished_at,
                exit_code: c.exit_code,
                image: c.config.image.clone().or(Some(ImageSpec::default())),
                image_ref: c.image_ref.clone(),
                labels: c.config.labels.clone(),
                annotations: c.config.annotations.clone(),
                mounts: c.config.mounts.iter().map(|m| Mount { ..m.clone() }).collect(),
                ..Default::default()
            }),
            info: verbose_info(verbose),
        })
    }

    async fn reopen_container_log(&self, _id: &str) -> Result<(), Status> {
        self.call("ReopenContainerLog")
    }

    async fn exec_sync_with_deadline(
        &self,
        req: ExecSyncRequest,
        _deadline: Option<Duration>,
    ) -> Result<ExecSyncResponse, Status> {
        self.call_on("ExecSync", &req.container_id)?;
        let st = self.state();
        match st.containers.get(&req.container_id) {
            Some(c) if c.state == ContainerState::ContainerRunning => {
                Ok(ExecSyncResponse { exit_code: st.exec_exit, ..Default::default() })
            }
            _ => Err(not_found("running container", &req.container_id)),
        }
    }

    async fn image_status(&self, image: &str) -> Result<Option<Image>, Status> {
        self.call("ImageStatus")?;
        let st = self.state();
        Ok(st.images.contains(image).then(|| Image { id: format!("sha256:{image}"), ..Default::default() }))
    }

    async fn pull_image(
        &self,
        image: &str,
        _auth: Option<AuthConfig>,
        _sandbox_config: Option<PodSandboxConfig>,
    ) -> Result<String, Status> {
        self.call("PullImage")?;
        let mut st = self.state();
        if st.offline {
            let message = format!("failed to pull and unpack image \"{image}\": failed to resolve reference \"{image}\": failed to do request: Head \"https://registry.example/v2/x/manifests/1\": dial tcp 10.0.0.1:443: connect: connection refused");
            return Err(Status::new(Code::Unknown, message));
        }
        if st.unpullable.contains(image) {
            return Err(Status::new(Code::NotFound, format!("{image}: not found")));
        }
        st.images.insert(image.to_string());
        Ok(format!("sha256:{image}"))
    }

    async fn status(&self, verbose: bool) -> Result<StatusResponse, Status> {
        self.call("Status")?;
        let st = self.state();
        let mut info = HashMap::new();
        if let (true, Some(image)) = (verbose, &st.sandbox_image) {
            info.insert("config".to_string(), serde_json::json!({ "sandboxImage": image }).to_string());
        }
        Ok(StatusResponse { info, ..Default::default() })
    }

    async fn systemd_cgroups(&self) -> Result<bool, Status> {
        self.call("RuntimeConfig")?;
        Ok(self.state().systemd)
    }

    async fn list_images(&self) -> Result<Vec<Image>, Status> {
        self.call("ListImages")?;
        let st = self.state();
        let image = |name: &String| Image {
            id: format!("sha256:{name}"),
            repo_tags: vec![name.clone()],
            size: IMAGE_SIZE,
            ..Default::default()
        };
        Ok(st.images.iter().map(image).collect())
    }

    async fn remove_image(&self, image: &str) -> Result<(), Status> {
        self.call_on("RemoveImage", image)?;
        let name = image.strip_prefix("sha256:").unwrap_or(image);
        self.state().images.remove(name);
        Ok(())
    }

    async fn image_fs_info(&self) -> Result<ImageFsInfoResponse, Status> {
        self.call("ImageFsInfo")?;
        Ok(ImageFsInfoResponse::default()) // no filesystem: collection goes by age alone
    }

    async fn list_container_stats(&self) -> Result<Vec<ContainerStats>, Status> {
        self.call("ListContainerStats")?;
        let mut st = self.state();
        let now = Self::now(&mut st);
        let stats = st.containers.iter().filter(|(_, c)| c.state == ContainerState::ContainerRunning);
        Ok(stats
            .map(|(id, c)| ContainerStats {
                attributes: Some(ContainerAttributes {
                    id: id.clone(),
                    metadata: c.config.metadata.clone(),
                    labels: c.config.labels.clone(),
                    annotations: c.config.annotations.clone(),
                }),
                cpu: Some(CpuUsage {
                    timestamp: now,
                    usage_core_nano_seconds: Some(UInt64Value { value: now.saturating_sub(c.started_at) as u64 }),
                    ..Default::default()
                }),
                memory: Some(MemoryUsage {
                    timestamp: now,
                    working_set_bytes: Some(UInt64Value { value: IMAGE_SIZE }),
                    ..Default::default()
                }),
                writable_layer: None,
            })
            .collect())
    }

    /// The fake has no streaming server.
    async fn exec(&self, req: ExecRequest) -> Result<String, Status> {
        self.call_on("Exec", &req.container_id)?;
        Err(Status::new(Code::Unimplemented, "the fake runtime has no streaming server"))
    }

    async fn attach(&self, req: AttachRequest) -> Result<String, Status> {
        self.call_on("Attach", &req.container_id)?;
        Err(Status::new(Code::Unimplemented, "the fake runtime has no streaming server"))
    }

    async fn port_forward(&self, req: PortForwardRequest) -> Result<String, Status> {
        self.call_on("PortForward", &req.pod_sandbox_id)?;
        Err(Status::new(Code::Unimplemented, "the fake runtime has no streaming server"))
    }
}
