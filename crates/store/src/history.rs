//! Each workload's states in order: a row whenever a write leaves it in a state other than the last
//! one recorded, in the same transaction as the write, at the time the workload itself gives for that
//! state (when it was queued, started or ended), and a row for each edit of its terms (the state it was
//! in, what changed). Rows go with their workload (foreign key, cascade).

use crate::codec::{get_time, ms};
use crate::{Result, Store};
use chrono::{DateTime, Utc};
use gpuhub_core::state::StateEvent;
use gpuhub_core::workload::{Workload, WorkloadState};
use sqlx::{Any, Row, Transaction};

/// The most states kept per workload; older ones are dropped (a workload requeued without end).
const KEEP: i64 = 200;

/// When `w` entered its present state, as far as its own timestamps tell.
fn entered(w: &Workload) -> DateTime<Utc> {
    let latest = [Some(w.queued_at), w.started_at, w.finished_at, w.held_since].into_iter().flatten().max();
    let by_state = match w.state() {
        // a preempted workload keeps its place (`queued_at`) but was queued again when its run ended
        WorkloadState::Queued => [Some(w.queued_at), w.finished_at, w.held_until].into_iter().flatten().max(),
        WorkloadState::Pulling => Some(w.created_at),
        WorkloadState::Starting => w.held_since,
        WorkloadState::Running => w.started_at.or(w.held_since),
        _ => w.finished_at,
    };
    by_state.or(latest).unwrap_or(w.created_at)
}

/// Records `w`'s state unless it is the last one recorded for it.
pub(crate) async fn record(tx: &mut Transaction<'static, Any>, w: &Workload) -> Result<()> {
    let done = sqlx::query(
        "INSERT INTO workload_states (workload_id, at, state, message) SELECT $1, $2, $3, $4 \
         WHERE COALESCE((SELECT state FROM workload_states WHERE workload_id = $1 ORDER BY seq DESC LIMIT 1), '') <> $3",
    )
    .bind(&w.id)
    .bind(ms(entered(w)))
    .bind(w.state().as_str())
    .bind(w.message.as_deref())
    .execute(&mut **tx)
    .await?;
    if done.rows_affected() == 1 {
        sqlx::query(
            "DELETE FROM workload_states WHERE workload_id = $1 AND seq < \
             (SELECT MIN(seq) FROM (SELECT seq FROM workload_states WHERE workload_id = $1 ORDER BY seq DESC LIMIT $2) AS kept)",
        )
        .bind(&w.id)
        .bind(KEEP)
        .execute(&mut **tx)
        .await?;
    }
    Ok(())
}

/// Ends a write of `w`'s terms that changed `rows` rows: [`crate::StoreError::NotFound`] if none (the
/// workload is gone), else records `note` in its history at `at`, under its present state, and commits.
pub(crate) async fn note_change(
    mut tx: Transaction<'static, Any>,
    rows: u64,
    w: &Workload,
    note: &str,
    at: DateTime<Utc>,
) -> Result<()> {
    if rows == 0 {
        return Err(crate::StoreError::not_found("workload", &w.id));
    }
    sqlx::query("INSERT INTO workload_states (workload_id, at, state, message) VALUES ($1, $2, $3, $4)")
        .bind(&w.id)
        .bind(ms(at))
        .bind(w.state().as_str())
        .bind(note)
        .execute(&mut *tx)
        .await?;
    tx.commit().await?;
    Ok(())
}

/// A workload's move into a state, with whose and which workload it is ([`Store::state_changes`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StateChange {
    /// The workload's id.
    pub workload_id: String,
    /// Its owner.
    pub owner: String,
    /// Its name.
    pub name: String,
    /// The team queue it is charged to now (empty: the default queue).
    pub queue: String,
    /// When it was submitted.
    pub created_at: DateTime<Utc>,
    /// When it last ended, if it has.
    pub finished_at: Option<DateTime<Utc>>,
    /// When it entered the state.
    pub at: DateTime<Utc>,
    /// The state.
    pub state: WorkloadState,
    /// What it said then.
    pub message: Option<String>,
}

impl Store {
    /// Writes `w`'s terms an edit may change (run-time limit, priority, queue) and records `note` (what
    /// changed, by whom) in its history at `at`, under its present state, in one transaction.
    /// [`crate::StoreError::NotFound`] if the workload is gone.
    pub async fn edit_workload(&self, w: &Workload, note: &str, at: DateTime<Utc>) -> Result<()> {
        let mut tx = self.pool.begin().await?;
        let done = sqlx::query("UPDATE workloads SET runtime_limit_s = $2, priority = $3, queue = $4 WHERE id = $1")
            .bind(&w.id)
            .bind(w.runtime_limit.map(|s| crate::codec::u64_to_db(s.0)))
            .bind(i64::from(w.priority))
            .bind(&w.queue)
            .execute(&mut *tx)
            .await?;
        note_change(tx, done.rows_affected(), w, note, at).await
    }

    /// The states workload `id` went through, oldest first (at most the last 200).
    pub async fn workload_history(&self, id: &str) -> Result<Vec<StateEvent>> {
        let rows = sqlx::query("SELECT at, state, message FROM workload_states WHERE workload_id = $1 ORDER BY seq")
            .bind(id)
            .fetch_all(&self.pool)
            .await?;
        rows.iter()
            .map(|r| {
                Ok(StateEvent {
                    at: get_time(r, "at")?,
                    state: crate::codec::get_parsed(r, "state")?,
                    message: r.try_get("message")?,
                })
            })
            .collect()
    }

    /// The states every workload alive in `from`–`to` went through up to `to`, each workload's oldest
    /// first (the admin dashboard's queue lengths, waiting times and reclaims): a workload counts when
    /// it was created before `to` and had not ended before `from`. An edit of its terms repeats the state it
    /// was in (its note the message).
    pub async fn state_changes(&self, from: DateTime<Utc>, to: DateTime<Utc>) -> Result<Vec<StateChange>> {
        let rows = sqlx::query(
            "SELECT s.workload_id, w.owner, w.name, w.queue, w.created_at, w.finished_at, s.at, s.state, s.message \
             FROM workload_states s \
             JOIN workloads w ON w.id = s.workload_id \
             WHERE s.at < $2 AND w.created_at < $2 AND (w.finished_at IS NULL OR w.finished_at >= $1) \
             ORDER BY s.workload_id, s.seq",
        )
        .bind(ms(from))
        .bind(ms(to))
        .fetch_all(&self.pool)
        .await?;
        rows.iter()
            .map(|r| {
                Ok(StateChange {
                    workload_id: r.try_get("workload_id")?,
                    owner: r.try_get("owner")?,
                    name: r.try_get("name")?,
                    queue: r.try_get("queue")?,
                    created_at: get_time(r, "created_at")?,
                    finished_at: crate::codec::get_opt_time(r, "finished_at")?,
                    at: get_time(r, "at")?,
                    state: crate::codec::get_parsed(r, "state")?,
                    message: r.try_get("message")?,
                })
            })
            .collect()
    }
}
