//! Workloads (jobs and workspaces), their resources and their state machine.

use crate::{Bytes, CoreError, CpuMilli, Seconds};
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

pub use crate::member::{Member, MemberPhase};
pub use crate::state::{WorkloadKind, WorkloadState};

/// A web app a workspace serves on a container port, reachable at `/w/<owner>/<workspace>/<app>/`.
///
/// `command`, when not empty, is started inside the workspace (as the owner) when it starts; in it
/// `{base_url}` becomes the app's URL prefix (`/w/alice/nb/lab/`), `{port}` the port and `{home}` the
/// owner's home. JupyterLab takes the prefix as `--ServerApp.base_url={base_url}`, TensorBoard as
/// `--path_prefix {base_url}`; an app the workload's own command starts leaves `command` empty.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct AppSpec {
    /// Name in the URL (`lab`).
    pub name: String,
    /// Container port it listens on.
    pub port: u16,
    /// How to start it; empty when the workload's command starts it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub command: Vec<String>,
}

impl AppSpec {
    /// The app's URL prefix for a workload.
    pub fn base_url(&self, owner: &str, workload: &str) -> String {
        format!("/w/{owner}/{workload}/{}/", self.name)
    }

    /// The start command with its placeholders filled in.
    pub fn start_command(&self, owner: &str, workload: &str) -> Vec<String> {
        let base = self.base_url(owner, workload);
        let home = format!("/home/{owner}");
        self.command
            .iter()
            .map(|a| a.replace("{base_url}", &base).replace("{port}", &self.port.to_string()).replace("{home}", &home))
            .collect()
    }

    /// Checks the name and port.
    pub fn validate(&self) -> Result<(), CoreError> {
        crate::names::validate("app", &self.name)?;
        if self.port == 0 {
            return Err(CoreError::invalid("apps.port", format!("app {} needs a port from 1 to 65535", self.name)));
        }
        Ok(())
    }
}

/// The resources a workload asks for, after validation.
///
/// GPUs are either `gpus` whole GPUs (exclusive) or a share of one GPU, `gpu_milli` thousandths
/// (1…999) with an optional amount of its memory; never both.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Resources {
    /// CPUs in thousandths of a core.
    #[cfg_attr(feature = "openapi", schema(value_type = u64))]
    pub cpu_milli: CpuMilli,
    /// Memory limit (memory + swap are set to the same value).
    pub memory: Bytes,
    /// Whole GPUs, exclusive.
    pub gpus: u32,
    /// A share of one GPU in milli-GPU (1…999); 0 when the workload asks for whole GPUs or none.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub gpu_milli: u32,
    /// GPU memory the share needs (only with `gpu_milli`); the scheduler reserves it on the GPU.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu_memory: Option<Bytes>,
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

/// The GPU memory a share of `milli` thousandths of a GPU of `gpu_memory` bytes is granted: the amount
/// it asked for, else its fraction of the GPU's memory. The one rule the run's limits, the memory guard
/// and the portal all state.
pub fn share_memory(milli: u32, asked: Option<Bytes>, gpu_memory: u64) -> u64 {
    asked.map_or(gpu_memory / 1000 * u64::from(milli), |b| b.0)
}

impl Resources {
    /// The GPUs asked for in milli-GPU (1000 per whole GPU).
    pub fn gpu_milli_total(&self) -> u64 {
        u64::from(self.gpus) * 1000 + u64::from(self.gpu_milli)
    }

    /// The GPU part for people: `2`, `0.25`, `0.5 (10GiB)`, `0`.
    pub fn gpu_display(&self) -> String {
        if self.gpu_milli == 0 {
            return self.gpus.to_string();
        }
        let share = format!("{}", f64::from(self.gpu_milli) / 1000.0);
        match self.gpu_memory {
            Some(m) => format!("{share} ({m})"),
            None => share,
        }
    }
}

/// The default resources for a request that names none: one CPU, 1 GiB, no GPU.
impl Default for Resources {
    fn default() -> Self {
        Self { cpu_milli: CpuMilli(1000), memory: Bytes(crate::quantity::GIB), gpus: 0, gpu_milli: 0, gpu_memory: None }
    }
}

