//! Load benchmark (issue 12): 1,000 concurrent API clients against one server on loopback, with the
//! recording fake runtime (the `gpuhub` binary drives Docker only, so the server runs in a child
//! process of this benchmark: `load --serve-fake DIR`, which is `gpuhub_server::start` with
//! `FakeRuntime`; its memory is the server's alone). It prints figures and asserts no times.
//!
//! 1. submit: 1,000 clients (tokio tasks, one HTTP client and connection each) of 100 users submit 10
//!    jobs each: 10,000 workloads. The fake's containers print a line and exit soon after they start.
//! 2. mix: each client then runs `ROUNDS` rounds of: list its owner's workloads (`?limit=50`, following
//!    `X-Next-Cursor` for up to 4 pages), inspect one of its workloads, and read its `logs?follow=true`
//!    to the end.
//!
//! Reported: p50/p99/max per operation, errors (anything but 2xx or a transport error; must be 0),
//! and the server's `VmRSS` before, peak (sampled every 50 ms) and after.
//! `cargo bench -p gpuhub --bench load` runs it (release). Without `--bench` it does nothing.

use anyhow::{Context as _, Result, bail};
use gpuhub_core::node::NodeCapacity;
use gpuhub_core::{Bytes, CpuMilli};
use gpuhub_driver::fake::FakeEngine;
use serde_json::{Value, json};
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

const CLIENTS: usize = 1000;
const USERS: usize = 100;
const PER_CLIENT: usize = 10;
const ROUNDS: usize = 5;
const ADMIN_PASSWORD: &str = "load-admin-password";

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().collect();
    if let Some(i) = args.iter().position(|a| a == "--serve-fake") {
        let dir = args.get(i + 1).context("--serve-fake DIR")?;
        return tokio::runtime::Runtime::new()?.block_on(serve_fake(dir.into()));
    }
    if !args.iter().any(|a| a == "--bench") {
        println!("load: run with `cargo bench -p gpuhub --bench load`");
        return Ok(());
    }
    let nofile = std::fs::read_to_string("/proc/self/limits")?
        .lines()
        .find(|l| l.starts_with("Max open files"))
        .and_then(|l| l.split_whitespace().nth(3)?.parse::<u64>().ok())
        .unwrap_or(0);
    if nofile < 4 * CLIENTS as u64 {
        bail!("the open-files limit is {nofile}; raise it (ulimit -n 8192) for {CLIENTS} connections");
    }
    tokio::runtime::Runtime::new()?.block_on(bench())
}

/// The server: in-process `gpuhub_server::start` with the fake runtime, printing its address; containers
/// write a line and exit shortly after they start. Runs until stdin closes.
async fn serve_fake(dir: std::path::PathBuf) -> Result<()> {
    let node = NodeCapacity::cpu_only("load", CpuMilli(100_000_000), Bytes(1 << 50));
    let runtime = Arc::new(FakeEngine::new().with_nodes(vec![node]));
    runtime.add_image("busybox:latest");
    let mut config = gpuhub_server::config::Config {
        listen: "127.0.0.1:0".parse()?,
        ssh_listen: "127.0.0.1:0".parse()?,
        data_dir: dir,
        admin_password: Some(ADMIN_PASSWORD.into()),
        allow_any_image: true,
        ..Default::default()
    };
    config.limits.max_workloads_per_user = 1_000_000;
    config.limits.max_queued_per_user = 1_000_000;
    let server = gpuhub_server::start(config, runtime.clone()).await?;
    println!("listening {}", server.addr);
    let finisher = tokio::spawn(async move {
        loop {
            tokio::time::sleep(Duration::from_millis(20)).await;
            for id in runtime.running() {
                runtime.push_log(&id, "hello from the fake\n");
                runtime.exit(&id, 0);
            }
        }
    });
    tokio::task::spawn_blocking(|| {
        let mut s = String::new();
        while std::io::stdin().read_line(&mut s).is_ok_and(|n| n > 0) {}
    })
    .await?;
    finisher.abort();
    server.shutdown().await;
    Ok(())
}

