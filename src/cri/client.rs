//! [`Cri`]: one typed async method per CRI v1 RPC that atoll uses.
//!
//! Each method builds the request, picks the local deadline kubelet would use for that call
//! (the runtime request timeout, plus the call's own timeout for ExecSync and StopContainer,
//! none for PullImage), and returns the reply or a [`Status`] naming the RPC.

use super::api::*;
use crate::grpc::status::{Code, Status};
use crate::grpc::{Channel, Replies};
use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

/// kubelet's default `runtimeRequestTimeout`.
pub const DEFAULT_REQUEST_TIMEOUT: Duration = Duration::from_secs(120);

/// Where the runtime listens: kubelet's `containerRuntimeEndpoint`, `unix:///path` or a path.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Endpoint(PathBuf);

/// A runtime endpoint atoll cannot use (the text as given).
#[derive(Debug, PartialEq, Eq)]
pub enum BadEndpoint {
    /// A scheme other than `unix://`.
    Scheme { endpoint: String, scheme: String },
    /// Neither `unix://` nor a path.
    NotUnix(String),
    /// A socket path that is not absolute.
    Relative(String),
}

impl std::fmt::Display for BadEndpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            BadEndpoint::Scheme { endpoint, scheme } => write!(
                f,
                "container runtime endpoint {endpoint:?}: scheme {scheme:?} is not supported; use unix:///path/to/socket"
            ),
            BadEndpoint::NotUnix(s) => {
                write!(f, "container runtime endpoint {s:?}: expected unix:///path/to/socket or an absolute path")
            }
            BadEndpoint::Relative(s) => write!(f, "container runtime endpoint {s:?}: the socket path must be absolute"),
        }
    }
}

impl std::error::Error for BadEndpoint {}

impl Endpoint {
    pub fn parse(s: &str) -> Result<Endpoint, BadEndpoint> {
        let s = s.trim();
        let path = if let Some(rest) = s.strip_prefix("unix://") {
            rest
        } else if s.starts_with('/') {
            s
        } else if let Some((scheme, _)) = s.split_once("://") {
            return Err(BadEndpoint::Scheme { endpoint: s.into(), scheme: scheme.into() });
        } else {
            return Err(BadEndpoint::NotUnix(s.into()));
        };
        if !path.starts_with('/') || path.len() < 2 {
            return Err(BadEndpoint::Relative(s.into()));
        }
        Ok(Endpoint(PathBuf::from(path)))
    }

    pub fn path(&self) -> &std::path::Path {
        &self.0
    }
}

impl fmt::Display for Endpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "unix://{}", self.0.display())
    }
}

/// A CRI runtime and image service client on one socket. Clones share the connection.
#[derive(Clone)]
pub struct Cri {
    channel: std::sync::Arc<Channel>,
    request_timeout: Duration,
    pull_timeout: Option<Duration>,
}

/// `(method name, gRPC path)` of a CRI RPC, both `'static`.
macro_rules! rpc {
    ($service:ident, $name:literal) => {
        ($name, concat!("/runtime.v1.", stringify!($service), "/", $name))
    };
}

impl Cri {
    /// A client for `endpoint`; it connects on its first call and again whenever the
    /// runtime restarts.
    pub fn new(endpoint: &Endpoint) -> Cri {
        Cri {
            channel: std::sync::Arc::new(Channel::new(endpoint.path())),
            request_timeout: DEFAULT_REQUEST_TIMEOUT,
            pull_timeout: None,
        }
    }

    /// The deadline for ordinary calls (kubelet's `runtimeRequestTimeout`).
    pub fn with_request_timeout(mut self, t: Duration) -> Cri {
        self.request_timeout = t;
        self
    }

    /// A deadline for image pulls; by default none, as kubelet.
    pub fn with_pull_timeout(mut self, t: Option<Duration>) -> Cri {
        self.pull_timeout = t;
        self
    }

    /// Caps the size of one message in either direction (default 16 MiB).
    pub fn with_max_message(mut self, bytes: usize) -> Cri {
        self.channel = std::sync::Arc::new(Channel::new(self.channel.socket().to_path_buf()).with_max_message(bytes));
        self
    }

