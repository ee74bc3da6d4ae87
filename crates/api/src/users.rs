//! Accounts, logins and tokens: `/api/v1/login`, `/api/v1/me…` and `/api/v1/users…`.

use chrono::{DateTime, Utc};
use gpuhub_core::Bytes;
use serde::{Deserialize, Serialize};

/// `POST /api/v1/login`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct LoginRequest {
    pub username: String,
    pub password: String,
    /// Whether to make an API token too (the default, for the CLI); the portal's login page asks for a
    /// browser session only (`false`), so a browser login leaves no long-lived token behind.
    #[serde(default = "yes")]
    pub token: bool,
}

fn yes() -> bool {
    true
}

/// A bearer token for the CLI; also set as a session cookie for browsers.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct TokenResponse {
    /// The API token; absent when only a browser session was asked for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token: Option<String>,
    pub username: String,
    pub role: gpuhub_core::user::Role,
    /// When the token stops working (log in again then).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_at: Option<DateTime<Utc>>,
}

/// One of the caller's API tokens or browser sessions (`GET /api/v1/me/tokens`); the secret is never shown.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct TokenView {
    /// Identifies the token for `DELETE /api/v1/me/tokens/{id}` (a prefix of its hash, not the secret).
    pub id: String,
    /// `api` (CLI and scripts) or `session` (a browser).
    pub kind: String,
    pub created_at: DateTime<Utc>,
    pub expires_at: Option<DateTime<Utc>>,
    /// Whether this is the token the request came with.
    pub current: bool,
}

/// `POST /api/v1/me/tokens`: a new API token for the caller (for a script, CI), valid `days` (1 to the
/// server's `token_days`; that by default).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct CreateTokenRequest {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub days: Option<i64>,
}

/// A token just made: its secret, shown this once, and its id and expiry.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct NewTokenView {
    /// Identifies it in `GET /api/v1/me/tokens`.
    pub id: String,
    /// The secret (`Authorization: Bearer …`); not shown again.
    pub token: String,
    pub expires_at: DateTime<Utc>,
}

/// `POST /api/v1/me/password`: the caller changes their own password. Every other token and session of
/// the account is revoked; the one the request came with keeps working.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct ChangePasswordRequest {
    pub current_password: String,
    pub new_password: String,
}

/// An account as the API shows it.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct UserView {
    pub username: String,
    pub role: gpuhub_core::user::Role,
    /// The UID the user's containers run as.
    pub uid: u32,
    /// The GID they run as (the UID for local accounts).
    #[serde(default)]
    pub gid: u32,
    /// Where the identity comes from: `local`, `ldap` or `oidc`.
    #[serde(default)]
    pub source: gpuhub_core::user::UserSource,
    pub disabled: bool,
    pub created_at: DateTime<Utc>,
    /// The user's own home quota (`"20GiB"`, `"none"`) when an admin set one; absent: the default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub home_quota: Option<String>,
    /// How full the home is, as its filesystem counts (absent until the home exists).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub home: Option<HomeView>,
}

/// A home's usage and the quota in force.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct HomeView {
    /// Bytes in use.
    pub used_bytes: u64,
    /// The hard limit in force, in bytes; absent: none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub quota_bytes: Option<u64>,
}

impl HomeView {
    /// `3.20GiB of 10GiB`, or the bytes used alone where no quota is in force; `-` for no view (before
    /// the home exists, or where homes are not measured).
    pub fn text(home: Option<&HomeView>) -> String {
        match home {
            Some(h) => match h.quota_bytes {
                Some(q) => format!("{} of {}", Bytes(h.used_bytes), Bytes(q)),
                None => Bytes(h.used_bytes).to_string(),
            },
            None => "-".to_owned(),
        }
    }
}

impl From<&gpuhub_core::user::User> for UserView {
    fn from(u: &gpuhub_core::user::User) -> Self {
        Self {
            username: u.username.clone(),
            role: u.role,
            uid: u.uid,
            gid: u.gid,
            source: u.source,
            disabled: u.disabled,
            created_at: u.created_at,
            home_quota: gpuhub_core::user::home_quota_text(u.home_quota),
            home: None,
        }
    }
}

/// `POST /api/v1/users` (admin).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct CreateUserRequest {
    pub username: String,
    pub password: String,
    #[serde(default)]
    pub admin: bool,
}

/// `PATCH /api/v1/users/{name}` (admin): each field present is changed.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct PatchUserRequest {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub password: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub admin: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub disabled: Option<bool>,
    /// With `"disabled": true`: keep the account's running work running (default: it is stopped).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub keep_workloads: Option<bool>,
    /// The user's home quota: `"20GiB"`, `"none"` (no quota) or `"default"` (the configured one). A
    /// quota below what the home holds is refused.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub home_quota: Option<String>,
}
