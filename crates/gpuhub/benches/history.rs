//! History benchmark (issue 10): what keeping the monitor's samples costs at 500 running workloads. It
//! prints figures and asserts no times. The server runs in-process on the recording fake engine (one
//! node, 8 GPUs) with a manual clock and its own monitor idle; 500 workspaces (8 of them holding a GPU)
//! are submitted through the API and run; a second [`Monitor`] over the same store, engine and clock is
//! driven by hand.
//!
//! 1. sampler cost: rounds of `Monitor::sample` (the store's running workloads, `Engine::usage` of each
//!    run, the GPU sampler) and `Monitor::write_history` (`Store::record_metrics`, plus
//!    `Store::downsample` once a minute of round time), the clock 10 s on per round; p50/p99 per round
//!    and per workload (the round's time / 500).
//! 2. store growth: a day of rounds every 10 s (8,640) written through `Monitor::write_history` with the
//!    default retention (raw 24 h, 1-minute means 30 days, 1-hour means 365 days), then a second day;
//!    the SQLite file (and its WAL) after each. The rounds are copies of a sampled round with the time
//!    and figures changed (CPU, memory, GPU use vary per round), so they cost the store what real
//!    rounds would; sampling itself is measured in 1. Day 1 holds raw samples only; from day 2 on each
//!    day turns a day of raw samples into 1-minute means, so the second day's growth is the daily growth
//!    until day 30, after which 1-minute means become 1-hour means and the file stops growing but for
//!    those (1/60 of the rows).
//! 3. query: 30 days of history. Days 3–29 are 1-minute means by day 30 whatever wrote them, so they
//!    are laid down directly as such rows (one SQL statement per day: every member and GPU series, a
//!    mean of 6 samples per minute, figures varying by series and minute), which takes seconds where
//!    27 days of rounds took over an hour; the last day is written as rounds every 10 s, and the
//!    thinning-out backlog is worked off as the monitor would. Then p50/p99 of `Store::member_series` over the 30 days at the API's default
//!    step for 30 days (2 h: 360 points) for workloads picked in a fixed scattered order, and of the same
//!    query through `GET /api/v1/workloads/{name}/metrics?…&step=7200` (HTTP on loopback, JSON).
//!
//! `cargo bench -p gpuhub --bench history` runs it (release); `GPUHUB_HISTORY_BENCH_WORKLOADS` changes
//! the 500. Without `--bench` it does nothing.

use anyhow::{Context as _, Result, bail};
use chrono::{DateTime, TimeZone, Utc};
use gpuhub_controller::clock::{Clock as _, ManualClock};
use gpuhub_core::metrics::MetricsSnapshot;
use gpuhub_core::node::NodeCapacity;
use gpuhub_core::quantity::GIB;
use gpuhub_core::workload::WorkloadState;
use gpuhub_core::{Bytes, CpuMilli};
use gpuhub_driver::MemberUsage;
use gpuhub_driver::fake::FakeEngine;
use gpuhub_gpu::{FakeGpuSampler, GpuProcess};
use gpuhub_monitor::{Monitor, MonitorSettings};
use gpuhub_store::WorkloadFilter;
use serde_json::{Value, json};
use sqlx::Connection as _;
use std::sync::Arc;
use std::time::{Duration, Instant};

const GPUS: u32 = 8;
const SAMPLER_ROUNDS: usize = 100;
const DAY_ROUNDS: i64 = 8640;
const QUERIES: usize = 200;
const ADMIN_PASSWORD: &str = "history-admin-password";

fn main() -> Result<()> {
    if !std::env::args().any(|a| a == "--bench") {
        println!("history: run with `cargo bench -p gpuhub --bench history`");
        return Ok(());
    }
    tracing_subscriber::fmt().with_env_filter("warn").with_writer(std::io::stderr).init();
    let workloads = match std::env::var("GPUHUB_HISTORY_BENCH_WORKLOADS") {
        Ok(n) => n.parse().context("GPUHUB_HISTORY_BENCH_WORKLOADS")?,
        Err(_) => 500,
    };
    tokio::runtime::Runtime::new()?.block_on(bench(workloads))
}

