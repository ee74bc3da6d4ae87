//! The team queues: their guarantees and limits (kept in the store, edited by admins without a
//! restart), and what they hold now.

use crate::auth::Caller;
use crate::error::{ApiError, ApiJson};
use crate::state::AppState;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use gpuhub_core::Bytes;
use gpuhub_core::api::{Problem, QueueView, QuotaView};
use gpuhub_core::queue::{CreateQueueRequest, QueueDef, QueuePatch, limit_view};
use gpuhub_core::workload::{Workload, WorkloadState};
use gpuhub_sched::Quota;
use gpuhub_store::WorkloadFilter;

fn quota_view(q: Quota) -> QuotaView {
    QuotaView { gpus: q.gpu_milli as f64 / 1000.0, cpus: q.cpu_milli as f64 / 1000.0, memory: Bytes(q.memory) }
}

/// How `q` looks to `caller`, with what `active` workloads of it hold and wait.
fn view(q: &QueueDef, active: &[Workload], caller: &Caller) -> QueueView {
    let mut used = Quota::default();
    let (mut running, mut queued) = (0, 0);
    for w in active.iter().filter(|w| w.queue == q.name) {
        if w.state.holds_resources() {
            running += 1;
            used = used.plus(Quota::of_request(&gpuhub_controller::scheduling::request(w), w.size.max(1)));
        } else {
            queued += 1;
        }
    }
    let me = &caller.0;
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
    }
}

/// Every team queue as `caller` sees it, by name.
pub(crate) async fn queue_views(st: &AppState, caller: &Caller) -> Result<Vec<QueueView>, ApiError> {
    let active = active(st, None).await?;
    let queues = st.store.list_queues().await?;
    Ok(queues.iter().map(|q| view(q, &active, caller)).collect())
}

async fn active(st: &AppState, queue: Option<&str>) -> Result<Vec<Workload>, ApiError> {
    let states = vec![WorkloadState::Queued, WorkloadState::Starting, WorkloadState::Running];
    let mut list = st.store.list_workloads(&WorkloadFilter { owner: None, states: Some(states) }).await?;
    if let Some(q) = queue {
        list.retain(|w| w.queue == q);
    }
    Ok(list)
}

/// `q` with `patch` applied, refused (422 naming the field) when the rules or the configured priority
/// classes do not allow it.
fn patched(st: &AppState, q: &QueueDef, patch: &QueuePatch) -> Result<QueueDef, ApiError> {
    let out = q.patched(patch).map_err(|e| ApiError::unprocessable(e.to_string()))?;
    if let Some(c) = out.priority_classes.iter().find(|c| !st.config.priority_classes.contains_key(*c)) {
        let known: Vec<&str> = st.config.priority_classes.keys().map(String::as_str).collect();
        let known = if known.is_empty() { "none".to_owned() } else { known.join(", ") };
        return Err(ApiError::unprocessable(format!(
            "invalid priority_classes: no class {c} in [priority_classes] (classes: {known})"
        )));
    }
    Ok(out)
}

/// The team queues, with what each holds and how much waits. Everyone sees the queues and whether they
/// may use them; only admins see the member lists.
/// By name, in pages.
#[utoipa::path(get, path = "/api/v1/queues", tag = "queues", params(super::paging::PageQuery),
    responses((status = 200, body = [QueueView]), (status = 400, body = Problem), (status = 401, body = Problem)))]
pub async fn list_queues(
    State(st): State<AppState>,
    caller: Caller,
    q: Result<axum::extract::Query<super::paging::PageQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<axum::response::Response, ApiError> {
    let page = super::paging::from_query(q)?;
    let views = queue_views(&st, &caller).await?;
    let (views, next) = super::paging::slice(views, |q| q.name.clone(), &page);
    Ok(super::paging::respond(views, next, "/api/v1/queues", &page))
}

/// Creates a team queue (admin); it is in force from the scheduler's next pass.
#[utoipa::path(post, path = "/api/v1/queues", tag = "queues", request_body = CreateQueueRequest,
    responses((status = 201, body = QueueView), (status = 401, body = Problem), (status = 403, body = Problem),
        (status = 409, body = Problem), (status = 422, body = Problem)))]
pub async fn create_queue(
    State(st): State<AppState>,
    caller: Caller,
    ApiJson(req): ApiJson<CreateQueueRequest>,
) -> Result<(StatusCode, axum::Json<QueueView>), ApiError> {
    caller.require_admin()?;
    gpuhub_core::names::validate("queue", &req.name)
        .map_err(|e| ApiError::unprocessable(format!("invalid name: {e}")))?;
    let q = patched(&st, &QueueDef::open(&req.name), &req.patch())?;
    crate::teams::claim_gid(&st, &q).await?;
    st.store.insert_queue(&q, st.clock.now()).await?;
    tracing::info!(queue = %q.name, by = %caller.0.username, "queue created");
    st.controller.kick();
    Ok((StatusCode::CREATED, axum::Json(view(&q, &[], &caller))))
}

/// Changes a team queue (admin), as a JSON merge patch: absent fields stay, `null` unsets (no
/// guarantee, no limit, everyone, no classes). In force from the scheduler's next pass, which this
/// starts: work held by a raised limit starts without a restart.
#[utoipa::path(patch, path = "/api/v1/queues/{name}", tag = "queues", params(("name" = String, Path)),
    request_body = QueuePatch,
    responses((status = 200, body = QueueView), (status = 401, body = Problem), (status = 403, body = Problem),
        (status = 404, body = Problem), (status = 422, body = Problem)))]
pub async fn patch_queue(
    State(st): State<AppState>,
    caller: Caller,
    Path(name): Path<String>,
    ApiJson(patch): ApiJson<QueuePatch>,
) -> Result<axum::Json<QueueView>, ApiError> {
    caller.require_admin()?;
    // compare-and-set: two admins' concurrent patches both apply, neither is lost
    let q = loop {
        let Some(cur) = st.store.get_queue(&name).await? else {
            return Err(ApiError::not_found(format!("no queue named {name:?}")));
        };
        let q = patched(&st, &cur, &patch)?;
        if q.team_gid != cur.team_gid {
            crate::teams::claim_gid(&st, &q).await?;
        }
        if q == cur || st.store.update_queue_if(&cur, &q, st.clock.now()).await? {
            break q;
        }
    };
    tracing::info!(queue = %q.name, by = %caller.0.username, "queue changed");
    st.controller.kick();
    Ok(axum::Json(view(&q, &active(&st, Some(&name)).await?, &caller)))
}

/// Removes a team queue (admin); refused with 409 while a workload in it is queued or running.
#[utoipa::path(delete, path = "/api/v1/queues/{name}", tag = "queues", params(("name" = String, Path)),
    responses((status = 204), (status = 401, body = Problem), (status = 403, body = Problem),
        (status = 404, body = Problem), (status = 409, body = Problem)))]
pub async fn delete_queue(
    State(st): State<AppState>,
    caller: Caller,
    Path(name): Path<String>,
) -> Result<StatusCode, ApiError> {
    caller.require_admin()?;
    st.store.delete_queue(&name).await?;
    tracing::info!(queue = %name, by = %caller.0.username, "queue deleted");
    st.controller.kick();
    Ok(StatusCode::NO_CONTENT)
}
