//! Property tests of the scheduling invariants: no GPU, CPU or memory over-committed; whole and fractional
//! work never share a GPU; gangs all-or-nothing; quotas and limits never exceeded; the same input gives the
//! same decisions; preemption only of eligible victims; and the single-node whole-GPU case behaves like
//! the simple admission rule of `gpuhub-core`.

use gpuhub_sched::*;
use proptest::prelude::*;
use std::collections::BTreeMap;

fn arb_cluster() -> impl Strategy<Value = Cluster> {
    prop::collection::vec((0u32..5, 1u64..5, prop::sample::select(vec!["A", "B"])), 1..5).prop_map(|nodes| Cluster {
        nodes: nodes
            .into_iter()
            .enumerate()
            .map(|(i, (g, cpu, model))| Node {
                name: format!("n{i}"),
                cpu_milli: cpu * 4000,
                memory: cpu * (16 << 30),
                labels: BTreeMap::from([("rack".to_string(), format!("r{}", i % 2))]),
                gpus: (0..g)
                    .map(|k| Gpu {
                        uuid: format!("n{i}-g{k}"),
                        index: k,
                        model: model.into(),
                        memory: 40 << 30,
                        single_user: false,
                    })
                    .collect(),
            })
            .collect(),
    })
}

fn arb_gpu() -> impl Strategy<Value = GpuRequest> {
    prop_oneof![
        Just(GpuRequest::None),
        (1u32..4).prop_map(|count| GpuRequest::Whole { count }),
        (1u32..1000).prop_map(|milli| GpuRequest::Fraction { milli, memory: None }),
        (1u32..1000, 1u64..50).prop_map(|(milli, g)| GpuRequest::Fraction { milli, memory: Some(g << 30) }),
    ]
}

fn arb_pending(n: usize) -> impl Strategy<Value = Vec<Pending>> {
    prop::collection::vec(
        (
            arb_gpu(),
            1u64..6,
            0i32..3,
            0usize..3,
            0usize..3,
            1u32..3,
            prop::option::of(1i64..1000),
            prop::option::of(prop::sample::select(vec!["A", "B"])),
            any::<bool>(),
        ),
        0..n,
    )
    .prop_map(|v| {
        v.into_iter()
            .enumerate()
            .map(|(i, (gpu, cpu, prio, q, u, members, limit, model, expr))| Pending {
                id: format!("p{i}"),
                queue: format!("q{q}"),
                user: format!("u{u}"),
                priority: prio,
                submit_ms: (i as i64) * 7 % 13,
                request: Request {
                    cpu_milli: cpu * 1000,
                    memory: cpu << 30,
                    gpu,
                    gpu_models: model.map(|m| vec![m.to_string()]).unwrap_or_default(),
                    constraint: expr.then(|| "node.labels.rack != \"r1\" || node.cpu >= 8".to_string()),
                },
                members,
                runtime_limit_ms: limit,
            })
            .collect()
    })
}

fn arb_config() -> impl Strategy<Value = Config> {
    (
        prop::sample::select(Policy::ALL.to_vec()),
        any::<bool>(),
        any::<bool>(),
        prop::collection::vec((0u64..4000, prop::option::of(0u64..3000), prop::option::of(1u64..3000)), 3),
    )
        .prop_map(|(policy, backfill, preempt, qs)| Config {
            policy,
            backfill: if backfill { Backfill::On } else { Backfill::Off },
            preemption: Preemption { enabled: preempt, grace_ms: 100 },
            queues: qs
                .into_iter()
                .enumerate()
                .map(|(i, (g, b, u))| QueueSpec {
                    name: format!("q{i}"),
                    guarantee: Quota { gpu_milli: g, cpu_milli: 1 << 40, memory: 1 << 60 },
                    borrow_limit: b.map(|b| Quota { gpu_milli: b, cpu_milli: 1 << 40, memory: 1 << 60 }),
                    weight: 1.0 + i as f64,
                    user_limit: u.map(|u| Quota { gpu_milli: u, cpu_milli: 1 << 40, memory: 1 << 60 }),
                })
                .collect(),
            ..Config::default()
        })
}

/// Turns starts into running workloads.
fn to_running(d: &Decisions, pending: &[Pending], now: i64) -> Vec<Running> {
    d.starts
        .iter()
        .map(|s| {
            let p = pending.iter().find(|p| p.id == s.id).unwrap();
            Running {
                id: s.id.clone(),
                queue: p.queue.clone(),
                user: p.user.clone(),
                priority: p.priority,
                started_ms: now,
                runtime_limit_ms: p.runtime_limit_ms,
                placements: s.placements.clone(),
                preemptible: true,
                long_running: false,
                stopping: false,
            }
        })
        .collect()
}

