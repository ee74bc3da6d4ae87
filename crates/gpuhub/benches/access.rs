//! Workspace access, measured (never asserted): a real `gpuhub serve` (this build) on the local Docker
//! engine, one workspace serving its app prefix with Python's `http.server` (the app `web:8000`).
//!
//! - a small response: latency (p50/p99 of 200 sequential requests on one keep-alive connection) and
//!   throughput (2000 requests, 16 at a time), and the time of a 100 MiB download, directly to the
//!   container, through the hub's authenticating proxy, and through JupyterHub's
//!   `configurable-http-proxy` (installed with npm into a temporary directory; skipped without npm);
//! - `cat` of 1 GiB (`head -c 1G /dev/zero`) through the SSH gateway with OpenSSH, against
//!   `docker exec`.
//!
//! Run: `scripts/bench-access.sh` (or `cargo bench -p gpuhub --bench access`). Needs what the access
//! tests need (root, Docker, `scripts/setup-debian.sh`), plus node/npm for the comparison.

#[path = "../tests/access_support/mod.rs"]
mod access_support;

use access_support::ssh::{self as sshc, Key};
use access_support::{Hub, container_id, container_ip, describe, free_port};
use anyhow::{Context as _, Result, bail, ensure};
use reqwest::Method;
use serde_json::json;
use std::io::{BufRead, BufReader};
use std::process::Stdio;
use std::time::{Duration, Instant};
use tokio::io::AsyncReadExt;

const MIB: f64 = (1 << 20) as f64;
/// Sequential requests for the latency figures (after 20 to warm up).
const LATENCY_REQUESTS: usize = 200;
/// Requests and concurrency of the throughput figure.
const THROUGHPUT_REQUESTS: usize = 2000;
const CONCURRENCY: usize = 16;
/// The download's size (the workspace writes it at start).
const DOWNLOAD_MIB: u64 = 100;
/// Bytes `cat` through SSH and `docker exec`.
const CAT_BYTES: u64 = 1 << 30;

/// A way to the workspace's app.
struct Route {
    name: &'static str,
    /// The app prefix's URL on this route.
    base: String,
    token: Option<String>,
}

/// What one route measured.
struct Figures {
    p50: Duration,
    p99: Duration,
    per_second: f64,
    download: Duration,
}

fn main() -> Result<()> {
    if std::env::args().any(|a| a == "--list") {
        return Ok(()); // `cargo bench -- --list` and `cargo test --benches` ask
    }
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    rt.block_on(run())
}

async fn run() -> Result<()> {
    let t0 = Instant::now();
    let mut hub = Hub::start().await?;
    hub.quiet();
    let alice = hub.user("alice").await?;
    let setup = format!("head -c {DOWNLOAD_MIB}M /dev/urandom > big.bin");
    alice.start_web("web", &setup).await?;
    let cid = container_id(&alice.workload("web").await?)?;
    let ip = container_ip(&cid)?;
    let path = format!("/w/{}/web/web/", alice.name);
    println!(
        "gpuhub access benchmark: {} CPUs, {} build of gpuhub, workspace ready after {:.1} s",
        std::thread::available_parallelism().map_or(0, |n| n.get()),
        if cfg!(debug_assertions) { "debug" } else { "release" },
        t0.elapsed().as_secs_f64()
    );

    let mut routes = vec![
        Route { name: "direct to the container", base: format!("http://{ip}:8000{path}"), token: None },
        Route { name: "gpuhub proxy", base: format!("{}{path}", hub.url), token: Some(alice.token.clone()) },
    ];
    let chp = match Chp::start(&format!("http://{ip}:8000")).await {
        Ok(chp) => {
            routes.push(Route { name: "configurable-http-proxy", base: format!("{}{path}", chp.url), token: None });
            Some(chp)
        }
        Err(e) => {
            println!("configurable-http-proxy skipped: {e:#}");
            None
        }
    };

    let mut all = Vec::new();
    for r in &routes {
        let f = measure(r).await.with_context(|| r.name)?;
        all.push((r.name, f));
    }
    print_http(&all);
    drop(chp);

    let key = sshc::keygen(hub.dir.path(), "bench").await?;
    let (_, challenge) = alice.api(Method::GET, "/api/v1/me/ssh-keys/challenge", None).await?;
    let ns = challenge["namespace"].as_str().unwrap_or_default().to_owned();
    let signature = sshc::sign(&key, &ns, challenge["message"].as_str().unwrap_or_default()).await?;
    let body = json!({"key": key.public_line()?, "signature": signature});
    let (status, v) = alice.api(Method::POST, "/api/v1/me/ssh-keys", Some(body)).await?;
    ensure!(status.is_success(), "add key: {status} {v}");
    let ssh = best_of(2, || cat_ssh(hub.ssh_port, &key)).await?;
    let exec = best_of(2, || cat_exec(&cid, alice.uid)).await?;
    let rate = |d: Duration| CAT_BYTES as f64 / MIB / d.as_secs_f64();
    println!("\ncat of 1 GiB (head -c 1G /dev/zero), best of 2:");
    println!("  {:<28} {:>8.2} s  {:>8.0} MiB/s", "ssh through the gateway", ssh.as_secs_f64(), rate(ssh));
    println!("  {:<28} {:>8.2} s  {:>8.0} MiB/s", "docker exec", exec.as_secs_f64(), rate(exec));
    println!("  gateway / docker exec time: {:.2}", ssh.as_secs_f64() / exec.as_secs_f64());
    println!("\ntotal {:.0} s", t0.elapsed().as_secs_f64());
    Ok(())
}

