//! The translation between the store's workloads and the scheduler's snapshot (`gpuhub-sched`), which
//! makes every placement decision of the server.

use chrono::{DateTime, Utc};
use gpuhub_core::node::{GpuSharing, NodeCapacity};
use gpuhub_core::state::Explanation;
use gpuhub_core::workload::Workload;
use gpuhub_sched::{Cluster, Gpu, GpuRequest, GpuShare, Node, Pending, Placement, Request, Running, WHOLE};

/// The engine's nodes as the scheduler sees them.
pub fn cluster(nodes: &[NodeCapacity]) -> Cluster {
    Cluster {
        nodes: nodes
            .iter()
            .map(|node| Node {
                name: node.name.clone(),
                cpu_milli: node.cpus.0,
                memory: node.memory.0,
                labels: node.labels.clone(),
                gpus: node
                    .gpus
                    .iter()
                    .map(|g| Gpu {
                        uuid: g.uuid.clone(),
                        index: g.index,
                        model: g.model.clone(),
                        memory: g.memory.0,
                        single_user: g.sharing == Some(GpuSharing::Mps),
                    })
                    .collect(),
            })
            .collect(),
    }
}

/// What a workload asks of the scheduler.
pub fn request(w: &Workload) -> Request {
    let r = &w.resources;
    Request {
        cpu_milli: r.cpu_milli.0,
        memory: r.memory.0,
        gpu: match (r.gpus, r.gpu_milli) {
            (0, 0) => GpuRequest::None,
            (0, milli) => GpuRequest::Fraction { milli, memory: r.gpu_memory.map(|b| b.0) },
            (count, _) => GpuRequest::Whole { count },
        },
        gpu_models: Vec::new(),
        constraint: w.constraint.clone(),
    }
}

fn limit_ms(w: &Workload) -> Option<i64> {
    w.runtime_limit.map(|s| i64::try_from(s.0.saturating_mul(1000)).unwrap_or(i64::MAX))
}

/// A queued workload.
pub fn pending(w: &Workload) -> Pending {
    Pending {
        id: w.id.clone(),
        queue: w.queue.clone(),
        user: w.owner.clone(),
        priority: w.priority,
        submit_ms: w.queued_at.timestamp_millis(),
        request: request(w),
        members: w.size.max(1),
        runtime_limit_ms: limit_ms(w),
    }
}

/// Whether `w` could ever start: alone on the empty nodes, under the queue limits of `config` (no
/// bookings, no usage). The error is the scheduler's explanation, for a 422.
pub fn admissible(nodes: &[NodeCapacity], w: &Workload, config: &gpuhub_sched::Config) -> Result<(), String> {
    let empty = gpuhub_sched::Config {
        usage: Default::default(),
        reservations: Vec::new(),
        preemption: gpuhub_sched::Preemption { enabled: false, ..config.preemption },
        ..config.clone()
    };
    let d = gpuhub_sched::schedule(&cluster(nodes), &[], &[pending(w)], &empty, 0);
    match d.pending.first() {
        None => Ok(()),
        Some(e) => Err(e.message.clone()),
    }
}

/// A workload holding resources, with each member's node and GPUs (a row from before members were
/// kept holds its GPUs on `default_node`).
pub fn running(default_node: &str, w: &Workload, stopping: bool) -> Running {
    let share = |uuid: &String| match w.resources.gpu_milli {
        0 => GpuShare { uuid: uuid.clone(), milli: WHOLE, memory: 0 },
        milli => GpuShare { uuid: uuid.clone(), milli, memory: w.resources.gpu_memory.map_or(0, |b| b.0) },
    };
    let placement = |node: Option<&String>, gpus: &[String]| Placement {
        node: node.cloned().unwrap_or_else(|| default_node.to_owned()),
        gpus: gpus.iter().map(share).collect(),
        cpu_milli: w.resources.cpu_milli.0,
        memory: w.resources.memory.0,
    };
    let placements = if w.members.is_empty() {
        vec![placement(None, &w.gpus)]
    } else {
        w.members.iter().map(|m| placement(m.node.as_ref(), &m.gpus)).collect()
    };
    Running {
        id: w.id.clone(),
        queue: w.queue.clone(),
        user: w.owner.clone(),
        priority: w.priority,
        started_ms: w.started_at.unwrap_or(w.queued_at).timestamp_millis(),
        runtime_limit_ms: limit_ms(w),
        placements,
        preemptible: true,
        long_running: w.kind == gpuhub_core::workload::WorkloadKind::Service,
        stopping,
    }
}

