//! [`RuntimeService`]: the CRI calls the pod engine, the probes, the lifecycle hooks, log
//! rotation, image garbage collection and the local API make, as a trait (kubelet's `internalapi.RuntimeService` and `ImageManagerService`). [`Cri`]
//! implements it against a real runtime; the engine's unit tests implement it with a fake
//! (`cri::fake`), so a pod's sync, teardown, adoption and orphan handling are tested
//! without containerd. Methods and errors are [`Cri`]'s.

use super::api::{
    AttachRequest, AuthConfig, Container, ContainerConfig, ContainerEventResponse, ContainerFilter, ContainerStats,
    ContainerStatusResponse, ExecRequest, ExecSyncRequest, ExecSyncResponse, Image, ImageFsInfoResponse, PodSandbox,
    PodSandboxConfig, PodSandboxFilter, PodSandboxStatusResponse, PortForwardRequest, StatusResponse, VersionResponse,
};
use super::client::{ContainerEvents, Cri};
use crate::grpc::status::Status;
use std::future::Future;
use std::time::Duration;

/// The runtime as the engine sees it. Futures are `Send`: workers run on smol's executor.
pub trait RuntimeService: Clone + Send + Sync + 'static {
    /// The runtime's stream of container events.
    type Events: EventStream;

    fn version(&self) -> impl Future<Output = Result<VersionResponse, Status>> + Send;
    fn status(&self, verbose: bool) -> impl Future<Output = Result<StatusResponse, Status>> + Send;
    /// Whether the runtime drives cgroups through systemd (RuntimeConfig; `false` from a
    /// runtime without the call, which uses cgroupfs).
    fn systemd_cgroups(&self) -> impl Future<Output = Result<bool, Status>> + Send;
    fn run_pod_sandbox(
        &self,
        config: PodSandboxConfig,
        runtime_handler: &str,
    ) -> impl Future<Output = Result<String, Status>> + Send;
    fn stop_pod_sandbox(&self, id: &str) -> impl Future<Output = Result<(), Status>> + Send;
    fn remove_pod_sandbox(&self, id: &str) -> impl Future<Output = Result<(), Status>> + Send;
    fn pod_sandbox_status(
        &self,
        id: &str,
        verbose: bool,
    ) -> impl Future<Output = Result<PodSandboxStatusResponse, Status>> + Send;
    fn list_pod_sandbox(
        &self,
        filter: Option<PodSandboxFilter>,
    ) -> impl Future<Output = Result<Vec<PodSandbox>, Status>> + Send;
    fn create_container(
        &self,
        pod_sandbox_id: &str,
        config: ContainerConfig,
        sandbox_config: PodSandboxConfig,
    ) -> impl Future<Output = Result<String, Status>> + Send;
    fn start_container(&self, id: &str) -> impl Future<Output = Result<(), Status>> + Send;
    fn stop_container(&self, id: &str, grace: Duration) -> impl Future<Output = Result<(), Status>> + Send;
    fn remove_container(&self, id: &str) -> impl Future<Output = Result<(), Status>> + Send;
    fn list_containers(
        &self,
        filter: Option<ContainerFilter>,
    ) -> impl Future<Output = Result<Vec<Container>, Status>> + Send;
    fn container_status(
        &self,
        id: &str,
        verbose: bool,
    ) -> impl Future<Output = Result<ContainerStatusResponse, Status>> + Send;
    fn reopen_container_log(&self, id: &str) -> impl Future<Output = Result<(), Status>> + Send;
    fn exec_sync_with_deadline(
        &self,
        req: ExecSyncRequest,
        deadline: Option<Duration>,
    ) -> impl Future<Output = Result<ExecSyncResponse, Status>> + Send;
    fn image_status(&self, image: &str) -> impl Future<Output = Result<Option<Image>, Status>> + Send;
    /// Subscribes to container events; Unimplemented (on the first event) where the runtime
    /// has none.
    fn container_events(&self) -> impl Future<Output = Result<Self::Events, Status>> + Send;
    fn pull_image(
        &self,
        image: &str,
        auth: Option<AuthConfig>,
        sandbox_config: Option<PodSandboxConfig>,
    ) -> impl Future<Output = Result<String, Status>> + Send;
    fn list_images(&self) -> impl Future<Output = Result<Vec<Image>, Status>> + Send;
    fn remove_image(&self, image: &str) -> impl Future<Output = Result<(), Status>> + Send;
    fn image_fs_info(&self) -> impl Future<Output = Result<ImageFsInfoResponse, Status>> + Send;
    fn list_container_stats(&self) -> impl Future<Output = Result<Vec<ContainerStats>, Status>> + Send;
    /// Exec, Attach and PortForward: a one-time URL on the runtime's streaming server.
    fn exec(&self, req: ExecRequest) -> impl Future<Output = Result<String, Status>> + Send;
    fn attach(&self, req: AttachRequest) -> impl Future<Output = Result<String, Status>> + Send;
    fn port_forward(&self, req: PortForwardRequest) -> impl Future<Output = Result<String, Status>> + Send;
}

