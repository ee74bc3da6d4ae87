//! NVIDIA MPS (Multi-Process Service) for the shares of GPUs in the `mps` sharing mode: the only crate
//! that knows MPS.
//!
//! A [`Supervisor`] runs one MPS control daemon (`nvidia-cuda-mps-control -f`, in the foreground, as its
//! own child process) per GPU that holds MPS shares, with that GPU alone visible
//! (`CUDA_VISIBLE_DEVICES=<uuid>`) and directories of its own under [`MpsDirs::root`]: the pipe
//! directory (`CUDA_MPS_PIPE_DIRECTORY`, where the daemon's `control` pipe and its servers' sockets
//! are), the log directory (`CUDA_MPS_LOG_DIRECTORY`) and a `shm` directory. One daemon serves one
//! GPU, so one user's MPS server on one GPU never waits for another GPU's.
//!
//! **Reaching the daemon from a container.** An MPS client talks to its server through the pipe
//! directory and through POSIX shared memory in `/dev/shm`. Containers have a `/dev/shm` of their own,
//! so, as NVIDIA's Kubernetes device plugin does, the daemon and its clients share one tmpfs instead of
//! the host's IPC: the supervisor mounts a tmpfs (mode 1777) on `<root>/<uuid>/shm` and starts the daemon
//! in a private mount namespace (`unshare --mount --propagation private`) where that tmpfs is bound over
//! `/dev/shm`; the MPS servers the daemon starts inherit it. A container of a client mounts the pipe
//! directory and the same tmpfs as its `/dev/shm` (the controller's run spec does this). Mounting needs
//! root: without it ([`MpsConfig::private_shm`] false) the daemon shares the host's `/dev/shm`, which
//! containers cannot reach, and [`MpsHealth::note`] says so.
//!
//! **Supervision.** [`Supervisor::ensure`] starts a GPU's daemon if needed and returns once it answers
//! (its `control` pipe exists and `get_server_list` succeeds), because a CUDA client that starts before
//! the daemon answers silently runs without MPS, that is without its limits. A daemon that exits is
//! started again after a backoff that doubles up to [`MpsConfig::max_backoff`]. [`Supervisor::retain`]
//! stops the daemons of GPUs that no longer hold MPS shares (`echo quit | nvidia-cuda-mps-control` with
//! the daemon's environment, then a kill after [`MpsConfig::stop_timeout`]). A daemon left running by an
//! earlier gpuhub (its pid file names a live process and it answers) is adopted and watched by its pid
//! rather than started twice; [`Supervisor::detach`] leaves every daemon running when gpuhub exits, so
//! work running through one keeps its MPS server across a restart (a daemon's own output goes to
//! [`OUTPUT_FILE`] in its log directory, not to gpuhub). [`Supervisor::health`] reports each daemon.
//! With [`MpsConfig::exclusive_process`] the GPU is in the EXCLUSIVE_PROCESS compute mode while its
//! daemon runs, so a client that unsets `CUDA_MPS_PIPE_DIRECTORY` cannot run on it past MPS.
//!
//! Everything here runs programs (`nvidia-cuda-mps-control`, `unshare`, `mount`), so its tests use a
//! fake `nvidia-cuda-mps-control` written by the test; `gpuhub gpu-check` exercises the real one.

mod process;
mod supervisor;

pub use process::OUTPUT_FILE;
pub use supervisor::Supervisor;

use std::path::{Path, PathBuf};
use std::time::Duration;

/// The MPS control program, looked up on `PATH` unless configured as a path.
pub const DEFAULT_PROGRAM: &str = "nvidia-cuda-mps-control";

/// The file in the pipe directory where the control daemon writes its PID.
pub const PID_FILE: &str = "nvidia-cuda-mps-control.pid";

/// The control daemon's named pipe in the pipe directory; it exists once the daemon listens.
pub const CONTROL_PIPE: &str = "control";

/// Where a daemon's files live: `<root>/<uuid>/{pipe,log,shm}`, one directory per GPU.
///
/// MPS servers run as their clients' users and must reach these directories, so every directory above
/// `root` must be searchable by all (`/run/gpuhub/mps`, not inside the 0700 data directory); a daemon
/// under a closed one is refused with [`MpsError::Unreachable`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MpsDirs {
    /// The directory holding one directory per GPU.
    pub root: PathBuf,
}

impl MpsDirs {
    /// The layout under `root`.
    pub fn new(root: impl Into<PathBuf>) -> Self {
        Self { root: root.into() }
    }

