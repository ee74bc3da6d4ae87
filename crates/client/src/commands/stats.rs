//! `gpuhub stats NAME`: a workload's history of CPU, memory and GPU use, as a table or JSON; and
//! `gpuhub top`: the monitor's latest round, a table of GPUs and one of running members.

use super::{Out, print_json};
use crate::ClientError;
use crate::cli::stats::{StatsArgs, TopArgs};
use crate::http::{Api, decode};
use crate::table::{Table, cores, size};
use chrono::{DateTime, SecondsFormat, Utc};
use gpuhub_core::Bytes;
use gpuhub_core::metrics::{MetricsSnapshot, WorkloadHistory};

/// `gpuhub stats NAME [--from WHEN] [--to WHEN] [--step SECS] [--owner USER]`.
pub(crate) async fn stats(api: &Api, json: bool, args: StatsArgs, out: Out<'_>) -> Result<(), ClientError> {
    let step = args.step.map(|s| s.to_string());
    let mut query: Vec<(&str, &str)> = Vec::new();
    for (k, v) in [("from", &args.from), ("to", &args.to), ("step", &step), ("owner", &args.owner)] {
        if let Some(v) = v {
            query.push((k, v.as_str()));
        }
    }
    let segments = ["workloads", args.name.as_str(), "metrics"];
    let v = api.get(&segments, &query).await?;
    if json {
        return print_json(out, &v);
    }
    let history: WorkloadHistory = decode(&v, api.url(&segments, &query).as_str())?;
    write!(out, "{}", stats_text(&history))?;
    Ok(())
}

/// `gpuhub top [--watch SECS]`.
pub(crate) async fn top(api: &Api, json: bool, args: TopArgs, out: Out<'_>) -> Result<(), ClientError> {
    loop {
        let v = api.get(&["metrics", "live"], &[]).await?;
        if json {
            print_json(out, &v)?;
        } else {
            let snapshot: MetricsSnapshot = decode(&v, api.url(&["metrics", "live"], &[]).as_str())?;
            write!(out, "{}", top_text(&snapshot))?;
        }
        let Some(secs) = args.watch else { return Ok(()) };
        out.flush()?;
        tokio::time::sleep(std::time::Duration::from_secs(secs)).await;
        writeln!(out)?;
    }
}

/// A time as the tables show it: UTC, to the second.
fn time(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(SecondsFormat::Secs, true)
}

/// An optional cell: `-` when absent.
fn or_dash<T>(v: Option<T>, f: impl FnOnce(T) -> String) -> String {
    v.map_or_else(|| "-".to_owned(), f)
}

/// A workload's history: a title line, then one line per member and step.
pub(crate) fn stats_text(h: &WorkloadHistory) -> String {
    let mut s = format!("{}/{} from {} to {}, every {}s\n", h.owner, h.workload, time(h.from), time(h.to), h.step_secs);
    if h.points.is_empty() {
        s.push_str("no samples in this window\n");
        return s;
    }
    let mut t = Table::new(&["MEMBER", "TIME", "CPU", "MEMORY", "LIMIT", "GPU%", "GPU-MEM"]);
    for p in &h.points {
        t.row(vec![
            p.member.to_string(),
            time(p.at),
            or_dash(p.cpu_cores, cores),
            or_dash(p.memory_used, |b| size(Bytes(b))),
            or_dash(p.memory_limit, |b| size(Bytes(b))),
            or_dash(p.gpu_utilization_pct, |u| format!("{u:.1}")),
            or_dash(p.gpu_memory_used, |b| size(Bytes(b))),
        ]);
    }
    s.push_str(&t.render(""));
    s
}

