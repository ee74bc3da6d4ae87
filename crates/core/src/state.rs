//! What a workload is (its kind) and where it stands (its state): the words of the state machine
//! (`crate::lifecycle`), apart from the workload itself so that the stop reasons (`crate::stop`) can
//! speak of them without naming the workload. Re-exported by `crate::workload`.

use crate::CoreError;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use std::fmt;

/// What kind of work a workload is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "lowercase")]
pub enum WorkloadKind {
    /// Runs a command to completion; keeps exit code and logs.
    Job,
    /// Long-lived; can be stopped and started again; the home persists.
    Workspace,
    /// Kept running: started again (with a backoff) whenever its run ends by itself; its port is served
    /// at a stable URL through the hub's proxy once ready.
    Service,
}

impl WorkloadKind {
    /// The lowercase name used in the API and the store.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Job => "job",
            Self::Workspace => "workspace",
            Self::Service => "service",
        }
    }
}

impl std::str::FromStr for WorkloadKind {
    type Err = CoreError;
    fn from_str(s: &str) -> Result<Self, CoreError> {
        match s {
            "job" => Ok(Self::Job),
            "workspace" => Ok(Self::Workspace),
            "service" => Ok(Self::Service),
            _ => Err(CoreError::invalid("kind", format!("{s:?} is not one of job, workspace, service"))),
        }
    }
}

/// Where a workload is in its life.
///
/// `[pulling →] queued → starting → running → succeeded | failed | stopped`; `lost` when the container
/// vanished behind the platform's back. A stopped workspace may be started again (back to `queued`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "lowercase")]
pub enum WorkloadState {
    /// Its image is being pulled into the engine (holding nothing); queued once it is there.
    Pulling,
    /// Waiting for resources.
    Queued,
    /// Resources assigned; the container is being created.
    Starting,
    /// The container runs.
    Running,
    /// Ended with exit code 0.
    Succeeded,
    /// Ended with a non-zero exit code, or could not be started.
    Failed,
    /// Stopped by its owner or an admin.
    Stopped,
    /// The container disappeared without the platform stopping it.
    Lost,
}

impl WorkloadState {
    /// All states, in life order.
    pub const ALL: [WorkloadState; 8] = [
        Self::Pulling,
        Self::Queued,
        Self::Starting,
        Self::Running,
        Self::Succeeded,
        Self::Failed,
        Self::Stopped,
        Self::Lost,
    ];

    /// The lowercase name used in the API and the store.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Pulling => "pulling",
            Self::Queued => "queued",
            Self::Starting => "starting",
            Self::Running => "running",
            Self::Succeeded => "succeeded",
            Self::Failed => "failed",
            Self::Stopped => "stopped",
            Self::Lost => "lost",
        }
    }

    /// Whether the workload holds resources in this state.
    pub fn holds_resources(self) -> bool {
        matches!(self, Self::Starting | Self::Running)
    }

    /// Whether the workload has ended (it will not run again unless started anew).
    pub fn is_terminal(self) -> bool {
        matches!(self, Self::Succeeded | Self::Failed | Self::Stopped | Self::Lost)
    }
}

impl fmt::Display for WorkloadState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for WorkloadState {
    type Err = CoreError;
    fn from_str(s: &str) -> Result<Self, CoreError> {
        Self::ALL
            .into_iter()
            .find(|st| st.as_str() == s)
            .ok_or_else(|| CoreError::invalid("state", format!("unknown state {s:?}")))
    }
}

/// Why a queued workload waits, from the scheduler's last pass.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
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
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct StateEvent {
    pub at: DateTime<Utc>,
    pub state: WorkloadState,
    /// Why, as the workload said then.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}