fn t0() -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2026, 1, 1, 0, 0, 0).unwrap()
}

/// The nearest-rank percentile `p` (0–100) of sorted samples.
fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

fn line(what: &str, v: &mut [Duration], per: usize) {
    v.sort();
    let (p50, p99) = (percentile(v, 50.0), percentile(v, 99.0));
    let per = per as f64;
    println!(
        "   {what:<34} p50 {:>8.2} ms  p99 {:>8.2} ms   per workload p50 {:>6.1} µs  p99 {:>6.1} µs",
        p50.as_secs_f64() * 1e3,
        p99.as_secs_f64() * 1e3,
        p50.as_secs_f64() * 1e6 / per,
        p99.as_secs_f64() * 1e6 / per
    );
}

fn mib(bytes: u64) -> String {
    format!("{:.1} MiB", bytes as f64 / (1 << 20) as f64)
}

/// The SQLite file and its WAL, bytes.
fn db_bytes(db: &std::path::Path) -> (u64, u64) {
    let len = |p: std::path::PathBuf| std::fs::metadata(p).map(|m| m.len()).unwrap_or(0);
    (len(db.to_owned()), len(std::path::PathBuf::from(format!("{}-wal", db.display()))))
}

async fn bench(n: usize) -> Result<()> {
    let dir = tempfile::tempdir()?;
    let clock = Arc::new(ManualClock::new(t0()));
    let node =
        NodeCapacity::uniform("bench", CpuMilli(100_000_000), Bytes(1 << 50), GPUS, "H100", Bytes(80 * GIB), "GPU-");
    let engine = Arc::new(FakeEngine::new().with_nodes(vec![node.clone()]));
    engine.add_image("busybox:latest");
    let mut config = gpuhub_server::config::Config {
        listen: "127.0.0.1:0".parse()?,
        ssh_listen: "127.0.0.1:0".parse()?,
        data_dir: dir.path().join("data"),
        admin_password: Some(ADMIN_PASSWORD.into()),
        allow_any_image: true,
        ..Default::default()
    };
    config.limits.max_workloads_per_user = 1_000_000;
    config.limits.max_queued_per_user = 1_000_000;
    // the server's own monitor samples once at start (nothing runs yet), then not again during the bench
    config.monitor.interval_secs = 365 * 86_400;
    let db = config.data_dir.join("gpuhub.db");
    let seams = gpuhub_server::Seams { clock: clock.clone(), ..Default::default() };
    let server = gpuhub_server::start_with(config, engine.clone(), seams).await?;
    let base = format!("http://{}", server.addr);
    let http = reqwest::Client::new();
    let admin = login(&http, &base, "admin", ADMIN_PASSWORD).await?;
    post(&http, &base, &admin, "/api/v1/users", json!({"username": "bench", "password": "bench-password"})).await?;
    let token = login(&http, &base, "bench", "bench-password").await?;
    let started = Instant::now();
    for i in 0..n {
        let gpus = u32::from(i < GPUS as usize);
        let body = json!({"name": format!("w{i}"), "kind": "workspace", "image": "busybox:latest",
            "resources": {"cpus": 1, "memory": "16GiB", "gpus": gpus}});
        post(&http, &base, &token, "/api/v1/workloads", body).await?;
    }
    let store = server.state.store.clone();
    let running = WorkloadFilter { owner: None, states: Some(vec![WorkloadState::Running]) };
    let mut changes = server.state.controller.changes();
    let workloads = loop {
        let w = store.list_workloads(&running).await?;
        if w.len() == n {
            break w;
        }
        if tokio::time::timeout(Duration::from_secs(120), changes.recv()).await.is_err() {
            bail!("{} of {n} workloads running after 120 s", w.len());
        }
    };
    println!(
        "gpuhub history benchmark: {n} running workspaces ({GPUS} holding a GPU) on the fake engine, \
         started in {:.1} s; SQLite at {}",
        started.elapsed().as_secs_f64(),
        db.display()
    );

    // what each member uses: memory of 1–8 GiB, a pid each; the GPU holders' processes on their GPUs
    let sampler = Arc::new(FakeGpuSampler::new(node.gpus.clone()));
    let runs: Vec<(String, u64)> =
        workloads.iter().enumerate().map(|(i, w)| (w.run_id.clone().unwrap_or_default(), 10_000 + i as u64)).collect();
    for w in workloads.iter().filter(|w| !w.gpus.is_empty()) {
        let pid = 10_000 + workloads.iter().position(|x| x.id == w.id).unwrap_or(0) as u32;
        sampler.set(&w.gpus[0], 87.0, Bytes(60 * GIB));
        sampler.set_processes(&w.gpus[0], vec![GpuProcess { pid, memory_used: Bytes(59 * GIB) }]);
        sampler.set_sensors(&w.gpus[0], Some(612.0), Some(71.0));
    }
    let set_usage = |round: u64| {
        for (i, (run, pid)) in runs.iter().enumerate() {
            let cores = (i % 4) as f64 * 0.5;
            engine.set_usage(
                run,
                vec![MemberUsage {
                    index: 0,
                    cpu_seconds: cores * 10.0 * round as f64,
                    memory_used: Bytes(GIB * (1 + i as u64 % 8) + (round % 64) * 4096),
                    memory_limit: Some(Bytes(16 * GIB)),
                    pids: vec![*pid as u32],
                }],
            );
        }
    };
    let settings = MonitorSettings { interval: Duration::from_secs(10), ..Default::default() };
    let inventory = server.state.controller.inventory().clone();
    let (mut monitor, _latest) =
        Monitor::new(store.clone(), engine.clone(), Some(sampler), clock.clone(), inventory, settings);

    // 1. sampler cost
    let (mut sample, mut write, mut total) = (Vec::new(), Vec::new(), Vec::new());
    let mut template = MetricsSnapshot::default();
    for round in 0..(SAMPLER_ROUNDS + 3) as u64 {
        clock.advance(chrono::Duration::seconds(10));
        set_usage(round);
        let t = Instant::now();
        let snapshot = monitor.sample().await;
        let sampled = t.elapsed();
        let t = Instant::now();
        monitor.write_history(&snapshot).await;
        let written = t.elapsed();
        if round >= 3 {
            sample.push(sampled);
            write.push(written);
            total.push(sampled + written);
        }
        template = snapshot;
    }
    if template.members.len() != n || template.gpus.len() != GPUS as usize {
        bail!("a round measured {} members and {} GPUs", template.members.len(), template.gpus.len());
    }
    println!("\n1. sampler cost, {SAMPLER_ROUNDS} rounds of {n} members and {GPUS} GPUs (after 3 warm-ups)");
    line("Monitor::sample", &mut sample, n);
    line("write_history (record + downsample)", &mut write, n);
    line("both", &mut total, n);

    // 2. store growth (skipped with GPUHUB_HISTORY_BENCH_SKIP_GROWTH=1: part 3 then lays down 29 days)
    let growth = std::env::var("GPUHUB_HISTORY_BENCH_SKIP_GROWTH").map_or(true, |v| v != "1");
    let mut at = clock.now();
    let mut k: u64 = 0;
    if growth {
        let (before, wal) = db_bytes(&db);
        println!("\n2. store growth at {n} members + {GPUS} GPUs, a round every 10 s, default retention");
        println!("   before: {} (+ WAL {})", mib(before), mib(wal));
        let mut days = Vec::new();
        for day in 1..=2 {
            let t = Instant::now();
            for _ in 0..DAY_ROUNDS {
                at += chrono::Duration::seconds(10);
                k += 1;
                monitor.write_history(&vary(&template, at, k)).await;
            }
            let (size, wal) = db_bytes(&db);
            println!(
                "   after day {day}: {} (+ WAL {}), {DAY_ROUNDS} rounds written in {:.1} s ({:.2} ms a round)",
                mib(size),
                mib(wal),
                t.elapsed().as_secs_f64(),
                t.elapsed().as_secs_f64() * 1e3 / DAY_ROUNDS as f64
            );
            days.push(size);
        }
        let (day1, growth) = (days[0].saturating_sub(before), days[1].saturating_sub(days[0]));
        println!(
            "   day 1 (raw samples only): +{}; each day from day 2 to day 30: +{} (day 2's)",
            mib(day1),
            mib(growth)
        );
        println!(
            "   extrapolated at day 30: {} (before + day 1 + 29 × day 2's growth); after that about flat",
            mib(before + day1 + 29 * growth)
        );
    }
    // 3. 30 days of history, then queries
    let t = Instant::now();
    let laid_days: i64 = if growth { 27 } else { 29 };
    let day3 = at;
    let mut conn = sqlx::SqliteConnection::connect(&format!("sqlite://{}", db.display())).await?;
    sqlx::query("CREATE TEMP TABLE holders AS SELECT DISTINCT series FROM member_samples WHERE gpu_util IS NOT NULL")
        .execute(&mut conn)
        .await?;
    for day in 0..laid_days {
        let start = (day3 + chrono::Duration::days(day)).timestamp_millis();
        let (start, end) = ((start / 60_000 + 1) * 60_000, (start / 60_000 + 1 + 1440) * 60_000);
        sqlx::query(MINUTE_MEMBERS).bind(start).bind(end).execute(&mut conn).await?;
        sqlx::query(MINUTE_GPUS).bind(start).bind(end).execute(&mut conn).await?;
    }
    conn.close().await?;
    at = day3 + chrono::Duration::days(laid_days);
    let laid = t.elapsed();
    let t = Instant::now();
    for _ in 0..DAY_ROUNDS {
        at += chrono::Duration::seconds(10);
        k += 1;
        monitor.write_history(&vary(&template, at, k)).await;
    }
    // and whatever backlog of thinning out is left, as the monitor would do over the next minutes
    let h = monitor_retention();
    while store.downsample(at, h.raw, h.minute, h.hour).await?.more {}
    clock.set(at);
    let (size, wal) = db_bytes(&db);
    println!(
        "\n3. query over 30 days ({laid_days} days laid down as 1-minute means in {:.0} s, day 30's {DAY_ROUNDS} \
         rounds written in {:.0} s; database now {} + WAL {})",
        laid.as_secs_f64(),
        t.elapsed().as_secs_f64(),
        mib(size),
        mib(wal)
    );
    let mut conn = sqlx::SqliteConnection::connect(&format!("sqlite://{}", db.display())).await?;
    let tiers: Vec<(i64, i64)> =
        sqlx::query_as("SELECT tier, COUNT(*) FROM member_samples GROUP BY tier ORDER BY tier")
            .fetch_all(&mut conn)
            .await?;
    conn.close().await?;
    println!("   member samples by tier (0 raw, 1 minute, 2 hour): {tiers:?}");
    let raw = tiers.iter().find(|(t, _)| *t == 0).map_or(0, |(_, c)| *c);
    if raw < (n as i64) * DAY_ROUNDS * 9 / 10 {
        bail!("day 30's rounds are not in the history ({raw} raw samples): see the warnings above");
    }
    let from = at - chrono::Duration::days(30);
    let (mut direct, mut api) = (Vec::new(), Vec::new());
    let mut points = 0;
    for q in 0..QUERIES {
        let w = &workloads[(q * 7919) % n];
        let t = Instant::now();
        let p = store.member_series(&w.id, from, at, Duration::from_secs(7200)).await?;
        direct.push(t.elapsed());
        points = p.len();
        let url = format!(
            "{base}/api/v1/workloads/{}/metrics?from={}&to={}&step=7200",
            w.name,
            from.to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
            at.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
        );
        let t = Instant::now();
        let resp = http.get(&url).bearer_auth(&token).send().await?;
        let status = resp.status();
        let body: Value = resp.json().await?;
        api.push(t.elapsed());
        if !status.is_success() || body["points"].as_array().map(Vec::len) != Some(p.len()) {
            bail!("GET {url}: {status} {body}");
        }
    }
    println!("   {QUERIES} queries, {points} points each (step 2 h)");
    line("Store::member_series", &mut direct, 1);
    line("GET …/metrics (HTTP, JSON)", &mut api, 1);
    server.shutdown().await;
    Ok(())
}

