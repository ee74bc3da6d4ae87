//! Datasets: admins register directories by name; everyone sees the list and mounts them read-only
//! (`"datasets": ["imagenet"]` in a submission → `/datasets/imagenet`).

use crate::auth::Caller;
use crate::error::{ApiError, ApiJson};
use crate::state::AppState;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use gpuhub_core::api::Problem;
use gpuhub_core::dataset::Dataset;

/// Every dataset, by name.
#[utoipa::path(get, path = "/api/v1/datasets", tag = "datasets",
    responses((status = 200, body = [Dataset]), (status = 401, body = Problem)))]
pub async fn list_datasets(State(st): State<AppState>, _caller: Caller) -> Result<axum::Json<Vec<Dataset>>, ApiError> {
    Ok(axum::Json(st.store.list_datasets().await?))
}

/// Registers a dataset (admin), or changes one's path or description: a directory every node has
/// (local, or an NFS or object-storage mount the node keeps), or an NFS export (`nfs`:
/// `server:/export`) that engines able to (Docker) mount themselves. Where gpuhub runs the containers
/// on this host (the Docker engine) a directory must exist here.
#[utoipa::path(post, path = "/api/v1/datasets", tag = "datasets", request_body = Dataset,
    responses((status = 201, body = Dataset), (status = 403, body = Problem), (status = 422, body = Problem)))]
pub async fn create_dataset(
    State(st): State<AppState>,
    caller: Caller,
    ApiJson(d): ApiJson<Dataset>,
) -> Result<(StatusCode, axum::Json<Dataset>), ApiError> {
    caller.require_admin()?;
    d.validate()?;
    let local = st.config.engine == crate::config::EngineKind::Docker;
    if d.nfs.is_some() && !st.engine.capabilities().nfs {
        return Err(ApiError::unprocessable(format!(
            "invalid nfs: the {} engine mounts no NFS exports itself; mount the export on every node and \
             register that directory as path",
            st.engine.name()
        ))
        .at("nfs"));
    }
    if local && d.nfs.is_none() && !std::path::Path::new(&d.path).is_dir() {
        return Err(
            ApiError::unprocessable(format!("invalid path: {:?} is not a directory on this host", d.path)).at("path")
        );
    }
    if d.nfs.is_none() {
        refuse_own_and_linked(&st, &d.path)?;
    }
    st.store.upsert_dataset(&d).await?;
    tracing::info!(dataset = %d.name, path = %d.path, by = %caller.0.username, "dataset registered");
    Ok((StatusCode::CREATED, axum::Json(d)))
}

/// Refuses a dataset directory that is, is inside of or holds the hub's data or homes directory, or
/// that leads (by its symlinks, where it exists here) to one of those or to a system directory.
fn refuse_own_and_linked(st: &AppState, path: &str) -> Result<(), ApiError> {
    let real = |p: &std::path::Path| std::fs::canonicalize(p).unwrap_or_else(|_| p.to_path_buf());
    let data = real(&st.config.data_dir).display().to_string();
    let homes = st.config.homes_dir.as_deref().map(|h| real(h).display().to_string());
    let mut own = vec![(data.as_str(), "gpuhub's data directory")];
    if let Some(h) = &homes {
        own.push((h.as_str(), "gpuhub's homes directory"));
    }
    gpuhub_core::dataset::refuse_protected(path, path, &own)?;
    if let Ok(target) = std::fs::canonicalize(path) {
        gpuhub_core::dataset::refuse_protected(path, &target.display().to_string(), &own)?;
    }
    Ok(())
}

/// Removes a dataset (admin); workloads already submitted keep mounting its path.
#[utoipa::path(delete, path = "/api/v1/datasets/{name}", tag = "datasets", params(("name" = String, Path)),
    responses((status = 204), (status = 403, body = Problem), (status = 404, body = Problem)))]
pub async fn delete_dataset(
    State(st): State<AppState>,
    caller: Caller,
    Path(name): Path<String>,
) -> Result<StatusCode, ApiError> {
    caller.require_admin()?;
    st.store.delete_dataset(&name).await?;
    Ok(StatusCode::NO_CONTENT)
}
