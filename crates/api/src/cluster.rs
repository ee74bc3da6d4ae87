//! Nodes, GPUs, team queues and reservations as the API shows them.

use chrono::{DateTime, Utc};
use gpuhub_core::queue::LimitView;
use gpuhub_core::{Bytes, Seconds};
use serde::{Deserialize, Serialize};

/// A share of a GPU a workload holds.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct GpuShareView {
    pub owner: String,
    pub workload: String,
    /// Thousandths of the GPU.
    pub milli: u32,
    /// GPU memory reserved for it, if it asked for an amount.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory: Option<Bytes>,
}

/// Who holds a GPU.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct GpuHolder {
    pub owner: String,
    pub workload: String,
}

/// A GPU as `GET /api/v1/nodes` shows it.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct GpuView {
    pub uuid: String,
    pub index: u32,
    pub model: String,
    pub memory: Bytes,
    /// Present while a workload holds it whole.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub holder: Option<GpuHolder>,
    /// Workloads holding shares of it (a GPU is held whole or shared, never both).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub shares: Vec<GpuShareView>,
    /// How its shares are enforced (`mps`, `guard`, `none`); absent where the engine does not say.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sharing: Option<gpuhub_core::node::GpuSharing>,
}

/// A node as `GET /api/v1/nodes` shows it.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct NodeView {
    pub name: String,
    /// The engine's word on its state (`docker`; Slurm's `idle`, `mixed`, `allocated`, `drained: …`).
    #[serde(default)]
    pub state: String,
    /// Cores in all.
    pub cpus: f64,
    /// Cores not held by a workload.
    pub cpus_free: f64,
    pub memory: Bytes,
    pub memory_free: Bytes,
    pub gpus: Vec<GpuView>,
}

/// An amount of the three resources, as people read it; GPUs in whole GPUs (`1.25`).
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct QuotaView {
    pub gpus: f64,
    pub cpus: f64,
    pub memory: Bytes,
}

/// A team queue as `GET /api/v1/queues` shows it.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct QueueView {
    pub name: String,
    /// What the team is guaranteed (reclaimed from borrowers when preemption is on).
    pub guarantee: QuotaView,
    /// How much it may borrow beyond its guarantee; absent: no limit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub borrow_limit: Option<LimitView>,
    /// The most one user may hold in it; absent: no limit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user_limit: Option<LimitView>,
    /// Fair-share weight.
    pub weight: f64,
    /// What its workloads hold now.
    pub used: QuotaView,
    pub running: u32,
    pub queued: u32,
    /// Whether the caller may submit to it.
    pub open_to_you: bool,
    /// Who may submit (admins only see this); absent: everyone.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub members: Option<Vec<String>>,
    /// The priority classes its users may ask for (besides those allowed for every queue).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub priority_classes: Vec<String>,
    /// The group of its team folder, mounted read-write at `/team/<name>` by members who ask
    /// (`"teams": [name]`); absent: no team folder.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub team_gid: Option<u32>,
    /// The longest a workload in it may run; absent: 366 days.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_runtime: Option<Seconds>,
    /// The most a workload in it may ask to write outside its mounts (`disk`); absent: no maximum.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_disk: Option<Bytes>,
}

/// `POST /api/v1/reservations` (admin): book whole GPUs for a team queue during a window.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct CreateReservationRequest {
    /// Unique name; generated when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    /// The queue that may use the booked GPUs.
    pub queue: String,
    /// Whole GPUs to keep free for it.
    pub gpus: u32,
    /// Only GPUs of this model; any when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    pub start: DateTime<Utc>,
    pub end: DateTime<Utc>,
}
