//! Scenario tests of the scheduling pass.

use gpuhub_sched::*;

fn node(name: &str, gpus: u32) -> Node {
    Node {
        name: name.into(),
        cpu_milli: 32_000,
        memory: 256 << 30,
        labels: Default::default(),
        gpus: (0..gpus)
            .map(|i| Gpu {
                uuid: format!("{name}-GPU-{i}"),
                index: i,
                model: "H200".into(),
                memory: 141 << 30,
                single_user: false,
            })
            .collect(),
    }
}

fn cluster(nodes: &[(&str, u32)]) -> Cluster {
    Cluster { nodes: nodes.iter().map(|&(n, g)| node(n, g)).collect() }
}

fn req(gpu: GpuRequest) -> Request {
    Request { cpu_milli: 1000, memory: 1 << 30, gpu, ..Default::default() }
}

fn whole(n: u32) -> Request {
    req(GpuRequest::Whole { count: n })
}

fn pend(id: &str, r: Request, prio: i32, t: i64) -> Pending {
    Pending {
        id: id.into(),
        queue: String::new(),
        user: "u".into(),
        priority: prio,
        submit_ms: t,
        request: r,
        members: 1,
        runtime_limit_ms: None,
    }
}

fn run_from(d: &Decisions, id: &str, started: i64, limit: Option<i64>) -> Running {
    let s = d.starts.iter().find(|s| s.id == id).unwrap();
    Running {
        id: id.into(),
        queue: String::new(),
        user: "u".into(),
        priority: 0,
        started_ms: started,
        runtime_limit_ms: limit,
        placements: s.placements.clone(),
        preemptible: true,
        long_running: false,
        stopping: false,
    }
}

fn ids(d: &Decisions) -> Vec<&str> {
    d.starts.iter().map(|s| s.id.as_str()).collect()
}

#[test]
fn single_node_admits_in_priority_then_submit_order() {
    let c = cluster(&[("local", 2)]);
    let p = vec![pend("c", whole(1), 0, 3), pend("a", whole(1), 0, 1), pend("hi", whole(1), 5, 9)];
    let d = schedule(&c, &[], &p, &Config::default(), 10);
    assert_eq!(ids(&d), ["hi", "a"]);
    assert_eq!(d.starts[0].placements[0].gpus[0].uuid, "local-GPU-0");
    assert_eq!(d.starts[1].placements[0].gpus[0].uuid, "local-GPU-1");
    assert_eq!(d.pending.len(), 1);
    let e = &d.pending[0];
    assert_eq!((e.id.as_str(), e.reason, e.position), ("c", Reason::Resources, 1));
    assert!(e.message.contains("GPU"), "{}", e.message);
    assert_eq!(e.estimated_start_ms, None);
}

#[test]
fn fractions_and_whole_gpus_never_share() {
    let c = cluster(&[("local", 1)]);
    let p = vec![
        pend("f1", req(GpuRequest::Fraction { milli: 500, memory: None }), 0, 1),
        pend("w", whole(1), 0, 2),
        pend("f2", req(GpuRequest::Fraction { milli: 500, memory: None }), 0, 3),
        pend("f3", req(GpuRequest::Fraction { milli: 100, memory: None }), 0, 4),
    ];
    let d = schedule(&c, &[], &p, &Config::default(), 10);
    assert_eq!(ids(&d), ["f1", "f2"]);
    let w = d.pending.iter().find(|e| e.id == "w").unwrap();
    assert_eq!(w.reason, Reason::Resources);
    // and the reverse: a GPU held whole takes no fraction
    let d1 = schedule(&c, &[], &[pend("w", whole(1), 0, 1)], &Config::default(), 10);
    let running = vec![run_from(&d1, "w", 10, None)];
    let d2 = schedule(&c, &running, &p[..1], &Config::default(), 20);
    assert!(d2.starts.is_empty());
}

