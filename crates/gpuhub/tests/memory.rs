//! Memory under sustained varied requests (issue 27): the real `gpuhub serve` (its allocator, SQLite,
//! the Docker engine) answers 50,000 requests from 16 clients — API reads, unknown names, bad fields,
//! broken JSON, bad names, failed logins of new names from new addresses (through a trusted proxy's
//! `X-Forwarded-For`), portal pages, live updates opened and dropped, missing apps and paths,
//! `/metrics` — and its RSS stays within 1.5× of its size once warmed up (after the first 10,000), and
//! is back near that size once the load ends. On glibc's malloc the same server grew with every thread's
//! arena and kept it (the load benchmark measured 2.61×).

mod common;

use anyhow::{Context as _, Result, ensure};
use common::{Hub, PASSWORD};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

const TOTAL: usize = 50_000;
const WARM: usize = 10_000;
const CLIENTS: usize = 16;

fn rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| s.lines().find(|l| l.starts_with("VmRSS:"))?.split_whitespace().nth(1)?.parse().ok())
        .unwrap_or(0)
}

/// The API token and the session cookie of `user`.
async fn login(http: &reqwest::Client, base: &str, user: &str) -> Result<(String, String)> {
    let r =
        http.post(format!("{base}/api/v1/login")).json(&serde_json::json!({"username": user, "password": PASSWORD}));
    let r = r.send().await?;
    let cookie = (r.headers().get("set-cookie").and_then(|v| v.to_str().ok()))
        .and_then(|c| c.split(';').next())
        .context("no session cookie")?
        .to_owned();
    ensure!(r.status().is_success(), "login {user}: {}", r.status());
    let v: serde_json::Value = r.json().await?;
    Ok((v["token"].as_str().context("no token")?.to_owned(), cookie))
}

/// Request `i`, by `i`'s remainder; its status.
async fn request(http: &reqwest::Client, base: &str, token: &str, cookie: &str, i: usize) -> Result<u16> {
    let api = format!("{base}/api/v1/workloads");
    let r = match i % 12 {
        0 => http.get(format!("{api}?limit=50")).bearer_auth(token),
        1 => http.get(format!("{api}/nope-{i}")).bearer_auth(token),
        2 => http.post(&api).bearer_auth(token).json(&serde_json::json!({"name": format!("m{i}"), "unknown": i})),
        3 => {
            let body = format!("{{\"name\": \"m{i}\", \"kind\": ");
            http.post(&api).bearer_auth(token).header("content-type", "application/json").body(body)
        }
        4 => http.post(&api).bearer_auth(token).json(&serde_json::json!({"name": format!("Bad_Name!{i}"),
            "kind": "job", "image": "busybox", "command": ["true"]})),
        // failed logins cost a password hash each: one in 48 requests
        5 if i % 48 == 5 => {
            let from = format!("10.{}.{}.{}", (i >> 16) & 255, (i >> 8) & 255, i & 255);
            http.post(format!("{base}/api/v1/login"))
                .header("x-forwarded-for", from)
                .json(&serde_json::json!({"username": format!("ghost{i}"), "password": "wrong-password"}))
        }
        5 | 6 => http.get(format!("{base}/workloads")).header("cookie", cookie),
        7 => http.get(format!("{base}/no/such/{i}")),
        8 => http.get(format!("{base}/w/someone/nb{i}/lab/")).header("cookie", cookie),
        9 => http.get(format!("{base}/metrics")),
        10 => {
            // the portal's live updates, opened and dropped at once: the server must let go of them
            let r = http.get(format!("{base}/events")).header("cookie", cookie).send().await?;
            return Ok(r.status().as_u16());
        }
        _ => http.get(format!("{base}/api/v1/me")).bearer_auth(token),
    };
    let r = r.send().await?;
    let status = r.status().as_u16();
    r.bytes().await?;
    Ok(status)
}

#[test]
fn rss_stays_within_one_and_a_half_times_its_warm_size_and_comes_back() -> Result<()> {
    let _serial = common::serial();
    let mut hub = Hub::start_with("trusted_proxies = [\"127.0.0.1/32\"]")?;
    let user = hub.user("memory")?;
    let (base, pid) = (hub.server.url(), hub.server.pid().context("no server")?);
    let started = Instant::now();
    let runtime = tokio::runtime::Runtime::new()?;
    let (warm, peak, end) = runtime.block_on(async {
        let http = reqwest::Client::new();
        let (token, cookie) = login(&http, &base, &user.name).await?;
        let (next, warm, peak) =
            (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
        let stop = Arc::new(AtomicBool::new(false));
        // the peak after warm-up, sampled every 50 ms
        let sampler = {
            let (warm, peak, stop) = (warm.clone(), peak.clone(), stop.clone());
            tokio::spawn(async move {
                while !stop.load(Ordering::Relaxed) {
                    if warm.load(Ordering::Relaxed) > 0 {
                        peak.fetch_max(rss_kib(pid), Ordering::Relaxed);
                    }
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            })
        };
        let mut clients = Vec::new();
        for _ in 0..CLIENTS {
            let (http, base, token, cookie, next, warm) =
                (http.clone(), base.clone(), token.clone(), cookie.clone(), next.clone(), warm.clone());
            clients.push(tokio::spawn(async move {
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    if i >= TOTAL {
                        return Ok::<_, anyhow::Error>(());
                    }
                    if i == WARM {
                        warm.store(rss_kib(pid), Ordering::Relaxed);
                    }
                    let status =
                        request(&http, &base, &token, &cookie, i).await.with_context(|| format!("request {i}"))?;
                    ensure!(status < 500, "request {i} (kind {}) answered {status}", i % 12);
                }
            }));
        }
        for c in clients {
            c.await??;
        }
        stop.store(true, Ordering::Relaxed);
        sampler.await?;
        let end = rss_kib(pid);
        Ok::<_, anyhow::Error>((warm.load(Ordering::Relaxed), peak.load(Ordering::Relaxed).max(end), end))
    })?;
    let load = started.elapsed();
    // once the load has ended, the allocator gives back what it freed (mimalloc purges after a delay)
    let mut after = rss_kib(pid);
    let idle = Instant::now();
    while after as f64 > 1.2 * warm as f64 && idle.elapsed() < Duration::from_secs(30) {
        std::thread::sleep(Duration::from_millis(500));
        after = rss_kib(pid);
    }
    let x = |kib: u64| kib as f64 / warm as f64;
    println!(
        "memory: {TOTAL} requests in {load:.1?}: VmRSS warmed up (after {WARM}) {} KiB, peak {} KiB ({:.2}x), \
         at the end {} KiB, {:.1?} later {} KiB ({:.2}x)",
        warm,
        peak,
        x(peak),
        end,
        idle.elapsed(),
        after,
        x(after)
    );
    ensure!(warm > 0, "no warmed-up size was taken");
    ensure!(x(peak) <= 1.5, "the server grew to {:.2}x its warmed-up size under load", x(peak));
    ensure!(x(after) <= 1.2, "the server stayed at {:.2}x its warmed-up size after the load", x(after));
    Ok(())
}