fn client() -> Result<reqwest::Client> {
    Ok(reqwest::Client::builder().pool_max_idle_per_host(64).build()?)
}

/// GETs `url` and reads the whole body; returns its length.
async fn fetch(client: &reqwest::Client, url: &str, token: Option<&str>) -> Result<u64> {
    let mut req = client.get(url);
    if let Some(t) = token {
        req = req.bearer_auth(t);
    }
    let mut resp = req.send().await?;
    ensure!(resp.status().is_success(), "{url}: {}", resp.status());
    let mut n = 0;
    while let Some(chunk) = resp.chunk().await? {
        n += chunk.len() as u64;
    }
    Ok(n)
}

async fn measure(r: &Route) -> Result<Figures> {
    let small = format!("{}hello.txt", r.base);
    let token = r.token.as_deref();
    let c = client()?;
    for _ in 0..20 {
        fetch(&c, &small, token).await?;
    }
    let mut times = Vec::with_capacity(LATENCY_REQUESTS);
    for _ in 0..LATENCY_REQUESTS {
        let t = Instant::now();
        fetch(&c, &small, token).await?;
        times.push(t.elapsed());
    }
    times.sort();
    let pct = |p: f64| times[((times.len() - 1) as f64 * p).round() as usize];

    let t = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..CONCURRENCY {
        let (c, url, token) = (c.clone(), small.clone(), r.token.clone());
        tasks.spawn(async move {
            for _ in 0..THROUGHPUT_REQUESTS / CONCURRENCY {
                fetch(&c, &url, token.as_deref()).await?;
            }
            anyhow::Ok(())
        });
    }
    while let Some(done) = tasks.join_next().await {
        done??;
    }
    let per_second = THROUGHPUT_REQUESTS as f64 / t.elapsed().as_secs_f64();

    let big = format!("{}big.bin", r.base);
    let download = best_of(3, || async {
        let t = Instant::now();
        let n = fetch(&c, &big, token).await?;
        ensure!(n == DOWNLOAD_MIB << 20, "downloaded {n} bytes");
        Ok(t.elapsed())
    })
    .await?;
    Ok(Figures { p50: pct(0.5), p99: pct(0.99), per_second, download })
}

fn print_http(all: &[(&str, Figures)]) {
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    println!("\nsmall response (hello.txt, 6 bytes) and a {DOWNLOAD_MIB} MiB download (best of 3):");
    println!(
        "  {:<26} {:>9} {:>9} {:>11} {:>10} {:>10}",
        "route", "p50 ms", "p99 ms", "req/s (16)", "100 MiB s", "MiB/s"
    );
    for (name, f) in all {
        let secs = f.download.as_secs_f64();
        println!(
            "  {name:<26} {:>9.3} {:>9.3} {:>11.0} {:>10.3} {:>10.0}",
            ms(f.p50),
            ms(f.p99),
            f.per_second,
            secs,
            DOWNLOAD_MIB as f64 / secs
        );
    }
    let Some((_, direct)) = all.first() else { return };
    println!("  ratios to direct (latency and download time: higher is slower; throughput: lower is slower):");
    for (name, f) in &all[1..] {
        println!(
            "  {name:<26} {:>9.2} {:>9.2} {:>11.2} {:>10.2}",
            ms(f.p50) / ms(direct.p50),
            ms(f.p99) / ms(direct.p99),
            f.per_second / direct.per_second,
            f.download.as_secs_f64() / direct.download.as_secs_f64()
        );
    }
}

