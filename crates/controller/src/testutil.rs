//! Workloads for the unit tests.

use chrono::{DateTime, Utc};
use gpuhub_core::workload::{Workload, WorkloadKind};

/// A queued one-member job of alice's, named as its id, submitted at `at`, in image `i` with no command,
/// asking for nothing and holding nothing.
pub(crate) fn job(id: &str, at: DateTime<Utc>) -> Workload {
    Workload::new(id, "alice", id, WorkloadKind::Job, "i", at)
}
