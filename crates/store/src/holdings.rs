//! Accounting: every interval a workload's run held resources (`gpuhub_core::usage::Holding`), written
//! in the same transaction as the workload's state, and the GPU models the engines named.

use crate::codec::{get_json, get_opt_time, get_time, get_u64, ms, opt_ms, to_json, u64_to_db};
use crate::{Result, Store};
use chrono::{DateTime, Utc};
use gpuhub_core::usage::{Holding, Measured};
use gpuhub_core::workload::Workload;
use sqlx::any::AnyRow;
use sqlx::{Any, Row, Transaction};

/// Writes `w`'s current holding, if it has one: opened (`until` empty) while it holds, closed once it
/// has let go. Idempotent: the holding is keyed by workload and start, so writing the same workload
/// again changes nothing. The GPUs named stay those the run held (a preempted run forgets its GPUs
/// when it lets go; the holding keeps them).
///
/// A service's rolling update holds its own: the new run's holding is open from the rollout's start
/// beside the serving run's; once the update ends, whichever of the two let go (the old run's after the
/// switch, the new run's after a failure) is closed at the update's end.
pub(crate) async fn record(tx: &mut Transaction<'static, Any>, w: &Workload) -> Result<()> {
    if let Some(r) = w.service.as_ref().and_then(|s| s.rollout.as_ref()) {
        let gpus: Vec<String> = r.members.iter().flat_map(|m| m.gpus.iter().cloned()).collect();
        upsert(tx, w, r.since, None, &gpus).await?;
    }
    if let Some(report) = w.service.as_ref().and_then(|s| s.update.as_ref()) {
        let keep = [
            w.held_since.filter(|_| w.state().holds_resources()),
            w.service.as_ref().and_then(|s| s.rollout.as_ref()).map(|r| r.since),
        ];
        let [a, b] = keep.map(|t| t.map_or(-1, ms));
        sqlx::query(
            "UPDATE holdings SET until = $2 WHERE workload_id = $1 AND until IS NULL AND since <> $3 AND since <> $4 AND since < $2",
        )
        .bind(&w.id)
        .bind(ms(report.at))
        .bind(a)
        .bind(b)
        .execute(&mut **tx)
        .await?;
    }
    let Some(since) = w.held_since else { return Ok(()) };
    let until = if w.state().holds_resources() { None } else { w.held_until.or(Some(since)) };
    upsert(tx, w, since, until, &w.gpus).await
}

/// Writes `w`'s holding from `since` (open while `until` is empty), naming `gpus`.
async fn upsert(
    tx: &mut Transaction<'static, Any>,
    w: &Workload,
    since: DateTime<Utc>,
    until: Option<DateTime<Utc>>,
    gpus: &[String],
) -> Result<()> {
    let size = u64::from(w.size.max(1));
    sqlx::query(
        "INSERT INTO holdings (workload_id, since, until, owner, workload, queue, gpus, gpu_milli, cpu_milli, memory) \
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10) \
         ON CONFLICT (workload_id, since) DO UPDATE SET until = excluded.until, \
         gpus = CASE WHEN excluded.gpus = '[]' THEN holdings.gpus ELSE excluded.gpus END",
    )
    .bind(&w.id)
    .bind(ms(since))
    .bind(opt_ms(until))
    .bind(&w.owner)
    .bind(&w.name)
    .bind(&w.queue)
    .bind(to_json("gpus", &gpus)?)
    .bind(u64_to_db(w.resources.gpu_milli_total() * size))
    .bind(u64_to_db(w.resources.cpu_milli.0 * size))
    .bind(u64_to_db(w.resources.memory.0 * size))
    .execute(&mut **tx)
    .await?;
    Ok(())
}

/// Ends workload `id`'s open holding, if any, at `at` (the workload is being deleted).
pub(crate) async fn close(tx: &mut Transaction<'static, Any>, id: &str, at: DateTime<Utc>) -> Result<()> {
    sqlx::query("UPDATE holdings SET until = $2 WHERE workload_id = $1 AND until IS NULL")
        .bind(id)
        .bind(ms(at))
        .execute(&mut **tx)
        .await?;
    Ok(())
}

fn holding_from_row(row: &AnyRow) -> Result<Holding> {
    Ok(Holding {
        workload_id: row.try_get("workload_id")?,
        workload: row.try_get("workload")?,
        owner: row.try_get("owner")?,
        queue: row.try_get("queue")?,
        gpus: get_json(row, "gpus")?,
        gpu_milli: get_u64(row, "gpu_milli")?,
        cpu_milli: get_u64(row, "cpu_milli")?,
        memory: get_u64(row, "memory")?,
        since: get_time(row, "since")?,
        until: get_opt_time(row, "until")?,
    })
}

