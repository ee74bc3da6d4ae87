//! Bookings of whole GPUs for a team queue during a window: those of the configuration file and those
//! admins make here. The scheduler keeps the booked GPUs free for the queue during the window.

use crate::auth::Caller;
use crate::error::{ApiError, ApiJson};
use crate::service;
use crate::state::AppState;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use gpuhub_api::{CreateReservationRequest, Problem, ReservationView};

/// The bookings that have not ended, by start time, in pages.
#[utoipa::path(get, path = "/api/v1/reservations", tag = "reservations", params(super::paging::PageQuery),
    responses((status = 200, body = [ReservationView]), (status = 400, body = Problem), (status = 401, body = Problem)))]
pub async fn list_reservations(
    State(st): State<AppState>,
    _caller: Caller,
    q: Result<axum::extract::Query<super::paging::PageQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<axum::response::Response, ApiError> {
    let page = super::paging::from_query(q)?;
    let all = service::reservations::current(&st, st.clock.now()).await?;
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
    let r = service::reservations::create(&st, &caller.0, req).await?;
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
    service::reservations::delete(&st, &caller.0, &id).await?;
    Ok(StatusCode::NO_CONTENT)
}
