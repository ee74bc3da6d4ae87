//! The simple admission rule of a single node: a workload starts only when its CPUs, memory and GPUs fit
//! into what is free; the queue is served by priority, then submit time. A GPU is never given to two
//! workloads. The full scheduler (`gpuhub-sched`) replaces this in the server; this stays as the reference
//! rule the scheduler's single-node behaviour is tested against.

use crate::node::NodeCapacity;
use crate::workload::Resources;
use crate::{Bytes, CoreError, CpuMilli};
use chrono::{DateTime, Utc};
use std::collections::BTreeSet;

/// A workload that holds resources now.
#[derive(Debug, Clone)]
pub struct Holding<'a> {
    pub resources: Resources,
    pub gpus: &'a [String],
}

/// A workload that waits.
#[derive(Debug, Clone)]
pub struct Waiting<'a> {
    pub id: &'a str,
    pub resources: Resources,
    pub priority: i32,
    pub queued_at: DateTime<Utc>,
}

/// The decision to start `id` with these GPUs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Start {
    pub id: String,
    pub gpus: Vec<String>,
}

/// What is still free on the node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Free {
    pub cpus: CpuMilli,
    pub memory: Bytes,
    /// Free GPU UUIDs, in index order.
    pub gpus: Vec<String>,
}

/// What is free on `node` given what `holding` holds.
pub fn free(node: &NodeCapacity, holding: &[Holding<'_>]) -> Free {
    let held: BTreeSet<&str> = holding.iter().flat_map(|h| h.gpus.iter().map(String::as_str)).collect();
    let cpu: u64 = holding.iter().map(|h| h.resources.cpu_milli.0).sum();
    let mem: u64 = holding.iter().map(|h| h.resources.memory.0).sum();
    Free {
        cpus: CpuMilli(node.cpus.0.saturating_sub(cpu)),
        memory: Bytes(node.memory.0.saturating_sub(mem)),
        gpus: node.gpus.iter().filter(|g| !held.contains(g.uuid.as_str())).map(|g| g.uuid.clone()).collect(),
    }
}

/// Refuses a request that could never run on this node, even when it is empty.
pub fn check_fits_node(node: &NodeCapacity, r: &Resources) -> Result<(), CoreError> {
    if r.gpus as usize > node.gpus.len() {
        return Err(CoreError::invalid(
            "resources.gpus",
            format!("{} GPUs requested but node {} has {}", r.gpus, node.name, node.gpus.len()),
        ));
    }
    if r.gpu_milli > 0 && node.gpus.is_empty() {
        return Err(CoreError::invalid(
            "resources.gpu_milli",
            format!("a share of a GPU requested but node {} has no GPUs", node.name),
        ));
    }
    if let Some(m) = r.gpu_memory {
        if node.gpus.iter().all(|g| g.memory.0 > 0 && g.memory < m) {
            let most = node.gpus.iter().map(|g| g.memory).max().unwrap_or_default();
            return Err(CoreError::invalid(
                "resources.gpu_memory",
                format!("{m} of GPU memory requested but the largest GPU of node {} has {most}", node.name),
            ));
        }
    }
    if r.cpu_milli > node.cpus {
        return Err(CoreError::invalid(
            "resources.cpus",
            format!("{} CPUs requested but node {} has {}", r.cpu_milli, node.name, node.cpus),
        ));
    }
    if r.memory > node.memory {
        return Err(CoreError::invalid(
            "resources.memory",
            format!("{} requested but node {} has {}", r.memory, node.name, node.memory),
        ));
    }
    Ok(())
}

/// Orders the queue (priority high first, then queued earlier, then id) and starts, in that order, every
/// workload that fits into what is left. Returns the starts and, for each workload left waiting, why.
pub fn admit(mut free: Free, queue: &[Waiting<'_>]) -> (Vec<Start>, Vec<(String, String)>) {
    let mut order: Vec<&Waiting<'_>> = queue.iter().collect();
    order.sort_by(|a, b| b.priority.cmp(&a.priority).then(a.queued_at.cmp(&b.queued_at)).then(a.id.cmp(b.id)));
    let mut starts = Vec::new();
    let mut waits = Vec::new();
    for w in order {
        let r = &w.resources;
        let reason = if (r.gpus as usize) > free.gpus.len() {
            Some(format!("waiting for {} GPU(s), {} free", r.gpus, free.gpus.len()))
        } else if r.cpu_milli > free.cpus {
            Some(format!("waiting for {} CPUs, {} free", r.cpu_milli, free.cpus))
        } else if r.memory > free.memory {
            Some(format!("waiting for {} memory, {} free", r.memory, free.memory))
        } else {
            None
        };
        match reason {
            Some(why) => waits.push((w.id.to_owned(), why)),
            None => {
                let gpus: Vec<String> = free.gpus.drain(..r.gpus as usize).collect();
                free.cpus.0 -= r.cpu_milli.0;
                free.memory.0 -= r.memory.0;
                starts.push(Start { id: w.id.to_owned(), gpus });
            }
        }
    }
    (starts, waits)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::node::GpuDevice;
    use crate::quantity::GIB;

    fn node(gpus: u32) -> NodeCapacity {
        NodeCapacity {
            name: "n".into(),
            cpus: CpuMilli(8000),
            memory: Bytes(32 * GIB),
            gpus: (0..gpus)
                .map(|i| GpuDevice {
                    uuid: format!("GPU-{i}"),
                    index: i,
                    model: "H200".into(),
                    memory: Bytes(141 * GIB),
                    device: None,
                    sharing: None,
                })
                .collect(),
            labels: Default::default(),
        }
    }
    fn res(cpu: u64, gpus: u32) -> Resources {
        Resources { cpu_milli: CpuMilli(cpu), memory: Bytes(GIB), gpus, ..Resources::default() }
    }
    fn t(s: i64) -> DateTime<Utc> {
        DateTime::from_timestamp(s, 0).unwrap()
    }

    #[test]
    fn third_gpu_job_waits() {
        let n = node(2);
        let held = ["GPU-0".to_string()];
        let f = free(&n, &[Holding { resources: res(1000, 1), gpus: &held }]);
        assert_eq!(f.gpus, vec!["GPU-1".to_string()]);
        let q = [
            Waiting { id: "b", resources: res(1000, 1), priority: 0, queued_at: t(2) },
            Waiting { id: "a", resources: res(1000, 1), priority: 0, queued_at: t(1) },
        ];
        let (starts, waits) = admit(f, &q);
        assert_eq!(starts, vec![Start { id: "a".into(), gpus: vec!["GPU-1".into()] }]);
        assert_eq!(waits.len(), 1);
        assert!(waits[0].1.contains("GPU"));
    }

    #[test]
    fn priority_first_and_no_gpu_twice() {
        let n = node(2);
        let f = free(&n, &[]);
        let q = [
            Waiting { id: "low", resources: res(1000, 2), priority: 0, queued_at: t(1) },
            Waiting { id: "high", resources: res(1000, 1), priority: 5, queued_at: t(2) },
            Waiting { id: "mid", resources: res(1000, 1), priority: 1, queued_at: t(3) },
        ];
        let (starts, _) = admit(f, &q);
        let ids: Vec<_> = starts.iter().map(|s| s.id.as_str()).collect();
        assert_eq!(ids, ["high", "mid"]);
        let all: BTreeSet<_> = starts.iter().flat_map(|s| s.gpus.clone()).collect();
        assert_eq!(all.len(), 2);
    }

    #[test]
    fn never_fits() {
        let n = node(2);
        assert!(check_fits_node(&n, &res(1000, 99)).unwrap_err().to_string().contains("99 GPUs"));
        assert!(check_fits_node(&n, &res(100_000, 0)).is_err());
        assert!(check_fits_node(&n, &res(1000, 2)).is_ok());
        let share = |milli, memory| Resources { gpu_milli: milli, gpu_memory: memory, ..res(1000, 0) };
        assert!(check_fits_node(&n, &share(500, Some(Bytes(80 * GIB)))).is_ok());
        let e = check_fits_node(&n, &share(500, Some(Bytes(200 * GIB)))).unwrap_err().to_string();
        assert!(e.contains("resources.gpu_memory") && e.contains("141GiB"), "{e}");
        let e = check_fits_node(&node(0), &share(500, None)).unwrap_err().to_string();
        assert!(e.contains("no GPUs"), "{e}");
    }
}
