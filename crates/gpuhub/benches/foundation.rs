//! Foundation benchmarks of the real `gpuhub serve` (release build) on the local Docker engine. They print
//! figures and assert no times:
//!
//! 1. submit → finished: `POST /api/v1/workloads` of a busybox job running `true`, then
//!    `GET /api/v1/workloads/{name}` every 10 ms until its state is `succeeded` (the container was
//!    created, started, `true` ran, and the exit was recorded), against `docker run --rm gpuhub/busybox
//!    true` (create, start, wait, remove) — median of 20 each after 2 warm-ups, and the ratio. Also the
//!    server's own `started_at − created_at` (submit → container started).
//! 2. `GET /api/v1/workloads?limit=50` of a user with 10,000 (stopped) workloads, inserted with
//!    `gpuhub_store::Store` before the server starts: first a walk through all 200 pages by their
//!    cursors, then p50/p99 of 1,000 sequential requests (until the whole body is read) spread over
//!    those 200 pages, and the size of a page; last a walk through the 10 pages of `limit=1000`.
//! 3. the server's resident memory (`VmRSS`) right after start, after the 1,000 requests of 2, and after
//!    a walk in pages of 1000 (the largest).
//!
//! `cargo bench -p gpuhub --bench foundation` runs both; `-- --bench list` (or `submit`) only one (the
//! list benchmark needs no container engine). Without `--bench` (as `cargo test --benches` runs it) it
//! does nothing.

#[path = "../tests/common/mod.rs"]
mod common;

use anyhow::{Context as _, Result, bail, ensure};
use chrono::{Duration as ChronoDuration, Utc};
use common::{ADMIN_PASSWORD, IMAGE, PASSWORD, Server};
use gpuhub_core::workload::{Resources, Workload, WorkloadKind, WorkloadState};
use gpuhub_core::{Bytes, CpuMilli};
use serde_json::{Value, json};
use std::process::Command;
use std::time::{Duration, Instant};

const RUNS: usize = 20;
const WARMUP: usize = 2;
const ROWS: usize = 10_000;
const LIST_REQUESTS: usize = 1000;

fn main() -> Result<()> {
    if !std::env::args().any(|a| a == "--bench") {
        println!("foundation: run with `cargo bench -p gpuhub --bench foundation`");
        return Ok(());
    }
    let only_list = std::env::args().any(|a| a == "list");
    let only_submit = std::env::args().any(|a| a == "submit");
    let rt = tokio::runtime::Runtime::new()?;
    let http = reqwest::Client::new();
    println!("gpuhub foundation benchmarks (binary {})", common::BIN);
    if !only_list {
        common::ensure_image()?;
        rt.block_on(submit_bench(&http))?;
    }
    if !only_submit {
        rt.block_on(list_bench(&http))?;
    }
    Ok(())
}

/// Logs `user` in through the API; returns the token.
async fn login(http: &reqwest::Client, base: &str, user: &str, password: &str) -> Result<String> {
    let v: Value = http
        .post(format!("{base}/api/v1/login"))
        .json(&json!({"username": user, "password": password}))
        .send()
        .await?
        .error_for_status()?
        .json()
        .await?;
    Ok(v["token"].as_str().context("no token")?.to_owned())
}

/// Creates `user` as the admin and logs it in.
async fn make_user(http: &reqwest::Client, base: &str, user: &str) -> Result<String> {
    let admin = login(http, base, "admin", ADMIN_PASSWORD).await?;
    http.post(format!("{base}/api/v1/users"))
        .bearer_auth(&admin)
        .json(&json!({"username": user, "password": PASSWORD}))
        .send()
        .await?
        .error_for_status()?;
    login(http, base, user, PASSWORD).await
}

fn median(v: &mut [Duration]) -> Duration {
    v.sort();
    v[v.len() / 2]
}

/// The nearest-rank percentile `p` (0–100) of sorted samples.
fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

fn ms(d: Duration) -> String {
    format!("{:.1} ms", d.as_secs_f64() * 1e3)
}

