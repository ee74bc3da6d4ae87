//! Single-user GPUs (MPS): a GPU's shares go to one user at a time, whole GPUs are unaffected, and a
//! share that waits for that reason says so.

use gpuhub_sched::*;

fn node(name: &str, gpus: u32, single_user: bool) -> Node {
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
                single_user,
            })
            .collect(),
    }
}

fn share(id: &str, user: &str, milli: u32, t: i64) -> Pending {
    Pending {
        id: id.into(),
        queue: String::new(),
        user: user.into(),
        priority: 0,
        submit_ms: t,
        request: Request {
            cpu_milli: 1000,
            memory: 1 << 30,
            gpu: GpuRequest::Fraction { milli, memory: None },
            ..Default::default()
        },
        members: 1,
        runtime_limit_ms: None,
    }
}

fn running(d: &Decisions, p: &Pending) -> Running {
    let s = d.starts.iter().find(|s| s.id == p.id).unwrap();
    Running {
        id: p.id.clone(),
        queue: String::new(),
        user: p.user.clone(),
        priority: 0,
        started_ms: 0,
        runtime_limit_ms: None,
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
fn shares_of_an_mps_gpu_go_to_one_user_at_a_time() {
    for policy in [Policy::FgdPlus, Policy::BestFit, Policy::Spread, Policy::Fgd] {
        let config = Config { policy, ..Config::default() };
        let c = Cluster { nodes: vec![node("local", 1, true)] };
        // in one pass: alice's two shares pack, bob's waits although 250 milli are free
        let p = vec![share("a1", "alice", 500, 1), share("b1", "bob", 250, 2), share("a2", "alice", 250, 3)];
        let d = schedule(&c, &[], &p, &config, 10);
        assert_eq!(ids(&d), ["a1", "a2"], "{policy:?}");
        let e = d.pending.iter().find(|e| e.id == "b1").unwrap();
        assert_eq!(e.reason, Reason::Resources);
        assert!(e.message.contains("1 MPS GPU(s) with room hold another user's shares"), "{}", e.message);
        // in a later pass, with alice's shares running: still refused, and alice may add more
        let run = vec![running(&d, &p[0]), running(&d, &p[2])];
        let later = vec![share("b1", "bob", 250, 2), share("a3", "alice", 100, 4)];
        let d2 = schedule(&c, &run, &later, &config, 20);
        assert_eq!(ids(&d2), ["a3"], "{policy:?}");
        // once alice's shares end, bob's starts
        let d3 = schedule(&c, &[], &later[..1], &config, 30);
        assert_eq!(ids(&d3), ["b1"], "{policy:?}");
    }
}

#[test]
fn other_gpus_and_whole_gpus_are_unaffected() {
    // a guard GPU (not single-user) takes both users' shares
    let c = Cluster { nodes: vec![node("local", 1, false)] };
    let p = vec![share("a1", "alice", 500, 1), share("b1", "bob", 250, 2)];
    assert_eq!(ids(&schedule(&c, &[], &p, &Config::default(), 10)), ["a1", "b1"]);
    // two MPS GPUs: bob's share goes to the other one
    let c = Cluster { nodes: vec![node("local", 2, true)] };
    let d = schedule(&c, &[], &p, &Config::default(), 10);
    assert_eq!(ids(&d), ["a1", "b1"]);
    let gpu = |i: usize| d.starts[i].placements[0].gpus[0].uuid.clone();
    assert_ne!(gpu(0), gpu(1));
    // a whole GPU of an MPS node is taken by anyone, and the share of another user waits
    let whole = Pending {
        request: Request { gpu: GpuRequest::Whole { count: 1 }, ..p[1].request.clone() },
        ..share("w", "carol", 0, 0)
    };
    let d = schedule(&c, &[], &[whole, p[0].clone(), p[1].clone()], &Config::default(), 10);
    assert_eq!(ids(&d), ["w", "a1"]);
    let e = d.pending.iter().find(|e| e.id == "b1").unwrap();
    assert!(e.message.contains("another user's shares"), "{}", e.message);
}

#[test]
fn a_share_may_preempt_another_users_shares_of_an_mps_gpu() {
    let c = Cluster { nodes: vec![node("local", 1, true)] };
    let low = share("a1", "alice", 500, 1);
    let d = schedule(&c, &[], std::slice::from_ref(&low), &Config::default(), 10);
    let run = vec![running(&d, &low)];
    let hi = Pending { priority: 5, ..share("b1", "bob", 250, 2) };
    let d = schedule(&c, &run, &[hi], &Config::default(), 20);
    assert_eq!(d.preemptions.iter().map(|p| p.id.as_str()).collect::<Vec<_>>(), ["a1"]);
}
