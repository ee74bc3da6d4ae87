//! What the monitor measured, over time: a workload's members (as its owner, or an admin, may see it)
//! and the GPUs (any signed-in user), in a window of history checked here.

use super::{Kind, ServiceError};
use crate::state::AppState;
use chrono::{DateTime, Utc};
use gpuhub_core::metrics::{GpuHistory, WorkloadHistory};
use gpuhub_core::user::User;
use serde::Deserialize;
use std::time::Duration;
use utoipa::IntoParams;

/// Points per series a window has by default, at most (the default step is chosen for it).
pub const DEFAULT_POINTS: u64 = 500;
/// Points per series a window may have at most; a finer step is refused.
pub const MAX_POINTS: u64 = 10_000;
/// The longest step, seconds (366 days).
pub const MAX_STEP_SECS: u64 = 366 * 86_400;
/// The steps a default is rounded up to, seconds (past a day: whole days).
const ROUND_STEPS: [u64; 18] =
    [1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 10_800, 21_600, 43_200, 86_400];

/// `?from=2026-11-01T10:00:00Z&to=…&step=60&owner=alice`
#[derive(Debug, Default, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct WorkloadMetricsQuery {
    /// Start of the window, inclusive: RFC 3339 or a UTC date (`2026-11-01`); default an hour before
    /// `to`.
    #[serde(default)]
    pub from: Option<String>,
    /// End of the window, exclusive: RFC 3339 or a UTC date; default now.
    #[serde(default)]
    pub to: Option<String>,
    /// Seconds per point (1 to 31,622,400); default the smallest round step (1, 2, 5, 10, 15, 30 s, 1,
    /// 2, 5, 10, 15, 30 min, 1, 2, 3, 6, 12 h, 1 day, then whole days) of at least the sampling interval
    /// that gives at most 500 points per member. A step giving more than 10,000 points per member is
    /// refused.
    #[serde(default)]
    pub step: Option<u64>,
    /// Another user's workload (admins only).
    #[serde(default)]
    pub owner: Option<String>,
}

/// `?from=…&to=…&step=…&node=gpu-1`
#[derive(Debug, Default, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct NodeMetricsQuery {
    /// Start of the window, inclusive: RFC 3339 or a UTC date; default an hour before `to`.
    #[serde(default)]
    pub from: Option<String>,
    /// End of the window, exclusive: RFC 3339 or a UTC date; default now.
    #[serde(default)]
    pub to: Option<String>,
    /// Seconds per point, as for a workload's metrics (per GPU).
    #[serde(default)]
    pub step: Option<u64>,
    /// Only this node's GPUs.
    #[serde(default)]
    pub node: Option<String>,
}

/// A window of history and its step, checked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Window {
    /// Start, inclusive.
    pub from: DateTime<Utc>,
    /// End, exclusive.
    pub to: DateTime<Utc>,
    /// Seconds per point.
    pub step_secs: u64,
}

impl Window {
    /// The window `from`–`to` (defaults: the hour before now) with `step` (default: see
    /// [`WorkloadMetricsQuery::step`], never finer than `interval_secs`), or [`Kind::Malformed`] naming what is wrong.
    pub fn parse(
        now: DateTime<Utc>,
        interval_secs: u64,
        from: Option<&str>,
        to: Option<&str>,
        step: Option<u64>,
    ) -> Result<Window, ServiceError> {
        let to = to.map(|s| super::usage::parse_time("to", s)).transpose()?.unwrap_or(now);
        let from = match from {
            Some(s) => super::usage::parse_time("from", s)?,
            None => to - chrono::Duration::hours(1),
        };
        if from >= to {
            return Err(ServiceError::new(
                Kind::Malformed,
                format!("invalid query: from ({from}) must be before to ({to})"),
            ));
        }
        let span_ms = u64::try_from((to - from).num_milliseconds()).unwrap_or(u64::MAX).max(1);
        let step_secs = match step {
            Some(0) => {
                return Err(ServiceError::new(Kind::Malformed, "invalid query: step must be at least 1 (seconds)"));
            }
            Some(s) if s > MAX_STEP_SECS => {
                return Err(ServiceError::new(
                    Kind::Malformed,
                    format!("invalid query: step {s} is too long: at most {MAX_STEP_SECS} seconds (366 days)"),
                ));
            }
            Some(s) => s,
            None => default_step(span_ms, interval_secs),
        };
        let points = span_ms.div_ceil(step_secs * 1000);
        if points > MAX_POINTS {
            let least = span_ms.div_ceil(MAX_POINTS * 1000);
            return Err(ServiceError::new(
                Kind::Malformed,
                format!(
                    "invalid query: a step of {step_secs} s gives {points} points per series from {from} to {to}; \
                 at most {MAX_POINTS}: use a step of at least {least} s or a shorter window"
                ),
            ));
        }
        Ok(Window { from, to, step_secs })
    }

    /// The step as a duration.
    pub fn step(&self) -> Duration {
        Duration::from_secs(self.step_secs)
    }
}

