use super::*;

fn t(h: i64) -> DateTime<Utc> {
    // 2026-01-01T00:00Z plus `h` hours
    DateTime::from_timestamp(1_767_225_600 + h * 3600, 0).unwrap()
}

fn holding(owner: &str, queue: &str, gpus: &[&str], gpu_milli: u64, since: i64, until: Option<i64>) -> Holding {
    Holding {
        workload_id: format!("{owner}-{since}"),
        workload: "w".into(),
        owner: owner.into(),
        queue: queue.into(),
        gpus: gpus.iter().map(|g| g.to_string()).collect(),
        gpu_milli,
        cpu_milli: 2000,
        memory: 4 << 30,
        since: t(since),
        until: until.map(t),
    }
}

fn model(g: &str) -> Option<String> {
    g.strip_prefix("h100-").map(|_| "H100".to_string()).or_else(|| g.strip_prefix("a100-").map(|_| "A100".into()))
}

#[test]
fn hours_are_exact_sums_clipped_to_the_window() {
    let hs = [
        holding("alice", "", &["h100-0"], 1000, 0, Some(3)),
        holding("alice", "vision", &["h100-1"], 500, 2, Some(4)),
        holding("bob", "", &["a100-0", "a100-1"], 2000, 1, None),
    ];
    let rows = aggregate(&hs, t(0), t(24), t(5), &[UsageKey::User], &model, &|_| None);
    assert_eq!(rows.len(), 2);
    assert_eq!(rows[0].user.as_deref(), Some("alice"));
    assert_eq!(rows[0].gpu_hours, 3.0 + 1.0);
    assert_eq!(rows[0].cpu_hours, 2.0 * 5.0);
    assert_eq!(rows[0].memory_gib_hours, 4.0 * 5.0);
    // bob's holding is still open: it counts up to now (hour 5)
    assert_eq!(rows[1].gpu_hours, 2.0 * 4.0);
    // a window cuts holdings at both ends
    let rows = aggregate(&hs, t(2), t(3), t(5), &[UsageKey::User], &model, &|_| None);
    assert_eq!((rows[0].gpu_hours, rows[1].gpu_hours), (1.0 + 0.5, 2.0));
    // a window before everything has no rows
    assert!(aggregate(&hs, t(-5), t(0), t(5), &[UsageKey::User], &model, &|_| None).is_empty());
}

#[test]
fn groups_by_queue_model_and_day() {
    let hs =
        [holding("alice", "", &["h100-0", "a100-0"], 2000, 20, Some(26)), holding("bob", "vision", &[], 0, 0, Some(1))];
    let rows =
        aggregate(&hs, t(0), t(48), t(48), &[UsageKey::Queue, UsageKey::Model, UsageKey::Day], &model, &|_| None);
    let got: Vec<_> = rows
        .iter()
        .map(|r| (r.queue.clone().unwrap(), r.model.clone().unwrap(), r.day.unwrap().to_string(), r.gpu_hours))
        .collect();
    assert_eq!(
        got,
        [
            ("default".to_string(), "A100".to_string(), "2026-01-01".to_string(), 4.0),
            ("default".into(), "A100".into(), "2026-01-02".into(), 2.0),
            ("default".into(), "H100".into(), "2026-01-01".into(), 4.0),
            ("default".into(), "H100".into(), "2026-01-02".into(), 2.0),
            ("vision".into(), "none".into(), "2026-01-01".into(), 0.0),
        ]
    );
    // CPU time is charged once per holding, not once per model
    let cpu: f64 = rows.iter().filter(|r| r.queue.as_deref() == Some("default")).map(|r| r.cpu_hours).sum();
    assert_eq!(cpu, 2.0 * 6.0);
    let all = total(&rows);
    assert_eq!(all.gpu_hours, 12.0);
    assert_eq!(all.cpu_hours, 2.0 * 7.0);
}

#[test]
fn a_gpu_no_inventory_named_is_unknown() {
    let hs = [holding("alice", "", &["gone-0"], 1000, 0, Some(1))];
    let rows = aggregate(&hs, t(0), t(2), t(2), &[UsageKey::Model], &model, &|_| None);
    assert_eq!((rows[0].model.as_deref(), rows[0].gpu_hours), (Some("unknown"), 1.0));
}

#[test]
fn used_hours_come_from_what_was_measured() {
    let hs = [
        holding("alice", "", &["h100-0", "h100-1"], 2000, 0, Some(4)),
        holding("bob", "", &["h100-2"], 500, 0, Some(4)),
    ];
    let measured = |id: &str| match id {
        "alice-0" => {
            Some(Measured { gpu_util_pct: Some(25.0), cpu_cores: Some(1.5), memory_bytes: Some((2u64 << 30) as f64) })
        }
        _ => None,
    };
    let rows = aggregate(&hs, t(0), t(24), t(24), &[UsageKey::User], &model, &measured);
    // alice held 2 GPUs for 4 h at 25 %: 2 GPU-hours used of 8; 1.5 cores and 2 GiB for 4 h
    assert_eq!((rows[0].gpu_hours, rows[0].gpu_used_hours), (8.0, 2.0));
    assert_eq!((rows[0].cpu_used_hours, rows[0].memory_used_gib_hours), (6.0, 8.0));
    // nothing measured of bob's: held, not shown as used
    assert_eq!((rows[1].gpu_hours, rows[1].gpu_used_hours), (2.0, 0.0));
    assert_eq!(total(&rows).gpu_used_hours, 2.0);
}

#[test]
fn keys_parse() {
    assert_eq!(UsageKey::parse_list("day, user,user").unwrap(), [UsageKey::User, UsageKey::Day]);
    assert!(UsageKey::parse_list("").is_err());
    let e = UsageKey::parse_list("user,team").unwrap_err().to_string();
    assert!(e.contains("\"team\""), "{e}");
    let (from, to) = this_month(t(24 * 40 + 5));
    assert_eq!((from, to), (t(24 * 31), t(24 * 40 + 5)));
}
