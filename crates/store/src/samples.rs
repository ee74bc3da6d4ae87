//! The history of the monitor's samples: every round of members and GPUs as raw samples (tier 0),
//! thinned out with age into the means of 1-minute (tier 1) and 1-hour (tier 2) buckets, and read back
//! as means over any step from the finest tier that covers each part of the window.
//!
//! Each series (a member of a workload; a GPU on a node) is named once in `sample_members` /
//! `sample_gpus`, and its samples carry its number: a row is a few integers, clustered by series, tier
//! and time, so a member's history is one index range.

use crate::codec::ms;
use crate::{Result, Store};
use chrono::{DateTime, Utc};
use gpuhub_core::metrics::{GpuPoint, MemberPoint, MetricsSnapshot};
use sqlx::any::AnyRow;
use sqlx::{Any, Row, Transaction};
use std::collections::HashMap;
use std::time::Duration;

/// Raw samples.
const RAW: i64 = 0;
/// Means of 1-minute buckets.
const MINUTE: i64 = 1;
/// Means of 1-hour buckets.
const HOUR: i64 = 2;
const MINUTE_MS: i64 = 60_000;
const HOUR_MS: i64 = 3_600_000;

/// At most this much of the oldest raw samples is turned into 1-minute means per call of
/// [`Store::downsample`] (1 hour: 180,000 rows at 500 members sampled every 10 s).
const RAW_SPAN_MS: i64 = HOUR_MS;
/// At most this much of the oldest 1-minute means is turned into 1-hour means per call (6 hours:
/// 180,000 rows at 500 members).
const MINUTE_SPAN_MS: i64 = 6 * HOUR_MS;
/// At most this much of the oldest 1-hour means is deleted per call (7 days: 84,000 rows at 500 members).
const HOUR_SPAN_MS: i64 = 7 * 24 * HOUR_MS;
/// Rows per `INSERT` statement (7 parameters each: well under both backends' limits).
const CHUNK: usize = 500;

/// One kind of series: its tables and its figures' columns (five integers each).
struct Kind {
    samples: &'static str,
    columns: [&'static str; 5],
}

const MEMBERS: Kind =
    Kind { samples: "member_samples", columns: ["cpu_milli", "memory_used", "memory_limit", "gpu_util", "gpu_memory"] };
const GPUS: Kind =
    Kind { samples: "gpu_samples", columns: ["utilization", "memory_used", "memory_total", "power_mw", "temperature"] };

/// A sample's five figures, as stored.
type Figures = [Option<i64>; 5];

/// What one call of [`Store::downsample`] did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Downsampled {
    /// 1-minute means written (members' and GPUs').
    pub minute_buckets: u64,
    /// 1-hour means written.
    pub hour_buckets: u64,
    /// Rows removed: raw samples and 1-minute means once averaged, 1-hour means once too old.
    pub deleted: u64,
    /// Whether more is due than one call does (a backlog): calling again does more.
    pub more: bool,
}

impl Downsampled {
    fn add(&mut self, o: Downsampled) {
        self.minute_buckets += o.minute_buckets;
        self.hour_buckets += o.hour_buckets;
        self.deleted += o.deleted;
        self.more |= o.more;
    }
}

/// `t` rounded down to a multiple of `unit` (milliseconds).
fn floor(t: i64, unit: i64) -> i64 {
    t.div_euclid(unit) * unit
}

