//! API tokens and browser sessions, kept only as a hash of the secret.

use crate::codec::{get_opt_time, ms, opt_ms};
use crate::error::{conflict, is_foreign_key_violation};
use crate::users::{USER_COLUMNS_U, user_from_row};
use crate::{Result, Store, StoreError};
use chrono::{DateTime, Utc};
use gpuhub_core::user::User;
use sqlx::Row;

/// How many leading hex digits of a token's hash identify it to its owner.
pub const TOKEN_ID_LEN: usize = 16;

/// What a stored token is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TokenKind {
    /// A bearer token for the CLI and scripts.
    Api,
    /// A browser session (cookie).
    Session,
}

impl TokenKind {
    /// How the kind is spelled in the `kind` column.
    pub fn as_str(self) -> &'static str {
        match self {
            TokenKind::Api => "api",
            TokenKind::Session => "session",
        }
    }

    fn parse(s: &str) -> Result<TokenKind> {
        match s {
            "api" => Ok(TokenKind::Api),
            "session" => Ok(TokenKind::Session),
            other => Err(StoreError::Corrupt(format!("kind: unknown token kind {other:?}"))),
        }
    }
}

/// A stored token as [`Store::list_user_tokens`] shows it (the secret itself is never stored).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TokenRecord {
    /// Hex SHA-256 of the secret.
    pub hash: String,
    /// API token or browser session.
    pub kind: TokenKind,
    /// When it was issued (millisecond precision).
    pub created_at: DateTime<Utc>,
    /// When it stops working; `None` for never.
    pub expires_at: Option<DateTime<Utc>>,
}

impl Store {
    /// Stores a token of user `user_id` by its `hash` (hex SHA-256 of the secret, computed by the
    /// caller). It works until `expires_at` (exclusive), or forever when `None`.
    /// [`StoreError::NotFound`] if the user does not exist, [`StoreError::Conflict`] if the hash is
    /// already stored.
    pub async fn insert_token(
        &self,
        user_id: i64,
        hash: &str,
        kind: TokenKind,
        now: DateTime<Utc>,
        expires_at: Option<DateTime<Utc>>,
    ) -> Result<()> {
        sqlx::query("INSERT INTO tokens (hash, user_id, kind, created_at, expires_at) VALUES ($1, $2, $3, $4, $5)")
            .bind(hash)
            .bind(user_id)
            .bind(kind.as_str())
            .bind(ms(now))
            .bind(opt_ms(expires_at))
            .execute(&self.pool)
            .await
            .map_err(|e| {
                if is_foreign_key_violation(&e) {
                    StoreError::not_found("user", user_id)
                } else {
                    conflict(e, || "token already exists".to_owned())
                }
            })?;
        Ok(())
    }

    /// The user a token hash belongs to and the token's kind; `None` if the hash is unknown or the
    /// token expired at or before `now`. A disabled user is still returned: the caller refuses them.
    pub async fn token_user(&self, hash: &str, now: DateTime<Utc>) -> Result<Option<(User, TokenKind)>> {
        let row = sqlx::query(&format!(
            "SELECT {USER_COLUMNS_U}, t.kind FROM tokens t JOIN users u ON u.id = t.user_id \
             WHERE t.hash = $1 AND (t.expires_at IS NULL OR t.expires_at > $2)"
        ))
        .bind(hash)
        .bind(ms(now))
        .fetch_optional(&self.pool)
        .await?;
        match row {
            None => Ok(None),
            Some(row) => Ok(Some((user_from_row(&row)?, TokenKind::parse(&row.try_get::<String, _>("kind")?)?))),
        }
    }

    /// Revokes one token. Revoking an unknown hash is not an error (logging out twice is harmless).
    pub async fn delete_token(&self, hash: &str) -> Result<()> {
        sqlx::query("DELETE FROM tokens WHERE hash = $1").bind(hash).execute(&self.pool).await?;
        Ok(())
    }

    /// Revokes every API token and browser session of user `user_id`.
    pub async fn delete_user_tokens(&self, user_id: i64) -> Result<()> {
        sqlx::query("DELETE FROM tokens WHERE user_id = $1").bind(user_id).execute(&self.pool).await?;
        Ok(())
    }

    /// Revokes every API token and browser session of user `user_id` except the one stored as `keep`
    /// (the caller's own, after a password change); returns how many were revoked.
    pub async fn delete_user_tokens_except(&self, user_id: i64, keep: Option<&str>) -> Result<u64> {
        let done = sqlx::query("DELETE FROM tokens WHERE user_id = $1 AND hash <> $2")
            .bind(user_id)
            .bind(keep.unwrap_or(""))
            .execute(&self.pool)
            .await?;
        Ok(done.rows_affected())
    }

    /// Revokes the token of user `user_id` whose hash starts with `id` (the id the API shows: at least
    /// [`TOKEN_ID_LEN`] hex digits). Another user's token, or a prefix that is not hex, is not found.
    pub async fn delete_user_token_by_id(&self, user_id: i64, id: &str) -> Result<()> {
        if id.len() < TOKEN_ID_LEN || id.len() > 64 || !id.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(StoreError::not_found("token", id));
        }
        let pattern = format!("{}%", id.to_ascii_lowercase());
        let done = sqlx::query("DELETE FROM tokens WHERE user_id = $1 AND hash LIKE $2")
            .bind(user_id)
            .bind(pattern)
            .execute(&self.pool)
            .await?;
        if done.rows_affected() == 0 {
            return Err(StoreError::not_found("token", id));
        }
        Ok(())
    }

    /// Deletes tokens that expired at or before `now`; returns how many. For a periodic clean-up.
    pub async fn delete_expired_tokens(&self, now: DateTime<Utc>) -> Result<u64> {
        let done = sqlx::query("DELETE FROM tokens WHERE expires_at IS NOT NULL AND expires_at <= $1")
            .bind(ms(now))
            .execute(&self.pool)
            .await?;
        Ok(done.rows_affected())
    }

    /// The tokens of user `user_id`, oldest first (hashes only).
    pub async fn list_user_tokens(&self, user_id: i64) -> Result<Vec<TokenRecord>> {
        let rows = sqlx::query(
            "SELECT hash, kind, created_at, expires_at FROM tokens WHERE user_id = $1 ORDER BY created_at, hash",
        )
        .bind(user_id)
        .fetch_all(&self.pool)
        .await?;
        rows.iter()
            .map(|row| {
                Ok(TokenRecord {
                    hash: row.try_get("hash")?,
                    kind: TokenKind::parse(&row.try_get::<String, _>("kind")?)?,
                    created_at: crate::codec::get_time(row, "created_at")?,
                    expires_at: get_opt_time(row, "expires_at")?,
                })
            })
            .collect()
    }
}
