//! Accounts: creation with UID assignment, look-ups, changes and deletion.

use crate::codec::{get_bool, get_int, get_time, ms};
use crate::error::conflict;
use crate::{Result, Store, StoreError};
use chrono::{DateTime, Utc};
use gpuhub_core::user::{Role, UidRange, User, UserSource};
use sqlx::Row;
use sqlx::any::AnyRow;

/// The `counters` row holding the last UID handed out.
pub(crate) const LAST_UID: &str = "last_uid";

/// The user columns, in the order [`user_from_row`] reads them, for `FROM users`.
pub(crate) const USER_COLUMNS: &str = "id, username, role, uid, disabled, created_at, home_quota, source, gid";

/// The user columns qualified with the alias `u`, for joins.
pub(crate) const USER_COLUMNS_U: &str =
    "u.id, u.username, u.role, u.uid, u.disabled, u.created_at, u.home_quota, u.source, u.gid";

/// How a role is spelled in the `role` column.
pub(crate) fn role_str(role: Role) -> &'static str {
    match role {
        Role::Admin => "admin",
        Role::User => "user",
    }
}

fn parse_role(s: &str) -> Result<Role> {
    match s {
        "admin" => Ok(Role::Admin),
        "user" => Ok(Role::User),
        other => Err(StoreError::Corrupt(format!("role: unknown role {other:?}"))),
    }
}

/// Decodes a row selected with [`USER_COLUMNS`] or [`USER_COLUMNS_U`].
pub(crate) fn user_from_row(row: &AnyRow) -> Result<User> {
    let uid: u32 = get_int(row, "uid")?;
    let source: String = row.try_get("source")?;
    Ok(User {
        id: row.try_get("id")?,
        username: row.try_get("username")?,
        role: parse_role(&row.try_get::<String, _>("role")?)?,
        uid,
        gid: match row.try_get::<Option<i64>, _>("gid")? {
            Some(g) => u32::try_from(g).map_err(|_| StoreError::Corrupt(format!("gid: {g} out of range")))?,
            None => uid,
        },
        source: UserSource::parse(&source)
            .ok_or_else(|| StoreError::Corrupt(format!("source: unknown source {source:?}")))?,
        disabled: get_bool(row, "disabled")?,
        created_at: get_time(row, "created_at")?,
        home_quota: row
            .try_get::<Option<i64>, _>("home_quota")?
            .map(|q| u64::try_from(q).map_err(|_| StoreError::Corrupt(format!("home_quota: {q} out of range"))))
            .transpose()?,
    })
}

/// IDs that local accounts must not be given although no account here has them (the host's own
/// accounts and groups), asked at each creation.
pub type TakenIds = std::sync::Arc<dyn Fn() -> std::collections::BTreeSet<u32> + Send + Sync>;

/// Where local accounts' UIDs come from: the range, and the IDs passed over.
#[derive(Clone, Default)]
pub(crate) struct UidPolicy {
    range: UidRange,
    taken: Option<TakenIds>,
}

impl std::fmt::Debug for UidPolicy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UidPolicy").field("range", &self.range).field("taken", &self.taken.is_some()).finish()
    }
}

/// One more than the highest UID handed out from `range`, counted: one statement, so that the counter
/// row's lock serializes concurrent creations. A counter outside the range (one left by an earlier
/// range) starts again at the range's first; the result also stays above any UID of the range already
/// in the table, however it got there (an outside account's).
async fn next_uid(tx: &mut sqlx::Transaction<'_, sqlx::Any>, range: UidRange) -> Result<i64> {
    Ok(sqlx::query_scalar(
        "UPDATE counters SET value = 1 + CASE \
             WHEN (CASE WHEN value BETWEEN $2 AND $3 THEN value ELSE $2 END) \
                  >= (SELECT COALESCE(MAX(uid), $2) FROM users WHERE uid BETWEEN $2 AND $3) \
             THEN (CASE WHEN value BETWEEN $2 AND $3 THEN value ELSE $2 END) \
             ELSE (SELECT COALESCE(MAX(uid), $2) FROM users WHERE uid BETWEEN $2 AND $3) END \
         WHERE name = $1 RETURNING value",
    )
    .bind(LAST_UID)
    .bind(i64::from(range.first) - 1)
    .bind(i64::from(range.last))
    .fetch_one(&mut **tx)
    .await?)
}

