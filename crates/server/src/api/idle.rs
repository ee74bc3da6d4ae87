//! Idle GPUs: an owner keeps a workspace despite idleness for a while; admins see every idle workload.

use super::workloads::OwnerQuery;
use crate::auth::Caller;
use crate::error::{ApiError, ApiJson, ApiQuery};
use crate::service;
use crate::state::AppState;
use axum::extract::{Path, State};
use gpuhub_api::{IdleReportRow, KeepRequest, Problem, WorkloadView};
use gpuhub_core::workload::WorkloadState;

/// Keeps a running workload from being stopped for idle GPUs for `hours` from now (at most the
/// server's `idle.keep_max_hours`; 0 withdraws the keep). Owner or admin; another user's answers 404.
#[utoipa::path(post, path = "/api/v1/workloads/{name}/keep", tag = "workloads",
    params(("name" = String, Path), OwnerQuery), request_body = KeepRequest,
    responses((status = 200, body = WorkloadView), (status = 404, body = Problem), (status = 409, body = Problem),
        (status = 422, body = Problem)))]
pub async fn keep_workload(
    State(st): State<AppState>,
    caller: Caller,
    Path(name): Path<String>,
    ApiQuery(q): ApiQuery<OwnerQuery>,
    ApiJson(req): ApiJson<KeepRequest>,
) -> Result<axum::Json<WorkloadView>, ApiError> {
    let w = service::lookup(&st, &caller.0, &name, q.owner.as_deref()).await?;
    let max = st.config.idle.keep_max_hours;
    if u64::from(req.hours) > max {
        return Err(ApiError::unprocessable(format!("hours: {} is more than this server allows, {max}", req.hours)));
    }
    if w.state() != WorkloadState::Running {
        return Err(ApiError::conflict(format!("workload {name} is {}; only a running one can be kept", w.state())));
    }
    let until = (req.hours > 0).then(|| st.clock.now() + chrono::TimeDelta::hours(i64::from(req.hours)));
    st.idle.forget_ended(st.clock.now());
    st.idle.keep(&w.id, until);
    Ok(axum::Json(service::view(&st, &w)))
}

/// Every running workload whose GPUs sit idle, oldest first: since when, whether its owner was warned
/// and when it will be stopped (admin).
#[utoipa::path(get, path = "/api/v1/idle", tag = "usage",
    responses((status = 200, body = [IdleReportRow]), (status = 401, body = Problem), (status = 403, body = Problem)))]
pub async fn idle_report(State(st): State<AppState>, caller: Caller) -> Result<ApiJson<Vec<IdleReportRow>>, ApiError> {
    caller.require_admin()?;
    Ok(ApiJson(crate::idle::report(&st).await?))
}
