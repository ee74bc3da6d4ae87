//! Workloads: what a submission asks for (`POST /api/v1/workloads`) and how the API shows one.
//!
//! Request types refuse unknown fields, so a typo is an error rather than a silently ignored setting.

use chrono::{DateTime, Utc};
use gpuhub_core::pull::PullView;
use gpuhub_core::state::Explanation;
use gpuhub_core::state::StateEvent;
use gpuhub_core::workload::{AppSpec, Resources, WorkloadKind, WorkloadState};
use gpuhub_core::{Bytes, CoreError, CpuMilli, Seconds};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// The fewest CPUs a container may be limited to (the engines' minimum: 0.01 of a core).
pub const MIN_CPU_MILLI: u64 = 10;

/// The resources part of a workload request, as a person writes it.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
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
        if memory.0 < 6 * gpuhub_core::quantity::MIB {
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
#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
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
    pub service: Option<gpuhub_core::service::ServiceSpec>,
    /// The most each member may write outside its mounts (its writable layer: `/tmp`, `/`), `"50GiB"`;
    /// within its queue's `max_disk`. Default: the admin's `container_disk`, capped at that maximum.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub disk: Option<Bytes>,
}

/// A workload as the API shows it.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
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
    pub datasets: Vec<gpuhub_core::dataset::DatasetMount>,
    /// Team folders it mounts read-write at `/team/<queue>`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub teams: Vec<gpuhub_core::team::TeamMount>,
    pub state: WorkloadState,
    /// Gang size: how many members its run has; `resources` are per member.
    #[serde(default = "one")]
    pub size: u32,
    /// GPU UUIDs its run holds, or, once ended, held.
    pub gpus: Vec<String>,
    /// The members of its current (or last) run: where each runs, its state, GPUs and exit code.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub members: Vec<gpuhub_core::workload::Member>,
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
    pub interruption: Option<gpuhub_core::stop::InterruptionView>,
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
    pub service: Option<gpuhub_core::service::ServiceView>,
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
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
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
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
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
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
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
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct KeepRequest {
    /// How many hours from now (1 to the server's `idle.keep_max_hours`); 0 withdraws a keep.
    pub hours: u32,
}

impl From<&gpuhub_core::workload::Workload> for WorkloadView {
    fn from(w: &gpuhub_core::workload::Workload) -> Self {
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
            state: w.state(),
            size: w.size,
            gpus: w.gpus.clone(),
            members: w.members.clone(),
            exit_code: w.exit_code,
            message: w.message.clone(),
            explanation: None,
            pull: None,
            interruption: w.interruption.as_ref().map(|r| r.view(w.kind, w.state())),
            idle: None,
            gpu_guard: Vec::new(),
            restarts: w.service.as_ref().map(|s| s.restarts),
            service: w.service.as_ref().map(gpuhub_core::service::ServiceView::from),
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
