//! Lists that scale: keyset pages of workloads in `(created_at, id)` order with filters, and the
//! per-owner caps on how many workloads a submission may add to.

use crate::workloads::{COLUMN_COUNT, COLUMNS, bind_insert, insert_error, placeholders, workload_from_row};
use crate::{Backend, Result, Store};
use futures::TryStreamExt;
use gpuhub_core::workload::{Workload, WorkloadKind, WorkloadState};
use sqlx::Row;

/// A position in the list of workloads ordered by `created_at`, then `id`: a page continues after it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct WorkloadCursor {
    /// The creation time of the last workload of the previous page, in unix milliseconds.
    pub created_at_ms: i64,
    /// Its id.
    pub id: String,
}

impl WorkloadCursor {
    /// The position just after `w`.
    pub fn after(w: &Workload) -> Self {
        Self { created_at_ms: w.created_at.timestamp_millis(), id: w.id.clone() }
    }
}

/// One page of [`Store::list_workloads_page`]: which workloads, after which, how many at most.
/// `None` filters do not filter.
#[derive(Debug, Clone, Default)]
pub struct WorkloadQuery {
    /// Only this owner's workloads.
    pub owner: Option<String>,
    /// Only workloads in one of these states (an empty list matches nothing).
    pub states: Option<Vec<WorkloadState>>,
    /// Only jobs, or only workspaces.
    pub kind: Option<WorkloadKind>,
    /// Only workloads charged to this team queue (`""` is the default queue).
    pub queue: Option<String>,
    /// Start after this position; `None` starts at the oldest.
    pub after: Option<WorkloadCursor>,
    /// The most workloads on the page (at least 1 is used).
    pub limit: u32,
    /// When set, the page ends early, after the workload that takes the text of its workloads (command,
    /// environment, apps, message…) past this many bytes; it holds at least one workload.
    pub max_bytes: Option<usize>,
}

/// A page of workloads, oldest first, and where the next page starts when there is one.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct WorkloadPage {
    /// The workloads of this page.
    pub workloads: Vec<Workload>,
    /// The cursor of the next page; `None` on the last page.
    pub next: Option<WorkloadCursor>,
}

/// How many workloads one owner may have, checked by [`Store::insert_workload_capped`] in the same
/// statement as the insert.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OwnerCaps {
    /// Workloads of the owner in any state.
    pub total: u64,
    /// Workloads of the owner waiting in the queue.
    pub queued: u64,
}

/// Which cap refused a workload, with the owner's count at the time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CapReached {
    /// The owner has `count` workloads, the total cap.
    Total {
        /// The owner's workloads.
        count: u64,
    },
    /// The owner has `count` queued workloads, the queued cap.
    Queued {
        /// The owner's queued workloads.
        count: u64,
    },
}

/// How many workloads an owner has, in all and queued.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct OwnerCounts {
    /// In any state.
    pub total: u64,
    /// In state `queued`.
    pub queued: u64,
}

/// A value bound to a placeholder of a built query.
enum Arg {
    Text(String),
    Int(i64),
}

/// About how many bytes of text a workload holds (what a page's `max_bytes` counts).
fn text_size(w: &Workload) -> usize {
    let strings = w.command.iter().chain(w.env.keys()).chain(w.env.values()).chain(&w.gpus);
    let apps = w.apps.iter().map(|a| a.name.len() + a.command.iter().map(String::len).sum::<usize>());
    256 + w.name.len()
        + w.image.len()
        + strings.map(String::len).sum::<usize>()
        + apps.sum::<usize>()
        + w.message.as_ref().map_or(0, String::len)
        + w.constraint.as_ref().map_or(0, String::len)
}

/// Adds `arg` to `args` and returns its placeholder.
fn param(arg: Arg, args: &mut Vec<Arg>) -> String {
    args.push(arg);
    format!("${}", args.len())
}