impl Store {
    /// This store, handing local accounts UIDs from `range` and passing over the IDs `taken` names
    /// (asked at each creation); by default [`UidRange::default`] and nothing taken.
    pub fn with_uids(mut self, range: UidRange, taken: Option<TakenIds>) -> Store {
        self.uids = UidPolicy { range, taken };
        self
    }

    /// Creates an account. Its UID (and GID) is one more than the highest UID ever handed out from the
    /// store's range ([`Store::with_uids`]; the first is the range's first), passing over every team
    /// queue's group, every account's GID and the IDs the store is told are taken (the host's); UIDs of
    /// deleted users are never reused, so a new user cannot inherit files a former one left on shared
    /// storage. [`StoreError::Conflict`] if the username is taken or the range is used up.
    pub async fn create_user(
        &self,
        username: &str,
        password_hash: &str,
        role: Role,
        now: DateTime<Utc>,
    ) -> Result<User> {
        let mut tx = self.pool.begin().await?;
        // the counter's update comes first: its lock serializes concurrent creations (SQLite cannot
        // turn a transaction that has read into one that writes while another writes)
        let range = self.uids.range;
        let mut uid = next_uid(&mut tx, range).await?;
        // a local account's GID is its UID: never a team's group nor another account's group, nor an
        // ID of the host's accounts
        let mut groups: Vec<i64> =
            sqlx::query_scalar("SELECT gid FROM users WHERE gid IS NOT NULL").fetch_all(&mut *tx).await?;
        for row in sqlx::query("SELECT settings FROM queues").fetch_all(&mut *tx).await? {
            let q: gpuhub_core::queue::QueueDef = crate::codec::get_json(&row, "settings")?;
            groups.extend(q.team_gid.map(i64::from));
        }
        groups.extend(self.uids.taken.as_ref().map(|t| t()).unwrap_or_default().into_iter().map(i64::from));
        while groups.contains(&uid) && uid <= i64::from(range.last) {
            uid = next_uid(&mut tx, range).await?;
        }
        if uid > i64::from(range.last) {
            return Err(StoreError::Conflict(format!(
                "no uid left for {username}: every uid of uid_range {range} has been handed out or is the \
                 host's; widen uid_range"
            )));
        }
        let uid = u32::try_from(uid).map_err(|_| StoreError::Corrupt(format!("uid: next uid {uid} out of range")))?;
        let id: i64 = sqlx::query_scalar(
            "INSERT INTO users (username, password_hash, role, uid, disabled, created_at) \
             VALUES ($1, $2, $3, $4, $5, $6) RETURNING id",
        )
        .bind(username)
        .bind(password_hash)
        .bind(role_str(role))
        .bind(i64::from(uid))
        .bind(false)
        .bind(ms(now))
        .fetch_one(&mut *tx)
        .await
        .map_err(|e| conflict(e, || format!("user {username} already exists")))?;
        tx.commit().await?;
        let created_at = DateTime::from_timestamp_millis(ms(now)).unwrap_or(now);
        Ok(User {
            id,
            username: username.to_owned(),
            role,
            uid,
            gid: uid,
            source: UserSource::Local,
            disabled: false,
            created_at,
            home_quota: None,
        })
    }

    /// The account whose GID is `gid` (a local account's GID is its UID), if any.
    pub async fn user_with_gid(&self, gid: u32) -> Result<Option<String>> {
        Ok(sqlx::query_scalar("SELECT username FROM users WHERE COALESCE(gid, uid) = $1 ORDER BY username LIMIT 1")
            .bind(i64::from(gid))
            .fetch_optional(&self.pool)
            .await?)
    }

