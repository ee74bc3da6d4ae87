//! The data the scheduler reads and writes: nodes and GPUs, requests, running and pending workloads,
//! placements and decisions. Everything is plain, `serde`-serialisable data.
//!
//! Units: CPUs in thousandths of a core (`cpu_milli`), memory in bytes, GPUs in thousandths of a GPU
//! (`milli`, 1000 = one whole GPU), times in milliseconds since an epoch the caller chooses.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// One whole GPU, in milli-GPU.
pub const WHOLE: u32 = 1000;

/// One GPU of a node.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Gpu {
    /// Stable identifier (`GPU-…`).
    pub uuid: String,
    /// Index on the node.
    #[serde(default)]
    pub index: u32,
    /// Model name (`H100`, `V100M32`).
    pub model: String,
    /// Device memory in bytes (0 when unknown).
    #[serde(default)]
    pub memory: u64,
    /// Its shares go to one user at a time (an MPS GPU: one MPS server serves one Linux user), so a
    /// share of another user waits until the GPU's shares have all ended. Whole GPUs are unaffected.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub single_user: bool,
}

/// A node: a host that runs containers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Node {
    /// Unique node name.
    pub name: String,
    /// CPUs in milli-cores.
    pub cpu_milli: u64,
    /// Memory in bytes.
    pub memory: u64,
    /// Free-form labels (`rack = "a"`), visible to resource expressions as `node.labels.<key>`.
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
    /// GPUs, in index order.
    #[serde(default)]
    pub gpus: Vec<Gpu>,
}

/// The nodes the scheduler may place work on.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Cluster {
    /// All nodes.
    pub nodes: Vec<Node>,
}

/// How much GPU a request (one gang member) needs.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "kind")]
pub enum GpuRequest {
    /// No GPU.
    #[default]
    None,
    /// `count` whole GPUs (1…N) on one node; each is exclusive.
    Whole {
        /// Number of GPUs.
        count: u32,
    },
    /// A share of one GPU in milli-GPU (1…999), optionally with an amount of GPU memory in bytes.
    Fraction {
        /// Milli-GPU.
        milli: u32,
        /// GPU memory in bytes the share needs; none means no memory is reserved.
        #[serde(default)]
        memory: Option<u64>,
    },
}

impl GpuRequest {
    /// Milli-GPU asked for in all (1000 per whole GPU).
    pub fn milli(&self) -> u64 {
        match *self {
            Self::None => 0,
            Self::Whole { count } => u64::from(count) * u64::from(WHOLE),
            Self::Fraction { milli, .. } => u64::from(milli),
        }
    }

    /// `(per-GPU milli, number of GPUs)`: whole = `(1000, count)`, fraction = `(milli, 1)`, none = `(0, 0)`.
    pub fn shape(&self) -> (u32, u32) {
        match *self {
            Self::None => (0, 0),
            Self::Whole { count } => (WHOLE, count),
            Self::Fraction { milli, .. } => (milli, 1),
        }
    }
}

/// The resources of one member of a workload.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Request {
    /// CPUs in milli-cores.
    pub cpu_milli: u64,
    /// Memory in bytes.
    pub memory: u64,
    /// GPUs.
    #[serde(default)]
    pub gpu: GpuRequest,
    /// GPU models allowed (empty: any).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub gpu_models: Vec<String>,
    /// A resource expression every chosen node and GPU must satisfy, e.g.
    /// `gpu.model in ["H100","H200"] && node.labels.rack != "b"`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub constraint: Option<String>,
}

/// Where one member of a workload runs, and what it holds there.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Placement {
    /// Node name.
    pub node: String,
    /// GPU shares: `(uuid, milli)`; 1000 is the whole GPU.
    #[serde(default)]
    pub gpus: Vec<GpuShare>,
    /// CPUs held, milli-cores.
    pub cpu_milli: u64,
    /// Memory held, bytes.
    pub memory: u64,
}

/// A share of one GPU.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GpuShare {
    /// GPU uuid.
    pub uuid: String,
    /// Milli-GPU (1000 = whole, exclusive).
    pub milli: u32,
    /// GPU memory reserved, bytes.
    #[serde(default)]
    pub memory: u64,
}

/// A workload that holds resources now.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Running {
    /// Workload id.
    pub id: String,
    /// Queue (team); empty is the default queue.
    #[serde(default)]
    pub queue: String,
    /// Owner.
    #[serde(default)]
    pub user: String,
    /// Higher runs first.
    #[serde(default)]
    pub priority: i32,
    /// When it started.
    pub started_ms: i64,
    /// The run-time limit the user gave; the workload is expected to end by `started_ms + limit`.
    #[serde(default)]
    pub runtime_limit_ms: Option<i64>,
    /// What it holds, one entry per gang member.
    pub placements: Vec<Placement>,
    /// Whether it may be preempted.
    #[serde(default = "yes")]
    pub preemptible: bool,
    /// Long-running work (a service): preempted only while its queue holds more than its guarantee,
    /// never within it for a higher priority of its own queue.
    #[serde(default)]
    pub long_running: bool,
    /// Already told to stop (a grace period runs): its resources are about to be free.
    #[serde(default)]
    pub stopping: bool,
}

fn yes() -> bool {
    true
}

fn one() -> u32 {
    1
}

/// A workload that waits for resources.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Pending {
    /// Workload id.
    pub id: String,
    /// Queue (team); empty is the default queue.
    #[serde(default)]
    pub queue: String,
    /// Owner.
    #[serde(default)]
    pub user: String,
    /// Higher runs first.
    #[serde(default)]
    pub priority: i32,
    /// When it entered the queue.
    pub submit_ms: i64,
    /// What each member needs.
    pub request: Request,
    /// Gang size: this many members start together or none does (multi-node training).
    #[serde(default = "one")]
    pub members: u32,
    /// The run-time limit the user gave (used to plan backfill and estimated starts).
    #[serde(default)]
    pub runtime_limit_ms: Option<i64>,
}

/// The decision to start a workload: one placement per member.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Start {
    /// Workload id.
    pub id: String,
    /// Where each member runs.
    pub placements: Vec<Placement>,
}

/// The decision to stop a running workload so that others can start.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Preempt {
    /// The victim's id.
    pub id: String,
    /// The pending workload it makes room for.
    pub for_id: String,
    /// Why (human text).
    pub reason: String,
    /// How long the victim may run before it is stopped.
    pub grace_ms: i64,
}

/// Everything one scheduling pass decided.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Decisions {
    /// Workloads to start now, in decision order.
    pub starts: Vec<Start>,
    /// Running workloads to stop after a grace period.
    pub preemptions: Vec<Preempt>,
    /// Why each workload that stays pending waits, in queue order.
    pub pending: Vec<crate::explain::Explanation>,
}