    pub fn socket(&self) -> &std::path::Path {
        self.channel.socket()
    }

    async fn call<Q, R>(
        &self,
        rpc: (&'static str, &'static str),
        req: Q,
        timeout: Option<Duration>,
    ) -> Result<R, Status>
    where
        Q: prost::Message,
        R: prost::Message + Default,
    {
        let (name, path) = rpc;
        let began = std::time::Instant::now();
        let result = self.channel.unary(path, &req, timeout).await.map_err(|s| s.in_method(name));
        let outcome = match &result {
            Ok(_) => "ok".to_string(),
            Err(e) => format!("{:?}", e.code),
        };
        let took = began.elapsed();
        crate::metrics::cri_call(name, &outcome, took);
        log::trace!(target: "atoll::cri::call", "{name} {outcome} {}", took.as_micros());
        #[cfg(feature = "fault-injection")]
        if result.is_ok() {
            fault::after_call(name);
        }
        result
    }

    /// The deadline of an ordinary call.
    fn request_deadline(&self) -> Option<Duration> {
        Some(self.request_timeout)
    }

    // ---- RuntimeService ----------------------------------------------------------------

    pub async fn version(&self) -> Result<VersionResponse, Status> {
        self.call(rpc!(RuntimeService, "Version"), VersionRequest { version: "v1".into() }, self.request_deadline())
            .await
    }

    pub async fn status(&self, verbose: bool) -> Result<StatusResponse, Status> {
        self.call(rpc!(RuntimeService, "Status"), StatusRequest { verbose }, self.request_deadline()).await
    }

