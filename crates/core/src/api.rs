//! The JSON shapes of the HTTP API under `/api/v1`, shared by the server and the CLI.
//!
//! Request types refuse unknown fields, so a typo is an error rather than a silently ignored setting.

use crate::workload::{AppSpec, Resources, WorkloadKind, WorkloadState};
use crate::{Bytes, CoreError, CpuMilli, Seconds};
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use utoipa::ToSchema;

/// `POST /api/v1/login`.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct LoginRequest {
    pub username: String,
    pub password: String,
    /// Whether to make an API token too (the default, for the CLI); the portal's login page asks for a
    /// browser session only (`false`), so a browser login leaves no long-lived token behind.
    #[serde(default = "yes")]
    pub token: bool,
}

fn yes() -> bool {
    true
}

/// A bearer token for the CLI; also set as a session cookie for browsers.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct TokenResponse {
    /// The API token; absent when only a browser session was asked for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token: Option<String>,
    pub username: String,
    pub role: crate::user::Role,
    /// When the token stops working (log in again then).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_at: Option<DateTime<Utc>>,
}

/// One of the caller's API tokens or browser sessions (`GET /api/v1/me/tokens`); the secret is never shown.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema, PartialEq, Eq)]
pub struct TokenView {
    /// Identifies the token for `DELETE /api/v1/me/tokens/{id}` (a prefix of its hash, not the secret).
    pub id: String,
    /// `api` (CLI and scripts) or `session` (a browser).
    pub kind: String,
    pub created_at: DateTime<Utc>,
    pub expires_at: Option<DateTime<Utc>>,
    /// Whether this is the token the request came with.
    pub current: bool,
}

/// `POST /api/v1/me/tokens`: a new API token for the caller (for a script, CI), valid `days` (1 to the
/// server's `token_days`; that by default).
#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateTokenRequest {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub days: Option<i64>,
}

/// A token just made: its secret, shown this once, and its id and expiry.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct NewTokenView {
    /// Identifies it in `GET /api/v1/me/tokens`.
    pub id: String,
    /// The secret (`Authorization: Bearer …`); not shown again.
    pub token: String,
    pub expires_at: DateTime<Utc>,
}

/// `POST /api/v1/me/password`: the caller changes their own password. Every other token and session of
/// the account is revoked; the one the request came with keeps working.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ChangePasswordRequest {
    pub current_password: String,
    pub new_password: String,
}

/// An account as the API shows it.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema, PartialEq, Eq)]
pub struct UserView {
    pub username: String,
    pub role: crate::user::Role,
    /// The UID the user's containers run as.
    pub uid: u32,
    /// The GID they run as (the UID for local accounts).
    #[serde(default)]
    pub gid: u32,
    /// Where the identity comes from: `local`, `ldap` or `oidc`.
    #[serde(default)]
    pub source: crate::user::UserSource,
    pub disabled: bool,
    pub created_at: DateTime<Utc>,
    /// The user's own home quota (`"20GiB"`, `"none"`) when an admin set one; absent: the default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub home_quota: Option<String>,
    /// How full the home is, as its filesystem counts (absent until the home exists).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub home: Option<HomeView>,
}

/// How far the pull of an image is.
#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema, PartialEq, Eq)]
pub struct PullView {
    /// The registry's last word (`Downloading`, `Pull complete`).
    pub status: String,
    /// Bytes fetched so far (of the layers whose size is known).
    pub current_bytes: u64,
    /// Bytes to fetch, as far as known.
    pub total_bytes: u64,
    /// Layers seen, and those in place.
    pub layers: u32,
    pub layers_done: u32,
}

impl PullView {
    /// `45% (3 of 5 layers)`, or the status alone before sizes are known.
    pub fn text(&self) -> String {
        if self.total_bytes == 0 {
            return if self.status.is_empty() { "starting".into() } else { self.status.clone() };
        }
        let pct = (self.current_bytes.min(self.total_bytes) * 100) / self.total_bytes;
        format!(
            "{pct}% of {} ({} of {} layers)",
            crate::quantity::Bytes(self.total_bytes),
            self.layers_done,
            self.layers
        )
    }

    /// What a finished pull fetched: `pulled 24MiB (2 layers)`, or `pulled` when no sizes came.
    pub fn summary(&self) -> String {
        let layers = if self.layers == 1 { "1 layer".to_owned() } else { format!("{} layers", self.layers) };
        match (self.total_bytes, self.layers) {
            (0, 0) => "pulled".into(),
            (0, _) => format!("pulled ({layers})"),
            (t, _) => format!("pulled {} ({layers})", crate::quantity::Bytes(t)),
        }
    }
}

