//! Personal images: a running workspace saved by its owner (`POST /api/v1/workloads/{name}/save`),
//! listed and removed by them (`/api/v1/me/images`), run by name like a catalog image. Counts and total
//! size per user are bounded (`limits.max_personal_images`, `limits.max_personal_image_bytes`).

use crate::auth::Caller;
use crate::error::{ApiError, ApiJson};
use crate::state::AppState;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use gpuhub_api::Problem;
use gpuhub_core::image::{PersonalImage, personal_reference};
use gpuhub_core::quantity::Bytes;
use gpuhub_core::workload::{WorkloadKind, WorkloadState};
use gpuhub_driver::{EngineError, MemberRef};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// `POST /api/v1/workloads/{name}/save`.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SaveRequest {
    /// The personal image's name (what `gpuhub run --image NAME` takes).
    #[serde(rename = "as")]
    pub name: String,
}

/// Saves the caller's running workspace as a personal image (its files as they are now, paused while
/// they are copied). Only its owner may; the name must be new among theirs.
#[utoipa::path(post, path = "/api/v1/workloads/{name}/save", tag = "images", params(("name" = String, Path)),
    request_body = SaveRequest,
    responses((status = 201, body = PersonalImage), (status = 404, body = Problem), (status = 409, body = Problem),
        (status = 422, body = Problem)))]
pub async fn save_workload(
    State(st): State<AppState>,
    Caller(user): Caller,
    Path(name): Path<String>,
    ApiJson(req): ApiJson<SaveRequest>,
) -> Result<(StatusCode, axum::Json<PersonalImage>), ApiError> {
    // the owner's own workloads only: an admin saves nobody else's
    let w = crate::service::lookup(&st, &user, &name, None).await?;
    gpuhub_core::names::validate("image", &req.name)
        .map_err(|e| ApiError::unprocessable(format!("invalid as: {e}")).at("as"))?;
    if w.kind != WorkloadKind::Workspace {
        return Err(ApiError::unprocessable(format!("invalid name: {name} is a job; only workspaces are saved")));
    }
    let Some(run) = w.run_id.clone().filter(|_| w.state() == WorkloadState::Running) else {
        return Err(ApiError::conflict(format!("workspace {name} is {}, not running: start it first", w.state())));
    };
    let mine = st.store.list_personal_images(&user.username).await?;
    if mine.iter().any(|p| p.name == req.name) {
        return Err(
            ApiError::conflict(format!("you have an image named {} already: remove it first", req.name)).at("as")
        );
    }
    let limits = &st.config.limits;
    if mine.len() as u64 >= limits.max_personal_images {
        return Err(ApiError::conflict(format!(
            "too many personal images: {} has {}, the limit is {} (limits.max_personal_images); remove one first",
            user.username,
            mine.len(),
            limits.max_personal_images
        )));
    }
    let reference = personal_reference(&crate::service::images::installation(&st).await?, &user.username, &req.name);
    let size = st.engine.commit(&MemberRef::new(run, 0), &reference).await.map_err(engine_error)?;
    let total: u64 = mine.iter().map(|p| p.size_bytes).sum::<u64>() + size;
    if total > limits.max_personal_image_bytes.0 {
        let _ = st.engine.remove_image(&reference).await;
        return Err(ApiError::conflict(format!(
            "personal images too large: {} would hold {}, the limit is {} (limits.max_personal_image_bytes)",
            user.username,
            Bytes(total),
            limits.max_personal_image_bytes
        )));
    }
    let image = PersonalImage {
        owner: user.username.clone(),
        name: req.name.clone(),
        reference,
        size_bytes: size,
        workload: w.name.clone(),
        created_at: st.clock.now(),
    };
    st.store.insert_personal_image(&image).await?;
    tracing::info!(owner = %user.username, image = %image.reference, size, "workspace saved");
    Ok((StatusCode::CREATED, axum::Json(image)))
}

/// The caller's personal images.
#[utoipa::path(get, path = "/api/v1/me/images", tag = "images",
    responses((status = 200, body = [PersonalImage]), (status = 401, body = Problem)))]
pub async fn list_mine(
    State(st): State<AppState>,
    Caller(user): Caller,
) -> Result<axum::Json<Vec<PersonalImage>>, ApiError> {
    Ok(axum::Json(st.store.list_personal_images(&user.username).await?))
}

/// Removes one of the caller's personal images (refused while a workload runs it).
#[utoipa::path(delete, path = "/api/v1/me/images/{name}", tag = "images", params(("name" = String, Path)),
    responses((status = 204), (status = 404, body = Problem), (status = 409, body = Problem)))]
pub async fn delete_mine(
    State(st): State<AppState>,
    Caller(user): Caller,
    Path(name): Path<String>,
) -> Result<StatusCode, ApiError> {
    crate::service::images::delete_personal(&st, &user, &name).await?;
    Ok(StatusCode::NO_CONTENT)
}

fn engine_error(e: EngineError) -> ApiError {
    crate::service::images::engine_error(e).into()
}