    /// Whether the runtime drives cgroups through systemd. containerd 1.6 has no
    /// RuntimeConfig (Unimplemented) and a runtime may leave `linux` out: cgroupfs, as far as
    /// atoll can tell.
    pub async fn systemd_cgroups(&self) -> Result<bool, Status> {
        match self.call(rpc!(RuntimeService, "RuntimeConfig"), RuntimeConfigRequest {}, self.request_deadline()).await {
            Ok(RuntimeConfigResponse { linux: Some(l) }) => Ok(l.cgroup_driver == CgroupDriver::Systemd as i32),
            Ok(_) => Ok(false),
            Err(e) if e.code == Code::Unimplemented => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// Creates and starts a sandbox; returns its id.
    pub async fn run_pod_sandbox(&self, config: PodSandboxConfig, runtime_handler: &str) -> Result<String, Status> {
        let req = RunPodSandboxRequest { config: Some(config), runtime_handler: runtime_handler.into() };
        let resp: RunPodSandboxResponse =
            self.call(rpc!(RuntimeService, "RunPodSandbox"), req, self.request_deadline()).await?;
        if resp.pod_sandbox_id.is_empty() {
            return Err(Status::new(Code::Internal, "runtime returned an empty sandbox id").in_method("RunPodSandbox"));
        }
        Ok(resp.pod_sandbox_id)
    }

    pub async fn stop_pod_sandbox(&self, id: &str) -> Result<(), Status> {
        let _: StopPodSandboxResponse = self
            .call(
                rpc!(RuntimeService, "StopPodSandbox"),
                StopPodSandboxRequest { pod_sandbox_id: id.into() },
                self.request_deadline(),
            )
            .await?;
        Ok(())
    }

    pub async fn remove_pod_sandbox(&self, id: &str) -> Result<(), Status> {
        let _: RemovePodSandboxResponse = self
            .call(
                rpc!(RuntimeService, "RemovePodSandbox"),
                RemovePodSandboxRequest { pod_sandbox_id: id.into() },
                self.request_deadline(),
            )
            .await?;
        Ok(())
    }

    pub async fn pod_sandbox_status(&self, id: &str, verbose: bool) -> Result<PodSandboxStatusResponse, Status> {
        let req = PodSandboxStatusRequest { pod_sandbox_id: id.into(), verbose };
        let resp: PodSandboxStatusResponse =
            self.call(rpc!(RuntimeService, "PodSandboxStatus"), req, self.request_deadline()).await?;
        if resp.status.is_none() {
            return Err(Status::new(Code::Internal, "runtime returned no sandbox status").in_method("PodSandboxStatus"));
        }
        Ok(resp)
    }

    pub async fn list_pod_sandbox(&self, filter: Option<PodSandboxFilter>) -> Result<Vec<PodSandbox>, Status> {
        let resp: ListPodSandboxResponse = self
            .call(rpc!(RuntimeService, "ListPodSandbox"), ListPodSandboxRequest { filter }, self.request_deadline())
            .await?;
        Ok(resp.items)
    }

    /// Creates a container in a sandbox; returns its id.
    pub async fn create_container(
        &self,
        pod_sandbox_id: &str,
        config: ContainerConfig,
        sandbox_config: PodSandboxConfig,
    ) -> Result<String, Status> {
        let req = CreateContainerRequest {
            pod_sandbox_id: pod_sandbox_id.into(),
            config: Some(config),
            sandbox_config: Some(sandbox_config),
        };
        let resp: CreateContainerResponse =
            self.call(rpc!(RuntimeService, "CreateContainer"), req, self.request_deadline()).await?;
        if resp.container_id.is_empty() {
            return Err(
                Status::new(Code::Internal, "runtime returned an empty container id").in_method("CreateContainer")
            );
        }
        Ok(resp.container_id)
    }

    pub async fn start_container(&self, id: &str) -> Result<(), Status> {
        let _: StartContainerResponse = self
            .call(
                rpc!(RuntimeService, "StartContainer"),
                StartContainerRequest { container_id: id.into() },
                self.request_deadline(),
            )
            .await?;
        Ok(())
    }

    /// Stops a container, giving it `grace` before the runtime kills it. The local deadline
    /// is the grace plus the request timeout, as kubelet.
    pub async fn stop_container(&self, id: &str, grace: Duration) -> Result<(), Status> {
        let req = StopContainerRequest { container_id: id.into(), timeout: grace.as_secs() as i64 };
        let deadline = self.request_timeout.saturating_add(grace);
        let _: StopContainerResponse = self.call(rpc!(RuntimeService, "StopContainer"), req, Some(deadline)).await?;
        Ok(())
    }

    pub async fn remove_container(&self, id: &str) -> Result<(), Status> {
        let _: RemoveContainerResponse = self
            .call(
                rpc!(RuntimeService, "RemoveContainer"),
                RemoveContainerRequest { container_id: id.into() },
                self.request_deadline(),
            )
            .await?;
        Ok(())
    }

    pub async fn list_containers(&self, filter: Option<ContainerFilter>) -> Result<Vec<Container>, Status> {
        let resp: ListContainersResponse = self
            .call(rpc!(RuntimeService, "ListContainers"), ListContainersRequest { filter }, self.request_deadline())
            .await?;
        Ok(resp.containers)
    }

    pub async fn container_status(&self, id: &str, verbose: bool) -> Result<ContainerStatusResponse, Status> {
        let req = ContainerStatusRequest { container_id: id.into(), verbose };
        let resp: ContainerStatusResponse =
            self.call(rpc!(RuntimeService, "ContainerStatus"), req, self.request_deadline()).await?;
        if resp.status.is_none() {
            return Err(
                Status::new(Code::Internal, "runtime returned no container status").in_method("ContainerStatus")
            );
        }
        Ok(resp)
    }

    /// Subscribes to the runtime's container events (kubelet's evented PLEG): a stream that
    /// lasts until dropped. Runtimes without them (containerd 1.6) answer Unimplemented on
    /// the first [`ContainerEvents::next`].
    pub async fn container_events(&self) -> Result<ContainerEvents, Status> {
        let (name, path) = rpc!(RuntimeService, "GetContainerEvents");
        let replies = self.channel.server_streaming(path, &GetEventsRequest {}).await.map_err(|s| s.in_method(name))?;
        Ok(ContainerEvents(replies))
    }

    pub async fn update_container_resources(&self, id: &str, linux: LinuxContainerResources) -> Result<(), Status> {
        let req = UpdateContainerResourcesRequest { container_id: id.into(), linux: Some(linux), ..Default::default() };
        let _: UpdateContainerResourcesResponse =
            self.call(rpc!(RuntimeService, "UpdateContainerResources"), req, self.request_deadline()).await?;
        Ok(())
    }

    /// Asks the runtime to reopen the container's log file (after rotation).
    pub async fn reopen_container_log(&self, id: &str) -> Result<(), Status> {
        let req = ReopenContainerLogRequest { container_id: id.into() };
        let _: ReopenContainerLogResponse =
            self.call(rpc!(RuntimeService, "ReopenContainerLog"), req, self.request_deadline()).await?;
        Ok(())
    }

    /// Runs `cmd` in a container and waits for it. `timeout` is passed to the runtime; zero
    /// means none. The local deadline is `timeout` plus the request timeout, or none when
    /// `timeout` is zero (kubelet's rule).
    pub async fn exec_sync(&self, id: &str, cmd: Vec<String>, timeout: Duration) -> Result<ExecSyncResponse, Status> {
        let req = ExecSyncRequest { container_id: id.into(), cmd, timeout: timeout.as_secs() as i64 };
        let deadline = (!timeout.is_zero()).then(|| timeout.saturating_add(self.request_timeout));
        self.exec_sync_with_deadline(req, deadline).await
    }

    /// ExecSync with an explicit local deadline (probes use their own).
    pub async fn exec_sync_with_deadline(
        &self,
        req: ExecSyncRequest,
        deadline: Option<Duration>,
    ) -> Result<ExecSyncResponse, Status> {
        self.call(rpc!(RuntimeService, "ExecSync"), req, deadline).await
    }

    /// A one-time URL on the runtime's streaming server for an exec session (kubelet proxies
    /// the client's upgraded connection to it).
    pub async fn exec(&self, req: ExecRequest) -> Result<String, Status> {
        let resp: ExecResponse = self.call(rpc!(RuntimeService, "Exec"), req, self.request_deadline()).await?;
        Ok(resp.url)
    }

    /// The streaming URL for attaching to a container's main process.
    pub async fn attach(&self, req: AttachRequest) -> Result<String, Status> {
        let resp: AttachResponse = self.call(rpc!(RuntimeService, "Attach"), req, self.request_deadline()).await?;
        Ok(resp.url)
    }

    /// The streaming URL for forwarding ports of a pod sandbox.
    pub async fn port_forward(&self, req: PortForwardRequest) -> Result<String, Status> {
        let resp: PortForwardResponse =
            self.call(rpc!(RuntimeService, "PortForward"), req, self.request_deadline()).await?;
        Ok(resp.url)
    }

    pub async fn container_stats(&self, id: &str) -> Result<Option<ContainerStats>, Status> {
        let resp: ContainerStatsResponse = self
            .call(
                rpc!(RuntimeService, "ContainerStats"),
                ContainerStatsRequest { container_id: id.into() },
                self.request_deadline(),
            )
            .await?;
        Ok(resp.stats)
    }

    pub async fn list_container_stats(
        &self,
        filter: Option<ContainerStatsFilter>,
    ) -> Result<Vec<ContainerStats>, Status> {
        let resp: ListContainerStatsResponse = self
            .call(
                rpc!(RuntimeService, "ListContainerStats"),
                ListContainerStatsRequest { filter },
                self.request_deadline(),
            )
            .await?;
        Ok(resp.stats)
    }

    // ---- ImageService ------------------------------------------------------------------

    pub async fn list_images(&self, filter: Option<ImageFilter>) -> Result<Vec<Image>, Status> {
        let resp: ListImagesResponse =
            self.call(rpc!(ImageService, "ListImages"), ListImagesRequest { filter }, self.request_deadline()).await?;
        Ok(resp.images)
    }

    /// The image if the runtime has it, `None` if not (CRI answers an empty reply).
    pub async fn image_status(&self, image: &str) -> Result<Option<Image>, Status> {
        let req = ImageStatusRequest { image: Some(image_spec(image)), verbose: false };
        let resp: ImageStatusResponse =
            self.call(rpc!(ImageService, "ImageStatus"), req, self.request_deadline()).await?;
        Ok(resp.image)
    }

    /// Pulls an image; returns the runtime's reference to it (an image id or digest).
    pub async fn pull_image(
        &self,
        image: &str,
        auth: Option<AuthConfig>,
        sandbox_config: Option<PodSandboxConfig>,
    ) -> Result<String, Status> {
        let req = PullImageRequest { image: Some(image_spec(image)), auth, sandbox_config };
        let resp: PullImageResponse = self.call(rpc!(ImageService, "PullImage"), req, self.pull_timeout).await?;
        Ok(resp.image_ref)
    }

    pub async fn remove_image(&self, image: &str) -> Result<(), Status> {
        let req = RemoveImageRequest { image: Some(image_spec(image)) };
        let _: RemoveImageResponse = self.call(rpc!(ImageService, "RemoveImage"), req, self.request_deadline()).await?;
        Ok(())
    }

    pub async fn image_fs_info(&self) -> Result<ImageFsInfoResponse, Status> {
        self.call(rpc!(ImageService, "ImageFsInfo"), ImageFsInfoRequest {}, self.request_deadline()).await
    }
}

/// The runtime's container events, in order.
pub struct ContainerEvents(Replies);

impl ContainerEvents {
    /// The next event; `None` when the runtime ended the stream.
    pub async fn next(&mut self) -> Result<Option<ContainerEventResponse>, Status> {
        self.0.next().await.map_err(|s| s.in_method("GetContainerEvents"))
    }
}

/// Test builds only (feature `fault-injection`): `ATOLL_FAULT_ABORT_AFTER=Rpc[:N]` aborts the
/// process right after the Nth successful call of that RPC, as a kill -9 between two CRI calls
/// would. The restart-safety tests use it; release builds do not contain it.
#[cfg(feature = "fault-injection")]
mod fault {
    use std::sync::atomic::{AtomicU32, Ordering};
    use std::sync::OnceLock;

    static POINT: OnceLock<Option<(String, u32)>> = OnceLock::new();
    static SEEN: AtomicU32 = AtomicU32::new(0);

    pub fn after_call(rpc: &str) {
        let point = POINT.get_or_init(|| {
            let v = std::env::var("ATOLL_FAULT_ABORT_AFTER").ok()?;
            let (name, n) = v.split_once(':').unwrap_or((v.as_str(), "1"));
            Some((name.to_string(), n.parse().unwrap_or(1)))
        });
        if let Some((name, n)) = point {
            if name == rpc && SEEN.fetch_add(1, Ordering::SeqCst) + 1 == *n {
                eprintln!("fault injection: aborting after {rpc} #{n}");
                std::process::abort();
            }
        }
    }
}

fn image_spec(image: &str) -> ImageSpec {
    ImageSpec { image: image.into(), ..Default::default() }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoints_accept_unix_urls_and_paths_only() {
        let e = Endpoint::parse("unix:///run/containerd/containerd.sock").unwrap();
        assert_eq!(e.path(), std::path::Path::new("/run/containerd/containerd.sock"));
        assert_eq!(e.to_string(), "unix:///run/containerd/containerd.sock");
        assert_eq!(Endpoint::parse("/run/crio/crio.sock").unwrap().path(), std::path::Path::new("/run/crio/crio.sock"));
        let err = Endpoint::parse("tcp://127.0.0.1:1234").unwrap_err().to_string();
        assert!(err.contains("scheme \"tcp\" is not supported"), "{err}");
        assert!(Endpoint::parse("unix://relative.sock").unwrap_err().to_string().contains("absolute"));
        assert!(Endpoint::parse("containerd.sock").is_err());
        assert!(Endpoint::parse("unix:///").is_err());
    }

    #[test]
    fn rpc_names_and_paths_agree() {
        assert_eq!(rpc!(RuntimeService, "Version"), ("Version", "/runtime.v1.RuntimeService/Version"));
        assert_eq!(rpc!(ImageService, "PullImage"), ("PullImage", "/runtime.v1.ImageService/PullImage"));
    }
}