/// The new run of a service's rolling update, holding its own resources beside the serving run's (it
/// is never a preemption's victim: the update ends by itself within its deadline).
pub fn rollout(default_node: &str, w: &Workload) -> Option<Running> {
    let r = w.service.as_ref()?.rollout.as_ref()?;
    let mut beside = w.clone();
    beside.members = r.members.clone();
    beside.gpus = Vec::new();
    let mut run = running(default_node, &beside, false);
    run.id = format!("{}#update", w.id);
    run.started_ms = r.since.timestamp_millis();
    run.preemptible = false;
    Some(run)
}

/// The running workloads past their run-time limit at `now`, and the next time another one will be.
pub fn over_limit<'a>(
    active: impl IntoIterator<Item = &'a Workload>,
    now: DateTime<Utc>,
) -> (Vec<&'a Workload>, Option<DateTime<Utc>>) {
    let mut over = Vec::new();
    let mut next: Option<DateTime<Utc>> = None;
    for w in active {
        let (Some(limit), Some(started), true) = (w.runtime_limit, w.started_at, w.state().holds_resources()) else {
            continue;
        };
        let secs = i64::try_from(limit.0).unwrap_or(i64::MAX);
        let Some(end) = chrono::TimeDelta::try_seconds(secs).and_then(|d| started.checked_add_signed(d)) else {
            continue;
        };
        if end <= now {
            over.push(w);
        } else {
            next = Some(next.map_or(end, |n| n.min(end)));
        }
    }
    (over, next)
}

fn quota_of(l: gpuhub_core::queue::Limit) -> gpuhub_sched::Quota {
    gpuhub_sched::Quota {
        gpu_milli: l.gpu_milli.unwrap_or(u64::MAX),
        cpu_milli: l.cpu_milli.unwrap_or(u64::MAX),
        memory: l.memory.unwrap_or(u64::MAX),
    }
}

/// The scheduler's form of a team queue.
pub fn queue_spec(q: &gpuhub_core::queue::QueueDef) -> gpuhub_sched::QueueSpec {
    gpuhub_sched::QueueSpec {
        name: q.name.clone(),
        guarantee: gpuhub_sched::Quota {
            gpu_milli: q.guarantee.gpu_milli,
            cpu_milli: q.guarantee.cpu_milli,
            memory: q.guarantee.memory,
        },
        borrow_limit: q.borrow_limit.map(quota_of),
        weight: q.weight,
        user_limit: q.user_limit.map(quota_of),
    }
}

/// The scheduler's form of a booking made through the API.
pub fn reservation(r: gpuhub_core::reservation::ReservationView) -> gpuhub_sched::Reservation {
    gpuhub_sched::Reservation {
        id: r.id,
        queue: r.queue,
        gpus: r.gpus,
        model: r.model,
        start_ms: r.start.timestamp_millis(),
        end_ms: r.end.timestamp_millis(),
    }
}

