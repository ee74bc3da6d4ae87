//! SSH public keys, by which the SSH gateway recognises users.

use crate::codec::{get_time, ms};
use crate::error::{conflict, is_foreign_key_violation};
use crate::users::{USER_COLUMNS_U, user_from_row};
use crate::{Result, Store, StoreError};
use chrono::{DateTime, Utc};
use gpuhub_core::user::User;
use sqlx::Row;

/// A user's SSH public key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SshKeyRecord {
    /// The key's fingerprint (`SHA256:…`), unique across all users.
    pub fingerprint: String,
    /// The key in `authorized_keys` form (`ssh-ed25519 AAAA…`).
    pub public_key: String,
    /// A label, usually `user@host`; may be empty.
    pub comment: String,
    /// When it was added (millisecond precision).
    pub created_at: DateTime<Utc>,
}

impl Store {
    /// Adds a key to user `user_id`. [`StoreError::Conflict`] if the fingerprint is already registered
    /// (to anyone), [`StoreError::NotFound`] if the user does not exist.
    pub async fn add_ssh_key(&self, user_id: i64, key: &SshKeyRecord) -> Result<()> {
        sqlx::query(
            "INSERT INTO ssh_keys (fingerprint, user_id, public_key, comment, created_at) VALUES ($1, $2, $3, $4, $5)",
        )
        .bind(&key.fingerprint)
        .bind(user_id)
        .bind(&key.public_key)
        .bind(&key.comment)
        .bind(ms(key.created_at))
        .execute(&self.pool)
        .await
        .map_err(|e| {
            if is_foreign_key_violation(&e) {
                StoreError::not_found("user", user_id)
            } else {
                conflict(e, || format!("ssh key {} is already registered", key.fingerprint))
            }
        })?;
        Ok(())
    }

    /// The keys of user `user_id`, oldest first.
    pub async fn list_ssh_keys(&self, user_id: i64) -> Result<Vec<SshKeyRecord>> {
        let rows = sqlx::query(
            "SELECT fingerprint, public_key, comment, created_at FROM ssh_keys WHERE user_id = $1 \
             ORDER BY created_at, fingerprint",
        )
        .bind(user_id)
        .fetch_all(&self.pool)
        .await?;
        rows.iter()
            .map(|row| {
                Ok(SshKeyRecord {
                    fingerprint: row.try_get("fingerprint")?,
                    public_key: row.try_get("public_key")?,
                    comment: row.try_get("comment")?,
                    created_at: get_time(row, "created_at")?,
                })
            })
            .collect()
    }

    /// The user who registered the key with `fingerprint`, if anyone did. A disabled user is still
    /// returned: the caller refuses them.
    pub async fn user_by_ssh_fingerprint(&self, fingerprint: &str) -> Result<Option<User>> {
        let row = sqlx::query(&format!(
            "SELECT {USER_COLUMNS_U} FROM ssh_keys k JOIN users u ON u.id = k.user_id WHERE k.fingerprint = $1"
        ))
        .bind(fingerprint)
        .fetch_optional(&self.pool)
        .await?;
        row.as_ref().map(user_from_row).transpose()
    }

    /// Removes the key with `fingerprint` from user `user_id`. [`StoreError::NotFound`] if that user
    /// has no such key (another user's key is not touched).
    pub async fn delete_ssh_key(&self, user_id: i64, fingerprint: &str) -> Result<()> {
        let done = sqlx::query("DELETE FROM ssh_keys WHERE user_id = $1 AND fingerprint = $2")
            .bind(user_id)
            .bind(fingerprint)
            .execute(&self.pool)
            .await?;
        if done.rows_affected() == 0 {
            return Err(StoreError::not_found("ssh key", fingerprint));
        }
        Ok(())
    }
}
