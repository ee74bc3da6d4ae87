//! Bookings of whole GPUs for a team queue during a window: those of the configuration file and those
//! admins make here. The scheduler keeps the booked GPUs free for the queue during the window.

use crate::auth::Caller;
use crate::error::{ApiError, ApiJson};
use crate::state::AppState;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use chrono::{DateTime, Utc};
use gpuhub_core::api::{CreateReservationRequest, Problem, ReservationView};
use gpuhub_core::names;

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
pub async fn current(st: &AppState, now: DateTime<Utc>) -> Result<Vec<ReservationView>, ApiError> {
    let mut all: Vec<ReservationView> = configured(st).filter(|r| r.end > now).collect();
    all.extend(st.store.list_reservations(now).await?);
    all.sort_by(|a, b| a.start.cmp(&b.start).then_with(|| a.id.cmp(&b.id)));
    Ok(all)
}

/// The bookings that have not ended, by start time, in pages.
#[utoipa::path(get, path = "/api/v1/reservations", tag = "reservations", params(super::paging::PageQuery),
    responses((status = 200, body = [ReservationView]), (status = 400, body = Problem), (status = 401, body = Problem)))]
pub async fn list_reservations(
    State(st): State<AppState>,
    _caller: Caller,
    q: Result<axum::extract::Query<super::paging::PageQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<axum::response::Response, ApiError> {
    let page = super::paging::from_query(q)?;
    let all = current(&st, st.clock.now()).await?;
    let (all, next) = super::paging::slice(all, |r| super::paging::time_key(r.start, &r.id), &page);
    Ok(super::paging::respond(all, next, "/api/v1/reservations", &page))
}

/// Books whole GPUs (of a model) for a team queue during a window (admin). Refused when the queue is not
/// configured, the node has too few such GPUs, or overlapping bookings would take more GPUs than exist.
#[utoipa::path(post, path = "/api/v1/reservations", tag = "reservations", request_body = CreateReservationRequest,
    responses((status = 201, body = ReservationView), (status = 403, body = Problem), (status = 409, body = Problem), (status = 422, body = Problem)))]
pub async fn create_reservation(
    State(st): State<AppState>,
    caller: Caller,
    ApiJson(req): ApiJson<CreateReservationRequest>,
) -> Result<(StatusCode, axum::Json<ReservationView>), ApiError> {
    caller.require_admin()?;
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
        .map_err(|e| ApiError::unprocessable(format!("invalid queue: {e}")))?;
    if req.end <= req.start {
        return Err(ApiError::unprocessable("invalid end: must be after start"));
    }
    if req.end <= now {
        return Err(ApiError::unprocessable("invalid end: the window is already over"));
    }
    let nodes = st.nodes();
    let all_gpus = nodes.iter().map(|n| n.gpus.len()).sum::<usize>();
    let matching =
        nodes.iter().flat_map(|n| &n.gpus).filter(|g| req.model.as_ref().is_none_or(|m| &g.model == m)).count();
    if req.gpus == 0 || req.gpus as usize > matching {
        let what = req.model.as_deref().map_or_else(|| "GPUs".to_owned(), |m| format!("{m} GPUs"));
        return Err(ApiError::unprocessable(format!(
            "invalid gpus: {} requested; the nodes have {matching} {what} (at least 1)",
            req.gpus
        )));
    }
    let overlapping: u32 =
        current(&st, now).await?.iter().filter(|r| r.start < req.end && req.start < r.end).map(|r| r.gpus).sum();
    if (overlapping + req.gpus) as usize > all_gpus {
        return Err(ApiError::conflict(format!(
            "overbooked: bookings overlapping this window already hold {overlapping} of the nodes' {all_gpus} GPUs"
        )));
    }
    if configured(&st).any(|r| r.id == id) {
        return Err(ApiError::conflict(format!("reservation {id} already exists (in the configuration file)")));
    }
    let r = ReservationView {
        id,
        queue: req.queue,
        gpus: req.gpus,
        model: req.model,
        start: req.start,
        end: req.end,
        created_by: caller.0.username.clone(),
    };
    st.store.insert_reservation(&r, now).await?;
    st.controller.kick();
    Ok((StatusCode::CREATED, axum::Json(r)))
}

/// Cancels a booking made through the API (admin); those of the configuration file stay.
#[utoipa::path(delete, path = "/api/v1/reservations/{id}", tag = "reservations", params(("id" = String, Path)),
    responses((status = 204), (status = 403, body = Problem), (status = 404, body = Problem), (status = 409, body = Problem)))]
pub async fn delete_reservation(
    State(st): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
) -> Result<StatusCode, ApiError> {
    caller.require_admin()?;
    if configured(&st).any(|r| r.id == id) {
        return Err(ApiError::conflict(format!("reservation {id} is in the configuration file; remove it there")));
    }
    st.store.delete_reservation(&id).await?;
    st.controller.kick();
    Ok(StatusCode::NO_CONTENT)
}
