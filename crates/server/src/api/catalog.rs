//! The node's resources and the image catalog.

use super::paging::{self, PageQuery};
use crate::auth::Caller;
use crate::error::{ApiError, ApiJson};
use crate::state::AppState;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Query, State};
use axum::http::StatusCode;
use axum::response::Response;
use gpuhub_core::api::{GpuHolder, GpuShareView, GpuView, ImageEntry, NodeView, Problem};
use gpuhub_core::workload::{Workload, WorkloadState};
use gpuhub_core::{Bytes, CpuMilli, names};
use gpuhub_store::WorkloadFilter;

/// The engine's nodes: CPUs, memory and GPUs, and who holds each GPU (whole, or shares of it). When the
/// engine cannot be reached its error is the answer (503), naming it.
#[utoipa::path(get, path = "/api/v1/nodes", tag = "nodes", params(PageQuery),
    responses((status = 200, body = [NodeView]), (status = 400, body = Problem), (status = 401, body = Problem),
        (status = 503, body = Problem)))]
pub async fn list_nodes(
    State(st): State<AppState>,
    _caller: Caller,
    q: Result<Query<PageQuery>, QueryRejection>,
) -> Result<Response, ApiError> {
    let page = paging::from_query(q)?;
    let nodes = node_views(&st).await?;
    let (nodes, next) = paging::slice(nodes, |n| n.name.clone(), &page);
    Ok(paging::respond(nodes, next, "/api/v1/nodes", &page))
}

/// Every node as [`list_nodes`] shows it, or the engine's error (503).
pub(crate) async fn node_views(st: &AppState) -> Result<Vec<NodeView>, ApiError> {
    let snapshot = st.controller.inventory().snapshot();
    if let Some(e) = &snapshot.error {
        let mut err = ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            format!(
                "the {} engine's nodes cannot be read: {e}; workloads stay queued until it answers",
                st.engine.name()
            ),
        );
        err.retry_after = Some(crate::error::DATABASE_RETRY_AFTER_SECS);
        return Err(err);
    }
    let filter = WorkloadFilter { owner: None, states: Some(vec![WorkloadState::Starting, WorkloadState::Running]) };
    let active = st.store.list_workloads(&filter).await?;
    Ok(snapshot.nodes.iter().map(|n| node_view(n, &active, snapshot.nodes.len())).collect())
}

/// What runs on a node: each member placed there (a row from before members were kept runs on the only
/// node), with its GPUs.
fn on_node<'a>(node: &'a str, w: &'a Workload, single: bool) -> impl Iterator<Item = &'a [String]> + 'a {
    let legacy = (w.members.is_empty() && single).then_some(w.gpus.as_slice());
    let members = w.members.iter().filter(move |m| m.node.as_deref() == Some(node)).map(|m| m.gpus.as_slice());
    legacy.into_iter().chain(members)
}

fn node_view(n: &gpuhub_driver::EngineNode, active: &[Workload], count: usize) -> NodeView {
    let c = &n.capacity;
    let single = count == 1;
    let (mut cpu_used, mut mem_used) = (0u64, 0u64);
    let mut held: Vec<(&Workload, &str)> = Vec::new();
    for w in active {
        for gpus in on_node(&c.name, w, single) {
            cpu_used += w.resources.cpu_milli.0;
            mem_used += w.resources.memory.0;
            held.extend(gpus.iter().map(|g| (w, g.as_str())));
        }
    }
    let gpus = c
        .gpus
        .iter()
        .map(|g| GpuView {
            uuid: g.uuid.clone(),
            index: g.index,
            model: g.model.clone(),
            memory: g.memory,
            holder: held
                .iter()
                .find(|(w, u)| w.resources.gpu_milli == 0 && *u == g.uuid)
                .map(|(w, _)| GpuHolder { owner: w.owner.clone(), workload: w.name.clone() }),
            shares: held
                .iter()
                .filter(|(w, u)| w.resources.gpu_milli > 0 && *u == g.uuid)
                .map(|(w, _)| GpuShareView {
                    owner: w.owner.clone(),
                    workload: w.name.clone(),
                    milli: w.resources.gpu_milli,
                    memory: w.resources.gpu_memory,
                })
                .collect(),
            sharing: g.sharing,
        })
        .collect();
    NodeView {
        name: c.name.clone(),
        state: n.state.clone(),
        cpus: c.cpus.cores(),
        cpus_free: CpuMilli(c.cpus.0.saturating_sub(cpu_used)).cores(),
        memory: c.memory,
        memory_free: Bytes(c.memory.0.saturating_sub(mem_used)),
        gpus,
    }
}

/// The image catalog, by name, in pages.
#[utoipa::path(get, path = "/api/v1/images", tag = "images", params(PageQuery),
    responses((status = 200, body = [ImageEntry]), (status = 400, body = Problem), (status = 401, body = Problem)))]
pub async fn list_images(
    State(st): State<AppState>,
    _caller: Caller,
    q: Result<Query<PageQuery>, QueryRejection>,
) -> Result<Response, ApiError> {
    let page = paging::from_query(q)?;
    let (images, next) = paging::slice(st.store.list_images().await?, |i| i.name.clone(), &page);
    Ok(paging::respond(images, next, "/api/v1/images", &page))
}

/// Adds or replaces a catalog entry (admin). The image must be a reference of the distribution spec's
/// grammar (`[registry[:port]/]path[:tag][@digest]`) and present in the container engine.
#[utoipa::path(post, path = "/api/v1/images", tag = "images", request_body = ImageEntry,
    responses((status = 201, body = ImageEntry), (status = 403, body = Problem), (status = 422, body = Problem)))]
pub async fn create_image(
    State(st): State<AppState>,
    caller: Caller,
    ApiJson(entry): ApiJson<ImageEntry>,
) -> Result<(StatusCode, axum::Json<ImageEntry>), ApiError> {
    caller.require_admin()?;
    names::validate("image", &entry.name)?;
    for app in &entry.apps {
        app.validate()?;
    }
    if let Err(why) = gpuhub_core::image::check_reference(&entry.image) {
        return Err(ApiError::unprocessable(format!(
            "invalid image: {:?} is not an image reference: {why}",
            entry.image
        ))
        .at("image"));
    }
    if !st.engine.image_exists(&entry.image).await? {
        return Err(ApiError::unprocessable(format!(
            "invalid image: the container engine has no image {:?} (build or pull it on the node first)",
            entry.image
        )));
    }
    st.store.upsert_image(&entry).await?;
    Ok((StatusCode::CREATED, axum::Json(entry)))
}

/// Removes a catalog entry (admin). Workloads made from it keep their image reference.
#[utoipa::path(delete, path = "/api/v1/images/{name}", tag = "images", params(("name" = String, Path)),
    responses((status = 204), (status = 403, body = Problem), (status = 404, body = Problem)))]
pub async fn delete_image(
    State(st): State<AppState>,
    caller: Caller,
    axum::extract::Path(name): axum::extract::Path<String>,
) -> Result<StatusCode, ApiError> {
    caller.require_admin()?;
    st.store.delete_image(&name).await?;
    Ok(StatusCode::NO_CONTENT)
}
