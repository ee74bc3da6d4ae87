//! Portal benchmark (issues 9 and 23): the server time of every portal page at 10,000 workloads. The server runs
//! in-process on the recording fake engine (one large node) with its own monitor idle; one user submits
//! 10,000 jobs through the API (they run on the fake and stay running); then, with that user's browser
//! session, `GET /workloads` (the first page: 200 rows, rendered on the server), the same page's live
//! part (`?fragment=live`, what the page's script fetches on every change), a later page (`?cursor=`),
//! an admin's `?all=true`, then every other page a user or an admin opens (a workload's page, its live
//! part and chart, nodes, usage, queues, the new-workload form, images, account, the admin's pages);
//! p50/p99 over `REQUESTS` page loads each, sequential, over loopback, and each page's size. It prints
//! figures and asserts no times.
//!
//! `cargo bench -p gpuhub --bench portal` runs it (release); `GPUHUB_PORTAL_BENCH_WORKLOADS` changes the
//! 10,000. Without `--bench` it does nothing.

use anyhow::{Context as _, Result, bail};
use gpuhub_core::node::NodeCapacity;
use gpuhub_core::quantity::GIB;
use gpuhub_core::{Bytes, CpuMilli};
use gpuhub_driver::fake::FakeEngine;
use serde_json::{Value, json};
use std::sync::Arc;
use std::time::{Duration, Instant};

const REQUESTS: usize = 200;
const ADMIN_PASSWORD: &str = "portal-admin-password";

fn main() -> Result<()> {
    if !std::env::args().any(|a| a == "--bench") {
        println!("portal: run with `cargo bench -p gpuhub --bench portal`");
        return Ok(());
    }
    let n = match std::env::var("GPUHUB_PORTAL_BENCH_WORKLOADS") {
        Ok(n) => n.parse().context("GPUHUB_PORTAL_BENCH_WORKLOADS")?,
        Err(_) => 10_000,
    };
    tokio::runtime::Builder::new_multi_thread().enable_all().build()?.block_on(bench(n))
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    sorted[((sorted.len() as f64 * p).ceil() as usize).clamp(1, sorted.len()) - 1]
}

