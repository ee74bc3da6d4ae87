//! The caller's SSH public keys (for the SSH gateway) and what a client needs to reach it.

use crate::auth::Caller;
use crate::error::{ApiError, ApiJson};
use crate::service;
use crate::service::keys::{AddKeyRequest, KeyChallenge, SshKeyView};
use crate::state::AppState;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use gpuhub_api::Problem;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// What the caller signs with a private key to register its public half: a new challenge each time,
/// good once, for ten minutes.
#[utoipa::path(get, path = "/api/v1/me/ssh-keys/challenge", tag = "ssh", responses((status = 200, body = KeyChallenge)))]
pub async fn key_challenge(
    State(st): State<AppState>,
    Caller(user): Caller,
) -> Result<axum::Json<KeyChallenge>, ApiError> {
    Ok(axum::Json(service::keys::new_challenge(&st, &user).await?))
}

/// Registers a public key for the SSH gateway, given proof that the caller holds its private half (a
/// signature over the challenge), so nobody can register, and so squat, someone else's key.
#[utoipa::path(post, path = "/api/v1/me/ssh-keys", tag = "ssh", request_body = AddKeyRequest,
    responses((status = 201, body = SshKeyView), (status = 409, body = Problem), (status = 422, body = Problem)))]
pub async fn add_key(
    State(st): State<AppState>,
    Caller(user): Caller,
    ApiJson(req): ApiJson<AddKeyRequest>,
) -> Result<(StatusCode, axum::Json<SshKeyView>), ApiError> {
    let view = service::keys::add(&st, &user, req).await?;
    Ok((StatusCode::CREATED, axum::Json(view)))
}

/// The caller's keys, oldest first, in pages.
#[utoipa::path(get, path = "/api/v1/me/ssh-keys", tag = "ssh", params(super::paging::PageQuery),
    responses((status = 200, body = [SshKeyView]), (status = 400, body = Problem)))]
pub async fn list_keys(
    State(st): State<AppState>,
    Caller(user): Caller,
    q: Result<axum::extract::Query<super::paging::PageQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<axum::response::Response, ApiError> {
    let page = super::paging::from_query(q)?;
    let keys: Vec<SshKeyView> = st.store.list_ssh_keys(user.id).await?.into_iter().map(SshKeyView::from).collect();
    let (keys, next) = super::paging::slice(keys, |k| super::paging::time_key(k.created_at, &k.fingerprint), &page);
    Ok(super::paging::respond(keys, next, "/api/v1/me/ssh-keys", &page))
}

/// Removes one of the caller's keys (the fingerprint percent-encoded: `SHA256%3A…%2F…`).
#[utoipa::path(delete, path = "/api/v1/me/ssh-keys/{fingerprint}", tag = "ssh", params(("fingerprint" = String, Path)),
    responses((status = 204), (status = 404, body = Problem)))]
pub async fn delete_key(
    State(st): State<AppState>,
    Caller(user): Caller,
    Path(fingerprint): Path<String>,
) -> Result<StatusCode, ApiError> {
    service::keys::delete(&st, &user, &fingerprint).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// What a client needs to know about this server.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct ServerInfo {
    pub version: String,
    /// The SSH gateway's port, when it runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ssh_port: Option<u16>,
    /// The domain apps are served under, each on an origin of its own; absent: apps share the hub's
    /// origin under `/w/…` (path mode).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub apps_domain: Option<String>,
    /// The SSH gateway's host key (`ssh-ed25519 AAAA…`), for `known_hosts`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ssh_host_key: Option<String>,
    /// Its fingerprint as `ssh` shows it (`SHA256:…`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ssh_host_key_fingerprint: Option<String>,
}

/// Version, the SSH gateway's port, and where apps are served.
#[utoipa::path(get, path = "/api/v1/info", tag = "auth", responses((status = 200, body = ServerInfo)))]
pub async fn info(State(st): State<AppState>, _caller: Caller) -> axum::Json<ServerInfo> {
    axum::Json(ServerInfo {
        version: env!("CARGO_PKG_VERSION").to_owned(),
        ssh_port: st.ssh_addr.map(|a| a.port()),
        apps_domain: st.config.apps_domain.clone(),
        ssh_host_key: st.ssh_host_key.as_ref().map(|k| k.openssh.clone()),
        ssh_host_key_fingerprint: st.ssh_host_key.as_ref().map(|k| k.fingerprint.clone()),
    })
}