/// Checks capacity invariants over what runs plus what starts.
fn check_capacity(c: &Cluster, running: &[Running], d: &Decisions) -> Result<(), TestCaseError> {
    let mut gpu: BTreeMap<&str, Vec<u32>> = BTreeMap::new();
    let mut cpu: BTreeMap<&str, u64> = BTreeMap::new();
    let mut mem: BTreeMap<&str, u64> = BTreeMap::new();
    let all = running.iter().flat_map(|r| r.placements.iter()).chain(d.starts.iter().flat_map(|s| s.placements.iter()));
    for p in all {
        *cpu.entry(&p.node).or_default() += p.cpu_milli;
        *mem.entry(&p.node).or_default() += p.memory;
        for g in &p.gpus {
            gpu.entry(&g.uuid).or_default().push(g.milli);
        }
    }
    for n in &c.nodes {
        prop_assert!(cpu.get(n.name.as_str()).copied().unwrap_or(0) <= n.cpu_milli, "cpu over-committed on {}", n.name);
        prop_assert!(mem.get(n.name.as_str()).copied().unwrap_or(0) <= n.memory, "memory over-committed on {}", n.name);
    }
    for (uuid, shares) in gpu {
        let total: u32 = shares.iter().sum();
        prop_assert!(total <= 1000, "GPU {uuid} over-committed: {shares:?}");
        if shares.contains(&1000) {
            prop_assert_eq!(shares.len(), 1, "GPU {} held whole and shared: {:?}", uuid, shares);
        }
    }
    Ok(())
}

fn check_starts(pending: &[Pending], d: &Decisions) -> Result<(), TestCaseError> {
    for s in &d.starts {
        let p = pending.iter().find(|p| p.id == s.id).unwrap();
        prop_assert_eq!(s.placements.len() as u32, p.members, "gang {} partially started", &p.id);
        let (need, count) = p.request.gpu.shape();
        for pl in &s.placements {
            prop_assert_eq!(pl.cpu_milli, p.request.cpu_milli);
            prop_assert_eq!(pl.gpus.len() as u32, count);
            prop_assert!(pl.gpus.iter().all(|g| g.milli == need));
            let mut uuids: Vec<&str> = pl.gpus.iter().map(|g| g.uuid.as_str()).collect();
            uuids.dedup();
            prop_assert_eq!(uuids.len() as u32, count, "a member got the same GPU twice");
        }
    }
    let started: Vec<&str> = d.starts.iter().map(|s| s.id.as_str()).collect();
    for e in &d.pending {
        prop_assert!(!started.contains(&e.id.as_str()), "{} both started and pending", e.id);
    }
    prop_assert_eq!(d.starts.len() + d.pending.len(), pending.len());
    Ok(())
}

fn check_quotas(cfg: &Config, running: &[Running], d: &Decisions, pending: &[Pending]) -> Result<(), TestCaseError> {
    for q in &cfg.queues {
        let before: u64 = running.iter().filter(|r| r.queue == q.name).map(|r| Quota::of_running(r).gpu_milli).sum();
        let new: u64 = d
            .starts
            .iter()
            .filter(|s| pending.iter().any(|p| p.id == s.id && p.queue == q.name))
            .flat_map(|s| s.placements.iter().flat_map(|p| p.gpus.iter()))
            .map(|g| u64::from(g.milli))
            .sum();
        if new > 0 {
            prop_assert!(before + new <= q.max().gpu_milli, "queue {} above guarantee plus borrowing", q.name);
        }
        if let Some(ul) = q.user_limit {
            let mut per_user: BTreeMap<&str, u64> = BTreeMap::new();
            for r in running.iter().filter(|r| r.queue == q.name) {
                *per_user.entry(&r.user).or_default() += Quota::of_running(r).gpu_milli;
            }
            let mut grew: Vec<&str> = Vec::new();
            for s in &d.starts {
                let p = pending.iter().find(|p| p.id == s.id).unwrap();
                if p.queue == q.name {
                    *per_user.entry(&p.user).or_default() += Quota::of_request(&p.request, p.members).gpu_milli;
                    grew.push(&p.user);
                }
            }
            for u in grew {
                prop_assert!(per_user[u] <= ul.gpu_milli, "user {u} above the limit of {}", q.name);
            }
        }
    }
    Ok(())
}

