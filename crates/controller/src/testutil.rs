//! Workloads for the unit tests.

use chrono::{DateTime, Utc};
use gpuhub_core::workload::{Resources, Workload, WorkloadKind, WorkloadState};

/// A queued one-member job of alice's, named as its id, submitted at `at`, in image `i` with no command,
/// asking for nothing and holding nothing.
pub(crate) fn job(id: &str, at: DateTime<Utc>) -> Workload {
    Workload {
        id: id.into(),
        name: id.into(),
        owner: "alice".into(),
        kind: WorkloadKind::Job,
        image: "i".into(),
        command: vec![],
        env: Default::default(),
        resources: Resources::default(),
        priority: 0,
        queue: String::new(),
        constraint: None,
        runtime_limit: None,
        disk: None,
        apps: vec![],
        state: WorkloadState::Queued,
        gpus: vec![],
        size: 1,
        run_id: None,
        members: vec![],
        exit_code: None,
        message: None,
        interruption: None,
        created_at: at,
        queued_at: at,
        started_at: None,
        finished_at: None,
        held_since: None,
        held_until: None,
        service: None,
        datasets: Vec::new(),
        teams: Vec::new(),
    }
}
