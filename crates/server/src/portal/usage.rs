//! `GET /usage`: GPU-hours over time, per user or per team queue, split by GPU model, held and
//! actually used, over the last day (by hour), week or month (by UTC day), with a CSV of what the chart
//! shows. Every figure is `GET /api/v1/usage`'s (its handler is called, nothing is summed here): the
//! window's totals one report, the hours of a day one report each, the days of a week or month one
//! report by day. Users see their own usage, admins everyone's (or one user's).

use super::charts::{self, BarChart};
use super::{Viewer, api_error_page, layout, only_navigation};
use crate::error::ApiError;
use crate::service::usage::Held;
use crate::state::AppState;
use axum::extract::{Query, Request, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use chrono::{DateTime, DurationRound, TimeDelta, Utc};
use gpuhub_core::usage::{UsageKey, UsageReport, UsageRow};
use maud::{Markup, html};
use serde::Deserialize;

/// `?range=day|week|month&by=user|queue&user=alice&format=csv`
#[derive(Debug, Default, Deserialize)]
pub struct UsagePageQuery {
    range: Option<String>,
    by: Option<String>,
    user: Option<String>,
    format: Option<String>,
}

/// The windows the picker offers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Range {
    Day,
    Week,
    Month,
}

impl Range {
    fn parse(s: Option<&str>) -> Result<Range, ApiError> {
        match s.unwrap_or("week") {
            "day" => Ok(Range::Day),
            "week" => Ok(Range::Week),
            "month" => Ok(Range::Month),
            other => Err(ApiError::bad_request(format!("invalid range {other:?}: one of day, week, month"))),
        }
    }

    fn as_str(self) -> &'static str {
        match self {
            Range::Day => "day",
            Range::Week => "week",
            Range::Month => "month",
        }
    }

    /// The window ending with the current hour (day) or UTC day (week, month), and its buckets.
    fn buckets(self, now: DateTime<Utc>) -> Vec<(DateTime<Utc>, DateTime<Utc>)> {
        let (step, n) = match self {
            Range::Day => (TimeDelta::hours(1), 24),
            Range::Week => (TimeDelta::days(1), 7),
            Range::Month => (TimeDelta::days(1), 30),
        };
        let to = now.duration_trunc(step).unwrap_or(now) + step;
        (0..n).map(|i| (to - step * (n - i), to - step * (n - i - 1))).collect()
    }
}

/// What the rows are per: a user or a team queue.
fn group_of(by: &str, row: &UsageRow) -> String {
    let v = if by == "queue" { row.queue.as_deref() } else { row.user.as_deref() };
    v.unwrap_or("—").to_owned()
}

/// The holdings of `window` as `viewer` may see them (`user`'s, else theirs or, for an admin,
/// everyone's), for [`report`]s within it.
pub(super) async fn held(
    st: &AppState,
    viewer: &Viewer,
    window: (DateTime<Utc>, DateTime<Utc>),
    user: Option<&str>,
) -> Result<Held, ApiError> {
    Ok(Held::read(st, &viewer.user, user.map(str::to_owned), window).await?)
}

/// The API's report for `by` over `from`–`to` (within what `held` read): what `GET /api/v1/usage`
/// answers for the same window.
pub(super) async fn report(
    st: &AppState,
    held: &Held,
    by: &str,
    window: (DateTime<Utc>, DateTime<Utc>),
) -> Result<UsageReport, ApiError> {
    let by = UsageKey::parse_list(by).map_err(|e| ApiError::bad_request(format!("invalid query: {e}")))?;
    Ok(held.report(st, by, window).await?)
}

/// One row of the chart's table and CSV: a bucket, a group, a GPU model.
struct BucketRow {
    from: DateTime<Utc>,
    to: DateTime<Utc>,
    group: String,
    model: String,
    gpu_hours: f64,
    gpu_used_hours: f64,
}

/// A field of a CSV line, quoted where it must be.
fn csv_field(s: &str) -> String {
    if s.contains([',', '"', '\n', '\r']) { format!("\"{}\"", s.replace('"', "\"\"")) } else { s.to_owned() }
}

