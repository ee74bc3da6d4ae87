//! The team queues: their guarantees and limits from the configuration, and what they hold now.

use crate::auth::Caller;
use crate::error::ApiError;
use crate::state::AppState;
use axum::extract::State;
use gpuhub_core::Bytes;
use gpuhub_core::api::{LimitView, Problem, QueueView, QuotaView};
use gpuhub_core::workload::WorkloadState;
use gpuhub_sched::Quota;
use gpuhub_store::WorkloadFilter;

fn view(q: Quota) -> QuotaView {
    QuotaView { gpus: q.gpu_milli as f64 / 1000.0, cpus: q.cpu_milli as f64 / 1000.0, memory: Bytes(q.memory) }
}

/// A limit: the components left unset in the configuration (unlimited) are absent.
fn limit(q: Quota) -> LimitView {
    let set = |v: u64| (v != u64::MAX).then_some(v);
    LimitView {
        gpus: set(q.gpu_milli).map(|v| v as f64 / 1000.0),
        cpus: set(q.cpu_milli).map(|v| v as f64 / 1000.0),
        memory: set(q.memory).map(Bytes),
    }
}

/// The configured team queues, with what each holds and how much waits. Everyone sees the queues and
/// whether they may use them; only admins see the member lists.
#[utoipa::path(get, path = "/api/v1/queues", tag = "queues", responses((status = 200, body = [QueueView]), (status = 401, body = Problem)))]
pub async fn list_queues(State(st): State<AppState>, caller: Caller) -> Result<axum::Json<Vec<QueueView>>, ApiError> {
    let states = vec![WorkloadState::Queued, WorkloadState::Starting, WorkloadState::Running];
    let active = st.store.list_workloads(&WorkloadFilter { owner: None, states: Some(states) }).await?;
    let me = &caller.0;
    let list = st
        .config
        .scheduler
        .queues
        .iter()
        .map(|q| {
            let mine = active.iter().filter(|w| w.queue == q.name);
            let mut used = Quota::default();
            let (mut running, mut queued) = (0, 0);
            for w in mine {
                if w.state.holds_resources() {
                    running += 1;
                    used = used.plus(Quota::of_request(&crate::scheduling::request(w), 1));
                } else {
                    queued += 1;
                }
            }
            let members = st.config.queue_members.get(&q.name);
            QueueView {
                name: q.name.clone(),
                guarantee: view(q.guarantee),
                borrow_limit: q.borrow_limit.map(limit),
                user_limit: q.user_limit.map(limit),
                weight: q.weight,
                used: view(used),
                running,
                queued,
                open_to_you: me.is_admin() || members.is_none_or(|m| m.contains(&me.username)),
                members: members.filter(|_| me.is_admin()).cloned(),
            }
        })
        .collect();
    Ok(axum::Json(list))
}