/// A home's usage and the quota in force.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, ToSchema, PartialEq, Eq)]
pub struct HomeView {
    /// Bytes in use.
    pub used_bytes: u64,
    /// The hard limit in force, in bytes; absent: none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub quota_bytes: Option<u64>,
}

impl HomeView {
    /// `3.20GiB of 10GiB`, or the bytes used alone where no quota is in force; `-` for no view (before
    /// the home exists, or where homes are not measured).
    pub fn text(home: Option<&HomeView>) -> String {
        match home {
            Some(h) => match h.quota_bytes {
                Some(q) => format!("{} of {}", Bytes(h.used_bytes), Bytes(q)),
                None => Bytes(h.used_bytes).to_string(),
            },
            None => "-".to_owned(),
        }
    }
}

impl From<&crate::user::User> for UserView {
    fn from(u: &crate::user::User) -> Self {
        Self {
            username: u.username.clone(),
            role: u.role,
            uid: u.uid,
            gid: u.gid,
            source: u.source,
            disabled: u.disabled,
            created_at: u.created_at,
            home_quota: crate::user::home_quota_text(u.home_quota),
            home: None,
        }
    }
}

/// `POST /api/v1/users` (admin).
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateUserRequest {
    pub username: String,
    pub password: String,
    #[serde(default)]
    pub admin: bool,
}

/// `PATCH /api/v1/users/{name}` (admin): each field present is changed.
#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct PatchUserRequest {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub password: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub admin: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub disabled: Option<bool>,
    /// With `"disabled": true`: keep the account's running work running (default: it is stopped).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub keep_workloads: Option<bool>,
    /// The user's home quota: `"20GiB"`, `"none"` (no quota) or `"default"` (the configured one). A
    /// quota below what the home holds is refused.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub home_quota: Option<String>,
}

/// The fewest CPUs a container may be limited to (the engines' minimum: 0.01 of a core).
pub const MIN_CPU_MILLI: u64 = 10;

/// The resources part of a workload request, as a person writes it.
#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ResourceRequest {
    /// CPU cores, fractional allowed (`0.5`); default 1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpus: Option<f64>,
    /// Memory limit (`"4GiB"` or bytes); default 1GiB.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory: Option<Bytes>,
    /// Whole GPUs, exclusive; default 0.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpus: Option<u32>,
    /// A share of one GPU in milli-GPU, 1…999 (`250` is a quarter); not with `gpus`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu_milli: Option<u32>,
    /// GPU memory the share needs (`"10GiB"`); only with `gpu_milli`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu_memory: Option<Bytes>,
}

impl ResourceRequest {
    /// Validates and fills defaults; the first problem, where there are several ([`Self::resolve_each`]).
    pub fn resolve(&self) -> Result<Resources, CoreError> {
        self.resolve_each().map_err(|mut all| all.swap_remove(0))
    }

    /// Validates and fills defaults; every problem, each naming its field (`resources.memory`), in the
    /// order of the fields.
    pub fn resolve_each(&self) -> Result<Resources, Vec<CoreError>> {
        let d = Resources::default();
        let mut problems = Vec::new();
        let cpu_milli = match self.cpus.map(CpuMilli::from_cores) {
            None => d.cpu_milli,
            Some(Ok(c)) if c.0 < MIN_CPU_MILLI => {
                problems.push(CoreError::invalid(
                    "resources.cpus",
                    format!("must be at least 0.01 (the container engine's minimum), got {c}"),
                ));
                c
            }
            Some(Ok(c)) => c,
            Some(Err(e)) => {
                problems.push(e);
                d.cpu_milli
            }
        };
        let memory = self.memory.unwrap_or(d.memory);
        if memory.0 < 6 * crate::quantity::MIB {
            problems
                .push(CoreError::invalid("resources.memory", "must be at least 6MiB (the container engine's minimum)"));
        }
        let gpus = self.gpus.unwrap_or(0);
        let gpu_milli = match self.gpu_milli {
            None => 0,
            Some(_) if gpus > 0 => {
                problems.push(CoreError::invalid(
                    "resources.gpu_milli",
                    "ask for whole GPUs (gpus) or a share of one GPU (gpu_milli), not both",
                ));
                0
            }
            Some(m @ 1..=999) => m,
            Some(m) => {
                problems.push(CoreError::invalid(
                    "resources.gpu_milli",
                    format!("must be from 1 to 999 thousandths of a GPU, got {m} (for whole GPUs use gpus)"),
                ));
                0
            }
        };
        let gpu_memory = match self.gpu_memory {
            // a share refused above is not asked about twice
            Some(_) if gpu_milli == 0 && self.gpu_milli.is_none() => {
                problems.push(CoreError::invalid(
                    "resources.gpu_memory",
                    "only a GPU share (gpu_milli) takes a memory amount; a whole GPU has all its memory",
                ));
                None
            }
            Some(Bytes(0)) => {
                problems.push(CoreError::invalid("resources.gpu_memory", "must be more than 0"));
                None
            }
            m => m,
        };
        if problems.is_empty() {
            Ok(Resources { cpu_milli, memory, gpus, gpu_milli, gpu_memory })
        } else {
            Err(problems)
        }
    }
}

