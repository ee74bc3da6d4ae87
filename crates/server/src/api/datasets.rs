//! Datasets: admins register directories, NFS exports and S3 buckets by name; everyone sees the list
//! and mounts them (`"datasets": ["imagenet"]` in a submission → `/datasets/imagenet`), read-only unless
//! an S3 dataset is registered read-write. S3 datasets are mounted on this host by the server
//! ([`crate::s3mounts`]); their secret keys are sealed before they are stored and never shown.

use crate::auth::Caller;
use crate::error::{ApiError, ApiJson};
use crate::state::AppState;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use gpuhub_api::Problem;
use gpuhub_core::dataset::{Dataset, SECRET_SET, Secret};

/// Every dataset, by name.
#[utoipa::path(get, path = "/api/v1/datasets", tag = "datasets",
    responses((status = 200, body = [Dataset]), (status = 401, body = Problem)))]
pub async fn list_datasets(State(st): State<AppState>, _caller: Caller) -> Result<axum::Json<Vec<Dataset>>, ApiError> {
    let mut all = st.store.list_datasets().await?;
    for d in &mut all {
        d.status = status(&st, d);
    }
    Ok(axum::Json(all))
}

/// An S3 dataset's mount on this host, as answers show it.
fn status(st: &AppState, d: &Dataset) -> Option<String> {
    d.s3.as_ref().map(|_| st.s3.status(&d.name).unwrap_or_else(|| "down: not mounted".into()))
}

/// The context a dataset's secret is sealed for.
fn context(name: &str) -> String {
    format!("dataset:{name}")
}

/// `d`'s S3 source with its secret key opened, for rclone.
fn plain(st: &AppState, d: &Dataset) -> Option<Result<crate::s3mounts::Plain, crate::secrets::SecretError>> {
    let s3 = d.s3.as_ref()?;
    let secret = s3.secret_key.as_ref().map(|s| st.secrets.open(&context(&d.name), s.expose())).transpose();
    Some(secret.map(|secret| crate::s3mounts::Plain { source: s3.clone(), secret }))
}

/// Mounts every S3 dataset (at start; each in its own task, a slow S3 server delays nothing else).
pub async fn mount_all(st: &AppState) {
    if !crate::s3mounts::reached_by(st.config.engine) {
        return;
    }
    st.s3.sweep().await;
    let all = match st.store.list_datasets().await {
        Ok(all) => all,
        Err(e) => return tracing::error!(error = %e, "cannot list the datasets to mount"),
    };
    for d in all {
        match plain(st, &d) {
            None => {}
            Some(Err(e)) => tracing::error!(dataset = %d.name, error = %e, "cannot mount the S3 dataset"),
            Some(Ok(p)) => {
                let st = st.clone();
                tokio::spawn(async move {
                    if let Err(why) = st.s3.mount(&d.name, p, d.read_only).await {
                        tracing::error!(dataset = %d.name, %why, "cannot mount the S3 dataset (trying again)");
                    }
                });
            }
        }
    }
}

/// Registers a dataset (admin), or changes one's registration: a directory every node has (local, or
/// an NFS or object-storage mount the node keeps), an NFS export (`nfs`: `server:/export`) that engines
/// able to (Docker) mount themselves, or an S3 bucket or prefix (`s3`) that the server mounts on its
/// host (the Docker engine), checked to answer first; its `secret_key` is stored encrypted and shown
/// back as `"<set>"` (sending `"<set>"` keeps the stored one). Where gpuhub runs the containers on this
/// host (the Docker engine) a directory must exist here.
#[utoipa::path(post, path = "/api/v1/datasets", tag = "datasets", request_body = Dataset,
    responses((status = 201, body = Dataset), (status = 403, body = Problem), (status = 422, body = Problem)))]
