//! What a stopped run becomes, decided from its typed [`StopReason`] (never from its message): a
//! preempted workload goes back to the queue in its old place, one at its time limit ends (a job as
//! failed), one stopped by a person or for a disabled owner is stopped.

use chrono::{DateTime, Utc};
use gpuhub_core::stop::StopReason;
use gpuhub_core::workload::{Workload, WorkloadKind, WorkloadState};

/// Records the end of `w`'s run, stopped from outside, whose container exited with `code` (if known).
pub fn after_stop(w: &mut Workload, code: Option<i64>, now: DateTime<Utc>) {
    w.exit_code = code;
    w.gpus.clear();
    w.finished_at = Some(now);
    let by_system = matches!(w.interruption, Some(StopReason::Preempted { .. } | StopReason::TimeLimit { .. }));
    if by_system && w.kind == WorkloadKind::Job && code == Some(0) {
        // it ended on its own before the stop reached it
        w.state = WorkloadState::Succeeded;
        w.message = Some("exited with code 0".into());
        w.interruption = None;
        return;
    }
    let why = w.interruption.as_ref().map(StopReason::summary);
    match &w.interruption {
        Some(StopReason::Preempted { detail, .. }) => {
            // back to the queue, keeping its place (its submit time)
            w.state = WorkloadState::Queued;
            w.finished_at = None;
            w.message = Some(format!("{}: {detail}; queued again", why.unwrap_or_default()));
        }
        Some(StopReason::TimeLimit { limit, .. }) => {
            w.state = match w.kind {
                WorkloadKind::Job => WorkloadState::Failed,
                WorkloadKind::Workspace => WorkloadState::Stopped,
            };
            w.message = Some(format!("{} of {limit}", crate::scheduling::TIME_LIMIT));
        }
        Some(_) => {
            w.state = WorkloadState::Stopped;
            w.message = why;
        }
        None => {
            w.state = WorkloadState::Stopped;
            w.message = Some("stopped".into());
        }
    }
}

/// Why a workload failed to start or vanished, as an interruption.
pub fn engine_failure(detail: impl Into<String>) -> StopReason {
    StopReason::EngineFailure { detail: detail.into(), at: Utc::now() }
}

#[cfg(test)]
mod tests {
    use super::*;
    use gpuhub_core::Seconds;
    use gpuhub_core::workload::Resources;

    fn running(kind: WorkloadKind, why: Option<StopReason>) -> Workload {
        let at = DateTime::from_timestamp(1_000, 0).unwrap();
        Workload {
            id: "i".into(),
            name: "n".into(),
            owner: "o".into(),
            kind,
            image: "x".into(),
            command: vec![],
            env: Default::default(),
            resources: Resources::default(),
            priority: 0,
            queue: String::new(),
            constraint: None,
            runtime_limit: None,
            apps: vec![],
            state: WorkloadState::Running,
            gpus: vec!["G".into()],
            container_id: Some("c".into()),
            exit_code: None,
            // a message that looks like a preemption must not be taken for one
            message: Some("preempted: not really".into()),
            interruption: why,
            created_at: at,
            queued_at: at,
            started_at: Some(at),
            finished_at: None,
        }
    }

    #[test]
    fn the_typed_reason_decides_not_the_message() {
        let at = DateTime::from_timestamp(2_000, 0).unwrap();
        let pre = StopReason::Preempted { by: "alice/t3".into(), queue: "vision".into(), at, detail: "reclaim".into() };
        let mut w = running(WorkloadKind::Job, Some(pre.clone()));
        after_stop(&mut w, Some(143), at);
        assert_eq!((w.state, w.finished_at, w.gpus.len()), (WorkloadState::Queued, None, 0));
        assert_eq!(w.interruption, Some(pre));
        assert_eq!(w.message.as_deref(), Some("preempted by alice/t3: reclaim; queued again"));

        let mut w = running(WorkloadKind::Job, None);
        after_stop(&mut w, Some(143), at);
        assert_eq!(w.state, WorkloadState::Stopped, "no reason is a plain stop, whatever the message says");

        let limit = StopReason::TimeLimit { limit: Seconds(60), at };
        let mut w = running(WorkloadKind::Job, Some(limit.clone()));
        after_stop(&mut w, Some(143), at);
        assert_eq!(w.state, WorkloadState::Failed);
        assert_eq!(w.message.as_deref(), Some("reached its run-time limit of 1m"));
        let mut w = running(WorkloadKind::Workspace, Some(limit.clone()));
        after_stop(&mut w, None, at);
        assert_eq!(w.state, WorkloadState::Stopped);
        // a job that finished by itself before the stop landed succeeded
        let mut w = running(WorkloadKind::Job, Some(limit));
        after_stop(&mut w, Some(0), at);
        assert_eq!((w.state, w.interruption), (WorkloadState::Succeeded, None));

        let mut w = running(WorkloadKind::Workspace, Some(StopReason::User { by: "bob".into(), at }));
        after_stop(&mut w, Some(0), at);
        assert_eq!((w.state, w.message.as_deref()), (WorkloadState::Stopped, Some("stopped by bob")));
    }
}
