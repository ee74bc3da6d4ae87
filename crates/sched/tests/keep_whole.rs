//! The default placement keeps whole nodes free while a queue below its GPU guarantee waits with a
//! member larger than any node's wholly free GPUs, and spreads otherwise (issue 24).

use gpuhub_sched::*;

fn node(name: &str) -> Node {
    Node {
        name: name.into(),
        cpu_milli: 64_000,
        memory: 512 << 30,
        labels: Default::default(),
        gpus: (0..8)
            .map(|i| Gpu {
                uuid: format!("{name}-GPU-{i}"),
                index: i,
                model: "P100".into(),
                memory: 16 << 30,
                single_user: false,
            })
            .collect(),
    }
}

fn whole(count: u32) -> Request {
    Request { cpu_milli: 1000, memory: 1 << 30, gpu: GpuRequest::Whole { count }, ..Default::default() }
}

fn pend(id: &str, queue: &str, count: u32, t: i64) -> Pending {
    Pending {
        id: id.into(),
        queue: queue.into(),
        user: "u".into(),
        priority: 0,
        submit_ms: t,
        request: whole(count),
        members: 1,
        runtime_limit_ms: None,
    }
}

/// Queue `small` runs 4 GPUs on node a and 1 on node b (no end known), so no node has 8 free.
fn running() -> Vec<Running> {
    let on = |id: &str, node: &str, gpus: u32| Running {
        id: id.into(),
        queue: "small".into(),
        user: "u".into(),
        priority: 0,
        started_ms: 0,
        runtime_limit_ms: None,
        placements: vec![Placement {
            node: node.into(),
            gpus: (0..gpus)
                .map(|i| GpuShare { uuid: format!("{node}-GPU-{i}"), milli: 1000, memory: 16 << 30 })
                .collect(),
            cpu_milli: 1000,
            memory: 1 << 30,
        }],
        preemptible: true,
        long_running: false,
        stopping: false,
    };
    vec![on("r4", "a", 4), on("r1", "b", 1)]
}

fn config(big_guarantee_gpus: u64) -> Config {
    let queue = |name: &str, gpus: u64| QueueSpec {
        name: name.into(),
        guarantee: Quota { gpu_milli: gpus * 1000, cpu_milli: u64::MAX / 4, memory: u64::MAX / 4 },
        borrow_limit: None,
        weight: 1.0,
        user_limit: None,
    };
    Config {
        queues: vec![queue("big", big_guarantee_gpus), queue("small", 0)],
        preemption: Preemption { enabled: false, grace_ms: 30_000 },
        ..Config::default()
    }
}

/// Where the 1-GPU job of `small` starts, by `schedule`, `decide` and `decide_backlog` (which must agree).
fn node_of_small(pending: &[Pending], cfg: &Config) -> String {
    let c = Cluster { nodes: vec![node("a"), node("b")] };
    let run = running();
    let mut backlog = Backlog::new();
    for (i, p) in pending.iter().enumerate() {
        backlog.insert(i, p.clone());
    }
    let all = [
        schedule(&c, &run, pending, cfg, 10),
        decide(&c, &run, pending, cfg, 10),
        decide_backlog(&c, &run, &mut backlog, cfg, 10),
    ];
    let nodes: Vec<String> = all
        .iter()
        .map(|d| {
            let s = d.starts.iter().find(|s| s.id == "s1").expect("the 1-GPU job starts");
            s.placements[0].node.clone()
        })
        .collect();
    assert!(nodes.iter().all(|n| *n == nodes[0]), "{nodes:?}");
    assert!(all.iter().all(|d| d.starts.iter().all(|s| s.id != "b8")), "no node has 8 GPUs free");
    nodes[0].clone()
}

#[test]
fn a_guaranteed_queue_waiting_for_a_whole_node_makes_the_default_pack() {
    assert_eq!(Config::default().policy, Policy::Auto);
    let both = [pend("b8", "big", 8, 1), pend("s1", "small", 1, 2)];
    // big (guarantee 8 GPUs, holding none) waits for 8 GPUs: the 1-GPU job goes beside the 4 held
    assert_eq!(node_of_small(&both, &config(8)), "a");
    // nobody below its guarantee waits for a whole node: spread, to the emptier node
    assert_eq!(node_of_small(&both, &config(0)), "b");
    assert_eq!(node_of_small(&both[1..], &config(8)), "b");
    // other policies do not adapt
    let mut spread = config(8);
    spread.policy = Policy::Spread;
    assert_eq!(node_of_small(&both, &spread), "b");
}
