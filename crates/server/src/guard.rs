//! The GPU memory guard: after every monitoring round, each running share of a GPU whose sharing mode
//! is `guard` (or `mps`, as a backstop) is judged by the pure rule (`gpuhub_monitor::GuardTracker`)
//! against the GPU memory its share was granted; a warning is logged, shown on the workload
//! (`gpu_guard` in its view) and posted to `[idle] webhook`; a stop goes to the controller with the
//! typed reason `gpu-memory-exceeded` and the figures. Warnings and stops are counted for `/metrics`.

use crate::state::AppState;
pub use crate::state::guard::GuardWatch;
use chrono::TimeDelta;
use gpuhub_core::node::{GpuSharing, NodeCapacity};
use gpuhub_core::stop::StopReason;
use gpuhub_core::workload::{Workload, WorkloadState};
use gpuhub_monitor::{GuardAction, GuardRule};
use gpuhub_store::WorkloadFilter;
use std::collections::HashMap;
use std::sync::atomic::Ordering;

/// The GPU memory a share of `w` was granted, per member, if the guard watches it: a share (not whole
/// GPUs) placed on a GPU whose mode is `guard` or `mps`. The grant is the memory asked for, else the
/// share of the GPU's memory (as the run's limits say, `controller::spec`).
pub fn grant(w: &Workload, nodes: &[NodeCapacity]) -> Option<u64> {
    let milli = w.resources.gpu_milli;
    if milli == 0 || w.resources.gpus > 0 {
        return None;
    }
    let uuid = w.members.iter().flat_map(|m| m.gpus.iter()).chain(w.gpus.iter()).next()?;
    let gpu = nodes.iter().flat_map(|n| &n.gpus).find(|g| &g.uuid == uuid)?;
    match gpu.sharing {
        Some(GpuSharing::Guard | GpuSharing::Mps) => {}
        Some(GpuSharing::Unenforced) | None => return None,
    }
    Some(gpuhub_core::workload::share_memory(milli, w.resources.gpu_memory, gpu.memory.0))
}

/// Whether any GPU of `nodes` is guarded (`guard` or `mps`): without one, no share has a grant to judge
/// and the running workloads need not be read.
pub fn any_guarded(nodes: &[NodeCapacity]) -> bool {
    nodes.iter().flat_map(|n| &n.gpus).any(|g| matches!(g.sharing, Some(GpuSharing::Guard | GpuSharing::Mps)))
}

/// Judges every monitoring round until `stop` completes.
pub async fn run(st: AppState, stop: impl std::future::Future<Output = ()>) {
    let grace = TimeDelta::seconds(i64::try_from(st.config.guard.grace_secs).unwrap_or(i64::MAX / 1000));
    let rule = GuardRule { grace };
    let judge = |st: AppState| async move { round(&st, &rule).await };
    crate::idle::after_each_round(&st, stop, "gpu memory guard", judge).await;
}

async fn round(st: &AppState, rule: &GuardRule) -> Result<(), gpuhub_store::StoreError> {
    let snapshot = st.metrics.get();
    let now = snapshot.at.unwrap_or_else(|| st.clock.now());
    let nodes = st.controller.inventory().capacities();
    let running = match any_guarded(&nodes) {
        true => {
            st.store.list_workloads(&WorkloadFilter { owner: None, states: Some(vec![WorkloadState::Running]) }).await?
        }
        false => Vec::new(),
    };
    let grants: HashMap<String, u64> = running.iter().filter_map(|w| Some((w.id.clone(), grant(w, &nodes)?))).collect();
    let actions = {
        let mut tracker = st.guard.tracker.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        tracker.observe(rule, &snapshot, &grants, now)
    };
    for action in actions {
        let id = match &action {
            GuardAction::Warn { workload_id, .. } | GuardAction::Stop { workload_id, .. } => workload_id,
        };
        let Some(w) = running.iter().find(|w| &w.id == id) else { continue };
        let who = format!("{}/{}", w.owner, w.name);
        match action {
            GuardAction::Warn { member, used, granted, stop_at, .. } => {
                st.guard.warnings.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(workload = %who, member, used, granted, %stop_at, "gpu memory guard: over its grant, owner warned");
                crate::idle::notify(
                    st,
                    serde_json::json!({"event": "gpu-memory-warning", "workload": who, "owner": w.owner,
                    "member": member, "used_bytes": used, "granted_bytes": granted, "stop_at": stop_at}),
                );
            }
            GuardAction::Stop { member, used, granted, since, detail, .. } => {
                st.guard.stops.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(workload = %who, member, used, granted, "gpu memory guard: stopping");
                crate::idle::notify(
                    st,
                    serde_json::json!({"event": "gpu-memory-stop", "workload": who, "owner": w.owner,
                    "member": member, "used_bytes": used, "granted_bytes": granted, "detail": detail}),
                );
                let reason = StopReason::GpuMemoryExceeded { used, granted, since, at: now, detail };
                let (controller, id) = (st.controller.clone(), w.id.clone());
                // the stop answers once the run has ended; the next round must not wait for it
                tokio::spawn(async move {
                    if let Err(e) = controller.stop(&id, reason).await {
                        tracing::warn!(workload = %who, error = %e, "gpu memory guard: the stop failed");
                    }
                });
            }
        }
    }
    Ok(())
}
