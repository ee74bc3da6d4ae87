//! Bookings of whole GPUs for a team queue during a window: those of the configuration file and those
//! admins make. The scheduler keeps the booked GPUs free for the queue during the window.

use super::ServiceError;
use crate::state::AppState;
use chrono::{DateTime, Utc};
use gpuhub_api::{CreateReservationRequest, ReservationView};
use gpuhub_core::names;
use gpuhub_core::user::User;

/// The bookings of the configuration file, as the API shows them.
fn configured(st: &AppState) -> impl Iterator<Item = ReservationView> + '_ {
    st.config.scheduler.reservations.iter().map(|r| ReservationView {
        id: r.id.clone(),
        queue: r.queue.clone(),
        gpus: r.gpus,
        model: r.model.clone(),
        start: DateTime::from_timestamp_millis(r.start_ms).unwrap_or_default(),
        end: DateTime::from_timestamp_millis(r.end_ms).unwrap_or_default(),
        created_by: "config".into(),
    })
}

/// Every booking that has not ended: the configuration's and the API's, by start time.
pub async fn current(st: &AppState, now: DateTime<Utc>) -> Result<Vec<ReservationView>, ServiceError> {
    let mut all: Vec<ReservationView> = configured(st).filter(|r| r.end > now).collect();
    all.extend(st.store.list_reservations(now).await?);
    all.sort_by(|a, b| a.start.cmp(&b.start).then_with(|| a.id.cmp(&b.id)));
    Ok(all)
}

/// Books whole GPUs (of a model) for a team queue during a window, for admin `caller`. Refused when the
/// queue is not configured, the node has too few such GPUs, or overlapping bookings would take more GPUs
/// than exist.
pub async fn create(
    st: &AppState,
    caller: &User,
    req: CreateReservationRequest,
) -> Result<ReservationView, ServiceError> {
    super::require_admin(caller)?;
    let now = st.clock.now();
    let id = match &req.id {
        Some(id) => {
            names::validate("reservation", id)?;
            id.clone()
        }
        None => format!("r-{}", &uuid::Uuid::new_v4().simple().to_string()[..8]),
    };
    st.live_config()
        .await?
        .check_queue_exists(&req.queue)
        .map_err(|e| ServiceError::invalid(format!("invalid queue: {e}")))?;
    if req.end <= req.start {
        return Err(ServiceError::invalid("invalid end: must be after start"));
    }
    if req.end <= now {
        return Err(ServiceError::invalid("invalid end: the window is already over"));
    }
    let nodes = st.nodes();
    let all_gpus = nodes.iter().map(|n| n.gpus.len()).sum::<usize>();
    let matching =
        nodes.iter().flat_map(|n| &n.gpus).filter(|g| req.model.as_ref().is_none_or(|m| &g.model == m)).count();
    if req.gpus == 0 || req.gpus as usize > matching {
        let what = req.model.as_deref().map_or_else(|| "GPUs".to_owned(), |m| format!("{m} GPUs"));
        return Err(ServiceError::invalid(format!(
            "invalid gpus: {} requested; the nodes have {matching} {what} (at least 1)",
            req.gpus
        )));
    }
    let overlapping: u32 =
        current(st, now).await?.iter().filter(|r| r.start < req.end && req.start < r.end).map(|r| r.gpus).sum();
    if (overlapping + req.gpus) as usize > all_gpus {
        return Err(ServiceError::conflict(format!(
            "overbooked: bookings overlapping this window already hold {overlapping} of the nodes' {all_gpus} GPUs"
        )));
    }
    if configured(st).any(|r| r.id == id) {
        return Err(ServiceError::conflict(format!("reservation {id} already exists (in the configuration file)")));
    }
    let r = ReservationView {
        id,
        queue: req.queue,
        gpus: req.gpus,
        model: req.model,
        start: req.start,
        end: req.end,
        created_by: caller.username.clone(),
    };
    st.store.insert_reservation(&r, now).await?;
    st.controller.kick();
    Ok(r)
}

/// Cancels booking `id` made through the API, for admin `caller`; those of the configuration file stay.
pub async fn delete(st: &AppState, caller: &User, id: &str) -> Result<(), ServiceError> {
    super::require_admin(caller)?;
    if configured(st).any(|r| r.id == id) {
        return Err(ServiceError::conflict(format!("reservation {id} is in the configuration file; remove it there")));
    }
    st.store.delete_reservation(id).await?;
    st.controller.kick();
    Ok(())
}
