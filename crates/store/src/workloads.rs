//! Workloads: the spec an owner submitted and the state the controller recorded.

use crate::codec::{get_int, get_json, get_opt_time, get_parsed, get_time, get_u64, ms, opt_ms, to_json, u64_to_db};
use crate::error::conflict;
use crate::{Result, Store, StoreError};
use gpuhub_core::workload::{Resources, Workload, WorkloadState};
use gpuhub_core::{Bytes, CpuMilli, Seconds};
use sqlx::Row;
use sqlx::any::{AnyArguments, AnyRow};
use sqlx::query::Query;

/// Which workloads [`Store::list_workloads`] returns; `None` fields do not filter.
#[derive(Debug, Clone, Default)]
pub struct WorkloadFilter {
    /// Only this owner's workloads.
    pub owner: Option<String>,
    /// Only workloads in one of these states (an empty list matches nothing).
    pub states: Option<Vec<WorkloadState>>,
}

/// The workload columns, in the order [`workload_from_row`] reads them.
pub(crate) const COLUMNS: &str = "id, name, owner, kind, image, command, env, cpu_milli, memory, gpu_count, priority, state, \
                       gpus, run_id, exit_code, message, created_at, queued_at, started_at, finished_at, apps, \
                       gpu_milli, gpu_memory, queue, constraint_expr, runtime_limit_s, interruption, size, members, \
                       held_since, held_until, datasets, teams, service, disk_bytes";

/// How many columns [`COLUMNS`] names.
pub(crate) const COLUMN_COUNT: usize = 35;

/// Sets every mutable column from `$2`…`$15`; `$1` is the id.
pub(crate) const UPDATE: &str = "UPDATE workloads SET state = $2, gpus = $3, run_id = $4, exit_code = $5, message = $6, \
                      priority = $7, queued_at = $8, started_at = $9, finished_at = $10, interruption = $11, \
                      members = $12, held_since = $13, held_until = $14, service = $15 WHERE id = $1";

pub(crate) fn workload_from_row(row: &AnyRow) -> Result<Workload> {
    let created_at = get_time(row, "created_at")?;
    let (id, owner, name): (String, String, String) = (row.try_get("id")?, row.try_get("owner")?, row.try_get("name")?);
    let image: String = row.try_get("image")?;
    // the state it was saved in, restored (no transition)
    let mut w =
        Workload::new(id, owner, name, get_parsed(row, "kind")?, image, created_at).restore(get_parsed(row, "state")?);
    w.command = get_json(row, "command")?;
    w.env = get_json(row, "env")?;
    w.resources = Resources {
        cpu_milli: CpuMilli(get_u64(row, "cpu_milli")?),
        memory: Bytes(get_u64(row, "memory")?),
        gpus: get_int(row, "gpu_count")?,
        gpu_milli: get_int(row, "gpu_milli")?,
        gpu_memory: row.try_get::<Option<i64>, _>("gpu_memory")?.map(|v| Bytes(v as u64)),
    };
    w.priority = get_int(row, "priority")?;
    w.queue = row.try_get("queue")?;
    w.constraint = row.try_get("constraint_expr")?;
    w.runtime_limit = row.try_get::<Option<i64>, _>("runtime_limit_s")?.map(|v| Seconds(v as u64));
    w.disk = row.try_get::<Option<i64>, _>("disk_bytes")?.map(|v| Bytes(v as u64));
    w.apps = get_json(row, "apps")?;
    w.gpus = get_json(row, "gpus")?;
    w.size = get_int(row, "size")?;
    w.run_id = row.try_get("run_id")?;
    w.members = get_json(row, "members")?;
    w.exit_code = row.try_get("exit_code")?;
    w.message = row.try_get("message")?;
    w.queued_at = get_time(row, "queued_at")?;
    w.started_at = get_opt_time(row, "started_at")?;
    w.finished_at = get_opt_time(row, "finished_at")?;
    w.held_since = get_opt_time(row, "held_since")?;
    w.held_until = get_opt_time(row, "held_until")?;
    w.datasets = get_json(row, "datasets")?;
    w.teams = get_json(row, "teams")?;
    w.service = match row.try_get::<Option<String>, _>("service")? {
        Some(v) => Some(serde_json::from_str(&v).map_err(|e| StoreError::Corrupt(format!("service: {e}")))?),
        None => None,
    };
    w.interruption = match row.try_get::<Option<String>, _>("interruption")? {
        Some(v) => Some(serde_json::from_str(&v).map_err(|e| StoreError::Corrupt(format!("interruption: {e}")))?),
        None => None,
    };
    Ok(w)
}