#[test]
fn estimated_start_and_backfill() {
    let c = cluster(&[("n", 4)]);
    let d0 = schedule(&c, &[], &[pend("r", whole(2), 0, 0)], &Config::default(), 0);
    let running = vec![run_from(&d0, "r", 0, Some(100))];
    let mut big = pend("big", whole(4), 0, 1);
    big.runtime_limit_ms = Some(1000);
    let mut short = pend("short", whole(1), 0, 2);
    short.runtime_limit_ms = Some(50);
    let long = pend("long", whole(1), 0, 3);
    let d = schedule(&c, &running, &[big, short, long], &Config::default(), 10);
    assert_eq!(ids(&d), ["short"]);
    let big = d.pending.iter().find(|e| e.id == "big").unwrap();
    assert_eq!((big.reason, big.estimated_start_ms, big.position), (Reason::Resources, Some(100), 1));
    let long = d.pending.iter().find(|e| e.id == "long").unwrap();
    assert_eq!(long.reason, Reason::Backfill, "{}", long.message);
    assert!(long.message.contains("big"));
}

#[test]
fn strict_fifo_blocks_behind_the_head() {
    let c = cluster(&[("n", 2)]);
    let d0 = schedule(&c, &[], &[pend("r", whole(1), 0, 0)], &Config::default(), 0);
    let running = vec![run_from(&d0, "r", 0, None)];
    let cfg = Config { backfill: Backfill::Off, ..Config::default() };
    let d = schedule(&c, &running, &[pend("two", whole(2), 0, 1), pend("one", whole(1), 0, 2)], &cfg, 5);
    assert!(d.starts.is_empty());
    assert_eq!(d.pending[1].reason, Reason::HeadOfLine);
}

#[test]
fn gang_is_all_or_nothing() {
    let c = cluster(&[("a", 2), ("b", 2)]);
    let mut g = pend("g", whole(2), 0, 0);
    g.members = 2;
    let d = schedule(&c, &[], &[g.clone()], &Config::default(), 0);
    assert_eq!(d.starts[0].placements.len(), 2);
    let nodes: Vec<_> = d.starts[0].placements.iter().map(|p| p.node.as_str()).collect();
    assert_eq!(nodes.len(), 2);
    assert_ne!(nodes[0], nodes[1]);
    // with one GPU taken the gang cannot start, and nothing of it is held
    let d1 = schedule(&c, &[], &[pend("x", whole(1), 0, 0)], &Config::default(), 0);
    let running = vec![run_from(&d1, "x", 0, None)];
    let d2 = schedule(&c, &running, &[g.clone(), pend("y", whole(1), 0, 5)], &Config::default(), 1);
    assert_eq!(ids(&d2), ["y"]);
    g.members = 3;
    let d3 = schedule(&c, &[], &[g], &Config::default(), 0);
    assert_eq!(d3.pending[0].reason, Reason::Unschedulable);
}

#[test]
fn higher_priority_preempts_with_grace() {
    let c = cluster(&[("n", 2)]);
    let d0 = schedule(&c, &[], &[pend("low", whole(2), 0, 0)], &Config::default(), 0);
    let running = vec![run_from(&d0, "low", 0, None)];
    let d = schedule(&c, &running, &[pend("high", whole(1), 10, 1)], &Config::default(), 5);
    assert!(d.starts.is_empty());
    assert_eq!(d.preemptions.len(), 1);
    assert_eq!(d.preemptions[0].id, "low");
    assert_eq!(d.preemptions[0].grace_ms, 30_000);
    assert_eq!(d.pending[0].reason, Reason::Preempting);
    // next tick: the victim is stopping; no second victim, still waiting
    let mut r = running.clone();
    r[0].stopping = true;
    let d = schedule(&c, &r, &[pend("high", whole(1), 10, 1)], &Config::default(), 6);
    assert!(d.preemptions.is_empty());
    assert_eq!(d.pending[0].reason, Reason::Preempting);
    // same priority: no preemption
    let d = schedule(&c, &running, &[pend("same", whole(1), 0, 1)], &Config::default(), 5);
    assert!(d.preemptions.is_empty());
    assert_eq!(d.pending[0].reason, Reason::Resources);
}

