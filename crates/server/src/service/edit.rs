//! Editing a workload's terms after submission: its owner (or an admin) lengthens the run-time limit of
//! a queued or running workload within its queue's `max_runtime`; an admin changes a queued workload's
//! priority or queue. The controller applies the edit and records it in the workload's history.

use super::{Kind, ServiceError};
use crate::state::AppState;
use gpuhub_core::Seconds;
use gpuhub_core::api::EditWorkloadRequest;
use gpuhub_core::user::User;
use gpuhub_core::workload::Workload;

/// Refuses a run-time limit above the maximum of `queue` (the default queue has none but 366 days).
pub(crate) async fn check_queue_cap(st: &AppState, queue: &str, limit: Seconds) -> Result<(), ServiceError> {
    if queue.is_empty() {
        return Ok(());
    }
    let Some(q) = st.store.get_queue(queue).await? else { return Ok(()) };
    match q.max_runtime {
        Some(max) if limit > max => Err(ServiceError::invalid_at(
            "runtime_limit",
            format!("invalid runtime_limit: {limit} is above queue {queue}'s maximum run time of {max}"),
        )),
        _ => Ok(()),
    }
}

/// Applies `req` to `w` for `caller` (who found `w` through [`super::lookup`]: its owner or an admin).
/// Forbidden: priority or queue from a non-admin; a conflict: a state that does not allow the change;
/// invalid: a limit that does not grow or passes the queue's maximum, an unknown queue, an empty edit.
pub async fn edit(
    st: &AppState,
    caller: &User,
    w: &Workload,
    req: &EditWorkloadRequest,
) -> Result<Workload, ServiceError> {
    if req.is_empty() {
        return Err(ServiceError::invalid("nothing to change: give runtime_limit, priority or queue"));
    }
    if (req.priority.is_some() || req.queue.is_some()) && !caller.is_admin() {
        return Err(ServiceError::new(Kind::Forbidden, "only an admin may change a workload's priority or queue"));
    }
    // the rules on a copy first, for an answer that names the problem before the controller is asked
    let mut edited = w.clone();
    edited.amend(req)?;
    if req.queue.as_ref().is_some_and(|q| *q != w.queue) && w.waits_in_engine() {
        // submitted to an engine's own queue (Slurm's partition and QOS follow the team queue)
        return Err(ServiceError::new(
            Kind::Conflict,
            format!(
                "workload {} already waits in the {} engine's own queue under queue {}, where it cannot move; \
                 submit it anew in the other queue",
                w.name,
                st.engine.name(),
                if w.queue.is_empty() { "default" } else { &w.queue }
            ),
        ));
    }
    if let Some(q) = req.queue.as_deref().filter(|q| !q.is_empty()) {
        let live = st.live_config().await?;
        live.queue_for(&w.owner, true, Some(q))
            .map_err(|e| ServiceError::invalid_at("queue", format!("invalid queue: {e}")))?;
    }
    if let Some(limit) = edited.runtime_limit.filter(|_| req.runtime_limit.is_some() || req.queue.is_some()) {
        check_queue_cap(st, &edited.queue, limit).await?;
    }
    let w = st.controller.edit(&w.id, req.clone(), &caller.username).await?;
    st.controller.kick();
    Ok(w)
}