/// Binds `w`'s id and mutable fields as `$1`…`$15` of [`UPDATE`].
pub(crate) fn bind_update<'q>(sql: &'q str, w: &'q Workload) -> Result<Query<'q, sqlx::Any, AnyArguments<'q>>> {
    Ok(sqlx::query(sql)
        .bind(&w.id)
        .bind(w.state().as_str())
        .bind(to_json("gpus", &w.gpus)?)
        .bind(w.run_id.as_deref())
        .bind(w.exit_code)
        .bind(w.message.as_deref())
        .bind(i64::from(w.priority))
        .bind(ms(w.queued_at))
        .bind(opt_ms(w.started_at))
        .bind(opt_ms(w.finished_at))
        .bind(w.interruption.as_ref().map(|r| to_json("interruption", r)).transpose()?)
        .bind(to_json("members", &w.members)?)
        .bind(opt_ms(w.held_since))
        .bind(opt_ms(w.held_until))
        .bind(service_json(w)?))
}

fn service_json(w: &Workload) -> Result<Option<String>> {
    w.service.as_ref().map(|s| to_json("service", s)).transpose()
}

/// `w`'s image, command and environment written to the stored workload with `w.id` (a service's
/// terms).
fn bind_spec(w: &Workload) -> Result<Query<'_, sqlx::Any, AnyArguments<'_>>> {
    Ok(sqlx::query("UPDATE workloads SET image = $2, command = $3, env = $4 WHERE id = $1")
        .bind(&w.id)
        .bind(&w.image)
        .bind(crate::codec::to_json("command", &w.command)?)
        .bind(crate::codec::to_json("env", &w.env)?))
}

/// Binds every column of `w` as `$1`…`$35`, in the order of [`COLUMNS`].
pub(crate) fn bind_insert<'q>(sql: &'q str, w: &'q Workload) -> Result<Query<'q, sqlx::Any, AnyArguments<'q>>> {
    Ok(sqlx::query(sql)
        .bind(&w.id)
        .bind(&w.name)
        .bind(&w.owner)
        .bind(w.kind.as_str())
        .bind(&w.image)
        .bind(to_json("command", &w.command)?)
        .bind(to_json("env", &w.env)?)
        .bind(u64_to_db(w.resources.cpu_milli.0))
        .bind(u64_to_db(w.resources.memory.0))
        .bind(i64::from(w.resources.gpus))
        .bind(i64::from(w.priority))
        .bind(w.state().as_str())
        .bind(to_json("gpus", &w.gpus)?)
        .bind(w.run_id.as_deref())
        .bind(w.exit_code)
        .bind(w.message.as_deref())
        .bind(ms(w.created_at))
        .bind(ms(w.queued_at))
        .bind(opt_ms(w.started_at))
        .bind(opt_ms(w.finished_at))
        .bind(to_json("apps", &w.apps)?)
        .bind(i64::from(w.resources.gpu_milli))
        .bind(w.resources.gpu_memory.map(|b| u64_to_db(b.0)))
        .bind(&w.queue)
        .bind(w.constraint.as_deref())
        .bind(w.runtime_limit.map(|s| u64_to_db(s.0)))
        .bind(w.interruption.as_ref().map(|r| to_json("interruption", r)).transpose()?)
        .bind(i64::from(w.size))
        .bind(to_json("members", &w.members)?)
        .bind(opt_ms(w.held_since))
        .bind(opt_ms(w.held_until))
        .bind(to_json("datasets", &w.datasets)?)
        .bind(to_json("teams", &w.teams)?)
        .bind(service_json(w)?)
        .bind(w.disk.map(|b| u64_to_db(b.0))))
}

