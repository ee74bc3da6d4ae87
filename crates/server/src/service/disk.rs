//! A workload's cap on what each member writes outside its mounts (its writable layer; security review 2,
//! N1): its own `disk` within its queue's `max_disk`, else the admin's `container_disk` capped at that
//! maximum. A cap the engine cannot enforce is refused with the engine's reason, never run unenforced.

use super::ServiceError;
use crate::state::AppState;
use gpuhub_core::Bytes;
use gpuhub_core::queue::MIN_DISK;
use gpuhub_core::workload::Workload;

/// The cap `w` records at submit for a request of `asked` in `queue`: `None` leaves it to
/// `container_disk` (read when it starts), which is within the queue's maximum.
pub(crate) async fn resolve(st: &AppState, queue: &str, asked: Option<Bytes>) -> Result<Option<Bytes>, ServiceError> {
    let max = match queue {
        "" => None,
        q => st.store.get_queue(q).await?.and_then(|q| q.max_disk),
    };
    let default = st.config.container_disk;
    let cap = match (asked, max) {
        (Some(d), _) if d.0 < MIN_DISK => {
            return Err(ServiceError::invalid_at(
                "disk",
                format!("invalid disk: {d} is less than the least accepted, {}", Bytes(MIN_DISK)),
            ));
        }
        (Some(d), Some(m)) if d > m => {
            return Err(ServiceError::invalid_at(
                "disk",
                format!("invalid disk: {d} is above queue {queue}'s maximum of {m} (max_disk)"),
            ));
        }
        (Some(d), _) => d,
        // the admin's default, where the queue allows it
        (None, Some(m)) if default.is_none_or(|d| d > m) => m,
        (None, _) => return Ok(None),
    };
    enforced(st, "disk").map(|()| Some(cap))
}

/// Whether the engine enforces a writable-layer cap: if not, a refusal of `field` with its reason.
pub(crate) fn enforced(st: &AppState, field: &str) -> Result<(), ServiceError> {
    st.engine.disk_cap().map_err(|why| {
        ServiceError::invalid_at(
            field,
            format!(
                "invalid {field}: the {} engine cannot cap what a container writes outside its mounts: {why}",
                st.engine.name()
            ),
        )
    })
}

/// A queued workload moved to `queue` (an admin's edit) keeps the cap it was given: refused when that,
/// or the admin's default it falls back to, or no cap at all, is above the queue's `max_disk`.
pub(crate) async fn check_move(st: &AppState, w: &Workload, queue: &str) -> Result<(), ServiceError> {
    let Some(max) = st.store.get_queue(queue).await?.and_then(|q| q.max_disk) else {
        return Ok(());
    };
    match w.disk.or(st.config.container_disk) {
        Some(cap) if cap <= max => Ok(()),
        cap => Err(ServiceError::invalid_at(
            "queue",
            format!(
                "invalid queue: {}'s disk cap ({}) is above queue {queue}'s maximum of {max} (max_disk); \
                 submit it anew in that queue",
                w.name,
                cap.map_or_else(|| "none".to_owned(), |c| c.to_string())
            ),
        )),
    }
}