    /// Creates an account whose identity comes from outside (`source`), with the UID and GID it has
    /// there and no password of its own. [`StoreError::Conflict`] if the username or the UID is taken.
    pub async fn create_external_user(
        &self,
        username: &str,
        role: Role,
        ids: (u32, u32),
        source: UserSource,
        now: DateTime<Utc>,
    ) -> Result<User> {
        let (uid, gid) = ids;
        let id: i64 = sqlx::query_scalar(
            "INSERT INTO users (username, password_hash, role, uid, disabled, created_at, source, gid) \
             VALUES ($1, '!', $2, $3, $4, $5, $6, $7) RETURNING id",
        )
        .bind(username)
        .bind(role_str(role))
        .bind(i64::from(uid))
        .bind(false)
        .bind(ms(now))
        .bind(source.as_str())
        .bind(i64::from(gid))
        .fetch_one(&self.pool)
        .await
        .map_err(|e| conflict(e, || format!("user {username} or uid {uid} exists already")))?;
        let created_at = DateTime::from_timestamp_millis(ms(now)).unwrap_or(now);
        Ok(User {
            id,
            username: username.to_owned(),
            role,
            uid,
            gid,
            source,
            disabled: false,
            created_at,
            home_quota: None,
        })
    }

    /// Marks where `username`'s identity comes from.
    pub async fn set_source(&self, username: &str, source: UserSource) -> Result<()> {
        self.update_user(username, "UPDATE users SET source = $1 WHERE username = $2", source.as_str()).await
    }

    /// Sets the role, UID and GID of an account from outside (what its source says now).
    pub async fn sync_external_user(&self, username: &str, role: Role, uid: u32, gid: u32) -> Result<()> {
        let done = sqlx::query("UPDATE users SET role = $1, uid = $2, gid = $3 WHERE username = $4")
            .bind(role_str(role))
            .bind(i64::from(uid))
            .bind(i64::from(gid))
            .bind(username)
            .execute(&self.pool)
            .await
            .map_err(|e| conflict(e, || format!("uid {uid} is another user's")))?;
        if done.rows_affected() == 0 {
            return Err(StoreError::not_found("user", username));
        }
        Ok(())
    }

    /// The account named `username`.
    pub async fn get_user(&self, username: &str) -> Result<User> {
        let row = sqlx::query(&format!("SELECT {USER_COLUMNS} FROM users WHERE username = $1"))
            .bind(username)
            .fetch_optional(&self.pool)
            .await?
            .ok_or_else(|| StoreError::not_found("user", username))?;
        user_from_row(&row)
    }

    /// The account with database id `id`.
    pub async fn get_user_by_id(&self, id: i64) -> Result<User> {
        let row = sqlx::query(&format!("SELECT {USER_COLUMNS} FROM users WHERE id = $1"))
            .bind(id)
            .fetch_optional(&self.pool)
            .await?
            .ok_or_else(|| StoreError::not_found("user", id))?;
        user_from_row(&row)
    }

    /// The account named `username` with its password hash, for logging in.
    pub async fn user_with_password_hash(&self, username: &str) -> Result<(User, String)> {
        let row = sqlx::query(&format!("SELECT {USER_COLUMNS}, password_hash FROM users WHERE username = $1"))
            .bind(username)
            .fetch_optional(&self.pool)
            .await?
            .ok_or_else(|| StoreError::not_found("user", username))?;
        Ok((user_from_row(&row)?, row.try_get("password_hash")?))
    }

    /// Every account, ordered by username.
    pub async fn list_users(&self) -> Result<Vec<User>> {
        let rows =
            sqlx::query(&format!("SELECT {USER_COLUMNS} FROM users ORDER BY username")).fetch_all(&self.pool).await?;
        rows.iter().map(user_from_row).collect()
    }

