//! What the monitor measures: per member of a running workload (CPU, memory, its GPUs' use) and per
//! GPU (utilisation, memory, power, temperature, who holds it), as one snapshot per sampling interval.
//! The API, `/metrics`, the history and the idle-GPU rule all read these shapes; the history is read back
//! as points ([`MemberPoint`], [`GpuPoint`]): means over a step.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

/// One member of a running workload at one instant.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
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
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
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
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct MetricsSnapshot {
    /// When it was taken; `None` before the first round.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub at: Option<DateTime<Utc>>,
    /// Every member of every running workload that could be measured.
    pub members: Vec<MemberMetrics>,
    /// Every GPU the samplers see.
    pub gpus: Vec<GpuMetrics>,
}

/// One member of a workload over one step of its history: the mean of the samples kept in that step
/// (raw samples, or 1-minute or 1-hour means where the raw ones were thinned out). A figure no sample
/// of the step had is `None`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct MemberPoint {
    /// The member's index in its run.
    pub member: u32,
    /// The start of the step.
    pub at: DateTime<Utc>,
    /// CPU in use, cores.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_cores: Option<f64>,
    /// Memory in use (working set), bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_used: Option<u64>,
    /// Its memory limit, bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_limit: Option<u64>,
    /// Mean utilisation of the GPUs it held, percent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu_utilization_pct: Option<f64>,
    /// GPU memory used by its own processes, bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu_memory_used: Option<u64>,
}

/// One GPU over one step of its history (means, as [`MemberPoint`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct GpuPoint {
    /// The node it is on.
    pub node: String,
    /// Its UUID (or engine name).
    pub uuid: String,
    /// The start of the step.
    pub at: DateTime<Utc>,
    /// Utilisation, percent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub utilization_pct: Option<f64>,
    /// Memory used, bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_used: Option<u64>,
    /// Memory in all, bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_total: Option<u64>,
    /// Power draw, watts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub power_watts: Option<f64>,
    /// Temperature, °C.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub temperature_c: Option<f64>,
}

/// `GET /api/v1/workloads/{name}/metrics`: a workload's members over a window, one point per member and
/// step that has samples, ordered by member, then time.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct WorkloadHistory {
    /// The workload's name.
    pub workload: String,
    /// Its owner.
    pub owner: String,
    /// Start of the window (inclusive).
    pub from: DateTime<Utc>,
    /// End of the window (exclusive).
    pub to: DateTime<Utc>,
    /// Seconds per point; steps start at `from`.
    pub step_secs: u64,
    /// The points.
    pub points: Vec<MemberPoint>,
}

/// `GET /api/v1/nodes/metrics`: the GPUs over a window, one point per GPU and step that has samples,
/// ordered by node, GPU, then time.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct GpuHistory {
    /// Only this node's GPUs, when asked.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node: Option<String>,
    /// Start of the window (inclusive).
    pub from: DateTime<Utc>,
    /// End of the window (exclusive).
    pub to: DateTime<Utc>,
    /// Seconds per point; steps start at `from`.
    pub step_secs: u64,
    /// The points.
    pub points: Vec<GpuPoint>,
}