impl Store {
    /// The holdings that overlap `[from, to)` (open ones included), of `owner` only when given, oldest
    /// first.
    pub async fn holdings(&self, from: DateTime<Utc>, to: DateTime<Utc>, owner: Option<&str>) -> Result<Vec<Holding>> {
        let mut sql = String::from(
            "SELECT workload_id, since, until, owner, workload, queue, gpus, gpu_milli, cpu_milli, memory \
             FROM holdings WHERE since < $1 AND (until IS NULL OR until > $2)",
        );
        if owner.is_some() {
            sql.push_str(" AND owner = $3");
        }
        sql.push_str(" ORDER BY since, workload_id");
        let mut q = sqlx::query(&sql).bind(ms(to)).bind(ms(from));
        if let Some(o) = owner {
            q = q.bind(o);
        }
        q.fetch_all(&self.pool).await?.iter().map(holding_from_row).collect()
    }

    /// Every holding of workload `id`, oldest first (what changed with one of its writes).
    pub async fn holdings_of(&self, id: &str) -> Result<Vec<Holding>> {
        sqlx::query(
            "SELECT workload_id, since, until, owner, workload, queue, gpus, gpu_milli, cpu_milli, memory \
             FROM holdings WHERE workload_id = $1 ORDER BY since",
        )
        .bind(id)
        .fetch_all(&self.pool)
        .await?
        .iter()
        .map(holding_from_row)
        .collect()
    }

    /// Remembers the model of each GPU (`(gpu, model)`), replacing what was known.
    pub async fn remember_gpu_models(&self, gpus: &[(String, String)]) -> Result<()> {
        let mut tx = self.pool.begin().await?;
        for (gpu, model) in gpus {
            sqlx::query("INSERT INTO gpu_models (gpu, model) VALUES ($1, $2) ON CONFLICT (gpu) DO UPDATE SET model = excluded.model")
                .bind(gpu)
                .bind(model)
                .execute(&mut *tx)
                .await?;
        }
        tx.commit().await?;
        Ok(())
    }

    /// What the monitor measured of each workload over `[from, to)` (of `owner` only, when given), from
    /// the samples' history: each member's means (every raw sample weighing alike, whatever tier it
    /// now lives in), its members' CPU and memory added up and their GPU utilisation averaged.
    pub async fn measured(
        &self,
        from: DateTime<Utc>,
        to: DateTime<Utc>,
        owner: Option<&str>,
    ) -> Result<std::collections::HashMap<String, Measured>> {
        let mean = |c: &str| format!("CAST(ROUND({}) AS BIGINT) AS {c}", crate::samples::weighted_mean(c));
        let mut sql = format!(
            "SELECT n.workload_id AS workload_id, {}, {}, {} FROM member_samples s \
             JOIN sample_members n ON n.id = s.series WHERE s.ts >= $1 AND s.ts < $2",
            mean("cpu_milli"),
            mean("memory_used"),
            mean("gpu_util")
        );
        if owner.is_some() {
            sql.push_str(" AND n.owner = $3");
        }
        sql.push_str(" GROUP BY n.workload_id, n.member");
        let mut q = sqlx::query(&sql).bind(ms(from)).bind(ms(to));
        if let Some(o) = owner {
            q = q.bind(o);
        }
        let mut out: std::collections::HashMap<String, (Measured, u32)> = Default::default();
        for row in q.fetch_all(&self.pool).await? {
            let id: String = row.try_get("workload_id")?;
            let (cpu, mem, gpu): (Option<i64>, Option<i64>, Option<i64>) =
                (row.try_get("cpu_milli")?, row.try_get("memory_used")?, row.try_get("gpu_util")?);
            let (m, gpu_members) = out.entry(id).or_default();
            let add = |acc: Option<f64>, v: Option<f64>| match (acc, v) {
                (a, None) => a,
                (None, Some(v)) => Some(v),
                (Some(a), Some(v)) => Some(a + v),
            };
            m.cpu_cores = add(m.cpu_cores, cpu.map(|c| c as f64 / 1000.0));
            m.memory_bytes = add(m.memory_bytes, mem.map(|b| b as f64));
            if let Some(g) = gpu {
                m.gpu_util_pct = add(m.gpu_util_pct, Some(g as f64 / 10.0));
                *gpu_members += 1;
            }
        }
        Ok(out
            .into_iter()
            .map(|(id, (mut m, n))| {
                m.gpu_util_pct = m.gpu_util_pct.map(|sum| sum / f64::from(n.max(1)));
                (id, m)
            })
            .collect())
    }

    /// Every GPU model ever remembered, by GPU.
    pub async fn gpu_models(&self) -> Result<std::collections::HashMap<String, String>> {
        let rows = sqlx::query("SELECT gpu, model FROM gpu_models").fetch_all(&self.pool).await?;
        rows.iter().map(|r| Ok((r.try_get("gpu")?, r.try_get("model")?))).collect()
    }
}
