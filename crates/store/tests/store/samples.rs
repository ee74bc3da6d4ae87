//! The history of samples: raw rounds written and read back exactly, means over steps, thinning out by
//! age into 1-minute and 1-hour means (whole buckets, once, bounded per call), expiry.

use chrono::{DateTime, TimeZone, Utc};
use gpuhub_core::metrics::{GpuMetrics, GpuPoint, MemberMetrics, MemberPoint, MetricsSnapshot};
use gpuhub_store::{Downsampled, Store};
use std::time::Duration;

both!(rounds_are_written_and_read_back, history_is_thinned_out_by_age, many_members_in_one_round);

/// Midnight, so that minutes and hours start at round offsets.
fn base() -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2025, 3, 14, 0, 0, 0).unwrap()
}

fn secs(s: i64) -> DateTime<Utc> {
    base() + chrono::Duration::seconds(s)
}

const MIN: Duration = Duration::from_secs(60);
const HOUR: Duration = Duration::from_secs(3600);
const YEAR: Duration = Duration::from_secs(365 * 86_400);

fn member(workload: &str, index: u32) -> MemberMetrics {
    MemberMetrics {
        workload_id: workload.into(),
        workload: format!("name-{workload}"),
        owner: "alice".into(),
        queue: "default".into(),
        member: index,
        node: None,
        cpu_cores: None,
        memory_used: 0,
        memory_limit: None,
        gpus: Vec::new(),
        gpu_utilization_pct: None,
        gpu_memory_used: None,
    }
}

fn gpu(node: &str, uuid: &str) -> GpuMetrics {
    GpuMetrics {
        node: node.into(),
        uuid: uuid.into(),
        index: 0,
        model: "H100".into(),
        utilization_pct: 0.0,
        memory_used: 0,
        memory_total: 80 << 30,
        power_watts: None,
        temperature_c: None,
        holders: Vec::new(),
    }
}

/// Round `k`, taken every 20 s from midnight: workload `w1` with a member whose figures go round in
/// threes (so each minute's mean is exact) and a member that reports memory only; `w2`; two GPUs on two
/// nodes.
fn round(k: i64) -> MetricsSnapshot {
    let third = (k % 3) as f64;
    let mut m0 = member("w1", 0);
    m0.cpu_cores = Some(third);
    m0.memory_used = 3000 * k as u64;
    m0.memory_limit = Some(1 << 30);
    m0.gpu_utilization_pct = Some(10.0 * third);
    let mut m1 = member("w1", 1);
    m1.memory_used = 7;
    let mut other = member("w2", 0);
    other.memory_used = 1;
    let mut g0 = gpu("node-a", "GPU-0");
    g0.utilization_pct = 10.0 * third;
    g0.memory_used = 3000 * k as u64;
    g0.power_watts = Some(300.5);
    g0.temperature_c = Some(65.0);
    let g1 = gpu("node-b", "GPU-1");
    MetricsSnapshot { at: Some(secs(20 * k)), members: vec![m0, m1, other], gpus: vec![g0, g1] }
}

async fn record(s: &Store, rounds: std::ops::Range<i64>) {
    for k in rounds {
        s.record_metrics(&round(k)).await.unwrap();
    }
}

fn of(points: &[MemberPoint], member: u32) -> Vec<&MemberPoint> {
    points.iter().filter(|p| p.member == member).collect()
}

