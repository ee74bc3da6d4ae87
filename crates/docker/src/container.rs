//! One Docker container, in gpuhub's terms: what [`crate::DockerRuntime`] creates, inspects and follows.
//! The engine interface above ([`crate::DockerEngine`]) makes one container per member of a run.

use gpuhub_driver::Mount;
use std::collections::BTreeMap;

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
    /// The network to attach to (created with [`crate::DockerRuntime::ensure_network`]).
    pub network: Option<String>,
    /// Other names the container answers to on its network (a gang member's hostname).
    pub aliases: Vec<String>,
    pub gpus: GpuAttach,
    /// About how much output the engine keeps for this container, at most (rotating older output
    /// away); `None` leaves it to the engine's defaults, which may keep everything.
    pub log_max_bytes: Option<u64>,
    /// Supplementary group ids of the process (`docker run --group-add`).
    pub groups: Vec<u32>,
    /// The most the container may write outside its mounts, in bytes (`--storage-opt size=`, which the
    /// engine refuses unless its storage can enforce it); `None`: no cap.
    pub disk_bytes: Option<u64>,
}

/// Coarse container status.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ContainerStatus {
    Created,
    Running,
    /// Exited with this code.
    Exited(i64),
}

/// A container the engine has, as seen by inspect/list.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContainerInfo {
    pub id: String,
    pub name: String,
    pub labels: BTreeMap<String, String>,
    pub status: ContainerStatus,
    /// The container's IP address on its network, when running.
    pub ip: Option<String>,
}
