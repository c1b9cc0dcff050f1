//! Holding the fake's RunPodSandbox until a file exists: how a test sees what is made while
//! a sandbox is (`runtime::host_files`), which would never appear if it were made after.

use super::FakeRuntime;
use crate::cri::{Code, Status};
use std::path::PathBuf;
use std::time::{Duration, Instant};

impl FakeRuntime {
    /// RunPodSandbox waits until `path` exists (up to 2 s), and fails if it never does.
    pub fn hold_sandbox_until(self, path: PathBuf) -> FakeRuntime {
        self.state().hold_sandbox = Some(path);
        self
    }

    /// The wait of [`FakeRuntime::hold_sandbox_until`], if one was asked for.
    pub(super) async fn held(&self) -> Result<(), Status> {
        let Some(path) = self.state().hold_sandbox.clone() else { return Ok(()) };
        let deadline = Instant::now() + Duration::from_secs(2);
        while !path.exists() {
            if Instant::now() > deadline {
                return Err(Status::new(Code::DeadlineExceeded, format!("held until {} exists", path.display())));
            }
            smol::Timer::after(Duration::from_millis(2)).await;
        }
        Ok(())
    }
}
