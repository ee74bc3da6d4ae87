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
    pub(crate) key: String,
    /// Proof that the caller holds the private key: the armored output of
    /// `ssh-keygen -Y sign -n gpuhub-ssh-key -f PRIVATE_KEY` over the challenge's `message`
    /// (`GET /api/v1/me/ssh-keys/challenge`). `gpuhub ssh-key add` makes it.
    #[serde(default)]
    pub(crate) signature: Option<String>,
}

/// What to sign to register a key (`GET /api/v1/me/ssh-keys/challenge`).
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct KeyChallenge {
    /// The `-n` of `ssh-keygen -Y sign`.
    pub namespace: String,
    /// The exact bytes to sign (names the caller and this hub, so a signature serves nowhere else).
    pub message: String,
}

pub(crate) async fn challenge_message(st: &AppState, username: &str) -> Result<String, ApiError> {
    let hub = st.store.get_setting("instance_id").await?.unwrap_or_default();
    Ok(format!("gpuhub ssh key registration\nuser: {username}\nhub: {hub}\n"))
}

/// What the caller signs with a private key to register its public half.
#[utoipa::path(get, path = "/api/v1/me/ssh-keys/challenge", tag = "ssh", responses((status = 200, body = KeyChallenge)))]
pub async fn key_challenge(
    State(st): State<AppState>,
    Caller(user): Caller,
) -> Result<axum::Json<KeyChallenge>, ApiError> {
    Ok(axum::Json(KeyChallenge {
        namespace: gpuhub_ssh::REGISTRATION_NAMESPACE.to_owned(),
        message: challenge_message(&st, &user.username).await?,
    }))
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

/// Registers a public key for the SSH gateway, given proof that the caller holds its private half (a
/// signature over the challenge), so nobody can register, and so squat, someone else's key.
#[utoipa::path(post, path = "/api/v1/me/ssh-keys", tag = "ssh", request_body = AddKeyRequest,
    responses((status = 201, body = SshKeyView), (status = 409, body = Problem), (status = 422, body = Problem)))]
pub async fn add_key(
    State(st): State<AppState>,
    Caller(user): Caller,
    ApiJson(req): ApiJson<AddKeyRequest>,
) -> Result<(StatusCode, axum::Json<SshKeyView>), ApiError> {
    let key = gpuhub_ssh::parse_public_key(&req.key).map_err(|e| ApiError::unprocessable(e.to_string()))?;
    let signature = req.signature.as_deref().ok_or_else(|| {
        ApiError::unprocessable(
            "invalid signature: missing; sign the message of GET /api/v1/me/ssh-keys/challenge with the private key \
             (ssh-keygen -Y sign -n gpuhub-ssh-key -f KEY), or use gpuhub ssh-key add",
        )
    })?;
    let message = challenge_message(&st, &user.username).await?;
    gpuhub_ssh::verify_possession(&key, message.as_bytes(), signature).map_err(|e| {
        ApiError::unprocessable(format!("{e}: the signature must be the key's own, over this account's challenge"))
    })?;
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
    /// The domain apps are served under, each on an origin of its own; absent: apps share the hub's
    /// origin under `/w/…` (path mode).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub apps_domain: Option<String>,
}

/// Version, the SSH gateway's port, and where apps are served.
#[utoipa::path(get, path = "/api/v1/info", tag = "auth", responses((status = 200, body = ServerInfo)))]
pub async fn info(State(st): State<AppState>, _caller: Caller) -> axum::Json<ServerInfo> {
    axum::Json(ServerInfo {
        version: env!("CARGO_PKG_VERSION").to_owned(),
        ssh_port: st.ssh_addr.map(|a| a.port()),
        apps_domain: st.config.apps_domain.clone(),
    })
}