/// `POST /api/v1/workloads`.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateWorkloadRequest {
    /// Unique among the owner's workloads; generated when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    pub kind: WorkloadKind,
    /// A catalog name or an image reference the engine has.
    pub image: String,
    /// Command and arguments; the image's default when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub command: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub env: BTreeMap<String, String>,
    #[serde(default)]
    pub resources: ResourceRequest,
    /// Higher starts first, default 0. Users may lower their own work (down to -100); a higher priority
    /// needs a priority class their queue allows (or an admin).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority: Option<i32>,
    /// A priority class the admin defined (`high`), allowed for the workload's queue; not with `priority`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority_class: Option<String>,
    /// Web apps this workload serves (added to those its catalog image declares).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub apps: Vec<AppSpec>,
    /// The team queue to charge; default: the user's only queue, else the default queue.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queue: Option<String>,
    /// A resource expression the node and GPUs must satisfy, e.g.
    /// `gpu.model in ["H100","H200"] && gpu.memory >= 80GiB && node.labels.rack != "b"`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub constraint: Option<String>,
    /// The longest the workload may run (`"2h"`); it is stopped then. Lets it backfill ahead of
    /// larger waiting work.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub runtime_limit: Option<Seconds>,
    /// Gang size: this many members start together or none does, each with `resources`, its own
    /// hostname and the rank variables (`RANK`, `WORLD_SIZE`, `MASTER_ADDR`, `MASTER_PORT`); default 1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub members: Option<u32>,
    /// Datasets to mount read-only at `/datasets/<name>` (`GET /api/v1/datasets` lists them).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub datasets: Vec<String>,
    /// Team folders to mount read-write at `/team/<queue>` (queues with a `team_gid` the caller is a
    /// member of).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub teams: Vec<String>,
    /// The port a `service` serves, its readiness check and who may reach it (kind `service` only,
    /// which needs it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service: Option<crate::service::ServiceSpec>,
    /// The most each member may write outside its mounts (its writable layer: `/tmp`, `/`), `"50GiB"`;
    /// within its queue's `max_disk`. Default: the admin's `container_disk`, capped at that maximum.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub disk: Option<Bytes>,
}

/// `PATCH /api/v1/workloads/{name}`: what to change of a workload; what is left out stays. Its owner
/// may lengthen the run-time limit of a queued or running workload, within its queue's `max_runtime`;
/// an admin may also change a queued workload's priority or queue. A service's owner may update its
/// `image`, `command` or `env` (alone, without the others): a live service is restarted with them.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct EditWorkloadRequest {
    /// The new run-time limit (`"3h"`), longer than the present one (`time_limit` is taken too).
    #[serde(default, alias = "time_limit", skip_serializing_if = "Option::is_none")]
    pub runtime_limit: Option<Seconds>,
    /// The new priority (admins; queued workloads).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority: Option<i32>,
    /// The new team queue (admins; queued workloads).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queue: Option<String>,
    /// A service's new image (a catalog name or an image reference the engine has).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image: Option<String>,
    /// A service's new command and arguments (empty: the image's default).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub command: Option<Vec<String>>,
    /// A service's new environment, in place of the old.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub env: Option<BTreeMap<String, String>>,
}

impl EditWorkloadRequest {
    /// Whether it changes nothing.
    pub fn is_empty(&self) -> bool {
        self.runtime_limit.is_none() && self.priority.is_none() && self.queue.is_none() && !self.updates_spec()
    }

