//! Load and soak benchmark (issues 12 and 27): 1,000 concurrent clients against one server on loopback,
//! with the recording fake runtime (the `gpuhub` binary drives real engines only, so the server runs in
//! a child process of this benchmark: `load --serve-fake DIR`, which is `gpuhub_server::start` with
//! `FakeEngine`, on mimalloc as `gpuhub serve` is; its memory is the server's and the fake engine's, whose
//! runs it prints at each phase's end). It prints figures and asserts no times.
//!
//! 1. submit: 1,000 clients (tokio tasks, one HTTP client each) of 100 users submit `FIRST` jobs each.
//!    The fake's containers print a line and exit soon after they start.
//! 2. mix: each client then runs `ROUNDS` rounds, each with the portal's live updates open (`GET
//!    /events`, server-sent events, as the workload pages keep it) while it: submits one more job (10,000
//!    workloads in all), lists its owner's workloads through the API (`?limit=50`, following
//!    `X-Next-Cursor` for up to 4 pages), inspects one, reads its `logs?follow=true` (to the end when it
//!    has ended; else its answer's head is timed, and its stream read for a second: the scheduler may
//!    still be working through the queue), and loads the portal's workload list, its live fragment
//!    (`?fragment=live`) and the workload's page.
//! 3. soak (issue 27): `GPUHUB_LOAD_BENCH_SOAK` (50,000 unless set; 0 skips it) varied requests from 64
//!    clients: API reads, bad input (unknown fields, broken JSON, bad names), failed logins of ever new
//!    names from ever new addresses (through a trusted proxy's `X-Forwarded-For`), portal pages, live
//!    updates opened and dropped, app paths of workloads that do not exist, `/metrics`, submissions and
//!    deletions. The server's RSS is printed every minute and every 10,000 requests, its warmed-up size
//!    (after the first 10,000) and its size once the load has ended and the server idled for 10 s.
//!
//! Every answer is classed: 2xx, overload (429 or 503 with `Retry-After`: the client waits and retries,
//! at most 5 times), another 4xx (expected in the soak only), 5xx, a transport error, or a hang (no
//! answer within 60 s). Reported: p50/p99/max per route, those counts, and the server's `VmRSS`.
//! `cargo bench -p gpuhub --bench load` runs it (release). Without `--bench` it does nothing. It raises
//! its own open-files limit (`prlimit`), which the server it starts inherits.

use anyhow::{Context as _, Result, bail};
use gpuhub_core::node::NodeCapacity;
use gpuhub_core::{Bytes, CpuMilli};
use gpuhub_driver::Engine as _;
use gpuhub_driver::fake::FakeEngine;
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::io::Write as _;
use std::io::{BufRead, BufReader};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The allocator `gpuhub serve` runs on, so that the server measured here is the one people run (on
/// glibc's malloc, the default here, it kept growing one arena per thread).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

const CLIENTS: usize = 1000;
const USERS: usize = 100;
const FIRST: usize = 5;
const ROUNDS: usize = 5;
const SOAK_CLIENTS: usize = 64;
const ADMIN_PASSWORD: &str = "load-admin-password";
/// One answer waited for at most this long; longer is a hang.
const HANG: Duration = Duration::from_secs(60);

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
    let soak = match std::env::var("GPUHUB_LOAD_BENCH_SOAK") {
        Ok(n) => n.parse().context("GPUHUB_LOAD_BENCH_SOAK")?,
        Err(_) => 50_000,
    };
    raise_nofile(8 * CLIENTS as u64)?;
    tokio::runtime::Runtime::new()?.block_on(bench(soak))
}

/// The open-files soft limit of this process (and so of the server it starts), raised to `want` where
/// the hard limit allows.
fn raise_nofile(want: u64) -> Result<()> {
    let limit = |which: usize| -> u64 {
        std::fs::read_to_string("/proc/self/limits")
            .ok()
            .and_then(|s| {
                let l = s.lines().find(|l| l.starts_with("Max open files"))?.to_owned();
                let v = l.split_whitespace().nth(which)?;
                Some(if v == "unlimited" { u64::MAX } else { v.parse().ok()? })
            })
            .unwrap_or(0)
    };
    let (soft, hard) = (limit(3), limit(4));
    if soft < want {
        let to = want.min(hard);
        let pid = std::process::id().to_string();
        let out = Command::new("prlimit").args(["--pid", &pid, &format!("--nofile={to}:")]).output();
        if let Err(e) = out {
            println!("load: cannot run prlimit ({e}); the open-files limit stays {soft}");
        }
    }
    let now = limit(3);
    if now < 4 * CLIENTS as u64 {
        bail!("the open-files limit is {now} (hard {hard}); raise it (ulimit -n 8192) for {CLIENTS} clients");
    }
    println!("load: open-files limit {now}");
    Ok(())
}