/// `GET /usage`: the page, or with `format=csv` the chart's rows.
pub async fn page(
    State(st): State<AppState>,
    viewer: Viewer,
    Query(q): Query<UsagePageQuery>,
    req: Request,
) -> Response {
    // the CSV too opens only as a page load (a download link is one): an app's script on this origin
    // (path mode) reads neither
    if let Some(r) = only_navigation(&req) {
        return r;
    }
    let csv = q.format.as_deref() == Some("csv");
    let range = match Range::parse(q.range.as_deref()) {
        Ok(r) => r,
        Err(e) => return api_error_page(e),
    };
    let by = match q.by.as_deref().unwrap_or("user") {
        b @ ("user" | "queue") => b,
        other => return super::page_error(StatusCode::BAD_REQUEST, &format!("invalid by {other:?}: user or queue")),
    };
    let user = q.user.as_deref().map(str::trim).filter(|u| !u.is_empty());
    let buckets = range.buckets(st.clock.now());
    let window = (buckets[0].0, buckets[buckets.len() - 1].1);
    // the window's figures per group, then each bucket's per group and GPU model, from one read of
    // the window's holdings
    let held = match held(&st, &viewer, window, user).await {
        Ok(h) => h,
        Err(e) => return api_error_page(e),
    };
    let summary = match report(&st, &held, by, window).await {
        Ok(r) => r,
        Err(e) => return api_error_page(e),
    };
    let row = |b: (DateTime<Utc>, DateTime<Utc>), r: &UsageRow| BucketRow {
        from: b.0,
        to: b.1,
        group: group_of(by, r),
        model: r.model.clone().unwrap_or_default(),
        gpu_hours: r.gpu_hours,
        gpu_used_hours: r.gpu_used_hours,
    };
    let mut rows = Vec::new();
    if range == Range::Day {
        // hours: the API's figures for each
        for b in &buckets {
            match report(&st, &held, &format!("{by},model"), *b).await {
                Ok(r) => rows.extend(r.rows.iter().map(|r| row(*b, r))),
                Err(e) => return api_error_page(e),
            }
        }
    } else {
        // UTC days: the API's figures by day, in one report
        match report(&st, &held, &format!("{by},model,day"), window).await {
            Ok(r) => rows.extend(r.rows.iter().filter_map(|r| {
                let day = r.day?.and_hms_opt(0, 0, 0)?.and_utc();
                Some(row((day, day + TimeDelta::days(1)), r))
            })),
            Err(e) => return api_error_page(e),
        }
        rows.sort_by(|a, b| (a.from, &a.group, &a.model).cmp(&(b.from, &b.group, &b.model)));
    }
    if csv {
        let mut out = format!("from,to,{by},model,gpu_hours,gpu_used_hours\n");
        for r in &rows {
            out.push_str(&format!(
                "{},{},{},{},{},{}\n",
                r.from.to_rfc3339(),
                r.to.to_rfc3339(),
                csv_field(&r.group),
                csv_field(&r.model),
                r.gpu_hours,
                r.gpu_used_hours
            ));
        }
        let name = format!("attachment; filename=\"gpuhub-usage-{}-by-{by}.csv\"", range.as_str());
        return (
            [(header::CONTENT_TYPE, "text/csv; charset=utf-8".to_owned()), (header::CONTENT_DISPOSITION, name)],
            out,
        )
            .into_response();
    }
    let body = render(&viewer, range, by, user, &buckets, &summary, &rows);
    layout(&st, &viewer, "Usage", body).into_response()
}

/// The link to this page with one choice changed.
fn link(range: Range, by: &str, user: Option<&str>, extra: &str) -> String {
    let mut url = format!("/usage?range={}&by={by}", range.as_str());
    if let Some(u) = user {
        url.push_str(&format!("&user={}", crate::access::encode(u)));
    }
    url.push_str(extra);
    url
}