/// `$a, $b, …` for the numbers in `range`.
pub(crate) fn placeholders(range: std::ops::RangeInclusive<usize>) -> String {
    range.map(|n| format!("${n}")).collect::<Vec<_>>().join(", ")
}

/// A failed insert of `w`: a taken id or name is [`StoreError::Conflict`].
pub(crate) fn insert_error(e: sqlx::Error, w: &Workload) -> StoreError {
    let id_taken = matches!(&e, sqlx::Error::Database(d)
        if d.constraint() == Some("workloads_pkey") || d.message().contains("workloads.id"));
    conflict(e, || {
        if id_taken {
            format!("workload id {} already exists", w.id)
        } else {
            format!("workload {} of {} already exists", w.name, w.owner)
        }
    })
}

impl Store {
    /// Stores a new workload. [`StoreError::Conflict`] if its id, or its name for that owner, is taken.
    /// Timestamps keep millisecond precision.
    pub async fn insert_workload(&self, w: &Workload) -> Result<()> {
        let sql = format!("INSERT INTO workloads ({COLUMNS}) VALUES ({})", placeholders(1..=COLUMN_COUNT));
        let mut tx = self.pool.begin().await?;
        bind_insert(&sql, w)?.execute(&mut *tx).await.map_err(|e| insert_error(e, w))?;
        crate::history::record(&mut tx, w).await?;
        tx.commit().await?;
        Ok(())
    }

    /// The workload `name` of `owner`.
    pub async fn get_workload(&self, owner: &str, name: &str) -> Result<Workload> {
        let row = sqlx::query(&format!("SELECT {COLUMNS} FROM workloads WHERE owner = $1 AND name = $2"))
            .bind(owner)
            .bind(name)
            .fetch_optional(&self.pool)
            .await?
            .ok_or_else(|| StoreError::not_found("workload", format!("{owner}/{name}")))?;
        workload_from_row(&row)
    }

    /// The ids of `owner`'s workloads.
    pub async fn workload_ids_of(&self, owner: &str) -> Result<Vec<String>> {
        Ok(sqlx::query_scalar("SELECT id FROM workloads WHERE owner = $1").bind(owner).fetch_all(&self.pool).await?)
    }

    /// The workload with id `id`.
    pub async fn get_workload_by_id(&self, id: &str) -> Result<Workload> {
        let row = sqlx::query(&format!("SELECT {COLUMNS} FROM workloads WHERE id = $1"))
            .bind(id)
            .fetch_optional(&self.pool)
            .await?
            .ok_or_else(|| StoreError::not_found("workload", id))?;
        workload_from_row(&row)
    }

    /// The workloads matching `filter`, oldest first (by `created_at`, then `id`), in one query.
    pub async fn list_workloads(&self, filter: &WorkloadFilter) -> Result<Vec<Workload>> {
        let mut sql = format!("SELECT {COLUMNS} FROM workloads");
        let mut conditions = Vec::new();
        let mut n = 0;
        if filter.owner.is_some() {
            n += 1;
            conditions.push(format!("owner = ${n}"));
        }
        if let Some(states) = &filter.states {
            if states.is_empty() {
                return Ok(Vec::new());
            }
            let placeholders: Vec<String> = states
                .iter()
                .map(|_| {
                    n += 1;
                    format!("${n}")
                })
                .collect();
            conditions.push(format!("state IN ({})", placeholders.join(", ")));
        }
        if !conditions.is_empty() {
            sql.push_str(" WHERE ");
            sql.push_str(&conditions.join(" AND "));
        }
        sql.push_str(" ORDER BY created_at, id");
        let mut query = sqlx::query(&sql);
        if let Some(owner) = &filter.owner {
            query = query.bind(owner.as_str());
        }
        for state in filter.states.iter().flatten() {
            query = query.bind(state.as_str());
        }
        let rows = query.fetch_all(&self.pool).await?;
        rows.iter().map(workload_from_row).collect()
    }

