//! Accounting: GPU-, CPU- and memory-hours held, from the exact start and end of every holding
//! (`gpuhub_core::usage`), grouped by user, queue, GPU model and day. Users see their own usage;
//! admins everyone's.

use super::{Kind, ServiceError};
use crate::state::AppState;
use chrono::{DateTime, NaiveDate, Utc};
use gpuhub_core::usage::{self, UsageKey, UsageReport};
use gpuhub_core::user::User;
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
pub fn parse_time(what: &str, s: &str) -> Result<DateTime<Utc>, ServiceError> {
    if let Ok(t) = DateTime::parse_from_rfc3339(s) {
        return Ok(t.with_timezone(&Utc));
    }
    if let Some(t) = NaiveDate::parse_from_str(s, "%Y-%m-%d").ok().and_then(|d| d.and_hms_opt(0, 0, 0)) {
        return Ok(t.and_utc());
    }
    Err(ServiceError::new(
        Kind::Malformed,
        format!(
            "invalid query: {what} {s:?} is neither an RFC 3339 time (2026-11-01T00:00:00Z) nor a date (2026-11-01)"
        ),
    ))
}

/// The usage report `q` asks for, as `caller` may see it (an admin anyone's, a user their own).
pub async fn report(st: &AppState, caller: &User, q: UsageQuery) -> Result<UsageReport, ServiceError> {
    let now = st.clock.now();
    let by = UsageKey::parse_list(q.by.as_deref().unwrap_or("user"))
        .map_err(|e| ServiceError::new(Kind::Malformed, format!("invalid query: {e}")))?;
    let (month, _) = usage::this_month(now);
    let from = q.from.as_deref().map(|s| parse_time("from", s)).transpose()?.unwrap_or(month);
    let to = q.to.as_deref().map(|s| parse_time("to", s)).transpose()?.unwrap_or(now);
    if from >= to {
        return Err(ServiceError::new(
            Kind::Malformed,
            format!("invalid query: from ({from}) must be before to ({to})"),
        ));
    }
    let user = match (q.user, caller.is_admin()) {
        (Some(u), true) => Some(u),
        (Some(u), false) if u != caller.username => {
            return Err(ServiceError::forbidden("you can see only your own usage; ask an admin for others'"));
        }
        (_, false) => Some(caller.username.clone()),
        (None, true) => None,
    };
    let holdings = st.store.holdings(from, to, user.as_deref()).await?;
    let models = if by.contains(&UsageKey::Model) { st.store.gpu_models().await? } else { Default::default() };
    let measured = st.store.measured(from, to, user.as_deref()).await?;
    let rows =
        usage::aggregate(&holdings, from, to, now, &by, &|g| models.get(g).cloned(), &|id| measured.get(id).copied());
    let total = usage::total(&rows);
    Ok(UsageReport { from, to, by, rows, total })
}