fn render(
    viewer: &Viewer,
    range: Range,
    by: &str,
    user: Option<&str>,
    buckets: &[(DateTime<Utc>, DateTime<Utc>)],
    summary: &UsageReport,
    rows: &[BucketRow],
) -> Markup {
    // one stack per group and model, in the order first seen
    let mut stacks: Vec<(String, Vec<f64>)> = Vec::new();
    let mut used = vec![0.0; buckets.len()];
    for r in rows {
        let label = format!("{} · {}", r.group, r.model);
        let b = buckets.iter().position(|b| b.0 == r.from).unwrap_or(0);
        let i = match stacks.iter().position(|(l, _)| *l == label) {
            Some(i) => i,
            None => {
                stacks.push((label, vec![0.0; buckets.len()]));
                stacks.len() - 1
            }
        };
        stacks[i].1[b] += r.gpu_hours;
        used[b] += r.gpu_used_hours;
    }
    // work without GPUs (the model `none`) has no bar
    stacks.retain(|(_, v)| v.iter().any(|x| *x > 0.0));
    let step = if range == Range::Day { "hour" } else { "day" };
    let chart = BarChart {
        title: format!("GPU-hours held per {step}, by {by} and GPU model; the line is what was used"),
        unit: "GPU-hours".into(),
        buckets: buckets.to_vec(),
        stacks,
        overlay: Some(("used (measured utilisation)".into(), used)),
    };
    let (from, to) = (summary.from, summary.to);
    let fmt = |t: DateTime<Utc>| {
        if range == Range::Day { t.format("%Y-%m-%d %H:%M").to_string() } else { t.format("%Y-%m-%d").to_string() }
    };
    let who = match (user, viewer.user.is_admin()) {
        (Some(u), _) => format!("{u}'s usage"),
        (None, true) => "Everyone's usage".to_owned(),
        (None, false) => "Your usage".to_owned(),
    };
    html! {
        h1 { "Usage" }
        p { (who) " from " (from.format("%Y-%m-%d %H:%M UTC")) " to " (to.format("%Y-%m-%d %H:%M UTC"))
            ": GPU-hours held (a whole GPU for an hour is 1, half a GPU 0.5) and used (held × the utilisation \
             the monitor measured)." }
        nav.picker aria-label="window" {
            @for r in [Range::Day, Range::Week, Range::Month] {
                a.button href=(link(r, by, user, "")) aria-current=[(r == range).then_some("page")] {
                    (match r { Range::Day => "Last day", Range::Week => "Last week", Range::Month => "Last 30 days" })
                }
            }
            " "
            @for b in ["user", "queue"] {
                a.button href=(link(range, b, user, "")) aria-current=[(b == by).then_some("page")] { "per " (b) }
            }
            " "
            a.button href=(link(range, by, user, "&format=csv")) download { "Download CSV" }
        }
        @if viewer.user.is_admin() {
            form.filter method="get" action="/usage" {
                input type="hidden" name="range" value=(range.as_str());
                input type="hidden" name="by" value=(by);
                label { "User " input name="user" value=(user.unwrap_or_default()) placeholder="everyone"; }
                button type="submit" { "Show" }
            }
        }
        (charts::bar_chart(&chart))
        h2 { "In this window" }
        table.usage-summary data-from=(from.to_rfc3339()) data-to=(to.to_rfc3339()) data-by=(by) {
            thead { tr { th { (by) } th { "GPU-hours held" } th { "GPU-hours used" } th { "CPU-hours" }
                th { "Memory GiB-hours" } th { "Runs" } } }
            tbody {
                @for r in &summary.rows {
                    @let g = group_of(by, r);
                    tr data-group=(g) {
                        td { (g) }
                        td data-gpu-hours=(r.gpu_hours) { (format!("{:.2}", r.gpu_hours)) }
                        td data-gpu-used-hours=(r.gpu_used_hours) { (format!("{:.2}", r.gpu_used_hours)) }
                        td { (format!("{:.2}", r.cpu_hours)) }
                        td { (format!("{:.2}", r.memory_gib_hours)) }
                        td { (r.holdings) }
                    }
                }
                @if summary.rows.is_empty() { tr { td colspan="6" { "Nothing held in this window." } } }
            }
            tfoot { tr data-group="total" {
                th { "total" }
                td data-gpu-hours=(summary.total.gpu_hours) { (format!("{:.2}", summary.total.gpu_hours)) }
                td data-gpu-used-hours=(summary.total.gpu_used_hours) { (format!("{:.2}", summary.total.gpu_used_hours)) }
                td { (format!("{:.2}", summary.total.cpu_hours)) }
                td { (format!("{:.2}", summary.total.memory_gib_hours)) }
                td { (summary.total.holdings) }
            } }
        }
        details.numbers {
            summary { "The chart's numbers (" (rows.len()) " rows)" }
            table.usage-buckets {
                thead { tr { th { "From" } th { "To" } th { (by) } th { "GPU model" } th { "GPU-hours held" } th { "GPU-hours used" } } }
                tbody { @for r in rows {
                    tr data-from=(r.from.to_rfc3339()) data-group=(r.group) data-model=(r.model) {
                        td { (fmt(r.from)) } td { (fmt(r.to)) } td { (r.group) } td { (r.model) }
                        td data-gpu-hours=(r.gpu_hours) { (format!("{:.3}", r.gpu_hours)) }
                        td data-gpu-used-hours=(r.gpu_used_hours) { (format!("{:.3}", r.gpu_used_hours)) }
                    }
                } }
            }
        }
    }
}