/// The API's form of an explanation.
pub fn explanation(e: &gpuhub_sched::Explanation) -> Explanation {
    Explanation {
        reason: e.reason.as_str().to_owned(),
        message: e.message.clone(),
        position: e.position,
        estimated_start: e.estimated_start_ms.and_then(DateTime::from_timestamp_millis),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use gpuhub_core::workload::{Resources, WorkloadState};
    use gpuhub_core::{Bytes, CpuMilli};

    fn node() -> NodeCapacity {
        NodeCapacity::uniform("n", CpuMilli(4000), Bytes(8 << 30), 2, "H200", Bytes(1 << 30), "G")
    }

    fn w(id: &str, gpus: u32, state: WorkloadState, held: &[&str], t: i64) -> Workload {
        let at = DateTime::from_timestamp(t, 0).unwrap();
        let mut w = crate::testutil::job(id, at).restore(state);
        w.resources = Resources { cpu_milli: CpuMilli(1000), memory: Bytes(1 << 30), gpus, ..Resources::default() };
        w.gpus = held.iter().map(|s| s.to_string()).collect();
        w
    }

    #[test]
    fn third_gpu_job_waits_with_an_explanation() {
        let n = node();
        let held = [w("a", 1, WorkloadState::Running, &["G0"], 1), w("b", 1, WorkloadState::Running, &["G1"], 2)];
        let queued = [w("c", 1, WorkloadState::Queued, &[], 3), w("d", 0, WorkloadState::Queued, &[], 4)];
        let running: Vec<_> = held.iter().map(|x| running(&n.name, x, false)).collect();
        let pending: Vec<_> = queued.iter().map(pending).collect();
        let d = gpuhub_sched::schedule(
            &cluster(std::slice::from_ref(&n)),
            &running,
            &pending,
            &gpuhub_sched::Config::default(),
            10_000,
        );
        // the CPU-only job fits and starts; the GPU job waits, first in line, for a GPU
        assert_eq!(d.starts.iter().map(|s| s.id.as_str()).collect::<Vec<_>>(), ["d"]);
        let e = explanation(&d.pending[0]);
        assert_eq!(d.pending[0].id, "c");
        assert_eq!(e.position, 1);
        assert!(e.message.contains("GPU"), "{e:?}");
    }

    #[test]
    fn a_freed_gpu_goes_to_the_waiting_job() {
        let n = node();
        let held = [w("b", 1, WorkloadState::Running, &["G1"], 2)];
        let queued = [w("c", 1, WorkloadState::Queued, &[], 3)];
        let running: Vec<_> = held.iter().map(|x| running(&n.name, x, false)).collect();
        let d = gpuhub_sched::schedule(
            &cluster(std::slice::from_ref(&n)),
            &running,
            &[pending(&queued[0])],
            &gpuhub_sched::Config::default(),
            0,
        );
        assert_eq!(d.starts[0].placements[0].gpus[0].uuid, "G0");
    }

    #[test]
    fn shares_and_limits_reach_the_scheduler() {
        let n = node();
        let mut a = w("a", 0, WorkloadState::Running, &["G0"], 100);
        a.resources.gpu_milli = 300;
        a.resources.gpu_memory = Some(Bytes(1 << 29));
        a.started_at = Some(DateTime::from_timestamp(100, 0).unwrap());
        a.runtime_limit = Some(gpuhub_core::Seconds(60));
        a.queue = "vision".into();
        let r = running(&n.name, &a, false);
        assert_eq!(r.placements[0].gpus[0], GpuShare { uuid: "G0".into(), milli: 300, memory: 1 << 29 });
        assert_eq!((r.queue.as_str(), r.runtime_limit_ms), ("vision", Some(60_000)));
        let p = pending(&a);
        assert_eq!(p.request.gpu, GpuRequest::Fraction { milli: 300, memory: Some(1 << 29) });
        // past its limit at 160 s, not before; the next deadline is reported
        let at = |s| DateTime::from_timestamp(s, 0).unwrap();
        let (over, next) = over_limit([&a], at(159));
        assert!(over.is_empty());
        assert_eq!(next, Some(at(160)));
        let (over, next) = over_limit([&a], at(160));
        assert_eq!((over.len(), next), (1, None));
        // a queued workload has no deadline
        a = a.restore(WorkloadState::Queued);
        assert_eq!(over_limit([&a], at(1000)).0.len(), 0);
    }

    #[test]
    fn admissible_only_when_it_could_ever_start() {
        let n = node();
        let mut x = w("x", 1, WorkloadState::Queued, &[], 0);
        let cfg = gpuhub_sched::Config::default();
        assert!(admissible(std::slice::from_ref(&n), &x, &cfg).is_ok());
        x.constraint = Some("gpu.model == \"A100\"".into());
        assert!(admissible(std::slice::from_ref(&n), &x, &cfg).is_err());
        x.constraint = Some("gpu.model == \"H200\"".into());
        assert!(admissible(std::slice::from_ref(&n), &x, &cfg).is_ok());
        // a queue that may hold at most 1 GPU can never start a 2-GPU job
        x.resources.gpus = 2;
        x.queue = "q".into();
        let limited = gpuhub_sched::Config {
            queues: vec![gpuhub_sched::QueueSpec {
                borrow_limit: Some(Default::default()),
                guarantee: gpuhub_sched::Quota { gpu_milli: 1000, cpu_milli: 8000, memory: 8 << 30 },
                ..gpuhub_sched::QueueSpec::open("q")
            }],
            ..Default::default()
        };
        assert!(admissible(std::slice::from_ref(&n), &x, &cfg).is_ok());
        assert!(admissible(std::slice::from_ref(&n), &x, &limited).is_err());
    }
}
