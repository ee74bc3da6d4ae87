//! One sampling round: what the engine and the GPU sampler said, turned into a snapshot.

use crate::Monitor;
use chrono::{DateTime, Utc};
use futures::StreamExt;
use gpuhub_core::metrics::{GpuMetrics, MemberMetrics, MetricsSnapshot};
use gpuhub_core::workload::{Workload, WorkloadState};
use gpuhub_driver::MemberUsage;
use gpuhub_gpu::GpuSample;
use gpuhub_store::WorkloadFilter;
use std::collections::{HashMap, HashSet};

/// How many runs are measured at once.
const PARALLEL: usize = 16;

/// What one round gathered, before it becomes a snapshot.
#[derive(Debug)]
pub struct Round {
    at: DateTime<Utc>,
    workloads: Vec<Workload>,
    usage: HashMap<String, Vec<MemberUsage>>,
    gpus: Vec<GpuSample>,
}

impl Round {
    /// Asks the store for the running workloads, the engine for their members' use and the sampler for
    /// the GPUs, each bounded by the interval. What fails is left out (and logged).
    pub(crate) async fn new(m: &Monitor) -> Round {
        let at = m.clock.now();
        let limit = m.settings.interval.max(std::time::Duration::from_secs(1));
        let filter = WorkloadFilter { owner: None, states: Some(vec![WorkloadState::Running]) };
        let workloads = match m.store.list_workloads(&filter).await {
            Ok(w) => w,
            Err(e) => {
                tracing::warn!(error = %e, "monitor: cannot list running workloads");
                Vec::new()
            }
        };
        let mut usage = HashMap::new();
        if m.engine.capabilities().usage {
            let runs: Vec<(String, String)> =
                workloads.iter().filter_map(|w| Some((w.id.clone(), w.run_id.clone()?))).collect();
            let asks = runs.into_iter().map(|(id, run)| {
                let engine = m.engine.clone();
                async move {
                    match tokio::time::timeout(limit, engine.usage(&run)).await {
                        Ok(Ok(u)) => Some((id, u)),
                        Ok(Err(e)) => {
                            tracing::debug!(run, error = %e, "monitor: cannot measure a run");
                            None
                        }
                        Err(_) => {
                            tracing::warn!(run, "monitor: measuring a run took longer than the interval");
                            None
                        }
                    }
                }
            });
            let mut answers = futures::stream::iter(asks).buffer_unordered(PARALLEL);
            while let Some(a) = answers.next().await {
                if let Some((id, u)) = a {
                    usage.insert(id, u);
                }
            }
        }
        let mut gpus = Vec::new();
        if let Some(sampler) = m.gpus.clone() {
            match tokio::time::timeout(limit, tokio::task::spawn_blocking(move || sampler.sample())).await {
                Ok(Ok(Ok(s))) => gpus = s,
                Ok(Ok(Err(e))) => tracing::warn!(error = %e, "monitor: cannot sample the GPUs"),
                Ok(Err(e)) => tracing::warn!(error = %e, "monitor: the GPU sampler failed"),
                Err(_) => tracing::warn!("monitor: sampling the GPUs took longer than the interval"),
            }
        }
        Round { at, workloads, usage, gpus }
    }

