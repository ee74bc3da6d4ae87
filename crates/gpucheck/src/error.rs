//! What can go wrong outside the checks, shared by the seams and the launcher.

use std::path::PathBuf;

/// What went wrong outside the checks: starting a worker, or gpuhub's MPS daemon. Shown in the row
/// it fails.
#[derive(Debug, thiserror::Error)]
pub enum SeamError {
    /// A worker could not be started.
    #[error("cannot start {}: {source}", exe.display())]
    Spawn {
        /// The program.
        exe: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// `nvidia-cuda-mps-control` is not on `PATH`.
    #[error("{0} is not on PATH (the NVIDIA driver's utilities ship it)")]
    NoMpsControl(String),
    /// A directory of the MPS daemon could not be made or removed.
    #[error("cannot {what} {}: {source}", path.display())]
    Dir {
        /// What was being done.
        what: &'static str,
        /// The directory.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The MPS supervisor's runtime could not start.
    #[error("cannot start a runtime for the mps daemon: {0}")]
    Runtime(#[source] std::io::Error),
    /// gpuhub's MPS supervisor could not run the daemon.
    #[error(transparent)]
    Mps(#[from] gpuhub_mps::MpsError),
    /// A fake's scripted failure.
    #[error("{0}")]
    Scripted(String),
}
