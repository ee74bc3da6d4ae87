//! The team queues: their guarantees and limits (kept in the store, edited by admins without a
//! restart), and what they hold now.

use super::ServiceError;
use crate::state::AppState;
use gpuhub_api::{QueueView, QuotaView};
use gpuhub_core::Bytes;
use gpuhub_core::queue::{CreateQueueRequest, QueueDef, QueuePatch, limit_view};
use gpuhub_core::user::User;
use gpuhub_core::workload::{Workload, WorkloadState};
use gpuhub_sched::Quota;

fn quota_view(q: Quota) -> QuotaView {
    QuotaView { gpus: q.gpu_milli as f64 / 1000.0, cpus: q.cpu_milli as f64 / 1000.0, memory: Bytes(q.memory) }
}

/// How `q` looks to `caller`, with what `active` workloads of it hold and wait.
fn view(q: &QueueDef, active: &[&Workload], caller: &User) -> QueueView {
    let mut used = Quota::default();
    let (mut running, mut queued) = (0, 0);
    for w in active.iter().filter(|w| w.queue == q.name) {
        if w.state().holds_resources() {
            running += 1;
            used = used.plus(Quota::of_request(&gpuhub_controller::scheduling::request(w), w.size.max(1)));
        } else {
            queued += 1;
        }
    }
    let me = caller;
    let g = q.guarantee;
    QueueView {
        name: q.name.clone(),
        guarantee: quota_view(Quota { gpu_milli: g.gpu_milli, cpu_milli: g.cpu_milli, memory: g.memory }),
        borrow_limit: q.borrow_limit.map(limit_view),
        user_limit: q.user_limit.map(limit_view),
        weight: q.weight,
        used: quota_view(used),
        running,
        queued,
        open_to_you: me.is_admin() || q.members.as_ref().is_none_or(|m| m.contains(&me.username)),
        members: q.members.clone().filter(|_| me.is_admin()),
        priority_classes: q.priority_classes.clone(),
        team_gid: q.team_gid,
        max_runtime: q.max_runtime,
        max_disk: q.max_disk,
    }
}

/// Every team queue as `caller` sees it, by name (from the active workloads kept between requests).
pub async fn views(st: &AppState, caller: &User) -> Result<Vec<QueueView>, ServiceError> {
    let kept = st.active().await?;
    let active = counted(&kept);
    let queues = st.store.list_queues().await?;
    Ok(queues.iter().map(|q| view(q, &active, caller)).collect())
}

/// What a queue counts of the active workloads: the queued, starting and running (an image's pull
/// waits outside the queues).
fn counted(kept: &crate::state::active::Snapshot) -> Vec<&Workload> {
    kept.iter().map(|w| &**w).filter(|w| w.state() != WorkloadState::Pulling).collect()
}

/// `q` with `patch` applied, refused ([`super::Kind::Invalid`], naming the field) when the rules or the configured priority
/// classes do not allow it.
fn patched(st: &AppState, q: &QueueDef, patch: &QueuePatch) -> Result<QueueDef, ServiceError> {
    let out = q.patched(patch).map_err(|e| ServiceError::invalid(e.to_string()))?;
    if out.max_disk.is_some() && out.max_disk != q.max_disk {
        super::disk::enforced(st, "max_disk")?;
    }
    if let Some(c) = out.priority_classes.iter().find(|c| !st.config.priority_classes.contains_key(*c)) {
        let known: Vec<&str> = st.config.priority_classes.keys().map(String::as_str).collect();
        let known = if known.is_empty() { "none".to_owned() } else { known.join(", ") };
        return Err(ServiceError::invalid(format!(
            "invalid priority_classes: no class {c} in [priority_classes] (classes: {known})"
        )));
    }
    Ok(out)
}

/// Creates team queue `req` for admin `caller`; in force from the scheduler's next pass.
pub async fn create(st: &AppState, caller: &User, req: &CreateQueueRequest) -> Result<QueueView, ServiceError> {
    super::require_admin(caller)?;
    gpuhub_core::names::validate("queue", &req.name)
        .map_err(|e| ServiceError::invalid(format!("invalid name: {e}")))?;
    let q = patched(st, &QueueDef::open(&req.name), &req.patch())?;
    super::teams::claim_gid(st, &q).await?;
    st.store.insert_queue(&q, st.clock.now()).await?;
    tracing::info!(queue = %q.name, by = %caller.username, "queue created");
    st.controller.kick();
    Ok(view(&q, &[], caller))
}

/// Applies `patch` (a JSON merge patch) to queue `name` for admin `caller`, compare-and-set: two admins'
/// concurrent patches both apply, neither is lost. The scheduler's next pass, which this starts, holds
/// to it.
pub async fn patch(st: &AppState, caller: &User, name: &str, patch: &QueuePatch) -> Result<QueueView, ServiceError> {
    super::require_admin(caller)?;
    let q = loop {
        let Some(cur) = st.store.get_queue(name).await? else {
            return Err(ServiceError::not_found(format!("no queue named {name:?}")));
        };
        let q = patched(st, &cur, patch)?;
        if q.team_gid != cur.team_gid {
            super::teams::claim_gid(st, &q).await?;
        }
        if q == cur || st.store.update_queue_if(&cur, &q, st.clock.now()).await? {
            break q;
        }
    };
    tracing::info!(queue = %q.name, by = %caller.username, "queue changed");
    st.controller.kick();
    Ok(view(&q, &counted(&st.active().await?), caller))
}

/// Removes queue `name` for admin `caller`; refused ([`super::Kind::Conflict`]) while a workload in it is
/// queued or running.
pub async fn delete(st: &AppState, caller: &User, name: &str) -> Result<(), ServiceError> {
    super::require_admin(caller)?;
    st.store.delete_queue(name).await?;
    tracing::info!(queue = %name, by = %caller.username, "queue deleted");
    st.controller.kick();
    Ok(())
}