    /// Whether it changes what runs (image, command, environment): a service's update.
    pub fn updates_spec(&self) -> bool {
        self.image.is_some() || self.command.is_some() || self.env.is_some()
    }
}

/// A share of a GPU a workload holds.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema, PartialEq, Eq)]
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
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema, PartialEq, Eq)]
pub struct GpuHolder {
    pub owner: String,
    pub workload: String,
}

/// A GPU as `GET /api/v1/nodes` shows it.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
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
    pub sharing: Option<crate::node::GpuSharing>,
}

/// A node as `GET /api/v1/nodes` shows it.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
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
#[derive(Debug, Clone, Copy, Serialize, Deserialize, ToSchema, PartialEq)]
pub struct QuotaView {
    pub gpus: f64,
    pub cpus: f64,
    pub memory: Bytes,
}

/// A limit on the three resources; a resource it does not name is not limited.
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, ToSchema, PartialEq)]
pub struct LimitView {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpus: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpus: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory: Option<Bytes>,
}

/// A team queue as `GET /api/v1/queues` shows it.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema, PartialEq)]
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
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
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

/// A booking of GPUs.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema, PartialEq, Eq)]
pub struct ReservationView {
    pub id: String,
    pub queue: String,
    pub gpus: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    pub start: DateTime<Utc>,
    pub end: DateTime<Utc>,
    /// The admin who made it; `config` for bookings of the configuration file.
    pub created_by: String,
}

/// An entry of the admin-curated image catalog.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct ImageEntry {
    /// Catalog name, used in place of a reference (`pytorch`).
    pub name: String,
    /// Image reference the engine runs (`pytorch/pytorch:2.4.0-cuda12.1-cudnn9-runtime`).
    pub image: String,
    #[serde(default)]
    pub description: String,
    /// Web apps every workspace of this image serves (JupyterLab, TensorBoard…).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub apps: Vec<AppSpec>,
}

/// Why a queued workload waits, from the scheduler's last pass.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema, PartialEq, Eq)]
pub struct Explanation {
    /// The kind of obstacle (`resources`, `queue-limit`, `backfill`, `reservation`, `unschedulable`…).
    pub reason: String,
    /// One line for people.
    pub message: String,
    /// 1-based position among pending workloads in scheduling order.
    pub position: u32,
    /// When it is expected to start, when run-time limits allow an estimate.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub estimated_start: Option<DateTime<Utc>>,
}

/// A state a workload entered, and when (`GET /api/v1/workloads/{name}`'s `history`).
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema, PartialEq, Eq)]
pub struct StateEvent {
    pub at: DateTime<Utc>,
    pub state: WorkloadState,
    /// Why, as the workload said then.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

/// A workload as the API shows it.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct WorkloadView {
    pub id: String,
    pub name: String,
    pub owner: String,
    pub kind: WorkloadKind,
    pub image: String,
    pub command: Vec<String>,
    pub env: BTreeMap<String, String>,
    pub resources: Resources,
    pub priority: i32,
    /// The team queue it is charged to; empty is the default queue.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub queue: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub constraint: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub runtime_limit: Option<Seconds>,
    /// The most each member may write outside its mounts; absent: the admin's `container_disk`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub disk: Option<Bytes>,
    /// Web apps, served at `/w/<owner>/<name>/<app>/`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub apps: Vec<AppSpec>,
    /// Datasets it mounts read-only at `/datasets/<name>`, with the paths they had at submission.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub datasets: Vec<crate::dataset::DatasetMount>,
    /// Team folders it mounts read-write at `/team/<queue>`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub teams: Vec<crate::team::TeamMount>,
    pub state: WorkloadState,
    /// Gang size: how many members its run has; `resources` are per member.
    #[serde(default = "one")]
    pub size: u32,
    /// GPU UUIDs its run holds, or, once ended, held.
    pub gpus: Vec<String>,
    /// The members of its current (or last) run: where each runs, its state, GPUs and exit code.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub members: Vec<crate::workload::Member>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i64>,
    /// Why it is in its state (for a queued workload: what it waits for).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// For a queued workload: why it waits, its position and estimated start.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub explanation: Option<Explanation>,
    /// For a `pulling` workload: how far the pull of its image is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pull: Option<PullView>,
    /// What interrupted or ended its last run from outside, and what happens next.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interruption: Option<crate::stop::InterruptionView>,
    /// For a running workload whose GPUs sit idle: since when, and when it will be stopped.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idle: Option<IdleView>,
    /// For a running share of a guarded GPU: each member above its GPU memory grant, and when it will
    /// be stopped if it stays there.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub gpu_guard: Vec<GpuGuardView>,
    /// For a service: how many times its run was started again after it ended by itself.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub restarts: Option<u32>,
    /// For a service: its port, readiness, crash-loop and URL.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service: Option<crate::service::ServiceView>,
    pub created_at: DateTime<Utc>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_at: Option<DateTime<Utc>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finished_at: Option<DateTime<Utc>>,
    /// The states it went through, oldest first (one workload's view only; lists leave it out).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub history: Vec<StateEvent>,
}