    /// The snapshot: members with CPU in cores (from the previous round's CPU time), their GPUs' use and
    /// the GPU memory of their own processes; GPUs with their node and holders.
    pub(crate) fn finish(self, m: &mut Monitor) -> MetricsSnapshot {
        let by_uuid: HashMap<&str, &GpuSample> = self.gpus.iter().map(|g| (g.uuid.as_str(), g)).collect();
        let mut members = Vec::new();
        let mut seen = HashSet::new();
        let mut pids: Vec<((String, u32), &[u32])> = Vec::new();
        for (id, used) in &self.usage {
            pids.extend(used.iter().map(|u| ((id.clone(), u.index), u.pids.as_slice())));
        }
        let gpu_memory = attribute(&pids, &self.gpus);
        for w in &self.workloads {
            let (Some(run), Some(used)) = (w.run_id.as_deref(), self.usage.get(&w.id)) else { continue };
            for u in used {
                let key = (run.to_owned(), u.index);
                let cpu_cores = match m.cpu.get(&key) {
                    Some((before, then)) if self.at > *then && u.cpu_seconds >= *before => {
                        let secs = (self.at - *then).num_milliseconds() as f64 / 1000.0;
                        Some((u.cpu_seconds - before) / secs)
                    }
                    _ => None,
                };
                m.cpu.insert(key.clone(), (u.cpu_seconds, self.at));
                seen.insert(key);
                let member = w.members.iter().find(|x| x.index == u.index);
                let gpus: Vec<String> = match member {
                    Some(x) if !x.gpus.is_empty() => x.gpus.clone(),
                    _ if w.size <= 1 => w.gpus.clone(),
                    _ => Vec::new(),
                };
                let sampled: Vec<&GpuSample> = gpus.iter().filter_map(|g| by_uuid.get(g.as_str()).copied()).collect();
                let (gpu_utilization_pct, gpu_memory_used) = if gpus.is_empty() || sampled.len() < gpus.len() {
                    (None, None)
                } else {
                    let mean = sampled.iter().map(|g| g.utilization_pct).sum::<f64>() / sampled.len() as f64;
                    (Some(mean), Some(gpu_memory.get(&(w.id.clone(), u.index)).copied().unwrap_or(0)))
                };
                members.push(MemberMetrics {
                    workload_id: w.id.clone(),
                    workload: w.name.clone(),
                    owner: w.owner.clone(),
                    queue: if w.queue.is_empty() { "default".into() } else { w.queue.clone() },
                    member: u.index,
                    node: member.and_then(|x| x.node.clone()),
                    cpu_cores,
                    memory_used: u.memory_used.0,
                    memory_limit: u.memory_limit.map(|b| b.0),
                    gpus,
                    gpu_utilization_pct,
                    gpu_memory_used,
                });
            }
        }
        m.cpu.retain(|k, _| seen.contains(k));
        let nodes = m.inventory.snapshot().nodes;
        let node_of = |uuid: &str| {
            nodes
                .iter()
                .find(|n| n.capacity.gpus.iter().any(|g| g.uuid == uuid))
                .or_else(|| (nodes.len() == 1).then(|| &nodes[0]))
                .map(|n| n.capacity.name.clone())
                .unwrap_or_default()
        };
        let gpus = self
            .gpus
            .iter()
            .map(|g| GpuMetrics {
                node: node_of(&g.uuid),
                uuid: g.uuid.clone(),
                index: g.index,
                model: g.model.clone(),
                utilization_pct: g.utilization_pct,
                memory_used: g.memory_used.0,
                memory_total: g.memory_total.0,
                power_watts: g.power_watts,
                temperature_c: g.temperature_c,
                holders: self
                    .workloads
                    .iter()
                    .filter(|w| w.gpus.contains(&g.uuid))
                    .map(|w| format!("{}/{}", w.owner, w.name))
                    .collect(),
            })
            .collect();
        MetricsSnapshot { at: Some(self.at), members, gpus }
    }
}

/// GPU memory used by each member's own processes: every GPU process whose PID is one of the member's
/// counts for it (a process on two GPUs counts on both). Members are keyed by whatever the caller uses.
pub fn attribute<K: Clone + Eq + std::hash::Hash>(members: &[(K, &[u32])], gpus: &[GpuSample]) -> HashMap<K, u64> {
    let owner: HashMap<u32, &K> = members.iter().flat_map(|(k, pids)| pids.iter().map(move |p| (*p, k))).collect();
    let mut out: HashMap<K, u64> = HashMap::new();
    for g in gpus {
        for p in &g.processes {
            if let Some(k) = owner.get(&p.pid) {
                *out.entry((*k).clone()).or_default() += p.memory_used.0;
            }
        }
    }
    out
}