/// Every member series' 1-minute means for minutes `?1` to `?2` (unix ms): 6 samples each, figures
/// varying by series and minute like [`vary`]'s, GPU figures for the series that had them
/// (`temp.holders`).
const MINUTE_MEMBERS: &str =
    "WITH RECURSIVE m(ts) AS (SELECT ?1 UNION ALL SELECT ts + 60000 FROM m WHERE ts + 60000 < ?2)
    INSERT INTO member_samples (series, tier, ts, cpu_milli, memory_used, memory_limit, gpu_util, gpu_memory, samples)
    SELECT s.id, 1, m.ts, 200 + (s.id * 7 + m.ts / 60000) % 800, (1 + (s.id + m.ts / 60000) % 8) * 1073741824,
        17179869184, CASE WHEN s.id IN temp.holders THEN (s.id * 13 + m.ts / 60000) % 1000 END,
        CASE WHEN s.id IN temp.holders THEN 4294967296 END, 6
    FROM sample_members s, m";

/// Every GPU series' 1-minute means for minutes `?1` to `?2` (unix ms), like [`MINUTE_MEMBERS`].
const MINUTE_GPUS: &str = "WITH RECURSIVE m(ts) AS (SELECT ?1 UNION ALL SELECT ts + 60000 FROM m WHERE ts + 60000 < ?2)
    INSERT INTO gpu_samples (series, tier, ts, utilization, memory_used, memory_total, power_mw, temperature, samples)
    SELECT g.id, 1, m.ts, (g.id * 13 + m.ts / 60000) % 1000, 4294967296, 85899345920, 350000, 650, 6
    FROM sample_gpus g, m";