/// A duration in milliseconds, saturating.
fn dur_ms(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

/// A size as stored: bytes, saturating at `i64::MAX` (means of bit-cast values would be nonsense).
fn size(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

/// A fractional figure in `scale`ths, rounded (a non-finite one is not stored).
fn scaled(v: f64, scale: f64) -> Option<i64> {
    let x = (v * scale).round();
    x.is_finite().then_some(x as i64)
}

/// A mean read back, as a size.
fn mean_size(v: Option<f64>) -> Option<u64> {
    v.map(|x| x.round().max(0.0) as u64)
}

impl Store {
    /// Writes one monitoring round (`snapshot.at` is the samples' time; a snapshot without one writes
    /// nothing) as raw samples, in one transaction: the series it names for the first time, then every
    /// member's and every GPU's figures in a few batched inserts. Writing the same round again changes
    /// nothing (a series has one raw sample per instant).
    pub async fn record_metrics(&self, snapshot: &MetricsSnapshot) -> Result<()> {
        let Some(at) = snapshot.at else { return Ok(()) };
        let ts = ms(at);
        let mut tx = self.pool.begin().await?;
        let keys: Vec<Key> =
            snapshot.members.iter().map(|m| (m.workload_id.clone(), i64::from(m.member), m.owner.clone())).collect();
        let ids = series_ids(&mut tx, Series::Members, &keys).await?;
        let rows: Vec<(i64, Figures)> = snapshot
            .members
            .iter()
            .filter_map(|m| {
                let id = *ids.get(&(m.workload_id.clone(), i64::from(m.member), String::new()))?;
                let figures = [
                    m.cpu_cores.and_then(|c| scaled(c, 1000.0)),
                    Some(size(m.memory_used)),
                    m.memory_limit.map(size),
                    m.gpu_utilization_pct.and_then(|u| scaled(u, 10.0)),
                    m.gpu_memory_used.map(size),
                ];
                Some((id, figures))
            })
            .collect();
        insert_raw(&mut tx, &MEMBERS, ts, &rows).await?;
        let keys: Vec<Key> = snapshot.gpus.iter().map(|g| (g.uuid.clone(), 0, g.node.clone())).collect();
        let ids = series_ids(&mut tx, Series::Gpus, &keys).await?;
        let rows: Vec<(i64, Figures)> = snapshot
            .gpus
            .iter()
            .filter_map(|g| {
                let id = *ids.get(&(g.uuid.clone(), 0, g.node.clone()))?;
                let figures = [
                    scaled(g.utilization_pct, 10.0),
                    Some(size(g.memory_used)),
                    Some(size(g.memory_total)),
                    g.power_watts.and_then(|w| scaled(w, 1000.0)),
                    g.temperature_c.and_then(|c| scaled(c, 10.0)),
                ];
                Some((id, figures))
            })
            .collect();
        insert_raw(&mut tx, &GPUS, ts, &rows).await?;
        tx.commit().await?;
        Ok(())
    }

    /// Thins out the history as of `now`: raw samples older than `raw_keep` become 1-minute means (and
    /// are deleted), 1-minute means older than `minute_keep` become 1-hour means (and are deleted), and
    /// 1-hour means older than `hour_keep` are deleted. Only whole buckets are averaged (those that end
    /// before the cut-off), each is written once and its sources deleted in the same transaction, and an
    /// hour is averaged only once no raw sample of it is left, so calling this again, at any time, never
    /// averages anything twice or in part. One call does at most a bounded span of each tier (1 hour of
    /// raw samples, 6 hours of 1-minute means, 7 days of 1-hour means); [`Downsampled::more`] says a
    /// backlog remains.
    pub async fn downsample(
        &self,
        now: DateTime<Utc>,
        raw_keep: Duration,
        minute_keep: Duration,
        hour_keep: Duration,
    ) -> Result<Downsampled> {
        let now = ms(now);
        let mut done = Downsampled::default();
        let mut expired = 0;
        for kind in [&MEMBERS, &GPUS] {
            done.add(self.to_minutes(kind, floor(now.saturating_sub(dur_ms(raw_keep)), MINUTE_MS)).await?);
            done.add(self.to_hours(kind, floor(now.saturating_sub(dur_ms(minute_keep)), HOUR_MS)).await?);
            let gone = self.expire_hours(kind, floor(now.saturating_sub(dur_ms(hour_keep)), HOUR_MS)).await?;
            expired += gone.deleted;
            done.add(gone);
        }
        if expired > 0 {
            // members of deleted workloads with nothing left to show are forgotten (only expiry empties a
            // series: averaging writes what it deletes); GPUs are few and stay named
            sqlx::query(
                "DELETE FROM sample_members WHERE NOT EXISTS (SELECT 1 FROM workloads w WHERE w.id = sample_members.workload_id) \
                 AND NOT EXISTS (SELECT 1 FROM member_samples s WHERE s.series = sample_members.id)",
            )
            .execute(&self.pool)
            .await?;
        }
        Ok(done)
    }

    /// Raw samples before `cutoff` (a minute boundary) into 1-minute means, at most [`RAW_SPAN_MS`].
    async fn to_minutes(&self, kind: &Kind, cutoff: i64) -> Result<Downsampled> {
        let mut tx = self.pool.begin().await?;
        let Some(lo) = oldest(&mut tx, kind, RAW).await? else { return Ok(Downsampled::default()) };
        if lo >= cutoff {
            return Ok(Downsampled::default());
        }
        let hi = cutoff.min(floor(lo, MINUTE_MS).saturating_add(RAW_SPAN_MS));
        let written = average(&mut tx, kind, RAW, MINUTE, MINUTE_MS, hi).await?;
        let deleted = delete_before(&mut tx, kind, RAW, hi).await?;
        tx.commit().await?;
        Ok(Downsampled { minute_buckets: written, deleted, more: hi < cutoff, ..Default::default() })
    }

    /// 1-minute means before `cutoff` (an hour boundary) into 1-hour means, at most [`MINUTE_SPAN_MS`],
    /// and never an hour that still has raw samples.
    async fn to_hours(&self, kind: &Kind, cutoff: i64) -> Result<Downsampled> {
        let mut tx = self.pool.begin().await?;
        let Some(lo) = oldest(&mut tx, kind, MINUTE).await? else { return Ok(Downsampled::default()) };
        let cutoff = match oldest(&mut tx, kind, RAW).await? {
            Some(raw) => cutoff.min(floor(raw, HOUR_MS)),
            None => cutoff,
        };
        if lo >= cutoff {
            return Ok(Downsampled::default());
        }
        let hi = cutoff.min(floor(lo, HOUR_MS).saturating_add(MINUTE_SPAN_MS));
        let written = average(&mut tx, kind, MINUTE, HOUR, HOUR_MS, hi).await?;
        let deleted = delete_before(&mut tx, kind, MINUTE, hi).await?;
        tx.commit().await?;
        Ok(Downsampled { hour_buckets: written, deleted, more: hi < cutoff, ..Default::default() })
    }

    /// 1-hour means that start before `cutoff` deleted, at most [`HOUR_SPAN_MS`] of them.
    async fn expire_hours(&self, kind: &Kind, cutoff: i64) -> Result<Downsampled> {
        let mut tx = self.pool.begin().await?;
        let Some(lo) = oldest(&mut tx, kind, HOUR).await? else { return Ok(Downsampled::default()) };
        if lo >= cutoff {
            return Ok(Downsampled::default());
        }
        let hi = cutoff.min(floor(lo, HOUR_MS).saturating_add(HOUR_SPAN_MS));
        let deleted = delete_before(&mut tx, kind, HOUR, hi).await?;
        tx.commit().await?;
        Ok(Downsampled { deleted, more: hi < cutoff, ..Default::default() })
    }

    /// Workload `workload_id`'s members over `[from, to)`, one point per member and `step` (steps start
    /// at `from`) holding the mean of what is kept there: raw samples where they are still kept, else
    /// 1-minute means, else 1-hour means. Ordered by member, then time; steps without samples are
    /// left out.
    pub async fn member_series(
        &self,
        workload_id: &str,
        from: DateTime<Utc>,
        to: DateTime<Utc>,
        step: Duration,
    ) -> Result<Vec<MemberPoint>> {
        let names: HashMap<i64, u32> = sqlx::query("SELECT id, member FROM sample_members WHERE workload_id = $1")
            .bind(workload_id)
            .fetch_all(&self.pool)
            .await?
            .iter()
            .map(|r| Ok((r.try_get::<i64, _>("id")?, crate::codec::get_int::<u32>(r, "member")?)))
            .collect::<Result<_>>()?;
        if names.is_empty() {
            return Ok(Vec::new());
        }
        let series = "SELECT id FROM sample_members WHERE workload_id = $4";
        let rows = read_series(&self.pool, &MEMBERS, series, from, to, step, Some(workload_id)).await?;
        let mut points = Vec::with_capacity(rows.len());
        for (id, at, m) in rows {
            let Some(member) = names.get(&id) else { continue };
            points.push(MemberPoint {
                member: *member,
                at,
                cpu_cores: m[0].map(|v| v / 1000.0),
                memory_used: mean_size(m[1]),
                memory_limit: mean_size(m[2]),
                gpu_utilization_pct: m[3].map(|v| v / 10.0),
                gpu_memory_used: mean_size(m[4]),
            });
        }
        points.sort_by_key(|p| (p.member, p.at));
        Ok(points)
    }

    /// The GPUs (of `node` only, when given) over `[from, to)`, one point per GPU and `step`, read as
    /// [`Store::member_series`] reads members. Ordered by node, GPU, then time.
    pub async fn gpu_series(
        &self,
        from: DateTime<Utc>,
        to: DateTime<Utc>,
        step: Duration,
        node: Option<&str>,
    ) -> Result<Vec<GpuPoint>> {
        let (names_sql, series) = match node {
            Some(_) => {
                ("SELECT id, uuid, node FROM sample_gpus WHERE node = $1", "SELECT id FROM sample_gpus WHERE node = $4")
            }
            None => ("SELECT id, uuid, node FROM sample_gpus", "SELECT id FROM sample_gpus"),
        };
        let mut q = sqlx::query(names_sql);
        if let Some(n) = node {
            q = q.bind(n);
        }
        let names: HashMap<i64, (String, String)> = q
            .fetch_all(&self.pool)
            .await?
            .iter()
            .map(|r| Ok((r.try_get("id")?, (r.try_get("node")?, r.try_get("uuid")?))))
            .collect::<Result<_>>()?;
        if names.is_empty() {
            return Ok(Vec::new());
        }
        let rows = read_series(&self.pool, &GPUS, series, from, to, step, node).await?;
        let mut points = Vec::with_capacity(rows.len());
        for (id, at, m) in rows {
            let Some((node, uuid)) = names.get(&id) else { continue };
            points.push(GpuPoint {
                node: node.clone(),
                uuid: uuid.clone(),
                at,
                utilization_pct: m[0].map(|v| v / 10.0),
                memory_used: mean_size(m[1]),
                memory_total: mean_size(m[2]),
                power_watts: m[3].map(|v| v / 1000.0),
                temperature_c: m[4].map(|v| v / 10.0),
            });
        }
        points.sort_by(|a, b| (&a.node, &a.uuid, a.at).cmp(&(&b.node, &b.uuid, b.at)));
        Ok(points)
    }
}

/// Which series table.
#[derive(Clone, Copy)]
enum Series {
    /// `sample_members`, keyed by workload id and member (the owner is carried along).
    Members,
    /// `sample_gpus`, keyed by uuid and node.
    Gpus,
}

/// A series' key: `(workload id, member, "")` or `(uuid, 0, node)`.
type Key = (String, i64, String);

/// The numbers of the series named by `keys` (`(workload id, member, owner)` or `(uuid, 0, node)`),
/// naming those seen for the first time. Looked up first, so a round of known series writes nothing
/// here.
async fn series_ids(tx: &mut Transaction<'static, Any>, which: Series, keys: &[Key]) -> Result<HashMap<Key, i64>> {
    let key = |k: &Key| match which {
        Series::Members => (k.0.clone(), k.1, String::new()),
        Series::Gpus => k.clone(),
    };
    let mut ids = lookup_series(tx, which, keys).await?;
    let missing: Vec<&Key> = keys.iter().filter(|k| !ids.contains_key(&key(k))).collect();
    if missing.is_empty() {
        return Ok(ids);
    }
    for chunk in missing.chunks(CHUNK) {
        let mut sql = String::from(match which {
            Series::Members => "INSERT INTO sample_members (workload_id, member, owner) VALUES ",
            Series::Gpus => "INSERT INTO sample_gpus (uuid, node) VALUES ",
        });
        for i in 0..chunk.len() {
            if i > 0 {
                sql.push_str(", ");
            }
            match which {
                Series::Members => sql.push_str(&format!("(${}, ${}, ${})", 3 * i + 1, 3 * i + 2, 3 * i + 3)),
                Series::Gpus => sql.push_str(&format!("(${}, ${})", 2 * i + 1, 2 * i + 2)),
            }
        }
        sql.push_str(match which {
            Series::Members => " ON CONFLICT (workload_id, member) DO NOTHING",
            Series::Gpus => " ON CONFLICT (uuid, node) DO NOTHING",
        });
        let mut q = sqlx::query(&sql);
        for (name, member, other) in chunk {
            q = match which {
                Series::Members => q.bind(name.as_str()).bind(*member).bind(other.as_str()),
                Series::Gpus => q.bind(name.as_str()).bind(other.as_str()),
            };
        }
        q.execute(&mut **tx).await?;
    }
    let missing: Vec<Key> = missing.into_iter().cloned().collect();
    ids.extend(lookup_series(tx, which, &missing).await?);
    Ok(ids)
}

/// The numbers of the known series of the workloads (GPUs) `keys` name, by [`Key`].
async fn lookup_series(tx: &mut Transaction<'static, Any>, which: Series, keys: &[Key]) -> Result<HashMap<Key, i64>> {
    let mut names: Vec<&str> = keys.iter().map(|k| k.0.as_str()).collect();
    names.sort_unstable();
    names.dedup();
    let mut ids = HashMap::new();
    for chunk in names.chunks(CHUNK) {
        let list: Vec<String> = (1..=chunk.len()).map(|i| format!("${i}")).collect();
        let sql = match which {
            Series::Members => {
                format!("SELECT id, workload_id, member FROM sample_members WHERE workload_id IN ({})", list.join(", "))
            }
            Series::Gpus => format!("SELECT id, uuid, node FROM sample_gpus WHERE uuid IN ({})", list.join(", ")),
        };
        let mut q = sqlx::query(&sql);
        for n in chunk {
            q = q.bind(*n);
        }
        for r in q.fetch_all(&mut **tx).await? {
            let key = match which {
                Series::Members => (r.try_get("workload_id")?, r.try_get("member")?, String::new()),
                Series::Gpus => (r.try_get("uuid")?, 0, r.try_get("node")?),
            };
            ids.insert(key, r.try_get("id")?);
        }
    }
    Ok(ids)
}

/// Inserts raw samples at `ts`, in batches.
async fn insert_raw(tx: &mut Transaction<'static, Any>, kind: &Kind, ts: i64, rows: &[(i64, Figures)]) -> Result<()> {
    for chunk in rows.chunks(CHUNK) {
        let mut sql = format!("INSERT INTO {} (series, tier, ts, {}) VALUES ", kind.samples, kind.columns.join(", "));
        for i in 0..chunk.len() {
            if i > 0 {
                sql.push_str(", ");
            }
            let p = 7 * i;
            sql.push_str(&format!(
                "(${}, {RAW}, ${}, ${}, ${}, ${}, ${}, ${})",
                p + 1,
                p + 2,
                p + 3,
                p + 4,
                p + 5,
                p + 6,
                p + 7
            ));
        }
        sql.push_str(" ON CONFLICT (series, tier, ts) DO NOTHING");
        let mut q = sqlx::query(&sql);
        for (id, figures) in chunk {
            q = q.bind(*id).bind(ts);
            for f in figures {
                q = q.bind(*f);
            }
        }
        q.execute(&mut **tx).await?;
    }
    Ok(())
}

/// The oldest sample of `tier` (the `(tier, ts)` index makes it one lookup).
async fn oldest(tx: &mut Transaction<'static, Any>, kind: &Kind, tier: i64) -> Result<Option<i64>> {
    let sql = format!("SELECT MIN(ts) AS lo FROM {} WHERE tier = $1", kind.samples);
    let row = sqlx::query(&sql).bind(tier).fetch_one(&mut **tx).await?;
    Ok(row.try_get::<Option<i64>, _>("lo")?)
}

/// The mean of column `c` over rows that each stand for `COALESCE(samples, 1)` raw samples, weighing
/// every raw sample alike and leaving out rows where `c` is NULL (NULL when every one is), as a double.
pub(crate) fn weighted_mean(c: &str) -> String {
    format!(
        "SUM(CAST({c} AS DOUBLE PRECISION) * COALESCE(samples, 1)) / \
         SUM(CAST(CASE WHEN {c} IS NULL THEN NULL ELSE COALESCE(samples, 1) END AS DOUBLE PRECISION))"
    )
}

/// Writes the means of `from`'s samples before `hi`, per series and `bucket_ms` bucket, as `to`
/// samples (a bucket already there is kept); returns how many were written.
async fn average(
    tx: &mut Transaction<'static, Any>,
    kind: &Kind,
    from: i64,
    to: i64,
    bucket_ms: i64,
    hi: i64,
) -> Result<u64> {
    let means: Vec<String> =
        kind.columns.iter().map(|c| format!("CAST(ROUND({}) AS BIGINT)", weighted_mean(c))).collect();
    let sql = format!(
        "INSERT INTO {t} (series, tier, ts, {cols}, samples) \
         SELECT series, {to}, (ts / {bucket_ms}) * {bucket_ms}, {means}, SUM(COALESCE(samples, 1)) FROM {t} \
         WHERE tier = {from} AND ts < $1 GROUP BY series, ts / {bucket_ms} \
         ON CONFLICT (series, tier, ts) DO NOTHING",
        t = kind.samples,
        cols = kind.columns.join(", "),
        means = means.join(", "),
    );
    Ok(sqlx::query(&sql).bind(hi).execute(&mut **tx).await?.rows_affected())
}

/// Deletes `tier`'s samples before `hi`; returns how many.
async fn delete_before(tx: &mut Transaction<'static, Any>, kind: &Kind, tier: i64, hi: i64) -> Result<u64> {
    let sql = format!("DELETE FROM {} WHERE tier = $1 AND ts < $2", kind.samples);
    Ok(sqlx::query(&sql).bind(tier).bind(hi).execute(&mut **tx).await?.rows_affected())
}

/// The means (each raw sample weighing alike) per series and step of the series `series_sql` selects (its parameter `$4` is `param`),
/// over `[from, to)`, each part of the window from the finest tier that holds it: raw samples from the
/// oldest raw sample on, 1-minute means before that, 1-hour means before the oldest 1-minute mean. One
/// statement, so it reads one consistent state even while [`Store::downsample`] runs.
async fn read_series(
    pool: &sqlx::AnyPool,
    kind: &Kind,
    series_sql: &str,
    from: DateTime<Utc>,
    to: DateTime<Utc>,
    step: Duration,
    param: Option<&str>,
) -> Result<Vec<(i64, DateTime<Utc>, [Option<f64>; 5])>> {
    let t = kind.samples;
    let cols = kind.columns.join(", ");
    let raw_lo = format!("(SELECT MIN(ts) FROM {t} WHERE tier = {RAW})");
    let minute_lo = format!("(SELECT MIN(ts) FROM {t} WHERE tier = {MINUTE})");
    let part = |tier: i64, before: &str| {
        format!(
            "SELECT series, ts, {cols}, samples FROM {t} WHERE tier = {tier} AND series IN ({series_sql}) \
             AND ts >= $1 AND ts < $2{before}"
        )
    };
    let means: Vec<String> =
        kind.columns.iter().enumerate().map(|(i, c)| format!("{} AS m{i}", weighted_mean(&format!("x.{c}")))).collect();
    let sql = format!(
        "SELECT x.series AS series, (x.ts - $1) / $3 AS bucket, {means} FROM ({raw} UNION ALL {minute} UNION ALL {hour}) x \
         GROUP BY x.series, (x.ts - $1) / $3 ORDER BY x.series, bucket",
        means = means.join(", "),
        raw = part(RAW, ""),
        minute = part(MINUTE, &format!(" AND ts < COALESCE({raw_lo}, $2)")),
        hour = part(HOUR, &format!(" AND ts < COALESCE({minute_lo}, {raw_lo}, $2)")),
    );
    let step_ms = dur_ms(step).max(1);
    let mut q = sqlx::query(&sql).bind(ms(from)).bind(ms(to)).bind(step_ms);
    if let Some(p) = param {
        q = q.bind(p);
    }
    let rows = q.fetch_all(pool).await?;
    rows.iter().map(|r| point_row(r, from, step_ms)).collect()
}

fn point_row(r: &AnyRow, from: DateTime<Utc>, step_ms: i64) -> Result<(i64, DateTime<Utc>, [Option<f64>; 5])> {
    let bucket: i64 = r.try_get("bucket")?;
    let at = from + chrono::Duration::milliseconds(bucket.saturating_mul(step_ms));
    let mut m = [None; 5];
    for (i, v) in m.iter_mut().enumerate() {
        *v = r.try_get::<Option<f64>, _>(format!("m{i}").as_str())?;
    }
    Ok((r.try_get("series")?, at, m))
}
