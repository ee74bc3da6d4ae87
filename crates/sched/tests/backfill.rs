//! Backfill reserves only what is short: work that does not compete for what a reserved start waits
//! for (a job without GPUs behind a GPU reservation, with CPUs and memory to spare) starts at once; work
//! that would take what the reserved workload needs at its start still waits, saying whose start.

use gpuhub_sched::*;

fn cluster() -> Cluster {
    Cluster {
        nodes: vec![Node {
            name: "n".into(),
            cpu_milli: 8000,
            memory: 64 << 30,
            labels: Default::default(),
            gpus: (0..2)
                .map(|i| Gpu {
                    uuid: format!("G{i}"),
                    index: i,
                    model: "H200".into(),
                    memory: 141 << 30,
                    single_user: false,
                })
                .collect(),
        }],
    }
}

fn pend(id: &str, gpus: u32, cores: u64, t: i64, limit: Option<i64>) -> Pending {
    let gpu = if gpus == 0 { GpuRequest::None } else { GpuRequest::Whole { count: gpus } };
    Pending {
        id: id.into(),
        queue: String::new(),
        user: "u".into(),
        priority: 0,
        submit_ms: t,
        request: Request { cpu_milli: cores * 1000, memory: 4 << 30, gpu, ..Default::default() },
        members: 1,
        runtime_limit_ms: limit,
    }
}

/// Both GPUs and 4 of the 8 CPUs held by a job ending at 1000; a GPU job for both GPUs and 6 CPUs waits
/// for it with a reserved start at 1000.
fn held() -> Vec<Running> {
    let d = schedule(&cluster(), &[], &[pend("a", 2, 4, 0, Some(1000))], &Config::default(), 0);
    let s = &d.starts[0];
    vec![Running {
        id: "a".into(),
        queue: String::new(),
        user: "u".into(),
        priority: 0,
        started_ms: 0,
        runtime_limit_ms: Some(1000),
        placements: s.placements.clone(),
        preemptible: true,
        long_running: false,
        stopping: false,
    }]
}

fn ids(d: &Decisions) -> Vec<&str> {
    d.starts.iter().map(|s| s.id.as_str()).collect()
}

#[test]
fn a_job_without_gpus_starts_beside_a_gpu_reservation() {
    let running = held();
    // the GPU job waits for the reserved start; a job of 2 CPUs and no GPU, without a time limit, starts
    let p = vec![pend("gpu", 2, 6, 1, Some(5000)), pend("cpu", 0, 2, 2, None)];
    for decide_too in [false, true] {
        let d = if decide_too {
            decide(&cluster(), &running, &p, &Config::default(), 10)
        } else {
            schedule(&cluster(), &running, &p, &Config::default(), 10)
        };
        assert_eq!(ids(&d), ["cpu"], "{d:?}");
    }
    let d = schedule(&cluster(), &running, &p, &Config::default(), 10);
    let gpu = d.pending.iter().find(|e| e.id == "gpu").unwrap();
    assert_eq!((gpu.reason, gpu.estimated_start_ms), (Reason::Resources, Some(1000)), "{}", gpu.message);
}

#[test]
fn a_job_taking_what_the_reservation_needs_still_waits() {
    let running = held();
    // 2 CPUs are free now beside the first job; at 1000 the GPU job takes 6 of the 8 and the first job
    // 2: another 2 would delay it
    let p = vec![pend("gpu", 2, 6, 1, Some(5000)), pend("cpu", 0, 2, 2, None), pend("wide", 0, 2, 3, None)];
    let d = schedule(&cluster(), &running, &p, &Config::default(), 10);
    assert_eq!(ids(&d), ["cpu"], "{d:?}");
    let wide = d.pending.iter().find(|e| e.id == "wide").unwrap();
    assert_eq!(wide.reason, Reason::Backfill, "{}", wide.message);
    assert_eq!(wide.message, "starting now would delay the reserved start of gpu");
    // the same job, ending before the reserved start, backfills
    let mut short = p.clone();
    short[2].runtime_limit_ms = Some(500);
    assert_eq!(ids(&schedule(&cluster(), &running, &short, &Config::default(), 10)), ["cpu", "wide"]);
}