impl Store {
    /// One page of the workloads matching `query`, oldest first (by `created_at`, then `id`), in one
    /// query that reads at most `limit + 1` rows; each filter has an index ending in the sort key.
    pub async fn list_workloads_page(&self, query: &WorkloadQuery) -> Result<WorkloadPage> {
        let mut conditions = Vec::new();
        let mut args = Vec::new();
        if let Some(owner) = &query.owner {
            conditions.push(format!("owner = {}", param(Arg::Text(owner.clone()), &mut args)));
        }
        if let Some(states) = &query.states {
            if states.is_empty() {
                return Ok(WorkloadPage::default());
            }
            let list: Vec<String> = states.iter().map(|s| param(Arg::Text(s.as_str().to_owned()), &mut args)).collect();
            conditions.push(format!("state IN ({})", list.join(", ")));
        }
        if let Some(kind) = query.kind {
            conditions.push(format!("kind = {}", param(Arg::Text(kind.as_str().to_owned()), &mut args)));
        }
        if let Some(queue) = &query.queue {
            conditions.push(format!("queue = {}", param(Arg::Text(queue.clone()), &mut args)));
        }
        if let Some(after) = &query.after {
            let at = param(Arg::Int(after.created_at_ms), &mut args);
            let id = param(Arg::Text(after.id.clone()), &mut args);
            conditions.push(format!("(created_at, id) > ({at}, {id})"));
        }
        let limit = query.limit.max(1);
        let mut sql = format!("SELECT {COLUMNS} FROM workloads");
        if !conditions.is_empty() {
            sql.push_str(" WHERE ");
            sql.push_str(&conditions.join(" AND "));
        }
        sql.push_str(&format!(" ORDER BY created_at, id LIMIT {}", param(Arg::Int(i64::from(limit) + 1), &mut args)));
        let mut q = sqlx::query(&sql);
        for arg in args {
            q = match arg {
                Arg::Text(s) => q.bind(s),
                Arg::Int(i) => q.bind(i),
            };
        }
        // rows are decoded as they arrive, so a page cut short by `max_bytes` never holds the rest
        let mut rows = q.fetch(&self.pool);
        let (mut workloads, mut bytes, mut more) = (Vec::new(), 0usize, false);
        while let Some(row) = rows.try_next().await? {
            if workloads.len() == limit as usize || query.max_bytes.is_some_and(|max| bytes > max) {
                more = true;
                break;
            }
            let w = workload_from_row(&row)?;
            bytes += text_size(&w);
            workloads.push(w);
        }
        let next = if more { workloads.last().map(WorkloadCursor::after) } else { None };
        Ok(WorkloadPage { workloads, next })
    }

    /// How many workloads `owner` has, in all and queued, in one query.
    pub async fn count_owner_workloads(&self, owner: &str) -> Result<OwnerCounts> {
        let row = sqlx::query(
            "SELECT COUNT(*) AS total, COALESCE(SUM(CASE WHEN state IN ('queued', 'pulling') THEN 1 ELSE 0 END), 0) AS queued \
             FROM workloads WHERE owner = $1",
        )
        .bind(owner)
        .fetch_one(&self.pool)
        .await?;
        let count = |col: &str| -> Result<u64> { Ok(row.try_get::<i64, _>(col)?.max(0) as u64) };
        Ok(OwnerCounts { total: count("total")?, queued: count("queued")? })
    }

    /// Stores a new workload like [`Store::insert_workload`], unless its owner already has `caps.total`
    /// workloads, or `caps.queued` queued ones when `w` is queued: then nothing is stored and the
    /// answer says which cap was reached. The check and the insert are one statement (on PostgreSQL
    /// under a per-owner lock), so concurrent submissions cannot pass a cap together.
    pub async fn insert_workload_capped(&self, w: &Workload, caps: OwnerCaps) -> Result<Option<CapReached>> {
        let queued_cap = if w.state() == WorkloadState::Queued { caps.queued } else { u64::MAX };
        let sql = format!(
            "INSERT INTO workloads ({COLUMNS}) SELECT {} \
             WHERE (SELECT COUNT(*) FROM workloads WHERE owner = $3) < ${} \
             AND (SELECT COUNT(*) FROM workloads WHERE owner = $3 AND state IN ('queued', 'pulling')) < ${}",
            placeholders(1..=COLUMN_COUNT),
            COLUMN_COUNT + 1,
            COLUMN_COUNT + 2
        );
        let cap = |c: u64| i64::try_from(c).unwrap_or(i64::MAX);
        let mut tx = self.pool.begin().await?;
        if self.backend == Backend::Postgres {
            // READ COMMITTED would let two inserts count the same rows: serialise this owner's inserts
            sqlx::query("SELECT pg_advisory_xact_lock(hashtext($1))").bind(&w.owner).execute(&mut *tx).await?;
        }
        let done = bind_insert(&sql, w)?
            .bind(cap(caps.total))
            .bind(cap(queued_cap))
            .execute(&mut *tx)
            .await
            .map_err(|e| insert_error(e, w))?;
        if done.rows_affected() == 1 {
            crate::history::record(&mut tx, w).await?;
        }
        tx.commit().await?;
        if done.rows_affected() == 1 {
            return Ok(None);
        }
        let counts = self.count_owner_workloads(&w.owner).await?;
        Ok(Some(if counts.total >= caps.total {
            CapReached::Total { count: counts.total }
        } else {
            CapReached::Queued { count: counts.queued }
        }))
    }
}