    /// At most `limit` accounts whose username sorts after `after`, ordered by username (the unique
    /// index on it serves the query), and whether more follow.
    pub async fn list_users_page(&self, after: Option<&str>, limit: u32) -> Result<(Vec<User>, bool)> {
        let rows =
            sqlx::query(&format!("SELECT {USER_COLUMNS} FROM users WHERE username > $1 ORDER BY username LIMIT $2"))
                .bind(after.unwrap_or(""))
                .bind(i64::from(limit) + 1)
                .fetch_all(&self.pool)
                .await?;
        let mut users = rows.iter().map(user_from_row).collect::<Result<Vec<_>>>()?;
        let more = users.len() > limit as usize;
        users.truncate(limit as usize);
        Ok((users, more))
    }

    /// How many accounts exist (0 on a fresh install: the server then creates the first admin).
    pub async fn count_users(&self) -> Result<i64> {
        Ok(sqlx::query_scalar("SELECT COUNT(*) FROM users").fetch_one(&self.pool).await?)
    }

    /// Replaces the password hash of `username`.
    pub async fn set_password_hash(&self, username: &str, hash: &str) -> Result<()> {
        self.update_user(username, "UPDATE users SET password_hash = $1 WHERE username = $2", hash).await
    }

    /// Changes the role of `username`.
    pub async fn set_role(&self, username: &str, role: Role) -> Result<()> {
        self.update_user(username, "UPDATE users SET role = $1 WHERE username = $2", role_str(role)).await
    }

    /// Disables or re-enables `username`. Tokens are kept; the caller decides whether to revoke them.
    pub async fn set_disabled(&self, username: &str, disabled: bool) -> Result<()> {
        let done = sqlx::query("UPDATE users SET disabled = $1 WHERE username = $2")
            .bind(disabled)
            .bind(username)
            .execute(&self.pool)
            .await?;
        if done.rows_affected() == 0 {
            return Err(StoreError::not_found("user", username));
        }
        Ok(())
    }

    /// Sets the home quota of `username` in bytes (`None`: the configured default; `Some(0)`: none).
    pub async fn set_home_quota(&self, username: &str, quota: Option<u64>) -> Result<()> {
        let q = quota.map(|q| i64::try_from(q).unwrap_or(i64::MAX));
        let done = sqlx::query("UPDATE users SET home_quota = $1 WHERE username = $2")
            .bind(q)
            .bind(username)
            .execute(&self.pool)
            .await?;
        if done.rows_affected() == 0 {
            return Err(StoreError::not_found("user", username));
        }
        Ok(())
    }

    async fn update_user(&self, username: &str, sql: &str, value: &str) -> Result<()> {
        let done = sqlx::query(sql).bind(value).bind(username).execute(&self.pool).await?;
        if done.rows_affected() == 0 {
            return Err(StoreError::not_found("user", username));
        }
        Ok(())
    }

    /// Deletes `username` with their API tokens, browser sessions and SSH keys, in one transaction.
    /// Their workloads stay (they are keyed by username and remain visible to admins).
    pub async fn delete_user(&self, username: &str) -> Result<()> {
        let mut tx = self.pool.begin().await?;
        // writes only, so that SQLite takes the write lock at the first statement (waiting for it
        // when busy) instead of failing to upgrade a read snapshot that another writer made stale;
        // the foreign keys cascade too, but explicit deletes keep this true whatever the pragmas
        for sql in [
            "DELETE FROM tokens WHERE user_id IN (SELECT id FROM users WHERE username = $1)",
            "DELETE FROM ssh_keys WHERE user_id IN (SELECT id FROM users WHERE username = $1)",
        ] {
            sqlx::query(sql).bind(username).execute(&mut *tx).await?;
        }
        let done = sqlx::query("DELETE FROM users WHERE username = $1").bind(username).execute(&mut *tx).await?;
        if done.rows_affected() == 0 {
            return Err(StoreError::not_found("user", username));
        }
        tx.commit().await?;
        Ok(())
    }
}
