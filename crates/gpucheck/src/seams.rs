//! The narrow seams the checks run through besides the [`crate::launch::Launcher`]: the time
//! ([`Clock`]) and gpuhub's MPS control daemon ([`MpsDaemon`]). The real ones are here; the recording
//! fakes are in [`crate::fake`].

use chrono::{DateTime, Utc};
use gpuhub_gpu::GpuSampler;
use std::path::PathBuf;
use std::time::Duration;

pub use crate::error::SeamError;

/// The time, and waiting.
pub trait Clock: std::fmt::Debug {
    /// Now.
    fn now(&self) -> DateTime<Utc>;
    /// Waits `d`.
    fn sleep(&self, d: Duration);
}

/// The system's clock.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> DateTime<Utc> {
        Utc::now()
    }

    fn sleep(&self, d: Duration) {
        std::thread::sleep(d);
    }
}

/// What an MPS client needs to reach a running daemon.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MpsClient {
    /// `CUDA_MPS_PIPE_DIRECTORY`.
    pub pipe_dir: PathBuf,
    /// `CUDA_MPS_LOG_DIRECTORY`, where the daemon has one.
    pub log_dir: Option<PathBuf>,
    /// The daemon's private shared memory, which must be its clients' `/dev/shm` (as in a container);
    /// `None` where the daemon shares the host's.
    pub shm_dir: Option<PathBuf>,
}

/// gpuhub's MPS control daemon for one GPU.
pub trait MpsDaemon: std::fmt::Debug {
    /// Starts (or finds running) the daemon for GPU `uuid`.
    ///
    /// # Errors
    /// Why it does not run.
    fn start(&mut self, uuid: &str) -> Result<MpsClient, SeamError>;
    /// Stops every daemon started.
    ///
    /// # Errors
    /// Why one could not be stopped.
    fn stop(&mut self) -> Result<(), SeamError>;
}

/// Everything the checks touch outside themselves.
pub struct Seams<'a> {
    /// NVML (or a fake).
    pub sampler: &'a dyn GpuSampler,
    /// Starts CUDA workers.
    pub launcher: &'a dyn crate::launch::Launcher,
    /// gpuhub's MPS daemon.
    pub mps: &'a mut dyn MpsDaemon,
    /// The time.
    pub clock: &'a dyn Clock,
    /// Says what is being checked now (on stderr), as the checks take a while.
    pub say: &'a dyn Fn(&str),
}

impl std::fmt::Debug for Seams<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Seams")
            .field("sampler", &self.sampler)
            .field("launcher", &self.launcher)
            .field("mps", &self.mps)
            .field("clock", &self.clock)
            .finish_non_exhaustive()
    }
}

/// `name` on `PATH`, if it is there.
pub fn on_path(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path).map(|dir| dir.join(name)).find(|p| p.is_file())
}
