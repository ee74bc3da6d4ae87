//! Accounting: GPU-, CPU- and memory-hours held, from the exact start and end of every holding
//! (`gpuhub_core::usage`), grouped by user, queue, GPU model and day. Users see their own usage;
//! admins everyone's.

use crate::auth::Caller;
use crate::error::{ApiError, ApiJson, ApiQuery};
use crate::service;
use crate::service::usage::UsageQuery;
use crate::state::AppState;
use axum::extract::State;
use gpuhub_api::Problem;
use gpuhub_core::usage::UsageReport;

/// GPU-, CPU- and memory-hours held in a window, grouped by user, queue, GPU model and/or UTC day.
/// Computed from the exact start and end of every holding (a preempted run that starts again counts
/// twice, once per holding; nothing is estimated from samples); a holding still open counts up to now.
/// The `*_used_*` figures are what was actually used: each holding's hours × the means the monitor
/// measured of its workload in the window (GPU utilisation, cores, memory).
#[utoipa::path(get, path = "/api/v1/usage", tag = "usage", params(UsageQuery),
    responses((status = 200, body = UsageReport), (status = 400, body = Problem), (status = 401, body = Problem),
        (status = 403, body = Problem)))]
pub async fn usage(
    State(st): State<AppState>,
    caller: Caller,
    ApiQuery(q): ApiQuery<UsageQuery>,
) -> Result<ApiJson<UsageReport>, ApiError> {
    Ok(ApiJson(service::usage::report(&st, &caller.0, q).await?))
}