async fn submit_bench(http: &reqwest::Client) -> Result<()> {
    let server = Server::start(2)?;
    let rss_start = server.rss_kib()?;
    let base = server.url();
    let user = format!("bench-{}", common::suffix());
    let result = submit_runs(http, &base, &user).await;
    drop(server);
    common::remove_user_containers(&user);
    let (mut gpuhub, mut server_side) = result?;
    let mut docker = Vec::new();
    for i in 0..WARMUP + RUNS {
        let t0 = Instant::now();
        let out = Command::new("docker").args(["run", "--rm", IMAGE, "true"]).output()?;
        let took = t0.elapsed();
        ensure!(out.status.success(), "docker run: {}", common::describe(&out));
        if i >= WARMUP {
            docker.push(took);
        }
    }
    let (g, s, d) = (median(&mut gpuhub), median(&mut server_side), median(&mut docker));
    println!("\n1. submit → finished, busybox `true`, median of {RUNS} (after {WARMUP} warm-ups)");
    println!("   gpuhub  POST → GET shows `succeeded` (10 ms polling)     {}", ms(g));
    println!("   gpuhub  server clock: created_at → started_at           {}", ms(s));
    println!("   docker  `docker run --rm {IMAGE} true`             {}", ms(d));
    println!("   ratio   gpuhub / docker run                              {:.2}", g.as_secs_f64() / d.as_secs_f64());
    println!("   server VmRSS after start (empty database)                {rss_start} KiB");
    Ok(())
}

/// `RUNS` (+ warm-ups) jobs one after the other: client-side submit → succeeded, and the server's
/// created → started.
async fn submit_runs(http: &reqwest::Client, base: &str, user: &str) -> Result<(Vec<Duration>, Vec<Duration>)> {
    let token = make_user(http, base, user).await?;
    let body =
        json!({"kind": "job", "image": IMAGE, "command": ["true"], "resources": {"cpus": 0.1, "memory": "32MiB"}});
    let (mut client, mut server) = (Vec::new(), Vec::new());
    for i in 0..WARMUP + RUNS {
        let t0 = Instant::now();
        let resp = http.post(format!("{base}/api/v1/workloads")).bearer_auth(&token).json(&body).send().await?;
        ensure!(resp.status() == reqwest::StatusCode::CREATED, "submit: HTTP {}", resp.status());
        let created: Value = resp.json().await?;
        let name = created["name"].as_str().context("no name")?.to_owned();
        let w = loop {
            let w: Value = http
                .get(format!("{base}/api/v1/workloads/{name}"))
                .bearer_auth(&token)
                .send()
                .await?
                .error_for_status()?
                .json()
                .await?;
            match w["state"].as_str() {
                Some("succeeded") => break w,
                Some("failed" | "lost" | "stopped") => bail!("job {name} ended as {w}"),
                _ if t0.elapsed() > common::WAIT => bail!("job {name} did not finish: {w}"),
                _ => tokio::time::sleep(Duration::from_millis(10)).await,
            }
        };
        let took = t0.elapsed();
        let at = |k: &str| -> Result<chrono::DateTime<Utc>> { Ok(w[k].as_str().context("time")?.parse()?) };
        let started = (at("started_at")? - at("created_at")?).to_std().unwrap_or_default();
        if i >= WARMUP {
            client.push(took);
            server.push(started);
        }
    }
    Ok((client, server))
}

/// Walks every page of `url` (which has a query) by its cursors; returns the cursor of each page after
/// the first, the number of workloads and the time it took.
async fn walk(http: &reqwest::Client, url: &str, token: &str) -> Result<(Vec<String>, usize, Duration)> {
    let (mut cursors, mut rows, t) = (Vec::new(), 0, Instant::now());
    let mut next = url.to_owned();
    loop {
        let resp = http.get(&next).bearer_auth(token).send().await?.error_for_status()?;
        let cursor = resp.headers().get("x-next-cursor").map(|v| v.to_str().map(str::to_owned)).transpose()?;
        let page: Value = serde_json::from_slice(&resp.bytes().await?)?;
        rows += page.as_array().context("a page is a JSON array")?.len();
        match cursor {
            Some(c) => {
                next = format!("{url}&cursor={c}");
                cursors.push(c);
            }
            None => return Ok((cursors, rows, t.elapsed())),
        }
    }
}

