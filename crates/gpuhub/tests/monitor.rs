//! Seeing and accounting end to end: the real `gpuhub` binary on the real Docker engine. A job holding
//! 200 MiB in a 256 MiB container shows about 200 MiB in the hub's Prometheus series (read from its
//! cgroup), and once it ended `gpuhub usage` counts the time it held its CPU and memory. Needs root and
//! a Docker engine.

mod common;

use anyhow::{Context as _, Result, ensure};
use common::{Hub, IMAGE, http_get};
use std::time::{Duration, Instant};

/// The value of the first series of `/metrics` whose line starts with `name{` and contains every label.
fn series(exposition: &str, name: &str, labels: &[&str]) -> Option<f64> {
    exposition
        .lines()
        .filter(|l| l.starts_with(&format!("{name}{{")))
        .find(|l| labels.iter().all(|x| l.contains(x)))
        .and_then(|l| l.rsplit(' ').next()?.parse().ok())
}

#[test]
fn a_job_holding_200_mib_shows_it_and_its_usage_is_counted() -> Result<()> {
    let _serial = common::serial();
    let mut hub = Hub::start()?;
    let alice = hub.user("alice")?;
    let name = "mem";
    alice.ok(&[
        "run",
        "--name",
        name,
        "--image",
        IMAGE,
        "--cpus",
        "0.5",
        "--memory",
        "256MiB",
        "--",
        "sh",
        "-c",
        "dd if=/dev/zero bs=200M count=1 | sleep 600",
    ])?;
    alice.wait_until(name, "running", |v| v["state"] == "running")?;
    let owner = format!("owner=\"{}\"", alice.name);
    let workload = format!("workload=\"{name}\"");
    // the monitor samples every second (the harness's config); dd fills its buffer within a few
    let deadline = Instant::now() + Duration::from_secs(60);
    let (used, limit) = loop {
        let text = http_get(&hub.server.url(), "/metrics")?;
        let used = series(&text, "gpuhub_workload_memory_bytes", &[&owner, &workload]);
        let limit = series(&text, "gpuhub_workload_memory_limit_bytes", &[&owner, &workload]);
        if let (Some(u), Some(l)) = (used, limit)
            && u >= 180.0 * 1048576.0
        {
            break (u, l);
        }
        ensure!(Instant::now() < deadline, "no ~200 MiB for {name} within 60 s; last /metrics:\n{text}");
        std::thread::sleep(Duration::from_millis(500));
    };
    println!("memory in use: {:.1} MiB of {:.0} MiB", used / 1048576.0, limit / 1048576.0);
    ensure!(used <= 256.0 * 1048576.0, "more than its limit: {used}");
    ensure!(limit == 256.0 * 1048576.0, "limit {limit}");

    alice.ok(&["stop", name])?;
    let csv = alice.ok(&["usage", "--csv"])?;
    let row = csv.lines().find(|l| l.starts_with(&alice.name)).with_context(|| format!("no row for alice:\n{csv}"))?;
    let cells: Vec<f64> = row.split(',').skip(1).map(|c| c.parse().unwrap_or(-1.0)).collect();
    // gpu_hours, gpu_used, cpu_hours, cpu_used, memory_gib_hours, memory_used: held for some seconds
    ensure!(cells.len() == 6 && cells[0] == 0.0 && cells[2] > 0.0 && cells[4] > 0.0, "{csv}");
    // half a CPU and a quarter GiB: the same hours × 2 and × 4
    ensure!((cells[2] / cells[4] - 2.0).abs() < 1e-9, "cpu/memory hours out of proportion: {csv}");
    Ok(())
}
