//! Why a run was interrupted or ended by someone or something other than its own exit: typed and
//! stored with the workload, never parsed back from its message.

use crate::Seconds;
use crate::workload::{WorkloadKind, WorkloadState};
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// What stopped a workload's run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "reason", rename_all = "kebab-case", deny_unknown_fields)]
pub enum StopReason {
    /// A person stopped it: its owner or an admin.
    User {
        /// Who.
        by: String,
        /// When the stop was asked for.
        at: DateTime<Utc>,
    },
    /// The scheduler preempted it so that another workload could start.
    Preempted {
        /// The workload it made room for, `owner/name`.
        by: String,
        /// That workload's queue (`""`: the default queue).
        queue: String,
        /// When the preemption was decided.
        at: DateTime<Utc>,
        /// The scheduler's reason (a queue reclaiming its guarantee, a higher priority).
        detail: String,
    },
    /// It reached its run-time limit.
    TimeLimit {
        /// The limit.
        limit: Seconds,
        /// When it was reached.
        at: DateTime<Utc>,
    },
    /// The engine could not start or keep it.
    EngineFailure {
        /// The engine's words.
        detail: String,
        /// When.
        at: DateTime<Utc>,
    },
    /// Its owner's account was disabled.
    OwnerDisabled {
        /// When.
        at: DateTime<Utc>,
    },
    /// It held GPUs that stayed idle, with no use through the hub either, past the warning's grace.
    Idle {
        /// Since when its GPUs and the hub saw no use.
        since: DateTime<Utc>,
        /// When it was stopped.
        at: DateTime<Utc>,
        /// The rule in words (`GPU utilisation below 5 % and no app, terminal or SSH use for 2h`).
        detail: String,
    },
    /// Its processes used more GPU memory than its share was granted, past the guard's grace.
    GpuMemoryExceeded {
        /// GPU memory its processes used at the stop, bytes.
        used: u64,
        /// GPU memory its share was granted, bytes.
        granted: u64,
        /// Since when it was above the grant.
        since: DateTime<Utc>,
        /// When it was stopped.
        at: DateTime<Utc>,
        /// The figures in words (`used 12GiB of GPU memory on GPU-…, granted 10GiB, for 30s`).
        detail: String,
    },
}

/// An interruption as `GET /api/v1/workloads/{name}` shows it: the reason, by whom, when, and what
/// happens next.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct InterruptionView {
    /// `user`, `preempted`, `time-limit`, `engine-failure`, `owner-disabled`, `idle` or
    /// `gpu-memory-exceeded`.
    pub reason: String,
    /// Who: the person who stopped it, or the workload it made room for (`owner/name`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub by: Option<String>,
    /// For a preemption: the queue of the workload it made room for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queue: Option<String>,
    pub at: DateTime<Utc>,
    /// More about it: the scheduler's reason, the engine's error, the limit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
    /// What happens next.
    pub next: String,
}