async fn rounds_are_written_and_read_back(s: Store) {
    // before any round, and a snapshot of no round, there is nothing
    assert!(s.member_series("w1", base(), secs(3600), MIN).await.unwrap().is_empty());
    s.record_metrics(&MetricsSnapshot::default()).await.unwrap();
    assert!(s.gpu_series(base(), secs(3600), MIN, None).await.unwrap().is_empty());

    record(&s, 0..6).await;
    // the same instant again is not a second sample: the first one stands
    let mut again = round(1);
    again.members[0].memory_used = 999_999;
    s.record_metrics(&again).await.unwrap();

    // at the sampling step, every sample as it was written, in the units of the API
    let raw = s.member_series("w1", base(), secs(120), Duration::from_secs(20)).await.unwrap();
    let m0 = of(&raw, 0);
    assert_eq!(m0.len(), 6, "{raw:?}");
    assert_eq!(
        *m0[1],
        MemberPoint {
            member: 0,
            at: secs(20),
            cpu_cores: Some(1.0),
            memory_used: Some(3000),
            memory_limit: Some(1 << 30),
            gpu_utilization_pct: Some(10.0),
            gpu_memory_used: None,
        }
    );
    let m1 = of(&raw, 1);
    assert_eq!((m1.len(), m1[0].memory_used, m1[0].cpu_cores, m1[0].gpu_utilization_pct), (6, Some(7), None, None));
    assert!(raw.iter().all(|p| p.member < 2), "another workload's members are not in it");
    // points come by member, then time
    let order: Vec<_> = raw.iter().map(|p| (p.member, p.at)).collect();
    let mut sorted = order.clone();
    sorted.sort();
    assert_eq!(order, sorted);

    // a coarser step averages: each minute's three samples
    let minutes = s.member_series("w1", base(), secs(120), MIN).await.unwrap();
    let m0 = of(&minutes, 0);
    assert_eq!(m0.len(), 2);
    assert_eq!((m0[0].at, m0[0].cpu_cores, m0[0].memory_used), (base(), Some(1.0), Some(3000)));
    assert_eq!((m0[1].at, m0[1].gpu_utilization_pct, m0[1].memory_used), (secs(60), Some(10.0), Some(12_000)));
    // the window is [from, to) and steps start at `from`
    let part = s.member_series("w1", secs(20), secs(60), MIN).await.unwrap();
    let m0 = of(&part, 0);
    assert_eq!((m0.len(), m0[0].at, m0[0].memory_used), (1, secs(20), Some(4500)));

    // GPUs, all or one node's
    let gpus = s.gpu_series(base(), secs(120), MIN, None).await.unwrap();
    assert_eq!(gpus.len(), 4, "{gpus:?}");
    assert_eq!(
        gpus[0],
        GpuPoint {
            node: "node-a".into(),
            uuid: "GPU-0".into(),
            at: base(),
            utilization_pct: Some(10.0),
            memory_used: Some(3000),
            memory_total: Some(80 << 30),
            power_watts: Some(300.5),
            temperature_c: Some(65.0),
        }
    );
    assert_eq!((gpus[2].uuid.as_str(), gpus[2].power_watts, gpus[2].utilization_pct), ("GPU-1", None, Some(0.0)));
    let b = s.gpu_series(base(), secs(120), MIN, Some("node-b")).await.unwrap();
    assert!(b.len() == 2 && b.iter().all(|p| p.uuid == "GPU-1"), "{b:?}");
    assert!(s.gpu_series(base(), secs(120), MIN, Some("node-c")).await.unwrap().is_empty());
}