/// A workload as the store keeps it: the spec the owner asked for plus the state the controller recorded.
#[derive(Debug, Clone, PartialEq)]
pub struct Workload {
    /// Unique, stable id; also the `gpuhub.workload` container label.
    pub id: String,
    /// Unique per owner.
    pub name: String,
    /// The owner's username.
    pub owner: String,
    /// Job or workspace.
    pub kind: WorkloadKind,
    /// The resolved image reference.
    pub image: String,
    /// Command and arguments; empty for the image's default.
    pub command: Vec<String>,
    /// Environment variables.
    pub env: BTreeMap<String, String>,
    /// What it asked for.
    pub resources: Resources,
    /// Higher runs first.
    pub priority: i32,
    /// The team queue it is charged to; empty is the default queue.
    pub queue: String,
    /// A resource expression its node and GPUs must satisfy (`gpu.model == "H200"`).
    pub constraint: Option<String>,
    /// The longest it may run; it is stopped when the limit is reached. Also used to plan backfill.
    pub runtime_limit: Option<Seconds>,
    /// The most each member may write outside its mounts, as resolved at submit (its request, else its
    /// queue's `max_disk` where that is below the admin's `container_disk`); `None`: `container_disk`.
    pub disk: Option<Bytes>,
    /// Web apps it serves through the hub's proxy.
    pub apps: Vec<AppSpec>,
    /// Datasets it mounts read-only at `/datasets/<name>`, as registered when it was submitted.
    pub datasets: Vec<crate::dataset::DatasetMount>,
    /// Team folders it mounts read-write at `/team/<queue>`, with their host paths and groups as they
    /// were when it was submitted.
    pub teams: Vec<crate::team::TeamMount>,
    /// Where it is. Read it with [`Workload::state`]; it changes only through the state machine,
    /// [`Workload::apply`] (`crate::lifecycle`). [`Workload::restore`] sets it when the store reads a
    /// stored workload back, which is no transition.
    pub(crate) state: WorkloadState,
    /// Gang size: how many members its run has (1 for most work). `resources` are per member.
    pub size: u32,
    /// GPU UUIDs its run holds (or, once ended, held): the members' GPUs together.
    pub gpus: Vec<String>,
    /// The engine's id of its current (or last) run, once submitted.
    pub run_id: Option<String>,
    /// The members of its current (or last) run: node, GPUs, state and exit code each.
    pub members: Vec<Member>,
    /// Exit code, once ended.
    pub exit_code: Option<i64>,
    /// A short human reason for the current state (why queued, why failed).
    pub message: Option<String>,
    /// What interrupted or ended its last run from outside (a stop, a preemption, its time limit);
    /// cleared when it starts again.
    pub interruption: Option<crate::stop::StopReason>,
    /// When it was submitted.
    pub created_at: DateTime<Utc>,
    /// When it last entered the queue (submit time for ordering).
    pub queued_at: DateTime<Utc>,
    /// When its container last started.
    pub started_at: Option<DateTime<Utc>>,
    /// When it last ended.
    pub finished_at: Option<DateTime<Utc>>,
    /// When its current (or last) holding of resources began: the moment it entered `starting` or
    /// `running` from a state that holds nothing. Accounting keys the holding by it.
    pub held_since: Option<DateTime<Utc>>,
    /// When that holding ended (it left `starting`/`running`), once it has; `None` while it holds.
    pub held_until: Option<DateTime<Utc>>,
    /// A service's terms and restarts (kind `service` only).
    pub service: Option<crate::service::Service>,
}

impl Workload {
    /// A workload as just submitted: `queued` (see [`Workload::pull_first`]) at `now`, one member of
    /// the default [`Resources`], nothing else asked for, no run yet. The caller fills in the rest of
    /// the spec (command, resources, queue…) through the public fields.
    pub fn new(
        id: impl Into<String>,
        owner: impl Into<String>,
        name: impl Into<String>,
        kind: WorkloadKind,
        image: impl Into<String>,
        now: DateTime<Utc>,
    ) -> Self {
        Self {
            id: id.into(),
            name: name.into(),
            owner: owner.into(),
            kind,
            image: image.into(),
            command: Vec::new(),
            env: BTreeMap::new(),
            resources: Resources::default(),
            priority: 0,
            queue: String::new(),
            constraint: None,
            runtime_limit: None,
            disk: None,
            apps: Vec::new(),
            datasets: Vec::new(),
            teams: Vec::new(),
            state: WorkloadState::Queued,
            size: 1,
            gpus: Vec::new(),
            run_id: None,
            members: Vec::new(),
            exit_code: None,
            message: None,
            interruption: None,
            created_at: now,
            queued_at: now,
            started_at: None,
            finished_at: None,
            held_since: None,
            held_until: None,
            service: None,
        }
    }

    /// A new workload whose image must be pulled before it can queue: `pulling` instead of `queued`.
    /// Only for a workload just made by [`Workload::new`]; from then on [`Workload::apply`] moves it.
    #[must_use]
    pub fn pull_first(mut self) -> Self {
        debug_assert!(
            self.state == WorkloadState::Queued && self.run_id.is_none(),
            "pull_first on a workload that moved"
        );
        self.state = WorkloadState::Pulling;
        self
    }

    /// Where it is.
    pub fn state(&self) -> WorkloadState {
        self.state
    }

    /// Restores persisted state; not a transition. The store sets the state a workload was saved in
    /// when it reads the row back (and test fixtures that stand for a stored row do the same); every
    /// change of state goes through [`Workload::apply`], which checks it and moves the other fields
    /// with it.
    #[must_use]
    pub fn restore(mut self, state: WorkloadState) -> Self {
        self.state = state;
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn app_placeholders() {
        let a = AppSpec {
            name: "lab".into(),
            port: 8888,
            command: vec!["jupyter".into(), "--base={base_url}".into(), "--port={port}".into(), "{home}".into()],
        };
        assert_eq!(
            a.start_command("alice", "nb"),
            ["jupyter", "--base=/w/alice/nb/lab/", "--port=8888", "/home/alice"]
        );
        assert!(AppSpec { port: 0, ..a.clone() }.validate().is_err());
        assert!(AppSpec { name: "Lab!".into(), ..a }.validate().is_err());
    }

    #[test]
    fn states_round_trip() {
        for s in WorkloadState::ALL {
            assert_eq!(s.as_str().parse::<WorkloadState>().unwrap(), s);
            assert!(!(s.holds_resources() && s.is_terminal()));
        }
    }
}
