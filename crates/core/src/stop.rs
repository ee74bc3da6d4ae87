//! Why a run was interrupted or ended by someone or something other than its own exit: typed and
//! stored with the workload, never parsed back from its message.

use crate::Seconds;
use crate::state::{WorkloadKind, WorkloadState};
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

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
    /// The container engine's own shutdown or restart killed the run, not its code (a package upgrade
    /// restarting `dockerd` without live restore, a Slurm node that failed). Queued again in its old
    /// place unless the admin chose `on_engine_restart = "fail"`.
    EngineRestarted {
        /// What was seen (`the engine's event stream broke 0.2s after member 0 ended with code 143`).
        detail: String,
        /// When the engine went away (its event stream broke), or the node failed.
        at: DateTime<Utc>,
    },
}

/// What becomes of a run the engine's own shutdown or restart killed (`on_engine_restart`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum OnEngineRestart {
    /// Queued again in its old place (its submit time), as Slurm requeues after a node failure.
    #[default]
    Requeue,
    /// Ended as failed with the code the engine's kill left (137, 143), the reason recorded.
    Fail,
}

impl std::str::FromStr for OnEngineRestart {
    type Err = crate::CoreError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "requeue" => Ok(Self::Requeue),
            "fail" => Ok(Self::Fail),
            _ => Err(crate::CoreError::invalid("on_engine_restart", format!("{s:?} is not one of requeue, fail"))),
        }
    }
}

/// The exit codes an engine's own kill leaves: SIGTERM (143, a stop) and SIGKILL (137, a stop's grace
/// spent). Only these can be an engine restart's; a run's own exit code never is.
pub fn engine_kill_code(code: i64) -> bool {
    matches!(code, 137 | 143)
}

/// A span in which the container engine was away: its event stream broke at `broke` and it answered
/// again at `back` (`None`: not yet).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EngineOutage {
    /// When the event stream broke.
    pub broke: DateTime<Utc>,
    /// When the engine answered again.
    pub back: Option<DateTime<Utc>>,
}

/// Whether a member that ended with `code`, its end seen at `ended`, was killed by the engine's own
/// shutdown or restart rather than by its own code: the code is a kill's (SIGTERM or SIGKILL) and the
/// end falls in the outage widened by `margin` on both sides. A stopping engine kills its containers
/// before its event stream breaks (SIGTERM, then SIGKILL after their stop timeout, 10s by default, so
/// `margin` covers that); one restarted without live restore kills those it finds still running before
/// it answers again. A kill by the OOM killer or a person outside any outage is the run's own end.
pub fn killed_by_engine(
    code: i64,
    ended: DateTime<Utc>,
    outage: Option<&EngineOutage>,
    margin: chrono::Duration,
) -> bool {
    let Some(o) = outage else { return false };
    engine_kill_code(code) && ended >= o.broke - margin && o.back.is_none_or(|back| ended <= back + margin)
}

/// An interruption as `GET /api/v1/workloads/{name}` shows it: the reason, by whom, when, and what
/// happens next.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct InterruptionView {
    /// `user`, `preempted`, `time-limit`, `engine-failure`, `owner-disabled`, `idle`,
    /// `gpu-memory-exceeded` or `engine-restarted`.
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
            StopReason::EngineRestarted { .. } => "engine-restarted",
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
            | StopReason::GpuMemoryExceeded { at, .. }
            | StopReason::EngineRestarted { at, .. } => *at,
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
            StopReason::EngineRestarted { .. } => "ended by the engine (its restart, a failed node)".to_owned(),
        }
    }

    /// What happens next to a workload of `kind` now in `state` after this.
    pub fn next(&self, kind: WorkloadKind, state: WorkloadState) -> String {
        let again = match kind {
            WorkloadKind::Job => "`gpuhub start` runs it again",
            WorkloadKind::Workspace => "`gpuhub start` starts it again (its home is kept)",
            WorkloadKind::Service => "`gpuhub start` starts it again",
        };
        match (self, state) {
            (_, WorkloadState::Starting | WorkloadState::Running) => "it is being stopped".to_owned(),
            (StopReason::Preempted { .. }, WorkloadState::Queued) => {
                "queued again in its old place; restarts when its queue's share frees GPUs".to_owned()
            }
            (StopReason::EngineRestarted { .. }, WorkloadState::Queued) => {
                "queued again in its old place; runs again once the engine answers".to_owned()
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
            StopReason::Idle { detail, .. }
            | StopReason::GpuMemoryExceeded { detail, .. }
            | StopReason::EngineRestarted { detail, .. } => (None, None, Some(detail.clone())),
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

    #[test]
    fn an_engine_restart_is_told_by_its_timing_and_a_kill_code() {
        let t = |s: i64| DateTime::from_timestamp(1_700_000_000 + s, 0).unwrap();
        let margin = chrono::Duration::seconds(15);
        let down = EngineOutage { broke: t(100), back: None };
        let over = EngineOutage { broke: t(100), back: Some(t(160)) };
        // no outage: a kill is the run's own end (the OOM killer, a person's docker kill)
        assert!(!killed_by_engine(143, t(100), None, margin));
        // SIGTERM'd by a stopping dockerd just before its stream broke; SIGKILL'd after a 10s stop timeout
        assert!(killed_by_engine(143, t(99), Some(&down), margin));
        assert!(killed_by_engine(137, t(90), Some(&down), margin));
        // killed by a dockerd restarted without live restore, seen at the first look after it is back
        assert!(killed_by_engine(143, t(161), Some(&over), margin));
        // the run's own exit code, even within the outage, is its own
        for code in [0, 1, 2, 42, 139, -1] {
            assert!(!killed_by_engine(code, t(100), Some(&down), margin), "{code}");
        }
        // kills well before the engine went away, or well after it came back, are not the engine's
        assert!(!killed_by_engine(143, t(84), Some(&down), margin));
        assert!(!killed_by_engine(137, t(176), Some(&over), margin));
        assert!(engine_kill_code(137) && engine_kill_code(143) && !engine_kill_code(130));
    }

    #[test]
    fn an_engine_restart_reads_and_is_shown() {
        let at = DateTime::from_timestamp(1_700_000_000, 0).unwrap();
        let r = StopReason::EngineRestarted { detail: "the engine's event stream broke".into(), at };
        let json = serde_json::to_value(&r).unwrap();
        assert_eq!(json["reason"], "engine-restarted");
        assert_eq!(serde_json::from_value::<StopReason>(json).unwrap(), r);
        let v = r.view(WorkloadKind::Job, WorkloadState::Queued);
        assert_eq!(
            (v.reason.as_str(), v.detail.as_deref()),
            ("engine-restarted", Some("the engine's event stream broke"))
        );
        assert!(v.next.starts_with("queued again in its old place"), "{}", v.next);
        assert_eq!(r.view(WorkloadKind::Job, WorkloadState::Failed).next, "ended; `gpuhub start` runs it again");
        assert_eq!("fail".parse::<OnEngineRestart>().unwrap(), OnEngineRestart::Fail);
        assert_eq!(OnEngineRestart::default(), OnEngineRestart::Requeue);
        let e = "restart".parse::<OnEngineRestart>().unwrap_err().to_string();
        assert!(e.contains("on_engine_restart") && e.contains("requeue, fail"), "{e}");
    }

    fn r_detail(r: &StopReason) -> &str {
        match r {
            StopReason::GpuMemoryExceeded { detail, .. } => detail,
            _ => "",
        }
    }
}
