//! The caller's SSH public keys (for the SSH gateway) and what a client needs to reach it.

use crate::auth::Caller;
use crate::error::{ApiError, ApiJson};
use crate::state::AppState;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use chrono::{DateTime, Utc};
use gpuhub_core::api::Problem;
use gpuhub_store::SshKeyRecord;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// `POST /api/v1/me/ssh-keys`.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct AddKeyRequest {
    /// One OpenSSH public-key line (`ssh-ed25519 AAAA… comment`).
    key: String,
}

/// A registered key.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct SshKeyView {
    /// `SHA256:…`, as `ssh-keygen -lf` prints it.
    fingerprint: String,
    public_key: String,
    comment: String,
    created_at: DateTime<Utc>,
}

impl From<SshKeyRecord> for SshKeyView {
    fn from(k: SshKeyRecord) -> Self {
        Self { fingerprint: k.fingerprint, public_key: k.public_key, comment: k.comment, created_at: k.created_at }
    }
}

/// Registers a public key for the SSH gateway.
#[utoipa::path(post, path = "/api/v1/me/ssh-keys", tag = "ssh", request_body = AddKeyRequest,
    responses((status = 201, body = SshKeyView), (status = 409, body = Problem), (status = 422, body = Problem)))]
pub async fn add_key(
    State(st): State<AppState>,
    Caller(user): Caller,
    ApiJson(req): ApiJson<AddKeyRequest>,
) -> Result<(StatusCode, axum::Json<SshKeyView>), ApiError> {
    let key = gpuhub_ssh::parse_public_key(&req.key).map_err(|e| ApiError::unprocessable(e.to_string()))?;
    let record = SshKeyRecord {
        fingerprint: gpuhub_ssh::fingerprint(&key),
        public_key: gpuhub_ssh::openssh_line(&key),
        comment: key.comment().to_string(),
        created_at: Utc::now(),
    };
    match st.store.add_ssh_key(user.id, &record).await {
        Ok(()) => Ok((StatusCode::CREATED, axum::Json(record.into()))),
        Err(gpuhub_store::StoreError::Conflict(_)) => {
            Err(ApiError::conflict(format!("the key {} is already registered", record.fingerprint)))
        }
        Err(e) => Err(e.into()),
    }
}

/// The caller's keys.
#[utoipa::path(get, path = "/api/v1/me/ssh-keys", tag = "ssh", responses((status = 200, body = [SshKeyView])))]
pub async fn list_keys(
    State(st): State<AppState>,
    Caller(user): Caller,
) -> Result<axum::Json<Vec<SshKeyView>>, ApiError> {
    Ok(axum::Json(st.store.list_ssh_keys(user.id).await?.into_iter().map(SshKeyView::from).collect()))
}

/// Removes one of the caller's keys (the fingerprint percent-encoded: `SHA256%3A…%2F…`).
#[utoipa::path(delete, path = "/api/v1/me/ssh-keys/{fingerprint}", tag = "ssh", params(("fingerprint" = String, Path)),
    responses((status = 204), (status = 404, body = Problem)))]
pub async fn delete_key(
    State(st): State<AppState>,
    Caller(user): Caller,
    Path(fingerprint): Path<String>,
) -> Result<StatusCode, ApiError> {
    st.store.delete_ssh_key(user.id, &fingerprint).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// What a client needs to know about this server.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct ServerInfo {
    pub version: String,
    /// The SSH gateway's port, when it runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ssh_port: Option<u16>,
}

/// Version and the SSH gateway's port.
#[utoipa::path(get, path = "/api/v1/info", tag = "auth", responses((status = 200, body = ServerInfo)))]
pub async fn info(State(st): State<AppState>, _caller: Caller) -> axum::Json<ServerInfo> {
    axum::Json(ServerInfo { version: env!("CARGO_PKG_VERSION").to_owned(), ssh_port: st.ssh_addr.map(|a| a.port()) })
}
