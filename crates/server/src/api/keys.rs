//! The caller's SSH public keys (for the SSH gateway) and what a client needs to reach it.

use crate::auth::Caller;
use crate::error::{ApiError, ApiJson};
use crate::state::AppState;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use chrono::{DateTime, SecondsFormat, TimeDelta, Utc};
use gpuhub_core::api::Problem;
use gpuhub_core::user::User;
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
    /// The challenge's `nonce`: which challenge was signed (each serves once, until it expires).
    #[serde(default)]
    pub(crate) nonce: Option<String>,
}

/// What to sign to register a key (`GET /api/v1/me/ssh-keys/challenge`).
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct KeyChallenge {
    /// The `-n` of `ssh-keygen -Y sign`.
    pub namespace: String,
    /// Sent back with the signature: which challenge was signed.
    pub nonce: String,
    /// Until when the challenge may be used (once).
    pub expires_at: DateTime<Utc>,
    /// The exact bytes to sign: they name the caller, this hub, the nonce and the expiry, so a
    /// signature serves nowhere else and only once.
    pub message: String,
}

/// How long a challenge may be used.
const CHALLENGE_TTL: TimeDelta = TimeDelta::minutes(10);
/// The most challenges one account has open (asking for more forgets the oldest).
const MAX_OPEN_CHALLENGES: usize = 8;

/// Where an open challenge is kept (its value: when it expires, in ms): under the account's id, so
/// that an account made again under the same name has none of the former one's.
fn challenge_key(user: &User, nonce: &str) -> String {
    format!("ssh_key_challenge.{}.{nonce}", user.id)
}

/// The text a challenge asks to sign.
async fn challenge_message(
    st: &AppState,
    user: &User,
    nonce: &str,
    expires: DateTime<Utc>,
) -> Result<String, ApiError> {
    let hub = st.store.get_setting("instance_id").await?.unwrap_or_default();
    Ok(format!(
        "gpuhub ssh key registration\nuser: {}\nhub: {hub}\nnonce: {nonce}\nexpires: {}\n",
        user.username,
        expires.to_rfc3339_opts(SecondsFormat::Secs, true)
    ))
}

/// A new challenge for `user`, kept open until it is used or expires; the account's expired ones (and
/// beyond [`MAX_OPEN_CHALLENGES`] the oldest) are forgotten.
pub(crate) async fn new_challenge(st: &AppState, user: &User) -> Result<KeyChallenge, ApiError> {
    let now = st.clock.now();
    let mut open: Vec<(String, i64)> = st
        .store
        .settings_with_prefix(&challenge_key(user, ""))
        .await?
        .into_iter()
        .map(|(k, v)| (k, v.parse().unwrap_or(0)))
        .collect();
    open.sort_by_key(|(_, expires)| *expires);
    let excess = open.len().saturating_sub(MAX_OPEN_CHALLENGES - 1);
    for (i, (key, expires)) in open.iter().enumerate() {
        if i < excess || *expires <= now.timestamp_millis() {
            st.store.take_setting(key).await?;
        }
    }
    let nonce = hex::encode(rand::random::<[u8; 16]>());
    // whole seconds, as the message shows it
    let expires = DateTime::from_timestamp((now + CHALLENGE_TTL).timestamp(), 0).unwrap_or(now + CHALLENGE_TTL);
    st.store.set_setting(&challenge_key(user, &nonce), &expires.timestamp_millis().to_string()).await?;
    Ok(KeyChallenge {
        namespace: gpuhub_ssh::REGISTRATION_NAMESPACE.to_owned(),
        message: challenge_message(st, user, &nonce, expires).await?,
        nonce,
        expires_at: expires,
    })
}

/// What the caller signs with a private key to register its public half: a new challenge each time,
/// good once, for ten minutes.
#[utoipa::path(get, path = "/api/v1/me/ssh-keys/challenge", tag = "ssh", responses((status = 200, body = KeyChallenge)))]
pub async fn key_challenge(
    State(st): State<AppState>,
    Caller(user): Caller,
) -> Result<axum::Json<KeyChallenge>, ApiError> {
    Ok(axum::Json(new_challenge(&st, &user).await?))
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
    let ask_again = "ask for a new one (GET /api/v1/me/ssh-keys/challenge), or use gpuhub ssh-key add";
    let nonce = req.nonce.as_deref().filter(|n| !n.is_empty()).ok_or_else(|| {
        ApiError::unprocessable(format!(
            "invalid nonce: missing; send the nonce of the challenge you signed, or {ask_again}"
        ))
        .at("nonce")
    })?;
    if nonce.len() != 32 || !nonce.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(ApiError::unprocessable("invalid nonce: not a challenge's nonce (32 hex digits)").at("nonce"));
    }
    let unknown = || {
        ApiError::unprocessable(format!(
            "invalid nonce: no open challenge of this account has it (used already?); {ask_again}"
        ))
        .at("nonce")
    };
    let Some(expires) = st.store.get_setting(&challenge_key(&user, nonce)).await? else { return Err(unknown()) };
    let expires = expires.parse().ok().and_then(DateTime::from_timestamp_millis).unwrap_or(DateTime::UNIX_EPOCH);
    if expires <= st.clock.now() {
        st.store.take_setting(&challenge_key(&user, nonce)).await?;
        return Err(ApiError::unprocessable(format!("invalid nonce: the challenge expired at {expires}; {ask_again}"))
            .at("nonce"));
    }
    let message = challenge_message(&st, &user, nonce, expires).await?;
    gpuhub_ssh::verify_possession(&key, message.as_bytes(), signature).map_err(|e| {
        ApiError::unprocessable(format!("{e}: the signature must be the key's own, over this account's challenge"))
    })?;
    // used once: of two requests racing with it, one gets it
    if st.store.take_setting(&challenge_key(&user, nonce)).await?.is_none() {
        return Err(unknown());
    }
    let record = SshKeyRecord {
        fingerprint: gpuhub_ssh::fingerprint(&key),
        public_key: gpuhub_ssh::openssh_line(&key),
        comment: key.comment().to_string(),
        created_at: st.clock.now(),
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
