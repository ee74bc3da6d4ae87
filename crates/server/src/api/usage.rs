//! Accounting: GPU-, CPU- and memory-hours held, from the exact start and end of every holding
//! (`gpuhub_core::usage`), grouped by user, queue, GPU model and day. Users see their own usage;
//! admins everyone's.

use crate::auth::Caller;
use crate::error::{ApiError, ApiJson, ApiQuery};
use crate::state::AppState;
use axum::extract::State;
use chrono::{DateTime, NaiveDate, Utc};
use gpuhub_core::api::Problem;
use gpuhub_core::usage::{self, UsageKey, UsageReport};
use serde::Deserialize;
use utoipa::IntoParams;

/// `?by=user,day&from=2026-11-01&to=2026-12-01&user=alice`
#[derive(Debug, Default, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct UsageQuery {
    /// What to group by, comma-separated: `user`, `queue`, `model`, `day` (default `user`).
    #[serde(default)]
    pub by: Option<String>,
    /// Start of the window, inclusive: RFC 3339 or a UTC date (`2026-11-01`); default the start of
    /// this month (UTC).
    #[serde(default)]
    pub from: Option<String>,
    /// End of the window, exclusive: RFC 3339 or a UTC date; default now.
    #[serde(default)]
    pub to: Option<String>,
    /// Only this user's usage (admins may name anyone; users only themselves).
    #[serde(default)]
    pub user: Option<String>,
}

/// Parses a time bound: RFC 3339, or a date meaning its UTC midnight.
pub fn parse_time(what: &str, s: &str) -> Result<DateTime<Utc>, ApiError> {
    if let Ok(t) = DateTime::parse_from_rfc3339(s) {
        return Ok(t.with_timezone(&Utc));
    }
    if let Some(t) = NaiveDate::parse_from_str(s, "%Y-%m-%d").ok().and_then(|d| d.and_hms_opt(0, 0, 0)) {
        return Ok(t.and_utc());
    }
    Err(ApiError::bad_request(format!(
        "invalid query: {what} {s:?} is neither an RFC 3339 time (2026-11-01T00:00:00Z) nor a date (2026-11-01)"
    )))
}

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
    let now = st.clock.now();
    let by = UsageKey::parse_list(q.by.as_deref().unwrap_or("user"))
        .map_err(|e| ApiError::bad_request(format!("invalid query: {e}")))?;
    let (month, _) = usage::this_month(now);
    let from = q.from.as_deref().map(|s| parse_time("from", s)).transpose()?.unwrap_or(month);
    let to = q.to.as_deref().map(|s| parse_time("to", s)).transpose()?.unwrap_or(now);
    if from >= to {
        return Err(ApiError::bad_request(format!("invalid query: from ({from}) must be before to ({to})")));
    }
    let user = match (q.user, caller.0.is_admin()) {
        (Some(u), true) => Some(u),
        (Some(u), false) if u != caller.0.username => {
            return Err(ApiError::forbidden("you can see only your own usage; ask an admin for others'"));
        }
        (_, false) => Some(caller.0.username.clone()),
        (None, true) => None,
    };
    let holdings = st.store.holdings(from, to, user.as_deref()).await?;
    let models = if by.contains(&UsageKey::Model) { st.store.gpu_models().await? } else { Default::default() };
    let measured = st.store.measured(from, to, user.as_deref()).await?;
    let rows =
        usage::aggregate(&holdings, from, to, now, &by, &|g| models.get(g).cloned(), &|id| measured.get(id).copied());
    let total = usage::total(&rows);
    Ok(ApiJson(UsageReport { from, to, by, rows, total }))
}
