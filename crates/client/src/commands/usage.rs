//! `gpuhub usage` (GPU-, CPU- and memory-hours held, as a table, CSV or JSON), and the idle-GPU
//! commands `gpuhub keep` and `gpuhub idle`.

use super::{Out, print_json};
use crate::ClientError;
use crate::cli::{KeepArgs, UsageArgs};
use crate::http::{Api, decode};
use crate::table::{Table, age};
use chrono::{DateTime, Utc};
use gpuhub_api::{IdleReportRow, KeepRequest, WorkloadView};
use gpuhub_core::usage::{UsageKey, UsageReport, UsageRow};
use reqwest::Method;
use serde_json::Value;

/// `gpuhub keep NAME --hours N [--owner USER]`.
pub(crate) async fn keep(api: &Api, json: bool, args: KeepArgs, out: Out<'_>) -> Result<(), ClientError> {
    let query: Vec<(&str, &str)> = args.owner.as_deref().map(|o| vec![("owner", o)]).unwrap_or_default();
    let body = serde_json::to_value(KeepRequest { hours: args.hours }).unwrap_or(Value::Null);
    let path = ["workloads", args.name.as_str(), "keep"];
    let v = api.call(Method::POST, &path, &query, Some(&body)).await?.unwrap_or(Value::Null);
    if json {
        return print_json(out, &v);
    }
    let w: WorkloadView = decode(&v, api.url(&path, &query).as_str())?;
    match w.idle.and_then(|i| i.kept_until) {
        Some(until) => writeln!(out, "{} is kept until {} despite idle GPUs", w.name, until.to_rfc3339())?,
        None if args.hours == 0 => writeln!(out, "{} is no longer kept", w.name)?,
        None => writeln!(out, "{} is kept for {} h despite idle GPUs", w.name, args.hours)?,
    }
    Ok(())
}

/// `gpuhub idle`: the admin's idle-GPU report.
pub(crate) async fn idle(api: &Api, json: bool, now: DateTime<Utc>, out: Out<'_>) -> Result<(), ClientError> {
    let v = api.get(&["idle"], &[]).await?;
    if json {
        return print_json(out, &v);
    }
    let rows: Vec<IdleReportRow> = decode(&v, api.url(&["idle"], &[]).as_str())?;
    write!(out, "{}", idle_text(&rows, now))?;
    Ok(())
}

/// One line per idle workload: `WORKLOAD QUEUE GPUS IDLE FOR STOPS IN`.
pub(crate) fn idle_text(rows: &[IdleReportRow], now: DateTime<Utc>) -> String {
    if rows.is_empty() {
        return "no idle GPUs\n".into();
    }
    let mut t = Table::new(&["WORKLOAD", "QUEUE", "GPUS", "IDLE FOR", "STOPS IN"]);
    for r in rows {
        let stops = match (r.idle.kept_until, r.idle.stop_at) {
            (Some(k), _) => format!("kept {}", age(now, k)),
            (None, Some(s)) => age(now, s),
            (None, None) => "-".into(),
        };
        t.row(vec![r.workload.clone(), r.queue.clone(), r.gpus.join(","), age(r.idle.since, now), stops]);
    }
    t.render("")
}

/// `gpuhub usage [--by user,queue] [--from DATE] [--to DATE] [--user NAME] [--csv]`.
pub(crate) async fn usage(api: &Api, json: bool, args: UsageArgs, out: Out<'_>) -> Result<(), ClientError> {
    let mut query: Vec<(&str, &str)> = vec![("by", args.by.as_str())];
    for (k, v) in [("from", &args.from), ("to", &args.to), ("user", &args.user)] {
        if let Some(v) = v {
            query.push((k, v.as_str()));
        }
    }
    let v = api.get(&["usage"], &query).await?;
    if json {
        return print_json(out, &v);
    }
    let report: UsageReport = decode(&v, api.url(&["usage"], &query).as_str())?;
    let text = if args.csv { usage_csv(&report) } else { usage_text(&report) };
    write!(out, "{text}")?;
    Ok(())
}

fn key_title(k: UsageKey) -> &'static str {
    match k {
        UsageKey::User => "user",
        UsageKey::Queue => "queue",
        UsageKey::Model => "model",
        UsageKey::Day => "day",
    }
}

