//! Node inventory: what a host offers.

use crate::{Bytes, CpuMilli};
use serde::{Deserialize, Serialize};

/// One GPU of a node.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
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
                })
                .collect(),
            labels: Default::default(),
        }
    }
}
