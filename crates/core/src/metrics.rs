//! What the monitor measures: per member of a running workload (CPU, memory, its GPUs' use) and per
//! GPU (utilisation, memory, power, temperature, who holds it), as one snapshot per sampling interval.
//! The API, `/metrics`, the history and the idle-GPU rule all read these shapes.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

/// One member of a running workload at one instant.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct MemberMetrics {
    /// The workload's id.
    pub workload_id: String,
    /// The workload's name.
    pub workload: String,
    /// Its owner.
    pub owner: String,
    /// Its team queue (`default` for the default queue).
    pub queue: String,
    /// The member's index in its run.
    pub member: u32,
    /// The node it runs on, when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node: Option<String>,
    /// CPU in use, in cores (1.5 = one and a half cores busy), averaged since the previous sample;
    /// `None` on the first sample of a member.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_cores: Option<f64>,
    /// Memory in use (working set), bytes.
    pub memory_used: u64,
    /// Its memory limit, bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_limit: Option<u64>,
    /// The GPUs it holds (UUIDs or engine names).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub gpus: Vec<String>,
    /// Mean utilisation of the GPUs it holds, percent (a share sees its whole GPU's utilisation);
    /// `None` when it holds no GPU or no GPU figures are available.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu_utilization_pct: Option<f64>,
    /// GPU memory used by its own processes (attributed through their cgroups), bytes; `None` when
    /// it holds no GPU or the processes cannot be attributed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu_memory_used: Option<u64>,
}

/// One GPU at one instant.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct GpuMetrics {
    /// The node it is on.
    pub node: String,
    /// Its UUID (or engine name).
    pub uuid: String,
    /// Its index on the node.
    pub index: u32,
    /// Its model.
    pub model: String,
    /// Utilisation, percent.
    pub utilization_pct: f64,
    /// Memory used, bytes.
    pub memory_used: u64,
    /// Memory in all, bytes.
    pub memory_total: u64,
    /// Power draw, watts, when the GPU reports it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub power_watts: Option<f64>,
    /// Temperature, °C, when the GPU reports it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub temperature_c: Option<f64>,
    /// The workloads holding it (whole, or shares), as `owner/name`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub holders: Vec<String>,
}

/// Everything measured in one sampling round.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct MetricsSnapshot {
    /// When it was taken; `None` before the first round.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub at: Option<DateTime<Utc>>,
    /// Every member of every running workload that could be measured.
    pub members: Vec<MemberMetrics>,
    /// Every GPU the samplers see.
    pub gpus: Vec<GpuMetrics>,
}
