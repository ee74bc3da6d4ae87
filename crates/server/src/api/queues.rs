//! The team queues: their guarantees and limits (kept in the store, edited by admins without a
//! restart), and what they hold now.

use crate::auth::Caller;
use crate::error::{ApiError, ApiJson};
use crate::service;
use crate::state::AppState;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use gpuhub_api::{Problem, QueueView};
use gpuhub_core::queue::{CreateQueueRequest, QueuePatch};

/// The team queues, with what each holds and how much waits. Everyone sees the queues and whether they
/// may use them; only admins see the member lists.
/// By name, in pages.
#[utoipa::path(get, path = "/api/v1/queues", tag = "queues", params(super::paging::PageQuery),
    responses((status = 200, body = [QueueView]), (status = 400, body = Problem), (status = 401, body = Problem)))]
pub async fn list_queues(
    State(st): State<AppState>,
    caller: Caller,
    q: Result<axum::extract::Query<super::paging::PageQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<axum::response::Response, ApiError> {
    let page = super::paging::from_query(q)?;
    let views = service::queues::views(&st, &caller.0).await?;
    let (views, next) = super::paging::slice(views, |q| q.name.clone(), &page);
    Ok(super::paging::respond(views, next, "/api/v1/queues", &page))
}

/// Creates a team queue (admin); it is in force from the scheduler's next pass.
#[utoipa::path(post, path = "/api/v1/queues", tag = "queues", request_body = CreateQueueRequest,
    responses((status = 201, body = QueueView), (status = 401, body = Problem), (status = 403, body = Problem),
        (status = 409, body = Problem), (status = 422, body = Problem)))]
pub async fn create_queue(
    State(st): State<AppState>,
    caller: Caller,
    ApiJson(req): ApiJson<CreateQueueRequest>,
) -> Result<(StatusCode, axum::Json<QueueView>), ApiError> {
    let view = service::queues::create(&st, &caller.0, &req).await?;
    Ok((StatusCode::CREATED, axum::Json(view)))
}

/// Changes a team queue (admin), as a JSON merge patch: absent fields stay, `null` unsets (no
/// guarantee, no limit, everyone, no classes). In force from the scheduler's next pass, which this
/// starts: work held by a raised limit starts without a restart.
#[utoipa::path(patch, path = "/api/v1/queues/{name}", tag = "queues", params(("name" = String, Path)),
    request_body = QueuePatch,
    responses((status = 200, body = QueueView), (status = 401, body = Problem), (status = 403, body = Problem),
        (status = 404, body = Problem), (status = 422, body = Problem)))]
pub async fn patch_queue(
    State(st): State<AppState>,
    caller: Caller,
    Path(name): Path<String>,
    ApiJson(patch): ApiJson<QueuePatch>,
) -> Result<axum::Json<QueueView>, ApiError> {
    Ok(axum::Json(service::queues::patch(&st, &caller.0, &name, &patch).await?))
}

/// Removes a team queue (admin); refused with 409 while a workload in it is queued or running.
#[utoipa::path(delete, path = "/api/v1/queues/{name}", tag = "queues", params(("name" = String, Path)),
    responses((status = 204), (status = 401, body = Problem), (status = 403, body = Problem),
        (status = 404, body = Problem), (status = 409, body = Problem)))]
pub async fn delete_queue(
    State(st): State<AppState>,
    caller: Caller,
    Path(name): Path<String>,
) -> Result<StatusCode, ApiError> {
    service::queues::delete(&st, &caller.0, &name).await?;
    Ok(StatusCode::NO_CONTENT)
}