#[test]
fn queue_limits_and_reclaim() {
    let c = cluster(&[("n", 4)]);
    let q = |name: &str, g: u64, b: u64| QueueSpec {
        name: name.into(),
        guarantee: Quota { gpu_milli: g * 1000, cpu_milli: u64::MAX / 4, memory: u64::MAX / 4 },
        borrow_limit: Some(Quota { gpu_milli: b * 1000, cpu_milli: 0, memory: 0 }),
        weight: 1.0,
        user_limit: None,
    };
    let cfg = Config { queues: vec![q("a", 2, 2), q("b", 2, 0)], ..Config::default() };
    let mut pa: Vec<Pending> = (0..5).map(|i| pend(&format!("a{i}"), whole(1), 0, i)).collect();
    for p in &mut pa {
        p.queue = "a".into();
    }
    let d = schedule(&c, &[], &pa, &cfg, 10);
    assert_eq!(d.starts.len(), 4);
    assert_eq!(d.pending[0].reason, Reason::QueueLimit);
    // b reclaims its guarantee from a, which borrows two GPUs
    let running: Vec<Running> = d
        .starts
        .iter()
        .enumerate()
        .map(|(i, _)| {
            let mut r = run_from(&d, &format!("a{i}"), 10, None);
            r.queue = "a".into();
            r
        })
        .collect();
    let mut pb = pend("b0", whole(2), 0, 20);
    pb.queue = "b".into();
    let d = schedule(&c, &running, &[pb], &cfg, 30);
    assert_eq!(d.preemptions.len(), 2, "{d:?}");
    assert!(d.preemptions.iter().all(|p| p.reason.contains("reclaims")));
}

#[test]
fn bookings_keep_gpus_free() {
    let c = cluster(&[("n", 4)]);
    let cfg = Config {
        reservations: vec![Reservation {
            id: "r".into(),
            queue: "vip".into(),
            gpus: 2,
            model: Some("H200".into()),
            start_ms: 100,
            end_ms: 200,
        }],
        ..Config::default()
    };
    let mut short = pend("short", whole(4), 0, 0);
    short.runtime_limit_ms = Some(50);
    let d = schedule(&c, &[], &[short], &cfg, 0);
    assert_eq!(ids(&d), ["short"], "ends before the window");
    let d = schedule(&c, &[], &[pend("open", whole(3), 0, 0)], &cfg, 0);
    assert_eq!(d.pending[0].reason, Reason::Reservation);
    let d = schedule(&c, &[], &[pend("two", whole(2), 0, 0)], &cfg, 0);
    assert_eq!(ids(&d), ["two"]);
    let mut vip = pend("vip", whole(4), 0, 0);
    vip.queue = "vip".into();
    let d = schedule(&c, &[], &[vip], &cfg, 150);
    assert_eq!(ids(&d), ["vip"]);
}

#[test]
fn policies_parse_and_default() {
    for p in Policy::ALL {
        assert_eq!(p.as_str().parse::<Policy>().unwrap(), p);
    }
    assert!("nope".parse::<Policy>().unwrap_err().to_string().contains("bestfit"));
    let json = serde_json::to_string(&Config::default()).unwrap();
    let back: Config = serde_json::from_str(&json).unwrap();
    assert_eq!(back, Config::default());
}