    /// The directory of GPU `uuid`'s daemon.
    pub fn gpu_dir(&self, uuid: &str) -> PathBuf {
        self.root.join(uuid)
    }

    /// `CUDA_MPS_PIPE_DIRECTORY` of GPU `uuid`'s daemon, its servers and its clients.
    pub fn pipe_dir(&self, uuid: &str) -> PathBuf {
        self.gpu_dir(uuid).join("pipe")
    }

    /// `CUDA_MPS_LOG_DIRECTORY` of GPU `uuid`'s daemon (`control.log`, `server.log`).
    pub fn log_dir(&self, uuid: &str) -> PathBuf {
        self.gpu_dir(uuid).join("log")
    }

    /// The tmpfs that is `/dev/shm` for GPU `uuid`'s daemon, its servers and its clients' containers.
    pub fn shm_dir(&self, uuid: &str) -> PathBuf {
        self.gpu_dir(uuid).join("shm")
    }
}

/// How the supervisor runs daemons.
#[derive(Debug, Clone)]
pub struct MpsConfig {
    /// `nvidia-cuda-mps-control`: a name looked up on `PATH`, or a path.
    pub program: PathBuf,
    /// Where each GPU's directories are.
    pub dirs: MpsDirs,
    /// Start each daemon in a private mount namespace with its own tmpfs as `/dev/shm` (needs root;
    /// [`MpsConfig::new`] turns it on when running as root).
    pub private_shm: bool,
    /// The size of each GPU's shared-memory tmpfs, in bytes.
    pub shm_bytes: u64,
    /// The `unshare` program (util-linux), for [`MpsConfig::private_shm`].
    pub unshare: PathBuf,
    /// How long a starting daemon may take to answer.
    pub start_timeout: Duration,
    /// How long `quit` may take before the daemon is killed; also the limit of one command to it.
    pub stop_timeout: Duration,
    /// The wait before the first restart of a daemon that exited or failed to start.
    pub restart_backoff: Duration,
    /// The longest wait between restarts (the backoff doubles up to this, and starts over once a
    /// daemon has run this long).
    pub max_backoff: Duration,
    /// How often an adopted daemon (not this process's child) is checked for being alive.
    pub adopted_poll: Duration,
    /// The `nvidia-smi` that puts a GPU in the EXCLUSIVE_PROCESS compute mode while its daemon runs (and
    /// back in DEFAULT once the daemon is stopped), as NVIDIA's device plugin does: only the MPS server
    /// then makes contexts on the GPU, so a client that unsets `CUDA_MPS_PIPE_DIRECTORY` fails instead of
    /// running past its limits. `None` (the default): the compute mode is left as it is.
    pub exclusive_process: Option<PathBuf>,
}

impl MpsConfig {
    /// The defaults for daemons under `root`: the program on `PATH`, a private 64 MiB `/dev/shm` when
    /// running as root, 10 s to start and to stop, restarts after 1 s doubling up to 1 min.
    pub fn new(root: impl Into<PathBuf>) -> Self {
        Self {
            program: PathBuf::from(DEFAULT_PROGRAM),
            dirs: MpsDirs::new(root),
            private_shm: rustix::process::geteuid().is_root(),
            shm_bytes: 64 << 20,
            unshare: PathBuf::from("unshare"),
            start_timeout: Duration::from_secs(10),
            stop_timeout: Duration::from_secs(10),
            restart_backoff: Duration::from_secs(1),
            max_backoff: Duration::from_secs(60),
            adopted_poll: Duration::from_secs(1),
            exclusive_process: None,
        }
    }
}

/// A daemon that answers: what a client of GPU `uuid` needs to reach it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MpsEndpoint {
    /// The GPU it serves.
    pub uuid: String,
    /// Its pipe directory on the host (a client's `CUDA_MPS_PIPE_DIRECTORY`, mounted read-write).
    pub pipe_dir: PathBuf,
    /// Its shared memory on the host (a client container's `/dev/shm`).
    pub shm_dir: PathBuf,
    /// Its log directory on the host.
    pub log_dir: PathBuf,
    /// The control daemon's PID.
    pub pid: u32,
}

/// How one GPU's daemon is doing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MpsHealth {
    /// The GPU.
    pub uuid: String,
    /// Whether the daemon runs and answered.
    pub running: bool,
    /// The control daemon's PID while it runs.
    pub pid: Option<u32>,
    /// How many times it was started again after it exited or failed to start.
    pub restarts: u32,
    /// Why it last exited or failed to start, if it ever did.
    pub last_error: Option<String>,
    /// Whether it was found running (left by an earlier gpuhub) and is watched by its PID.
    pub adopted: bool,
    /// Whether it has a private `/dev/shm` that containers can mount ([`MpsConfig::private_shm`]).
    pub private_shm: bool,
    /// A caveat an admin should see (no private `/dev/shm`).
    pub note: Option<String>,
}