impl StopReason {
    /// The reason's name, as in [`InterruptionView::reason`].
    pub fn name(&self) -> &'static str {
        match self {
            StopReason::User { .. } => "user",
            StopReason::Preempted { .. } => "preempted",
            StopReason::TimeLimit { .. } => "time-limit",
            StopReason::EngineFailure { .. } => "engine-failure",
            StopReason::OwnerDisabled { .. } => "owner-disabled",
            StopReason::Idle { .. } => "idle",
            StopReason::GpuMemoryExceeded { .. } => "gpu-memory-exceeded",
        }
    }

    /// When it happened.
    pub fn at(&self) -> DateTime<Utc> {
        match self {
            StopReason::User { at, .. }
            | StopReason::Preempted { at, .. }
            | StopReason::TimeLimit { at, .. }
            | StopReason::EngineFailure { at, .. }
            | StopReason::OwnerDisabled { at }
            | StopReason::Idle { at, .. }
            | StopReason::GpuMemoryExceeded { at, .. } => *at,
        }
    }

    /// A short phrase without the time: `preempted by alice/train-3`, `stopped by bob`.
    pub fn summary(&self) -> String {
        match self {
            StopReason::User { by, .. } => format!("stopped by {by}"),
            StopReason::Preempted { by, .. } => format!("preempted by {by}"),
            StopReason::TimeLimit { limit, .. } => format!("time limit {limit} reached"),
            StopReason::EngineFailure { detail, .. } => format!("engine failure: {detail}"),
            StopReason::OwnerDisabled { .. } => "owner's account disabled".to_owned(),
            StopReason::Idle { since, .. } => format!("idle GPUs since {}", since.format("%Y-%m-%d %H:%M UTC")),
            StopReason::GpuMemoryExceeded { used, granted, .. } => {
                format!("GPU memory {} exceeded its grant of {}", crate::Bytes(*used), crate::Bytes(*granted))
            }
        }
    }

    /// What happens next to a workload of `kind` now in `state` after this.
    pub fn next(&self, kind: WorkloadKind, state: WorkloadState) -> String {
        let again = match kind {
            WorkloadKind::Job => "`gpuhub start` runs it again",
            WorkloadKind::Workspace => "`gpuhub start` starts it again (its home is kept)",
        };
        match (self, state) {
            (_, WorkloadState::Starting | WorkloadState::Running) => "it is being stopped".to_owned(),
            (StopReason::Preempted { .. }, WorkloadState::Queued) => {
                "queued again in its old place; restarts when its queue's share frees GPUs".to_owned()
            }
            (StopReason::OwnerDisabled { .. }, _) => {
                format!("stays stopped while the account is disabled; then {again}")
            }
            (_, WorkloadState::Queued) => "queued".to_owned(),
            (_, _) => format!("ended; {again}"),
        }
    }

    /// The API's form, for a workload of `kind` now in `state`.
    pub fn view(&self, kind: WorkloadKind, state: WorkloadState) -> InterruptionView {
        let (by, queue, detail) = match self {
            StopReason::User { by, .. } => (Some(by.clone()), None, None),
            StopReason::Preempted { by, queue, detail, .. } => {
                (Some(by.clone()), Some(queue.clone()), Some(detail.clone()))
            }
            StopReason::TimeLimit { limit, .. } => (None, None, Some(format!("run-time limit {limit}"))),
            StopReason::EngineFailure { detail, .. } => (None, None, Some(detail.clone())),
            StopReason::OwnerDisabled { .. } => (None, None, None),
            StopReason::Idle { detail, .. } | StopReason::GpuMemoryExceeded { detail, .. } => {
                (None, None, Some(detail.clone()))
            }
        };
        InterruptionView {
            reason: self.name().to_owned(),
            by,
            queue,
            at: self.at(),
            detail,
            next: self.next(kind, state),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stored_form_is_tagged_and_round_trips() {
        let at = DateTime::from_timestamp(1_700_000_000, 0).unwrap();
        let p = StopReason::Preempted { by: "alice/train-3".into(), queue: "vision".into(), at, detail: "x".into() };
        let json = serde_json::to_value(&p).unwrap();
        assert_eq!(json["reason"], "preempted");
        assert_eq!(serde_json::from_value::<StopReason>(json).unwrap(), p);
        let v = p.view(WorkloadKind::Job, WorkloadState::Queued);
        assert_eq!(
            (v.reason.as_str(), v.by.as_deref(), v.queue.as_deref()),
            ("preempted", Some("alice/train-3"), Some("vision"))
        );
        assert!(v.next.starts_with("queued again"), "{}", v.next);
        let t = StopReason::TimeLimit { limit: Seconds(7200), at };
        assert_eq!(t.view(WorkloadKind::Job, WorkloadState::Failed).next, "ended; `gpuhub start` runs it again");
        assert_eq!(StopReason::User { by: "bob".into(), at }.summary(), "stopped by bob");
    }

    #[test]
    fn a_guard_stop_keeps_its_figures() {
        let at = DateTime::from_timestamp(1_700_000_000, 0).unwrap();
        let r = StopReason::GpuMemoryExceeded {
            used: 12 << 30,
            granted: 10 << 30,
            since: at,
            at,
            detail: "used 12GiB of GPU memory on GPU-0, granted 10GiB, for 30s".into(),
        };
        let json = serde_json::to_value(&r).unwrap();
        assert_eq!((json["reason"].as_str(), json["used"].as_u64()), (Some("gpu-memory-exceeded"), Some(12 << 30)));
        assert_eq!(serde_json::from_value::<StopReason>(json).unwrap(), r);
        assert_eq!(r.summary(), "GPU memory 12GiB exceeded its grant of 10GiB");
        let v = r.view(WorkloadKind::Job, WorkloadState::Failed);
        assert_eq!((v.reason.as_str(), v.detail.as_deref()), ("gpu-memory-exceeded", Some(r_detail(&r))));
    }

    fn r_detail(r: &StopReason) -> &str {
        match r {
            StopReason::GpuMemoryExceeded { detail, .. } => detail,
            _ => "",
        }
    }
}