fn monitor_retention() -> gpuhub_monitor::HistoryRetention {
    gpuhub_monitor::HistoryRetention::default()
}

/// `template` at `at`, its figures moved a little by `k` (so that rows are not all alike).
fn vary(template: &MetricsSnapshot, at: DateTime<Utc>, k: u64) -> MetricsSnapshot {
    let mut s = template.clone();
    s.at = Some(at);
    for (i, m) in s.members.iter_mut().enumerate() {
        let j = k.wrapping_add(i as u64);
        m.cpu_cores = Some((j % 40) as f64 / 10.0);
        m.memory_used = m.memory_used.wrapping_add((j % 64) * 4096);
        m.gpu_utilization_pct = m.gpu_utilization_pct.map(|_| (j % 1000) as f64 / 10.0);
    }
    for (i, g) in s.gpus.iter_mut().enumerate() {
        let j = k.wrapping_add(i as u64);
        g.utilization_pct = (j % 1000) as f64 / 10.0;
        g.memory_used = g.memory_used.wrapping_add((j % 64) << 20);
    }
    s
}

async fn login(http: &reqwest::Client, base: &str, user: &str, password: &str) -> Result<String> {
    let v = post(http, base, "", "/api/v1/login", json!({"username": user, "password": password})).await?;
    Ok(v["token"].as_str().context("no token")?.to_owned())
}

async fn post(http: &reqwest::Client, base: &str, token: &str, path: &str, body: Value) -> Result<Value> {
    let mut req = http.post(format!("{base}{path}")).json(&body);
    if !token.is_empty() {
        req = req.bearer_auth(token);
    }
    let resp = req.send().await?;
    let status = resp.status();
    let text = resp.text().await?;
    if !status.is_success() {
        bail!("POST {path}: {status}: {text}");
    }
    Ok(serde_json::from_str(&text)?)
}