/// A stream of container events (GetContainerEvents).
pub trait EventStream: Send + 'static {
    /// The next event; `None` when the runtime ended the stream.
    fn next(&mut self) -> impl Future<Output = Result<Option<ContainerEventResponse>, Status>> + Send;
}

impl EventStream for ContainerEvents {
    async fn next(&mut self) -> Result<Option<ContainerEventResponse>, Status> {
        ContainerEvents::next(self).await
    }
}

impl RuntimeService for Cri {
    type Events = ContainerEvents;

    async fn version(&self) -> Result<VersionResponse, Status> {
        Cri::version(self).await
    }
    async fn status(&self, verbose: bool) -> Result<StatusResponse, Status> {
        Cri::status(self, verbose).await
    }
    async fn systemd_cgroups(&self) -> Result<bool, Status> {
        Cri::systemd_cgroups(self).await
    }
    async fn run_pod_sandbox(&self, config: PodSandboxConfig, runtime_handler: &str) -> Result<String, Status> {
        Cri::run_pod_sandbox(self, config, runtime_handler).await
    }
    async fn stop_pod_sandbox(&self, id: &str) -> Result<(), Status> {
        Cri::stop_pod_sandbox(self, id).await
    }
    async fn remove_pod_sandbox(&self, id: &str) -> Result<(), Status> {
        Cri::remove_pod_sandbox(self, id).await
    }
    async fn pod_sandbox_status(&self, id: &str, verbose: bool) -> Result<PodSandboxStatusResponse, Status> {
        Cri::pod_sandbox_status(self, id, verbose).await
    }
    async fn list_pod_sandbox(&self, filter: Option<PodSandboxFilter>) -> Result<Vec<PodSandbox>, Status> {
        Cri::list_pod_sandbox(self, filter).await
    }
    async fn create_container(
        &self,
        pod_sandbox_id: &str,
        config: ContainerConfig,
        sandbox_config: PodSandboxConfig,
    ) -> Result<String, Status> {
        Cri::create_container(self, pod_sandbox_id, config, sandbox_config).await
    }
    async fn start_container(&self, id: &str) -> Result<(), Status> {
        Cri::start_container(self, id).await
    }
    async fn stop_container(&self, id: &str, grace: Duration) -> Result<(), Status> {
        Cri::stop_container(self, id, grace).await
    }
    async fn remove_container(&self, id: &str) -> Result<(), Status> {
        Cri::remove_container(self, id).await
    }
    async fn list_containers(&self, filter: Option<ContainerFilter>) -> Result<Vec<Container>, Status> {
        Cri::list_containers(self, filter).await
    }
    async fn container_status(&self, id: &str, verbose: bool) -> Result<ContainerStatusResponse, Status> {
        Cri::container_status(self, id, verbose).await
    }
    async fn reopen_container_log(&self, id: &str) -> Result<(), Status> {
        Cri::reopen_container_log(self, id).await
    }
    async fn exec_sync_with_deadline(
        &self,
        req: ExecSyncRequest,
        deadline: Option<Duration>,
    ) -> Result<ExecSyncResponse, Status> {
        Cri::exec_sync_with_deadline(self, req, deadline).await
    }
    async fn image_status(&self, image: &str) -> Result<Option<Image>, Status> {
        Cri::image_status(self, image).await
    }
    async fn container_events(&self) -> Result<ContainerEvents, Status> {
        Cri::container_events(self).await
    }
    async fn pull_image(
        &self,
        image: &str,
        auth: Option<AuthConfig>,
        sandbox_config: Option<PodSandboxConfig>,
    ) -> Result<String, Status> {
        Cri::pull_image(self, image, auth, sandbox_config).await
    }
    async fn list_images(&self) -> Result<Vec<Image>, Status> {
        Cri::list_images(self, None).await
    }
    async fn remove_image(&self, image: &str) -> Result<(), Status> {
        Cri::remove_image(self, image).await
    }
    async fn image_fs_info(&self) -> Result<ImageFsInfoResponse, Status> {
        Cri::image_fs_info(self).await
    }
    async fn list_container_stats(&self) -> Result<Vec<ContainerStats>, Status> {
        Cri::list_container_stats(self, None).await
    }
    async fn exec(&self, req: ExecRequest) -> Result<String, Status> {
        Cri::exec(self, req).await
    }
    async fn attach(&self, req: AttachRequest) -> Result<String, Status> {
        Cri::attach(self, req).await
    }
    async fn port_forward(&self, req: PortForwardRequest) -> Result<String, Status> {
        Cri::port_forward(self, req).await
    }
}
