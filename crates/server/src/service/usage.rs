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
    let held = Held::read(st, caller, q.user, (from, to)).await?;
    held.report(st, by, (from, to)).await
}

/// The holdings of a window as a caller may see them, read once for several reports within it (a page's
/// buckets): each report is the one [`report`] gives for its window.
#[derive(Debug)]
pub struct Held {
    /// Whose (`None`: everyone's).
    user: Option<String>,
    window: (DateTime<Utc>, DateTime<Utc>),
    holdings: Vec<usage::Holding>,
    models: std::collections::HashMap<String, String>,
    now: DateTime<Utc>,
}

impl Held {
    /// The holdings overlapping `window` of `user` (default: the caller's own, or everyone's for an
    /// admin), as `caller` may see them.
    pub async fn read(
        st: &AppState,
        caller: &User,
        user: Option<String>,
        (from, to): (DateTime<Utc>, DateTime<Utc>),
    ) -> Result<Held, ServiceError> {
        if from >= to {
            return Err(ServiceError::new(
                Kind::Malformed,
                format!("invalid query: from ({from}) must be before to ({to})"),
            ));
        }
        let user = match (user, caller.is_admin()) {
            (Some(u), true) => Some(u),
            (Some(u), false) if u != caller.username => {
                return Err(ServiceError::forbidden("you can see only your own usage; ask an admin for others'"));
            }
            (_, false) => Some(caller.username.clone()),
            (None, true) => None,
        };
        let holdings = st.holdings((from, to), user.as_deref()).await?;
        let models = st.store.gpu_models().await?;
        Ok(Held { user, window: (from, to), holdings, models, now: st.clock.now() })
    }

    /// The report by `by` over `from`–`to`, which must lie within the window read.
    pub async fn report(
        &self,
        st: &AppState,
        by: Vec<UsageKey>,
        (from, to): (DateTime<Utc>, DateTime<Utc>),
    ) -> Result<UsageReport, ServiceError> {
        if from < self.window.0 || to > self.window.1 || from >= to {
            return Err(ServiceError::new(
                Kind::Malformed,
                format!("invalid query: {from}–{to} is not within {}–{}", self.window.0, self.window.1),
            ));
        }
        let measured = st.store.measured(from, to, self.user.as_deref()).await?;
        let rows = usage::aggregate(&self.holdings, from, to, self.now, &by, &|g| self.models.get(g).cloned(), &|id| {
            measured.get(id).copied()
        });
        let total = usage::total(&rows);
        Ok(UsageReport { from, to, by, rows, total })
    }
}
