//! Team queues: seeded from the configuration file on first start, then edited by admins through the
//! API. Each row holds a [`QueueDef`] as JSON.

use crate::codec::{get_json, ms, to_json};
use crate::error::conflict;
use crate::{Result, Store, StoreError};
use chrono::{DateTime, Utc};
use gpuhub_core::queue::QueueDef;
use gpuhub_core::workload::WorkloadState;

/// The setting that marks the queue table as seeded from the configuration file.
const SEEDED: &str = "queues_seeded";

impl Store {
    /// Every queue, by name.
    pub async fn list_queues(&self) -> Result<Vec<QueueDef>> {
        let rows = sqlx::query("SELECT settings FROM queues ORDER BY name").fetch_all(&self.pool).await?;
        rows.iter().map(|r| get_json(r, "settings")).collect()
    }

    /// The queue `name`, if it exists.
    pub async fn get_queue(&self, name: &str) -> Result<Option<QueueDef>> {
        let row =
            sqlx::query("SELECT settings FROM queues WHERE name = $1").bind(name).fetch_optional(&self.pool).await?;
        row.map(|r| get_json(&r, "settings")).transpose()
    }

    /// Stores a new queue. [`StoreError::Conflict`] if one of that name exists.
    pub async fn insert_queue(&self, q: &QueueDef, now: DateTime<Utc>) -> Result<()> {
        sqlx::query("INSERT INTO queues (name, settings, created_at, updated_at) VALUES ($1, $2, $3, $3)")
            .bind(&q.name)
            .bind(to_json("queue", q)?)
            .bind(ms(now))
            .execute(&self.pool)
            .await
            .map_err(|e| conflict(e, || format!("queue {} already exists", q.name)))?;
        Ok(())
    }

    /// Replaces the settings of queue `q.name`, but only if they are still `expected` (what the caller
    /// read and patched): a concurrent edit makes this return `false`, and the caller reads again.
    /// [`StoreError::NotFound`] if the queue is gone.
    pub async fn update_queue_if(&self, expected: &QueueDef, q: &QueueDef, now: DateTime<Utc>) -> Result<bool> {
        let done = sqlx::query("UPDATE queues SET settings = $1, updated_at = $2 WHERE name = $3 AND settings = $4")
            .bind(to_json("queue", q)?)
            .bind(ms(now))
            .bind(&q.name)
            .bind(to_json("queue", expected)?)
            .execute(&self.pool)
            .await?;
        if done.rows_affected() == 1 {
            return Ok(true);
        }
        match self.get_queue(&q.name).await? {
            None => Err(StoreError::not_found("queue", &q.name)),
            Some(_) => Ok(false),
        }
    }

    /// Removes queue `name` unless a workload in it is queued, starting or running (checked in the same
    /// statement). [`StoreError::Conflict`] then; [`StoreError::NotFound`] if there is no such queue.
    pub async fn delete_queue(&self, name: &str) -> Result<()> {
        let active = [WorkloadState::Queued, WorkloadState::Starting, WorkloadState::Running];
        let done = sqlx::query(
            "DELETE FROM queues WHERE name = $1 AND NOT EXISTS \
             (SELECT 1 FROM workloads WHERE queue = $1 AND state IN ($2, $3, $4))",
        )
        .bind(name)
        .bind(active[0].as_str())
        .bind(active[1].as_str())
        .bind(active[2].as_str())
        .execute(&self.pool)
        .await?;
        if done.rows_affected() == 1 {
            return Ok(());
        }
        match self.get_queue(name).await? {
            None => Err(StoreError::not_found("queue", name)),
            Some(_) => Err(StoreError::Conflict(format!(
                "queue {name} has queued or running workloads; stop or move them first"
            ))),
        }
    }

    /// On the first call for this database, stores `queues` (the configuration file's) and returns
    /// `true`; on later calls stores nothing and returns `false`: from then on the database's queues
    /// are the ones in force, edited through the API.
    pub async fn seed_queues(&self, queues: &[QueueDef], now: DateTime<Utc>) -> Result<bool> {
        if self.get_setting(SEEDED).await?.is_some() {
            return Ok(false);
        }
        let mut tx = self.pool.begin().await?;
        for q in queues {
            sqlx::query(
                "INSERT INTO queues (name, settings, created_at, updated_at) VALUES ($1, $2, $3, $3) \
                 ON CONFLICT (name) DO NOTHING",
            )
            .bind(&q.name)
            .bind(to_json("queue", q)?)
            .bind(ms(now))
            .execute(&mut *tx)
            .await?;
        }
        sqlx::query("INSERT INTO settings (key, value) VALUES ($1, $2) ON CONFLICT (key) DO NOTHING")
            .bind(SEEDED)
            .bind(ms(now).to_string())
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        Ok(true)
    }
}
