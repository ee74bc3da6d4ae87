//! Small key/value settings (for example, the server's own secrets and one-time markers).

use crate::{Result, Store};

impl Store {
    /// The value of setting `key`, if set.
    pub async fn get_setting(&self, key: &str) -> Result<Option<String>> {
        Ok(sqlx::query_scalar("SELECT value FROM settings WHERE key = $1").bind(key).fetch_optional(&self.pool).await?)
    }

    /// Sets `key` to `value`, replacing any previous value.
    pub async fn set_setting(&self, key: &str, value: &str) -> Result<()> {
        sqlx::query(
            "INSERT INTO settings (key, value) VALUES ($1, $2) ON CONFLICT (key) DO UPDATE SET value = excluded.value",
        )
        .bind(key)
        .bind(value)
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    /// Removes setting `key` and returns the value it had: of callers racing for it, one gets it.
    pub async fn take_setting(&self, key: &str) -> Result<Option<String>> {
        Ok(sqlx::query_scalar("DELETE FROM settings WHERE key = $1 RETURNING value")
            .bind(key)
            .fetch_optional(&self.pool)
            .await?)
    }

    /// The settings whose keys start with `prefix`, by key.
    pub async fn settings_with_prefix(&self, prefix: &str) -> Result<Vec<(String, String)>> {
        let pattern = format!("{}%", prefix.replace('\\', "\\\\").replace('%', "\\%").replace('_', "\\_"));
        let rows = sqlx::query("SELECT key, value FROM settings WHERE key LIKE $1 ESCAPE '\\' ORDER BY key")
            .bind(pattern)
            .fetch_all(&self.pool)
            .await?;
        let all: Vec<(String, String)> = rows
            .iter()
            .map(|r| Ok((sqlx::Row::try_get(r, "key")?, sqlx::Row::try_get(r, "value")?)))
            .collect::<Result<_>>()?;
        // SQLite's LIKE ignores ASCII case
        Ok(all.into_iter().filter(|(k, _)| k.starts_with(prefix)).collect())
    }
}
