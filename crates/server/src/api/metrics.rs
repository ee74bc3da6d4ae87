//! What the monitor measured: a workload's members over time, the GPUs over time, and the latest round.
//! A user sees their own workloads (another user's name answers 404, as everywhere) and every GPU's
//! figures; admins see everything.

use crate::auth::Caller;
use crate::error::{ApiError, ApiJson, ApiQuery};
use crate::service;
use crate::service::metrics::{NodeMetricsQuery, WorkloadMetricsQuery};
use crate::state::AppState;
use axum::extract::{Path, State};
use gpuhub_api::Problem;
use gpuhub_core::metrics::{GpuHistory, MetricsSnapshot, WorkloadHistory};
use gpuhub_core::user::User;

/// A workload's CPU, memory and GPU use over time.
///
/// One point per member and step, the mean of the samples in it (CPU in cores, memory and its limit,
/// its GPUs' utilisation and its processes' GPU memory), members in order, then time. Recent
/// history is raw samples (every `[monitor] interval_secs`); older history is kept only as 1-minute
/// and then 1-hour means (`[monitor] raw_hours`, `minute_days`, `hour_days`), so old windows have at
/// most one point per minute or hour whatever the step. Who may see it: as `GET
/// /api/v1/workloads/{name}` (the owner; admins with `owner=`; anyone else gets 404).
#[utoipa::path(get, path = "/api/v1/workloads/{name}/metrics", tag = "metrics",
    params(("name" = String, Path), WorkloadMetricsQuery),
    responses((status = 200, body = WorkloadHistory), (status = 400, body = Problem), (status = 401, body = Problem),
        (status = 404, body = Problem)))]
pub async fn workload_metrics(
    State(st): State<AppState>,
    caller: Caller,
    Path(name): Path<String>,
    ApiQuery(q): ApiQuery<WorkloadMetricsQuery>,
) -> Result<ApiJson<WorkloadHistory>, ApiError> {
    Ok(ApiJson(service::metrics::workload_history(&st, &caller.0, &name, &q).await?))
}

/// The GPUs' use over time.
///
/// Every GPU (or one node's): one point per GPU and step, the mean of the samples in it (utilisation,
/// memory used and in all, power, temperature), kept as a workload's history is. Any
/// signed-in user may see it, as `GET /api/v1/nodes`. A node that has no GPU history and is not one of
/// the engine's nodes is a 404.
#[utoipa::path(get, path = "/api/v1/nodes/metrics", tag = "metrics", params(NodeMetricsQuery),
    responses((status = 200, body = GpuHistory), (status = 400, body = Problem), (status = 401, body = Problem),
        (status = 404, body = Problem)))]
pub async fn node_metrics(
    State(st): State<AppState>,
    _caller: Caller,
    ApiQuery(q): ApiQuery<NodeMetricsQuery>,
) -> Result<ApiJson<GpuHistory>, ApiError> {
    Ok(ApiJson(service::metrics::node_history(&st, q).await?))
}

/// What runs now: the monitor's latest round.
///
/// Every running member's CPU, memory and GPU use, and every GPU's figures (empty, without `at`,
/// before the first round). Users see their own workloads' members only, and every
/// GPU's figures (a GPU's use includes other users' work), but among its holders only their own
/// workloads: other users' holders are left out. Admins see everything.
#[utoipa::path(get, path = "/api/v1/metrics/live", tag = "metrics",
    responses((status = 200, body = MetricsSnapshot), (status = 401, body = Problem)))]
pub async fn live_metrics(State(st): State<AppState>, caller: Caller) -> ApiJson<MetricsSnapshot> {
    ApiJson(visible(&st.metrics.get(), &caller.0))
}

/// What of `snapshot` `user` may see (see [`live_metrics`]).
pub fn visible(snapshot: &MetricsSnapshot, user: &User) -> MetricsSnapshot {
    if user.is_admin() {
        return snapshot.clone();
    }
    let own = format!("{}/", user.username);
    MetricsSnapshot {
        at: snapshot.at,
        members: snapshot.members.iter().filter(|m| m.owner == user.username).cloned().collect(),
        gpus: snapshot
            .gpus
            .iter()
            .map(|g| {
                let mut g = g.clone();
                g.holders.retain(|h| h.starts_with(&own));
                g
            })
            .collect(),
    }
}