async fn bench(n: usize) -> Result<()> {
    let dir = tempfile::tempdir()?;
    let node =
        NodeCapacity::uniform("bench", CpuMilli(100_000_000), Bytes(1 << 50), 8, "H100", Bytes(80 * GIB), "GPU-");
    let engine = Arc::new(FakeEngine::new().with_nodes(vec![node]));
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
    config.monitor.interval_secs = 365 * 86_400;
    let server = gpuhub_server::start(config, engine.clone()).await?;
    let base = format!("http://{}", server.addr);
    let http = reqwest::Client::builder().redirect(reqwest::redirect::Policy::none()).build()?;
    let (admin, admin_cookie) = login(&http, &base, "admin", ADMIN_PASSWORD).await?;
    let body = json!({"username": "bench", "password": "bench-password"});
    let r = http.post(format!("{base}/api/v1/users")).bearer_auth(&admin).json(&body).send().await?;
    if !r.status().is_success() {
        bail!("create user: {}", r.status());
    }
    let (token, cookie) = login(&http, &base, "bench", "bench-password").await?;
    let t = Instant::now();
    for i in 0..n {
        let body = json!({"name": format!("w{i}"), "kind": "job", "image": "busybox:latest",
            "command": ["sleep", "infinity"], "resources": {"cpus": 0.1, "memory": "64MiB", "gpus": 0}});
        let r = http.post(format!("{base}/api/v1/workloads")).bearer_auth(&token).json(&body).send().await?;
        if r.status() != reqwest::StatusCode::CREATED {
            bail!("submit w{i}: {} {}", r.status(), r.text().await?);
        }
    }
    println!("portal: {n} workloads submitted in {:.1} s", t.elapsed().as_secs_f64());
    // the first page holds the oldest; let the controller start them, as a real list would show
    let store = server.state.store.clone();
    let t = Instant::now();
    loop {
        let running: u64 = store
            .count_active_workloads()
            .await?
            .iter()
            .filter(|c| c.state == gpuhub_core::workload::WorkloadState::Running)
            .map(|c| c.count)
            .sum();
        // at most 3 minutes: the pages are timed at what the store holds, started or not
        if running as usize >= n || t.elapsed() > Duration::from_secs(180) {
            println!("portal: {running} running after {:.1} s", t.elapsed().as_secs_f64());
            break;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    // the controller's share of the wait: its scheduling passes (the rest is the starts themselves)
    let metrics = http.get(format!("{base}/metrics")).bearer_auth(&admin).send().await?.text().await?;
    let sample =
        |name: &str| metrics.lines().find_map(|l| l.strip_prefix(name)?.trim().parse::<f64>().ok()).unwrap_or_default();
    println!(
        "portal: {} scheduling passes, {:.1} s in all",
        sample("gpuhub_scheduler_pass_seconds_count"),
        sample("gpuhub_scheduler_pass_seconds_sum")
    );
    reads(&store).await?;
    let first = page(&http, &format!("{base}/workloads"), &cookie).await?;
    let next = first
        .split("href=\"/workloads?cursor=")
        .nth(1)
        .and_then(|s| s.split('"').next())
        .map(|c| format!("{base}/workloads?cursor={c}"))
        .context("the first page links to a next one")?;
    let rows = first.matches("<tr data-name=").count();
    println!("portal: the first page lists {rows} rows, {} bytes", first.len());
    // every page of the portal a user or an admin opens, at n workloads: the lists, one workload's page
    // with its live part and chart, the nodes, usage, queues, the new-workload form with its cards, images,
    // the account, and the admin's pages
    let one = format!("w{}", n / 2);
    let mut pages = vec![
        ("GET /workloads (first page)", format!("{base}/workloads"), &cookie),
        ("GET /workloads?fragment=live", format!("{base}/workloads?fragment=live"), &cookie),
        ("GET /workloads?cursor= (2nd page)", next, &cookie),
        ("GET /workloads?all=true (admin)", format!("{base}/workloads?all=true"), &admin_cookie),
    ];
    for (what, path, cookie) in [
        ("GET /workloads/NAME", format!("/workloads/{one}"), &cookie),
        ("GET /workloads/NAME?fragment=live", format!("/workloads/{one}?fragment=live"), &cookie),
        ("GET /workloads/NAME/chart", format!("/workloads/{one}/chart"), &cookie),
        ("GET /nodes", "/nodes".to_owned(), &cookie),
        ("GET /nodes/NODE", "/nodes/bench".to_owned(), &cookie),
        ("GET /usage", "/usage".to_owned(), &cookie),
        ("GET /usage (admin, everyone)", "/usage".to_owned(), &admin_cookie),
        ("GET /queues", "/queues".to_owned(), &cookie),
        ("GET /new", "/new".to_owned(), &cookie),
        ("GET /images", "/images".to_owned(), &cookie),
        ("GET /account", "/account".to_owned(), &cookie),
        ("GET /admin/dashboard", "/admin/dashboard".to_owned(), &admin_cookie),
        ("GET /admin/users", "/admin/users".to_owned(), &admin_cookie),
        ("GET /admin/images", "/admin/images".to_owned(), &admin_cookie),
        ("GET /queues (admin: settings, reservations)", "/queues".to_owned(), &admin_cookie),
    ] {
        pages.push((what, format!("{base}{path}"), cookie));
    }
    let mut worst: Option<(&str, Duration)> = None;
    for (what, url, cookie) in pages {
        let mut times = Vec::with_capacity(REQUESTS);
        let mut bytes = 0;
        for _ in 0..REQUESTS {
            let t = Instant::now();
            bytes = page(&http, &url, cookie).await?.len();
            times.push(t.elapsed());
        }
        times.sort();
        let p99 = percentile(&times, 0.99);
        if worst.is_none_or(|(_, w)| p99 > w) {
            worst = Some((what, p99));
        }
        println!(
            "   {what:<44} p50 {:>7.2} ms  p99 {:>7.2} ms  {:>7} bytes",
            percentile(&times, 0.5).as_secs_f64() * 1e3,
            p99.as_secs_f64() * 1e3,
            bytes
        );
    }
    if let Some((what, p99)) = worst {
        println!("portal: the slowest page at the 99th percentile: {what}, {:.2} ms", p99.as_secs_f64() * 1e3);
    }
    server.shutdown().await;
    Ok(())
}

/// What the slow pages read from the store, each timed alone (the median of 20): the profile behind
/// the pages' figures.
async fn reads(store: &gpuhub_store::Store) -> Result<()> {
    use gpuhub_core::workload::WorkloadState as S;
    use gpuhub_store::WorkloadFilter;
    let now = chrono::Utc::now();
    let (day, week) = (now - chrono::TimeDelta::days(1), now - chrono::TimeDelta::days(7));
    let filter = |states: &[S]| WorkloadFilter { owner: None, states: Some(states.to_vec()) };
    let active = filter(&[S::Pulling, S::Queued, S::Starting, S::Running]);
    let (running, ended) = (filter(&[S::Running]), filter(&[S::Stopped, S::Failed, S::Queued]));
    macro_rules! time {
        ($what:expr, $read:expr) => {{
            let mut times = Vec::new();
            let mut n = 0;
            for _ in 0..20 {
                let t = Instant::now();
                n = $read.await?.len();
                times.push(t.elapsed());
            }
            times.sort();
            println!("   read {:<44} {:>7.2} ms  {n} rows", $what, percentile(&times, 0.5).as_secs_f64() * 1e3);
        }};
    }
    time!("list_workloads (pulling, queued, starting, running)", store.list_workloads(&active));
    time!("list_workloads (running)", store.list_workloads(&running));
    time!("list_workloads (stopped, failed, queued)", store.list_workloads(&ended));
    time!("holdings (the last week, one user)", store.holdings(week, now, Some("bench")));
    time!("holdings (the last day, everyone)", store.holdings(day, now, None));
    time!("measured (the last week)", store.measured(week, now, None));
    time!("state_changes (the last day)", store.state_changes(day, now));
    time!("list_queues", store.list_queues());
    time!("list_images", store.list_images());
    time!("list_datasets", store.list_datasets());
    time!("list_reservations", store.list_reservations(now));
    Ok(())
}

/// A page as a browser loads it with `cookie`; its HTML.
async fn page(http: &reqwest::Client, url: &str, cookie: &str) -> Result<String> {
    let r = http.get(url).header("cookie", cookie).header("sec-fetch-mode", "navigate").send().await?;
    let status = r.status();
    let text = r.text().await?;
    if !status.is_success() {
        bail!("GET {url}: {status} {text}");
    }
    Ok(text)
}

/// Logs in: the API token and the session cookie.
async fn login(http: &reqwest::Client, base: &str, user: &str, password: &str) -> Result<(String, String)> {
    let r = http.post(format!("{base}/api/v1/login")).json(&json!({"username": user, "password": password}));
    let r = r.send().await?;
    let cookie = r
        .headers()
        .get("set-cookie")
        .and_then(|v| v.to_str().ok())
        .and_then(|c| c.split(';').next())
        .context("no session cookie")?
        .to_owned();
    let v: Value = r.json().await?;
    Ok((v["token"].as_str().context("no token")?.to_owned(), cookie))
}
