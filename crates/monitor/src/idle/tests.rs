use super::*;
use gpuhub_core::metrics::MemberMetrics;

fn t(min: i64) -> DateTime<Utc> {
    DateTime::from_timestamp(1_800_000_000 + min * 60, 0).unwrap()
}

fn member(id: &str, queue: &str, util: Option<f64>) -> MemberMetrics {
    MemberMetrics {
        workload_id: id.into(),
        workload: id.into(),
        owner: "alice".into(),
        queue: queue.into(),
        member: 0,
        node: None,
        cpu_cores: None,
        memory_used: 0,
        memory_limit: None,
        gpus: vec![format!("GPU-{id}")],
        gpu_utilization_pct: util,
        gpu_memory_used: None,
    }
}

fn rule() -> IdleRule {
    IdleRule {
        threshold_pct: 5.0,
        after: TimeDelta::minutes(60),
        grace: TimeDelta::minutes(30),
        jobs: false,
        exempt_queues: vec!["prod".into()],
        queue_after: HashMap::from([("slow".into(), TimeDelta::minutes(240))]),
    }
}

fn ws(last_used: Option<DateTime<Utc>>) -> Facts {
    Facts { kind: WorkloadKind::Workspace, last_used, kept_until: None }
}

fn snap(members: Vec<MemberMetrics>) -> MetricsSnapshot {
    MetricsSnapshot { at: None, members, gpus: vec![] }
}

#[test]
fn idle_is_warned_after_then_stopped_after_the_grace() {
    let mut tr = IdleTracker::default();
    let facts = HashMap::from([("idle".to_string(), ws(None)), ("busy".to_string(), ws(None))]);
    let s = snap(vec![member("idle", "default", Some(1.0)), member("busy", "default", Some(60.0))]);
    assert!(tr.observe(&rule(), &s, &facts, t(0)).is_empty());
    assert!(tr.observe(&rule(), &s, &facts, t(59)).is_empty());
    let a = tr.observe(&rule(), &s, &facts, t(60));
    assert_eq!(a, [IdleAction::Warn { workload_id: "idle".into(), since: t(0), stop_at: t(90) }]);
    assert!(tr.observe(&rule(), &s, &facts, t(89)).is_empty(), "warned once");
    let a = tr.observe(&rule(), &s, &facts, t(90));
    assert!(matches!(&a[..], [IdleAction::Stop { workload_id, since, detail }]
        if workload_id == "idle" && *since == t(0) && detail.contains("below 5 %") && detail.contains("1h")));
    assert!(tr.observe(&rule(), &s, &facts, t(91)).is_empty(), "stopped once");
    assert!(tr.state("busy").is_none());
}

#[test]
fn use_through_the_hub_or_a_busy_gpu_starts_over() {
    let mut tr = IdleTracker::default();
    let s = snap(vec![member("w", "default", Some(0.0))]);
    let mut facts = HashMap::from([("w".to_string(), ws(None))]);
    tr.observe(&rule(), &s, &facts, t(0));
    tr.observe(&rule(), &s, &facts, t(60));
    assert!(tr.state("w").unwrap().warned_at.is_some());
    // the owner opens a terminal at 70: the warning is withdrawn, idle counts from then
    facts.insert("w".into(), ws(Some(t(70))));
    assert!(tr.observe(&rule(), &s, &facts, t(75)).is_empty());
    let st = tr.state("w").unwrap();
    assert_eq!((st.since, st.warned_at), (t(70), None));
    assert!(matches!(tr.observe(&rule(), &s, &facts, t(130))[..], [IdleAction::Warn { .. }]));
    // a busy round clears it
    tr.observe(&rule(), &snap(vec![member("w", "default", Some(50.0))]), &facts, t(131));
    assert!(tr.state("w").is_none());
}

#[test]
fn exemptions_and_unknown_figures() {
    let mut tr = IdleTracker::default();
    let job = Facts { kind: WorkloadKind::Job, last_used: None, kept_until: None };
    let kept = Facts { kind: WorkloadKind::Workspace, last_used: None, kept_until: Some(t(500)) };
    let facts = HashMap::from([
        ("job".to_string(), job),
        ("prod".to_string(), ws(None)),
        ("nofig".to_string(), ws(None)),
        ("kept".to_string(), kept),
        ("slow".to_string(), ws(None)),
    ]);
    let s = snap(vec![
        member("job", "default", Some(0.0)),
        member("prod", "prod", Some(0.0)),
        member("nofig", "default", None),
        member("kept", "default", Some(0.0)),
        member("slow", "slow", Some(0.0)),
    ]);
    for m in [0, 100, 200] {
        assert!(tr.observe(&rule(), &s, &facts, t(m)).is_empty(), "minute {m}");
    }
    // the slow queue's own `after` (4h) and the keep's end both come
    let a = tr.observe(&rule(), &s, &facts, t(501));
    let warned: HashSet<_> = a
        .iter()
        .map(|x| if let IdleAction::Warn { workload_id, .. } = x { workload_id.as_str() } else { "" })
        .collect();
    assert_eq!(warned, HashSet::from(["slow", "kept"]));
    // jobs are judged when the rule says so
    let mut jobs = rule();
    jobs.jobs = true;
    let mut tr = IdleTracker::default();
    tr.observe(&jobs, &s, &facts, t(0));
    assert!(tr.state("job").is_some());
}