/// A workload whose GPUs sit idle, with no use through the hub either (`[idle]`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct IdleView {
    /// Since when its GPUs and the hub saw no use.
    pub since: DateTime<Utc>,
    /// When its owner was warned, once they were.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub warned_at: Option<DateTime<Utc>>,
    /// When it will be stopped if still idle, once warned.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stop_at: Option<DateTime<Utc>>,
    /// Until when its owner keeps it despite idleness (`gpuhub keep`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kept_until: Option<DateTime<Utc>>,
}

/// A member of a share above its GPU memory grant (`gpu_sharing = "guard"`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct GpuGuardView {
    /// The member's index.
    pub member: u32,
    /// GPU memory its processes used at the last sample, bytes.
    pub used_bytes: u64,
    /// GPU memory its share was granted, bytes.
    pub granted_bytes: u64,
    /// Since when it is above the grant.
    pub since: DateTime<Utc>,
    /// When it is stopped (`gpu-memory-exceeded`) if still above.
    pub stop_at: DateTime<Utc>,
}

/// An admin's idle-GPU report: one row per idle workload.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct IdleReportRow {
    /// `owner/name`.
    pub workload: String,
    /// The GPUs it holds.
    pub gpus: Vec<String>,
    /// Its queue (`default` for the default queue).
    pub queue: String,
    /// Where it stands.
    pub idle: IdleView,
}

/// `POST /api/v1/workloads/{name}/keep`: keep a workspace despite idle GPUs for a while.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct KeepRequest {
    /// How many hours from now (1 to the server's `idle.keep_max_hours`); 0 withdraws a keep.
    pub hours: u32,
}

impl From<&crate::workload::Workload> for WorkloadView {
    fn from(w: &crate::workload::Workload) -> Self {
        Self {
            id: w.id.clone(),
            name: w.name.clone(),
            owner: w.owner.clone(),
            kind: w.kind,
            image: w.image.clone(),
            command: w.command.clone(),
            env: w.env.clone(),
            resources: w.resources,
            priority: w.priority,
            queue: w.queue.clone(),
            constraint: w.constraint.clone(),
            runtime_limit: w.runtime_limit,
            disk: w.disk,
            apps: w.apps.clone(),
            datasets: w.datasets.clone(),
            teams: w.teams.clone(),
            state: w.state,
            size: w.size,
            gpus: w.gpus.clone(),
            members: w.members.clone(),
            exit_code: w.exit_code,
            message: w.message.clone(),
            explanation: None,
            pull: None,
            interruption: w.interruption.as_ref().map(|r| r.view(w.kind, w.state)),
            idle: None,
            gpu_guard: Vec::new(),
            restarts: w.service.as_ref().map(|s| s.restarts),
            service: w.service.as_ref().map(crate::service::ServiceView::from),
            created_at: w.created_at,
            started_at: w.started_at,
            finished_at: w.finished_at,
            history: Vec::new(),
        }
    }
}

fn one() -> u32 {
    1
}

/// How many workloads a page of `GET /api/v1/workloads` holds when the request names no `limit`.
pub const PAGE_LIMIT_DEFAULT: u32 = 100;

/// The most workloads one page may hold (`limit` from 1 to this).
pub const PAGE_LIMIT_MAX: u32 = 1000;

/// The response header carrying the cursor of the next page of a list, absent on the last page. Pass
/// it back as `?cursor=` with the same filters; the `Link` header (`rel="next"`) holds that URL.
pub const NEXT_CURSOR_HEADER: &str = "x-next-cursor";