/// The smallest round step of at least `interval_secs` that gives at most [`DEFAULT_POINTS`] points
/// over `span_ms`.
fn default_step(span_ms: u64, interval_secs: u64) -> u64 {
    let want = span_ms.div_ceil(DEFAULT_POINTS * 1000).max(interval_secs).max(1);
    match ROUND_STEPS.iter().find(|s| **s >= want) {
        Some(s) => *s,
        None => want.div_ceil(86_400).saturating_mul(86_400).min(MAX_STEP_SECS.max(want)),
    }
}

/// Workload `name`'s members' use in the window `q` asks for, if `caller` may see it (as
/// [`super::lookup`]).
pub async fn workload_history(
    st: &AppState,
    caller: &User,
    name: &str,
    q: &WorkloadMetricsQuery,
) -> Result<WorkloadHistory, ServiceError> {
    let w = Window::parse(st.clock.now(), st.config.monitor.interval_secs, q.from.as_deref(), q.to.as_deref(), q.step)?;
    let workload = super::lookup(st, caller, name, q.owner.as_deref()).await?;
    let points = st.store.member_series(&workload.id, w.from, w.to, w.step()).await?;
    Ok(WorkloadHistory {
        workload: workload.name,
        owner: workload.owner,
        from: w.from,
        to: w.to,
        step_secs: w.step_secs,
        points,
    })
}

/// The GPUs' use (every GPU, or one node's) in the window `q` asks for; a node that has no GPU history
/// and is none of the engine's is [`Kind::NotFound`].
pub async fn node_history(st: &AppState, q: NodeMetricsQuery) -> Result<GpuHistory, ServiceError> {
    let w = Window::parse(st.clock.now(), st.config.monitor.interval_secs, q.from.as_deref(), q.to.as_deref(), q.step)?;
    let points = st.store.gpu_series(w.from, w.to, w.step(), q.node.as_deref()).await?;
    if let Some(node) = &q.node {
        let nodes: Vec<String> = st.nodes().into_iter().map(|n| n.name).collect();
        if points.is_empty() && !nodes.contains(node) {
            return Err(ServiceError::not_found(format!(
                "no node {node:?}: the engine's nodes are {}",
                nodes.join(", ")
            )));
        }
    }
    Ok(GpuHistory { node: q.node, from: w.from, to: w.to, step_secs: w.step_secs, points })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(s: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(s).unwrap().with_timezone(&Utc)
    }

    #[test]
    fn windows_default_to_the_last_hour_in_about_500_points() {
        let now = t("2026-11-01T12:00:00Z");
        let w = Window::parse(now, 10, None, None, None).unwrap();
        assert_eq!((w.from, w.to, w.step_secs), (t("2026-11-01T11:00:00Z"), now, 10));
        // never finer than the sampling interval
        assert_eq!(Window::parse(now, 60, None, None, None).unwrap().step_secs, 60);
        let day = Window::parse(now, 10, Some("2026-10-31"), Some("2026-11-01"), None).unwrap();
        assert_eq!(day.step_secs, 300, "86,400 s / 500 = 173 s, rounded up to 5 min");
        let month = Window::parse(now, 10, Some("2026-10-01"), Some("2026-11-01"), None).unwrap();
        assert_eq!(month.step_secs, 7200);
        let decade = Window::parse(now, 10, Some("2016-01-01"), None, None).unwrap();
        assert_eq!(decade.step_secs % 86_400, 0);
        assert!(decade.step_secs * 1000 * DEFAULT_POINTS >= (now - decade.from).num_milliseconds() as u64);
        // only `from`: up to now; only `to`: the hour before it
        let w = Window::parse(now, 10, Some("2026-11-01T11:30:00Z"), None, Some(60)).unwrap();
        assert_eq!((w.to, w.step_secs), (now, 60));
        let w = Window::parse(now, 10, None, Some("2026-11-01"), None).unwrap();
        assert_eq!(w.from, t("2026-10-31T23:00:00Z"));
    }

    #[test]
    fn bad_windows_are_refused_naming_the_problem() {
        let now = t("2026-11-01T12:00:00Z");
        let detail = |from: Option<&str>, to: Option<&str>, step: Option<u64>| {
            let e = Window::parse(now, 10, from, to, step).unwrap_err();
            assert_eq!(e.kind, Kind::Malformed);
            e.detail
        };
        assert!(detail(None, None, Some(0)).contains("step must be at least 1"));
        assert!(detail(None, None, Some(MAX_STEP_SECS + 1)).contains("too long"));
        assert!(detail(Some("2026-11-02"), None, None).contains("must be before"));
        assert!(detail(Some("yesterday"), None, None).contains("from \"yesterday\""));
        // a day at 1 s is 86,400 points
        let d = detail(Some("2026-10-31"), Some("2026-11-01"), Some(1));
        assert!(d.contains("86400 points") && d.contains("at least 9 s"), "{d}");
        // exactly 10,000 points pass
        assert!(Window::parse(now, 10, Some("2026-11-01T09:13:20Z"), None, Some(1)).is_ok());
        assert!(Window::parse(now, 10, Some("2026-11-01T09:13:19Z"), None, Some(1)).is_err());
    }
}
