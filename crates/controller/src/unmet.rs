//! Naming what a workload that can never start asks for that nothing here meets: the part of its
//! constraint no GPU satisfies, the resource the node does not have, or the queue's most. Used at
//! submission (a 422) and for queued work that became impossible (a queue limit lowered, a GPU gone).

use crate::scheduling::{admissible, explanation};
use gpuhub_core::node::NodeCapacity;
use gpuhub_core::state::Explanation;
use gpuhub_core::workload::Workload;
use std::collections::BTreeMap;

/// The GPUs of `nodes` as people read them: `2× H200 141GiB`.
fn inventory(nodes: &[NodeCapacity]) -> String {
    let mut kinds: BTreeMap<(String, u64), usize> = BTreeMap::new();
    for g in nodes.iter().flat_map(|n| &n.gpus) {
        *kinds.entry((g.model.clone(), g.memory.0)).or_default() += 1;
    }
    if kinds.is_empty() {
        return "none".to_owned();
    }
    let list: Vec<String> =
        kinds.iter().map(|((m, mem), n)| format!("{n}× {m} {}", gpuhub_core::Bytes(*mem))).collect();
    list.join(", ")
}

/// Why `w` can never start on `nodes` under `config`, naming the part that no GPU, node or queue meets;
/// `None` when it could start on the empty nodes.
pub fn never(nodes: &[NodeCapacity], w: &Workload, config: &gpuhub_sched::Config) -> Option<String> {
    let why = admissible(nodes, w, config).err()?;
    if let Some(c) = &w.constraint {
        let mut free = w.clone();
        free.constraint = None;
        if admissible(nodes, &free, config).is_ok() {
            return Some(format!("no GPU here meets its constraint `{c}` (GPUs here: {})", inventory(nodes)));
        }
    }
    let r = &w.resources;
    let the = if nodes.len() == 1 { "the node has" } else { "the largest node has" };
    let cpus = nodes.iter().map(|n| n.cpus).max().unwrap_or_default();
    let memory = nodes.iter().map(|n| n.memory).max().unwrap_or_default();
    let gpus = nodes.iter().map(|n| n.gpus.len()).max().unwrap_or(0);
    let mut over = Vec::new();
    if r.cpu_milli.0 > cpus.0 {
        over.push(format!("{} CPUs ({the} {cpus})", r.cpu_milli));
    }
    if r.memory.0 > memory.0 {
        over.push(format!("{} of memory ({the} {memory})", r.memory));
    }
    if r.gpus as usize > gpus {
        over.push(format!("{} GPUs ({the} {gpus})", r.gpus));
    }
    if let Some(m) = r.gpu_memory.filter(|m| nodes.iter().flat_map(|n| &n.gpus).all(|g| g.memory.0 < m.0)) {
        over.push(format!("{m} of GPU memory (GPUs here: {})", inventory(nodes)));
    }
    if !over.is_empty() {
        let what = if nodes.len() == 1 { "this node has" } else { "any node here has" };
        return Some(format!("it asks for more than {what}: {}", over.join(", ")));
    }
    if !w.queue.is_empty() {
        let mut open = config.clone();
        open.queues.retain(|q| q.name != w.queue);
        if admissible(nodes, w, &open).is_ok() {
            return Some(format!("queue {} may never hold this much: {why}", w.queue));
        }
    }
    Some(why)
}

/// The explanation of a queued workload: the scheduler's, except that one which can never start says
/// so and names why (the scheduler may only see a queue limit or an empty-node misfit).
/// One held by a queue limit gets an estimated start when the runs it waits for have run-time limits.
pub fn explain(
    e: &gpuhub_sched::Explanation,
    w: Option<&Workload>,
    active: &[Workload],
    nodes: &[NodeCapacity],
    config: &gpuhub_sched::Config,
    now: chrono::DateTime<chrono::Utc>,
) -> Explanation {
    let mut out = explanation(e);
    let impossible = matches!(e.reason, gpuhub_sched::Reason::Unschedulable | gpuhub_sched::Reason::QueueLimit);
    if let (true, Some(w)) = (impossible, w) {
        let plain = gpuhub_sched::Config { usage: Default::default(), ..config.clone() };
        if let Some(why) = never(nodes, w, &plain) {
            out.reason = gpuhub_sched::Reason::Unschedulable.as_str().to_owned();
            out.message = format!("can never start here: {why}");
            out.estimated_start = None;
        } else if e.reason == gpuhub_sched::Reason::QueueLimit && out.estimated_start.is_none() {
            let spec = config.queues.iter().find(|q| q.name == w.queue);
            out.estimated_start = spec.and_then(|spec| crate::estimate::queue_limit_start(w, active, spec, now));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use gpuhub_core::workload::Resources;
    use gpuhub_core::{Bytes, CpuMilli};

    fn node() -> NodeCapacity {
        NodeCapacity::uniform("n", CpuMilli(8000), Bytes(32 << 30), 2, "A100", Bytes(80 << 30), "G")
    }

    fn job(gpus: u32) -> Workload {
        let at = chrono::DateTime::from_timestamp(0, 0).unwrap();
        let mut w = crate::testutil::job("x", at);
        w.resources = Resources { gpus, ..Resources::default() };
        w
    }

    #[test]
    fn names_the_part_nothing_meets() {
        let (n, cfg) = (node(), gpuhub_sched::Config::default());
        assert_eq!(never(std::slice::from_ref(&n), &job(1), &cfg), None);
        let mut h100 = job(1);
        h100.constraint = Some("gpu.model == \"H100\"".into());
        let why = never(std::slice::from_ref(&n), &h100, &cfg).unwrap();
        assert_eq!(why, "no GPU here meets its constraint `gpu.model == \"H100\"` (GPUs here: 2× A100 80GiB)");
        let why = never(std::slice::from_ref(&n), &job(4), &cfg).unwrap();
        assert_eq!(why, "it asks for more than this node has: 4 GPUs (the node has 2)");
        let mut big = job(0);
        big.resources.memory = Bytes(64 << 30);
        assert!(never(std::slice::from_ref(&n), &big, &cfg).unwrap().contains("64GiB of memory (the node has 32GiB)"));
        // a queue that may hold one GPU at most
        let mut two = job(2);
        two.queue = "q".into();
        let limited = gpuhub_sched::Config {
            queues: vec![gpuhub_sched::QueueSpec {
                borrow_limit: Some(Default::default()),
                guarantee: gpuhub_sched::Quota { gpu_milli: 1000, cpu_milli: 8000, memory: 32 << 30 },
                ..gpuhub_sched::QueueSpec::open("q")
            }],
            ..Default::default()
        };
        assert!(
            never(std::slice::from_ref(&n), &two, &limited).unwrap().starts_with("queue q may never hold this much: ")
        );
    }
}