async fn history_is_thinned_out_by_age(s: Store) {
    // three hours of rounds every 20 s
    record(&s, 0..540).await;
    let end = secs(3 * 3600);
    let by_minute = s.member_series("w1", base(), end, MIN).await.unwrap();
    let by_hour = s.member_series("w1", base(), end, HOUR).await.unwrap();
    let gpus_by_minute = s.gpu_series(base(), end, MIN, None).await.unwrap();
    assert_eq!((by_minute.len(), by_hour.len(), gpus_by_minute.len()), (2 * 180, 2 * 3, 2 * 180));

    // raw samples older than 150 min (from 3 h 45 s: before 0:30:45) become 1-minute means, whole
    // minutes only: the samples of 0:30 stay raw
    let now = secs(3 * 3600 + 45);
    let done = s.downsample(now, 150 * MIN, YEAR, YEAR).await.unwrap();
    let buckets = 30 * 5; // 30 minutes × (3 members + 2 GPUs)
    assert_eq!(done, Downsampled { minute_buckets: buckets, hour_buckets: 0, deleted: 3 * buckets, more: false });
    // nothing is due twice
    assert_eq!(s.downsample(now, 150 * MIN, YEAR, YEAR).await.unwrap(), Downsampled::default());
    // read at 1 minute, the means are the same numbers; at 20 s, the old part has one point a minute
    assert_eq!(s.member_series("w1", base(), end, MIN).await.unwrap(), by_minute);
    assert_eq!(s.gpu_series(base(), end, MIN, None).await.unwrap(), gpus_by_minute);
    let fine = s.member_series("w1", base(), end, Duration::from_secs(20)).await.unwrap();
    assert_eq!(of(&fine, 0).len(), 30 + 150 * 3);
    assert_eq!(of(&fine, 0)[30].at, secs(1800), "raw from 0:30 on");

    // a backlog is worked off a bounded span per call: raw older than 10 min (before 2:50) is due,
    // 2 h 20 min of it, one hour per call
    let mut calls = Vec::new();
    loop {
        let done = s.downsample(end, 10 * MIN, YEAR, YEAR).await.unwrap();
        calls.push(done.minute_buckets / 5);
        if !done.more {
            break;
        }
    }
    assert_eq!(calls, [60, 60, 20]);
    assert_eq!(s.member_series("w1", base(), end, MIN).await.unwrap(), by_minute);

    // 1-minute means older than 90 min (before 1:30) become 1-hour means, whole hours only (0:00–1:00)
    let done = s.downsample(end, 10 * MIN, 90 * MIN, YEAR).await.unwrap();
    assert_eq!(done, Downsampled { minute_buckets: 0, hour_buckets: 5, deleted: 60 * 5, more: false });
    assert_eq!(s.member_series("w1", base(), end, HOUR).await.unwrap(), by_hour);
    let mixed = s.member_series("w1", base(), end, MIN).await.unwrap();
    let m0 = of(&mixed, 0);
    assert_eq!(m0.len(), 1 + 120, "the first hour is one mean, the rest minutes");
    assert_eq!(*m0[0], by_hour[0]);
    assert_eq!(m0[1..].iter().map(|p| (*p).clone()).collect::<Vec<_>>(), by_minute[60..180]);

    // a step over two tiers weighs each raw sample alike: 2:00–3:00 is 50 means of three samples and 30
    // raw samples, and its mean is that of the 180 samples
    assert_eq!(s.member_series("w1", base(), end, HOUR).await.unwrap()[2], by_hour[2]);

    // an hour is averaged only once no raw sample of it is left: with every 1-minute mean due, 1:00–2:00
    // is averaged but 2:00–3:00 still has raw samples (2:50 on)
    let done = s.downsample(end, 10 * MIN, Duration::ZERO, YEAR).await.unwrap();
    assert_eq!((done.hour_buckets, done.more), (5, false));
    let raw_tail = s.member_series("w1", secs(2 * 3600), end, Duration::from_secs(20)).await.unwrap();
    assert_eq!(of(&raw_tail, 0).len(), 50 + 30, "2:00–2:50 by minute, 2:50–3:00 raw");
    assert_eq!(s.member_series("w1", base(), end, HOUR).await.unwrap(), by_hour);

    // 1-hour means older than an hour (starting before 2:00) are deleted
    let done = s.downsample(end, 10 * MIN, Duration::ZERO, HOUR).await.unwrap();
    assert_eq!(done, Downsampled { minute_buckets: 0, hour_buckets: 0, deleted: 2 * 5, more: false });
    let left = s.member_series("w1", base(), end, HOUR).await.unwrap();
    assert_eq!(left, by_hour[2..3].iter().chain(&by_hour[5..6]).cloned().collect::<Vec<_>>());
    assert_eq!(s.gpu_series(base(), secs(2 * 3600), HOUR, None).await.unwrap(), Vec::new());

    // at last everything ages out, and a series seen again starts afresh
    loop {
        if !s.downsample(secs(10 * 366 * 86_400), 10 * MIN, Duration::ZERO, HOUR).await.unwrap().more {
            break;
        }
    }
    assert!(s.member_series("w1", base(), end, MIN).await.unwrap().is_empty());
    assert!(s.gpu_series(base(), end, MIN, None).await.unwrap().is_empty());
    record(&s, 540..543).await;
    assert_eq!(s.member_series("w1", end, secs(3 * 3600 + 60), MIN).await.unwrap().len(), 2);
}

async fn many_members_in_one_round(s: Store) {
    // more members than one insert statement takes, and GPUs sharing a uuid on two nodes
    let members: Vec<MemberMetrics> = (0..1200)
        .map(|i| {
            let mut m = member(&format!("w{}", i / 2), i % 2);
            m.memory_used = u64::from(i);
            m
        })
        .collect();
    let gpus = vec![gpu("node-a", "GPU-x"), gpu("node-b", "GPU-x")];
    s.record_metrics(&MetricsSnapshot { at: Some(base()), members: members.clone(), gpus: gpus.clone() })
        .await
        .unwrap();
    s.record_metrics(&MetricsSnapshot { at: Some(secs(10)), members, gpus }).await.unwrap();
    let p = s.member_series("w599", base(), secs(60), Duration::from_secs(10)).await.unwrap();
    let got: Vec<_> = p.iter().map(|p| (p.member, p.memory_used)).collect();
    assert_eq!(got, [(0, Some(1198)), (0, Some(1198)), (1, Some(1199)), (1, Some(1199))]);
    let g = s.gpu_series(base(), secs(60), MIN, None).await.unwrap();
    let nodes: Vec<_> = g.iter().map(|p| (p.node.as_str(), p.uuid.as_str())).collect();
    assert_eq!(nodes, [("node-a", "GPU-x"), ("node-b", "GPU-x")]);
}
