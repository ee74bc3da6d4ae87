//! The narrow interface gpuhub needs from a container runtime, and [`fake::FakeRuntime`], a recording
//! fake that keeps containers in memory for tests of everything above the driver.
//!
//! The trait speaks in gpuhub's terms (a [`ContainerSpec`] with limits, user, mounts and GPUs), never in
//! an engine's; each engine crate (Docker today) translates.

pub mod fake;

use async_trait::async_trait;
use futures::stream::BoxStream;
use std::collections::BTreeMap;
use std::time::Duration;

/// Label naming the owner's username on every container gpuhub makes.
pub const LABEL_OWNER: &str = "gpuhub.owner";
/// Label naming the workload id on every container gpuhub makes.
pub const LABEL_WORKLOAD: &str = "gpuhub.workload";

/// What can go wrong talking to a runtime.
#[derive(Debug, thiserror::Error)]
pub enum RuntimeError {
    /// The container (or network) does not exist.
    #[error("container {0} not found")]
    NotFound(String),
    /// The image is not present in the engine.
    #[error("image {0} not found in the container engine")]
    ImageNotFound(String),
    /// The engine refused the request as invalid.
    #[error("container engine refused the request: {0}")]
    Rejected(String),
    /// The engine failed a request it received.
    #[error("container engine: {0}")]
    Engine(String),
    /// The engine could not be reached (not running, restarting, its socket gone): the request may
    /// succeed later, and nothing was done.
    #[error("container engine unavailable: {0}")]
    Unavailable(String),
}

/// How GPUs reach a container.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum GpuAttach {
    /// No GPU.
    #[default]
    None,
    /// A device request for these GPU UUIDs (NVIDIA Container Toolkit, `--gpus device=…`).
    Nvidia { uuids: Vec<String> },
    /// Bind exactly these device nodes (the GPUs' own, plus the control nodes that exist).
    Devices { devices: Vec<DeviceMap> },
}

/// A host device node handed to a container.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceMap {
    /// Path of the character device on the host (`/dev/nvidia3`, or a test's `mknod` node).
    pub host: String,
    /// Path inside the container (`/dev/nvidia3`).
    pub container: String,
}

/// A bind mount.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mount {
    /// Host path.
    pub source: String,
    /// Path in the container.
    pub target: String,
    pub read_only: bool,
}

/// Everything needed to create one container. The runtime applies all of it or fails.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContainerSpec {
    /// Container name (unique in the engine).
    pub name: String,
    pub image: String,
    /// Command; empty for the image's default.
    pub command: Vec<String>,
    pub env: BTreeMap<String, String>,
    pub labels: BTreeMap<String, String>,
    /// `uid:gid`; never root for users' work.
    pub user: String,
    pub hostname: Option<String>,
    pub working_dir: Option<String>,
    /// CPU quota in milli-CPUs.
    pub cpu_milli: u64,
    /// Memory limit in bytes; swap is set equal (no swap).
    pub memory_bytes: u64,
    pub pids_limit: i64,
    pub mounts: Vec<Mount>,
    /// The network to attach to (created with [`Runtime::ensure_network`]).
    pub network: Option<String>,
    pub gpus: GpuAttach,
    /// About how much output the engine keeps for this container, at most (rotating older output
    /// away); `None` leaves it to the engine's defaults, which may keep everything.
    pub log_max_bytes: Option<u64>,
}

/// Coarse container status.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ContainerStatus {
    Created,
    Running,
    /// Exited with this code.
    Exited(i64),
}

/// A container the runtime has, as seen by inspect/list.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContainerInfo {
    pub id: String,
    pub name: String,
    pub labels: BTreeMap<String, String>,
    pub status: ContainerStatus,
    /// The container's IP address on its network, when running.
    pub ip: Option<String>,
}