/// The server: in-process `gpuhub_server::start` with the fake runtime, printing its address; containers
/// write a line and exit shortly after they start. Loopback is a trusted proxy (the soak's failed logins
/// come from many addresses). Runs until stdin closes.
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
        trusted_proxies: vec!["127.0.0.1/32".into()],
        ..Default::default()
    };
    config.limits.max_workloads_per_user = 1_000_000;
    config.limits.max_queued_per_user = 1_000_000;
    let server = gpuhub_server::start(config, runtime.clone()).await?;
    println!("listening {}", server.addr);
    let engine = runtime.clone();
    let finisher = tokio::spawn(async move {
        loop {
            tokio::time::sleep(Duration::from_millis(20)).await;
            for id in runtime.running() {
                runtime.push_log(&id, "hello from the fake\n");
                runtime.exit(&id, 0);
            }
            // the recording fake keeps every call: without this its memory, not the server's, would grow
            runtime.forget_calls();
        }
    });
    // each line asks how many runs the fake engine holds (its memory is counted in this process's
    // RSS: the server's own is that less what the fake keeps, about a run's spec and output each)
    let handle = tokio::runtime::Handle::current();
    tokio::task::spawn_blocking(move || {
        let mut s = String::new();
        while std::io::stdin().read_line(&mut s).is_ok_and(|n| n > 0) {
            let runs = handle.block_on(engine.list_runs()).map(|r| r.len()).unwrap_or(0);
            println!("runs {runs}");
            s.clear();
        }
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

/// What the clients saw: latencies per route, and how answers were classed.
#[derive(Default)]
struct Record {
    micros: BTreeMap<&'static str, Vec<u64>>,
    ok: u64,
    overload: u64,
    client_errors: BTreeMap<u16, u64>,
    server_errors: Vec<String>,
    transport: Vec<String>,
    hangs: Vec<String>,
}

impl Record {
    fn merge(&mut self, o: Record) {
        for (k, v) in o.micros {
            self.micros.entry(k).or_default().extend(v);
        }
        self.ok += o.ok;
        self.overload += o.overload;
        for (k, v) in o.client_errors {
            *self.client_errors.entry(k).or_default() += v;
        }
        self.server_errors.extend(o.server_errors);
        self.transport.extend(o.transport);
        self.hangs.extend(o.hangs);
    }

    fn requests(&self) -> u64 {
        self.micros.values().map(|v| v.len() as u64).sum()
    }

    fn print(&mut self, expect_4xx: bool) {
        for (name, v) in &mut self.micros {
            v.sort_unstable();
            let n = v.len();
            let at = |q: f64| v[((n as f64 * q) as usize).min(n - 1)] as f64 / 1000.0;
            println!(
                "  {name:<14} n={n:>6}  p50 {:>8.2} ms  p99 {:>8.2} ms  max {:>8.2} ms",
                at(0.5),
                at(0.99),
                *v.last().unwrap() as f64 / 1000.0
            );
        }
        let c4: u64 = self.client_errors.values().sum();
        println!(
            "  answers: {} 2xx, {} overload (429/503 with Retry-After, retried), {c4} other 4xx {:?}, {} 5xx, \
             {} transport errors, {} hangs",
            self.ok,
            self.overload,
            self.client_errors,
            self.server_errors.len(),
            self.transport.len(),
            self.hangs.len()
        );
        let unexpected = if expect_4xx { Vec::new() } else { vec![format!("{c4} 4xx")] };
        for e in self.server_errors.iter().chain(&self.transport).chain(&self.hangs).chain(&unexpected).take(10) {
            println!("  error: {e}");
        }
    }

    fn failures(&self, expect_4xx: bool) -> usize {
        let c4 = if expect_4xx { 0 } else { self.client_errors.values().sum::<u64>() as usize };
        self.server_errors.len() + self.transport.len() + self.hangs.len() + c4
    }

    /// Sends what `make` builds (again after an overload answer, waiting its `Retry-After`), timing each
    /// try under `route`; the final status and body, or `None` when it never got a 2xx-4xx answer.
    async fn send(
        &mut self,
        route: &'static str,
        make: impl Fn() -> reqwest::RequestBuilder,
    ) -> Option<(reqwest::StatusCode, reqwest::header::HeaderMap, String)> {
        for _ in 0..6 {
            let t = Instant::now();
            let answer = tokio::time::timeout(HANG, async {
                let r = make().send().await?;
                let (status, headers) = (r.status(), r.headers().clone());
                Ok::<_, reqwest::Error>((status, headers, r.text().await?))
            })
            .await;
            self.micros.entry(route).or_default().push(t.elapsed().as_micros() as u64);
            let (status, headers, body) = match answer {
                Err(_) => {
                    self.hangs.push(format!("{route}: no answer within {HANG:?}"));
                    return None;
                }
                Ok(Err(e)) => {
                    self.transport.push(format!("{route}: {e}"));
                    return None;
                }
                Ok(Ok(a)) => a,
            };
            let retry = headers.get("retry-after").and_then(|v| v.to_str().ok()?.parse::<u64>().ok());
            match status.as_u16() {
                429 | 503 if retry.is_some() => {
                    self.overload += 1;
                    tokio::time::sleep(Duration::from_secs(retry.unwrap_or(1).min(10))).await;
                    continue;
                }
                _ if status.is_success() => self.ok += 1,
                _ if status.is_server_error() => {
                    self.server_errors
                        .push(format!("{route}: {status} {}", body.chars().take(200).collect::<String>()));
                    return None;
                }
                s => *self.client_errors.entry(s).or_default() += 1,
            }
            return Some((status, headers, body));
        }
        self.server_errors.push(format!("{route}: still overloaded after 6 tries"));
        None
    }
}

/// Samples the server's RSS every second: the peak, and a line every minute while `print` is set.
struct Rss {
    pid: u32,
    peak: Arc<AtomicU64>,
    stop: Arc<AtomicBool>,
    task: tokio::task::JoinHandle<()>,
}

impl Rss {
    fn start(pid: u32, print: bool, started: Instant) -> Self {
        let (peak, stop) = (Arc::new(AtomicU64::new(rss_kib(pid))), Arc::new(AtomicBool::new(false)));
        let task = {
            let (peak, stop) = (peak.clone(), stop.clone());
            tokio::spawn(async move {
                let mut next_print = Duration::from_secs(60);
                while !stop.load(Ordering::Relaxed) {
                    let now = rss_kib(pid);
                    peak.fetch_max(now, Ordering::Relaxed);
                    if print && started.elapsed() >= next_print {
                        println!("  soak: {:>4.0} s: server VmRSS {} MiB", started.elapsed().as_secs_f64(), now / 1024);
                        next_print += Duration::from_secs(60);
                    }
                    tokio::time::sleep(Duration::from_millis(250)).await;
                }
            })
        };
        Self { pid, peak, stop, task }
    }

    async fn finish(self) -> u64 {
        self.stop.store(true, Ordering::Relaxed);
        let _ = self.task.await;
        self.peak.load(Ordering::Relaxed).max(rss_kib(self.pid))
    }
}

struct Account {
    name: String,
    token: String,
    cookie: String,
}

/// The server child's stdin and stdout: it answers each line with how many runs its fake engine holds.
struct Server {
    stdin: ChildStdin,
    out: BufReader<ChildStdout>,
}

impl Server {
    /// How many runs the fake engine holds now (0 when the server does not answer).
    fn runs(&mut self) -> u64 {
        let mut line = String::new();
        if writeln!(self.stdin, "runs").is_err() || self.out.read_line(&mut line).is_err() {
            return 0;
        }
        line.trim().strip_prefix("runs ").and_then(|n| n.parse().ok()).unwrap_or(0)
    }
}

/// The RSS line printed at a phase's end: the server's size and the runs its fake engine holds then.
fn memory(pid: u32, server: &Mutex<Server>) -> String {
    let runs = server.lock().unwrap().runs();
    format!("server VmRSS {} MiB (the fake engine in it holds {runs} runs)", rss_kib(pid) / 1024)
}

async fn bench(soak: usize) -> Result<()> {
    let dir = tempfile::tempdir()?;
    let mut child: Child = Command::new(std::env::current_exe()?)
        .arg("--serve-fake")
        .arg(dir.path().join("data"))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()?;
    let mut out = BufReader::new(child.stdout.take().context("stdout")?);
    let mut line = String::new();
    while !line.starts_with("listening ") {
        line.clear();
        if out.read_line(&mut line)? == 0 {
            bail!("the server exited before it listened");
        }
    }
    let base = format!("http://{}", line.trim_start_matches("listening ").trim());
    let pid = child.id();
    let server = Arc::new(Mutex::new(Server { stdin: child.stdin.take().context("stdin")?, out }));
    println!("gpuhub load benchmark: server pid {pid} at {base} (fake runtime), {CLIENTS} clients, {USERS} users");
    let rss_before = rss_kib(pid);

    let http = reqwest::Client::new();
    let admin = login(&http, &base, "admin", ADMIN_PASSWORD).await?;
    let mut accounts = Vec::new();
    for u in 0..USERS {
        let name = format!("user{u}");
        let r = http
            .post(format!("{base}/api/v1/users"))
            .bearer_auth(&admin.token)
            .json(&json!({"username": name, "password": format!("{name}-password")}))
            .send()
            .await?;
        if !r.status().is_success() {
            bail!("create {name}: {} {}", r.status(), r.text().await?);
        }
        accounts.push(Arc::new(login(&http, &base, &name, &format!("{name}-password")).await?));
    }

    let started = Instant::now();
    let rss = Rss::start(pid, false, started);
    let mut tasks = Vec::new();
    for c in 0..CLIENTS {
        let (base, account) = (base.clone(), accounts[c % USERS].clone());
        tasks.push(tokio::spawn(async move { client(c, &base, &account).await }));
    }
    let mut rec = Record::default();
    let mut events = 0;
    for t in tasks {
        let (r, e) = t.await?;
        rec.merge(r);
        events += e;
    }
    let elapsed = started.elapsed();
    let peak = rss.finish().await;
    let rss_after = rss_kib(pid);
    println!(
        "  {} requests in {:.1} s ({:.0}/s); {events} live updates received",
        rec.requests(),
        elapsed.as_secs_f64(),
        rec.requests() as f64 / elapsed.as_secs_f64(),
    );
    rec.print(false);
    println!(
        "  server VmRSS: before {} MiB, peak {} MiB, after {} MiB; now {}",
        rss_before / 1024,
        peak / 1024,
        rss_after / 1024,
        memory(pid, &server)
    );
    println!("  workloads by state: {}", states(&http, &base).await);
    let mut failures = rec.failures(false);
    if soak > 0 {
        failures += soak_phase(pid, &server, &base, &accounts, soak).await?;
    }
    drop(server);
    child.wait()?;
    if failures > 0 {
        bail!("{failures} failures");
    }
    Ok(())
}

async fn login(http: &reqwest::Client, base: &str, user: &str, password: &str) -> Result<Account> {
    let r = http.post(format!("{base}/api/v1/login")).json(&json!({"username": user, "password": password}));
    let r = r.send().await?;
    let cookie = r
        .headers()
        .get("set-cookie")
        .and_then(|v| v.to_str().ok())
        .and_then(|c| c.split(';').next())
        .context("no session cookie")?
        .to_owned();
    let status = r.status();
    let v: Value = r.json().await?;
    if !status.is_success() {
        bail!("login {user}: {status} {v}");
    }
    Ok(Account { name: user.to_owned(), token: v["token"].as_str().context("no token")?.to_owned(), cookie })
}

fn job(name: &str) -> Value {
    json!({"name": name, "kind": "job", "image": "busybox:latest", "command": ["true"],
        "resources": {"cpus": 0.01, "memory": "8MiB"}})
}

/// Follows the logs of a workload that has not ended: the time to the answer's head, then up to a second
/// of its stream.
async fn follow_live(r: &mut Record, req: reqwest::RequestBuilder) {
    use futures::StreamExt as _;
    let t = Instant::now();
    let resp = match tokio::time::timeout(HANG, req.send()).await {
        Err(_) => return r.hangs.push(format!("api logs -f (live): no answer within {HANG:?}")),
        Ok(Err(e)) => return r.transport.push(format!("api logs -f (live): {e}")),
        Ok(Ok(resp)) => resp,
    };
    r.micros.entry("api logs -f (live)").or_default().push(t.elapsed().as_micros() as u64);
    let status = resp.status();
    if status.is_server_error() {
        return r.server_errors.push(format!("api logs -f (live): {status}"));
    }
    if !status.is_success() {
        return *r.client_errors.entry(status.as_u16()).or_default() += 1;
    }
    r.ok += 1;
    let mut body = resp.bytes_stream();
    let _ = tokio::time::timeout(Duration::from_secs(1), async { while body.next().await.is_some() {} }).await;
}

/// How many workloads are in each live state, from `/metrics` (`gpuhub_workloads`).
async fn states(http: &reqwest::Client, base: &str) -> String {
    let Ok(r) = http.get(format!("{base}/metrics")).send().await else { return "unknown".into() };
    let text = r.text().await.unwrap_or_default();
    let mut by: BTreeMap<String, f64> = BTreeMap::new();
    for l in text.lines().filter(|l| l.starts_with("gpuhub_workloads{")) {
        let state = l.split("state=\"").nth(1).and_then(|s| s.split('"').next()).unwrap_or("?");
        *by.entry(state.to_owned()).or_default() += l.rsplit(' ').next().and_then(|v| v.parse().ok()).unwrap_or(0.0);
    }
    format!("{by:?}")
}

/// Submits job `name`; its name once submitted.
async fn submit(r: &mut Record, http: &reqwest::Client, base: &str, token: &str, name: String) -> Option<String> {
    let (url, body) = (format!("{base}/api/v1/workloads"), job(&name));
    r.send("api submit", || http.post(&url).bearer_auth(token).json(&body)).await.map(|_| name)
}

/// Reads the portal's live updates until `stop`; how many `change` events came.
async fn live_updates(http: reqwest::Client, base: String, cookie: String, stop: Arc<AtomicBool>) -> Result<usize> {
    use futures::StreamExt as _;
    let r = http.get(format!("{base}/events")).header("cookie", cookie).send().await?;
    if !r.status().is_success() {
        bail!("GET /events: {}", r.status());
    }
    let mut body = r.bytes_stream();
    let mut seen = 0;
    while !stop.load(Ordering::Relaxed) {
        match tokio::time::timeout(Duration::from_millis(200), body.next()).await {
            Ok(Some(chunk)) => seen += String::from_utf8_lossy(&chunk?).matches("event: change").count(),
            Ok(None) => break,
            Err(_) => {}
        }
    }
    Ok(seen)
}

/// One client: submits, then rounds of live updates, submit, list, inspect, logs, portal pages.
async fn client(c: usize, base: &str, a: &Account) -> (Record, usize) {
    let http = reqwest::Client::builder().pool_max_idle_per_host(1).build().expect("client");
    let mut r = Record::default();
    let mut names = Vec::new();
    let (token, cookie) = (&a.token, &a.cookie);
    for j in 0..FIRST {
        if let Some(n) = submit(&mut r, &http, base, token, format!("c{c}-{j}")).await {
            names.push(n);
        }
    }
    let mut events = 0;
    for round in 0..ROUNDS {
        let stop = Arc::new(AtomicBool::new(false));
        let live = tokio::spawn(live_updates(http.clone(), base.to_owned(), cookie.clone(), stop.clone()));
        if let Some(n) = submit(&mut r, &http, base, token, format!("c{c}-{}", FIRST + round)).await {
            names.push(n);
        }
        let mut cursor: Option<String> = None;
        for _ in 0..4 {
            let url = match &cursor {
                Some(cur) => format!("{base}/api/v1/workloads?limit=50&cursor={cur}"),
                None => format!("{base}/api/v1/workloads?limit=50"),
            };
            let Some((_, h, _)) = r.send("api list", || http.get(&url).bearer_auth(token)).await else { break };
            cursor = h.get("x-next-cursor").and_then(|v| v.to_str().ok()).map(str::to_owned);
            if cursor.is_none() {
                break;
            }
        }
        let Some(name) = names.get(round % names.len().max(1)).cloned() else { continue };
        let one = format!("{base}/api/v1/workloads/{name}");
        let view = r.send("api inspect", || http.get(&one).bearer_auth(token)).await;
        let state = view.and_then(|(_, _, body)| Some(serde_json::from_str::<Value>(&body).ok()?["state"].clone()));
        let logs = format!("{base}/api/v1/workloads/{name}/logs?follow=true");
        if state.as_ref().and_then(Value::as_str).is_some_and(|s| ["succeeded", "failed", "stopped"].contains(&s)) {
            // an ended workload's follow ends with its output
            r.send("api logs -f", || http.get(&logs).bearer_auth(token)).await;
        } else {
            // a live one's streams until it ends (the scheduler may still be working through the queue):
            // timed to its head, read for a while, then let go
            follow_live(&mut r, http.get(&logs).bearer_auth(token)).await;
        }
        for (route, url) in [
            ("portal list", format!("{base}/workloads")),
            ("portal live", format!("{base}/workloads?fragment=live")),
            ("portal detail", format!("{base}/workloads/{name}")),
        ] {
            r.send(route, || http.get(&url).header("cookie", cookie).header("sec-fetch-mode", "navigate")).await;
        }
        stop.store(true, Ordering::Relaxed);
        match live.await {
            Ok(Ok(n)) => events += n,
            Ok(Err(e)) => r.transport.push(format!("live updates: {e:#}")),
            Err(e) => r.transport.push(format!("live updates: {e}")),
        }
    }
    (r, events)
}

/// The soak: `total` varied requests from [`SOAK_CLIENTS`] clients, RSS reported as it goes; the number
/// of failures (5xx, transport errors, hangs).
async fn soak_phase(
    pid: u32,
    server: &Arc<Mutex<Server>>,
    base: &str,
    accounts: &[Arc<Account>],
    total: usize,
) -> Result<usize> {
    println!("soak: {total} varied requests from {SOAK_CLIENTS} clients");
    let started = Instant::now();
    let rss = Rss::start(pid, true, started);
    let next = Arc::new(AtomicUsize::new(0));
    let warm = Arc::new(Mutex::new(None::<u64>));
    let mut tasks = Vec::new();
    for c in 0..SOAK_CLIENTS {
        let (base, account, next, warm, server) =
            (base.to_owned(), accounts[c % accounts.len()].clone(), next.clone(), warm.clone(), server.clone());
        tasks.push(tokio::spawn(async move {
            let http = reqwest::Client::builder().pool_max_idle_per_host(1).build().expect("client");
            let mut r = Record::default();
            let mut submitted = std::collections::VecDeque::new();
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= total {
                    return r;
                }
                if i > 0 && i % 10_000 == 0 {
                    let now = rss_kib(pid);
                    if i == 10_000 {
                        *warm.lock().unwrap() = Some(now);
                    }
                    let runs = server.lock().unwrap().runs();
                    println!(
                        "  soak: {i} requests, {:.0} s: server VmRSS {} MiB (the fake engine holds {runs} runs)",
                        started.elapsed().as_secs_f64(),
                        now / 1024
                    );
                }
                soak_request(&mut r, &http, &base, &account, i, &mut submitted).await;
            }
        }));
    }
    let mut rec = Record::default();
    for t in tasks {
        rec.merge(t.await?);
    }
    let elapsed = started.elapsed();
    let peak = rss.finish().await;
    let end = rss_kib(pid);
    tokio::time::sleep(Duration::from_secs(10)).await;
    let idle = rss_kib(pid);
    let runs = server.lock().unwrap().runs();
    println!(
        "  {} requests in {:.1} s ({:.0}/s)",
        rec.requests(),
        elapsed.as_secs_f64(),
        rec.requests() as f64 / elapsed.as_secs_f64()
    );
    rec.print(true);
    println!("  workloads by state: {}", states(&reqwest::Client::new(), base).await);
    let warm = warm.lock().unwrap().unwrap_or(end);
    println!(
        "  soak: server VmRSS warmed up (after 10,000) {} MiB, peak {} MiB ({:.2}x), at the end {} MiB, \
         10 s after {} MiB ({:.2}x; the fake engine holds {runs} runs)",
        warm / 1024,
        peak / 1024,
        peak as f64 / warm as f64,
        end / 1024,
        idle / 1024,
        idle as f64 / warm as f64
    );
    Ok(rec.failures(true))
}

/// Request `i` of the soak, by `i`'s remainder: a mix of what clients and strangers send.
/// `submitted`: this client's soak submissions not deleted yet.
async fn soak_request(
    r: &mut Record,
    http: &reqwest::Client,
    base: &str,
    a: &Account,
    i: usize,
    submitted: &mut std::collections::VecDeque<String>,
) {
    let (token, cookie) = (&a.token, &a.cookie);
    let mine = format!("c{}-{}", i % CLIENTS / USERS * USERS + a.name[4..].parse::<usize>().unwrap_or(0), i % 10);
    match i % 16 {
        0 => r.send("api list", || http.get(format!("{base}/api/v1/workloads?limit=50")).bearer_auth(token)).await,
        1 => r.send("api inspect", || http.get(format!("{base}/api/v1/workloads/{mine}")).bearer_auth(token)).await,
        2 => r.send("api missing", || http.get(format!("{base}/api/v1/workloads/nope-{i}")).bearer_auth(token)).await,
        3 => {
            let mut body = job(&format!("s{i}"));
            body[format!("unknown{i}")] = json!(i);
            r.send("api bad field", || http.post(format!("{base}/api/v1/workloads")).bearer_auth(token).json(&body))
                .await
        }
        4 => {
            let body = format!("{{\"name\": \"s{i}\", \"kind\": ");
            r.send("api bad json", || {
                http.post(format!("{base}/api/v1/workloads"))
                    .bearer_auth(token)
                    .header("content-type", "application/json")
                    .body(body.clone())
            })
            .await
        }
        5 => {
            let body = job(&format!("Bad_Name!{i}"));
            r.send("api bad name", || http.post(format!("{base}/api/v1/workloads")).bearer_auth(token).json(&body))
                .await
        }
        6 => {
            let body = json!({"username": format!("ghost{i}"), "password": "wrong-password"});
            let from = format!("10.{}.{}.{}", (i >> 16) & 255, (i >> 8) & 255, i & 255);
            r.send("login failed", || {
                http.post(format!("{base}/api/v1/login")).header("x-forwarded-for", from.clone()).json(&body)
            })
            .await
        }
        7 => r.send("portal list", || http.get(format!("{base}/workloads")).header("cookie", cookie)).await,
        8 => r.send("portal detail", || http.get(format!("{base}/workloads/{mine}")).header("cookie", cookie)).await,
        9 => r.send("unknown path", || http.get(format!("{base}/no/such/{i}"))).await,
        10 => {
            let app = format!("{base}/w/{}/nb{i}/lab/", a.name);
            r.send("app missing", || http.get(&app).header("cookie", cookie)).await
        }
        11 => r.send("metrics", || http.get(format!("{base}/metrics"))).await,
        12 => {
            // live updates opened, then dropped: the server must let go of them
            let stop = Arc::new(AtomicBool::new(true));
            let t = Instant::now();
            match live_updates(http.clone(), base.to_owned(), cookie.clone(), stop).await {
                Ok(_) => r.ok += 1,
                Err(e) => r.transport.push(format!("live updates: {e:#}")),
            }
            r.micros.entry("portal events").or_default().push(t.elapsed().as_micros() as u64);
            None
        }
        13 => {
            let name = submit(r, http, base, token, format!("s{i}")).await;
            submitted.extend(name);
            None
        }
        14 => {
            // this client's submission of a few rounds ago has ended by now (or the delete is refused: 409)
            if submitted.len() < 3 {
                return;
            }
            let old = format!("{base}/api/v1/workloads/{}", submitted.pop_front().unwrap_or_default());
            r.send("api delete", || http.delete(&old).bearer_auth(token)).await
        }
        _ => {
            r.send("api logs", || http.get(format!("{base}/api/v1/workloads/{mine}/logs?tail=5")).bearer_auth(token))
                .await
        }
    };
}