/// The latest round: its time, a table of GPUs (one line each) and one of members (one line each).
pub(crate) fn top_text(snap: &MetricsSnapshot) -> String {
    let Some(at) = snap.at else { return "no measurements yet: the monitor has not sampled\n".to_owned() };
    let mut s = format!("at {}\n", time(at));
    if snap.gpus.is_empty() {
        s.push_str("no GPU figures\n");
    } else {
        let mut t = Table::new(&["NODE", "GPU", "MODEL", "UTIL", "MEMORY", "POWER", "TEMP", "HOLDERS"]);
        for g in &snap.gpus {
            t.row(vec![
                g.node.clone(),
                g.index.to_string(),
                g.model.clone(),
                format!("{:.0}%", g.utilization_pct),
                format!("{}/{}", size(Bytes(g.memory_used)), size(Bytes(g.memory_total))),
                or_dash(g.power_watts, |w| format!("{w:.0}W")),
                or_dash(g.temperature_c, |c| format!("{c:.0}C")),
                g.holders.join(", "),
            ]);
        }
        s.push_str(&t.render(""));
    }
    s.push('\n');
    if snap.members.is_empty() {
        s.push_str("no running members measured\n");
        return s;
    }
    let mut t = Table::new(&["WORKLOAD", "OWNER", "MEMBER", "NODE", "CPU", "MEMORY", "GPU%", "GPU-MEM"]);
    for m in &snap.members {
        let memory = match m.memory_limit {
            Some(l) => format!("{}/{}", size(Bytes(m.memory_used)), size(Bytes(l))),
            None => size(Bytes(m.memory_used)),
        };
        t.row(vec![
            m.workload.clone(),
            m.owner.clone(),
            m.member.to_string(),
            m.node.clone().unwrap_or_else(|| "-".into()),
            or_dash(m.cpu_cores, |c| format!("{c:.2}")),
            memory,
            or_dash(m.gpu_utilization_pct, |u| format!("{u:.1}")),
            or_dash(m.gpu_memory_used, |b| size(Bytes(b))),
        ]);
    }
    s.push_str(&t.render(""));
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;
    use gpuhub_core::metrics::{GpuMetrics, MemberMetrics, MemberPoint};
    use gpuhub_core::quantity::GIB;

    fn t(s: i64) -> DateTime<Utc> {
        Utc.with_ymd_and_hms(2026, 11, 1, 10, 0, 0).unwrap() + chrono::Duration::seconds(s)
    }

    #[test]
    fn stats_rendering() {
        let point = |member, s, cpu| MemberPoint {
            member,
            at: t(s),
            cpu_cores: cpu,
            memory_used: Some(3 * GIB / 2),
            memory_limit: Some(2 * GIB),
            gpu_utilization_pct: (member == 0).then_some(47.25),
            gpu_memory_used: (member == 0).then_some(8 * GIB),
        };
        let mut h = WorkloadHistory {
            workload: "train".into(),
            owner: "alice".into(),
            from: t(0),
            to: t(120),
            step_secs: 60,
            points: vec![point(0, 0, None), point(0, 60, Some(1.5)), point(1, 0, Some(0.25))],
        };
        assert_eq!(
            stats_text(&h),
            "alice/train from 2026-11-01T10:00:00Z to 2026-11-01T10:02:00Z, every 60s\n\
             MEMBER  TIME                  CPU   MEMORY  LIMIT  GPU%  GPU-MEM\n\
             0       2026-11-01T10:00:00Z  -     1.5GiB  2GiB   47.2  8GiB\n\
             0       2026-11-01T10:01:00Z  1.5   1.5GiB  2GiB   47.2  8GiB\n\
             1       2026-11-01T10:00:00Z  0.25  1.5GiB  2GiB   -     -\n"
        );
        h.points.clear();
        assert!(stats_text(&h).ends_with("every 60s\nno samples in this window\n"));
    }

    #[test]
    fn top_rendering() {
        assert_eq!(top_text(&MetricsSnapshot::default()), "no measurements yet: the monitor has not sampled\n");
        let gpu = |index: u32, util: f64, holders: Vec<String>| GpuMetrics {
            node: "node-1".into(),
            uuid: format!("GPU-{index}"),
            index,
            model: "H200".into(),
            utilization_pct: util,
            memory_used: 10 * GIB,
            memory_total: 141 * GIB,
            power_watts: (index == 0).then_some(251.4),
            temperature_c: (index == 0).then_some(61.0),
            holders,
        };
        let member = MemberMetrics {
            workload_id: "id".into(),
            workload: "train".into(),
            owner: "alice".into(),
            queue: "default".into(),
            member: 0,
            node: Some("node-1".into()),
            cpu_cores: Some(1.5),
            memory_used: GIB,
            memory_limit: Some(2 * GIB),
            gpus: vec!["GPU-0".into()],
            gpu_utilization_pct: Some(50.0),
            gpu_memory_used: Some(8 * GIB),
        };
        let other = MemberMetrics {
            workload: "cpu-job".into(),
            owner: "bob".into(),
            node: None,
            cpu_cores: None,
            memory_limit: None,
            gpus: vec![],
            gpu_utilization_pct: None,
            gpu_memory_used: None,
            ..member.clone()
        };
        let snap = MetricsSnapshot {
            at: Some(t(20)),
            members: vec![member, other],
            gpus: vec![gpu(0, 50.0, vec!["alice/train".into()]), gpu(1, 0.0, vec![])],
        };
        assert_eq!(
            top_text(&snap),
            "at 2026-11-01T10:00:20Z\n\
             NODE    GPU  MODEL  UTIL  MEMORY        POWER  TEMP  HOLDERS\n\
             node-1  0    H200   50%   10GiB/141GiB  251W   61C   alice/train\n\
             node-1  1    H200   0%    10GiB/141GiB  -      -\n\
             \n\
             WORKLOAD  OWNER  MEMBER  NODE    CPU   MEMORY     GPU%  GPU-MEM\n\
             train     alice  0       node-1  1.50  1GiB/2GiB  50.0  8GiB\n\
             cpu-job   bob    0       -       -     1GiB       -     -\n"
        );
        let empty = MetricsSnapshot { at: Some(t(0)), ..Default::default() };
        assert_eq!(top_text(&empty), "at 2026-11-01T10:00:00Z\nno GPU figures\n\nno running members measured\n");
    }
}