fn check_preemptions(
    cfg: &Config,
    running: &[Running],
    d: &Decisions,
    pending: &[Pending],
) -> Result<(), TestCaseError> {
    if !cfg.preemption.enabled {
        prop_assert!(d.preemptions.is_empty());
    }
    let spec =
        |name: &str| cfg.queues.iter().find(|q| q.name == name).cloned().unwrap_or_else(|| QueueSpec::open(name));
    // what each queue holds during the pass: what runs plus what the pass starts
    let used = |name: &str| {
        let started = d
            .starts
            .iter()
            .filter(|s| pending.iter().any(|p| p.id == s.id && p.queue == name))
            .flat_map(|s| s.placements.iter())
            .map(|p| Quota {
                gpu_milli: p.gpus.iter().map(|g| u64::from(g.milli)).sum(),
                cpu_milli: p.cpu_milli,
                memory: p.memory,
            });
        running
            .iter()
            .filter(|r| r.queue == name)
            .map(Quota::of_running)
            .chain(started)
            .fold(Quota::default(), Quota::plus)
    };
    for p in &d.preemptions {
        let v = running.iter().find(|r| r.id == p.id).unwrap();
        let w = pending.iter().find(|x| x.id == p.for_id).unwrap();
        prop_assert!(v.preemptible && !v.stopping);
        prop_assert_eq!(p.grace_ms, cfg.preemption.grace_ms);
        let victim_borrows = used(&v.queue).exceeds(spec(&v.queue).guarantee);
        let by_priority = v.priority < w.priority && (v.queue == w.queue || victim_borrows);
        let reclaim = v.queue != w.queue && victim_borrows;
        prop_assert!(by_priority || reclaim, "{} is not an eligible victim for {}", v.id, w.id);
        prop_assert!(d.pending.iter().any(|e| e.id == w.id && e.reason == Reason::Preempting));
    }
    // victims taken across queues never drain a queue below its guarantee: when the last of them was
    // chosen, the queue still borrowed without the others and without what was already stopping
    let mut across: BTreeMap<&str, Vec<Quota>> = BTreeMap::new();
    for p in &d.preemptions {
        let v = running.iter().find(|r| r.id == p.id).unwrap();
        let w = pending.iter().find(|x| x.id == p.for_id).unwrap();
        if v.queue != w.queue {
            across.entry(v.queue.as_str()).or_default().push(Quota::of_running(v));
        }
    }
    for (q, taken) in across {
        let stopping = running
            .iter()
            .filter(|r| r.queue == q && r.stopping)
            .map(Quota::of_running)
            .fold(Quota::default(), Quota::plus);
        let all = taken.iter().copied().fold(stopping, Quota::plus);
        let left = used(q).minus(all);
        prop_assert!(
            taken.iter().any(|&v| left.plus(v).exceeds(spec(q).guarantee)),
            "queue {q} drained below its guarantee: {taken:?}"
        );
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 200, ..ProptestConfig::default() })]

    #[test]
    fn invariants_hold_over_two_ticks(
        c in arb_cluster(),
        first in arb_pending(8),
        second in arb_pending(8),
        cfg in arb_config(),
    ) {
        let d1 = schedule(&c, &[], &first, &cfg, 0);
        check_capacity(&c, &[], &d1)?;
        check_starts(&first, &d1)?;
        check_quotas(&cfg, &[], &d1, &first)?;
        let running = to_running(&d1, &first, 0);
        // the second wave has higher priorities, to provoke preemption
        let second: Vec<Pending> = second
            .into_iter()
            .map(|mut p| {
                p.id = format!("s{}", p.id);
                p.priority += 1;
                p.submit_ms += 100;
                p
            })
            .collect();
        let d2 = schedule(&c, &running, &second, &cfg, 50);
        check_capacity(&c, &running, &d2)?;
        check_starts(&second, &d2)?;
        check_quotas(&cfg, &running, &d2, &second)?;
        check_preemptions(&cfg, &running, &d2, &second)?;
        // determinism, also through a JSON round trip of the input
        let again = schedule(&c, &running, &second, &cfg, 50);
        prop_assert_eq!(&again, &d2);
        let c2: Cluster = serde_json::from_str(&serde_json::to_string(&c).unwrap()).unwrap();
        let r2: Vec<Running> = serde_json::from_str(&serde_json::to_string(&running).unwrap()).unwrap();
        let p2: Vec<Pending> = serde_json::from_str(&serde_json::to_string(&second).unwrap()).unwrap();
        let cfg2: Config = serde_json::from_str(&serde_json::to_string(&cfg).unwrap()).unwrap();
        prop_assert_eq!(schedule(&c2, &r2, &p2, &cfg2, 50), d2);
    }

    #[test]
    fn single_node_whole_gpus_behave_like_simple_admission(
        gpus in 0u32..6,
        jobs in prop::collection::vec((0u32..4, 1u64..6, 0i32..3, 0i64..5), 0..10),
        policy in prop::sample::select(Policy::ALL.to_vec()),
    ) {
        use gpuhub_core::admission::{Waiting, admit, free};
        use gpuhub_core::node::{GpuDevice, NodeCapacity};
        use gpuhub_core::workload::Resources;
        use gpuhub_core::{Bytes, CpuMilli};
        let node = NodeCapacity {
            name: "local".into(),
            cpus: CpuMilli(8000),
            memory: Bytes(32 << 30),
            gpus: (0..gpus)
                .map(|i| GpuDevice { uuid: format!("GPU-{i}"), index: i, model: "H200".into(), memory: Bytes(141 << 30), device: None, sharing: None })
                .collect(),
            labels: Default::default(),
        };
        let cluster = Cluster { nodes: vec![Node {
            name: "local".into(),
            cpu_milli: 8000,
            memory: 32 << 30,
            labels: BTreeMap::new(),
            gpus: (0..gpus).map(|i| Gpu { uuid: format!("GPU-{i}"), index: i, model: "H200".into(), memory: 141 << 30, single_user: false }).collect(),
        }]};
        let ids: Vec<String> = (0..jobs.len()).map(|i| format!("j{i}")).collect();
        let waiting: Vec<Waiting<'_>> = jobs.iter().enumerate().map(|(i, &(g, cpu, prio, t))| Waiting {
            id: &ids[i],
            resources: Resources { cpu_milli: CpuMilli(cpu * 1000), memory: Bytes(cpu << 30), gpus: g, ..Resources::default() },
            priority: prio,
            queued_at: chrono::DateTime::from_timestamp(t, 0).unwrap(),
        }).collect();
        let (expected, _) = admit(free(&node, &[]), &waiting);
        let pending: Vec<Pending> = jobs.iter().enumerate().map(|(i, &(g, cpu, prio, t))| Pending {
            id: ids[i].clone(),
            queue: String::new(),
            user: "u".into(),
            priority: prio,
            submit_ms: t * 1000,
            request: Request {
                cpu_milli: cpu * 1000,
                memory: cpu << 30,
                gpu: if g == 0 { GpuRequest::None } else { GpuRequest::Whole { count: g } },
                ..Default::default()
            },
            members: 1,
            runtime_limit_ms: None,
        }).collect();
        let cfg = Config { policy, ..Config::default() };
        let d = schedule(&cluster, &[], &pending, &cfg, 10_000);
        let got: Vec<(String, Vec<String>)> = d.starts.iter()
            .map(|s| (s.id.clone(), s.placements[0].gpus.iter().map(|g| g.uuid.clone()).collect()))
            .collect();
        let want: Vec<(String, Vec<String>)> = expected.into_iter().map(|s| (s.id, s.gpus)).collect();
        if policy == Policy::Random || policy == Policy::Spread {
            // same workloads start; the GPUs may differ
            let a: Vec<&String> = got.iter().map(|x| &x.0).collect();
            let b: Vec<&String> = want.iter().map(|x| &x.0).collect();
            prop_assert_eq!(a, b);
        } else {
            prop_assert_eq!(got, want);
        }
    }
}