/// The shortest of `n` runs.
async fn best_of<F, Fut>(n: usize, mut run: F) -> Result<Duration>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<Duration>>,
{
    let mut best = Duration::MAX;
    for _ in 0..n {
        best = best.min(run().await?);
    }
    Ok(best)
}

/// Reads a child's standard output to its end; returns the byte count and the time from spawn.
async fn count_output(mut cmd: tokio::process::Command) -> Result<Duration> {
    cmd.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped()).kill_on_drop(true);
    let t = Instant::now();
    let mut child = cmd.spawn()?;
    let mut out = child.stdout.take().context("stdout")?;
    let mut buf = vec![0; 1 << 18];
    let mut n = 0u64;
    loop {
        let k = out.read(&mut buf).await?;
        if k == 0 {
            break;
        }
        n += k as u64;
    }
    let status = child.wait().await?;
    let elapsed = t.elapsed();
    if n != CAT_BYTES || !status.success() {
        let mut err = String::new();
        if let Some(mut e) = child.stderr.take() {
            e.read_to_string(&mut err).await?;
        }
        bail!("{cmd:?}: {status}, {n} bytes; stderr {err:?}");
    }
    Ok(elapsed)
}

async fn cat_ssh(port: u16, key: &Key) -> Result<Duration> {
    count_output(sshc::ssh(port, key, "web@127.0.0.1", &["head -c 1G /dev/zero"])).await
}

async fn cat_exec(container: &str, uid: u64) -> Result<Duration> {
    let mut cmd = tokio::process::Command::new("docker");
    cmd.args(["exec", "-u", &format!("{uid}:{uid}"), container, "head", "-c", "1G", "/dev/zero"]);
    count_output(cmd).await
}

/// JupyterHub's configurable-http-proxy, installed with npm into a temporary directory, routing
/// everything to one target; killed on drop.
struct Chp {
    url: String,
    child: std::process::Child,
    _dir: tempfile::TempDir,
}

impl Chp {
    async fn start(target: &str) -> Result<Chp> {
        let dir = tempfile::Builder::new().prefix("gpuhub-bench-chp-").tempdir()?;
        let mut npm = tokio::process::Command::new("npm");
        npm.args(["install", "--no-audit", "--no-fund", "--loglevel=error", "--prefix"])
            .arg(dir.path())
            .arg("configurable-http-proxy")
            .stdin(Stdio::null());
        let out = npm.output().await.context("run npm (install node and npm for this comparison)")?;
        ensure!(out.status.success(), "npm install configurable-http-proxy: {}", describe(&out));
        let (port, api) = (free_port()?, free_port()?);
        let bin = dir.path().join("node_modules/.bin/configurable-http-proxy");
        let mut child = std::process::Command::new(&bin)
            .args(["--ip", "127.0.0.1", "--port", &port.to_string(), "--api-ip", "127.0.0.1"])
            .args(["--api-port", &api.to_string(), "--default-target", target])
            .env("CONFIGPROXY_AUTH_TOKEN", access_support::suffix())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .with_context(|| format!("start {}", bin.display()))?;
        // it logs "Proxying http://127.0.0.1:PORT …" once it listens
        let (tx, rx) = tokio::sync::oneshot::channel();
        let tx = std::sync::Arc::new(std::sync::Mutex::new(Some(tx)));
        let out: Box<dyn std::io::Read + Send> = Box::new(child.stdout.take().context("stdout")?);
        let err: Box<dyn std::io::Read + Send> = Box::new(child.stderr.take().context("stderr")?);
        for stream in [out, err] {
            let tx = tx.clone();
            std::thread::spawn(move || {
                for line in BufReader::new(stream).lines().map_while(Result::ok) {
                    if line.contains("Proxying") {
                        if let Some(tx) = tx.lock().unwrap().take() {
                            let _ = tx.send(());
                        }
                    }
                }
            });
        }
        let mut chp = Chp { url: format!("http://127.0.0.1:{port}"), child, _dir: dir };
        match tokio::time::timeout(Duration::from_secs(60), rx).await {
            Ok(Ok(())) => Ok(chp),
            _ => {
                let status = chp.child.try_wait()?;
                bail!("configurable-http-proxy did not start (exit status {status:?})")
            }
        }
    }
}

impl Drop for Chp {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
