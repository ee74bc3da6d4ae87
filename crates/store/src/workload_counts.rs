//! Counts of the workloads that wait, start or run, per queue: `/metrics` reads them at every scrape.

use crate::codec::get_time;
use crate::{Result, Store, StoreError};
use chrono::{DateTime, Utc};
use gpuhub_core::workload::WorkloadState;
use sqlx::Row;

/// How many workloads of one queue are in one active state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ActiveCount {
    /// The team queue; empty is the default queue.
    pub queue: String,
    /// `queued`, `starting` or `running`.
    pub state: WorkloadState,
    /// How many.
    pub count: u64,
    /// The earliest `queued_at` among them: for `queued`, since when the longest-waiting one waits.
    pub oldest_queued_at: DateTime<Utc>,
}

impl Store {
    /// The queued, starting and running workloads counted per queue and state, with the oldest
    /// `queued_at` of each group, in one grouped query over the state index. Ended workloads are not
    /// counted: they accumulate without bound (until deleted), so counting them would read the whole
    /// table at every call.
    pub async fn count_active_workloads(&self) -> Result<Vec<ActiveCount>> {
        let rows = sqlx::query(
            "SELECT state, queue, COUNT(*) AS n, MIN(queued_at) AS oldest FROM workloads \
             WHERE state IN ('pulling', 'queued', 'starting', 'running') GROUP BY state, queue ORDER BY state, queue",
        )
        .fetch_all(&self.pool)
        .await?;
        rows.iter()
            .map(|row| {
                let state: String = row.try_get("state")?;
                Ok(ActiveCount {
                    queue: row.try_get("queue")?,
                    state: state.parse().map_err(|_| StoreError::Corrupt(format!("state: {state:?}")))?,
                    count: row.try_get::<i64, _>("n")?.max(0) as u64,
                    oldest_queued_at: get_time(row, "oldest")?,
                })
            })
            .collect()
    }

    /// Owner, name and queue (empty: the default queue) of every workload that holds resources
    /// (`starting`, `running`), over the state index: `/metrics` labels GPUs' holders with their queue.
    pub async fn list_holding_queues(&self) -> Result<Vec<(String, String, String)>> {
        let rows = sqlx::query(
            "SELECT owner, name, queue FROM workloads WHERE state IN ('starting', 'running') ORDER BY owner, name",
        )
        .fetch_all(&self.pool)
        .await?;
        rows.iter().map(|r| Ok((r.try_get("owner")?, r.try_get("name")?, r.try_get("queue")?))).collect()
    }

    /// How many members the pulling, queued, starting and running workloads have (of `owner` only, if
    /// given): each member is a container, or will be.
    pub async fn count_active_members(&self, owner: Option<&str>) -> Result<u64> {
        let mut sql = "SELECT CAST(COALESCE(SUM(size), 0) AS BIGINT) FROM workloads \
                       WHERE state IN ('pulling', 'queued', 'starting', 'running')"
            .to_owned();
        if owner.is_some() {
            sql.push_str(" AND owner = $1");
        }
        let mut q = sqlx::query_scalar::<_, i64>(&sql);
        if let Some(o) = owner {
            q = q.bind(o);
        }
        Ok(q.fetch_one(&self.pool).await?.max(0) as u64)
    }

    /// Whether `owner` has a workload other than `except_id` that holds resources (`starting`,
    /// `running`): one indexed row at most, however many they run. A start asks it to decide whether
    /// the owner's home may change size.
    pub async fn holds_other(&self, owner: &str, except_id: &str) -> Result<bool> {
        let row = sqlx::query(
            "SELECT 1 FROM workloads WHERE owner = $1 AND state IN ('starting', 'running') AND id <> $2 LIMIT 1",
        )
        .bind(owner)
        .bind(except_id)
        .fetch_optional(&self.pool)
        .await?;
        Ok(row.is_some())
    }
}