/// Strips model lists and expressions and gives CPU-only workloads a GPU, so that the skips of
/// `decide` (which leave such workloads to the full consideration) apply.
fn plain(mut v: Vec<Pending>) -> Vec<Pending> {
    for p in &mut v {
        p.request.gpu_models.clear();
        p.request.constraint = None;
        if p.request.gpu == GpuRequest::None {
            p.request.gpu = GpuRequest::Whole { count: 1 };
        }
    }
    v
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 400, ..ProptestConfig::default() })]

    /// The skips change no decision: `schedule` equals the pass without the memory of failed
    /// preemption attempts, and `decide` (which passes over workloads and lanes that provably change
    /// nothing) makes the same starts and preemptions.
    #[test]
    fn skips_change_no_decision(
        c in arb_cluster(),
        first in arb_pending(24),
        second in arb_pending(24),
        cfg in arb_config(),
        depth in 0usize..2,
        simple in any::<bool>(),
        stopping in any::<bool>(),
    ) {
        let cfg = Config { reservation_depth: depth, ..cfg };
        let (first, second) = if simple { (plain(first), plain(second)) } else { (first, second) };
        let d1 = schedule(&c, &[], &first, &cfg, 0);
        let mut running = to_running(&d1, &first, 0);
        if stopping {
            for r in running.iter_mut().step_by(2) {
                r.stopping = true;
            }
        }
        let second: Vec<Pending> = second
            .into_iter()
            .map(|mut p| {
                p.id = format!("s{}", p.id);
                p.priority += (p.submit_ms % 2) as i32;
                p.submit_ms += 100;
                p
            })
            .collect();
        let reference = gpuhub_sched::plan::pass(&c, &running, &second, &cfg, 50, false, false);
        prop_assert_eq!(&schedule(&c, &running, &second, &cfg, 50), &reference);
        let quiet = decide(&c, &running, &second, &cfg, 50);
        prop_assert_eq!(&quiet.starts, &reference.starts);
        prop_assert_eq!(&quiet.preemptions, &reference.preemptions);
        prop_assert!(quiet.pending.is_empty());
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 300, ..ProptestConfig::default() })]

    /// A backlog kept across passes (workloads inserted, replaced and removed under ordinals, started
    /// ones taken out between passes, the running workloads' holds kept while running ones end, move in
    /// the list or start again) decides as `decide` over its workloads in ordinal order.
    #[test]
    fn backlog_decides_as_decide(
        c in arb_cluster(),
        first in arb_pending(12),
        later in arb_pending(40),
        ops in prop::collection::vec((0usize..60, 0u8..4), 1..80),
        cfg in arb_config(),
        simple in any::<bool>(),
        stopping in any::<bool>(),
        shared_ids in any::<bool>(),
    ) {
        let d1 = schedule(&c, &[], &first, &cfg, 0);
        let mut running = to_running(&d1, &first, 0);
        if stopping {
            for r in running.iter_mut().step_by(2) {
                r.stopping = true;
            }
        }
        let later = if simple { plain(later) } else { later };
        prop_assume!(!later.is_empty());
        let mut backlog = Backlog::new();
        let mut model: BTreeMap<usize, Pending> = BTreeMap::new();
        for (i, &(ord, op)) in ops.iter().enumerate() {
            if op == 0 {
                prop_assert_eq!(backlog.remove(ord), model.remove(&ord));
            } else {
                let mut p = later[i % later.len()].clone();
                p.id = if shared_ids { format!("b{}", ord % 3) } else { format!("b{ord}") };
                p.submit_ms = (i as i64) * 5 % 17;
                prop_assert_eq!(backlog.insert(ord, p.clone()), model.insert(ord, p));
            }
        }
        let as_vec: Vec<Pending> = model.values().cloned().collect();
        prop_assert_eq!(&backlog.to_vec(), &as_vec);
        prop_assert_eq!(backlog.len(), as_vec.len());
        let d = decide_backlog(&c, &running, &mut backlog, &cfg, 50);
        prop_assert_eq!(&d, &decide(&c, &running, &as_vec, &cfg, 50));
        // the next pass: the started workloads leave the backlog and run
        if !shared_ids {
            for s in &d.starts {
                let ord: usize = s.id[1..].parse().unwrap();
                prop_assert!(backlog.remove(ord).is_some());
                model.remove(&ord);
            }
            running.extend(to_running(&d, &as_vec, 50));
            let as_vec: Vec<Pending> = model.values().cloned().collect();
            prop_assert_eq!(&decide_backlog(&c, &running, &mut backlog, &cfg, 60), &decide(&c, &running, &as_vec, &cfg, 60));
            // and a third, on the holds the backlog kept: some end, one moves to the end of the list, and
            // one starts again under its id, at another time and elsewhere
            let mut k = 0;
            running.retain(|_| {
                k += 1;
                k % 3 != 0
            });
            if running.len() > 2 {
                let r = running.remove(0);
                running.push(r);
                running[0].placements = running[1].placements.clone();
                running[0].started_ms = 65;
            }
            prop_assert_eq!(&decide_backlog(&c, &running, &mut backlog, &cfg, 70), &decide(&c, &running, &as_vec, &cfg, 70));
        }
    }
}