pub async fn create_dataset(
    State(st): State<AppState>,
    caller: Caller,
    ApiJson(mut d): ApiJson<Dataset>,
) -> Result<(StatusCode, axum::Json<Dataset>), ApiError> {
    caller.require_admin()?;
    d.status = None;
    d.validate()?;
    let local = crate::s3mounts::reached_by(st.config.engine);
    if d.s3.is_some() {
        return create_s3(st, caller, d).await;
    }
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
    // it may have been an S3 dataset before
    st.s3.remove(&d.name).await;
    tracing::info!(dataset = %d.name, path = %d.path, by = %caller.0.username, "dataset registered");
    Ok((StatusCode::CREATED, axum::Json(d)))
}

/// Registers an S3 dataset: only where the server's host runs the containers; the bucket must answer;
/// the secret is sealed before it is stored; mounted before the answer (its `status` says how it went).
async fn create_s3(
    st: AppState,
    caller: Caller,
    mut d: Dataset,
) -> Result<(StatusCode, axum::Json<Dataset>), ApiError> {
    if !crate::s3mounts::reached_by(st.config.engine) {
        return Err(ApiError::unprocessable(format!(
            "invalid s3: the {} engine mounts no object storage itself; mount the bucket on every node \
             (e.g. rclone mount) and register that directory as path",
            st.engine.name()
        ))
        .at("s3"));
    }
    let Some(s3) = d.s3.as_mut() else { unreachable!("create_s3 is called for S3 datasets") };
    // "<set>": the secret stored for this dataset, unchanged, and only for the same server and key id
    // (the stored secret is never sent to a server it was not given for)
    let secret = match s3.secret_key.take() {
        Some(s) if s.expose() == SECRET_SET => {
            let old = st.store.get_dataset(&d.name).await.ok().and_then(|old| old.s3);
            let same = |o: &gpuhub_core::dataset::S3Source| o.endpoint == s3.endpoint && o.access_key == s3.access_key;
            let Some(kept) = old.filter(same).and_then(|o| o.secret_key) else {
                return Err(ApiError::unprocessable(format!(
                    "invalid s3.secret_key: {SECRET_SET:?} keeps the stored secret key, but dataset {} has none \
                     for this endpoint and access key: give the secret key",
                    d.name
                ))
                .at("s3.secret_key"));
            };
            Some(st.secrets.open(&context(&d.name), kept.expose()).map_err(|e| ApiError::internal(e.to_string()))?)
        }
        Some(s) => Some(s.expose().to_owned()),
        None => None,
    };
    let plain = crate::s3mounts::Plain { source: s3.clone(), secret: secret.clone() };
    if let Err(why) = st.s3.check(&plain).await {
        return Err(ApiError::unprocessable(format!(
            "invalid s3: {} at {} cannot be listed: {why}",
            s3.url, s3.endpoint
        ))
        .at("s3"));
    }
    s3.secret_key = secret.map(|p| Secret::new(st.secrets.seal(&context(&d.name), &p)));
    let url = s3.url.clone();
    st.store.upsert_dataset(&d).await?;
    if let Err(why) = st.s3.mount(&d.name, plain, d.read_only).await {
        tracing::error!(dataset = %d.name, %why, "cannot mount the S3 dataset (trying again)");
    }
    d.status = status(&st, &d);
    tracing::info!(dataset = %d.name, %url, read_only = d.read_only, by = %caller.0.username, "S3 dataset registered");
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

/// Removes a dataset (admin); workloads already submitted keep mounting its path. An S3 dataset is
/// unmounted from this host: work still reading it finds its files gone.
#[utoipa::path(delete, path = "/api/v1/datasets/{name}", tag = "datasets", params(("name" = String, Path)),
    responses((status = 204), (status = 403, body = Problem), (status = 404, body = Problem)))]
pub async fn delete_dataset(
    State(st): State<AppState>,
    caller: Caller,
    Path(name): Path<String>,
) -> Result<StatusCode, ApiError> {
    caller.require_admin()?;
    st.store.delete_dataset(&name).await?;
    st.s3.remove(&name).await;
    Ok(StatusCode::NO_CONTENT)
}
