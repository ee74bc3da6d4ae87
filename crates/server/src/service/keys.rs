//! Users' SSH public keys (for the SSH gateway): the challenge a key's holder signs, registering a key
//! with its proof of possession, removing one.

use super::ServiceError;
use crate::state::AppState;
use chrono::{DateTime, SecondsFormat, TimeDelta, Utc};
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
) -> Result<String, ServiceError> {
    let hub = st.store.get_setting("instance_id").await?.unwrap_or_default();
    Ok(format!(
        "gpuhub ssh key registration\nuser: {}\nhub: {hub}\nnonce: {nonce}\nexpires: {}\n",
        user.username,
        expires.to_rfc3339_opts(SecondsFormat::Secs, true)
    ))
}

/// A new challenge for `user`, kept open until it is used or expires; the account's expired ones (and
/// beyond [`MAX_OPEN_CHALLENGES`] the oldest) are forgotten.
pub async fn new_challenge(st: &AppState, user: &User) -> Result<KeyChallenge, ServiceError> {
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

/// A registered key.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct SshKeyView {
    /// `SHA256:…`, as `ssh-keygen -lf` prints it.
    pub(crate) fingerprint: String,
    public_key: String,
    comment: String,
    pub(crate) created_at: DateTime<Utc>,
}

impl From<SshKeyRecord> for SshKeyView {
    fn from(k: SshKeyRecord) -> Self {
        Self { fingerprint: k.fingerprint, public_key: k.public_key, comment: k.comment, created_at: k.created_at }
    }
}

/// Registers `req`'s public key for `user`, given proof that they hold its private half (a signature over
/// an open challenge of theirs), so nobody can register, and so squat, someone else's key.
pub async fn add(st: &AppState, user: &User, req: AddKeyRequest) -> Result<SshKeyView, ServiceError> {
    let key = gpuhub_ssh::parse_public_key(&req.key).map_err(|e| ServiceError::invalid(e.to_string()))?;
    let signature = req.signature.as_deref().ok_or_else(|| {
        ServiceError::invalid(
            "invalid signature: missing; sign the message of GET /api/v1/me/ssh-keys/challenge with the private key \
             (ssh-keygen -Y sign -n gpuhub-ssh-key -f KEY), or use gpuhub ssh-key add",
        )
    })?;
    let ask_again = "ask for a new one (GET /api/v1/me/ssh-keys/challenge), or use gpuhub ssh-key add";
    let nonce = req.nonce.as_deref().filter(|n| !n.is_empty()).ok_or_else(|| {
        ServiceError::invalid(format!(
            "invalid nonce: missing; send the nonce of the challenge you signed, or {ask_again}"
        ))
        .at("nonce")
    })?;
    if nonce.len() != 32 || !nonce.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(ServiceError::invalid("invalid nonce: not a challenge's nonce (32 hex digits)").at("nonce"));
    }
    let unknown = || {
        ServiceError::invalid(format!(
            "invalid nonce: no open challenge of this account has it (used already?); {ask_again}"
        ))
        .at("nonce")
    };
    let Some(expires) = st.store.get_setting(&challenge_key(user, nonce)).await? else { return Err(unknown()) };
    let expires = expires.parse().ok().and_then(DateTime::from_timestamp_millis).unwrap_or(DateTime::UNIX_EPOCH);
    if expires <= st.clock.now() {
        st.store.take_setting(&challenge_key(user, nonce)).await?;
        return Err(ServiceError::invalid(format!("invalid nonce: the challenge expired at {expires}; {ask_again}"))
            .at("nonce"));
    }
    let message = challenge_message(st, user, nonce, expires).await?;
    gpuhub_ssh::verify_possession(&key, message.as_bytes(), signature).map_err(|e| {
        ServiceError::invalid(format!("{e}: the signature must be the key's own, over this account's challenge"))
    })?;
    // used once: of two requests racing with it, one gets it
    if st.store.take_setting(&challenge_key(user, nonce)).await?.is_none() {
        return Err(unknown());
    }
    let record = SshKeyRecord {
        fingerprint: gpuhub_ssh::fingerprint(&key),
        public_key: gpuhub_ssh::openssh_line(&key),
        comment: key.comment().to_string(),
        created_at: st.clock.now(),
    };
    match st.store.add_ssh_key(user.id, &record).await {
        Ok(()) => Ok(record.into()),
        Err(gpuhub_store::StoreError::Conflict(_)) => {
            Err(ServiceError::conflict(format!("the key {} is already registered", record.fingerprint)))
        }
        Err(e) => Err(e.into()),
    }
}

/// Removes `user`'s key `fingerprint`.
pub async fn delete(st: &AppState, user: &User, fingerprint: &str) -> Result<(), ServiceError> {
    st.store.delete_ssh_key(user.id, fingerprint).await?;
    Ok(())
}
