//! The node's resources and the image catalog.

use super::paging::{self, PageQuery};
use crate::auth::Caller;
use crate::error::{ApiError, ApiJson};
use crate::service;
use crate::state::AppState;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Query, State};
use axum::http::StatusCode;
use axum::response::Response;
use gpuhub_api::{ImageEntry, NodeView, Problem};

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
    let nodes = service::catalog::node_views(&st).await?;
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

/// Adds or replaces a catalog entry (admin). The image must be a reference of the distribution spec's
/// grammar (`[registry[:port]/]path[:tag][@digest]`) and present in the container engine.
#[utoipa::path(post, path = "/api/v1/images", tag = "images", request_body = ImageEntry,
    responses((status = 201, body = ImageEntry), (status = 403, body = Problem), (status = 422, body = Problem)))]
pub async fn create_image(
    State(st): State<AppState>,
    caller: Caller,
    ApiJson(entry): ApiJson<ImageEntry>,
) -> Result<(StatusCode, axum::Json<ImageEntry>), ApiError> {
    let entry = service::catalog::create_image(&st, &caller.0, entry).await?;
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
    service::catalog::delete_image(&st, &caller.0, &name).await?;
    Ok(StatusCode::NO_CONTENT)
}