async fn list_bench(http: &reqwest::Client) -> Result<()> {
    let server = Server::prepare(2)?;
    let owner = format!("bench-{}", common::suffix());
    let t0 = Instant::now();
    insert_rows(&server, &owner).await?;
    let inserted = t0.elapsed();
    let server = server.launch()?;
    let rss_start = server.rss_kib()?;
    let base = server.url();
    let token = make_user(http, &base, &owner).await?;
    let rss_logins = server.rss_kib()?;
    let url = format!("{base}/api/v1/workloads?limit=50");
    let (cursors, rows, walk50) = walk(http, &url, &token).await?;
    ensure!(rows == ROWS, "the pages hold {rows} workloads, not {ROWS}");
    let mut times = Vec::with_capacity(LIST_REQUESTS);
    let mut size = 0;
    for i in 0..LIST_REQUESTS {
        // the first page, then pages all through the list (keyset pages cost the same anywhere)
        let page_url = match i % (cursors.len() + 1) {
            0 => url.clone(),
            n => format!("{url}&cursor={}", cursors[n - 1]),
        };
        let t = Instant::now();
        let body = http.get(&page_url).bearer_auth(&token).send().await?.error_for_status()?.bytes().await?;
        times.push(t.elapsed());
        size = body.len();
    }
    times.sort();
    let rss_after = server.rss_kib()?;
    // then the largest pages: 10 of 1000
    let (_, rows, walk1000) = walk(http, &format!("{base}/api/v1/workloads?limit=1000"), &token).await?;
    ensure!(rows == ROWS, "the pages of 1000 hold {rows} workloads, not {ROWS}");
    let rss_large = server.rss_kib()?;
    println!("\n2. GET /api/v1/workloads?limit=50, {ROWS} workloads of one user");
    println!("   rows inserted with gpuhub_store::Store in                {}", ms(inserted));
    println!("   walk of all {} pages of 50 by cursor                    {}", cursors.len() + 1, ms(walk50));
    println!("   walk of all pages of 1000 by cursor                      {}", ms(walk1000));
    println!("   {LIST_REQUESTS} sequential requests over those pages:");
    println!("   p50                                                      {}", ms(percentile(&times, 50.0)));
    println!("   p99                                                      {}", ms(percentile(&times, 99.0)));
    println!("   max                                                      {}", ms(times[times.len() - 1]));
    println!(
        "   response size (one page)                                 {size} bytes ({:.1} KiB)",
        size as f64 / 1024.0
    );
    println!("\n3. server resident memory (VmRSS), {ROWS} workloads in the database");
    println!(
        "   idle after start                                         {rss_start} KiB ({:.1} MiB)",
        rss_start as f64 / 1024.0
    );
    println!(
        "   after the logins (argon2id hashes), before any list      {rss_logins} KiB ({:.1} MiB)",
        rss_logins as f64 / 1024.0
    );
    println!(
        "   after the walk of 50s and {LIST_REQUESTS} requests of 50          {rss_after} KiB ({:.1} MiB)",
        rss_after as f64 / 1024.0
    );
    println!(
        "   after one more walk in pages of 1000                     {rss_large} KiB ({:.1} MiB)",
        rss_large as f64 / 1024.0
    );
    Ok(())
}

/// `ROWS` stopped jobs of `owner`, written straight into the server's SQLite file before it starts.
async fn insert_rows(server: &Server, owner: &str) -> Result<()> {
    let url = format!("sqlite://{}", server.data_dir.join("gpuhub.db").display());
    let store = gpuhub_store::Store::open(&url).await?;
    let now = Utc::now();
    for i in 0..ROWS {
        let at = now - ChronoDuration::seconds((ROWS - i) as i64);
        let mut w = Workload::new(
            uuid::Uuid::new_v4().simple().to_string(),
            owner,
            format!("w-{i:05}"),
            WorkloadKind::Job,
            format!("{IMAGE}:latest"),
            at,
        )
        .restore(WorkloadState::Stopped);
        w.command = vec!["sh".into(), "-c".into(), "python train.py --epochs 10".into()];
        w.env = [("SEED".to_owned(), i.to_string())].into();
        w.resources = Resources { cpu_milli: CpuMilli(1000), memory: Bytes(1 << 30), gpus: 1, ..Resources::default() };
        w.exit_code = Some(143);
        w.message = Some("stopped".into());
        w.started_at = Some(at);
        w.finished_at = Some(at + ChronoDuration::seconds(1));
        store.insert_workload(&w).await?;
    }
    store.close().await;
    Ok(())
}
