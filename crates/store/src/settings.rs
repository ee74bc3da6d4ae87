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
}