    /// Writes every mutable field of `w` (state, gpus, container id, exit code, message, priority,
    /// queued/started/finished times, interruption) to the stored workload with `w.id`. The immutable spec (name,
    /// owner, kind, image, command, env, resources, created time) is left as stored.
    /// [`StoreError::NotFound`] if the workload is gone.
    ///
    /// In the same transaction, the workload's current holding (`held_since`…`held_until`) is written
    /// to the holdings accounting sums (see [`Store::holdings`]).
    pub async fn update_workload(&self, w: &Workload) -> Result<()> {
        let mut tx = self.pool.begin().await?;
        let done = bind_update(UPDATE, w)?.execute(&mut *tx).await?;
        if done.rows_affected() == 0 {
            return Err(StoreError::not_found("workload", &w.id));
        }
        crate::holdings::record(&mut tx, w).await?;
        crate::history::record(&mut tx, w).await?;
        tx.commit().await?;
        Ok(())
    }

    /// Like [`Store::update_workload`], but only if the stored state is still `expected`
    /// (compare-and-set): returns whether the write happened. `false` also when the workload is gone.
    pub async fn update_workload_if(&self, w: &Workload, expected: WorkloadState) -> Result<bool> {
        let sql = format!("{UPDATE} AND state = $16");
        let mut tx = self.pool.begin().await?;
        let done = bind_update(&sql, w)?.bind(expected.as_str()).execute(&mut *tx).await?;
        if done.rows_affected() != 1 {
            return Ok(false);
        }
        crate::holdings::record(&mut tx, w).await?;
        crate::history::record(&mut tx, w).await?;
        tx.commit().await?;
        Ok(true)
    }

    /// Writes `w`'s image, command and environment (a service's update, made while it is not running)
    /// and records `note` in its history at `at`, in one transaction. [`StoreError::NotFound`] if the
    /// workload is gone.
    pub async fn update_workload_spec(
        &self,
        w: &Workload,
        note: &str,
        at: chrono::DateTime<chrono::Utc>,
    ) -> Result<()> {
        let mut tx = self.pool.begin().await?;
        let done = bind_spec(w)?.execute(&mut *tx).await?;
        crate::history::note_change(tx, done.rows_affected(), w, note, at).await
    }

    /// Writes `w` as [`Store::update_workload`] does (its state, its holdings) and, with `spec`, its
    /// image, command and environment too (a service switched to its updated run), and records `note`
    /// in its history at `at`, in one transaction. [`StoreError::NotFound`] if the workload is gone.
    pub async fn update_workload_noted(
        &self,
        w: &Workload,
        spec: bool,
        note: &str,
        at: chrono::DateTime<chrono::Utc>,
    ) -> Result<()> {
        let mut tx = self.pool.begin().await?;
        let done = bind_update(UPDATE, w)?.execute(&mut *tx).await?;
        if done.rows_affected() == 0 {
            return Err(StoreError::not_found("workload", &w.id));
        }
        if spec {
            bind_spec(w)?.execute(&mut *tx).await?;
        }
        crate::holdings::record(&mut tx, w).await?;
        crate::history::record(&mut tx, w).await?;
        crate::history::note_change(tx, 1, w, note, at).await
    }

    /// Deletes the workload with id `id`; a holding it still has open ends `at` (its usage stays).
    pub async fn delete_workload(&self, id: &str, at: chrono::DateTime<chrono::Utc>) -> Result<()> {
        let mut tx = self.pool.begin().await?;
        let done = sqlx::query("DELETE FROM workloads WHERE id = $1").bind(id).execute(&mut *tx).await?;
        if done.rows_affected() == 0 {
            return Err(StoreError::not_found("workload", id));
        }
        crate::holdings::close(&mut tx, id, at).await?;
        tx.commit().await?;
        Ok(())
    }
}
