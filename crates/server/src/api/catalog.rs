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
use gpuhub_core::workload::WorkloadState;
use gpuhub_core::{Bytes, CpuMilli, names};
use gpuhub_store::WorkloadFilter;

/// The node: CPUs, memory and GPUs, and who holds each GPU (whole, or shares of it).
#[utoipa::path(get, path = "/api/v1/nodes", tag = "nodes", params(PageQuery),
    responses((status = 200, body = [NodeView]), (status = 400, body = Problem), (status = 401, body = Problem)))]
pub async fn list_nodes(
    State(st): State<AppState>,
    _caller: Caller,
    q: Result<Query<PageQuery>, QueryRejection>,
) -> Result<Response, ApiError> {
    let page = paging::from_query(q)?;
    let filter = WorkloadFilter { owner: None, states: Some(vec![WorkloadState::Starting, WorkloadState::Running]) };
    let active = st.store.list_workloads(&filter).await?;
    let n = &st.node;
    let cpu_used: u64 = active.iter().map(|w| w.resources.cpu_milli.0).sum();
    let mem_used: u64 = active.iter().map(|w| w.resources.memory.0).sum();
    let gpus = n
        .gpus
        .iter()
        .map(|g| GpuView {
            uuid: g.uuid.clone(),
            index: g.index,
            model: g.model.clone(),
            memory: g.memory,
            holder: active
                .iter()
                .find(|w| w.resources.gpu_milli == 0 && w.gpus.contains(&g.uuid))
                .map(|w| GpuHolder { owner: w.owner.clone(), workload: w.name.clone() }),
            shares: active
                .iter()
                .filter(|w| w.resources.gpu_milli > 0 && w.gpus.contains(&g.uuid))
                .map(|w| GpuShareView {
                    owner: w.owner.clone(),
                    workload: w.name.clone(),
                    milli: w.resources.gpu_milli,
                    memory: w.resources.gpu_memory,
                })
                .collect(),
        })
        .collect();
    let nodes = vec![NodeView {
        name: n.name.clone(),
        cpus: n.cpus.cores(),
        cpus_free: CpuMilli(n.cpus.0.saturating_sub(cpu_used)).cores(),
        memory: n.memory,
        memory_free: Bytes(n.memory.0.saturating_sub(mem_used)),
        gpus,
    }];
    let (nodes, next) = paging::slice(nodes, |n| n.name.clone(), &page);
    Ok(paging::respond(nodes, next, "/api/v1/nodes", &page))
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

/// Adds or replaces a catalog entry (admin). The image must be present in the container engine.
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
    if !st.runtime.image_exists(&entry.image).await? {
        return Err(ApiError::unprocessable(format!(
            "invalid image: the container engine has no image {:?} (build or pull it on the node first)",
            entry.image
        )));
    }
    st.store.upsert_image(&entry).await?;
    Ok((StatusCode::CREATED, axum::Json(entry)))
}
