//! Node inventory: what a host offers.

use crate::{Bytes, CpuMilli};
use serde::{Deserialize, Serialize};

/// One GPU of a node.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct GpuDevice {
    /// Stable identifier (`GPU-…` from NVML, or the configured one).
    pub uuid: String,
    /// Index on the node (`/dev/nvidia<index>`).
    #[serde(default)]
    pub index: u32,
    /// Model name (`H200`, `NVIDIA A100-SXM4-80GB`).
    pub model: String,
    /// Device memory.
    pub memory: Bytes,
    /// The device node handed to a container in `devices` mode.
    #[serde(default)]
    pub device: Option<String>,
    /// How shares of this GPU are enforced (`[[gpus]] sharing`); unset: the installation's
    /// `gpu_sharing`. Inventories the server hands out always carry the mode in force.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sharing: Option<GpuSharing>,
}

/// How gpuhub enforces the shares (milli-GPU) of a GPU; whole GPUs are exclusive in every mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "lowercase")]
pub enum GpuSharing {
    /// gpuhub runs one MPS control daemon for the GPU, mounts its pipe directory into the shares'
    /// containers and sets their memory and thread limits; one MPS server serves one Linux user at a
    /// time, so the scheduler gives the GPU's shares to one user at a time.
    Mps,
    /// Any users may share the GPU; the monitor attributes each GPU process's memory to its member
    /// and stops a share that stays above its memory grant past a grace period
    /// (`gpu_memory_exceeded`). Compute is time-sliced, not capped.
    #[default]
    Guard,
    /// Scheduling only: shares are counted, nothing enforces them.
    #[serde(rename = "none")]
    Unenforced,
}

impl GpuSharing {
    /// Every mode, in the order the documentation lists them.
    pub const ALL: [GpuSharing; 3] = [GpuSharing::Mps, GpuSharing::Guard, GpuSharing::Unenforced];

    /// The mode's name in the config file and the API (`mps`, `guard`, `none`).
    pub fn as_str(self) -> &'static str {
        match self {
            GpuSharing::Mps => "mps",
            GpuSharing::Guard => "guard",
            GpuSharing::Unenforced => "none",
        }
    }
}

impl std::fmt::Display for GpuSharing {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for GpuSharing {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        GpuSharing::ALL
            .into_iter()
            .find(|m| m.as_str() == s)
            .ok_or_else(|| format!("unknown GPU sharing mode {s:?}: expected mps, guard or none"))
    }
}

/// What a node offers in all.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeCapacity {
    /// Node name (the host name for the local engine).
    pub name: String,
    /// CPUs.
    pub cpus: CpuMilli,
    /// Memory.
    pub memory: Bytes,
    /// GPUs, ordered by index.
    pub gpus: Vec<GpuDevice>,
    /// Labels constraints can test (`node.labels.rack`), from the engine or the configuration.
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub labels: std::collections::BTreeMap<String, String>,
}

impl NodeCapacity {
    /// A node named `name` without GPUs or labels.
    pub fn cpu_only(name: &str, cpus: CpuMilli, memory: Bytes) -> Self {
        Self::uniform(name, cpus, memory, 0, "", Bytes(0), "")
    }

    /// A node named `name` with `gpus` GPUs of one model and memory, uuids `<uuid_prefix><index>`, no
    /// device nodes and no labels (as configured inventories and tests describe nodes).
    pub fn uniform(
        name: &str,
        cpus: CpuMilli,
        memory: Bytes,
        gpus: u32,
        model: &str,
        gpu_memory: Bytes,
        uuid_prefix: &str,
    ) -> Self {
        NodeCapacity {
            name: name.to_owned(),
            cpus,
            memory,
            gpus: (0..gpus)
                .map(|i| GpuDevice {
                    uuid: format!("{uuid_prefix}{i}"),
                    index: i,
                    model: model.to_owned(),
                    memory: gpu_memory,
                    device: None,
                    sharing: None,
                })
                .collect(),
            labels: Default::default(),
        }
    }
}