/// An RFC 9457 problem document, the body of every error response (`application/problem+json`).
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct Problem {
    /// A URI naming the kind of problem (`about:blank` when the status says it all).
    #[serde(rename = "type")]
    pub kind: String,
    pub title: String,
    pub status: u16,
    /// What exactly is wrong, for a person.
    pub detail: String,
    /// The request field at fault (`resources.gpus`, `name`), where one is: forms show the detail
    /// beside it. With several problems, the first one's (`errors[0].field`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub field: Option<String>,
    /// Every problem of the request, each with its field (an RFC 9457 extension member): a refused
    /// submission names all that is wrong at once, `detail` and `field` being the first of them.
    /// Present whenever the problem names a field; absent for errors about no field (a 404, a 503).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub errors: Vec<FieldProblem>,
}

/// One problem of a request: the field it concerns and what is wrong with it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct FieldProblem {
    /// The field, as a path into the request body (`resources.memory`, `name`, `apps`); empty for
    /// the request as a whole.
    pub field: String,
    /// What is wrong with it, for a person (lowercase).
    pub detail: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_fields_refused() {
        let e = serde_json::from_str::<CreateWorkloadRequest>(r#"{"kind":"job","image":"x","colour":1}"#).unwrap_err();
        assert!(e.to_string().contains("unknown field `colour`"), "{e}");
        let e = serde_json::from_str::<CreateWorkloadRequest>(r#"{"kind":"job","image":"x","resources":{"gpu":1}}"#)
            .unwrap_err();
        assert!(e.to_string().contains("unknown field `gpu`"), "{e}");
    }

    #[test]
    fn resolve_resources() {
        let r: ResourceRequest = serde_json::from_str(r#"{"cpus":0.5,"memory":"2GiB","gpus":1}"#).unwrap();
        let r = r.resolve().unwrap();
        assert_eq!(r.cpu_milli, CpuMilli(500));
        assert_eq!(r.memory, Bytes(2 << 30));
        assert_eq!(r.gpus, 1);
        let neg: ResourceRequest = serde_json::from_str(r#"{"cpus":-1}"#).unwrap();
        assert!(neg.resolve().unwrap_err().to_string().contains("resources.cpus"));
        assert!(serde_json::from_str::<ResourceRequest>(r#"{"gpus":-1}"#).is_err());
        assert_eq!(ResourceRequest::default().resolve().unwrap(), Resources::default());
    }

    #[test]
    fn every_resource_problem_is_named_at_once() {
        let r: ResourceRequest =
            serde_json::from_str(r#"{"cpus":0.001,"memory":"1MiB","gpu_milli":2000,"gpu_memory":"1GiB"}"#).unwrap();
        let all = r.resolve_each().unwrap_err();
        let fields: Vec<String> = all
            .iter()
            .map(|e| match e {
                CoreError::Invalid { field, .. } => field.clone(),
                other => other.to_string(),
            })
            .collect();
        assert_eq!(fields, ["resources.cpus", "resources.memory", "resources.gpu_milli"], "{all:?}");
        // resolve keeps answering the first
        assert!(r.resolve().unwrap_err().to_string().starts_with("invalid resources.cpus"));
    }

    #[test]
    fn gpu_shares() {
        let r: ResourceRequest = serde_json::from_str(r#"{"gpu_milli":250,"gpu_memory":"10GiB"}"#).unwrap();
        let r = r.resolve().unwrap();
        assert_eq!((r.gpus, r.gpu_milli, r.gpu_memory), (0, 250, Some(Bytes(10 << 30))));
        assert_eq!(r.gpu_display(), "0.25 (10GiB)");
        assert_eq!(r.gpu_milli_total(), 250);
        let bad = |json: &str, want: &str| {
            let r: ResourceRequest = serde_json::from_str(json).unwrap();
            let e = r.resolve().unwrap_err().to_string();
            assert!(e.contains(want), "{json}: {e}");
        };
        bad(r#"{"gpus":1,"gpu_milli":500}"#, "not both");
        bad(r#"{"gpu_milli":1000}"#, "from 1 to 999");
        bad(r#"{"gpu_milli":0}"#, "from 1 to 999");
        bad(r#"{"gpus":1,"gpu_memory":"1GiB"}"#, "resources.gpu_memory");
        bad(r#"{"gpu_milli":10,"gpu_memory":0}"#, "more than 0");
        // a whole-GPU request serialises as before
        let whole = ResourceRequest { gpus: Some(2), ..Default::default() }.resolve().unwrap();
        let json = serde_json::to_value(whole).unwrap();
        assert!(json.get("gpu_milli").is_none() && json.get("gpu_memory").is_none(), "{json}");
    }
}
