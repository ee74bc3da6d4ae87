//! Accounts.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

/// The first UID/GID handed to a user; users' containers run as their own UID, never as root.
pub const FIRST_UID: u32 = 10_000;

/// What an account may do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// Manages users, images and sees every workload.
    Admin,
    /// Runs and sees their own workloads.
    User,
}

/// An account as the platform knows it (the password hash stays in the store).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct User {
    /// Database id.
    pub id: i64,
    /// Login name, unique; see [`crate::names`].
    pub username: String,
    /// Admin or user.
    pub role: Role,
    /// The UID (and GID) the user's containers run as, from [`FIRST_UID`] up.
    pub uid: u32,
    /// A disabled user can neither log in nor use a token; their workloads stay.
    pub disabled: bool,
    /// When the account was made.
    pub created_at: DateTime<Utc>,
}

impl User {
    /// Whether this account is an admin.
    pub fn is_admin(&self) -> bool {
        self.role == Role::Admin
    }
}