/// What went wrong with a daemon.
#[derive(Debug, thiserror::Error)]
pub enum MpsError {
    /// The control program is neither on `PATH` nor at the configured path.
    #[error(
        "the MPS control program {program} was not found{where_}: install the NVIDIA driver's utilities or set mps_control to its path"
    )]
    ProgramNotFound {
        /// The program as configured.
        program: String,
        /// Where it was looked for.
        where_: String,
    },
    /// Not a GPU UUID (it names directories, so only letters, digits, `-` and `_` pass).
    #[error("{0:?} is not a GPU uuid")]
    InvalidUuid(String),
    /// The daemon did not start or did not answer.
    #[error("the MPS daemon of GPU {uuid} is not running: {reason}")]
    NotRunning {
        /// The GPU.
        uuid: String,
        /// Why.
        reason: String,
    },
    /// A directory above the root is closed to other users, so MPS servers (run as their clients'
    /// users) could not reach their pipe directory.
    #[error(
        "MPS servers run as their clients' users and cannot reach {}: {} is not searchable by others; put the MPS directory elsewhere (e.g. /run/gpuhub/mps)",
        root.display(),
        closed.display()
    )]
    Unreachable {
        /// The configured root.
        root: PathBuf,
        /// The directory above it without search permission for others.
        closed: PathBuf,
    },
    /// The daemon is being stopped (the supervisor shuts down).
    #[error("the MPS daemon of GPU {uuid} is stopping")]
    Stopping {
        /// The GPU.
        uuid: String,
    },
    /// A file or directory of a daemon could not be made.
    #[error("{what} {}: {source}", path.display())]
    Io {
        /// What was being done.
        what: &'static str,
        /// The path.
        path: PathBuf,
        /// The error.
        source: std::io::Error,
    },
}

/// Checks that `uuid` can name a directory: ASCII letters, digits, `-` and `_`, not empty.
pub fn check_uuid(uuid: &str) -> Result<(), MpsError> {
    let ok = !uuid.is_empty()
        && uuid.len() <= 128
        && uuid.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_');
    if ok { Ok(()) } else { Err(MpsError::InvalidUuid(uuid.to_owned())) }
}

/// The variables a daemon of GPU `uuid` runs with, and any command to it.
pub fn daemon_env(dirs: &MpsDirs, uuid: &str) -> [(&'static str, PathBuf); 3] {
    [
        ("CUDA_VISIBLE_DEVICES", PathBuf::from(uuid)),
        ("CUDA_MPS_PIPE_DIRECTORY", dirs.pipe_dir(uuid)),
        ("CUDA_MPS_LOG_DIRECTORY", dirs.log_dir(uuid)),
    ]
}

fn io_error<'a>(what: &'static str, path: &'a Path) -> impl FnOnce(std::io::Error) -> MpsError + 'a {
    move |source| MpsError::Io { what, path: path.to_owned(), source }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_gpu_has_its_own_directories() {
        let d = MpsDirs::new("/run/gpuhub/mps");
        assert_eq!(d.pipe_dir("GPU-1"), Path::new("/run/gpuhub/mps/GPU-1/pipe"));
        assert_eq!(d.log_dir("GPU-1"), Path::new("/run/gpuhub/mps/GPU-1/log"));
        assert_eq!(d.shm_dir("GPU-2"), Path::new("/run/gpuhub/mps/GPU-2/shm"));
        let env = daemon_env(&d, "GPU-1");
        assert_eq!(env[0], ("CUDA_VISIBLE_DEVICES", PathBuf::from("GPU-1")));
        assert_eq!(env[1].1, d.pipe_dir("GPU-1"));
    }

    #[test]
    fn uuids_that_could_leave_the_root_are_refused() {
        check_uuid("GPU-8f0e7a3c-1b2d-4c5e-9f60-7a8b9c0d1e2f").unwrap();
        check_uuid("MIG-GPU-1_2").unwrap();
        for bad in ["", "..", "../x", "GPU/1", "GPU 1", "GPU-1\n"] {
            let e = check_uuid(bad).unwrap_err().to_string();
            assert!(e.contains("is not a GPU uuid"), "{bad:?}: {e}");
        }
    }
}