fn rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| s.lines().find(|l| l.starts_with("VmRSS:"))?.split_whitespace().nth(1)?.parse().ok())
        .unwrap_or(0)
}

struct Stats {
    name: &'static str,
    micros: Vec<u64>,
}

impl Stats {
    fn print(&mut self) {
        self.micros.sort_unstable();
        let n = self.micros.len();
        let at = |q: f64| self.micros[((n as f64 * q) as usize).min(n - 1)] as f64 / 1000.0;
        println!(
            "  {:<10} n={n:>6}  p50 {:>8.2} ms  p99 {:>8.2} ms  max {:>8.2} ms",
            self.name,
            at(0.5),
            at(0.99),
            *self.micros.last().unwrap() as f64 / 1000.0
        );
    }
}

async fn timed<F: std::future::Future<Output = Result<T>>, T>(out: &mut Vec<u64>, f: F) -> Result<T> {
    let t = Instant::now();
    let r = f.await;
    out.push(t.elapsed().as_micros() as u64);
    r
}

async fn ok_json(resp: reqwest::Response) -> Result<(Value, Option<String>)> {
    let status = resp.status();
    let cursor = resp.headers().get("x-next-cursor").and_then(|v| v.to_str().ok()).map(str::to_owned);
    let text = resp.text().await?;
    if !status.is_success() {
        bail!("{status}: {text}");
    }
    Ok((serde_json::from_str(&text)?, cursor))
}

async fn bench() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let mut child: Child = Command::new(std::env::current_exe()?)
        .arg("--serve-fake")
        .arg(dir.path().join("data"))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()?;
    let pid = child.id();
    let mut out = BufReader::new(child.stdout.take().context("stdout")?);
    let mut line = String::new();
    while !line.starts_with("listening ") {
        line.clear();
        if out.read_line(&mut line)? == 0 {
            bail!("the server exited before it listened");
        }
    }
    let base = format!("http://{}", line.trim_start_matches("listening ").trim());
    println!("gpuhub load benchmark: server pid {pid} at {base} (fake runtime), {CLIENTS} clients, {USERS} users");
    let rss_before = rss_kib(pid);
    let peak = Arc::new(AtomicU64::new(rss_before));
    let stop = Arc::new(AtomicBool::new(false));
    let sampler = {
        let (peak, stop) = (peak.clone(), stop.clone());
        tokio::spawn(async move {
            while !stop.load(Ordering::Relaxed) {
                peak.fetch_max(rss_kib(pid), Ordering::Relaxed);
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        })
    };

    // users and their tokens
    let http = reqwest::Client::new();
    let admin = login(&http, &base, "admin", ADMIN_PASSWORD).await?;
    let mut tokens = Vec::new();
    for u in 0..USERS {
        let name = format!("user{u}");
        ok_json(
            http.post(format!("{base}/api/v1/users"))
                .bearer_auth(&admin)
                .json(&json!({"username": name, "password": format!("{name}-password")}))
                .send()
                .await?,
        )
        .await?;
        tokens.push(login(&http, &base, &name, &format!("{name}-password")).await?);
    }

    let started = Instant::now();
    let mut tasks = Vec::new();
    for c in 0..CLIENTS {
        let (base, token) = (base.clone(), tokens[c % USERS].clone());
        tasks.push(tokio::spawn(async move { client(c, &base, &token).await }));
    }
    let (mut submit, mut list, mut inspect, mut logs) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let mut errors = Vec::new();
    for t in tasks {
        let r = t.await?;
        submit.extend(r.submit);
        list.extend(r.list);
        inspect.extend(r.inspect);
        logs.extend(r.logs);
        errors.extend(r.errors);
    }
    let elapsed = started.elapsed();
    stop.store(true, Ordering::Relaxed);
    sampler.await?;
    let rss_after = rss_kib(pid);
    let requests = submit.len() + list.len() + inspect.len() + logs.len();
    println!(
        "  {requests} requests in {:.1} s ({:.0}/s), errors: {}",
        elapsed.as_secs_f64(),
        requests as f64 / elapsed.as_secs_f64(),
        errors.len()
    );
    for mut s in [
        Stats { name: "submit", micros: submit },
        Stats { name: "list", micros: list },
        Stats { name: "inspect", micros: inspect },
        Stats { name: "logs", micros: logs },
    ] {
        s.print();
    }
    println!(
        "  server VmRSS: before {} MiB, peak {} MiB, after {} MiB",
        rss_before / 1024,
        peak.load(Ordering::Relaxed) / 1024,
        rss_after / 1024
    );
    for e in errors.iter().take(10) {
        println!("  error: {e}");
    }
    drop(child.stdin.take());
    child.wait()?;
    if !errors.is_empty() {
        bail!("{} errors", errors.len());
    }
    Ok(())
}