/// Something that happened to a gpuhub container.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RuntimeEvent {
    Started {
        id: String,
        workload: String,
    },
    /// The main process ended.
    Died {
        id: String,
        workload: String,
        exit_code: i64,
    },
    /// The container was removed.
    Destroyed {
        id: String,
        workload: String,
    },
}

/// A chunk of log output.
pub type LogStream = BoxStream<'static, Result<bytes::Bytes, RuntimeError>>;
/// A process started inside a running container.
pub struct ExecHandle {
    /// The runtime's id of this exec (for [`Runtime::exec_resize`] and [`Runtime::exec_exit_code`]).
    pub id: String,
    /// The process's stdin.
    pub input: std::pin::Pin<Box<dyn tokio::io::AsyncWrite + Send>>,
    /// stdout and stderr (one stream; with a TTY they are one anyway). Ends when the process ends.
    pub output: LogStream,
}

impl std::fmt::Debug for ExecHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ExecHandle").field("id", &self.id).finish_non_exhaustive()
    }
}

/// What to run with [`Runtime::exec`].
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ExecSpec {
    pub command: Vec<String>,
    /// `uid:gid`.
    pub user: String,
    pub env: BTreeMap<String, String>,
    pub working_dir: Option<String>,
    /// Allocate a pseudo-terminal of this size (columns, rows).
    pub tty: Option<(u16, u16)>,
}

/// The runtime's event feed.
pub type EventStream = BoxStream<'static, Result<RuntimeEvent, RuntimeError>>;

/// A container runtime: Docker today, others later. Implementations must be cheap to clone behind an `Arc`.
#[async_trait]
pub trait Runtime: Send + Sync + std::fmt::Debug {
    /// Whether the engine has this image locally.
    async fn image_exists(&self, image: &str) -> Result<bool, RuntimeError>;
    /// Creates (or finds) a bridge network of this name, isolated from others' networks, carrying
    /// `labels` (gpuhub's own: [`LABEL_OWNER`], the installation id). An existing network is joined only
    /// when it is a gpuhub bridge whose labels include these.
    async fn ensure_network(&self, name: &str, labels: &BTreeMap<String, String>) -> Result<(), RuntimeError>;
    /// Creates a container; returns its id.
    async fn create(&self, spec: &ContainerSpec) -> Result<String, RuntimeError>;
    async fn start(&self, id: &str) -> Result<(), RuntimeError>;
    /// Stops with SIGTERM, then SIGKILL after `grace`. Stopping a stopped container is fine.
    async fn stop(&self, id: &str, grace: Duration) -> Result<(), RuntimeError>;
    /// Removes a container (forcibly). Removing a missing one is `NotFound`.
    async fn remove(&self, id: &str) -> Result<(), RuntimeError>;
    async fn inspect(&self, id: &str) -> Result<ContainerInfo, RuntimeError>;
    /// Every container carrying the [`LABEL_WORKLOAD`] label, running or not.
    async fn list_managed(&self) -> Result<Vec<ContainerInfo>, RuntimeError>;
    /// stdout and stderr interleaved, as the engine delivers it (chunk by chunk, never collected); with
    /// `follow`, the stream ends when the container stops; with `tail`, only the last `tail` lines.
    async fn logs(&self, id: &str, follow: bool, tail: Option<u64>) -> Result<LogStream, RuntimeError>;
    /// Events of containers with the [`LABEL_WORKLOAD`] label, from now on.
    async fn events(&self) -> Result<EventStream, RuntimeError>;
    /// Starts a process in a running container, attached to its stdin and output.
    async fn exec(&self, container: &str, spec: &ExecSpec) -> Result<ExecHandle, RuntimeError>;
    /// Resizes an exec's pseudo-terminal.
    async fn exec_resize(&self, exec_id: &str, cols: u16, rows: u16) -> Result<(), RuntimeError>;
    /// The exit code of an exec once its process has ended (`None` while it runs).
    async fn exec_exit_code(&self, exec_id: &str) -> Result<Option<i64>, RuntimeError>;
}