fn key_cell(r: &UsageRow, k: UsageKey) -> String {
    match k {
        UsageKey::User => r.user.clone().unwrap_or_default(),
        UsageKey::Queue => r.queue.clone().unwrap_or_default(),
        UsageKey::Model => r.model.clone().unwrap_or_default(),
        UsageKey::Day => r.day.map(|d| d.to_string()).unwrap_or_default(),
    }
}

/// The report as a table with a total line: hours with two decimals.
pub(crate) fn usage_text(r: &UsageReport) -> String {
    let mut header: Vec<String> = r.by.iter().map(|k| key_title(*k).to_uppercase()).collect();
    header.extend(["GPU-HOURS", "USED", "CPU-HOURS", "USED", "MEMORY GIB-HOURS", "USED"].map(String::from));
    let mut t = Table::new(&header);
    let cells = |row: &UsageRow, keys: Vec<String>| {
        let mut c = keys;
        c.extend(
            [
                row.gpu_hours,
                row.gpu_used_hours,
                row.cpu_hours,
                row.cpu_used_hours,
                row.memory_gib_hours,
                row.memory_used_gib_hours,
            ]
            .map(|h| format!("{h:.2}")),
        );
        c
    };
    for row in &r.rows {
        t.row(cells(row, r.by.iter().map(|k| key_cell(row, *k)).collect()));
    }
    let mut keys = vec![String::new(); r.by.len()];
    if let Some(first) = keys.first_mut() {
        *first = "total".into();
    }
    t.row(cells(&r.total, keys));
    format!("usage from {} to {}\n{}", r.from.to_rfc3339(), r.to.to_rfc3339(), t.render(""))
}

/// The report as CSV (a header line, one line per row, full precision, no total).
pub(crate) fn usage_csv(r: &UsageReport) -> String {
    let mut out: Vec<String> = Vec::new();
    let mut header: Vec<&str> = r.by.iter().map(|k| key_title(*k)).collect();
    header.extend([
        "gpu_hours",
        "gpu_used_hours",
        "cpu_hours",
        "cpu_used_hours",
        "memory_gib_hours",
        "memory_used_gib_hours",
    ]);
    out.push(header.join(","));
    for row in &r.rows {
        let mut cells: Vec<String> = r.by.iter().map(|k| csv_cell(&key_cell(row, *k))).collect();
        cells.extend(
            [
                row.gpu_hours,
                row.gpu_used_hours,
                row.cpu_hours,
                row.cpu_used_hours,
                row.memory_gib_hours,
                row.memory_used_gib_hours,
            ]
            .map(|h| h.to_string()),
        );
        out.push(cells.join(","));
    }
    out.join("\n") + "\n"
}

/// A CSV field, quoted when it needs to be.
fn csv_cell(s: &str) -> String {
    if s.contains([',', '"', '\n']) { format!("\"{}\"", s.replace('"', "\"\"")) } else { s.to_owned() }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::{DateTime, Utc};

    fn report() -> UsageReport {
        let row = |user: &str, gpu: f64| UsageRow {
            user: Some(user.into()),
            queue: None,
            model: None,
            day: None,
            gpu_hours: gpu,
            cpu_hours: 2.0 * gpu,
            memory_gib_hours: 0.5,
            gpu_used_hours: gpu / 2.0,
            cpu_used_hours: 0.0,
            memory_used_gib_hours: 0.0,
            holdings: 1,
        };
        let rows = vec![row("alice", 3.25), row("bob,x", 1.0)];
        let total = gpuhub_core::usage::total(&rows);
        let t = |s: i64| DateTime::<Utc>::from_timestamp(s, 0).unwrap();
        UsageReport { from: t(0), to: t(86_400), by: vec![UsageKey::User], rows, total }
    }

    #[test]
    fn table_and_csv() {
        let text = usage_text(&report());
        assert!(text.contains("USER   GPU-HOURS  USED  CPU-HOURS  USED  MEMORY GIB-HOURS  USED"), "{text}");
        assert!(text.contains("alice  3.25       1.62  6.50       0.00  0.50              0.00"), "{text}");
        assert!(text.contains("total  4.25       2.12  8.50       0.00  1.00              0.00"), "{text}");
        assert_eq!(
            usage_csv(&report()),
            "user,gpu_hours,gpu_used_hours,cpu_hours,cpu_used_hours,memory_gib_hours,memory_used_gib_hours\n\
             alice,3.25,1.625,6.5,0,0.5,0\n\"bob,x\",1,0.5,2,0,0.5,0\n"
        );
    }
}