#[test]
fn resource_expressions_choose_nodes_and_gpus() {
    let mut c = cluster(&[("a", 2), ("b", 2)]);
    c.nodes[0].labels.insert("rack".into(), "b".into());
    c.nodes[1].gpus[1].model = "H100".into();
    let mut r = whole(1);
    r.constraint = Some(r#"gpu.model in ["H100"] && node.labels.rack != "b""#.into());
    let d = schedule(&c, &[], &[pend("x", r, 0, 0)], &Config::default(), 0);
    assert_eq!(d.starts[0].placements[0].gpus[0].uuid, "b-GPU-1");
    let mut bad = whole(1);
    bad.constraint = Some("gpu.model ==".into());
    let d = schedule(&c, &[], &[pend("y", bad, 0, 0)], &Config::default(), 0);
    assert_eq!(d.pending[0].reason, Reason::InvalidConstraint);
    assert!(d.pending[0].message.contains("position 12"), "{}", d.pending[0].message);
    let mut none = whole(1);
    none.constraint = Some("node.name == \"zzz\"".into());
    let d = schedule(&c, &[], &[pend("z", none, 0, 0)], &Config::default(), 0);
    assert_eq!(d.pending[0].reason, Reason::Unschedulable);
}

#[test]
fn a_stopping_victim_is_claimed_once() {
    let c = cluster(&[("n", 2)]);
    let d0 = schedule(&c, &[], &[pend("low1", whole(1), 0, 0), pend("low2", whole(1), 0, 1)], &Config::default(), 0);
    let mut running = vec![run_from(&d0, "low1", 0, None), run_from(&d0, "low2", 0, None)];
    running[0].stopping = true;
    let d = schedule(&c, &running, &[pend("a", whole(1), 5, 2), pend("b", whole(1), 5, 3)], &Config::default(), 10);
    let a = d.pending.iter().find(|e| e.id == "a").unwrap();
    assert!(a.message.contains("stopping"), "{}", a.message);
    assert_eq!(d.preemptions.len(), 1, "{d:?}");
    assert_eq!((d.preemptions[0].id.as_str(), d.preemptions[0].for_id.as_str()), ("low2", "b"));
}

#[test]
fn fair_share_orders_queues_by_decayed_usage() {
    let c = cluster(&[("n", 1)]);
    let mut a = pend("a", whole(1), 0, 0);
    a.queue = "heavy".into();
    let mut b = pend("b", whole(1), 0, 5);
    b.queue = "light".into();
    // heavy ran a GPU for a long time; its decayed usage puts it behind light despite submitting first
    let run = Running {
        id: "old".into(),
        queue: "heavy".into(),
        user: "u".into(),
        priority: 0,
        started_ms: 0,
        runtime_limit_ms: None,
        placements: vec![Placement { node: "n".into(), gpus: vec![], cpu_milli: 1000, memory: 1 << 30 }],
        preemptible: true,
        long_running: false,
        stopping: false,
    };
    let mut usage = Usage::default();
    usage.advance(std::slice::from_ref(&run), 0, 3_600_000);
    usage.advance(std::slice::from_ref(&run), 7_200_000, 3_600_000);
    let heavy = usage.queues["heavy"];
    assert!((heavy[1] - 750.0).abs() < 1e-6, "two half-lives of 1000 milli-CPU: {heavy:?}");
    let cfg = Config { usage, ..Config::default() };
    let d = schedule(&c, &[], &[a.clone(), b.clone()], &cfg, 7_200_000);
    assert_eq!(ids(&d), ["b"]);
    assert_eq!(d.pending[0].id, "a");
    // without history, submit time decides
    let d = schedule(&c, &[], &[a, b], &Config::default(), 7_200_000);
    assert_eq!(ids(&d), ["a"]);
}

fn queue(name: &str, gpus: u64) -> QueueSpec {
    QueueSpec {
        name: name.into(),
        guarantee: Quota { gpu_milli: gpus * 1000, cpu_milli: u64::MAX / 4, memory: u64::MAX / 4 },
        borrow_limit: None,
        weight: 1.0,
        user_limit: None,
    }
}

fn in_queue(mut p: Pending, q: &str) -> Pending {
    p.queue = q.into();
    p
}

/// A running one-member workload of `queue` on `node`, holding GPUs `first..first + n`.
fn running_on(id: &str, q: &str, node: &str, first: u32, n: u32, started: i64, limit: Option<i64>) -> Running {
    Running {
        id: id.into(),
        queue: q.into(),
        user: "u".into(),
        priority: 0,
        started_ms: started,
        runtime_limit_ms: limit,
        placements: vec![Placement {
            node: node.into(),
            gpus: (first..first + n)
                .map(|i| GpuShare { uuid: format!("{node}-GPU-{i}"), milli: 1000, memory: 0 })
                .collect(),
            cpu_milli: 1000 * u64::from(n),
            memory: u64::from(n) << 30,
        }],
        preemptible: true,
        long_running: false,
        stopping: false,
    }
}

#[test]
fn a_workload_within_the_guarantee_is_not_held_back_by_a_larger_one_of_its_queue() {
    // team a (guarantee 4, holding nothing) waits with an 8-GPU job that exceeds its guarantee and
    // reserves the node from when b's job ends; its later 2-GPU job fits within the guarantee on the
    // free GPUs now and must not wait behind that reserved start
    let c = cluster(&[("n", 8)]);
    let cfg = Config { queues: vec![queue("a", 4), queue("b", 4)], ..Config::default() };
    let running = vec![running_on("b1", "b", "n", 0, 4, 0, Some(1_000_000))];
    let big = in_queue(pend("big", whole(8), 0, 0), "a");
    let small = in_queue(pend("small", whole(2), 0, 5), "a");
    let d = schedule(&c, &running, &[big, small], &cfg, 10);
    assert_eq!(ids(&d), ["small"], "{d:?}");
    assert!(d.preemptions.is_empty());
    assert_eq!(d.pending[0].id, "big");
    assert_eq!(d.pending[0].reason, Reason::Resources);
}

#[test]
fn a_reclaiming_workload_goes_before_borrowers_even_behind_its_own_big_head() {
    // two GPUs are free; team a is below its guarantee with a 2-GPU job queued behind a 4-GPU one;
    // team c has no guarantee and a lighter fair share, so its 2-GPU job would go first on share alone
    let c = cluster(&[("n0", 4), ("n1", 4)]);
    let mut cfg = Config { queues: vec![queue("a", 2), queue("b", 0), queue("c", 0)], ..Config::default() };
    cfg.usage.queues.insert("a".into(), [4000.0, 0.0, 0.0]);
    let running = vec![running_on("b1", "b", "n0", 0, 2, 0, None), running_on("b2", "b", "n1", 0, 4, 0, None)];
    let head = in_queue(pend("a-head", whole(4), 0, 0), "a");
    let small = in_queue(pend("a-small", whole(2), 0, 9), "a");
    let borrower = in_queue(pend("c1", whole(2), 0, 1), "c");
    let d = schedule(&c, &running, &[head, small, borrower], &cfg, 10);
    assert_eq!(ids(&d), ["a-small"], "{d:?}");
    assert!(d.preemptions.is_empty(), "{d:?}");
}

#[test]
fn reclaim_frees_one_node_when_borrowed_work_is_spread() {
    // 3 nodes x 4 GPUs. c holds its guarantee (2 GPUs on n0 and on n1) and may not lose any of it.
    // b (guarantee 4) holds 8 one-GPU jobs: 2 on n0, 2 on n1 (the latest started), 4 on n2; it borrows 4.
    // a (guarantee 4, holding nothing) wants a whole node: only n2 can be freed, by stopping b's 4 jobs
    // there, which leaves b exactly at its guarantee. Stopping b's jobs on n0 and n1 first would spend
    // b's borrowed GPUs where they cannot help.
    let c = cluster(&[("n0", 4), ("n1", 4), ("n2", 4)]);
    let cfg = Config { queues: vec![queue("a", 4), queue("b", 4), queue("c", 4)], ..Config::default() };
    let mut running = vec![running_on("c0", "c", "n0", 0, 2, 0, None), running_on("c1", "c", "n1", 0, 2, 0, None)];
    for (k, (node, gpu)) in [("n0", 2), ("n0", 3), ("n1", 2), ("n1", 3)].into_iter().enumerate() {
        running.push(running_on(&format!("b-late{k}"), "b", node, gpu, 1, 1000 + k as i64, None));
    }
    for gpu in 0..4 {
        running.push(running_on(&format!("b-n2-{gpu}"), "b", "n2", gpu, 1, 10, None));
    }
    let p = in_queue(pend("a1", whole(4), 0, 5), "a");
    let d = schedule(&c, &running, &[p], &cfg, 2000);
    let mut victims: Vec<&str> = d.preemptions.iter().map(|p| p.id.as_str()).collect();
    victims.sort();
    assert_eq!(victims, ["b-n2-0", "b-n2-1", "b-n2-2", "b-n2-3"], "{d:?}");
    assert!(d.preemptions.iter().all(|p| p.for_id == "a1" && p.reason.contains("reclaims")));
    assert_eq!(d.pending[0].reason, Reason::Preempting);
    // next tick, the victims stopping: no further victims, and a1 keeps waiting for them
    for r in &mut running {
        r.stopping = r.id.starts_with("b-n2");
    }
    let p = in_queue(pend("a1", whole(4), 0, 5), "a");
    let d = schedule(&c, &running, &[p], &cfg, 12_000);
    assert!(d.preemptions.is_empty(), "{d:?}");
    assert!(d.pending[0].message.contains("stopping"), "{}", d.pending[0].message);
}

#[test]
fn reclaim_prefers_victims_that_leave_their_queue_at_its_guarantee() {
    // c (guarantee 2) borrows one GPU through a 3-GPU job that started last; d (no guarantee) borrows
    // one GPU. Stopping c's job would put c below its guarantee (and c would reclaim in turn): d goes.
    let c = cluster(&[("n", 4)]);
    let cfg = Config { queues: vec![queue("a", 1), queue("c", 2), queue("d", 0)], ..Config::default() };
    let running = vec![running_on("c-big", "c", "n", 0, 3, 100, None), running_on("d-one", "d", "n", 3, 1, 0, None)];
    let d = schedule(&c, &running, &[in_queue(pend("a1", whole(1), 0, 5), "a")], &cfg, 200);
    let victims: Vec<&str> = d.preemptions.iter().map(|p| p.id.as_str()).collect();
    assert_eq!(victims, ["d-one"], "{d:?}");
}

#[test]
fn a_queue_is_not_drained_below_its_guarantee_by_workloads_already_stopping() {
    // b (guarantee 1) holds 2 one-GPU jobs; one is already stopping for an earlier reclaim, so b no
    // longer borrows: a second reclaimer must not take b's other job
    let c = cluster(&[("n", 2)]);
    let cfg = Config { queues: vec![queue("a", 1), queue("b", 1)], ..Config::default() };
    let mut running = vec![running_on("b0", "b", "n", 0, 1, 0, None), running_on("b1", "b", "n", 1, 1, 0, None)];
    running[0].stopping = true;
    let p = vec![in_queue(pend("a0", whole(1), 0, 1), "a"), in_queue(pend("a1", whole(1), 0, 2), "a")];
    let d = schedule(&c, &running, &p, &cfg, 10);
    assert!(d.preemptions.is_empty(), "{d:?}");
}

/// `decide` may skip a workload that does not fit now only when it would not fit either once the
/// workloads already stopping are gone: one that would keeps a reserved start for that room, and a
/// later workload may not take it.
#[test]
fn decide_keeps_the_room_a_blocked_workload_waits_for() {
    let c = cluster(&[("n", 2)]);
    let d0 = schedule(&c, &[], &[pend("a", whole(1), 0, 0)], &Config::default(), 0);
    let mut a = run_from(&d0, "a", 0, None);
    a.stopping = true;
    let mut y = pend("y", whole(1), 0, 2);
    y.runtime_limit_ms = Some(3_600_000);
    let p = vec![pend("x", whole(2), 0, 1), y];
    let cfg = Config {
        preemption: Preemption { enabled: true, grace_ms: 30_000 },
        reservation_depth: 0,
        ..Config::default()
    };
    let full = schedule(&c, std::slice::from_ref(&a), &p, &cfg, 10);
    assert!(full.starts.is_empty(), "{full:?}");
    assert_eq!(full.pending[0].reason, Reason::Preempting);
    assert_eq!(full.pending[1].reason, Reason::Backfill);
    let quiet = decide(&c, std::slice::from_ref(&a), &p, &cfg, 10);
    assert_eq!(quiet.starts, full.starts);
    assert_eq!(quiet.preemptions, full.preemptions);
}

#[test]
fn long_running_work_yields_to_a_higher_priority_only_beyond_its_queues_guarantee() {
    let c = cluster(&[("n", 2)]);
    let mut svc = running_on("svc", "a", "n", 0, 2, 0, None);
    svc.long_running = true;
    let high = [in_queue(pend("high", whole(1), 10, 1), "a")];
    // within the guarantee of its queue (2 GPUs): a service stays, the higher priority waits
    let within = Config { queues: vec![queue("a", 2)], ..Config::default() };
    let d = schedule(&c, std::slice::from_ref(&svc), &high, &within, 5);
    assert!(d.preemptions.is_empty(), "{d:?}");
    assert_eq!(d.pending[0].reason, Reason::Resources);
    let quiet = decide(&c, std::slice::from_ref(&svc), &high, &within, 5);
    assert!(quiet.preemptions.is_empty() && quiet.starts.is_empty(), "{quiet:?}");
    // beyond it (a guarantee of 1 GPU): it yields as other work does
    let beyond = Config { queues: vec![queue("a", 1)], ..Config::default() };
    let d = schedule(&c, std::slice::from_ref(&svc), &high, &beyond, 5);
    assert_eq!(d.preemptions.iter().map(|p| p.id.as_str()).collect::<Vec<_>>(), ["svc"]);
    // a job in its place yields within the guarantee too
    svc.long_running = false;
    let d = schedule(&c, std::slice::from_ref(&svc), &high, &within, 5);
    assert_eq!(d.preemptions.iter().map(|p| p.id.as_str()).collect::<Vec<_>>(), ["svc"]);
}