async fn login(http: &reqwest::Client, base: &str, user: &str, password: &str) -> Result<String> {
    let (v, _) = ok_json(
        http.post(format!("{base}/api/v1/login")).json(&json!({"username": user, "password": password})).send().await?,
    )
    .await?;
    Ok(v["token"].as_str().context("no token")?.to_owned())
}

#[derive(Default)]
struct ClientResult {
    submit: Vec<u64>,
    list: Vec<u64>,
    inspect: Vec<u64>,
    logs: Vec<u64>,
    errors: Vec<String>,
}

/// One client: its own connection; submits, then rounds of list / inspect / logs.
async fn client(c: usize, base: &str, token: &str) -> ClientResult {
    let http = reqwest::Client::builder().pool_max_idle_per_host(1).build().expect("client");
    let mut r = ClientResult::default();
    let mut names = Vec::new();
    for j in 0..PER_CLIENT {
        let name = format!("c{c}-{j}");
        let body = json!({"name": name, "kind": "job", "image": "busybox:latest", "command": ["true"],
            "resources": {"cpus": 0.01, "memory": "8MiB"}});
        match timed(&mut r.submit, async {
            ok_json(http.post(format!("{base}/api/v1/workloads")).bearer_auth(token).json(&body).send().await?).await
        })
        .await
        {
            Ok(_) => names.push(name),
            Err(e) => r.errors.push(format!("submit {name}: {e:#}")),
        }
    }
    for round in 0..ROUNDS {
        let mut cursor: Option<String> = None;
        for _ in 0..4 {
            let url = match &cursor {
                Some(cur) => format!("{base}/api/v1/workloads?limit=50&cursor={cur}"),
                None => format!("{base}/api/v1/workloads?limit=50"),
            };
            match timed(&mut r.list, async { ok_json(http.get(&url).bearer_auth(token).send().await?).await }).await {
                Ok((_, next)) => cursor = next,
                Err(e) => {
                    r.errors.push(format!("list: {e:#}"));
                    break;
                }
            }
            if cursor.is_none() {
                break;
            }
        }
        let Some(name) = names.get(round % names.len().max(1)) else { continue };
        if let Err(e) = timed(&mut r.inspect, async {
            ok_json(http.get(format!("{base}/api/v1/workloads/{name}")).bearer_auth(token).send().await?).await
        })
        .await
        {
            r.errors.push(format!("inspect {name}: {e:#}"));
        }
        let logs = timed(&mut r.logs, async {
            let resp =
                http.get(format!("{base}/api/v1/workloads/{name}/logs?follow=true")).bearer_auth(token).send().await?;
            let status = resp.status();
            let text = resp.text().await?;
            if !status.is_success() {
                bail!("{status}: {text}");
            }
            Ok(text)
        });
        if let Err(e) =
            tokio::time::timeout(Duration::from_secs(120), logs).await.map_err(anyhow::Error::from).and_then(|r| r)
        {
            r.errors.push(format!("logs {name}: {e:#}"));
        }
    }
    r
}
